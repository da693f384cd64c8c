"""The ways a bake goes: dense keypoints, a source skeleton's rotations, a few effectors (no ``bpy``).

Each is a :class:`BakePath`: where its start pose comes from (stage 2) and
how the rig-space solve meets its targets (stage 3). :func:`.core.choose_path`
picks one for a job; :mod:`.sparse` has the sparse one.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from . import tuning
from .filters import smooth_columns
from .source import rest_is_human, source_heights, source_lengths, source_rest_is_human
from .start import network_start, source_start

__all__ = ["BakePath", "DensePath", "SourcePath", "pose_jumps", "ease_start_jumps", "segments_off",
           "dense_second_pass"]


class BakePath:
    """One way of baking a job (:class:`.core.RigBake`): the stages' steps that differ between sources.

    ``start``: where the start pose comes from (``"network"`` or ``"source"``).
    """

    start = "network"
    #: Whether the figures name each effector missed by more than REACH_OK_MM (the effectors are the user's).
    names_missed = False
    #: Whether the targets read the start pose's heads (kept by the carry onto the rig when so).
    start_heads = True

    def __init__(self, job):
        self.job = job

    def start_pose(self, kp, progress, cancel, batch_size):
        """Stage 2: the :class:`.start.StartPose` from keypoints ``kp`` (world heights)."""
        return network_start(self.job, kp, progress, cancel, batch_size)

    def scale(self, scale: float) -> float:
        """The rig's size per source metre, given the leg-length ratio ``scale``."""
        return scale

    def prepare(self, init) -> None:
        """The start pose carried onto the rig (``init``, a RetargetResult), made ready for the solve in place."""

    def targets(self, src, n, scale, init, free):
        """``(targets, info, prior)``: the rows the solve meets, what they are, and the prior on the start pose."""
        raise NotImplementedError

    def iterations(self, iterations: int, free, copied) -> int:
        """The first pass's iterations, given the options' (or the start's) ``iterations``."""
        return iterations

    def first_share(self, iterations: int) -> float:
        """The share of the fit stage's bar the first pass fills."""
        return 1.0

    def prior_decay(self) -> float:
        """The factor by which the prior fades per iteration (1: constant)."""
        return 1.0

    def solve(self, init, targets, info, free, prior, kw, span, context):
        """``(fit, targets, info)``: the first pass from ``init``, and what follows it."""
        from ..retarget.rigsolve import solve_rig

        plan = self.job.plan
        fit = solve_rig(plan.rig, init.quaternions, init.locations, targets, free, plan.root, overwrite=True, **kw)
        self.job.initial = None      # (the fit started from it, in its arrays: not needed any more)
        return fit, targets, info

    def settle(self, quats, locs, heads, iterations: int) -> None:
        """The solved pose's joints settled in place (what the targets leave open), where the path does."""


