"""The one Levenberg-Marquardt loop, batched over frames, on numpy or torch arrays (no ``bpy``).

:func:`levenberg_marquardt` runs a *problem definition* on a batch of
frames: the canonical refinement (:mod:`.refine`) and the rig solve
(:mod:`..retarget.levenberg`) are two. A problem holds its backend
(:class:`ArrayOps`, ``problem.ops``) and gives

- ``start()``: the state (a dict of per-frame arrays, ``"cost"`` among
  them) of the starting pose;
- ``step(state, damping)``: the damped normal equations of every frame,
  solved: ``(step, ok)`` (``ok``: the frames whose solve succeeded, or
  ``None`` for all);
- ``candidate(state, step)``: the state of the pose the step leads to;
- ``fade_prior(state, share)`` (where the prior fades): the prior's weight
  set to ``share`` of its start;
- ``take(rows)`` (where frames may finish early): its per-frame constants
  kept for these frames only.

The loop owns what both share: the damping schedule (:class:`Damping`),
the per-frame acceptance (a step is kept where it does not raise the
frame's cost), the prior's fade, and convergence (a step count; a step
length; frames that stop improving leave the batch).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from .rotations_np import axis_angle_to_matrix as _expmap_np, cross as _cross_np
from .rotations_np import matrix_to_axis_angle as _logmap_np, orthonormalise as _orthonormalise_np
from .rotations_np import skew as _skew_np, vector_norm as _norm_np

__all__ = ["ArrayOps", "NUMPY", "torch_ops", "Damping", "levenberg_marquardt"]


@dataclass(frozen=True)
class Damping:
    """The damping schedule: ``start`` on every frame, times ``decay`` (not below ``floor``) after
    an accepted step, times ``grow`` after a rejected one."""

    start: float
    decay: float
    floor: float
    grow: float = 10.0


def levenberg_marquardt(problem, *, iterations, damping: Damping, prior_decay=1.0, prior_floor=0.0,
                        min_iterations=0, tol=None, rtol=0.0, keep=None, progress=None):
    """Iterate ``problem`` on its batch of frames; returns ``(state, iterations done)``.

    While the prior fades (``prior_decay`` < 1) its weight drops every
    iteration down to ``prior_floor`` times its start. Once
    ``min_iterations`` are done, the loop stops when no frame's step is
    longer than ``tol`` (if given), and a frame whose accepted step lowered
    its cost by less than ``rtol`` of it leaves the batch; the returned
    state then holds the entries ``keep`` of every frame.
    """
    ops = problem.ops
    cur = problem.start()
    mu = ops.full(ops.length(cur["cost"]), damping.start)
    out = _Finished(ops, keep, ops.length(cur["cost"])) if rtol > 0 else None
    done = 0
    for it in range(int(iterations)):
        if it and prior_decay < 1.0:   # continuation: the prior fades, the targets are met exactly
            cur = problem.fade_prior(cur, max(prior_decay ** it, prior_floor))
        step, ok = problem.step(cur, mu)
        cand = problem.candidate(cur, step)
        better = cand["cost"] <= cur["cost"]
        if ok is not None:
            better = better & ok
        finished = None
        if out is not None and it + 1 >= min_iterations:
            fin = better & (cur["cost"] - cand["cost"] <= rtol * cur["cost"])
            if bool(fin.any()):
                finished = np.flatnonzero(ops.numpy(fin) > 0)
        cur = _select(ops, better, cand, cur)
        mu = ops.where(better, ops.clamp_min(mu * damping.decay, damping.floor), mu * damping.grow)
        done = it + 1
        if finished is not None:
            cur, mu = out.retire(problem, cur, mu, finished)
            if out.all_finished():
                break
        # every frame converged: a further step would move nothing that matters
        if tol is not None and it + 1 >= min_iterations and ops.absmax(step) < tol:
            break
        if progress is not None:
            progress()
    return (cur if out is None else out.merged(cur)), done


def _select(ops, better, cand, cur):
    """Per frame, the candidate where it is ``better``, else the current state (cached entries go)."""
    if ops.synchronous:   # (on a GPU the tests would stall the stream)
        if bool(better.all()):   # (the usual case: the candidate as it is, no per-frame choice)
            return cand
        if not bool(better.any()):
            return cur
    n = ops.length(better)
    return {k: ops.where(better.reshape((n,) + (1,) * (v.ndim - 1)), v, cur[k]) for k, v in cand.items()}


class _Finished:
    """The frames that left the batch (their ``keep`` entries), and where the others sit."""

    def __init__(self, ops, keep, n):
        self.ops, self.keep = ops, tuple(keep or ())
        self.rows = np.arange(n)   # the batch's frames still iterated
        self.out = None

    def retire(self, problem, cur, mu, finished):
        """``(state, damping)`` of the frames left after the frames ``finished`` (positions) are stored."""
        ops = self.ops
        if self.out is None:
            self.out = {k: ops.copy(cur[k]) for k in self.keep}
        rows = ops.index(self.rows[finished])
        for k, v in self.out.items():
            v[rows] = cur[k][ops.index(finished)]
        left = np.setdiff1d(np.arange(len(self.rows)), finished)
        self.rows = self.rows[left]
        if not len(left):
            return cur, mu
        idx = ops.index(left)
        problem.take(idx)
        return {k: v[idx] for k, v in cur.items() if not k.startswith("_")}, mu[idx]

    def all_finished(self) -> bool:
        return len(self.rows) == 0

    def merged(self, cur):
        if self.out is None:
            return cur
        if len(self.rows):
            rows = self.ops.index(self.rows)
            for k, v in self.out.items():
                v[rows] = cur[k]
        return self.out


class ArrayOps:
    """What the problems and the loop need of an array library, beyond the operators both share (numpy)."""

    name = "numpy"
    xp = np
    #: Whether reading a value back (``bool(a.all())``) costs nothing more than the computation.
    synchronous = True
    #: Whether the last accepted pose is exact enough to hand back (float64 numpy arrays).
    exact = True

    def __init__(self, dtype=np.float64):
        self.dtype = dtype

    def asarray(self, a):
        return np.array(a, dtype=self.dtype)

    def length(self, a) -> int:
        return a.shape[0]

    def index(self, idx):
        return idx

    def astype(self, a, dtype):
        return a.astype(dtype, copy=False)

    def full(self, n, value):
        return np.full(n, value, dtype=self.dtype)

    def zeros(self, shape):
        return np.zeros(shape, dtype=self.dtype)

    def empty(self, shape):
        return np.empty(shape, dtype=self.dtype)

    def T(self, a):
        return np.swapaxes(a, -1, -2)

    def swap01(self, a):
        return np.swapaxes(a, 0, 1)

    def swap12(self, a):
        return np.swapaxes(a, 1, 2)

    def contiguous(self, a):
        return np.ascontiguousarray(a)

    def permute(self, a, axes):
        return a.transpose(axes)

    def diagonal(self, a):
        return np.diagonal(a, axis1=-2, axis2=-1)

    def cat(self, parts, axis):
        return np.concatenate(parts, axis)

    def where(self, c, a, b):
        return np.where(c, a, b)

    def clamp_min(self, a, lo):
        return np.maximum(a, lo)

    def copy(self, a):
        return a.copy()

    def absmax(self, a) -> float:
        return float(np.abs(a).max())

    def norm(self, a):
        return _norm_np(a, keepdims=True)

    def cross(self, a, b):
        return _cross_np(a, b)

    def skew(self, v):
        return _skew_np(v)

    def logmap(self, R):
        return _logmap_np(R)

    def expmap(self, v):
        return _expmap_np(v)

    def orthonormalise(self, R):
        return _orthonormalise_np(R)

    def finite_or_zero(self, a):
        return a if np.isfinite(a).all() else np.where(np.isfinite(a), a, 0.0)

    def solve_spd(self, H, g):
        """``(x, ok)``: ``H x = -g`` per frame for symmetric positive definite ``H`` (n, m, m); ``ok``
        false (and ``x`` not to be used) where a pivot was not positive or ``x`` not finite.

        One frame: LAPACK through scipy (numpy's and torch's wrappers cost
        more than the solve). Where torch is loaded, factorised by torch (on
        the one thread the caller allows): numpy's LAPACK hands a 70 x 70
        system to its thread pool, which next to torch's spinning workers
        costs milliseconds. Without either numpy's batched solve is as fast
        (docs/tuning.md#small_batch).
        """
        lapack = _lapack() if H.shape[0] == 1 else None
        if lapack is not None:
            c, info = lapack[0](H[0], lower=1)   # LAPACK dpotrf/dpotrs directly (no wrapper checks)
            if info != 0:
                return np.zeros_like(g), np.zeros(1, dtype=bool)
            x, info = lapack[1](c, g[0], lower=1)
            x = -x[None]
            return x, np.isfinite(x).all(1) & (info == 0)
        if "torch" in sys.modules:
            import torch

            x, ok = _cholesky(torch, torch.from_numpy(H), torch.from_numpy(g))
            x = x.numpy()
            return x, ok.numpy() & np.isfinite(x).all(1)
        return _numpy_solve(H, g)

    def numpy(self, a):
        return a


def _numpy_solve(H, g):
    """``(x, ok)`` by numpy's LU solve; a singular frame is not ``ok`` (the others still step)."""
    try:
        x = -np.linalg.solve(H, g[..., None])[..., 0]
        return x, np.isfinite(x).all(1)
    except np.linalg.LinAlgError:
        x = np.zeros_like(g)
        ok = np.zeros(len(H), dtype=bool)
        for i in range(len(H)):
            try:
                x[i] = -np.linalg.solve(H[i], g[i])
                ok[i] = True
            except np.linalg.LinAlgError:
                pass
        return x, ok


def _cholesky(torch, H, g):
    """``(x, ok)``: ``H x = -g`` by a batched Cholesky factorisation (``ok``: a positive definite ``H``)."""
    L, info = torch.linalg.cholesky_ex(H)
    return -torch.cholesky_solve(g[..., None], L)[..., 0], info == 0


@functools.cache
def _lapack():
    """scipy's ``(dpotrf, dpotrs)``, or ``None`` without scipy (optional: not bundled with Blender's
    Python); imported on a single pose's first solve, not by a bake, which never needs them."""
    try:
        from scipy.linalg.lapack import dpotrf, dpotrs
    except Exception:  # pragma: no cover
        return None
    return dpotrf, dpotrs


class _TorchOps(ArrayOps):
    """:class:`ArrayOps` on torch tensors of ``dtype`` on ``device``."""

    name = "torch"

    def __init__(self, torch, dtype, device):
        super().__init__(dtype)
        self.torch = self.xp = torch
        self.device = torch.device(device)
        self.synchronous = self.device.type == "cpu"
        # (products of float32 steps drift: a caller poses unit quaternions again; float64's do not)
        self.exact = self.dtype == torch.float64

    def asarray(self, a):
        return self.torch.as_tensor(a, dtype=self.dtype, device=self.device)

    def index(self, idx):
        return self.torch.as_tensor(idx, device=self.device)

    def astype(self, a, dtype):
        return a.to(dtype)

    def full(self, n, value):
        return self.torch.full((n,), value, dtype=self.dtype, device=self.device)

    def zeros(self, shape):
        return self.torch.zeros(shape, dtype=self.dtype, device=self.device)

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.dtype, device=self.device)

    def T(self, a):
        return a.transpose(-1, -2)

    def swap01(self, a):
        return a.transpose(0, 1)

    def swap12(self, a):
        return a.transpose(1, 2)

    def contiguous(self, a):
        return a.contiguous()

    def permute(self, a, axes):
        return a.permute(axes)

    def diagonal(self, a):
        return self.torch.diagonal(a, dim1=-2, dim2=-1)

    def cat(self, parts, axis):
        return self.torch.cat(parts, axis)

    def where(self, c, a, b):
        return self.torch.where(c, a, b)

    def clamp_min(self, a, lo):
        return a.clamp_min(lo)

    def copy(self, a):
        return a.clone()

    def absmax(self, a):
        return float(a.abs().max())

    def norm(self, a):
        return a.norm(dim=-1, keepdim=True)

    def cross(self, a, b):
        return self.torch.cross(a, b, dim=-1)

    def skew(self, v):
        from .rotations import skew

        return skew(v)

    def logmap(self, R):
        from .rotations import matrix_to_axis_angle

        return matrix_to_axis_angle(R)

    def expmap(self, v):
        from .rotations import axis_angle_to_matrix

        return axis_angle_to_matrix(v)

    def orthonormalise(self, R):
        from .rotations import matrix_to_rot6d, rot6d_to_matrix

        return rot6d_to_matrix(matrix_to_rot6d(R))

    def finite_or_zero(self, a):
        return self.torch.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)

    def solve_spd(self, H, g):
        return _cholesky(self.torch, H, g)

    def numpy(self, a):
        return a.double().cpu().numpy()


NUMPY = ArrayOps()


def torch_ops(dtype=None, device="cpu") -> ArrayOps:
    """The torch backend in ``dtype`` (float32 when not given) on ``device``."""
    import torch

    return _TorchOps(torch, torch.float32 if dtype is None else dtype, device)
