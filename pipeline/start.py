"""Stage 2, the start pose: the network's answer to the keypoints, or the source skeleton's own rotations (no ``bpy``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.skeleton import CANONICAL, JOINTS, PARENTS
from . import tuning
from .options import BakeCancelled, BakeError
from .plans import cached_plan, leg_length
from .source import shared_bones, source_pose, source_to_armature, source_world_rotations

__all__ = ["StartPose", "network_start", "source_start", "copied_bones"]

_J = {n: i for i, n in enumerate(JOINTS)}


@dataclass
class StartPose:
    """What the solve stage hands the fit.

    Attributes
    ----------
    solved : SolveResult
        Canonical local rotations, root, keypoints and skeleton.
    start : str
        ``"source"`` (the source skeleton's own rotations) or ``"network"``.
    world_rotations : callable or None
        ``(a, b) -> {rig bone: (b - a, 3, 3)}``: the rig bones whose world
        rotation is copied from the source's (:func:`copied_bones`).
    copied : list
        Those rig bones.
    """

    solved: object
    start: str = "network"
    world_rotations: object = None
    copied: list = field(default_factory=list)


def _on_cpu(solver) -> bool:
    """Whether ``solver`` (a :class:`..model.inference.Solver` or a :class:`.cache.LazySolver`) runs on the CPU."""
    solver = solver.load() if hasattr(solver, "load") else solver
    return str(solver.device).startswith("cpu")


def network_start(job, kp, progress, cancel, batch_size, refine_steps=None) -> StartPose:
    """The network's (:class:`..model.inference.Solver`) answer to the keypoints ``kp`` (world heights)."""
    from .cache import get_solver, solve

    o = job.options
    job.solver = job.solver or get_solver(o.device)

    def _progress(done, total):
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        if progress is not None and total:
            progress(min(done / total, 1.0), "solve")

    if len(kp) > tuning.LONG_CLIP_FRAMES and _on_cpu(job.solver):
        batch_size = min(int(batch_size), tuning.LONG_CLIP_BATCH)
    # the batched solve computes in float32: its answer kept so loses nothing and takes half the memory
    kwargs = {"batch_size": int(batch_size), "dtype": np.float32 if len(kp) > 1 else np.float64}
    if refine_steps is not None:
        kwargs["refine_steps"] = refine_steps
    if job.skeleton is not None:
        kwargs["skeleton"] = job.skeleton
    try:
        solved = solve(job.solver, kp, job.mask, mode=job.mode, refine=bool(o.refine), progress=_progress, **kwargs)
    except BakeCancelled:
        raise
    except ValueError as ex:
        raise BakeError(f"the solver rejected the keypoints: {ex}") from None
    return StartPose(solved, "network")


def _canonical_rotations(job, src, splan):
    """The canonical joints' local rotations (T, 22, 3, 3) from the source's pose, in the body frame, and which it gives.

    A chunk of frames at a time: a whole clip's pose (T, B, 3, 3) would take gigabytes.
    """
    from ..model.rotations_np import change_basis
    from ..retarget.chunks import frame_chunks

    M = job.plan.K.T @ (job.minv[:3, :3] * job.unit)    # world -> the body frame the network would have used
    T = src.num_frames
    local = np.empty((T, len(JOINTS), 3, 3))
    given = None
    for a, b in frame_chunks(T, job.chunk):
        W, _ = source_pose(src, a, b)
        rot, given, _ = source_world_rotations(src, W, splan)
        rb = change_basis(M, rot)
        local[a:b, 0] = rb[:, 0]
        for j in range(1, len(JOINTS)):
            local[a:b, j] = np.swapaxes(rb[:, PARENTS[j]], -1, -2) @ rb[:, j]
    return local, given


def _copied_turns(job, src, copied):
    """``turns(a, b)``: the copied bones' world rotations in frames a:b, from the source's pose there.

    The carry onto the rig asks a chunk at a time (a whole clip's would take
    72 bytes per frame and bone).
    """
    from ..model.rotations_np import matmul_each

    R = source_to_armature(job.minv, job.unit)
    Qs, Qt = src.rig.rest_rotation(), job.rig.rest_rotation()

    def turns(a, b):
        W, _ = source_pose(src, a, b)
        # the source bone's turn from rest (source world), in the rig's axes, from the rig bone's
        # rest: R W Qs^T R^T Qt, as (R (W C)) with the constant C = Qs^T R^T Qt (2-D products)
        out = {}
        for tb, sb in copied:
            WC = matmul_each(W[None, :, sb], (Qs[sb].T @ R.T @ Qt[tb])[None])[0]
            out[tb] = np.swapaxes(matmul_each(np.swapaxes(WC, -1, -2)[None], R.T[None])[0], -1, -2)
        return out

    return turns


def source_start(job, kp) -> StartPose:
    """The source skeleton's own rotations as the start pose (``kp``: keypoints at world heights)."""
    from ..model.result import SolveResult

    src = job.source_rig
    splan = cached_plan(src.rig, src.mapping)
    local, given = _canonical_rotations(job, src, splan)
    leg = splan.leg_length if splan.leg_length > 0 else leg_length(CANONICAL)
    skel = CANONICAL.scaled(leg / leg_length(CANONICAL))
    root = kp[:, _J["pelvis"]].copy()    # (not a view: the fit lets the keypoints go)
    copied = copied_bones(job)
    turns = _copied_turns(job, src, copied) if copied else None
    missing = [JOINTS[j] for j in range(len(JOINTS)) if not given[j]]
    if missing:
        job.warnings.append("the source skeleton has no bone for " + ", ".join(missing)
                            + " (they follow their parent)")
    solved = SolveResult(local, root, kp, skel, np.zeros(len(kp)), "dense", {})
    return StartPose(solved, "source", turns, [tb for tb, _ in copied or ()])


def shared_with_source(job):
    """``(pairs, same)`` of :func:`.source.shared_bones` for the job's source and rig, computed once."""
    if job.shared is None:
        job.shared = shared_bones(job.source_rig, job.plan, job.minv, job.unit)
        job.same_skeleton = job.shared[1]
    return job.shared


def copied_bones(job):
    """(rig bone, source bone) pairs whose world rotation is the source's, where that applies; or None.

    - The **same skeleton**: every shared bone turns exactly as in the
      source, relative to its rest; the clip comes back as it was, fingers
      included.
    - Otherwise only in-chain bones no canonical joint stands for (a CMU
      ``LHipJoint``, a second neck bone) take the source's turn.
    """
    from ..retarget.rigsolve import free_bones

    rig, plan = job.rig, job.plan
    shared, same = shared_with_source(job)
    if not shared:
        return None
    if not same:
        mapped = {rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and rig.has(b)}
        chain = set(free_bones(rig, mapped, plan.root)) - mapped
        shared = [(b, sb) for b, sb in shared if b in chain]
        if not shared:
            return None
    else:
        job.warnings.append("same skeleton as the source: its bones' rotations are copied")
    return shared
