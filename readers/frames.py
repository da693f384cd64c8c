"""A clip's frames: short gaps filled linearly, the clip resampled to another frame rate.

No ``bpy`` here.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

__all__ = ["MAX_GAP", "fill_gaps", "resample"]


#: Longest gap (frames) :func:`finish_clip` fills by default.
MAX_GAP = 5


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


def resample(clip, fps: float):
    """The clip (a :class:`.base.KeypointClip`) resampled to ``fps`` (linear, NaN-aware), over the same duration.

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
