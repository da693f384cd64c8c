"""Keypoint layouts: how a source's named points map onto canonical keypoints.

A :class:`Layout` names the points of one source convention (a pose
estimator, a motion-capture skeleton, a rig) and says how each canonical
keypoint (:data:`..model.skeleton.KEYPOINTS`) is obtained from them:

- ``to_canonical``: a direct map, source point -> canonical keypoint;
- ``derived``: canonical keypoint -> affine combination of source points,
  ``((source, weight), ...)`` with weights summing to 1 (so the result does
  not depend on where the origin is). Used where a canonical keypoint has no
  counterpart, e.g. COCO's pelvis is taken between the hips, slightly
  towards the shoulders.

Canonical keypoints a layout cannot give are masked: the solver works with
whatever is there. Every approximation is written in the layout's
``notes``; the numbers in them are measured on the canonical rest pose
(mid-thigh at 0.90 m, pelvis 0.95 m, shoulders 1.43 m, neck 1.47 m,
head joint 1.57 m, ears ~1.63 m).

Source names match case-insensitively, ignoring a namespace prefix
(``mixamorig:``, ``mixamorig1:``, ``Armature|``) and treating ``.``, ``-`` and
spaces like ``_``.

No ``bpy`` here.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .builtin_layouts import CANONICAL_LAYOUT, CC_BASE, CMU, COCO17, H36M17, KINECT_V2, LAYOUTS, MEDIAPIPE, \
    MIXAMO, OPENPOSE25, RIGIFY, SMPL24, SMPLX, UE_MANNEQUIN
from .layout_spec import Layout, canonical_weights, normalize_name

__all__ = [
    "Layout",
    "LAYOUTS",
    "normalize_name",
    "detect_layout",
    "get_layout",
    "load_mapping",
    "layout_table",
    "canonical_weights",
    "recognise_nameless",
    "CANONICAL_LAYOUT", "MEDIAPIPE", "COCO17", "H36M17", "OPENPOSE25", "SMPL24", "SMPLX", "MIXAMO", "CMU",
    "CC_BASE", "RIGIFY", "UE_MANNEQUIN", "KINECT_V2",
]


def load_mapping(source, name: str | None = None) -> Layout:
    """A user layout from a mapping.

    Parameters
    ----------
    source : str, os.PathLike or dict
        A JSON file or a dict. Either a flat ``{source name: canonical
        keypoint}`` mapping or ``{"name": ..., "description": ...,
        "to_canonical": {...}, "derived": {canonical: [[source, weight], ...]},
        "up_axis": ...}``.
    name : str, optional
        Name for the layout (default ``"custom"`` or the file's stem).

    Raises
    ------
    ValueError
        Unreadable file, unknown canonical keypoints or bad weights; the
        message names the file.
    """
    where = "mapping"
    if isinstance(source, (str, os.PathLike)):
        where = str(source)
        try:
            with open(source, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, UnicodeDecodeError, ValueError) as ex:  # (ValueError: also an integer past the digit limit)
            raise ValueError(f"{where}: cannot read layout mapping ({str(ex).split(';')[0]})") from None
        name = name or os.path.splitext(os.path.basename(where))[0]
    else:
        data = source
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{where}: a layout mapping must be a non-empty JSON object")
    if "to_canonical" in data:
        to_can = data["to_canonical"]
        derived = data.get("derived", {})
        desc = data.get("description", "user mapping")
        name = data.get("name", name)
        up = data.get("up_axis")
    else:
        to_can, derived, desc, up = data, {}, "user mapping", None
    if not isinstance(to_can, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in to_can.items()):
        raise ValueError(f"{where}: to_canonical must map source names to canonical keypoint names")
    try:
        derived = {k: tuple((str(s), float(w)) for s, w in v) for k, v in derived.items()}
        return Layout(name or "custom", desc, tuple(to_can), dict(to_can), derived, notes="user mapping", up_axis=up)
    except (ValueError, TypeError) as ex:
        raise ValueError(f"{where}: {ex}") from None


def get_layout(layout) -> Layout:
    """Resolve a layout argument.

    Parameters
    ----------
    layout : str, dict, os.PathLike or Layout
        A registry name, a ``.json`` mapping file, a mapping dict, a Layout
        or a :meth:`Layout.to_json` string.

    Raises
    ------
    KeyError
        Unknown name (the message lists the known ones).
    ValueError
        Bad mapping file or dict.
    """
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, dict):
        return load_mapping(layout)
    key = str(layout)
    if key.lstrip().startswith("{"):  # Layout.to_json()
        try:
            return load_mapping(json.loads(key))
        except ValueError as ex:
            raise ValueError(f"layout JSON: {str(ex).split(';')[0]}") from None
    if key in LAYOUTS:
        return LAYOUTS[key]
    if key.lower() in LAYOUTS:
        return LAYOUTS[key.lower()]
    if key.lower().endswith(".json") or os.path.isfile(key):
        return load_mapping(key)
    raise KeyError(f"unknown layout {key!r}; known: {', '.join(LAYOUTS)} (or a .json mapping file)")


def detect_layout(joint_names) -> tuple[str | None, float]:
    """Best matching built-in layout for a list of point names.

    The score is the F1 of name matching (the harmonic mean of the fraction
    of the layout's names found in ``joint_names`` and the fraction of
    ``joint_names`` the layout knows), or 0.9 x the first fraction when
    that is higher (a file with the whole layout plus hand, face or finger
    points). Ties go to the layout giving more canonical keypoints.

    Returns
    -------
    name : str or None
        ``None`` when no layout knows any of the names.
    score : float
        In [0, 1]; 1 is an exact match.
    """
    given = set(normalize_name(n) for n in joint_names)
    if not given:
        return None, 0.0
    if given <= set(normalize_name(n) for n in LAYOUTS["canonical"].joint_names):
        return "canonical", 1.0    # the tool's own names, however few (six effectors are a sixth of them)
    best, best_key = None, (0.0, 0)
    for lay in LAYOUTS.values():
        known = lay.normalized_names()
        own = set(normalize_name(n) for n in lay.joint_names)
        hits_own = len(given & own)
        hits = len(given & known)
        if not hits:
            continue
        recall = hits_own / len(own)
        precision = hits / len(given)
        f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
        # a file holding the whole layout plus much more (hands, face, fingers) still matches
        score = max(f1, 0.9 * recall)
        _, defined = canonical_weights(lay, list(joint_names))
        key = (round(score, 9), int(defined.sum()))
        if key > best_key:
            best, best_key = lay.name, key
    return best, float(best_key[0])


def layout_table() -> list[dict]:
    """Rows for a ``layouts`` listing.

    Returns
    -------
    list of dict
        ``name``, ``joints`` (count), ``description``, ``joint_names``,
        ``canonical`` (keypoints it gives) and ``notes`` per built-in layout.
    """
    return [
        {
            "name": lay.name,
            "joints": len(lay.joint_names),
            "description": lay.description,
            "joint_names": list(lay.joint_names),
            "canonical": lay.canonical_coverage(),
            "notes": lay.notes,
        }
        for lay in LAYOUTS.values()
    ]


def _median_pts(points):
    p = np.asarray(points, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        import warnings as _w
        with _w.catch_warnings():
            _w.simplefilter("ignore", RuntimeWarning)
            return np.nanmedian(p, axis=0)


def recognise_nameless(points) -> tuple:
    """The layout of a nameless ``(T, J, 3)`` array from its joint count and geometry.

    Recognised: SMPL-22 (the 22 body joints most text-to-motion models
    output: HumanML3D, MDM...), SMPL-24, H36M-17, COCO-17 (told apart from
    H36M by where point 0 sits: between the hips for H36M, among the face
    points for COCO), MediaPipe-33 and the canonical 32.

    Returns
    -------
    layout : Layout or None
    names : list of str or None
        Point names in the array's order (the layout's, or its first 22 for SMPL-22).
    reason : str
        What was recognised, or why nothing was.
    """
    p = np.asarray(points, dtype=np.float64)
    J = p.shape[1]
    m = _median_pts(p)  # (J, 3)

    def d(a, b):
        return float(np.linalg.norm(m[a] - m[b]))

    if J in (22, 24):
        # SMPL: 0 pelvis just above the middle of the hips 1 and 2; 15 head above 12 neck
        if d(0, 1) > 0 and abs(d(0, 1) - d(0, 2)) < 0.3 * d(1, 2) and d(15, 0) > 2 * d(1, 2):
            lay = SMPL24
            return lay, list(lay.joint_names[:J]), f"SMPL-{J} joints (recognised from {J} points and their geometry)"
        return None, None, f"{J} points that do not sit like SMPL joints (pelvis between the hips)"
    if J == 17:
        hips = d(1, 4)
        # H36M: 0 between the hips 1 and 4, and 1 -> 2 (hip -> knee) longer than the hip width
        if hips > 0 and float(np.linalg.norm(m[0] - 0.5 * (m[1] + m[4]))) < 0.3 * hips and d(1, 2) > hips:
            return H36M17, list(H36M17.joint_names), "Human3.6M-17 joints (point 0 between the hips 1 and 4)"
        shoulders = d(5, 6)
        if shoulders > 0 and max(d(0, k) for k in range(1, 5)) < 0.8 * shoulders:
            return COCO17, list(COCO17.joint_names), "COCO-17 keypoints (point 0 among the face points 1-4)"
        return None, None, "17 points that sit neither like H36M (hip centre first) nor like COCO (nose first)"
    if J == 25:
        hips, body25_hips = d(12, 16), d(9, 12)
        # Kinect v2: 0 SpineBase between the hips 12 and 16, 3 Head above 2 Neck; BODY_25: 8 MidHip
        # between the hips 9 and 12, 0 the nose near 1 the neck
        if hips > 0 and float(np.linalg.norm(m[0] - 0.5 * (m[12] + m[16]))) < 0.3 * hips and d(3, 0) > 2 * hips:
            return KINECT_V2, list(KINECT_V2.joint_names), "Kinect v2's 25 joints in the SDK's order (SpineBase " \
                "between the hips)"
        if body25_hips > 0 and float(np.linalg.norm(m[8] - 0.5 * (m[9] + m[12]))) < 0.3 * body25_hips:
            return OPENPOSE25, list(OPENPOSE25.joint_names), "OpenPose BODY_25 (MidHip between the hips 9 and 12)"
        return None, None, "25 points that sit neither like Kinect v2 (SpineBase first) nor like OpenPose BODY_25"
    if J == 33:
        return MEDIAPIPE, list(MEDIAPIPE.joint_names), "MediaPipe Pose 33 landmarks (from the count)"
    if J == 32:
        return CANONICAL_LAYOUT, list(CANONICAL_LAYOUT.joint_names), "Neural IK canonical keypoints (from the count)"
    return None, None, (f"{J} points per frame match no nameless layout (SMPL-22/24, H36M-17, COCO-17, "
                        "Kinect v2 and BODY_25, MediaPipe-33)")
