"""Quality figures of a bake: keypoint error, jitter and foot sliding (no ``bpy``).

All inputs are world positions in metres, Z up, with the time axis first.

- :func:`keypoint_error`: mean and max distance (millimetres) between two
  sets of keypoints, ignoring missing (NaN or masked) points.
- :func:`jitter`: mean magnitude of the joints' acceleration (m/s^2), from
  second differences; a smooth motion scores low, noisy motion high.
- :func:`bone_direction_error`: mean angle (degrees) between corresponding
  bone directions (joint -> child keypoint) of two keypoint sets; unlike
  :func:`keypoint_error` it does not depend on the proportions, so it says
  how faithfully a rig with other proportions follows the source.
- :func:`foot_contacts` / :func:`foot_sliding`: a heel or toe point is *in
  contact* on a frame when it is near the floor (height) and nearly still
  (horizontal speed); sliding is its mean horizontal movement per frame
  while in contact, in millimetres.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import BONE_CHILD, JOINTS, KEYPOINTS

__all__ = [
    "keypoint_error",
    "distance_sums",
    "mean_and_max",
    "jitter",
    "bone_direction_error",
    "foot_contacts",
    "foot_sliding",
    "FOOT_POINTS",
    "CONTACT_HEIGHT",
    "CONTACT_SPEED",
]

#: Canonical keypoints whose floor contact is checked (heels and toe tips).
FOOT_POINTS: tuple = ("heel_l", "toe_tip_l", "heel_r", "toe_tip_r")
#: A point counts as touching the floor below this height above the floor (m).
CONTACT_HEIGHT = 0.05
#: ... and when its horizontal speed is below this (m/s).
CONTACT_SPEED = 0.5
#: Frames measured at a time by the figures over whole clips (sums and counts per
#: chunk: a 100,000-frame clip's temporaries would take hundreds of MB).
_CHUNK = 8192


def _spans(n, overlap=0):
    """``(a, b)`` ranges of at most ``_CHUNK`` frames covering ``n`` frames, each reaching
    ``overlap`` frames into the next (for differences across a boundary)."""
    return [(a, min(a + _CHUNK + overlap, n)) for a in range(0, max(n - overlap, 1), _CHUNK)]


def keypoint_error(pred, target, mask=None) -> tuple:
    """Mean and max distance between two keypoint arrays, in millimetres.

    Parameters
    ----------
    pred, target : array_like, shape (T, K, 3)
        Positions in metres; NaN marks a missing point (ignored).
    mask : array_like of bool, shape (T, K), optional
        Only points where ``mask`` is true are compared.

    Returns
    -------
    tuple of float
        ``(mean_mm, max_mm)``; ``(nan, nan)`` when nothing is comparable.
    """
    pred = np.asarray(pred)
    target = np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"shape mismatch: {pred.shape} vs {target.shape}")
    m = None if mask is None else np.asarray(mask, dtype=bool).reshape(pred.shape[:-1])
    return mean_and_max(distance_sums(pred[a:b], target[a:b], None if m is None else m[a:b])
                        for a, b in _spans(len(pred)))


def distance_sums(pred, target, mask=None) -> tuple:
    """``(sum_mm, count, max_mm)`` of the distances of a few frames (:func:`keypoint_error`'s parts:
    a caller holding a long clip in other arrays measures it a chunk at a time)."""
    d = vector_norm(np.asarray(pred, dtype=np.float64) - np.asarray(target, dtype=np.float64))
    valid = np.isfinite(d)
    if mask is not None:
        valid &= mask
    d = d[valid] * 1000.0
    return (float(d.sum()), d.size, float(d.max())) if d.size else (0.0, 0, -np.inf)


def mean_and_max(sums) -> tuple:
    """Mean and max (mm) from :func:`distance_sums` of every chunk; ``(nan, nan)`` when nothing was measured."""
    total, count, worst = 0.0, 0, -np.inf
    for t, c, w in sums:
        total, count, worst = total + t, count + c, max(worst, w)
    if not count:
        return float("nan"), float("nan")
    return total / count, worst


#: Bones shorter than this share of the clip's median bone length are left out of
#: :func:`bone_direction_error` (their direction is rounding noise).
MIN_BONE_SHARE = 1e-3


def bone_direction_error(pred, target, mask=None) -> float:
    """Mean angle between corresponding bone directions, in degrees.

    A bone is a canonical joint -> its child keypoint (``BONE_CHILD``: the
    next joint down the chain, or the end point of an end joint). The figure
    does not depend on bone lengths: a retarget onto a rig with other
    proportions scores 0 when every bone points the same way as the source.
    Bones of (nearly) zero length on either side (a file's end sites of zero
    length) point nowhere and are left out.

    Parameters
    ----------
    pred, target : array_like, shape (T, 32, 3)
        Canonical keypoints (any units, same axes); NaN marks a missing point.
    mask : array_like of bool, shape (T, 32), optional
        Known points of ``target``; a bone counts where both ends are known.

    Returns
    -------
    float
        Mean over bones and frames; NaN when no bone is comparable.
    """
    pred = np.asarray(pred)
    target = np.asarray(target)
    a = np.arange(len(JOINTS))
    b = np.asarray(BONE_CHILD)
    m = None if mask is None else np.asarray(mask, dtype=bool).reshape(target.shape[:2])
    total, count = 0.0, 0
    for s, e in _spans(len(target)):
        p = np.asarray(pred[s:e], dtype=np.float64)
        t = np.asarray(target[s:e], dtype=np.float64)
        dp = p[:, b] - p[:, a]
        dt = t[:, b] - t[:, a]
        npn = vector_norm(dp)
        ntn = vector_norm(dt)
        valid = np.isfinite(npn) & np.isfinite(ntn) & (npn > 1e-9) & (ntn > 1e-9)
        if valid.any():   # a zero-length end site (rounded to micrometres) points nowhere: not a bone
            short = MIN_BONE_SHARE * np.median(ntn[valid])
            valid &= (ntn > short) & (npn > short)
        if m is not None:
            valid &= m[s:e, a] & m[s:e, b]
        cos = np.sum(dp[valid] * dt[valid], -1) / (npn[valid] * ntn[valid])
        deg = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))
        total, count = total + float(deg.sum()), count + deg.size
    return total / count if count else float("nan")


def jitter(positions, fps: float) -> float:
    """Mean acceleration magnitude of the points (m/s^2).

    Parameters
    ----------
    positions : array_like, shape (T, K, 3)
        World positions in metres (NaN ignored).
    fps : float
        Frame rate of ``positions``.

    Returns
    -------
    float
        Mean of ``|x[t+1] - 2 x[t] + x[t-1]| * fps^2`` over frames and
        points; 0 for fewer than 3 frames.
    """
    x = np.asarray(positions)
    if x.shape[0] < 3:
        return 0.0
    total, count = 0.0, 0
    for a, b in _spans(x.shape[0], overlap=2):
        c = np.asarray(x[a:b], dtype=np.float64)
        acc = vector_norm(c[2:] - 2.0 * c[1:-1] + c[:-2]) * float(fps) ** 2
        acc = acc[np.isfinite(acc)]
        total, count = total + float(acc.sum()), count + acc.size
    return total / count if count else 0.0


def _floor_height(points: np.ndarray) -> float:
    """Floor height: a low percentile of the foot points' heights."""
    z = points[..., 2]
    z = z[np.isfinite(z)]
    if not z.size:
        return 0.0
    return float(np.percentile(z, 2.0))


