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
from dataclasses import dataclass, field

import numpy as np

from ..model.skeleton import KEYPOINTS
from .layouts import LAYOUTS, Layout, canonical_weights, detect_layout, get_layout

__all__ = [
    "KeypointReadError",
    "KeypointClip",
    "UNITS",
    "UP_AXES",
    "DEFAULT_FPS",
    "MAX_GAP",
    "convert_up_axis",
    "body_size",
    "fill_gaps",
    "resample",
    "to_canonical",
    "finish_clip",
]

#: Metres per unit.
UNITS = {"m": 1.0, "dm": 0.1, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048}
_UNIT_ALIASES = {
    "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "decimeter": "dm", "decimeters": "dm", "centimeter": "cm", "centimeters": "cm",
    "centimetre": "cm", "centimetres": "cm", "millimeter": "mm", "millimeters": "mm",
    "millimetre": "mm", "millimetres": "mm", "inch": "in", "inches": "in", "foot": "ft", "feet": "ft",
}
#: Supported up axes of source data (all right-handed).
UP_AXES = ("Z", "-Z", "Y", "-Y")
#: Frame rate assumed when neither the file nor the caller gives one.
DEFAULT_FPS = 30.0
#: Longest gap (frames) :func:`finish_clip` fills by default.
MAX_GAP = 5
#: Plausible body sizes (metres) after unit conversion.
SIZE_RANGE = (0.3, 3.0)


class KeypointReadError(ValueError):
    """A keypoint file that cannot be used; the message names the file and the problem."""

    def __init__(self, path, problem):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass
