"""The rig solve as a problem of the one Levenberg-Marquardt loop (:mod:`..model.lm`; no ``bpy``).

:func:`levenberg_marquardt` runs :func:`.lm.levenberg_marquardt` on a chunk
of frames of a :class:`.rigproblem.Problem` (the posed bones, the target
rows, the prior, the locks) with an :class:`~.lm.ArrayOps` backend:

- :data:`NUMPY` (float64; the normal equations in float32 where the prior
  stays): a few frames (a pose being dragged: a torch call's fixed cost
  decides a live solve's speed) and every chunk where torch is not loaded;
- :func:`torch_ops` (float32 by default): large chunks where the network
  already loaded torch.

Both take the same steps (``tests/pure/test_pipeline.py`` checks that they
give the same pose).
"""

from __future__ import annotations

import numpy as np

from ..model import lm
from ..model.lm import NUMPY, ArrayOps, torch_ops

__all__ = ["ArrayOps", "NUMPY", "torch_ops", "levenberg_marquardt", "jacobian", "DAMPING"]

#: The rig solve's damping schedule (Marquardt's: relative to the normal matrix's diagonal).
DAMPING = lm.Damping(start=1e-3, decay=1.0 / 3.0, floor=1e-7)


def _consts(pb, ops) -> dict:
    """The problem's constants as the backend's arrays."""
    if ops.name != "numpy":
        return pb.torch(ops.device)
    return dict(pslot=pb.pslot, poff=pb.poff, C=pb.C, prior=pb.prior, root_fixed=pb.root_fixed,
                lock_f=pb.lock_f, lock_e=pb.lock_e)


def _fk(pb, ops, basis, loc):
    return pb.fk.numpy(basis, loc) if ops.name == "numpy" else pb.fk(basis, loc)


def _normal_dtype(ops, prior_decay):
    """float32 normal equations (numpy) where the prior stays (dense bakes: every bone held by its
    targets); where it fades towards nothing (six effectors) they grow too stiff for float32
    (docs/tuning.md#small_batch)."""
    if ops.name != "numpy":
        return ops.dtype
    return np.float32 if prior_decay >= 1.0 else np.float64


