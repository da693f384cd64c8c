"""Levenberg-Marquardt refinement of a pose: a problem definition on the one loop (:mod:`.lm`).

Starting from an initial pose (the network's answer), a few (default 3)
steps pull the given keypoints (and optionally effector orientations) onto
their targets while a prior keeps every local rotation near the initial
pose and soft joint limits keep it human.

Parameters per frame: one world-frame rotation increment ``w_j`` per joint
(3 each) and the root translation (3). To first order, rotating joint ``j``
by ``w_j`` about its origin ``p_j`` moves every keypoint ``k`` it carries
by ``w_j x (p_k - p_j)``; an effector's orientation error changes by the
sum of the increments of the joint and its ancestors. The increment is
applied as ``R_local_j <- R_parent^T exp(w_j) R_world_j``.

Residuals (stacked, weighted):

- keypoints: ``sqrt(weight_k) * (p_k - target_k)`` (metres);
- orientations: ``sqrt(orient_weight) * log(R_e R_target^T)`` (radians);
- prior: ``sqrt(prior) * log(R_local_j R_init_j^T)`` and
  ``sqrt(prior_trans) * (t - t_init)``;
- joint limits: ``sqrt(limit_weight) * violation`` of :mod:`.limits` boxes.

The normal equations ``(J^T J + prior + damping) dx = -J^T r`` are solved
per frame by a Cholesky factorisation, on the input's device. Only
keypoints given in at least one frame and joints that move them are
included, so sparse problems are cheap. Batches of at least
:data:`.tree_solve.TREE_SOLVE_MIN_BATCH` frames (numpy:
:data:`.tree_solve.NUMPY_TREE_MIN_BATCH`, a GPU:
:data:`.tree_solve.CUDA_TREE_SOLVE_MIN_BATCH`) build and factorise only the
structurally non-zero entries (:mod:`.tree_solve`); smaller ones the dense
matrix. :func:`refine` runs it on torch tensors, :func:`refine_numpy` on
float64 numpy arrays (a CPU clip up to the solver's numpy limit, one pose:
torch's import and fixed costs outweigh the work): the same problem, the
same loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import lm
from .features import NUM_JOINTS
from .limits import LIMITS_RAD
from .skeleton import PARENTS, ancestor_matrix, forward_kinematics_np, keypoints_from_world_np
from . import tree_solve as _tree
from .tree_solve import ANC_INCL as _ANC_INCL, tree_normal_solve

if TYPE_CHECKING:
    import torch

__all__ = ["refine", "refine_numpy", "DEFAULTS"]

#: Default weights of :func:`refine`.
DEFAULTS = dict(steps=3, prior=1e-5, prior_trans=1e-5, damping=1e-3, damping_decay=0.2, damping_min=1e-5,
                orient_weight=0.01, limit_weight=1.0)

_ANC = ancestor_matrix()  # (32, 22)
_PAR = np.array([max(p, 0) for p in PARENTS])
_SETUPS: dict = {}


def _setup(ops, kp_active, o_active, orient_joints, limits):
    """Index tables of one mask pattern on the backend (cached: a clip's batches and interactive calls
    repeat it; copies to a GPU wait for its queue)."""
    key = (kp_active.tobytes(), None if o_active is None else (o_active.tobytes(), tuple(orient_joints)),
           bool(limits), ops.name, str(ops.dtype), str(getattr(ops, "device", "")))
    st = _SETUPS.get(key)
    if st is not None:
        return st
    joint_active = _ANC[kp_active].any(0)
    oi = oj = None
    if o_active is not None:
        oi = [int(i) for i in np.flatnonzero(o_active)]
        oj = [int(orient_joints[i]) for i in oi]
        joint_active = joint_active | _ANC_INCL[oj].any(0)
    K = [int(k) for k in np.flatnonzero(kp_active)]
    J = [int(j) for j in np.flatnonzero(joint_active)]
    nj, n = len(J), 3 * len(J) + 3
    # pair tables: for related joints (one is an ancestor-or-self of the other)
    # the keypoints moved by both are those moved by the deeper one
    anc = _ANC_INCL[np.ix_(J, J)]  # [a, b]: b is ancestor-or-self of a
    deeper = np.where(anc, np.arange(nj)[:, None], np.where(anc.T, np.arange(nj)[None, :], nj)).reshape(-1)
    jj, aa, cc = np.meshgrid(np.arange(nj), np.arange(3), np.arange(3), indexing="ij")
    st = dict(K=K, J=J, oi=oi, oj=oj, iK=ops.index(np.array(K, dtype=np.int64)), iJ=ops.index(np.array(J, dtype=np.int64)),
              A_t=ops.asarray(_ANC[np.ix_(K, J)].T.copy()), deeper=ops.index(deeper), par=ops.index(_PAR),
              limit_blocks=ops.index(((3 * jj + aa) * n + 3 * jj + cc).reshape(-1)),
              diag=ops.index(np.arange(n) * (n + 1)), eye3=ops.asarray(np.eye(3)))
    if oj is not None:
        st["o_A"] = ops.asarray(_ANC_INCL[np.ix_(oj, J)])  # (no, nj)
        st["ioj"] = ops.index(np.array(oj, dtype=np.int64))
    if limits:
        st["lo"], st["hi"] = ops.asarray(LIMITS_RAD[J, :, 0]), ops.asarray(LIMITS_RAD[J, :, 1])
    if len(_SETUPS) > 64:
        _SETUPS.clear()
    _SETUPS[key] = st
    return st


class _Refinement:
    """The canonical skeleton's refinement on a batch of frames (:mod:`.lm`'s problem protocol)."""

    def __init__(self, ops, st, pose, L, t, tgt, w_k, orient, init_local, init_root, opt):
        self.ops, self.st, self.pose, self.opt = ops, st, pose, opt
        self.L0, self.t0 = L, t
        self.tgt, self.w_k = tgt, w_k                    # (B, nk, 3), (B, nk)
        self.o_tgt, self.wo = orient if orient is not None else (None, None)   # (B, no, 3, 3), (B, no)
        self.init_inv = ops.T(init_local[:, st["iJ"]])
        self.init_root = init_root
        self.nj = nj = len(st["J"])
        self.prior_diag = ops.full(3 * nj + 3, float(opt["prior"]))
        self.prior_diag[3 * nj:] = float(opt["prior_trans"])

    def start(self):
        return self.evaluate(self.L0, self.t0)

    def evaluate(self, L, t):
        """Everything the step needs at pose (L, t), and its cost."""
        ops, st, opt, nj = self.ops, self.st, self.opt, self.nj
        wr, wp, kp = self.pose(L, t)
        pk = kp[:, st["iK"]]
        rk = pk - self.tgt
        s = {"L": L, "t": t, "wr": wr, "wp": wp, "kp": kp, "pk": pk, "rk": rk}
        cost = (self.w_k * (rk * rk).sum(-1)).sum(1)
        if self.wo is not None:
            err = ops.logmap(wr[:, st["ioj"]] @ ops.T(self.o_tgt))  # (B, no, 3)
            s["oerr"] = err
            cost = cost + (self.wo * (err * err).sum(-1)).sum(1)
        LJ = L[:, st["iJ"]]
        if opt["limits"]:  # one axis-angle conversion for the prior and the limits
            aa = ops.logmap(ops.cat([LJ @ self.init_inv, LJ], 1))
            dev, v = aa[:, :nj], aa[:, nj:]
        else:
            dev = ops.logmap(LJ @ self.init_inv)  # (B, nj, 3), parent frame
        s["dev"] = dev
        cost = cost + opt["prior"] * (dev * dev).sum((1, 2)) + opt["prior_trans"] * ((t - self.init_root) ** 2).sum(1)
        if opt["limits"]:
            viol = ops.clamp_min(v - st["hi"], 0.0) - ops.clamp_min(st["lo"] - v, 0.0)  # signed
            s["viol"] = viol
            cost = cost + opt["limit_weight"] * (viol * viol).sum((1, 2))
        s["cost"] = cost
        return s

    def step(self, s, mu):
        """The damped Gauss-Newton step of every frame, in the trust region; ``(step, solved)``."""
        ops, st, opt, nj = self.ops, self.st, self.opt, self.nj
        pk, w_k = s["pk"], self.w_k
        B, nk = pk.shape[:2]
        wpk = pk * w_k[..., None]
        wrk = s["rk"] * w_k[..., None]
        feats = ops.cat([w_k[..., None], wpk, (wpk[..., :, None] * pk[..., None, :]).reshape(B, nk, 9), wrk,
                         ops.cross(pk, wrk)], -1)  # (B, nk, 19)
        T = st["A_t"] @ feats  # (B, nj, 19): sums over the keypoints each joint moves
        pj = s["wp"][:, st["iJ"]]  # (B, nj, 3)
        rpar_all = s["wr"][:, st["par"]]  # the parents' world rotations (the root's: identity)
        rpar_all[:, 0] = st["eye3"]
        s["_rpar"] = rpar_all
        rpar = rpar_all[:, st["iJ"]]  # (B, nj, 3, 3)
        g = ops.cat([(T[..., 16:19] - ops.cross(pj, T[..., 13:16])).reshape(B, -1), wrk.sum(1)], 1)
        gr = g[:, : 3 * nj]
        pair = Hl = None
        if self.wo is not None:
            # H_ii' += sum_e wo_e A_ei A_ei' I ; g_i += sum_e wo_e A_ei err_e
            pair = ops.xp.einsum("be,ei,ej->bij", self.wo, st["o_A"], st["o_A"])
            gr += ops.xp.einsum("be,ei,bec->bic", self.wo, st["o_A"], s["oerr"]).reshape(B, -1)
        # prior on local deviation (parent frame) -> world-frame gradient R_parent @ dev
        gr += ((rpar @ s["dev"][..., None])[..., 0] * opt["prior"]).reshape(B, -1)
        g[:, 3 * nj:] += (s["t"] - self.init_root) * opt["prior_trans"]
        if opt["limits"]:
            # residual sl*viol_c, d viol / d w = e_c^T R_parent^T -> H += R diag(act) R^T
            act = ops.astype(s["viol"] != 0, rpar.dtype)  # (B, nj, 3)
            Hl = (rpar * act[:, :, None, :]) @ ops.T(rpar) * opt["limit_weight"]
            gr += (rpar @ (s["viol"] * opt["limit_weight"])[..., None])[..., 0].reshape(B, -1)
        diag_add = self.prior_diag[None] + mu[:, None]
        if B >= _tree_min_batch(ops):  # sparse, batch-last
            x, bad = tree_normal_solve(ops, T, pj, w_k.sum(1), g, diag_add, st["J"], pair, Hl)
            ok = ~bad
        else:
            x, ok = ops.solve_spd(self._dense_normal(T, pj, pair, Hl, diag_add), g)
        return ops.finite_or_zero(x), ok

    def _dense_normal(self, T, pj, pair, Hl, diag_add):
        """The dense normal matrix (B, n, n) of :meth:`step`'s sums ``T``."""
        ops, st, nj = self.ops, self.st, self.nj
        B, n = T.shape[0], 3 * nj + 3
        T0 = ops.cat([T[..., :13], ops.zeros((B, 1, 13))], 1)
        Tg = T0[:, st["deeper"]].reshape(B, nj, nj, 13)  # unrelated pairs -> zero row
        S, m, M = Tg[..., 0], Tg[..., 1:4], Tg[..., 4:13].reshape(B, nj, nj, 3, 3)
        pa, pb = pj[:, :, None, :], pj[:, None, :, :]  # p_i, p_i'
        H = ops.empty((B, n, n))
        _rotation_blocks(ops, st, H, nj, m, M, pa, pb, m - S[..., None] * pb, pair)
        eye3 = st["eye3"]
        Hrt = ops.skew(T[..., 1:4] - T[..., 0:1] * pj).reshape(B, 3 * nj, 3)
        H[:, : 3 * nj, 3 * nj:] = Hrt
        H[:, 3 * nj:, : 3 * nj] = ops.T(Hrt)
        H[:, 3 * nj:, 3 * nj:] = self.w_k.sum(1)[:, None, None] * eye3
        Hf = H.reshape(B, n * n)
        Hf[:, st["diag"]] += diag_add
        if Hl is not None:
            Hf[:, st["limit_blocks"]] += Hl.reshape(B, -1)
        return H

    def candidate(self, s, step):
        """The state of the pose ``step`` leads to (at most ``max_rot`` radians per joint, ``max_trans`` m)."""
        ops, st, opt, nj = self.ops, self.st, self.opt, self.nj
        B = step.shape[0]
        wj = step[:, : 3 * nj].reshape(B, nj, 3)
        wj = wj * (opt["max_rot"] / ops.clamp_min(ops.norm(wj), opt["max_rot"]))
        dtr = step[:, 3 * nj:]
        dtr = dtr * (opt["max_trans"] / ops.clamp_min(ops.norm(dtr), opt["max_trans"]))
        w = ops.zeros((B, NUM_JOINTS, 3))
        w[:, st["iJ"]] = wj
        # re-orthonormalise (round-off would otherwise accumulate over steps)
        L_new = ops.orthonormalise(ops.T(s["_rpar"]) @ ops.expmap(w) @ s["wr"])
        return self.evaluate(L_new, s["t"] + dtr)


