"""The rig solve's Levenberg-Marquardt loop, one implementation on numpy or torch arrays (no ``bpy``).

:func:`levenberg_marquardt` runs on a chunk of frames of a
:class:`.rigsolve._Problem` (the problem definition: the posed bones, the
target rows, the prior, the locks) with an :class:`ArrayOps` backend:

- :data:`NUMPY` (float64; the normal equations in float32 where the prior
  stays): a few frames (a pose being dragged: a torch call's fixed cost
  decides a live solve's speed) and every chunk where torch is not loaded;
- :func:`torch_ops` (float32 by default): large chunks where the network
  already loaded torch, and CUDA.

Both take the same steps (``tests/pure/test_pipeline.py`` checks that they
give the same pose).
"""

from __future__ import annotations

import sys

import numpy as np

from ..model.rotations_np import axis_angle_to_matrix as axis_angle_to_matrix_np
from ..model.rotations_np import matrix_to_axis_angle as matrix_to_axis_angle_np

__all__ = ["ArrayOps", "NUMPY", "torch_ops", "levenberg_marquardt", "jacobian"]


class ArrayOps:
    """What the loop needs of an array library, beyond the operators both share."""

    name = "numpy"
    xp = np
    #: Whether the last accepted pose is exact enough to hand back (float64) instead of posing again.
    exact = True

    def __init__(self, dtype=np.float64):
        self.dtype = dtype

    def asarray(self, a):
        return np.array(a, dtype=self.dtype)

    def consts(self, pb) -> dict:
        return dict(pslot=pb.pslot, poff=pb.poff, C=pb.C, prior=pb.prior, root_fixed=pb.root_fixed,
                    lock_f=pb.lock_f, lock_e=pb.lock_e)

    def fk(self, pb, basis, loc):
        return pb.fk.numpy(basis, loc)

    def normal_dtype(self, prior_decay):
        # float32 normal equations where the prior stays (dense bakes: every bone held by its
        # targets); where it fades towards nothing (six effectors) they grow too stiff for
        # float32 (docs/tuning.md#small_batch)
        return np.float32 if prior_decay >= 1.0 else np.float64

    def astype(self, a, dtype):
        return a.astype(dtype, copy=False)

    def full(self, n, value):
        return np.full(n, value, dtype=self.dtype)

    def T(self, a):
        return np.swapaxes(a, -1, -2)

    def swap01(self, a):
        return np.swapaxes(a, 0, 1)

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

    def logmap(self, R):
        return matrix_to_axis_angle_np(R)

    def expmap(self, v):
        return axis_angle_to_matrix_np(v)

    def solve(self, H, g):
        """``-H^-1 g`` per frame; 0 for a frame whose ``H`` is singular.

        Where torch is loaded, factorised by torch (on the one thread the
        caller allows): numpy's LAPACK hands a 70 x 70 system to its thread
        pool, which next to torch's spinning workers costs milliseconds
        instead of tens of microseconds. Without torch numpy's batched solve
        is as fast (docs/tuning.md#small_batch).
        """
        if "torch" in sys.modules:
            import torch

            return _cholesky_step(torch, torch.from_numpy(H), torch.from_numpy(g)).numpy()
        try:
            return -np.linalg.solve(H, g[..., None])[..., 0]
        except np.linalg.LinAlgError:   # a singular frame: the others still step, it stays
            out = np.zeros_like(g)
            for i in range(len(H)):
                try:
                    out[i] = -np.linalg.solve(H[i], g[i])
                except np.linalg.LinAlgError:
                    pass
            return out

    def numpy(self, a):
        return a