def jacobian(pb, wproj, pts, X, ops, out=None):
    """The weighted Jacobian ``(n, 3R, 3F [+ 3])`` of every target row.

    Row ``r``'s block for a world-axis increment ``d_k`` of free bone ``k``
    (the subtree of ``k`` turns about its head ``X_k``) is
    ``sum_p C[r,p] A[p,k] d_k x (p - X_k) = -[v_rk]_x d_k`` with
    ``v_rk = q_rk - M_rk X_k``, weighted by the row's projection ``a_r``:
    column ``j`` of ``a_r (-[v]_x)`` is ``a_r (e_j x v)``, written out.
    Only the blocks of :attr:`.rigproblem.Problem.pair_r` / ``pair_k`` (the bones a
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
        tt = pb.torch(ops.device)
        pair_CA, pair_M, pair_r, pair_k, pair_fslot, Mroot = (
            tt[k].to(pts.dtype) if tt[k].is_floating_point() else tt[k]
            for k in ("pair_CA", "pair_M", "pair_r", "pair_k", "pair_fslot", "Mroot"))
    S = pair_M.shape[0]
    width = 3 * nF + (3 if rs >= 0 else 0)
    where = {} if ops.name == "numpy" else {"device": pts.device}
    Jd = ops.xp.zeros((n, R, 3, width), dtype=pts.dtype, **where) if out is None else out.reshape(n, R, 3, width)
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
    """The rig solve of one chunk of frames of the problem ``pb`` with the backend ``ops``.

    ``basis`` (n, posed, 3, 3), ``loc`` (n, posed, 3): the start (and the
    prior's pose); ``tgt`` (n, R, 3), ``wts`` (n, R), ``proj`` (R or n, R,
    3, 3): the rows' targets, weights and projections. The loop's options
    are :func:`.lm.levenberg_marquardt`'s.

    Returns ``(basis, loc, iterations, posed)`` as float64 numpy: ``posed``
    is ``(W, X, pts)`` of the last accepted pose where the backend is exact
    (float64), else None (the caller poses the unit quaternions again).
    """
    chunk = _RigChunk(pb, ops, basis, loc, tgt, wts, proj, prior_decay)
    s, done = lm.levenberg_marquardt(chunk, iterations=iterations, damping=DAMPING, prior_decay=prior_decay,
                                     prior_floor=prior_floor, min_iterations=min_iterations, tol=tol, rtol=rtol,
                                     keep=("basis", "loc", "W", "X", "pts"), progress=progress)
    posed = tuple(ops.numpy(s[k]) for k in ("W", "X", "pts")) if ops.exact else None
    return ops.numpy(s["basis"]), ops.numpy(s["loc"]), done, posed


class _RigChunk:
    """The rig solve's problem on the frames of a chunk still being solved (:mod:`.lm`'s protocol)."""

    def __init__(self, pb, ops, basis, loc, tgt, wts, proj, prior_decay):
        self.pb, self.ops = pb, ops
        c = self.c = _consts(pb, ops)
        basis, loc = ops.asarray(basis), ops.asarray(loc)
        proj = ops.asarray(proj)
        if proj.ndim == 3:
            proj = proj[None]
        self.basis0T = ops.copy(ops.T(basis[:, pb.fslot]))
        self.tgt = ops.asarray(tgt)
        self.wproj = ops.asarray(wts)[..., None, None] * proj       # (n, R, 3, 3)
        self.wdiag = ops.diagonal(self.wproj)                       # (n, R, 3)
        self.ne = _normal_dtype(ops, prior_decay)
        self.pw = c["prior"]
        fk0 = _fk(pb, ops, basis, loc)
        self.root_head0 = ops.copy(fk0[1][:, pb.root_slot]) if pb.root_slot >= 0 else None
        self._start = (basis, loc, fk0)
        self.Jbuf = None
        self.diag_idx = np.arange(3 * pb.nF + (3 if pb.root_slot >= 0 else 0))

    def start(self):
        basis, loc, fk0 = self._start
        self._start = None
        return self.evaluate(basis, loc, fk0)

    def evaluate(self, basis, loc, fk=None):
        pb, ops, c = self.pb, self.ops, self.c
        n = basis.shape[0]
        W, X, Bm = _fk(pb, ops, basis, loc) if fk is None else fk
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
        return dict(basis=basis, loc=loc, W=W, X=X, Bm=Bm, pts=pts, r_t=r_t, r_prior=r_prior, cost=cost)

    def fade_prior(self, s, share):
        """The prior's weight set to ``share`` of its start (the cost follows without a new evaluation)."""
        new_pw = self.c["prior"] * share
        ratio = new_pw / self.pw
        s = dict(s)
        s["cost"] = s["cost"] - (s["r_prior"] ** 2).sum(1) + ((s["r_prior"] * ratio) ** 2).sum(1)
        s["r_prior"] = s["r_prior"] * ratio
        self.pw = new_pw
        return s

    def _normal_equations(self, s, lam):
        pb, ops, c = self.pb, self.ops, self.c
        n, nF, rs = s["basis"].shape[0], pb.nF, pb.root_slot
        if "_JtJ" not in s:   # (after a step every frame rejected, the pose and so J^T J, J^T r are unchanged)
            Jd = self.Jbuf = jacobian(pb, ops.astype(self.wproj, self.ne), ops.astype(s["pts"], self.ne),
                                      ops.astype(s["X"], self.ne), ops, out=self.Jbuf)
            JdT = ops.T(Jd)
            s["_JtJ"] = JdT @ Jd
            s["_Jtr"] = (JdT @ ops.astype(s["r_t"].reshape(n, 3 * pb.R), self.ne)[..., None])[..., 0]
        H = ops.astype(s["_JtJ"], ops.dtype)
        if H is s["_JtJ"]:   # (kept for the next iteration: the damping is added to a copy)
            H = ops.copy(H)
        Wf = s["W"][:, pb.fslot]
        r_prior = s["r_prior"]
        gp = (Wf @ r_prior[:, :3 * nF].reshape(n, nF, 3, 1))[..., 0].reshape(n, 3 * nF)
        if rs >= 0:
            gp = ops.cat([gp, r_prior[:, 3 * nF:]], 1)
        # prior rows: r = w (eta_acc + W_k^T d_k): H += w^2 I, g += w W_k r
        d = self.diag_idx
        H[:, d, d] += self.pw ** 2
        g = ops.astype(s["_Jtr"], ops.dtype) + self.pw * gp
        H[:, d, d] += lam[:, None] * H[:, d, d] + 1e-9
        if pb.lock_f:   # locked bone axes: stiff springs on (W_k e_a) . d_k
            u = (Wf[:, c["lock_f"]] @ c["lock_e"][None, :, :, None])[..., 0]        # (n, Lk, 3)
            for j, f_i in enumerate(pb.lock_f):
                sl = slice(3 * f_i, 3 * f_i + 3)
                H[:, sl, sl] += 1e6 * (u[:, j, :, None] * u[:, j, None, :])
        if rs >= 0 and pb.root_fixed is not None:   # root translation held in these directions
            H[:, 3 * nF:, 3 * nF:] += 1e6 * c["root_fixed"]
        return H, g, Wf

    def step(self, s, lam):
        """The damped step of every frame (0 for a frame whose normal matrix is singular: it stays)."""
        pb, ops = self.pb, self.ops
        H, g, Wf = self._normal_equations(s, lam)
        s["_Wf"] = Wf
        x, ok = ops.solve_spd(H, g)
        step = x if ops.synchronous and bool(ok.all()) else ops.where(ok[:, None], x, 0.0)
        if pb.root_slot >= 0 and pb.root_fixed is not None:   # (the spring alone let it creep by micrometres)
            step[:, 3 * pb.nF:] -= step[:, 3 * pb.nF:] @ ops.T(self.c["root_fixed"])
        return step, None

    def candidate(self, s, step):
        """The state of the pose ``step`` leads to (bone-frame increments, root translation)."""
        pb, ops = self.pb, self.ops
        nF, rs = pb.nF, pb.root_slot
        d_w = step[:, :3 * nF].reshape(-1, nF, 3)
        basis, loc = s["basis"], s["loc"]
        nb_basis = ops.copy(basis)
        nb_basis[:, pb.fslot] = basis[:, pb.fslot] @ ops.expmap((ops.T(s["_Wf"]) @ d_w[..., None])[..., 0])
        nloc = loc
        if rs >= 0:
            nloc = ops.copy(loc)
            nloc[:, rs] = loc[:, rs] + (ops.T(s["Bm"][:, rs]) @ step[:, 3 * nF:, None])[..., 0]
        return self.evaluate(nb_basis, nloc)

    def take(self, idx):
        """Only the frames ``idx`` (positions in the batch) are solved from now on."""
        for k in ("basis0T", "tgt", "wproj", "wdiag", "root_head0"):
            v = getattr(self, k)
            if v is not None:
                setattr(self, k, v[idx])
        self.Jbuf = None