def _rotation_blocks(ops, st, H, nj, m, M, pa, pb, u, pair):
    """Write the rotation blocks of the normal matrix into ``H`` (B, n, n).

    ``Q_ii' = sum_k w (p_k - p_i)(p_k - p_i')^T = M - m pb^T - pa u^T`` and
    ``H_ii' = tr(Q) I - Q^T`` (+ the orientations' pair terms ``pair_ii' I``),
    laid out as rows (i, a), columns (i', c).
    """
    B = H.shape[0]
    if ops.name == "numpy":   # (numpy: Q in one contiguous array, then one pass of strided writes)
        Q = M - m[..., :, None] * pb[..., None, :] - pa[..., :, None] * u[..., None, :]
        trq = ops.diagonal(Q).sum(-1) if pair is None else ops.diagonal(Q).sum(-1) + pair
        H[:, : 3 * nj, : 3 * nj] = (trq[:, :, None, :, None] * st["eye3"][None, None, :, None, :]
                                    - Q.transpose(0, 1, 4, 2, 3)).reshape(B, 3 * nj, 3 * nj)
        return
    # torch: -Q written straight into H through a permuted view (few passes over the
    # large (B, nj, nj, 3, 3) arrays, no temporaries)
    torch = ops.torch
    Hv = H[:, : 3 * nj, : 3 * nj].unflatten(1, (nj, 3)).unflatten(3, (nj, 3))  # (B, i, a, i', c)
    Hq = Hv.permute(0, 1, 3, 4, 2)  # (B, i, i', c, a) aliases H
    torch.mul(m[..., :, None], pb[..., None, :], out=Hq)
    Hq.addcmul_(pa[..., :, None].expand(B, nj, nj, 3, 1), u[..., None, :])
    Hq.sub_(M)
    trq = M.diagonal(dim1=-2, dim2=-1).sum(-1) - (m * pb).sum(-1) - (pa * u).sum(-1)  # (B, nj, nj)
    Hv.diagonal(dim1=2, dim2=4).add_(trq[..., None])
    if pair is not None:
        Hv.diagonal(dim1=2, dim2=4).add_(pair[..., None])