class DensePath(BakePath):
    """Keypoints of every joint, the network's answer as the start pose."""

    start_heads = False   # (no dense target reads them; the fit poses the rig where it needs heads)

    def prepare(self, init):
        if self.job.n_frames > 8:
            ease_start_jumps(self.job, init)

    def _heights(self, plan, n, scale):
        """Flat-foot heights of the source's feet from its skeleton (metres), or None: from the motion."""
        from .targets import foot_points

        job = self.job
        if job.same_skeleton:
            # the source's feet are the rig's: their flat-foot heights are the rig's own
            # (bone tails, which these heights read, may point anywhere on either)
            fp = foot_points(plan, n)
            return {sd: {nm: h / scale for nm, _b, _o, h in pts if nm in ("ankle", "ball")} for sd, pts in fp.items()}
        if job.source_rig is not None and source_rest_is_human(job.source_rig):
            return source_heights(job.source_rig)
        return None   # no skeleton, or one whose rest says nothing about standing: from the motion

    def targets(self, src, n, scale, init, free):
        from .targets import dense_targets, rest_floor_gap

        job, plan = self.job, self.job.plan
        heights = self._heights(plan, n, scale)
        targets, info = dense_targets(plan, src, job.mask, scale, job.fps, n,
                                      foot_lock=bool(job.options.foot_lock), source_heights=heights,
                                      skeleton_floor=heights is not None and not job.same_skeleton,
                                      source_rest=source_lengths(job.source_rig) if heights is not None else None,
                                      rest_floor_gap=rest_floor_gap(plan, job.object_matrix),
                                      rest_human=rest_is_human(plan),
                                      hands=job.source_rig is None)
        if len(targets):   # the start pose's heads: no dense target reads them; the fit poses the rig again
            init.heads = None
        mapped = {plan.rig.index(b) for b in plan.mapping.entries.values() if plan.rig.has(b)}
        prior = np.array([tuning.DENSE_PRIOR * (1.0 if b in mapped else tuning.DENSE_PRIOR_BETWEEN) for b in free])
        return targets, info, prior

    def iterations(self, iterations, free, copied):
        if self.job.same_skeleton and all(b in copied for b in free):
            # the source's own skeleton: every solved bone already turns exactly as the
            # source's (its joints are met); the solve would only measure
            return 0
        return iterations

    def _flipped(self, init, targets, info, free, kw):
        """Frames whose start pose has a segment turned far round, read before the first pass unwinds them."""
        from ..retarget.rigsolve import solve_rig

        if self.start != "network" or kw["iterations"] <= 0 or not info.rigid:
            return None
        plan = self.job.plan
        start = solve_rig(plan.rig, init.quaternions, init.locations, targets, free, plan.root,
                          **dict(kw, iterations=0, progress=None, all_heads=False, overwrite=True))
        return segments_off(start.residual, targets, info, tuning.DENSE_START_FLIPPED)

    def solve(self, init, targets, info, free, prior, kw, span, context):
        flipped = self._flipped(init, targets, info, free, kw)
        fit, targets, info = super().solve(init, targets, info, free, prior, kw, span, context)
        if kw["iterations"] > 0:
            fit = dense_second_pass(self.job, fit, targets, info, free, kw, flipped)
        return fit, targets, info

    def settle(self, quats, locs, heads, iterations):
        from ..retarget.channels import quat_continuity
        from .targets import settle_clavicles, settle_hinges

        job = self.job
        if job.source_rig is not None or iterations <= 0:
            return   # (a source skeleton's rotations carry their own turn; see docs/tuning.md#settle_hinges)
        # keypoints leave the thighs' and upper arms' turn about themselves open: the knees and
        # elbows as hinges settle it, every joint unmoved
        settle_hinges(job.plan, quats, locs, chunk=job.chunk, locked=job.locked)
        settle_clavicles(job.plan, quats, locs, chunk=job.chunk, locked=job.locked)
        quat_continuity(quats, out=quats)


class SourcePath(DensePath):
    """A source skeleton's own rotations as the start pose (BVH, FBX, an armature whose rest stands)."""

    start = "source"

    def start_pose(self, kp, progress, cancel, batch_size):
        return source_start(self.job, kp)

    def prepare(self, init):
        pass   # (the source's rotations do not jump where the source does not)


def pose_jumps(job, q):
    """Frames (T-1,) bool after which the rotations ``q`` (T, B, 4) jump and the source does not.

    A bone turning more than :data:`.tuning.START_JUMP_DEG` and
    :data:`.tuning.START_JUMP_FACTOR` times its median step in one frame,
    while no source point moves more than :data:`.tuning.START_JUMP_SOURCE`
    times its median step (a cut in the source is the source's).
    """
    T = len(q)
    step = np.empty((max(T - 1, 0), q.shape[1]), np.float32)       # (T-1, B) degrees
    moved = np.empty(max(T - 1, 0))
    src = job.src_m
    for a in range(0, T - 1, _JUMP_CHUNK):       # (a long clip's per-frame temporaries, a chunk at a time)
        b = min(a + _JUMP_CHUNK, T - 1)
        dot = np.abs(np.einsum("tbi,tbi->tb", q[a + 1:b + 1], q[a:b])).clip(0.0, 1.0)
        step[a:b] = np.degrees(2.0 * np.arccos(dot))
        moved[a:b] = np.nan_to_num(vector_norm(src[a + 1:b + 1] - src[a:b]), nan=0.0).max(1)
    jump = (step > np.maximum(tuning.START_JUMP_DEG, tuning.START_JUMP_FACTOR * np.median(step, axis=0))).any(1)
    return jump & (moved < tuning.START_JUMP_SOURCE * np.median(moved))


_JUMP_CHUNK = 8192


def _jump_weights(jump, T, half):
    """A tent (T,) around each jump (between frames t and t + 1), ``half`` frames either side."""
    wgt = np.zeros(T)
    for t in np.flatnonzero(jump):
        lo, hi = max(t - half, 0), min(t + 1 + half, T)
        wgt[lo:hi] = np.maximum(wgt[lo:hi], 1.0 - np.abs(np.arange(lo, hi) - (t + 0.5)) / (half + 1.0))
    return wgt


