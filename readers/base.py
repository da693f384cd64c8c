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
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import UserError, message, setting, worded
from ..model.rotations_np import vector_norm
from ..model.skeleton import KEYPOINTS
from .layouts import LAYOUTS, Layout, canonical_weights, detect_layout, get_layout
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
#: Longest gap (frames) :func:`finish_clip` fills by default.
MAX_GAP = 5
#: Plausible body sizes (metres) after unit conversion.
SIZE_RANGE = (0.3, 3.0)


class KeypointReadError(UserError, ValueError):
    """A keypoint file that cannot be used; the message names the file and the problem (and may name the
    setting to change: :func:`..errors.setting`)."""

    def __init__(self, path, problem):
        self.path = str(path)
        super().__init__(f"{self.path}: {problem}")
        self.problem = worded(problem)


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
    source_rig : SourceRig or None
        For sources with a hierarchy (BVH, FBX/glTF, armatures): the source
        skeleton and its motion in this clip's space (see
        :mod:`.source_rig`); ``None`` for keypoint formats.
    floor_shift : float
        Metres added to every height to put the lowest foot point on the
        floor (0 when not grounded).
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
    source_rig: object = field(default=None, repr=False, compare=False)
    floor_shift: float = 0.0

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

    def frames(self, start: int, stop: int) -> "KeypointClip":
        """Source frames ``start:stop`` (end exclusive) as a new clip (the source rig's motion too)."""
        n = self.num_frames
        a, b = max(0, int(start)), min(n, int(stop))
        if not a < b:
            raise ValueError(f"frame range {start}:{stop} is outside the clip (frames 0:{n})")
        return replace(self, positions=self.positions[a:b].copy(),
                       confidence=None if self.confidence is None else self.confidence[a:b].copy(),
                       warnings=list(self.warnings),
                       source_rig=None if self.source_rig is None else self.source_rig.frames(a, b))


def body_size(points: np.ndarray) -> float:
    """Size of the figure: the median over frames of the largest bounding-box side.

    Independent of the up axis; roughly the body height (or arm span in a
    T-pose). NaN when no frame has two points.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    return _median_side(frame_sides(p))


def frame_sides(p):
    """Each frame's largest bounding-box side (T,) of points ``p`` (T, J, 3), NaN for a frame without
    points, inf on overflow (:func:`frame_extents`)."""
    with np.errstate(invalid="ignore", over="ignore"), _quiet():
        d = frame_extents(p)
        return np.fmax(np.fmax(d[:, 0], d[:, 1]), d[:, 2])


def frame_extents(p) -> np.ndarray:
    """The sides (T, 3) of each frame's bounding box of points ``p`` (T, J, 3), missing (NaN) points
    left out; NaN for a frame without points.

    A running ``fmax``/``fmin`` over the points, each a pass over every frame:
    numpy's reductions over the middle axis of a (T, J, 3) array (``nanmax``
    or ``max(axis=1)``) are several times slower.
    """
    p = np.asarray(p, dtype=np.float64)
    if p.shape[1] == 0:
        return np.full((p.shape[0], 3), np.nan)
    hi, lo = p[:, 0].copy(), p[:, 0].copy()
    for j in range(1, p.shape[1]):
        np.fmax(hi, p[:, j], out=hi)
        np.fmin(lo, p[:, j], out=lo)
    return hi - lo


def _median_side(side):
    with np.errstate(invalid="ignore"):
        side = side[np.isfinite(side) & (side > 0)]
    return float(np.median(side)) if side.size else float("nan")


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
        size = _median_side(side) if p.size else float("nan")
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
        with _quiet():
            dist = np.nanmax(np.abs(p[t] - np.nanmedian(p[t], axis=0)), axis=-1)  # no overflow
        j = int(np.nanargmax(dist))
        raise KeypointReadError(path, f"frame {t}: point {names[j]!r} lies {dist[j]:.3g} from the others, "
                                f"{dist[j] / size:.3g} times the body size ({size:.3g}, file units): a corrupt value?")
    with _quiet():
        big = np.abs(p) > MAX_DISTANCE * size
    if big.any():
        t, j = (int(v) for v in np.argwhere(big)[0][:2])
        raise KeypointReadError(path, f"frame {t}: point {names[j]!r} is {np.abs(p[t, j]).max():.3g} from the "
                                f"origin, {MAX_DISTANCE:g} times the body size ({size:.3g}, file units): "
                                "a corrupt value?")
    return size


class _quiet:
    """Silence numpy's all-NaN slice warnings."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