def _run(ops, pose, L, t, targets, weights, kp_active, orient, o_active, orient_joints, init_local, init_root, opt):
    """The refinement of one batch on the backend ``ops``; the final state, or None (nothing to refine)."""
    use_orient = o_active is not None and bool(o_active.any())
    st = _setup(ops, kp_active, o_active if use_orient else None, orient_joints, opt["limits"])
    if not st["K"] and not use_orient:
        return None
    tgt = ops.where(weights[..., None] > 0, targets, 0.0)[:, st["iK"]]
    o = None
    if use_orient:
        oi = ops.index(np.array(st["oi"], dtype=np.int64))
        # (the rows' weights are sqrt(w): the normal equations' are their squares)
        o = (orient[0][:, oi], ops.xp.sqrt(orient[1][:, oi]) ** 2)
    problem = _Refinement(ops, st, pose, L, t, tgt, weights[:, st["iK"]], o, init_local, init_root, opt)
    damping = lm.Damping(opt["damping"], opt["damping_decay"], opt["damping_min"])
    return lm.levenberg_marquardt(problem, iterations=opt["steps"], damping=damping)[0]


def _options(steps, prior, prior_trans, damping, damping_decay, damping_min, limits, limit_weight, max_rot, max_trans):
    return dict(steps=int(steps), prior=float(prior), prior_trans=float(prior_trans), damping=float(damping),
                damping_decay=float(damping_decay), damping_min=float(damping_min), limits=bool(limits),
                limit_weight=float(limit_weight), max_rot=float(max_rot), max_trans=float(max_trans))