class _TorchOps(ArrayOps):
    """:class:`ArrayOps` on torch tensors (the problem's constants as tensors of ``dtype``)."""

    name = "torch"
    exact = False   # (products of float32 steps drift: the caller poses the unit quaternions)

    def __init__(self, torch, dtype):
        super().__init__(dtype)
        self.torch = self.xp = torch

    def asarray(self, a):
        return self.torch.as_tensor(a, dtype=self.dtype)

    def consts(self, pb):
        return pb.torch()

    def fk(self, pb, basis, loc):
        return pb.fk(basis, loc)

    def normal_dtype(self, prior_decay):
        return self.dtype

    def astype(self, a, dtype):
        return a.to(dtype)

    def full(self, n, value):
        return self.torch.full((n,), value, dtype=self.dtype)

    def T(self, a):
        return a.transpose(-1, -2)

    def swap01(self, a):
        return a.transpose(0, 1)

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

    def logmap(self, R):
        from ..model.rotations import matrix_to_axis_angle

        return matrix_to_axis_angle(R)

    def expmap(self, v):
        from ..model.rotations import axis_angle_to_matrix

        return axis_angle_to_matrix(v)

    def solve(self, H, g):
        return _cholesky_step(self.torch, H, g)

    def numpy(self, a):
        return a.double().cpu().numpy()


NUMPY = ArrayOps()


def torch_ops(dtype=None) -> ArrayOps:
    """The torch backend in ``dtype`` (float32 when not given)."""
    import torch

    return _TorchOps(torch, torch.float32 if dtype is None else dtype)


def _cholesky_step(torch, H, g):
    """``-H^-1 g`` per frame for symmetric positive definite ``H`` (n, m, m); 0 where singular."""
    L, info = torch.linalg.cholesky_ex(H)
    step = -torch.cholesky_solve(g[..., None], L)[..., 0]
    return torch.where((info == 0)[:, None], step, torch.zeros_like(step))


def jacobian(pb, wproj, pts, X, ops, out=None):
    """The weighted Jacobian ``(n, 3R, 3F [+ 3])`` of every target row.

    Row ``r``'s block for a world-axis increment ``d_k`` of free bone ``k``
    (the subtree of ``k`` turns about its head ``X_k``) is
    ``sum_p C[r,p] A[p,k] d_k x (p - X_k) = -[v_rk]_x d_k`` with
    ``v_rk = q_rk - M_rk X_k``, weighted by the row's projection ``a_r``:
    column ``j`` of ``a_r (-[v]_x)`` is ``a_r (e_j x v)``, written out.
    Only the blocks of :attr:`_Problem.pair_r` / ``pair_k`` (the bones a
    row can move with) are computed, in a ``(pairs, n, ...)`` layout, and
    written into a zeroed matrix; ``out``, a matrix this function returned
    before for the same problem and frame count, is written again in place
    (the zeros stay where they were). The root translation's block is
    ``Mroot_r a_r``.
    """
    n, R, nF = pts.shape[0], pb.R, pb.nF
    P = pts.shape[1]
    rs = pb.root_slot
    if ops.name == "numpy":
        dt = pts.dtype
        pair_CA, pair_M, pair_r, pair_k, pair_fslot, Mroot = (
            pb.pair_CA.astype(dt, copy=False), pb.pair_M.astype(dt, copy=False), pb.pair_r, pb.pair_k,
            pb.pair_fslot, pb.Mroot.astype(dt, copy=False))
    else:
        tt = pb.torch()
        pair_CA, pair_M, pair_r, pair_k, pair_fslot, Mroot = (
            tt[k].to(pts.dtype) if tt[k].is_floating_point() else tt[k]
            for k in ("pair_CA", "pair_M", "pair_r", "pair_k", "pair_fslot", "Mroot"))
    S = pair_M.shape[0]
    width = 3 * nF + (3 if rs >= 0 else 0)
    Jd = ops.xp.zeros((n, R, 3, width), dtype=pts.dtype) if out is None else out.reshape(n, R, 3, width)
    if S:
        swap = ops.swap01
        # q[s, t] = sum_p CA[r_s, p, k_s] pts[t, p]: one (S, P) x (P, 3n) product
        q = (pair_CA @ swap(pts).reshape(P, n * 3)).reshape(S, n, 3)
        v = q - pair_M[:, None, None] * swap(X)[pair_fslot]                   # (S, n, 3)
        a = swap(wproj)[pair_r]                                                # (S, n, 3, 3)
        vx, vy, vz = v[..., 0:1], v[..., 1:2], v[..., 2:3]                    # (S, n, 1)
        a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]                          # columns of a_r: (S, n, 3)
        J5 = Jd[..., :3 * nF].reshape(n, R, 3, nF, 3)   # a view: splitting one axis never copies
        # (two index arrays apart: the pairs' axis comes first, then frames and the block's rows)
        J5[:, pair_r, :, pair_k, 0] = a2 * vy - a1 * vz
        J5[:, pair_r, :, pair_k, 1] = a0 * vz - a2 * vx
        J5[:, pair_r, :, pair_k, 2] = a1 * vx - a0 * vy
    if rs >= 0:
        Jd[..., 3 * nF:] = Mroot[None, :, None, None] * wproj
    return Jd.reshape(n, 3 * R, width)