#: Units considered when the file does not say, with a prior cost (in log
#: size units) that makes rarer units win only when clearly better.
_GUESS_UNITS = {"m": 0.0, "cm": 0.0, "mm": 0.0, "in": 0.1, "cmu": 0.5}
#: Reference standing height for unit guessing (metres).
_TYPICAL_HEIGHT = 1.7
#: Heights (metres) outside which a warning names the ``--units`` flag.
HEIGHT_RANGE = (1.0, 2.5)


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


def _kp(name):
    return KEYPOINTS.index(name)


#: Segments measured for the body height: (from points, to points); each
#: end is the mean of its points.
_HEIGHT_SEGMENTS = (
    (("thigh_l",), ("calf_l",)), (("thigh_r",), ("calf_r",)),
    (("calf_l",), ("foot_l",)), (("calf_r",), ("foot_r",)),
    (("upperarm_l",), ("forearm_l",)), (("upperarm_r",), ("forearm_r",)),
    (("forearm_l",), ("hand_l",)), (("forearm_r",), ("hand_r",)),
    (("thigh_l", "thigh_r"), ("upperarm_l", "upperarm_r")),
)


_SEGMENTS: dict = {}


def _segment_table():
    """``(names, Wa, Wb, rest)``: each height segment's end weights over the keypoints and canonical length."""
    if not _SEGMENTS:
        from ..model.skeleton import CANONICAL

        n = len(KEYPOINTS)
        Wa, Wb = np.zeros((len(_HEIGHT_SEGMENTS), n)), np.zeros((len(_HEIGHT_SEGMENTS), n))
        for s, (a, b) in enumerate(_HEIGHT_SEGMENTS):
            Wa[s, [_kp(k) for k in a]] = 1.0 / len(a)
            Wb[s, [_kp(k) for k in b]] = 1.0 / len(b)
        rest = CANONICAL.rest_keypoints()
        _SEGMENTS.update(names=["+".join(a) + "-" + "+".join(b) for a, b in _HEIGHT_SEGMENTS], Wa=Wa, Wb=Wb,
                         rest=vector_norm((Wa - Wb) @ rest))
    t = _SEGMENTS
    return t["names"], t["Wa"], t["Wb"], t["rest"]


def segment_ratios(kp: np.ndarray, mask: np.ndarray | None = None) -> dict:
    """Median length of each body segment over the canonical rest length.

    Parameters
    ----------
    kp : ndarray (T, 32, 3)
        Canonical keypoints (any units, any axes).
    mask : ndarray of bool (T, 32), optional

    Returns
    -------
    dict
        ``"thigh_l-calf_l"`` -> ratio, for the segments the clip has (an
        end that is the mean of several points needs all of them).
    """
    kp = np.asarray(kp, dtype=np.float64)
    finite = np.isfinite(kp).all(-1)
    mask = finite if mask is None else (np.asarray(mask, bool) & finite)
    names, Wa, Wb, rest = _segment_table()
    missing = (~mask).astype(np.float64)
    ok = ((missing @ (Wa > 0).T.astype(np.float64)) == 0) & ((missing @ (Wb > 0).T.astype(np.float64)) == 0)
    seg = mix_points(Wa - Wb, np.where(mask[..., None], kp, 0.0))
    length = np.where(ok, vector_norm(seg), np.nan)     # (T, S)
    have = ok.any(0)
    out = {}
    if have.any():
        part = length[:, have]
        med = np.median(part, axis=0) if ok[:, have].all() else np.nanmedian(part, axis=0)
        for s, m in zip(np.flatnonzero(have), med):
            out[names[s]] = float(m) / float(rest[s])
    return out


def body_height(kp: np.ndarray, mask: np.ndarray | None = None, *, ratios: dict | None = None) -> float:
    """Standing height (in the keypoints' units) estimated from segment lengths.

    The median over the segments the clip has (thighs, shins, upper arms,
    forearms, hips to shoulders) of their length relative to the canonical
    skeleton's, times the canonical height. Independent of the pose and the
    axes (a T-pose, a lying body, an image rotated by 90 degrees all measure
    the same). NaN when no segment is present.
    """
    from ..model.skeleton import CANONICAL

    r = segment_ratios(kp, mask) if ratios is None else ratios
    if not r:
        return float("nan")
    return float(np.median(list(r.values()))) * CANONICAL.height()


