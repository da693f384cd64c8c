"""The common clip structure and the steps every reader shares.

Every reader turns a file into raw ``(T, J, 3)`` points in file units and
axes, then :func:`finish_clip` validates them, picks the layout, converts
units and the up axis to the canonical frame (metres, Z up, facing -Y),
checks the body's size, fills short gaps and returns a
:class:`KeypointClip`.

No ``bpy`` here.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import message, setting
from .clip import KeypointClip, KeypointReadError
from .frames import MAX_GAP, fill_gaps, resample
from .layouts import LAYOUTS, canonical_weights, detect_layout, get_layout
from .measure import FLOOR_KEPT, body_height, body_size, canonical_points, contact_floor, detect_up_axis, \
    floor_height, frame_extents, frame_sides, looks_image_normalised, median_side, mix_points, quiet, \
    segment_ratios, upright_share
from .units import UNIT_NAMES, UNITS, UP_AXES, convert_up_axis, normalize_units, normalize_up_axis

__all__ = [
    "KeypointReadError",
    "KeypointClip",
    "UNITS",
    "UP_AXES",
    "DEFAULT_FPS",
    "MAX_GAP",
    "convert_up_axis",
    "body_size",
    "frame_sides",
    "frame_extents",
    "fill_gaps",
    "resample",
    "to_canonical",
    "finish_clip",
]

#: Frame rate assumed when neither the file nor the caller gives one.
DEFAULT_FPS = 30.0
#: Plausible body sizes (metres) after unit conversion.
SIZE_RANGE = (0.3, 3.0)


#: A frame whose points spread over more than this many body sizes holds a corrupt value.
MAX_FRAME_SPREAD = 50.0
#: Coordinates farther from the origin than this many body sizes are corrupt values.
MAX_DISTANCE = 1e6


def check_body_size(path, points: np.ndarray, names, size: float | None = None) -> float:
    """Refuse a clip whose size is undefined or that holds values far outside the body.

    Parameters
    ----------
    path : str
        The file, for messages.
    points : ndarray, shape (T, J, 3)
        File units, NaN = missing, no infinities.
    names : sequence of str
    size : float, optional
        :func:`body_size` of ``points`` (measured here when not given).

    Returns
    -------
    float
        The body size.

    Raises
    ------
    KeypointReadError
        Every frame's points coincide (an all-zero clip: body size 0), the
        values overflow double precision, one frame's points spread over
        more than :data:`MAX_FRAME_SPREAD` body sizes, or a coordinate lies
        more than :data:`MAX_DISTANCE` body sizes from the origin.
    """
    p = np.asarray(points, dtype=np.float64)
    side = frame_sides(p) if p.size else np.zeros(0)   # (T,), NaN on empty frames
    if size is None:
        size = median_side(side) if p.size else float("nan")
    overflow = np.isinf(side)
    if overflow.any():
        t = int(np.flatnonzero(overflow)[0])
        raise KeypointReadError(path, f"values too large to compute with at frame {t} (up to "
                                f"{np.nanmax(np.abs(p[t])):.3g}): a corrupt file?")
    if not (math.isfinite(size) and size > 0):
        raise KeypointReadError(path, "body size is zero: on every frame all points coincide (an all-zero "
                                "or constant clip), so there is no body to solve")
    far = side > MAX_FRAME_SPREAD * size
    if far.any():
        t = int(np.flatnonzero(far)[0])
        with quiet():
            dist = np.nanmax(np.abs(p[t] - np.nanmedian(p[t], axis=0)), axis=-1)  # no overflow
        j = int(np.nanargmax(dist))
        raise KeypointReadError(path, f"frame {t}: point {names[j]!r} lies {dist[j]:.3g} from the others, "
                                f"{dist[j] / size:.3g} times the body size ({size:.3g}, file units): a corrupt value?")
    with quiet():
        big = np.abs(p) > MAX_DISTANCE * size
    if big.any():
        t, j = (int(v) for v in np.argwhere(big)[0][:2])
        raise KeypointReadError(path, f"frame {t}: point {names[j]!r} is {np.abs(p[t, j]).max():.3g} from the "
                                f"origin, {MAX_DISTANCE:g} times the body size ({size:.3g}, file units): "
                                "a corrupt value?")
    return size


#: Units considered when the file does not say, with a prior cost (in log
#: size units) that makes rarer units win only when clearly better.
_GUESS_UNITS = {"m": 0.0, "cm": 0.0, "mm": 0.0, "in": 0.1, "cmu": 0.5}
#: Reference standing height for unit guessing (metres).
_TYPICAL_HEIGHT = 1.7
#: Heights (metres) outside which a warning names the ``--units`` flag (a small child stands 0.9 m;
#: an adult in inches read as centimetres, 0.7 m).
HEIGHT_RANGE = (0.8, 2.5)


def _guess_units(size: float) -> str | None:
    """Unit (m, cm, mm, in, cmu) that best makes ``size`` a human height (None if none is plausible).

    Each candidate scores ``|log(size_in_m / 1.7)|`` plus a small prior
    cost: inches 0.1, CMU units 0.5 (chosen for a CMU-unit adult, never for
    a child in inches).
    """
    best, err = None, math.inf
    for u, prior in _GUESS_UNITS.items():
        s = size * UNITS[u]
        if SIZE_RANGE[0] <= s <= SIZE_RANGE[1] and abs(math.log(s / _TYPICAL_HEIGHT)) + prior < err:
            best, err = u, abs(math.log(s / _TYPICAL_HEIGHT)) + prior
    return best


# ---------------------------------------------------------------------------
# canonical keypoints


def to_canonical(clip: KeypointClip, layout=None, min_confidence: float | None = None):
    """Canonical keypoints (T, 32, 3) and their mask (T, 32).

    Parameters
    ----------
    clip : KeypointClip
    layout : str, dict, path or Layout, optional
        Defaults to ``clip.layout``. A dict is a user mapping ``{source
        name: canonical keypoint}``.
    min_confidence : float, optional
        Points with a lower confidence count as missing.

    Returns
    -------
    keypoints : ndarray, shape (T, 32, 3)
        NaN where missing.
    mask : ndarray of bool, shape (T, 32)
        True where the keypoint is known.
    """
    lay = layout if layout is not None else (clip.mapping or clip.layout)
    if lay is None:
        raise KeypointReadError(clip.source, f"no keypoint layout: pass {setting('layout')} (a name from "
                                f"{', '.join(LAYOUTS)}, or a mapping of source names to canonical keypoints)")
    try:
        lay = get_layout(lay)
    except (KeyError, ValueError) as ex:
        raise KeypointReadError(clip.source, str(ex).strip("'\"")) from None
    W, defined = canonical_weights(lay, clip.joint_names)
    p = clip.positions
    missing = np.isnan(p).any(-1)
    if min_confidence is not None and clip.confidence is not None:
        missing = missing | ~(np.nan_to_num(clip.confidence, nan=0.0) >= min_confidence)
    q = np.where(missing[..., None], 0.0, p)
    out = mix_points(W, q)
    bad = (missing.astype(np.float64) @ (W != 0).T.astype(np.float64)) > 0  # (T, 32)
    mask = defined[None, :] & ~bad
    out[~mask] = np.nan
    return out, mask


# ---------------------------------------------------------------------------
# the shared finishing step


def _check_names(path, names, J):
    names = [str(n) for n in names]
    if len(names) != J:
        raise KeypointReadError(path, f"{len(names)} joint names for {J} points per frame")
    if any(not n.strip() for n in names):
        raise KeypointReadError(path, "empty joint name")
    seen, dup = set(), []
    for n in names:
        if n in seen and n not in dup:
            dup.append(n)
        seen.add(n)
    if dup:
        raise KeypointReadError(path, f"duplicate joint names: {', '.join(dup)}")
    return names


def _or_skeleton_names(points, names, parents, lay, score, warns):
    """``(layout, score)``: where no layout gives the pelvis, the skeleton mapper's reading of the names."""
    from ..model.skeleton import KEYPOINTS

    pelvis = KEYPOINTS.index("pelvis")
    defined = np.zeros(len(KEYPOINTS), dtype=bool)
    if lay is not None:
        _, defined = canonical_weights(lay, names)
        if defined[pelvis]:
            return lay, score
    from .named import effector_layout, skeleton_layout

    try:
        sk, how = skeleton_layout(names, points, parents)
    except (ValueError, IndexError):   # a tree the mapper cannot read: the names alone decide
        sk = None
    if sk is None:
        sk, how = effector_layout(names), "names only"
    if sk is None:
        return lay, score
    _, got = canonical_weights(sk, names)
    if not got[pelvis] or got[:22].sum() < defined[:22].sum():
        return lay, score
    warns.append(f"joint names read by the skeleton mapper ({int(got[:22].sum())} of 22 joints, from "
                 f"{how})")
    return sk, 1.0