def _orient_joints(orient_joints):
    if orient_joints is None:
        from .features import EFFECTOR_JOINTS

        orient_joints = EFFECTOR_JOINTS
    return tuple(int(j) for j in orient_joints)



def _tree_min_batch(ops) -> int:
    """The batch from which :meth:`_Refinement.step` factorises the tree (smaller batches: the dense matrix)."""
    if ops.name == "numpy":
        return _tree.NUMPY_TREE_MIN_BATCH
    return _tree.CUDA_TREE_SOLVE_MIN_BATCH if ops.device.type == "cuda" else _tree.TREE_SOLVE_MIN_BATCH

def refine(
    local_rot: torch.Tensor,
    root_pos: torch.Tensor,
    targets: torch.Tensor,
    weights: torch.Tensor,
    offsets: torch.Tensor,
    end_offsets: torch.Tensor,
    *,
    steps: int = DEFAULTS["steps"],
    orient_targets: torch.Tensor | None = None,
    orient_weights: torch.Tensor | None = None,
    orient_joints=None,
    prior: float = DEFAULTS["prior"],
    prior_trans: float = DEFAULTS["prior_trans"],
    damping: float = DEFAULTS["damping"],
    damping_decay: float = DEFAULTS["damping_decay"],
    damping_min: float = DEFAULTS["damping_min"],
    limits: bool = True,
    limit_weight: float = DEFAULTS["limit_weight"],
    init_local: torch.Tensor | None = None,
    init_root: torch.Tensor | None = None,
    max_rot: float = 0.6,
    max_trans: float = 0.5,
    active=None,
):
    """Refine poses so that their keypoints reach the targets.

    Parameters
    ----------
    local_rot : Tensor, shape (B, 22, 3, 3)
        Starting local rotations (row 0 = root orientation).
    root_pos : Tensor, shape (B, 3)
    targets : Tensor, shape (B, 32, 3)
        Target keypoints (anything where the weight is 0, NaN allowed).
    weights : Tensor, shape (B, 32)
        Per-keypoint weights (0 = not given; 1 = normal).
    offsets : Tensor, shape (22, 3) or (B, 22, 3)
    end_offsets : Tensor, shape (10, 3) or (B, 10, 3)
    steps : int
        Number of Levenberg-Marquardt steps (0 returns the input).
    orient_targets : Tensor, shape (B, E, 3, 3), optional
        Target world orientations of the joints ``orient_joints``.
    orient_weights : Tensor, shape (B, E), optional
        0 where an orientation is not given.
    orient_joints : sequence of int, optional
        Joint index of each orientation target (default: the six effectors).
    prior, prior_trans : float
        Weights that keep local rotations (radians) and the root position
        (metres) near the initial pose.
    damping, damping_decay, damping_min : float
        Levenberg-Marquardt damping on the step: ``damping`` at the first
        step, multiplied by ``damping_decay`` after each accepted step,
        never below ``damping_min``. Damping keeps directions the targets
        do not determine (e.g. twists) at the initial pose.
    limits : bool
        Add the soft joint-limit residuals.
    limit_weight : float
        Weight of the joint-limit residuals.
    init_local, init_root : Tensor, optional
        Pose the prior pulls towards (default: the starting pose).
    max_rot, max_trans : float
        Trust region: a joint's rotation step is shortened to at most
        ``max_rot`` radians, the root's translation step to ``max_trans`` m.
    active : tuple (ndarray (32,) bool, ndarray (E,) bool or None), optional
        The keypoints (and orientations) given in at least one frame of the
        batch (``weights > 0`` / ``orient_weights > 0`` anywhere), when the
        caller knows them from a host-side mask: on a GPU this saves reading
        them back from the device (which would stall the stream).

    Returns
    -------
    local_rot : Tensor, shape (B, 22, 3, 3)
    root_pos : Tensor, shape (B, 3)
    """
    import torch

    from .fk import forward_kinematics, keypoints_from_world

    B = local_rot.shape[0]
    dt, dev = local_rot.dtype, local_rot.device
    if steps <= 0 or B == 0:
        return local_rot, root_pos
    weights = weights.to(dt)
    if active is not None and active[0] is not None:
        kp_active = np.asarray(active[0], dtype=bool)
    else:
        kp_active = (weights > 0).any(0).cpu().numpy()
    o_active = orient = None
    if orient_targets is not None and orient_weights is not None:
        orient_joints = _orient_joints(orient_joints)
        if active is not None and active[1] is not None:
            o_active = np.asarray(active[1], dtype=bool)
        else:
            o_active = (orient_weights > 0).any(0).cpu().numpy()
        orient = (orient_targets, orient_weights.to(dt))

    def pose(L, t):
        wr, wp = forward_kinematics(L, t, offsets)
        return wr, wp, keypoints_from_world(wr, wp, end_offsets)

    opt = _options(steps, prior, prior_trans, damping, damping_decay, damping_min, limits, limit_weight, max_rot,
                   max_trans)
    with torch.no_grad():
        s = _run(lm.torch_ops(dt, dev), pose, local_rot.clone(), root_pos.clone(), targets, weights, kp_active, orient,
                 o_active, orient_joints, local_rot if init_local is None else init_local,
                 root_pos if init_root is None else init_root, opt)
    return (local_rot, root_pos) if s is None else (s["L"], s["t"])