def foot_contacts(points, fps: float, *, floor: float | None = None,
                  height: float = CONTACT_HEIGHT, speed: float = CONTACT_SPEED,
                  hysteresis: float = 1.0, min_frames: int = 1, vertical: bool = False,
                  vspeed: float | None = None):
    """Which foot points touch the floor on which frames.

    Parameters
    ----------
    points : array_like, shape (T, P, 3)
        Heel / toe positions (metres, Z up).
    fps : float
        Frame rate.
    floor : float, optional
        Floor height; default: the 2nd percentile of all the points' heights.
    height : float
        Maximum height above the floor for a contact (m).
    speed : float
        Maximum horizontal speed for a contact (m/s), measured with central
        differences.
    hysteresis : float
        >= 1. A contact starts where both thresholds hold and lasts while
        the point stays under ``hysteresis`` times them (no chattering
        around a threshold); 1: plain thresholds.
    min_frames : int
        Contacts shorter than this many frames are dropped.
    vertical : bool
        Measure the speed in 3-D (a heel lifting off in place is not a
        contact) instead of horizontally.
    vspeed : float, optional
        Also require a vertical speed (absolute, m/s) below this; the
        hysteresis applies to it too. Default: no vertical limit (the
        sliding metric's definition).

    Returns
    -------
    ndarray of bool, shape (T, P)
    """
    p = np.asarray(points, dtype=np.float64)
    if floor is None:
        floor = _floor_height(p)
    rel = p[..., 2] - floor
    near = rel < height
    if p.shape[0] < 2:
        return near & np.isfinite(p[..., 2])
    vel = vector_norm(np.gradient(p[..., :3 if vertical else 2], axis=0) * float(fps))
    contact = near & (vel < speed)
    if vspeed is not None:
        vz = np.abs(np.gradient(p[..., 2], axis=0) * float(fps))
        contact &= vz < vspeed
    if hysteresis > 1.0:
        loose = (rel < height * hysteresis) & (vel < speed * hysteresis)
        if vspeed is not None:
            loose &= vz < vspeed * hysteresis
        contact = _grow(contact, loose)
    if min_frames > 1:
        contact = _drop_short(contact, int(min_frames))
    return contact