def finish_clip(
    path,
    points,
    names,
    *,
    fps=None,
    confidence=None,
    layout=None,
    units=None,
    up_axis=None,
    file_units=None,
    file_up_axis=None,
    default_up_axis="Z",
    file_fps=None,
    max_gap: int = MAX_GAP,
    warnings=None,
    check_scale: bool = True,
    ground: bool = True,
    parents=None,
) -> KeypointClip:
    """Validate raw points and build a :class:`KeypointClip`.

    Parameters
    ----------
    path : str
        The file, for messages.
    points : array_like, shape (T, J, 3)
        File units and axes; NaN = missing.
    names : sequence of str
        One per point.
    fps, units, up_axis, layout
        The caller's overrides (win over the file).
    file_fps, file_units, file_up_axis
        What the file says (``None`` when silent).
    default_up_axis : str
        Used when neither says and the pose does not tell.
    max_gap : int
        Longest gap filled (0 disables filling).
    warnings : list of str
        Reader messages to keep.
    check_scale : bool
        Reject bodies outside 0.3..3 m, image-normalised coordinates and
        mixed units; warn outside 1.0-2.5 m.
    ground : bool
        Put a clip that does not stand on its own floor (its feet more than
        :data:`FLOOR_KEPT` off ``z = 0`` at their contacts, :func:`contact_floor`:
        a floating or hips-origin file) on the floor; the shift is reported
        and kept in ``floor_shift``. A clip that stands keeps its heights.
    parents : sequence of int, optional
        The points' hierarchy (parent index, -1 for a root) where the file
        has one: joint names no layout knows go through the skeleton mapper
        (:mod:`.named`) with it, else with the hierarchy the motion shows.

    Raises
    ------
    KeypointReadError
    """
    path = str(path)
    warns = list(warnings or [])
    p, names, confidence, missing = _checked_points(path, points, names, confidence, warns)
    fps = _frame_rate(path, fps, file_fps, warns)
    lay, names = _clip_layout(path, p, names, layout, parents, warns)

    # up axis: the caller, the file, then the motion (feet to head), then the layout's convention
    raw_kp, raw_mask = canonical_points(p, lay, names)
    up = _clip_up_axis(path, raw_kp, raw_mask, lay, up_axis, file_up_axis, default_up_axis, warns)
    p = convert_up_axis(p, up)
    kp = convert_up_axis(raw_kp, up)

    # a body to measure: no all-zero clip, no value far outside the body (before any arithmetic on them)
    box = check_body_size(path, p, names)

    # units: the caller, the file, then the body's height (segment lengths, not the bounding box)
    ratios = segment_ratios(kp, raw_mask)
    height = body_height(kp, raw_mask, ratios=ratios)
    size = height if math.isfinite(height) else box
    u = _clip_units(path, points, size, units, file_units, check_scale, warns)
    if check_scale:
        _check_mixed_units(path, ratios)
    p *= UNITS[u]
    kp *= UNITS[u]
    if check_scale and math.isfinite(size):
        _warn_height(size, u, warns)

    # gaps
    if max_gap and missing.any():
        p, _, msgs = fill_gaps(p, max_gap, names)
        warns.extend(msgs)
        kp, raw_mask = canonical_points(p, lay, names)

    up_share = upright_share(kp, raw_mask)
    if math.isfinite(up_share) and up_share < 0.5:
        warns.append(f"the head is above the feet in only {up_share:.0%} of the frames with up axis {up}: "
                     f"if the body lies down by mistake, set the up axis ({setting('up_axis')})")

    # floor: a file that stands on its own floor keeps its heights; a floating or hips-origin one is moved
    shift = 0.0
    if ground:
        floor = contact_floor(kp, raw_mask, fps)
        if floor is not None and abs(floor) > FLOOR_KEPT:
            shift = -floor
            p[..., 2] += shift
            warns.append(f"grounded: the feet stood {floor * 100.0:+.1f} cm off z = 0 where they touch the "
                         f"ground (a floating or hips-origin file): moved {shift * 100.0:+.1f} cm vertically "
                         f"({setting('ground', False)} keeps the file's heights)")

    warns = [message(w) for w in warns]   # (the settings they name, for each front end to word)
    return KeypointClip(p, names, fps, confidence, path, None if lay is None else lay.name, u, up, warns, lay,
                        floor_shift=shift)


