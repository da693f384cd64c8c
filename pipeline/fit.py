"""Stage 3, the fit: the start pose carried onto the rig, then solved on the rig's own skeleton (no ``bpy``).

:class:`FitStage` runs the steps every path shares (the scale, the carry onto
the rig, the solve's options and progress bar, the optional smoothing of
the rotations) and asks the job's :class:`.paths.BakePath` for the rest: its
targets, its passes of the solve and what it settles afterwards. The
whole-clip arrays an earlier step no longer needs are let go as soon as it
is done (:meth:`FitStage._let_go`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.skeleton import JOINTS, Skeleton
from . import tuning
from .filters import smooth, smooth_columns
from .memory import drop_fields
from .options import BakeCancelled
from .plans import free_bones_of, leg_length

__all__ = ["Fit", "FitStage"]

_J = {n: i for i, n in enumerate(JOINTS)}


@dataclass
class Fit:
    """What the fit stage hands the job.

    Attributes
    ----------
    result : RetargetResult
        The pose-bone values to key.
    targets : Targets
        The effector rows' targets and weights (what the figures read).
    target_info : TargetInfo
    residual : ndarray (T, rows)
        The solve's per-row error.
    scale : float
        Rig armature units per source metre.
    """

    result: object
    targets: object
    target_info: object
    residual: np.ndarray
    scale: float


class FitStage:
    """One fit of ``job`` (:class:`.core.RigBake`) along ``path``, reporting to ``progress`` and stopped by ``cancel``."""

    def __init__(self, job, path, progress=None, cancel=None):
        self.job, self.path = job, path
        self.progress, self.cancel = progress, cancel
        self.span = [0.0, 1.0]   # (the part of the fit's bar the solve under way fills)

    def _scale(self, skel) -> float:
        """Rig armature units per source metre: the options' or the legs' ratio, as the path adjusts it."""
        job = self.job
        if job.options.scale is not None:
            return float(job.options.scale)
        src_leg = leg_length(skel)
        plan = job.plan
        scale = plan.leg_length / src_leg if plan.leg_length > 0 and src_leg > 0 else 1.0 / job.unit
        return self.path.scale(scale)

    def _let_go(self, *names):
        """The solve's answer without the arrays ``names``: the start pose holds them now (a long clip: hundreds of MB)."""
        self.job.solved = drop_fields(self.job.solved, *names)

    def _carry(self):
        """The start pose carried onto the rig (:func:`..retarget.solve.retarget`), made ready by the path."""
        from ..retarget.solve import POSE_DTYPE, retarget

        job = self.job
        skel = job.solved.skeleton or Skeleton()
        job.scale = scale = self._scale(skel)
        offsets = np.array(skel.offsets, dtype=np.float64)
        offsets[0] = (job.plan.K.T @ job.plan.rest_head[job.plan.root]) / scale + job.offset
        src_skel = Skeleton(offsets, np.array(skel.end_offsets, dtype=np.float64))
        self._let_go("keypoints")   # (the solved keypoints are not read from here on)
        sol, start = job.solved, job.start_pose
        init = retarget(job.plan, sol.local_rot, sol.root_pos, src_skel, scale=scale,
                        in_place=bool(job.options.in_place), world_rotations=start.world_rotations, chunk=job.chunk,
                        with_heads=self.path.start_heads,
                        dtype=POSE_DTYPE if job.n_frames > tuning.LONG_CLIP_FRAMES else np.float64)
        start.world_rotations = None     # (the source's motion with it): carried onto the rig now
        self._let_go("local_rot", "root_pos", "keypoints")
        self.path.prepare(init)
        job.initial = init
        return init, scale

    def _source_points(self):
        """The source keypoints (armature axes, metres) as the targets read them: without the travel when in place."""
        job = self.job
        src = job.src_m    # (read only: no copy of a whole clip's keypoints)
        if job.options.in_place:   # as baked: the root's horizontal travel removed from every point
            up = job.up
            travel = src[:, _J["pelvis"]] - src[:1, _J["pelvis"]]
            travel -= np.outer(travel @ up, up)
            src = src - travel[:, None]
        return src

    def _progress(self, done, total):
        if self.cancel is not None and self.cancel():
            raise BakeCancelled("bake cancelled")
        if self.progress is not None and total:
            lo, hi = self.span
            self.progress(lo + (hi - lo) * min(done / total, 1.0), "fit")

    def _solve_options(self, prior, iterations, n):
        """The keywords of :func:`..retarget.rigsolve.solve_rig` every pass starts from."""
        job = self.job
        one = job.n_frames == 1
        return dict(prior_rotation=prior, iterations=iterations, locked=job.locked, progress=self._progress,
                    chunk=512, prior_decay=self.path.prior_decay(),
                    prior_floor=tuning.SPARSE_POSE_PRIOR_FLOOR if one else tuning.SPARSE_PRIOR_FLOOR,
                    root_fixed=(np.eye(3) - np.outer(n, n)) if job.options.in_place else None,
                    all_heads=not one or not job.light, device=self._rig_device())

    def _rig_device(self) -> str:
        """The GPU the network solved the clip on (the rig solve's torch path runs there too), else the CPU."""
        dev = str(getattr(self.job.solved, "device", "cpu"))
        return dev if dev.startswith("cuda") else "cpu"

    def _solve(self, init, scale):
        """``(quats, locs, heads, targets, info, iterations)``: the rig-space solve of the path's targets."""
        from ..retarget.rigpose import pose_rig
        from .targets import floor_normal

        job = self.job
        job.up = n = floor_normal(job.object_matrix)
        src = self._source_points()
        free = free_bones_of(job.plan)
        targets, info, prior = self.path.targets(src, n, scale, init, free)
        job.targets, job.target_info = targets, info
        base = job.options.rig_iterations
        iterations = self.path.iterations(int(base if base is not None else tuning.RIG_ITERATIONS[self.path.start]),
                                          free, set(job.start_pose.copied or ()))
        self.span[1] = self.path.first_share(iterations)
        self.free = free
        if not len(targets):
            quats, locs, heads = init.quaternions, init.locations, init.heads
            if heads is None:   # (the start pose eased: no heads kept)
                _, heads = pose_rig(job.plan.rig, quats, locs, chunk=job.chunk, rotations=False)
            job.residual = np.zeros((job.n_frames, 0))
            return quats, locs, heads, targets, info
        # (0 iterations still measures the residuals of the start pose)
        kw = self._solve_options(prior, iterations, n)
        job.rig_device = kw["device"]
        fit, targets, info = self.path.solve(init, targets, info, free, prior, kw, self.span, (src, scale))
        quats, locs, heads = fit.quaternions, fit.locations, fit.heads
        job.residual = fit.residual
        self.path.settle(quats, locs, heads, iterations)
        return quats, locs, heads, targets, info

    def _smooth_rotations(self, quats, locs, driven):
        """The driven bones' rotations and the root's place low-passed over time (the Smoothing option)."""
        from ..retarget.channels import quat_continuity
        from ..retarget.rigpose import pose_rig

        job, o = self.job, self.job.options
        own = job.initial is None     # the fit's arrays (not the start pose's): smoothed in place
        # (the driven bones' tracks only, a few at a time: each is filtered on its own)
        quats = smooth_columns("smooth_rotations", quats, np.flatnonzero(driven), o.smooth,
                               float(o.smooth_strength), job.fps, unit=True, inplace=own)
        quat_continuity(quats, out=quats)
        r = job.plan.root
        loc = smooth("smooth_keypoints", locs[:, r:r + 1], o.smooth, float(o.smooth_strength), job.fps)
        if not own:
            locs = locs.copy()
        locs[:, r] = np.asarray(loc)[:, 0]
        _, heads = pose_rig(job.plan.rig, quats, locs, chunk=job.chunk, rotations=False)
        return quats, locs, heads

    def run(self) -> Fit:
        from ..retarget.solve import RetargetResult

        job, o = self.job, self.job.options
        init, scale = self._carry()
        start_driven, root_bone = init.driven, init.root_bone
        quats, locs, heads, targets, info = self._solve(init, scale)
        init = None
        driven = start_driven.copy()
        driven[self.free] = True
        if o.smooth != "none" and o.smooth_target in ("rotations", "both") and job.n_frames > 2:
            heads = None             # (posed again)
            quats, locs, heads = self._smooth_rotations(quats, locs, driven)
        result = RetargetResult(list(job.plan.bone_names), quats, locs, heads, scale, driven, root_bone)
        return Fit(result, kept_targets(targets, info), info, job.residual, scale)


def kept_targets(targets, info):
    """What the figures read of the targets: the effector rows' targets and weights.

    The other rows' per-frame arrays and the per-frame projections (T, 3, 3)
    only the fit reads (a long clip: hundreds of MB).
    """
    keep = set(info.effectors.values())
    return type(targets)(targets.points, [
        {k: v for k, v in r.items() if k != "proj" and (i in keep or k not in ("target", "weight"))}
        for i, r in enumerate(targets.rows)])