def _runs(mask):
    """Start and end (exclusive) frames of the true runs of a 1-D bool array."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def _grow(strict, loose):
    """Runs of ``loose`` (T, P) that contain at least one ``strict`` frame."""
    out = np.zeros_like(strict)
    loose = loose | strict
    for k in range(strict.shape[1]):
        a, b = _runs(loose[:, k])
        if not a.size:
            continue
        # strict implies loose: summing up to the next run's start counts this run only
        hit = np.add.reduceat(strict[:, k].astype(np.int64), a)
        for s, e in zip(a[hit > 0], b[hit > 0]):
            out[s:e, k] = True
    return out


def _drop_short(mask, n):
    out = mask.copy()
    for k in range(mask.shape[1]):
        a, b = _runs(mask[:, k])
        for s, e in zip(a, b):
            if e - s < n:
                out[s:e, k] = False
    return out


def foot_sliding(keypoints, fps: float, *, floor: float | None = None,
                 height: float = CONTACT_HEIGHT, speed: float = CONTACT_SPEED,
                 names: tuple = KEYPOINTS) -> float:
    """Mean horizontal foot movement per frame while in contact (mm/frame).

    Parameters
    ----------
    keypoints : array_like, shape (T, K, 3)
        Keypoints with heel and toe-tip points (canonical order by default).
    fps : float
        Frame rate.
    floor, height, speed
        See :func:`foot_contacts`.
    names : sequence of str
        Keypoint names of the ``K`` axis (finds :data:`FOOT_POINTS`).

    Returns
    -------
    float
        Mean over contact steps (both frames of a step in contact) of the
        horizontal displacement of the contacting point, in millimetres;
        0 when there is no contact.
    """
    kp = np.asarray(keypoints)
    idx = [list(names).index(n) for n in FOOT_POINTS if n in names]
    if not idx or kp.shape[0] < 2:
        return 0.0
    p = np.asarray(kp[:, idx, :], dtype=np.float64)   # (the foot points only: a long clip's copy)
    contact = foot_contacts(p, fps, floor=floor, height=height, speed=speed)
    step = vector_norm(np.diff(p[..., :2], axis=0))
    both = contact[1:] & contact[:-1] & np.isfinite(step)
    if not both.any():
        return 0.0
    return float(step[both].mean() * 1000.0)
