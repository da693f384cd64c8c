"""What every family of target rows shares: the rows' bookkeeping, bones by joint, fades over time (no ``bpy``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...model.rotations_np import vector_norm
from ...model.skeleton import JOINTS, KEYPOINTS
from .. import tuning

_J = {n: i for i, n in enumerate(JOINTS)}
_K = {n: i for i, n in enumerate(KEYPOINTS)}


def _blend_frames(fps) -> int:
    """:data:`..tuning.CONTACT_BLEND` in frames at ``fps`` (four where the rate is unknown)."""
    return max(int(round(tuning.CONTACT_BLEND * float(fps))), 1) if fps else 4


#: The bone each effector's reach is measured from.
CHAIN_ROOTS = {"hand_l": "upperarm_l", "hand_r": "upperarm_r", "foot_l": "thigh_l", "foot_r": "thigh_r"}

_CHAINS = (("hand_l", "upperarm_l", ("upperarm_l", "forearm_l", "hand_l")),
           ("hand_r", "upperarm_r", ("upperarm_r", "forearm_r", "hand_r")),
           ("foot_l", "thigh_l", ("thigh_l", "calf_l", "foot_l")),
           ("foot_r", "thigh_r", ("thigh_r", "calf_r", "foot_r")),
           ("head", "pelvis", ("pelvis", "head")))


@dataclass
class TargetInfo:
    """What was built, for the figures and the messages.

    Attributes
    ----------
    effectors : dict
        Effector joint name -> row index (its position or relative row).
    contacts : ndarray of bool (T, 4) or None
        Source contacts of (ankle_l, ball_l, ankle_r, ball_r).
    contact_rows : list of int
    floor_points : list of int
        Point indices (rig heels and balls, see :func:`foot_points`).
    floor_offset : float
        Vertical shift given to the root target (armature units): the median
        correction of the source's planted points onto the rig's floor; six
        effectors: the shift of every effector (``SparsePath._lift``).
    reach : dict
        Effector -> chain length (armature units), for reachability.
    clamped : dict
        Effector -> its real targets (T, 3) where some lay out of reach and
        the row aims at the nearest reachable point instead.
    rigid : dict
        Row index -> length (armature units) of the direction rows whose two
        heads keep their distance (their whole error counts).
    sole : float
        How far (armature units) the rig's floor lies below its lowest rest
        foot point (:func:`rig_sole`; 0 where the source is a skeleton; six
        effectors: the rig's rest gap where its rest stands).
    foot_pitch : dict
        ``"foot_l"``/``"foot_r"`` -> degrees by which the source's foot
        direction was pitched onto the rig's flat foot
        (:func:`foot_pitch_corrections`).
    """

    effectors: dict = field(default_factory=dict)
    contacts: np.ndarray | None = None
    contact_rows: list = field(default_factory=list)
    floor_points: list = field(default_factory=list)
    floor_offset: float = 0.0
    reach: dict = field(default_factory=dict)
    clamped: dict = field(default_factory=dict)
    rigid: dict = field(default_factory=dict)
    sole: float = 0.0
    foot_pitch: dict = field(default_factory=dict)


def floor_normal(object_matrix) -> np.ndarray:
    """World up expressed in armature axes (unit vector)."""
    m = np.asarray(object_matrix, dtype=np.float64)[:3, :3]
    n = m[2].copy()          # world z of an armature point p is m[2] . p + const
    return n / np.linalg.norm(n)


def _rig_thumb(plan, hand):
    """The tip of the rig's thumb at rest (its last bone's tail: a BVH's End Site), in the hand bone's frame, or None."""
    from ...retarget.mapping import thumb_end

    rig = plan.rig
    c = thumb_end(rig, hand)
    if c is None:
        return None
    d = rig.tail[c] - rig.head[hand]
    if float(np.linalg.norm(d)) < 1e-9:
        return None
    return rig.rest_rotation()[hand].T @ d


def _bone(plan, joint):
    b = plan.mapping.entries.get(joint)
    if b is None or not plan.rig.has(b):
        return None
    return plan.rig.index(b)


def _smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _around(flags):
    """``(idx, last, nxt)`` of ``flags`` (T,) bool: each frame's index, the last flagged frame at or before it
    (``-big`` where none) and the next at or after it (``big`` where none), ``big`` beyond any distance."""
    T = len(flags)
    idx = np.arange(T)
    big = 10 * T + 10
    last = np.maximum.accumulate(np.where(flags, idx, -big))
    nxt = np.minimum.accumulate(np.where(flags, idx, big)[::-1])[::-1]
    return idx, last, nxt


def _ramp(contact, blend):
    """Weights 1 on contact frames fading to 0 over ``blend`` frames around them."""
    c = np.asarray(contact, dtype=bool)
    if not c.any():
        return np.zeros(c.shape[0])
    idx, last, nxt = _around(c)
    d = np.minimum(idx - last, nxt - idx).astype(np.float64)
    return _smoothstep(1.0 - d / (blend + 1.0))


def _ramp_within(contact, blend, lead=0):
    """Weights fading in over ``blend`` frames from ``lead`` frames before each run of ``contact``, out over ``blend`` after it.

    With ``lead`` under ``blend`` the fade-in lies mostly within the run
    (:func:`_ramp` centres it on the run's first frame): a foot landing
    heel first rolls flat as its ankle stops, not before.
    """
    c = np.asarray(contact, dtype=bool)
    if not c.any():
        return np.zeros(c.shape[0])
    idx, first, next_first = _around(_run_starts(c))
    start = np.where(c, first, next_first)            # (before a run: the run to come)
    w_in = _smoothstep(np.clip((idx - start + lead + 1.0) / (blend + 1.0), 0.0, 1.0))
    _, last, _ = _around(c)
    after = ~c & (last >= 0)
    w_out = np.where(after, w_in[np.maximum(last, 0)] * _smoothstep(1.0 - (idx - last) / (blend + 1.0)), 0.0)
    return np.where(c, w_in, np.maximum(np.where(next_first <= idx[-1], w_in, 0.0), w_out))


def _run_means(v, runs):
    """``v`` (T, D) with every frame of each run of True frames of ``runs`` at the run's mean (others as they are)."""
    v = np.asarray(v, dtype=np.float64)
    runs = np.asarray(runs, dtype=bool)
    out = v.copy()
    if not runs.any():
        return out
    starts = _run_starts(runs)
    rid = np.cumsum(starts) - 1                       # each frame's run (meaningful in a run)
    nrun = int(starts.sum())
    sums = np.zeros((nrun,) + v.shape[1:])
    np.add.at(sums, rid[runs], v[runs])
    means = sums / np.bincount(rid[runs], minlength=nrun).reshape((-1,) + (1,) * (v.ndim - 1))
    out[runs] = means[rid[runs]]
    return out


def _run_starts(flags):
    """The first frame of each run of True frames of ``flags`` (T,) bool, as (T,) bool."""
    return flags & ~np.concatenate([[False], flags[:-1]])


def _level(v, n):
    """The unit direction (T, 3) of ``v`` (T, 3) across the up direction ``n`` (3,)."""
    h = v - (v @ n)[:, None] * n
    return h / np.maximum(vector_norm(h, keepdims=True), 1e-12)


def _nearest(frames):
    """Each frame's nearest frame (T,) int among ``frames`` (T,) bool (at least one True)."""
    idx, last, nxt = _around(np.asarray(frames, dtype=bool))
    return np.clip(np.where(idx - last <= nxt - idx, last, nxt), 0, len(idx) - 1)


def _median_length(src, a, b, mask):
    ok = mask[:, a] & mask[:, b]
    if not ok.any():
        return float("nan")
    return float(np.median(np.linalg.norm(src[ok, b] - src[ok, a], axis=-1)))


def _world_from(n):
    """A rotation taking ``n`` to +Z (so contact heights read along world up)."""
    from ...model.rotations_np import rotation_between

    return rotation_between(np.asarray(n, dtype=np.float64), np.array([0.0, 0.0, 1.0]))
