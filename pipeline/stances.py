"""How far apart in height a clip's feet stand over time (no ``bpy``).

The bake keeps one floor per clip (the targets' floor rule: where the feet
usually stand). A clip whose stances lie at very different heights, raised
ground (stairs, a playground, uneven terrain), a dancer on tiptoe, or a
markerless capture whose estimate of the body's height drifts (a phone
video), then has some stances through the rig's floor and others above it;
nothing in the motion tells these apart (docs/lab-notes.md), so the bake
says so instead of guessing (:func:`stance_spread`).
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from . import tuning
from .targets.common import _K

__all__ = ["stance_runs", "stance_spread"]

#: Per side, the foot point whose stances are read: the ball of the foot where given (the lowest),
#: else the ankle (six effectors).
_POINTS = (("toe_l", "foot_l"), ("toe_r", "foot_r"))


def stance_runs(z, speed, ok, fps) -> list:
    """``[(start, stop)]``: runs of frames where a point stands: slow and low for its neighbourhood in time.

    ``z`` (T,) heights, ``speed`` (T,) m/s, ``ok`` (T,) given. Low: within
    :data:`.tuning.STANCE_LOW` of its lowest height within
    :data:`.tuning.STANCE_WINDOW` seconds either side (a jump's flight never
    counts: its landing is near); slower than :data:`.tuning.STANCE_SPEED`;
    runs shorter than :data:`.tuning.STANCE_RUN` seconds are dropped.
    """
    w = max(int(round(tuning.STANCE_WINDOW * fps)), 1)
    h = np.where(ok, z, np.inf)
    padded = np.concatenate([np.full(w, np.inf), h, np.full(w, np.inf)])
    low = np.lib.stride_tricks.sliding_window_view(padded, 2 * w + 1).min(axis=1)
    on = ok & (speed < tuning.STANCE_SPEED) & (h <= low + tuning.STANCE_LOW)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
    least = max(int(round(tuning.STANCE_RUN * fps)), 2)
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= least]


def _weighted_percentile(values, weights, q):
    """The ``q``-th percentile (0-100) of ``values`` with ``weights`` (a step function of the sorted values)."""
    order = np.argsort(values)
    c = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(c, q / 100.0 * c[-1]), len(c) - 1)])


def stance_spread(kp, mask, fps, n=(0.0, 0.0, 1.0)) -> float | None:
    """How far apart (metres, along ``n``) the clip's stances stand: the 10th to 90th percentile of their
    heights, each stance (:func:`stance_runs`, its median height) weighted by its length; ``None`` with
    fewer than two stances.

    ``kp`` (T, 32, 3) canonical keypoints, ``mask`` (T, 32) bool.
    """
    kp = np.asarray(kp)
    mask = np.asarray(mask, dtype=bool)
    n = np.asarray(n, dtype=np.float64)
    if len(kp) < 3 or not fps or fps <= 0:
        return None
    values, lengths = [], []
    for names in _POINTS:
        k = next((_K[nm] for nm in names if mask[:, _K[nm]].sum() >= 3), None)
        if k is None:
            continue
        ok = mask[:, k]
        p = np.where(ok[:, None], kp[:, k], np.nan).astype(np.float64)
        z = np.nan_to_num(p @ n, nan=0.0)
        speed = np.nan_to_num(vector_norm(np.gradient(p, axis=0)) * float(fps), nan=np.inf)
        for a, b in stance_runs(z, speed, ok, fps):
            values.append(float(np.median(z[a:b])))
            lengths.append(float(b - a))
    if len(values) < 2:
        return None
    values, lengths = np.array(values), np.array(lengths)
    return _weighted_percentile(values, lengths, 90.0) - _weighted_percentile(values, lengths, 10.0)