def _top_bottom(kp, mask):
    """Mean top-of-body and bottom-of-body points per frame (T, 3) each, or None."""
    for top, bottom in ((("head_top", "head", "nose", "neck"),
                         ("heel_l", "heel_r", "foot_l", "foot_r", "calf_l", "calf_r")),
                        (("neck", "upperarm_l", "upperarm_r", "head"), ("pelvis", "thigh_l", "thigh_r"))):
        ti = [_kp(k) for k in top]
        bi = [_kp(k) for k in bottom]
        tm, bm = mask[:, ti], mask[:, bi]
        if not (tm.any() and bm.any()):
            continue
        with _quiet():
            t = np.nansum(np.where(tm[..., None], kp[:, ti], 0.0), 1) / tm.sum(1, keepdims=True)
            b = np.nansum(np.where(bm[..., None], kp[:, bi], 0.0), 1) / bm.sum(1, keepdims=True)
        ok = tm.any(1) & bm.any(1)
        if ok.any():
            return t[ok], b[ok]
    return None


def detect_up_axis(kp: np.ndarray, mask: np.ndarray | None = None) -> tuple[str | None, float]:
    """Up axis from the motion: the dominant axis from the feet to the head.

    Parameters
    ----------
    kp : ndarray (T, 32, 3)
        Canonical keypoints in the file's axes.
    mask : ndarray of bool (T, 32), optional

    Returns
    -------
    axis : str or None
        ``"Z"``, ``"-Z"``, ``"Y"`` or ``"-Y"``; ``None`` when the body is not
        mostly along one of them (or along X).
    share : float
        Fraction of frames whose feet-to-head direction is within 60 degrees of that axis.

    Notes
    -----
    The axis is the one the feet-to-head direction has the largest 10th
    percentile component along (at least 0.3): the body points that way on
    nearly every frame, so a clip spent leaning forward keeps its up axis.
    """
    kp = np.asarray(kp, dtype=np.float64)
    mask = np.isfinite(kp).all(-1) if mask is None else (np.asarray(mask, bool) & np.isfinite(kp).all(-1))
    tb = _top_bottom(kp, mask)
    if tb is None:
        return None, 0.0
    d = tb[0] - tb[1]
    n = vector_norm(d)
    d = d[n > 0] / n[n > 0, None]
    if not len(d):
        return None, 0.0
    # the axis the body points along on (nearly) every frame: the 10th percentile of the
    # signed component, so a clip spent leaning forward (pushing, picking up) keeps its up axis
    low = np.percentile(np.concatenate([d, -d], axis=1), 10.0, axis=0)  # (+X, +Y, +Z, -X, -Y, -Z)
    k = int(np.argmax(low))
    if low[k] < 0.3 or k % 3 == 0:
        return None, 0.0
    sign = 1.0 if k < 3 else -1.0
    i = k % 3
    share = float(np.mean(sign * d[:, i] > 0.5))
    return ("" if sign > 0 else "-") + "XYZ"[i], share