def ease_start_jumps(job, init):
    """Dense, from the network: ease the start pose across frames where it jumps and the source does not.

    The network answers frame by frame, and now and then its answer takes
    another branch from one frame to the next; on other proportions the
    solve stays near its start and the body jumps with it (see
    docs/tuning.md#start_jump_deg). Such frames (:func:`pose_jumps`) blend
    the start pose into its low-pass over :data:`.tuning.START_JUMP_SECONDS`
    either side. Modifies ``init`` in place.
    """
    from ..retarget.channels import quat_continuity

    q = init.quaternions           # (read; the clip's whole array is copied only where it jumps)
    jump = pose_jumps(job, q)
    if not jump.any():
        return
    T = len(q)
    half = max(int(round(tuning.START_JUMP_SECONDS * job.fps)), 2)
    wgt = _jump_weights(jump, T, half)
    # the low-pass of a window around each stretch of eased frames (with a margin for the filter)
    touched = np.flatnonzero(wgt > 0)
    breaks = np.flatnonzero(np.diff(touched) > 1)
    pad = 4 * half
    # (the driven bones only, all at once: the others keep their rest, and a window is short)
    driven = np.flatnonzero(init.driven) if init.driven is not None else np.arange(q.shape[1])
    for a, b in zip(np.r_[touched[0], touched[breaks + 1]], np.r_[touched[breaks], touched[-1]] + 1):
        lo, hi = max(a - pad, 0), min(b + pad, T)
        low = np.array(q[lo:hi], dtype=np.float64)
        smooth_columns("smooth_rotations", low, driven, "butter", tuning.START_LOW_PASS, job.fps,
                       unit=True, inplace=True, group=max(len(driven), 1))
        quat_continuity(low, out=low)
        part = np.array(q[a:b], dtype=np.float64)
        low = low[a - lo:b - lo]
        low *= np.sign((low * part).sum(-1, keepdims=True))
        part += wgt[a:b, None, None] * (low - part)
        q[a:b] = part / vector_norm(part, keepdims=True)
    init.quaternions = quat_continuity(q, out=q)
    init.heads = None     # (stale now; no dense target reads them: posed where needed)


def segments_off(residual, targets, info, share=None):
    """Frames (T,) bool in which a segment of fixed length is off by ``share`` of its length
    (default :data:`.tuning.DENSE_SECOND_PASS_OFF`)."""
    rows = list(info.rigid)
    lengths = np.array([info.rigid[r] for r in rows])
    weights = np.stack([targets.rows[r]["weight"] for r in rows], 1)
    share = tuning.DENSE_SECOND_PASS_OFF if share is None else share
    return ((residual[:, rows] > share * lengths) & (weights > 0)).any(axis=1)


def dense_second_pass(job, fit, targets, info, free, kw, flipped=None):
    """Dense mode: the frames in which a segment of fixed length still points elsewhere, solved further.

    The network's start pose can have a segment turned far from the
    source's (a child's chest twisted about the spine, its clavicles with
    it): a few steps bring it only part of the way. Those frames only
    (still off after the first pass, or ``flipped``: off in the start pose),
    from where the first pass left them, get
    :data:`.tuning.DENSE_SECOND_PASS_ITERATIONS` more steps; a frame keeps
    them where they lower its error. Returns the new fit.
    """
    from ..retarget.rigsolve import solve_rig

    if not info.rigid:
        return fit
    again = segments_off(fit.residual, targets, info)
    if flipped is not None:
        again |= flipped
    if not again.any():
        return fit
    sub = np.flatnonzero(again)
    # (the prior holds on to where the first pass left them, the wrong way round: weaker)
    tick = kw.get("progress")   # (the bar stays where the first pass ended; a cancel still stops it)
    kw = dict(kw, iterations=tuning.DENSE_SECOND_PASS_ITERATIONS,
              progress=None if tick is None else (lambda done, total: tick(1, 1)),
              prior_rotation=np.asarray(kw["prior_rotation"]) * tuning.DENSE_SECOND_PASS_PRIOR)
    more = solve_rig(job.plan.rig, fit.quaternions[sub], fit.locations[sub], targets.frames(sub), free,
                     job.plan.root, **kw)
    better = (more.residual ** 2).sum(1) < (fit.residual[sub] ** 2).sum(1)
    return fit.take_frames(sub[better], more, keep=better)
