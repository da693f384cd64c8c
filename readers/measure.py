"""A body measured in its keypoints: size, height from segment lengths, up axis, floor; and raw points taken
through a layout onto the canonical keypoints those measures read.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import KEYPOINTS
from .layouts import canonical_weights

__all__ = ["FLOOR_KEPT", "contact_floor", "body_size", "frame_sides", "frame_extents", "median_side", "segment_ratios", "body_height",
           "detect_up_axis", "upright_share", "floor_height", "looks_image_normalised", "mix_points",
           "canonical_points", "quiet"]


def body_size(points: np.ndarray) -> float:
    """Size of the figure: the median over frames of the largest bounding-box side.

    Independent of the up axis; roughly the body height (or arm span in a
    T-pose). NaN when no frame has two points.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    return median_side(frame_sides(p))


def frame_sides(p):
    """Each frame's largest bounding-box side (T,) of points ``p`` (T, J, 3), NaN for a frame without
    points, inf on overflow (:func:`frame_extents`)."""
    with np.errstate(invalid="ignore", over="ignore"), quiet():
        d = frame_extents(p)
        return np.fmax(np.fmax(d[:, 0], d[:, 1]), d[:, 2])


#: Frames up to which :func:`frame_extents` reduces over the points at once.
FEW_FRAMES = 8


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
    if p.shape[0] <= FEW_FRAMES:   # (a dragged pose: two reductions, not a pass per point)
        with quiet():
            return np.nanmax(p, axis=1) - np.nanmin(p, axis=1)
    hi, lo = p[:, 0].copy(), p[:, 0].copy()
    for j in range(1, p.shape[1]):
        np.fmax(hi, p[:, j], out=hi)
        np.fmin(lo, p[:, j], out=lo)
    return hi - lo


def median_side(side):
    with np.errstate(invalid="ignore"):
        side = side[np.isfinite(side) & (side > 0)]
    return float(np.median(side)) if side.size else float("nan")


class quiet:
    """Silence numpy's all-NaN slice warnings."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


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
        with quiet():
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
            with quiet():
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


def looks_image_normalised(points: np.ndarray) -> bool:
    """x and y all within [0, 1] (pixel coordinates divided by the image size)."""
    with quiet():
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


def canonical_points(points, layout, names):
    """Canonical keypoints (T, 32, 3) and mask of raw points through a layout (any units/axes)."""
    W, defined = canonical_weights(layout, names)
    p = np.asarray(points, dtype=np.float64)
    missing = np.isnan(p).any(-1)
    out = mix_points(W, np.where(missing[..., None], 0.0, p))
    bad = (missing.astype(np.float64) @ (W != 0).T.astype(np.float64)) > 0
    mask = defined[None, :] & ~bad
    out[~mask] = np.nan
    return out, mask