def upright_share(kp: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Fraction of frames (with the points) in which the head is above the feet (Z up)."""
    kp = np.asarray(kp, dtype=np.float64)
    mask = np.isfinite(kp).all(-1) if mask is None else (np.asarray(mask, bool) & np.isfinite(kp).all(-1))
    tb = _top_bottom(kp, mask)
    if tb is None:
        return float("nan")
    d = tb[0] - tb[1]
    n = vector_norm(d)
    ok = n > 0
    return float(np.mean(d[ok, 2] > 0)) if ok.any() else float("nan")


#: Foot keypoints and their height above the floor in the canonical rest pose.
_GROUND_POINTS = (("heel_l", 0.0), ("heel_r", 0.0), ("toe_tip_l", 0.0), ("toe_tip_r", 0.0),
                  ("toe_l", 0.03), ("toe_r", 0.03), ("foot_l", 0.08), ("foot_r", 0.08))


def floor_height(kp: np.ndarray, mask: np.ndarray | None = None) -> float | None:
    """Height of the floor under a clip (Z up): where its lowest foot point is.

    Uses heels and toe tips where the clip has them, else toes and ankles
    less their rest height (3 and 8 cm). The 1st percentile over the clip,
    not the minimum, so a single bad sample does not decide the floor.

    Returns
    -------
    float or None
        ``None`` when the clip has no foot points.
    """
    kp = np.asarray(kp, dtype=np.float64)
    mask = np.isfinite(kp).all(-1) if mask is None else (np.asarray(mask, bool) & np.isfinite(kp).all(-1))
    for names in (_GROUND_POINTS[:4], _GROUND_POINTS[4:]):
        idx = [_kp(n) for n, _ in names]
        rest = np.array([h for _, h in names])
        z = kp[:, idx, 2] - rest
        z = z[mask[:, idx] & np.isfinite(z)]
        if z.size:
            return float(np.percentile(z, 1.0))
    return None


#: A file whose feet stand within this (metres) of its ``z = 0`` where they touch the ground stands on its own
#: floor: the reader keeps its heights (mocap joints sit inside the foot, a few cm above its floor).
FLOOR_KEPT = 0.08
#: Foot points and their height above the floor when the foot stands (canonical rest), for :func:`contact_floor`.
_STANDING_POINTS = (("heel", 0.0), ("toe_tip", 0.0), ("toe", 0.03), ("foot", 0.08))


def contact_floor(kp: np.ndarray, mask: np.ndarray | None, fps: float) -> float | None:
    """Height of the floor a clip stands on (Z up): where its feet are while they touch the ground.

    Per foot, its lowest point less that point's standing height on each
    frame; its contacts (definition): the frames in which that is within 3 cm
    of the 5th percentile of both feet and the ankle slower than 0.25 m/s. The median
    over both feet's contacts (not the lowest sample: one toe dipping through
    the floor does not decide it); :func:`floor_height` when no foot is seen
    standing, ``None`` without foot points.
    """
    kp = np.asarray(kp, dtype=np.float64)
    mask = np.isfinite(kp).all(-1) if mask is None else (np.asarray(mask, bool) & np.isfinite(kp).all(-1))
    feet = []
    for s in "lr":
        z = np.full(len(kp), np.inf)
        for name, h in _STANDING_POINTS:
            k = _kp(f"{name}_{s}")
            z = np.minimum(z, np.where(mask[:, k], kp[:, k, 2] - h, np.inf))
        a = _kp(f"foot_{s}")
        v = np.full(len(kp), np.inf)
        if len(kp) >= 2:
            with _quiet():
                v = np.nan_to_num(vector_norm(np.gradient(np.where(mask[:, a, None], kp[:, a], np.nan), axis=0))
                                  * float(fps), nan=np.inf)
        feet.append((z, v))
    z = np.concatenate([z for z, _ in feet])
    if np.isfinite(z).sum() >= 3:
        # near the lowest of both feet (a foot held up all clip long never counts) and still
        lo = np.percentile(z[np.isfinite(z)], 5.0)
        low = np.concatenate([z[(z < lo + 0.03) & (v < 0.25)] for z, v in feet])
        if low.size >= 3:
            return float(np.median(low))
    return floor_height(kp, mask)


def _looks_image_normalised(points: np.ndarray) -> bool:
    """x and y all within [0, 1] (pixel coordinates divided by the image size)."""
    with _quiet():
        lo = np.nanmin(points[..., :2])
        hi = np.nanmax(points[..., :2])
    return bool(np.isfinite(lo) and lo >= -0.02 and hi <= 1.02)


def mix_points(W, p):
    """``out[t, k] = sum_j W[k, j] p[t, j]``: weights (K, J) of points (T, J, 3), as one matrix product.

    (``np.einsum`` without its optimiser loops in C over every term, several
    times slower on a long clip.)
    """
    T, J = p.shape[:2]
    flat = np.ascontiguousarray(np.swapaxes(p, 0, 1)).reshape(J, T * 3)
    return np.ascontiguousarray(np.swapaxes((np.asarray(W, dtype=np.float64) @ flat).reshape(-1, T, 3), 0, 1))


def _canonical_points(points, layout, names):
    """Canonical keypoints (T, 32, 3) and mask of raw points through a layout (any units/axes)."""
    W, defined = canonical_weights(layout, names)
    p = np.asarray(points, dtype=np.float64)
    missing = np.isnan(p).any(-1)
    out = mix_points(W, np.where(missing[..., None], 0.0, p))
    bad = (missing.astype(np.float64) @ (W != 0).T.astype(np.float64)) > 0
    mask = defined[None, :] & ~bad
    out[~mask] = np.nan
    return out, mask


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
    except when it falls exactly on a source frame. The source rig's motion
    (``clip.source_rig``) is resampled at the same instants (rotations by
    slerp, locations linearly).
    """
    fps = float(fps)
    if not (fps > 0 and math.isfinite(fps)):
        raise ValueError(f"resample: fps must be a positive number, got {fps!r}")
    if clip.num_frames < 2 or abs(fps - clip.fps) < 1e-9:
        return replace(clip, positions=clip.positions.copy(), joint_names=list(clip.joint_names),
                       fps=fps if clip.num_frames < 2 else clip.fps,
                       confidence=None if clip.confidence is None else clip.confidence.copy(),
                       warnings=list(clip.warnings),
                       source_rig=None if clip.source_rig is None else clip.source_rig.frames(0, clip.num_frames))
    n = int(math.floor(clip.duration * fps + 1e-6)) + 1
    src_t = np.arange(n) * (clip.fps / fps)
    pos = _interp_frames(clip.positions, src_t)
    conf = None if clip.confidence is None else _interp_frames(clip.confidence, src_t)
    return replace(clip, positions=pos, joint_names=list(clip.joint_names), fps=fps, confidence=conf,
                   warnings=list(clip.warnings) + [f"resampled from {clip.fps:g} to {fps:g} fps"],
                   source_rig=None if clip.source_rig is None else clip.source_rig.resampled(src_t))


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
        warns.append(f"frame rate not in the file: assumed {DEFAULT_FPS:g} fps (override with {setting('source_fps')})")
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
        lay, score = _or_skeleton_names(p, names, parents, lay, score, warns)
        if lay is None:
            raise KeypointReadError(
                path, f"unknown joint names ({', '.join(names[:8])}{'...' if J > 8 else ''}): no known "
                f"layout matches; pass {setting('layout')} with one of {', '.join(LAYOUTS)} or a mapping "
                "file (JSON: source name -> canonical keypoint)")
        if score < 0.999:
            warns.append(f"layout detected as {lay.name!r} (match {score:.0%})")

    # up axis: the caller, the file, then the motion (feet to head), then the layout's convention
    raw_kp, raw_mask = _canonical_points(p, lay, names)
    try:
        if up_axis is not None:
            up = normalize_up_axis(up_axis)
        elif file_up_axis is not None:
            up = normalize_up_axis(file_up_axis)
        else:
            up, share = detect_up_axis(raw_kp, raw_mask)
            if up is not None and up in UP_AXES:
                warns.append(f"up axis {up} detected from the motion (feet to head on {share:.0%} of "
                             f"the frames; override with {setting('up_axis')})")
            else:
                up = normalize_up_axis((lay.up_axis if lay is not None and lay.up_axis else None) or default_up_axis)
                warns.append(f"up axis not in the file and not clear from the motion: assumed {up} "
                             f"(override with {setting('up_axis')})")
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None
    p = convert_up_axis(p, up)
    kp = convert_up_axis(raw_kp, up)

    # a body to measure: no all-zero clip, no value far outside the body (before any arithmetic on them)
    box = check_body_size(path, p, names)

    # units: the caller, the file, then the body's height (segment lengths, not the bounding box)
    ratios = segment_ratios(kp, raw_mask)
    height = body_height(kp, raw_mask, ratios=ratios)
    size = height if math.isfinite(height) else box
    try:
        u = normalize_units(units) if units is not None else (normalize_units(file_units) if file_units else None)
    except ValueError as ex:
        raise KeypointReadError(path, str(ex)) from None
    if u is None:
        if check_scale and math.isfinite(size) and size < 1.0 and _looks_image_normalised(np.asarray(points, float)):
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
    if check_scale:
        _check_mixed_units(path, ratios)
    p *= UNITS[u]
    kp *= UNITS[u]
    if check_scale and math.isfinite(size):
        h = size * UNITS[u]
        if not (HEIGHT_RANGE[0] <= h <= HEIGHT_RANGE[1]):
            better = _guess_units(size)
            alt = f"; in {better} it would be {size * UNITS[better]:.2f} m" if better and better != u else ""
            warns.append(f"the body is {h:.2f} m tall in {UNIT_NAMES.get(u, u)}, outside "
                         f"{HEIGHT_RANGE[0]:g}-{HEIGHT_RANGE[1]:g} m{alt}: check the units "
                         f"({setting('units')})")

    # gaps
    if max_gap and missing.any():
        p, _, msgs = fill_gaps(p, max_gap, names)
        warns.extend(msgs)
        kp, raw_mask = _canonical_points(p, lay, names)

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