def _checked_points(path, points, names, confidence, warns):
    """``(points (T, J, 3) float64, names, confidence clipped to [0, 1] or None, missing (T, J))``;
    raises :class:`KeypointReadError` on points, names or confidences that cannot be used."""
    try:
        p = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as ex:
        raise KeypointReadError(path, f"points are not numbers ({ex})") from None
    if p.ndim != 3 or p.shape[-1] != 3:
        raise KeypointReadError(path, f"points must have shape (frames, joints, 3), got {p.shape}")
    T, J = p.shape[:2]
    if T == 0:
        raise KeypointReadError(path, "no frames")
    if J == 0:
        raise KeypointReadError(path, "no joints")
    if np.isinf(p).any():
        t, j = np.argwhere(np.isinf(p))[0][:2]
        raise KeypointReadError(path, f"non-finite value (inf) at frame {t}, point {j}")
    names = _check_names(path, names, J)
    if confidence is not None:
        c = np.asarray(confidence, dtype=np.float64)
        if c.shape != (T, J):
            raise KeypointReadError(path, f"confidence must have shape {(T, J)}, got {c.shape}")
        if np.isinf(c).any():
            raise KeypointReadError(path, "non-finite confidence (inf)")
        confidence = np.clip(c, 0.0, 1.0)
    missing = np.isnan(p).any(-1)
    if missing.all():
        raise KeypointReadError(path, "every point of every frame is missing (NaN)")
    empty_frames = missing.all(1)
    if empty_frames.any():
        warns.append(f"{int(empty_frames.sum())} of {T} frames have no points at all")
    if T == 1:
        warns.append("a single frame: a still pose (solved as one frame)")
    return p, names, confidence, missing