def levenberg_marquardt(pb, ops, basis, loc, tgt, wts, proj, *, iterations, prior_decay, prior_floor,
                        min_iterations, tol, rtol=0.0, progress=None):
    """Levenberg-Marquardt on one chunk of frames of the problem ``pb`` with the backend ``ops``.

    ``basis`` (n, posed, 3, 3), ``loc`` (n, posed, 3): the start (and the
    prior's pose); ``tgt`` (n, R, 3), ``wts`` (n, R), ``proj`` (R or n, R,
    3, 3): the rows' targets, weights and projections. Each iteration solves
    the damped normal equations of every frame at once; a frame keeps a step
    that does not raise its cost. While the prior fades (``prior_decay`` <
    1) its weight drops every iteration down to ``prior_floor`` times its
    start. Once ``min_iterations`` are done, a frame whose accepted step
    lowered its cost by less than ``rtol`` of it is finished and leaves the
    batch (the others go on without it).

    Returns ``(basis, loc, iterations, posed)`` as float64 numpy: ``posed``
    is ``(W, X, pts)`` of the last accepted pose where the backend is exact
    (float64), else None (the caller poses the unit quaternions again).
    """
    lm = _Chunk(pb, ops, basis, loc, tgt, wts, proj, prior_decay)
    done = 0
    for it in range(int(iterations)):
        if it and prior_decay < 1.0:   # continuation: the prior fades, the targets are met exactly
            lm.fade(lm.c["prior"], max(prior_decay ** it, prior_floor))
        step, finished = lm.iterate(rtol if it + 1 >= min_iterations else 0.0)
        done = it + 1
        if finished is not None:
            lm.retire(finished)
        # every frame converged: a further step would move nothing that matters
        if (ops.absmax(step) < tol and it + 1 >= min_iterations) or lm.all_finished():
            break
        if progress is not None:
            progress()
    return lm.result(done)


