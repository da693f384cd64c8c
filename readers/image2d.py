"""Image keypoints: MediaPipe image landmarks lifted with the image's size; 2D detector output refused.

**MediaPipe image landmarks** (``pose_landmarks``, not ``pose_world_landmarks``)
hold x and y divided by the image's width and height (0..1, y down) and z, a
depth relative to the hips' midpoint "in roughly the same scale as x". Given
the image size (``image_size=(W, H)``, ``--image-size W H``) they are lifted
to 3D as far as the data allows: pixels ``(x W, y H, z W)`` (x right, y down,
z away from the camera: MediaPipe's world axes, read as ``-Y`` up), scaled so
that the body measured on its segments is :data:`ASSUMED_HEIGHT` tall (an
image has no metric scale). The root's motion towards or away from the
camera is not recovered (each frame's depth is relative to its hips) and
perspective is not undone: a warning says so. Without the size they are
refused ("2D image keypoints: ... give --image-size W H").

**2D detector output** (an OpenPose output folder of ``*_keypoints.json``
files, an OpenPose frame, COCO or AlphaPose results lists, a COCO annotation
file) has no depth at all: it is read far enough to say what it holds and
refused with what to do (lift it to 3D, or triangulate several cameras).

No ``bpy`` here.
"""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np

from ..errors import message, setting
from .clip import KeypointReadError
from .measure import body_height, canonical_points, looks_image_normalised
from .layouts import detect_layout, get_layout

__all__ = ["ASSUMED_HEIGHT", "IMAGE_FRAME_KEYS", "image_landmarks", "describe_2d", "refuse_2d", "read_folder",
           "openpose_frames"]

#: Standing height (m) image landmarks are scaled to: an average adult.
ASSUMED_HEIGHT = 1.70

#: Frame keys of MediaPipe's image (normalised) landmarks.
IMAGE_FRAME_KEYS = ("pose_landmarks", "image_landmarks", "normalized_landmarks")

_WHAT_TO_DO = ("Neural IK needs 3D positions. Lift them to 3D first (a 3D pose lifter such as VideoPose3D or "
               "MotionBERT, then save the 3D joints as .npz with layout h36m17, coco17 or openpose_body25), or "
               "triangulate the views of several calibrated cameras (Pose2Sim writes .trc from OpenPose "
               "folders), or run MediaPipe Pose and export its world landmarks")

#: Keypoints per person of the common 2D detectors' models.
_MODELS = {17: "COCO-17", 18: "OpenPose COCO-18", 25: "BODY_25", 26: "Halpe-26", 133: "COCO-WholeBody",
           135: "BODY_135", 136: "Halpe-136"}


def _model(values) -> str:
    """The model name of a flat ``[x, y, score, ...]`` list (its keypoint count)."""
    if not isinstance(values, list) or len(values) % 3:
        return "keypoints"
    n = len(values) // 3
    return f"{_MODELS[n]}, {n} keypoints" if n in _MODELS else f"{n} keypoints"


def _count(n, one, many=None):
    return f"{n} {one if n == 1 else (many or one + 's')}"


def refuse_2d(path, what):
    """The refusal of 2D detector output: a :class:`KeypointReadError` saying what it holds and what to do."""
    return KeypointReadError(path, f"2D image keypoints ({what}): {_WHAT_TO_DO}")


def describe_2d(data) -> str:
    """What kind of 2D image keypoints parsed JSON ``data`` holds ("" when it is not such a file)."""
    if isinstance(data, dict) and isinstance(data.get("people"), list):
        people = data["people"]
        if not people or any(isinstance(p, dict) and "pose_keypoints_2d" in p for p in people):
            first = next((p["pose_keypoints_2d"] for p in people if isinstance(p, dict) and "pose_keypoints_2d" in p),
                         None)
            return f"an OpenPose frame: pose_keypoints_2d, {_count(len(people), 'person', 'people')}" + (
                f", {_model(first)}" if first is not None else "")
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data[:8]):
        if all("keypoints" in d and ("image_id" in d or "category_id" in d) for d in data[:8]):
            images = len({str(d.get("image_id")) for d in data})
            return (f"COCO results, as AlphaPose writes them: x, y, visibility per keypoint of an image; "
                    f"{_count(len(data), 'detection')} in {_count(images, 'image')}, "
                    f"{_model(data[0]['keypoints'])}")
    if isinstance(data, dict) and isinstance(data.get("annotations"), list) and "images" in data:
        return "a COCO annotation file"
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in list(data.values())[:8]):
        firsts = [v[0] for v in list(data.values())[:8] if v]
        if firsts and all(isinstance(d, dict) and "keypoints" in d and "idx" in d for d in firsts):
            return f"AlphaPose tracked results: {_count(len(data), 'image')}, {_model(firsts[0]['keypoints'])}"
    return ""