def _frame_rate(path, fps, file_fps, warns) -> float:
    """The caller's frame rate, else the file's, else :data:`DEFAULT_FPS` (with a warning)."""
    if fps is not None:
        fps = float(fps)
    elif file_fps is not None:
        fps = float(file_fps)
    else:
        fps = DEFAULT_FPS
        warns.append(f"frame rate not in the file: assumed {DEFAULT_FPS:g} fps (override with {setting('source_fps')})")
    if not (math.isfinite(fps) and fps > 0):
        raise KeypointReadError(path, f"invalid frame rate {fps!r}")
    return fps


def _clip_layout(path, p, names, layout, parents, warns):
    """``(layout, names)``: the caller's layout (the points taken in its order where no name matches),
    else the one detected from the names, else the skeleton mapper's reading of them."""
    J = len(names)
    if layout is not None:
        try:
            lay = get_layout(layout)
        except (KeyError, ValueError) as ex:
            raise KeypointReadError(path, str(ex).strip("'\"")) from None
        _, defined = canonical_weights(lay, names)
        if not defined.any() and J == len(lay.joint_names):
            names = list(lay.joint_names)
            warns.append(f"no joint name matches layout {lay.name!r}: points taken in its order "
                         f"({', '.join(names[:3])}...)")
            _, defined = canonical_weights(lay, names)
        if not defined.any():
            raise KeypointReadError(path, f"layout {lay.name!r} maps none of the file's joints "
                                    f"({', '.join(names[:8])}{'...' if J > 8 else ''})")
        return lay, names
    lay = None
    name, score = detect_layout(names)
    if name is not None and score >= 0.3:
        lay = LAYOUTS[name]
        _, defined = canonical_weights(lay, names)
        if defined.sum() < 4:
            lay = None
    lay, score = _or_skeleton_names(p, names, parents, lay, score, warns)
    if lay is None:
        raise KeypointReadError(
            path, f"unknown joint names ({', '.join(names[:8])}{'...' if J > 8 else ''}): no known "
            f"layout matches; pass {setting('layout')} with one of {', '.join(LAYOUTS)} or a mapping "
            "file (JSON: source name -> canonical keypoint)")
    if score < 0.999:
        warns.append(f"layout detected as {lay.name!r} (match {score:.0%})")
    return lay, names