class _Chunk:
    """The state of :func:`levenberg_marquardt` on the frames of a chunk still being solved."""

    def __init__(self, pb, ops, basis, loc, tgt, wts, proj, prior_decay):
        self.pb, self.ops = pb, ops
        c = self.c = ops.consts(pb)
        fslot, rs = pb.fslot, pb.root_slot
        basis, loc = ops.asarray(basis), ops.asarray(loc)
        proj = ops.asarray(proj)
        if proj.ndim == 3:
            proj = proj[None]
        self.n_all = n = basis.shape[0]
        self.rows = np.arange(n)                                     # the chunk's frames still solved
        self.basis0T = ops.copy(ops.T(basis[:, fslot]))
        self.tgt = ops.asarray(tgt)
        self.wproj = ops.asarray(wts)[..., None, None] * proj       # (n, R, 3, 3)
        self.wdiag = ops.diagonal(self.wproj)                       # (n, R, 3)
        self.ne = ops.normal_dtype(prior_decay)
        self.lam = ops.full(n, 1e-3)
        self.pw = c["prior"]
        fk0 = ops.fk(pb, basis, loc)
        self.root_head0 = ops.copy(fk0[1][:, rs]) if rs >= 0 else None
        self.basis, self.loc = basis, loc
        self.W, self.X, self.Bm, self.pts, self.r_t, self.r_prior, self.cost = self.evaluate(basis, loc, fk0)
        self.JtJ = self.Jtr = self.Jbuf = None
        self.diag_idx = np.arange(3 * pb.nF + (3 if rs >= 0 else 0))
        self.out = None    # (full-chunk arrays, made when the first frames finish)

    def evaluate(self, basis, loc, fk=None):
        pb, ops, c = self.pb, self.ops, self.c
        n = basis.shape[0]
        W, X, Bm = ops.fk(pb, basis, loc) if fk is None else fk
        pts = X[:, c["pslot"]] + (W[:, c["pslot"]] @ c["poff"][None, :, :, None])[..., 0]
        comb = ops.xp.einsum("rp,tpi->tri", c["C"], pts)
        if pb.diag_only:
            r_t = self.wdiag * (comb - self.tgt)
        else:
            r_t = (self.wproj @ (comb - self.tgt)[..., None])[..., 0]
        r_p = ops.logmap(self.basis0T @ basis[:, pb.fslot]).reshape(n, -1)
        if pb.root_slot >= 0:
            r_p = ops.cat([r_p, X[:, pb.root_slot] - self.root_head0], 1)
        r_prior = self.pw * r_p
        cost = (r_t ** 2).sum((1, 2)) + (r_prior ** 2).sum(1)
        return W, X, Bm, pts, r_t, r_prior, cost

    def fade(self, prior, share):
        """The prior's weight set to ``share`` of its start (the cost follows without a new evaluation)."""
        new_pw = prior * share
        ratio = new_pw / self.pw
        self.cost = self.cost - (self.r_prior ** 2).sum(1) + ((self.r_prior * ratio) ** 2).sum(1)
        self.r_prior = self.r_prior * ratio
        self.pw = new_pw

    def _normal_equations(self):
        pb, ops, c = self.pb, self.ops, self.c
        n, nF, rs = self.basis.shape[0], pb.nF, pb.root_slot
        if self.JtJ is None:   # (after a step every frame rejected, the pose and so J^T J, J^T r are unchanged)
            Jd = self.Jbuf = jacobian(pb, ops.astype(self.wproj, self.ne), ops.astype(self.pts, self.ne),
                                      ops.astype(self.X, self.ne), ops, out=self.Jbuf)
            JdT = ops.T(Jd)
            self.JtJ = JdT @ Jd
            self.Jtr = (JdT @ ops.astype(self.r_t.reshape(n, 3 * pb.R), self.ne)[..., None])[..., 0]
        H = ops.astype(self.JtJ, ops.dtype)
        if H is self.JtJ:   # (kept for the next iteration: the damping is added to a copy)
            H = ops.copy(H)
        Wf = self.W[:, pb.fslot]
        gp = (Wf @ self.r_prior[:, :3 * nF].reshape(n, nF, 3, 1))[..., 0].reshape(n, 3 * nF)
        if rs >= 0:
            gp = ops.cat([gp, self.r_prior[:, 3 * nF:]], 1)
        # prior rows: r = w (eta_acc + W_k^T d_k): H += w^2 I, g += w W_k r
        d = self.diag_idx
        H[:, d, d] += self.pw ** 2
        g = ops.astype(self.Jtr, ops.dtype) + self.pw * gp
        H[:, d, d] += self.lam[:, None] * H[:, d, d] + 1e-9
        if pb.lock_f:   # locked bone axes: stiff springs on (W_k e_a) . d_k
            u = (Wf[:, c["lock_f"]] @ c["lock_e"][None, :, :, None])[..., 0]        # (n, Lk, 3)
            for j, f_i in enumerate(pb.lock_f):
                sl = slice(3 * f_i, 3 * f_i + 3)
                H[:, sl, sl] += 1e6 * (u[:, j, :, None] * u[:, j, None, :])
        if rs >= 0 and pb.root_fixed is not None:   # root translation held in these directions
            H[:, 3 * nF:, 3 * nF:] += 1e6 * c["root_fixed"]
        return H, g, Wf

    def iterate(self, rtol):
        """One damped step of every frame; returns ``(step, finished)``: finished frames (positions in
        the batch) whose accepted step lowered the cost by less than ``rtol`` of it."""
        pb, ops, c = self.pb, self.ops, self.c
        nF, rs = pb.nF, pb.root_slot
        H, g, Wf = self._normal_equations()
        step = ops.solve(H, g)
        if rs >= 0 and pb.root_fixed is not None:   # (the spring alone let it creep by micrometres)
            step[:, 3 * nF:] -= step[:, 3 * nF:] @ ops.T(c["root_fixed"])
        d_w = step[:, :3 * nF].reshape(-1, nF, 3)
        basis, loc = self.basis, self.loc
        nb_basis = ops.copy(basis)
        nb_basis[:, pb.fslot] = basis[:, pb.fslot] @ ops.expmap((ops.T(Wf) @ d_w[..., None])[..., 0])   # (bone frame)
        nloc = loc
        if rs >= 0:
            nloc = ops.copy(loc)
            nloc[:, rs] = loc[:, rs] + (ops.T(self.Bm[:, rs]) @ step[:, 3 * nF:, None])[..., 0]
        cand = self.evaluate(nb_basis, nloc)
        cost = self.cost
        better = cand[-1] <= cost
        finished = None
        if rtol > 0:
            fin = better & (cost - cand[-1] <= rtol * cost)
            if bool(fin.any()):
                finished = np.flatnonzero(ops.numpy(fin) > 0)
        if bool(better.all()):   # (the usual case: the candidate as it is, no per-frame choice)
            self.basis, self.loc, (self.W, self.X, self.Bm, self.pts, self.r_t, self.r_prior, self.cost) = \
                nb_basis, nloc, cand
        elif bool(better.any()):
            self.basis = ops.where(better[:, None, None, None], nb_basis, basis)
            self.loc = ops.where(better[:, None, None], nloc, loc)
            self.W, self.X, self.Bm, self.pts, self.r_t, self.r_prior = (
                ops.where(better.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
                for a, b in zip(cand[:-1], (self.W, self.X, self.Bm, self.pts, self.r_t, self.r_prior)))
            self.cost = ops.where(better, cand[-1], cost)
        self.lam = ops.where(better, ops.clamp_min(self.lam / 3.0, 1e-7), self.lam * 10.0)
        if bool(better.any()):
            self.JtJ = None
        return step, finished

    def all_finished(self) -> bool:
        return len(self.rows) == 0

    _PER_FRAME = ("basis", "loc", "basis0T", "tgt", "wproj", "wdiag", "lam", "root_head0", "W", "X", "Bm", "pts",
                  "r_t", "r_prior", "cost")

    def retire(self, finished):
        """Frames ``finished`` (positions in the batch) stored as they are and left out of the next steps."""
        ops = self.ops
        ix = (lambda a: a) if ops.name == "numpy" else ops.xp.as_tensor   # noqa: E731
        if self.out is None:
            self.out = {k: ops.copy(getattr(self, k)) for k in ("basis", "loc", "W", "X", "pts")}
        rows = ix(self.rows[finished])
        for k, v in self.out.items():
            v[rows] = getattr(self, k)[ix(finished)]
        keep = np.setdiff1d(np.arange(len(self.rows)), finished)
        self.rows = self.rows[keep]
        if not len(keep):
            return
        idx = ix(keep)
        for k in self._PER_FRAME:
            v = getattr(self, k)
            if v is not None:
                setattr(self, k, v[idx])
        self.JtJ = self.Jtr = self.Jbuf = None

    def result(self, done):
        """``(basis, loc, iterations, posed)`` of every frame of the chunk, as float64 numpy."""
        ops = self.ops
        if self.out is None:
            basis, loc, W, X, pts = self.basis, self.loc, self.W, self.X, self.pts
        else:
            if len(self.rows):
                rows = self.rows if ops.name == "numpy" else ops.xp.as_tensor(self.rows)
                for k, v in self.out.items():
                    v[rows] = getattr(self, k)
            basis, loc, W, X, pts = (self.out[k] for k in ("basis", "loc", "W", "X", "pts"))
        posed = (W, X, pts) if ops.exact else None
        return ops.numpy(basis), ops.numpy(loc), done, posed