def refine_numpy(local_rot, root_pos, targets, weights, offsets, end_offsets, *, steps=DEFAULTS["steps"],
                 orient_targets=None, orient_weights=None, orient_joints=None, prior=DEFAULTS["prior"],
                 prior_trans=DEFAULTS["prior_trans"], damping=DEFAULTS["damping"], damping_decay=DEFAULTS["damping_decay"],
                 damping_min=DEFAULTS["damping_min"], limits=True, limit_weight=DEFAULTS["limit_weight"],
                 init_local=None, init_root=None, max_rot=0.6, max_trans=0.5, return_keypoints=False):
    """:func:`refine` on float64 numpy arrays (same arguments; the problem and loop on :data:`.lm.NUMPY`).

    ``offsets`` / ``end_offsets`` must be shared by the batch: (22, 3) / (10, 3).
    With ``return_keypoints`` a third value is returned: the (B, 32, 3)
    keypoints of the result (already computed by the last cost evaluation).
    """
    L = np.asarray(local_rot, dtype=np.float64)
    t = np.asarray(root_pos, dtype=np.float64)
    off = np.asarray(offsets, dtype=np.float64)
    eo = np.asarray(end_offsets, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    s = None
    if steps > 0 and L.shape[0]:
        o_active = orient = None
        if orient_targets is not None and orient_weights is not None:
            orient_joints = _orient_joints(orient_joints)
            orient = (np.asarray(orient_targets, dtype=np.float64), np.asarray(orient_weights, dtype=np.float64))
            o_active = (orient[1] > 0).any(0)
        opt = _options(steps, prior, prior_trans, damping, damping_decay, damping_min, limits, limit_weight, max_rot,
                       max_trans)
        s = _run(lm.NUMPY, lambda L, t: _np_fk(L, t, off, eo), L, t, np.asarray(targets, dtype=np.float64), w,
                 (w > 0).any(0), orient, o_active, orient_joints,
                 L if init_local is None else np.asarray(init_local, dtype=np.float64),
                 t if init_root is None else np.asarray(init_root, dtype=np.float64), opt)
    if s is not None:
        L, t = s["L"], s["t"]
    if return_keypoints:
        return L, t, (_np_fk(L, t, off, eo)[2] if s is None else s["kp"])
    return L, t


def _np_fk(L, t, off, eo):
    """FK: world rotations (B,22,3,3), positions (B,22,3), keypoints (B,32,3)."""
    W, P = forward_kinematics_np(L, t, off)
    return W, P, keypoints_from_world_np(W, P, eo)
