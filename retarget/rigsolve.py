"""The rig-space solve: batched least squares on the target rig's own skeleton (no ``bpy``).

The network's answer, carried onto the rig by :func:`.solve.retarget`, is a
good pose but it was computed on the canonical stand-in skeleton: wherever
the rig differs (proportions, spine and neck counts, clavicle and hip
placement, joint orients) positions are lost. This module pulls them back on
the rig itself. It is the last step of every bake and of Solve Frame / Live
Solve.

Unknowns
--------
For every *free* bone ``k`` (the mapped bones and every bone on the chains
between them, unmapped in-between bones included) a rotation increment
``eta_k`` in the bone's own posed frame (``Basis_k <- Basis_k exp(eta_k)``),
plus a translation of the root bone's head. Locked rotation axes
(``PoseBone.lock_rotation``) keep their value.

Residuals
---------
Every target is a linear combination of *points* attached to bones (a bone
head, or any point rigidly attached to a bone, given in the bone's rest
frame), compared with a target vector per frame::

    r = w(t) * a * (sum_i c_i p_i(t) - target(t))

``a`` weights the three axes (``(0, 0, 1)``: height only) or is a 3x3
projection (``n n^T``: the height along the floor normal ``n`` of a rotated
armature). A position target
has one point; a bone-direction target has two (``p_child - p_parent`` equal
to the rig's own rest distance times the source's unit direction, so a rig
with other proportions still moves like the performer); a relative effector
target (the hand relative to the shoulder at the rig's scale) has two too.
A prior keeps every free bone near its initial rotation and the root near its
initial position; it decides what the targets leave open (twist about bone
axes, unobserved joints).

Solver
------
Levenberg-Marquardt, batched over frames (every frame is an independent
small problem: 3 unknowns per free bone + 3). The Jacobian of a point ``p``
on bone ``b`` with respect to ``eta_k`` (``k`` an ancestor of ``b`` or ``b``
itself) is ``-[p - X_k]_x W_k`` (``X_k``, ``W_k``: the posed head and
rotation of ``k``); with respect to the root translation it is the identity.
Only the (row, bone) blocks a row's points hang below are computed (a dense
bake: a fifth of them), and a free bone that moves no target point (the
hand whose only point is its own head) is no unknown at all. Normal
equations are formed and solved per frame (torch's batched Cholesky, or
numpy), in chunks of frames; a step that does not lower a frame's cost is
rejected for that frame and its damping raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import contextlib
import os

import numpy as np

from ..model.rotations_np import vector_norm
from .levenberg import NUMPY, levenberg_marquardt, torch_ops
from .rigfk import RestFK, posed_points
from .rigproblem import cached_problem
from .threads import blas_threads, torch_threads

__all__ = ["Targets", "RigSolveResult", "free_bones", "solve_rig", "posed_points"]


#: Storage of the targets' per-frame arrays and of the solve's heads and residuals: a long
#: clip's dozens of rows take hundreds of MB in float64; the solve itself runs a chunk at a
#: time in float64, and float32 keeps a metre to a tenth of a micrometre (docs/tuning.md#row_dtype).
ROW_DTYPE = np.float32


@dataclass
class Targets:
    """Targets of a rig-space solve, built with :meth:`point` and :meth:`add`.

    Attributes
    ----------
    points : list of (int, ndarray (3,))
        ``(bone, offset)``: a point rigidly attached to ``bone`` at ``offset``
        in the bone's rest frame (``(0, 0, 0)``: the head; ``(0, L, 0)``: the
        tail of a bone of length ``L``).
    rows : list of dict
        One per target: ``coef`` {point index: coefficient}, ``target`` (T, 3)
        armature units, ``weight`` (T,), ``proj`` (3, 3) or per frame (T, 3, 3) (from ``axes``),
        ``name``, ``kind``.
    """

    points: list = field(default_factory=list)
    rows: list = field(default_factory=list)

    def point(self, bone: int, offset=(0.0, 0.0, 0.0)) -> int:
        """Index of the point attached to ``bone`` at ``offset`` (added once)."""
        off = np.asarray(offset, dtype=np.float64).reshape(3)
        for i, (b, o) in enumerate(self.points):
            # (plain comparisons: np.allclose is slow for a call a Live Solve tick makes ~100 times)
            if b == bone and abs(o[0] - off[0]) <= 1e-12 and abs(o[1] - off[1]) <= 1e-12 \
                    and abs(o[2] - off[2]) <= 1e-12:
                return i
        self.points.append((int(bone), off))
        return len(self.points) - 1

    def add(self, coef: dict, target, weight, *, axes=(1.0, 1.0, 1.0), name: str = "", kind: str = "",
            perpendicular: bool = False) -> None:
        """Add one target row (see the class docstring); NaN targets get weight 0.

        ``perpendicular``: only the part of the error across the target's
        direction counts (per frame): a direction target that ignores length,
        for segments whose length changes (a source with hip or clavicle
        bones the rig maps differently).
        """
        target = np.asarray(target, dtype=np.float64)
        weight = np.broadcast_to(np.asarray(weight, dtype=ROW_DTYPE), target.shape[:1]).copy()
        bad = ~np.isfinite(target).all(-1)
        weight[bad] = 0.0
        target = np.where(bad[:, None], 0.0, target)
        axes = np.asarray(axes, dtype=np.float64)
        proj = np.diag(axes) if axes.shape == (3,) else axes if axes.ndim == 3 else axes.reshape(3, 3)
        if perpendicular:
            n = np.linalg.norm(target, axis=-1, keepdims=True)
            u = np.where(n > 1e-12, target / np.where(n > 1e-12, n, 1.0), 0.0)
            proj = (proj if proj.ndim == 3 else proj[None]) @ (np.eye(3) - u[:, :, None] * u[:, None, :])
            target = np.zeros_like(target)   # the perpendicular part of the target itself is zero
        if proj.ndim == 3:
            proj = proj.astype(ROW_DTYPE)
        self.rows.append(dict(coef=dict(coef), target=target.astype(ROW_DTYPE), weight=weight, proj=proj,
                              name=name, kind=kind))

    def frames(self, idx) -> "Targets":
        """The same rows for frames ``idx`` only (their targets, weights and per-frame projections)."""
        return Targets(self.points, [dict(r, target=r["target"][idx], weight=r["weight"][idx],
                                          proj=r["proj"][idx] if r["proj"].ndim == 3 else r["proj"])
                                     for r in self.rows])

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class RigSolveResult:
    """Output of :func:`solve_rig`.

    Attributes
    ----------
    quaternions : ndarray (T, B, 4)
        Pose-bone rotations (w, x, y, z), sign-continuous.
    locations : ndarray (T, B, 3)
        Pose-bone locations (only the root bone's changes).
    heads : ndarray (T, B, 3)
        Posed heads in armature space.
    residual : ndarray (T, R)
        Unweighted residual length of each target row after the solve
        (armature units; height only for ``axes=(0, 0, 1)`` rows).
    iterations : int
    """

    quaternions: np.ndarray
    locations: np.ndarray
    heads: np.ndarray
    residual: np.ndarray
    iterations: int

    def take_frames(self, sub, other, keep=None) -> "RigSolveResult":
        """Frames ``sub`` replaced, in place, by ``other``'s (a solve of those frames; ``keep``: of its
        frames, those to take, one per entry of ``sub``); rotations kept sign-continuous. Returns self."""
        from .channels import quat_continuity

        keep = slice(None) if keep is None else keep
        self.quaternions[sub] = other.quaternions[keep]
        self.locations[sub] = other.locations[keep]
        self.residual[sub] = other.residual[keep]
        if self.heads is not None and other.heads is not None:
            self.heads[sub] = other.heads[keep]
        quat_continuity(self.quaternions, out=self.quaternions)
        self.iterations = max(self.iterations, other.iterations)
        return self


def free_bones(rig, bones, root: int) -> list:
    """Bones on the chains from ``root`` to each of ``bones`` (both ends included).

    Bones that are not descendants of ``root`` are ignored.
    """
    out = {int(root)}
    for b in bones:
        b = int(b)
        if b == root:
            continue
        if not rig.is_ancestor(root, b):
            continue
        out.add(b)
        out.update(rig.path(root, b))
    return sorted(out, key=lambda i: (rig.depth[i], i))


#: A frame whose accepted step lowers its cost by less than this share is finished: the others
#: go on without it (docs/tuning.md#finished_rtol).
FINISHED_RTOL = 1e-4

#: Chunks of up to this many frames are solved in float64 numpy (:data:`.levenberg.NUMPY`):
#: for tiny problems a torch call's fixed cost (and its thread pool's hand-offs)
#: outweighs the work.
SMALL_BATCH = 32

#: Frames per chunk of the numpy path on long clips (two run at once): small
#: chunks keep its arrays in cache (docs/tuning.md#numpy_chunk).
NUMPY_CHUNK = 128
#: Threads the numpy path may solve chunks of one clip on (a batch's worker processes raise it
#: to the cores and let THREADS_ALLOWED say how many are free).
MAX_THREADS = 2
#: How many of those threads may run now (called as each chunk finishes), or ``None``: all.
#: A batch's worker processes share the cores: one left alone at the end of a batch takes
#: the cores the others freed (``cli.batch``).
THREADS_ALLOWED = None
#: Frames per chunk of the torch path on a GPU: thousands fill it, and one chunk's Jacobian
#: stays far below its memory (docs/tuning.md#gpu_chunk).
GPU_CHUNK = 16384


def solve_rig(rig, quats, locations, targets: Targets, free, root: int, *, prior_rotation=0.02,
              prior_translation=0.02, iterations: int = 8, locked=None, chunk: int = 1024, tol: float = 1e-5,
              rtol: float = FINISHED_RTOL,
              prior_decay: float = 0.3, prior_floor: float = 1e-3, root_fixed=None,
              dtype=None, progress=None, all_heads: bool = True, backend: str = "auto",
              device: str = "cpu", overwrite: bool = False) -> RigSolveResult:
    """Solve the rig's free bones and root translation to meet ``targets``.

    Parameters
    ----------
    rig : RigDescription
    quats : ndarray (T, B, 4)
        Initial pose-bone rotations (w, x, y, z): the start and the prior.
    locations : ndarray (T, B, 3)
        Initial pose-bone locations.
    targets : Targets
    free : sequence of int
        Bones whose rotation is solved (see :func:`free_bones`).
    root : int
        The bone whose head translation is solved (the pelvis); ``-1``: none.
    prior_rotation : float or ndarray (F,)
        Weight of the prior per radian of rotation away from the initial pose
        (per free bone when an array), in the targets' units (armature units).
    prior_translation : float
        Weight of the prior per armature unit of root movement.
    iterations : int
        Levenberg-Marquardt iterations.
    locked : dict, optional
        Bone index -> (3,) bool: rotation axes (bone frame) kept as they are.
    chunk : int
        Frames per batch (bounds memory).
    tol : float
        Stop early once no frame's step exceeds this (radians / units).
    rtol : float
        A frame whose step lowers its cost by less than this share of it
        (once the prior has faded) is finished: it leaves the batch.
    root_fixed : ndarray (3, 3), optional
        Projection onto the directions (armature space) in which the root's
        translation must not move (``I - n n^T``: horizontally, for an
        in-place bake).
    prior_decay, prior_floor : float
        The prior's weight is multiplied by ``prior_decay`` every iteration,
        down to ``prior_floor`` times its start: the first steps stay near the
        initial pose (its basin: natural twist, the network's posture), the
        last ones meet reachable targets exactly (an effector is not left
        millimetres short because the prior pulls back).
    dtype : torch.dtype, optional
        Precision of the torch path (default float32).
    backend : {"auto", "numpy", "torch"}
        ``auto``: torch where ``device`` is a GPU, else numpy. ``numpy``: float64 numpy (:data:`.levenberg.NUMPY`,
        float32 normal equations where the prior stays; long clips in
        chunks of :data:`NUMPY_CHUNK` frames on two threads): on the CPU as
        fast as torch or faster, also where the network has loaded torch
        (docs/tuning.md#numpy_chunk), and a bake that needs no network never
        imports torch. ``torch``: chunks of more than :data:`SMALL_BATCH`
        frames in torch on ``device``, the same loop (on a GPU, chunks of
        :data:`GPU_CHUNK` frames).
    device : str or torch.device
        Where the torch path runs (default the CPU).
    progress : callable, optional
        ``progress(done_frames, total_frames)``.
    all_heads : bool
        Posed heads of every bone (default); ``False``: only of the bones the
        solve poses (the free bones, the targets' bones and their
        ancestors), NaN elsewhere (a pose being dragged needs no more).
    overwrite : bool
        Write the solved values into ``quats`` and ``locations`` (float64
        arrays the caller gives up; a long clip's copies take hundreds of
        MB) instead of copies of them.

    Returns
    -------
    RigSolveResult
    """
    quats = np.asarray(quats)           # (float32 or float64; read a chunk at a time in float64)
    locations = np.asarray(locations)
    T = quats.shape[0]
    on_gpu = not str(device).startswith("cpu")
    if on_gpu and dtype is None:   # (a GPU's float64 is fast enough, and its steps are the numpy path's)
        import torch

        dtype = torch.float64
    pb = cached_problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype)
    run = _ChunkSolve(rig, quats, locations, targets, pb, overwrite=overwrite, all_heads=all_heads,
                      progress=progress)
    # while the prior fades, keep iterating until it is nearly gone
    min_iterations = int(np.ceil(np.log(prior_floor) / np.log(prior_decay))) if 0 < prior_decay < 1 else 0
    min_iterations = min(min_iterations, int(iterations))
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"backend must be 'auto', 'numpy' or 'torch', got {backend!r}")
    use_torch = int(iterations) > 0 and T > SMALL_BATCH and (backend == "torch" or (backend == "auto" and on_gpu))
    run.use_torch, run.device = use_torch, device
    run.lm = dict(iterations=iterations, prior_decay=prior_decay, prior_floor=prior_floor,
                  min_iterations=min_iterations, tol=tol, rtol=rtol)
    workers = 1 if use_torch or int(iterations) <= 0 else max(min(MAX_THREADS, os.cpu_count() or 1), 1)
    # (the residuals alone, no step: no Jacobian to keep in cache, so the caller's chunks)
    step = int(chunk) if use_torch or int(iterations) <= 0 else min(int(chunk), NUMPY_CHUNK)
    if use_torch and on_gpu:
        step = max(step, GPU_CHUNK)
    # numpy's BLAS on one thread: its small products and 70 x 70 solves gain nothing from
    # more, and two chunks at once each starting BLAS threads crawl
    # (and torch's, where it is loaded and the numpy path runs: set once here, not by each
    # pooled chunk: two threads setting torch's thread count at once race)
    with blas_threads(1), (contextlib.nullcontext() if use_torch else torch_threads(1)):
        # (with the cores shared, a short clip's two or three unequal chunks gain less than they cost)
        if workers < 2 or T <= step or (THREADS_ALLOWED is not None and T < 4 * step):
            done_iterations = 0
            for c0 in range(0, T, step):
                c1 = min(T, c0 + step)
                tick = None if progress is None else (lambda: progress(c0 + (c1 - c0) * 0.999, T))
                done_iterations = max(done_iterations, run.store(*run.solve(c0, c1, tick)))
        else:
            done_iterations = _solve_on_threads(run, T, step, workers)
    from .channels import quat_continuity
    return RigSolveResult(quat_continuity(run.out_quats, out=run.out_quats), run.out_locs, run.heads, run.resid,
                          done_iterations)


def _solve_on_threads(run, T, step, workers) -> int:
    """Chunks of ``step`` frames solved on up to ``workers`` threads; the most iterations a chunk took.

    numpy on one core per chunk (its arrays release the GIL): several chunks at once
    (as many as THREADS_ALLOWED says, asked again as each finishes); progress (and
    with it a cancel) in this thread as chunks finish.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    done_iterations = 0
    pool = ThreadPoolExecutor(max_workers=workers)
    starts = list(range(0, T, step))[::-1]
    running = set()
    try:
        while starts or running:
            limit = workers if THREADS_ALLOWED is None else max(1, min(workers, int(THREADS_ALLOWED())))
            while starts and len(running) < limit:
                c0 = starts.pop()
                running.add(pool.submit(run.solve, c0, min(T, c0 + step), None))
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:   # stored, not kept (a long clip's results would add up)
                done_iterations = max(done_iterations, run.store(*fut.result()))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return done_iterations


class _ChunkSolve:
    """One :func:`solve_rig` call's chunks of frames: each solved (:meth:`solve`, on any thread), then
    stored into the whole clip's outputs (:meth:`store`, on the calling thread)."""

    def __init__(self, rig, quats, locations, targets, pb, *, overwrite, all_heads, progress):
        T, nb = quats.shape[:2]
        self.quats, self.locations, self.targets, self.pb, self.progress = quats, locations, targets, pb, progress
        self.T = T
        self.use_torch, self.device = False, "cpu"
        self.lm = {}
        self.out_quats = quats if overwrite else quats.copy()      # (a chunk reads its frames before it stores them)
        self.out_locs = locations if overwrite else locations.copy()
        self.heads = np.empty((T, nb, 3), ROW_DTYPE) if all_heads else np.full((T, nb, 3), np.nan, ROW_DTYPE)
        self.resid = np.zeros((T, pb.R), ROW_DTYPE)
        self.posed_idx = np.array(pb.posed, dtype=np.int64)
        self.rest_fk = None
        if pb.unposed.size and all_heads:   # (once per problem: problems are cached)
            self.rest_fk = pb.__dict__.get("rest_fk")
            if self.rest_fk is None:
                self.rest_fk = pb.rest_fk = RestFK(rig, {int(b): i for i, b in enumerate(pb.posed)}, pb.unposed)

    def stacked(self, key, c0, c1):
        """The rows' targets (t, R, 3) or weights (t, R) of frames c0:c1 (per chunk: a long clip's
        whole (T, R, 3) would be a copy of every target)."""
        if not self.pb.R:
            return np.zeros((c1 - c0, 0, 3) if key == "target" else (c1 - c0, 0))
        return np.stack([row[key][c0:c1] for row in self.targets.rows], 1)

    def solve(self, c0, c1, tick):
        """Frames ``c0:c1`` solved: ``(c0, c1, quaternions, locations, heads, unposed heads, residuals,
        iterations)`` of the posed bones."""
        from ..model.rotations_np import matrix_to_quat, quat_to_matrix

        pb, quats, posed_idx = self.pb, self.quats, self.posed_idx
        n = c1 - c0
        basis = quat_to_matrix(np.asarray(quats[c0:c1][:, posed_idx], dtype=np.float64))
        loc = np.asarray(self.locations[c0:c1][:, posed_idx], dtype=np.float64)
        proj = pb.projections(self.targets, c0, c1, self.T)
        tgt, w = self.stacked("target", c0, c1), self.stacked("weight", c0, c1)
        kw = dict(self.lm, progress=tick)
        posed = None
        if int(self.lm["iterations"]) <= 0:   # only the residuals of the start pose
            it = 0
        elif self.use_torch and n > SMALL_BATCH:
            basis, loc, it, posed = levenberg_marquardt(pb, torch_ops(pb.dtype, self.device), basis, loc, tgt, w, proj,
                                                     **kw)
        else:
            with torch_threads(1):
                basis, loc, it, posed = levenberg_marquardt(pb, NUMPY, basis, loc, tgt, w, proj, **kw)
        if it:   # rotations through unit quaternions
            q = matrix_to_quat(basis)
            q /= vector_norm(q, keepdims=True)
            if posed is None:   # (products of float32 steps drift: the pose of the unit quaternions)
                basis = quat_to_matrix(q)
        else:
            q = quats[c0:c1][:, posed_idx]
        if posed is None:
            W, X, _ = pb.fk.numpy(basis, loc)
            pts = posed_points(W, X, pb.pslot, pb.poff)
        else:   # float64 steps: the pose the solve ended on is the unit quaternions' to 1e-15
            W, X, pts = posed
        # unweighted residual lengths
        comb = np.einsum("rp,tpi->tri", pb.C, pts)
        res = vector_norm((proj @ (comb - tgt)[..., None])[..., 0])
        X_rest = self.rest_fk.numpy(W, X, quats[c0:c1], self.locations[c0:c1]) if self.rest_fk is not None else None
        return c0, c1, q, loc, X, X_rest, res, it

    def store(self, c0, c1, q, loc, X, X_rest, res, it):
        """A solved chunk written into the outputs (progress reported); its iterations."""
        posed_idx = self.posed_idx
        self.out_quats[c0:c1, posed_idx] = q
        self.out_locs[c0:c1, posed_idx] = loc
        self.heads[c0:c1, posed_idx] = X
        if X_rest is not None:
            self.heads[c0:c1, self.rest_fk.bones] = X_rest
        self.resid[c0:c1] = res
        if self.progress is not None:
            self.progress(c1, self.T)
        return it