def openpose_frames(path) -> list:
    """The ``*_keypoints.json`` files of an OpenPose output folder, sorted (empty: not such a folder)."""
    if not os.path.isdir(path):
        return []
    return sorted(glob.glob(os.path.join(glob.escape(os.fspath(path)), "*_keypoints.json")))


def read_folder(path):
    """A folder as a source: an OpenPose output folder is refused as 2D, anything else named.

    Raises
    ------
    KeypointReadError
        Always: the folder's first ``*_keypoints.json`` is read (a bad one
        is named) and what the folder holds is said.
    """
    frames = openpose_frames(path)
    if not frames:
        raise KeypointReadError(path, "a folder, not a keypoint file (no *_keypoints.json of OpenPose in it): "
                                "name a file, or bake every file of a folder with `neural-ik batch`")
    first = frames[0]
    try:
        with open(first, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as ex:
        raise KeypointReadError(first, f"not a readable OpenPose frame ({type(ex).__name__}: "
                                f"{str(ex).splitlines()[0][:120]})") from None
    what = describe_2d(data)
    if not what.startswith("an OpenPose frame"):
        raise KeypointReadError(first, "named like an OpenPose frame but holds no 'people' with "
                                "'pose_keypoints_2d'")
    raise refuse_2d(path, f"an OpenPose output folder: {len(frames)} frames of *_keypoints.json; the first, "
                    f"{os.path.basename(first)}, is {what}")


def _height(pos, names, layout):
    """The body's height in the points' units, measured on its segments (NaN when no layout fits)."""
    try:
        lay = get_layout(layout) if layout is not None else None
    except (KeyError, ValueError):
        return float("nan")
    if lay is None:
        name, score = detect_layout(names)
        if name is None or score < 0.3:
            return float("nan")
        lay = get_layout(name)
    kp, mask = canonical_points(pos, lay, names)
    return body_height(kp, mask)


def image_landmarks(path, pos, names, *, layout=None, explicit=False, units=None, image_size=None):
    """Image landmarks lifted to metres (``-Y`` up), or ``None`` when ``pos`` are not image landmarks.

    Parameters
    ----------
    pos : ndarray (T, J, 3)
        x, y, z as read.
    explicit : bool
        The file says they are image landmarks (``pose_landmarks``).
    units : str or None
        The user's ``--units``: with it, x and y in 0..1 are taken as given.
    image_size : (int, int) or None

    Returns
    -------
    None or (ndarray (T, J, 3), list of str)
        The points in metres and the warnings saying what was assumed.

    Raises
    ------
    KeypointReadError
        Image landmarks without ``image_size``; ``image_size`` for points
        that are not image-normalised.
    """
    normalised = looks_image_normalised(pos)
    height = _height(pos, names, layout) if normalised else float("nan")
    looks = normalised and (explicit or not math.isfinite(height) or height < 1.0)
    if image_size is None:
        if looks and (explicit or units is None):
            raise KeypointReadError(path, "2D image keypoints: MediaPipe image landmarks (x and y image-normalised "
                                    f"between 0 and 1, z a depth relative to the hips); give {setting('image_size', 'W H')} "
                                    "(the video's width and height in pixels) to bake them, or export "
                                    "MediaPipe's world landmarks (pose_world_landmarks); if they really are "
                                    f"metres pass {setting('units', 'm')}")
        return None
    if not normalised:
        with np.errstate(all="ignore"):
            lo, hi = np.nanmin(pos[..., :2]), np.nanmax(pos[..., :2])
        raise KeypointReadError(path, f"{setting('image_size')} is for image landmarks (x and y between 0 and 1), but x "
                                f"and y run from {lo:.3g} to {hi:.3g}: leave {setting('image_size')} out")
    W, H = (float(v) for v in image_size)
    px = np.asarray(pos, dtype=np.float64) * np.array([W, H, W])
    height = _height(px, names, layout)
    if not (math.isfinite(height) and height > 0):
        raise KeypointReadError(path, "image landmarks with too few body segments to measure the body "
                                "(thighs, shins, arms, hips to shoulders)")
    scale = ASSUMED_HEIGHT / height
    note = message(f"image landmarks lifted with {setting('image_size', f'{W:g} {H:g}')}: scaled so that the body is {ASSUMED_HEIGHT:g} m "
            f"tall ({height:.0f} px; an image has no metric scale), depth from MediaPipe's estimate relative "
            "to the hips: motion towards or away from the camera is not recovered and perspective not undone")
    return px * scale, [note]