class KeypointClip:
    """Keypoints read from a file, converted to the canonical frame.

    Attributes
    ----------
    positions : ndarray, shape (T, J, 3), float64
        Metres, Z up, the body facing -Y as in the source; NaN = missing.
    joint_names : list of str
        Source point names, in source order.
    fps : float
        Frames per second.
    confidence : ndarray, shape (T, J), or None
        Per-point confidence in [0, 1] (MediaPipe visibility...).
    source : str
        The file read.
    layout : str or None
        Name of the layout (detected or given); ``None`` when unknown.
    units : str
        Source units (``"m"``, ``"cm"``...) detected, given or guessed.
    up_axis : str
        Source up axis (``"Z"``, ``"Y"``, ``"-Y"``, ``"-Z"``).
    warnings : list of str
        What was assumed, filled or masked, for the user to see.
    mapping : Layout or None
        The layout object itself (a user mapping has no registry name).
    """

    positions: np.ndarray
    joint_names: list
    fps: float
    confidence: np.ndarray | None = None
    source: str = ""
    layout: str | None = None
    units: str = "m"
    up_axis: str = "Z"
    warnings: list = field(default_factory=list)
    mapping: Layout | None = field(default=None, repr=False, compare=False)

    @property
    def num_frames(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_joints(self) -> int:
        return int(self.positions.shape[1])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps if self.fps > 0 else 0.0


# ---------------------------------------------------------------------------
# conversions


def normalize_units(units) -> str:
    """Canonical spelling of a unit (``"millimeters"`` -> ``"mm"``); ``ValueError`` if unknown."""
    u = str(units).strip().lower()
    u = _UNIT_ALIASES.get(u, u)
    if u not in UNITS:
        raise ValueError(f"unknown units {units!r}; use one of {', '.join(UNITS)}")
    return u


def normalize_up_axis(axis) -> str:
    """Canonical spelling of an up axis (``"y"`` -> ``"Y"``, ``"+z"`` -> ``"Z"``)."""
    a = str(axis).strip().upper().lstrip("+")
    if a not in UP_AXES:
        raise ValueError(f"unknown up axis {axis!r}; use one of {', '.join(UP_AXES)}")
    return a


def convert_up_axis(points: np.ndarray, up_axis: str) -> np.ndarray:
    """Rotate right-handed source coordinates to Z up.

    ``Y`` up (x, y, z) -> (x, -z, y), as Blender's BVH/FBX importers do, so
    a body facing +Z faces -Y; ``-Y`` (y down, image-like: MediaPipe) ->
    (x, z, -y); ``-Z`` -> (x, -y, -z). Handedness is kept: these are
    rotations, never mirrors.
    """
    p = np.asarray(points, dtype=np.float64)
    a = normalize_up_axis(up_axis)
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    if a == "Z":
        return p.copy()
    if a == "Y":
        return np.stack([x, -z, y], axis=-1)
    if a == "-Y":
        return np.stack([x, z, -y], axis=-1)
    return np.stack([x, -y, -z], axis=-1)


def body_size(points: np.ndarray) -> float:
    """Size of the figure: the median over frames of the largest bounding-box side.

    Independent of the up axis; roughly the body height (or arm span in a
    T-pose). NaN when no frame has two points.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    with np.errstate(invalid="ignore"), _quiet():
        ext = np.nanmax(p, axis=1) - np.nanmin(p, axis=1)  # (T, 3)
        side = np.nanmax(ext, axis=1)
        side = side[np.isfinite(side) & (side > 0)]
    return float(np.median(side)) if side.size else float("nan")


class _quiet:
    """Silence numpy's all-NaN slice warnings."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def _guess_units(size: float) -> str | None:
    """Unit among m, cm, mm that puts ``size`` closest to 1.7 m (None if none is plausible)."""
    best, err = None, math.inf
    for u in ("m", "cm", "mm"):
        s = size * UNITS[u]
        if SIZE_RANGE[0] <= s <= SIZE_RANGE[1] and abs(math.log(s / 1.7)) < err:
            best, err = u, abs(math.log(s / 1.7))
    return best


def _detect_up_axis(points: np.ndarray, layout: Layout | None, names) -> str | None:
    """Up axis from the pose: the dominant axis from the feet to the head."""
    if layout is None:
        return None
    W, defined = canonical_weights(layout, names)
    top = [k for k in ("head_top", "head", "nose", "neck") if defined[KEYPOINTS.index(k)]]
    bottom = [k for k in ("heel_l", "heel_r", "foot_l", "foot_r", "calf_l", "calf_r") if defined[KEYPOINTS.index(k)]]
    if not top or not bottom:
        top = [k for k in ("neck", "upperarm_l", "upperarm_r", "head") if defined[KEYPOINTS.index(k)]]
        bottom = [k for k in ("pelvis", "thigh_l", "thigh_r") if defined[KEYPOINTS.index(k)]]
    if not top or not bottom:
        return None
    p = np.nan_to_num(points)
    bad = np.isnan(points).any(-1)
    with _quiet():
        def avg(keys):
            rows = W[[KEYPOINTS.index(k) for k in keys]]
            pts = np.einsum("kj,tjc->tkc", rows, p)
            miss = (rows != 0).astype(float) @ bad.T.astype(float) > 0  # (k, T)
            pts[miss.T] = np.nan
            return np.nanmean(pts, axis=1)
        v = np.nanmedian(avg(top) - avg(bottom), axis=0)
    if not np.all(np.isfinite(v)) or np.linalg.norm(v) == 0:
        return None
    i = int(np.argmax(np.abs(v)))
    if abs(v[i]) < 0.5 * np.linalg.norm(v):
        return None
    if i == 0:
        return None
    return ("" if v[i] > 0 else "-") + "XYZ"[i]


# ---------------------------------------------------------------------------
# gaps and resampling


def _runs(mask: np.ndarray):
    """Start and stop indices of runs of True in a 1-D bool array."""
    d = np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def fill_gaps(positions: np.ndarray, max_gap: int = MAX_GAP, joint_names=None):
    """Fill short gaps linearly; leave longer ones (and the clip's ends) missing.

    Parameters
    ----------
    positions : ndarray, shape (T, J, 3)
        NaN marks a missing point (a point with any NaN coordinate is missing).
    max_gap : int
        Longest run of missing frames, between two known frames, to fill.
    joint_names : sequence of str, optional
        For the messages.

    Returns
    -------
    filled : ndarray, shape (T, J, 3)
        A copy; points still missing are all-NaN.
    filled_mask : ndarray of bool, shape (T, J)
        Points that were filled.
    messages : list of str
        e.g. ``"filled 12 gaps of up to 3 frames in hand_l"``,
        ``"hand_l: 40 of 500 frames missing (masked)"``.
    """
    p = np.array(positions, dtype=np.float64, copy=True)
    T, J = p.shape[:2]
    missing = np.isnan(p).any(-1)
    p[missing] = np.nan
    filled_mask = np.zeros((T, J), bool)
    msgs = []
    names = list(joint_names) if joint_names is not None else [str(j) for j in range(J)]
    for j in np.flatnonzero(missing.any(0)):
        if missing[:, j].all():
            continue
        starts, stops = _runs(missing[:, j])
        n_filled, longest = 0, 0
        for a, b in zip(starts, stops):
            if a == 0 or b == T or b - a > max_gap:
                continue
            t = (np.arange(a, b) - (a - 1)) / (b - (a - 1))
            p[a:b, j] = p[a - 1, j] * (1 - t)[:, None] + p[b, j] * t[:, None]
            filled_mask[a:b, j] = True
            n_filled += 1
            longest = max(longest, b - a)
        if n_filled:
            msgs.append(f"filled {n_filled} gap{'s' if n_filled > 1 else ''} of up to {longest} "
                        f"frame{'s' if longest > 1 else ''} in {names[j]}")
        left = int((missing[:, j] & ~filled_mask[:, j]).sum())
        if left:
            msgs.append(f"{names[j]}: {left} of {T} frames missing (masked)")
    return p, filled_mask, msgs


def _interp_frames(a: np.ndarray, src_t: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``a`` (T, ...) at fractional frame positions; NaN-aware."""
    T = a.shape[0]
    src_t = np.clip(src_t, 0, T - 1)
    i0 = np.floor(src_t).astype(np.int64)
    i1 = np.minimum(i0 + 1, T - 1)
    f = (src_t - i0).reshape((-1,) + (1,) * (a.ndim - 1))
    lo, hi = a[i0], a[i1]
    out = lo * (1 - f) + hi * f
    exact = np.broadcast_to(f == 0, out.shape)
    out = np.where(exact, lo, out)  # a NaN neighbour does not spoil an exact hit
    return out


def resample(clip: KeypointClip, fps: float) -> KeypointClip:
    """The clip resampled to ``fps`` (linear, NaN-aware), over the same duration.

    A new frame between two source frames is NaN when either is missing,
    except when it falls exactly on a source frame.
    """
    fps = float(fps)
    if not (fps > 0 and math.isfinite(fps)):
        raise ValueError(f"resample: fps must be a positive number, got {fps!r}")
    if clip.num_frames < 2 or abs(fps - clip.fps) < 1e-9:
        return KeypointClip(clip.positions.copy(), list(clip.joint_names), fps if clip.num_frames < 2 else clip.fps,
                            None if clip.confidence is None else clip.confidence.copy(), clip.source,
                            clip.layout, clip.units, clip.up_axis, list(clip.warnings), clip.mapping)
    n = int(math.floor(clip.duration * fps + 1e-6)) + 1
    src_t = np.arange(n) * (clip.fps / fps)
    pos = _interp_frames(clip.positions, src_t)
    conf = None if clip.confidence is None else _interp_frames(clip.confidence, src_t)
    return KeypointClip(pos, list(clip.joint_names), fps, conf, clip.source, clip.layout, clip.units,
                        clip.up_axis, list(clip.warnings) + [f"resampled from {clip.fps:g} to {fps:g} fps"],
                        clip.mapping)


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
        raise KeypointReadError(clip.source, "no keypoint layout: pass layout= (a name from "
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
    out = np.einsum("kj,tjc->tkc", W, q)
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
        Reject bodies outside 0.3..3 m.

    Raises
    ------
    KeypointReadError
    """
    path = str(path)
    warns = list(warnings or [])
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

    # frame rate
    if fps is not None:
        fps = float(fps)
    elif file_fps is not None:
        fps = float(file_fps)
    else:
        fps = DEFAULT_FPS
        warns.append(f"frame rate not in the file: assumed {DEFAULT_FPS:g} fps (override with fps=)")
    if not (math.isfinite(fps) and fps > 0):
        raise KeypointReadError(path, f"invalid frame rate {fps!r}")

    # layout
    lay = None
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
    else:
        name, score = detect_layout(names)
        if name is not None and score >= 0.3:
            lay = LAYOUTS[name]
            _, defined = canonical_weights(lay, names)
            if defined.sum() < 4:
                lay = None
        if lay is None:
            raise KeypointReadError(
                path, f"unknown joint names ({', '.join(names[:8])}{'...' if J > 8 else ''}): no known "
                f"layout matches; pass layout= with one of {', '.join(LAYOUTS)} or a mapping file "
                "(JSON: source name -> canonical keypoint)")
        if score < 0.999:
            warns.append(f"layout detected as {lay.name!r} (match {score:.0%})")

    # up axis
    try:
        if up_axis is not None:
            up = normalize_up_axis(up_axis)
        elif file_up_axis is not None:
            up = normalize_up_axis(file_up_axis)
        else:
            up = _detect_up_axis(p, lay, names)
            if up is not None and up in UP_AXES:
                warns.append(f"up axis not in the file: {up} detected from the pose (override with up_axis=)")
            else:
                up = normalize_up_axis((lay.up_axis if lay is not None and lay.up_axis else None) or default_up_axis)
                warns.append(f"up axis not in the file: assumed {up} (override with up_axis=)")
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None
    p = convert_up_axis(p, up)

    # units
    size = body_size(p)
    try:
        u = normalize_units(units) if units is not None else (normalize_units(file_units) if file_units else None)
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None
    if u is None:
        guess = _guess_units(size) if math.isfinite(size) else "m"
        if guess is None:
            if check_scale:
                raise KeypointReadError(path, f"implausible body size {size:.3g} (in file units) for m, cm or mm; "
                                        "pass units= (m, cm, mm, in)")
            guess = "m"
        u = guess
        warns.append(f"units not in the file: {u} guessed from the body size "
                     f"({size * UNITS[u]:.2f} m; override with units=)")
    elif check_scale and math.isfinite(size):
        s = size * UNITS[u]
        if not (SIZE_RANGE[0] <= s <= SIZE_RANGE[1]):
            better = _guess_units(size)
            hint = f"; the file looks like it is in {better} (pass units='{better}')" if better else ""
            raise KeypointReadError(path, f"absurd scale: the body is {s:.3g} m tall in {u}{hint}")
    p *= UNITS[u]

    # gaps
    if max_gap and missing.any():
        p, _, msgs = fill_gaps(p, max_gap, names)
        warns.extend(msgs)

    return KeypointClip(p, names, fps, confidence, path, None if lay is None else lay.name, u, up, warns, lay)