def _clip_up_axis(path, raw_kp, raw_mask, lay, up_axis, file_up_axis, default_up_axis, warns) -> str:
    """The caller's up axis, else the file's, else the motion's (feet to head), else the layout's or the default."""
    try:
        if up_axis is not None:
            return normalize_up_axis(up_axis)
        if file_up_axis is not None:
            return normalize_up_axis(file_up_axis)
        up, share = detect_up_axis(raw_kp, raw_mask)
        if up is not None and up in UP_AXES:
            warns.append(f"up axis {up} detected from the motion (feet to head on {share:.0%} of "
                         f"the frames; override with {setting('up_axis')})")
        else:
            up = normalize_up_axis((lay.up_axis if lay is not None and lay.up_axis else None) or default_up_axis)
            warns.append(f"up axis not in the file and not clear from the motion: assumed {up} "
                         f"(override with {setting('up_axis')})")
        return up
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None


def _clip_units(path, points, size, units, file_units, check_scale, warns) -> str:
    """The caller's units, else the file's, else guessed from the body's ``size`` (file units); with
    ``check_scale``, image-normalised coordinates and bodies of no plausible size are refused."""
    try:
        u = normalize_units(units) if units is not None else (normalize_units(file_units) if file_units else None)
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None
    if u is None:
        if check_scale and math.isfinite(size) and size < 1.0 and looks_image_normalised(np.asarray(points, float)):
            raise KeypointReadError(
                path, f"the coordinates look image-normalised (x and y between 0 and 1, a body {size:.2f} "
                "units tall): these are 2D image landmarks, not 3D positions. Export world landmarks "
                f"(MediaPipe pose_world_landmarks), or if they really are metres pass {setting('units', 'm')}")
        guess = _guess_units(size) if math.isfinite(size) else "m"
        if guess is None:
            if check_scale:
                raise KeypointReadError(path, f"implausible body size {size:.3g} (in file units) for any of "
                                        f"{', '.join(_GUESS_UNITS)}; pass {setting('units')}")
            guess = "m"
        u = guess
        warns.append(f"units not in the file: {UNIT_NAMES.get(u, u)} guessed from the body's height "
                     f"({size * UNITS[u]:.2f} m; override with {setting('units')})")
    elif check_scale and math.isfinite(size):
        s_m = size * UNITS[u]
        if not (SIZE_RANGE[0] <= s_m <= SIZE_RANGE[1]):
            better = _guess_units(size)
            hint = f"; the file looks like it is in {better} (pass {setting('units', better)})" if better else ""
            raise KeypointReadError(path, f"absurd scale: the body is {s_m:.3g} m tall in {u}{hint}")
    return u


def _warn_height(size, u, warns):
    """A warning when the body's height in units ``u`` lies outside :data:`HEIGHT_RANGE`."""
    h = size * UNITS[u]
    if not (HEIGHT_RANGE[0] <= h <= HEIGHT_RANGE[1]):
        better = _guess_units(size)
        alt = f"; in {better} it would be {size * UNITS[better]:.2f} m" if better and better != u else ""
        warns.append(f"the body is {h:.2f} m tall in {UNIT_NAMES.get(u, u)}, outside "
                     f"{HEIGHT_RANGE[0]:g}-{HEIGHT_RANGE[1]:g} m{alt}: check the units "
                     f"({setting('units')})")


def _check_mixed_units(path, r):
    """Refuse a body whose segments (:func:`segment_ratios` ``r``) disagree by more than 4x (parts of the
    file in other units)."""
    if len(r) < 3:
        return
    med = float(np.median(list(r.values())))
    if not med > 0:
        return
    off = {k: v / med for k, v in r.items() if v / med > 4.0 or v / med < 0.25}
    if off:
        worst = ", ".join(f"{k.replace('+', '/')} {v:.3g}x" for k, v in sorted(off.items()))
        raise KeypointReadError(
            path, f"mixed units: body segments disagree in length ({worst} the median segment): part of the "
            f"file seems to be in other units than the rest. Convert the file to one unit; if some points are "
            f"not the joints their names say, map them with {setting('layout', 'MAPPING.json')}")
