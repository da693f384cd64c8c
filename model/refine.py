"""Batched Gauss-Newton / Levenberg-Marquardt refinement of a pose.

Starting from an initial pose (the network's answer), a few (default 3) GN steps pull
the given keypoints (and optionally effector orientations) onto their
targets while a prior keeps every local rotation near the initial pose and
soft joint limits keep it human.

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
with a batched Cholesky factorisation, entirely on the input's device. Only
keypoints given in at least one frame and joints that move them are
included, so sparse problems are cheap. For batches of at least
``TREE_SOLVE_MIN_BATCH`` frames only the structurally non-zero entries of the
normal matrix are built (a joint's rotation couples only with its ancestors,
its descendants and the root translation), batch-last, and factorised in tree
order (deepest joints first: no fill-in); smaller batches use LAPACK's dense
batched Cholesky.
"""

from __future__ import annotations

import numpy as np
import torch

from .fk import NUM_JOINTS, ancestor_matrix, forward_kinematics, keypoints_from_world
from .limits import limit_arrays
from .rotations import axis_angle_to_matrix, matrix_to_axis_angle, matrix_to_rot6d, rot6d_to_matrix, skew
from .rotations_np import axis_angle_to_matrix as axis_angle_to_matrix_np, cross
from .rotations_np import matrix_to_axis_angle as matrix_to_axis_angle_np, orthonormalise, skew as skew_np, vector_norm
from .skeleton import PARENTS, forward_kinematics_np, keypoints_from_world_np

__all__ = ["refine", "DEFAULTS"]

#: Default weights of :func:`refine`.
DEFAULTS = dict(steps=3, prior=1e-5, prior_trans=1e-5, damping=1e-3, damping_decay=0.2, damping_min=1e-5,
                orient_weight=0.01, limit_weight=1.0)

_ANC = ancestor_matrix()  # (32, 22)
# joint e and its ancestors (orientation of e depends on them)
_ANC_INCL = np.zeros((NUM_JOINTS, NUM_JOINTS), dtype=bool)
for _e in range(NUM_JOINTS):
    _c = _e
    while _c >= 0:
        _ANC_INCL[_e, _c] = True
        _c = PARENTS[_c]
_PARENT_IDX = [max(p, 0) for p in PARENTS]


def _world_parent(world_rot: torch.Tensor) -> torch.Tensor:
    wp = world_rot[:, _PARENT_IDX]
    eye = torch.eye(3, dtype=world_rot.dtype, device=world_rot.device).expand(world_rot.shape[0], 1, 3, 3)
    return torch.cat([eye, wp[:, 1:]], dim=1)


_TREE_PLANS: dict = {}
_SETUPS: dict = {}


def _tree_plan(J, dev):
    """Elimination plan of the normal matrix for the active joints ``J``.

    A joint's rotation block is coupled only to its ancestors' and
    descendants' blocks (and to the root translation), so eliminating the
    deepest joints first produces no fill-in: every column of the Cholesky
    factor has at most ~20 non-zeros instead of up to 68. Returns the
    elimination order and, per column, the (permuted) rows below the
    diagonal that are non-zero, as index tensors.
    """
    key = (tuple(J), str(dev))
    plan = _TREE_PLANS.get(key)
    if plan is not None:
        return plan
    nj = len(J)
    n = 3 * nj + 3
    depth = [0] * NUM_JOINTS
    for j in range(1, NUM_JOINTS):
        depth[j] = depth[PARENTS[j]] + 1
    anc = _ANC_INCL[np.ix_(J, J)]
    rel = anc | anc.T
    pat = np.ones((n, n), dtype=bool)
    pat[: 3 * nj, : 3 * nj] = np.kron(rel, np.ones((3, 3), dtype=bool))
    order = sorted(range(nj), key=lambda i: (-depth[J[i]], i))
    perm = np.concatenate([np.arange(3 * i, 3 * i + 3) for i in order] + [np.arange(3 * nj, n)])
    P = pat[np.ix_(perm, perm)].copy()
    cols = []
    for c in range(n):  # symbolic factorisation (fill-in included, if any)
        rows = c + 1 + np.flatnonzero(P[c + 1:, c])
        P[np.ix_(rows, rows)] = True
        cols.append(rows)
    # compact storage: the structurally non-zero lower triangle, one row of B values per entry.
    # src: its flat index in the dense (n, n) matrix; vsrc: its row in the "virtual" source
    # stack of _tree_normal_solve (rotation blocks of related joint pairs, then the
    # rotation-translation entries, then the translation block)
    pairs = [(i, k) for i in range(nj) for k in range(nj) if rel[i, k]]
    pair_of = {pk: q for q, pk in enumerate(pairs)}
    base_rt, base_tt = 9 * len(pairs), 9 * len(pairs) + 9 * nj

    def virtual(vr, vc):
        if vr < 3 * nj and vc < 3 * nj:
            return pair_of[(vr // 3, vc // 3)] * 9 + (vr % 3) * 3 + vc % 3
        if vr < 3 * nj:
            return base_rt + vr * 3 + (vc - 3 * nj)
        if vc < 3 * nj:
            return base_rt + vc * 3 + (vr - 3 * nj)
        return base_tt + (vr - 3 * nj) * 3 + (vc - 3 * nj)

    pos = {}
    src, vsrc = [], []
    for c in range(n):
        for i in [c] + list(cols[c]):
            pos[(int(i), c)] = len(src)
            src.append(int(perm[i]) * n + int(perm[c]))
            vsrc.append(virtual(int(perm[i]), int(perm[c])))
    lt = lambda *a: torch.as_tensor(np.asarray(a[0], dtype=np.int64), device=dev)  # noqa: E731
    flat = []
    for c, rows in enumerate(cols):
        ii, jj = np.tril_indices(len(rows))
        rr = [pos[(int(rows[i]), int(rows[j]))] for i, j in zip(ii, jj)]
        flat.append((c, pos[(c, c)], lt(rows), lt([pos[(int(r), c)] for r in rows]), lt(rr), lt(ii), lt(jj)))
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    pi, pk = (lt([q[0] for q in pairs]), lt([q[1] for q in pairs]))
    dp = lt([int(np.where(anc[i, k], i, k)) for i, k in pairs])  # the deeper joint of each pair
    diag_pairs = lt([pair_of[(i, i)] for i in range(nj)])
    diag_pos = lt([pos[(int(inv[v]), int(inv[v]))] for v in range(n)])
    plan = (lt(perm), lt(src), flat, n, (lt(vsrc), pi, pk, dp, diag_pairs, diag_pos))
    if len(_TREE_PLANS) > 64:
        _TREE_PLANS.clear()
    _TREE_PLANS[key] = plan
    return plan


def _tree_cholesky_solve(H, g, J):
    """Solve ``H x = -g`` (batched, symmetric positive definite) with the sparse tree factorisation.

    Same role as ``cholesky_ex`` + ``cholesky_solve`` (returns ``(x, info)``,
    ``info != 0`` where a pivot was not positive or not finite) but touches
    only the structurally non-zero entries of the lower triangle: for large
    batches on the CPU this is several times faster than LAPACK's dense
    per-matrix factorisation.
    """
    perm, src, cols, n, _ = _tree_plan(J, H.device)
    B = H.shape[0]
    # batch last: each matrix entry is a contiguous row of B values, so the
    # gathers / scatters below move whole rows
    A = H.reshape(B, n * n).index_select(1, src).t().contiguous()
    return _tree_factor_solve(A, g, perm, cols, n)


def _tree_factor_solve(A, g, perm, cols, n):
    """Factorise the compact lower triangle ``A`` (nnz, B) in place and solve for ``-g`` (B, n)."""
    B = A.shape[1]
    b = (-g.index_select(1, perm)).t().contiguous()
    diag = torch.empty(n, B, dtype=A.dtype, device=A.device)
    tiny = torch.finfo(A.dtype).tiny
    bad = ~torch.isfinite(A).all(0)
    for c, dc, r, rc, rr, ii, jj in cols:
        piv = A[dc]
        bad |= ~(piv > 0)
        d = piv.clamp_min(tiny).sqrt()
        diag[c] = d
        if len(r):
            col = A.index_select(0, rc) / d
            A.index_copy_(0, rc, col)
            A.index_add_(0, rr, col.index_select(0, ii) * col.index_select(0, jj), alpha=-1.0)
    for c, dc, r, rc, rr, ii, jj in cols:  # forward: L y = b (in place)
        b[c] /= diag[c]
        if len(r):
            b.index_add_(0, r, A.index_select(0, rc) * b[c], alpha=-1.0)
    for c, dc, r, rc, rr, ii, jj in reversed(cols):  # backward: L^T x = y (in place)
        if len(r):
            b[c] -= (A.index_select(0, rc) * b.index_select(0, r)).sum(0)
        b[c] /= diag[c]
    out = torch.empty_like(g)
    out[:, perm] = b.t()
    return out, bad.to(torch.int32)


def _tree_normal_solve(T, pj, w_sum, g, diag_add, J, orient_pair=None, Hl=None):
    """Build only the structurally non-zero entries of the normal matrix (batch last) and solve.

    Same matrix as the dense construction in :func:`_dense_step`: rotation
    blocks ``tr(Q) I - Q^T`` of related joint pairs, rotation-translation
    blocks ``[m_i - S_i p_i]_x``, the translation block ``sum(w) I``; plus
    the orientation pair terms, the joint-limit blocks and ``diag_add``
    (prior + damping, (B, n)) on the diagonal.
    """
    perm, _, cols, n, (vsrc, pi, pk, dp, diag_pairs, diag_pos) = _tree_plan(J, T.device)
    B = T.shape[0]
    Tt = T[..., :13].permute(1, 2, 0).contiguous()  # (nj, 13, B)
    Pt = pj.permute(1, 2, 0).contiguous()  # (nj, 3, B)
    Tg = Tt.index_select(0, dp)  # (np, 13, B): sums over the keypoints both joints move
    S, m, M = Tg[:, 0], Tg[:, 1:4], Tg[:, 4:13].unflatten(1, (3, 3))
    pa, pb = Pt.index_select(0, pi), Pt.index_select(0, pk)
    u = m - S[:, None] * pb
    Q = M - m[:, :, None] * pb[:, None, :] - pa[:, :, None] * u[:, None, :]  # (np, 3, 3, B)
    blk = -Q.transpose(1, 2)
    blk.diagonal(dim1=1, dim2=2).add_((Q[:, 0, 0] + Q[:, 1, 1] + Q[:, 2, 2])[..., None])
    if orient_pair is not None:  # (B, nj, nj)
        op = orient_pair.permute(1, 2, 0)[pi, pk]  # (np, B)
        blk.diagonal(dim1=1, dim2=2).add_(op[..., None])
    if Hl is not None:  # (B, nj, 3, 3) on the diagonal blocks
        blk.index_add_(0, diag_pairs, Hl.permute(1, 2, 3, 0))
    v = Tt[:, 1:4] - Tt[:, 0:1] * Pt  # (nj, 3, B)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    o = torch.zeros_like(x)
    rt = torch.stack([o, -z, y, z, o, -x, -y, x, o], 1)  # (nj, 9, B): [v]_x
    tt = torch.zeros(9, B, dtype=T.dtype, device=T.device)
    tt[0::4] = w_sum
    src = torch.cat([blk.reshape(-1, B), rt.reshape(-1, B), tt], 0)
    A = src.index_select(0, vsrc)
    A.index_add_(0, diag_pos, diag_add.t())
    return _tree_factor_solve(A, g, perm, cols, n)


#: Batches at least this large use :func:`_tree_cholesky_solve` (smaller ones LAPACK).
TREE_SOLVE_MIN_BATCH = 128


def _dense_step(B, n, nj, T, pj, w_k, wrk, deeper_flat, use_orient, o_sw, o_A, cur, prior_diag, mu, wr, J, prior, t,
                init_root, prior_trans, limits, limit_weight, diag_idx, eye3):
    """Dense normal equations and LAPACK Cholesky (small batches): ``(step, info, rpar_all)``."""
    dt, dev = T.dtype, T.device
    T0 = torch.cat([T[..., :13], torch.zeros(B, 1, 13, dtype=dt, device=dev)], dim=1)
    Tg = T0[:, deeper_flat].reshape(B, nj, nj, 13)  # unrelated pairs -> zero row
    S = Tg[..., 0]
    m = Tg[..., 1:4]
    M = Tg[..., 4:13].reshape(B, nj, nj, 3, 3)
    pa = pj[:, :, None, :]  # p_i
    pb = pj[:, None, :, :]  # p_i'
    u = m - S[..., None] * pb
    # Q_ii' = sum_k w (p_k - p_i)(p_k - p_i')^T = M - m pb^T - pa u^T and
    # H_ii' = tr(Q) I - Q^T, laid out as rows (i, a), columns (i', c).
    # -Q is written straight into H through a permuted view (few passes
    # over the large (B, nj, nj, 3, 3) arrays, no temporaries).
    H = torch.empty(B, n, n, dtype=dt, device=dev)
    Hv = H[:, : 3 * nj, : 3 * nj].unflatten(1, (nj, 3)).unflatten(3, (nj, 3))  # (B, i, a, i', c)
    Hq = Hv.permute(0, 1, 3, 4, 2)  # (B, i, i', c, a) aliases H
    torch.mul(m[..., :, None], pb[..., None, :], out=Hq)
    Hq.addcmul_(pa[..., :, None].expand(B, nj, nj, 3, 1), u[..., None, :])
    Hq.sub_(M)
    trq = M.diagonal(dim1=-2, dim2=-1).sum(-1) - (m * pb).sum(-1) - (pa * u).sum(-1)  # (B, nj, nj)
    Hv.diagonal(dim1=2, dim2=4).add_(trq[..., None])
    Sj = T[..., 0]  # (B, nj)
    mj = T[..., 1:4]  # (B, nj, 3)
    Hrt = skew(mj - Sj[..., None] * pj).reshape(B, 3 * nj, 3)
    H[:, : 3 * nj, 3 * nj:] = Hrt
    H[:, 3 * nj:, : 3 * nj] = Hrt.transpose(1, 2)
    H[:, 3 * nj:, 3 * nj:] = w_k.sum(1)[:, None, None] * eye3
    g_rot = T[..., 16:19] - torch.cross(pj, T[..., 13:16], dim=-1)
    g = torch.cat([g_rot.reshape(B, -1), wrk.sum(1)], dim=1)
    if use_orient:
        wo = o_sw ** 2  # (B, no)
        # H_ii' += sum_e wo_e A_ei A_ei' I ; g_i += sum_e wo_e A_ei err_e
        pair = torch.einsum("be,ei,ej->bij", wo, o_A, o_A)
        Ho = (pair[..., None, None] * eye3).permute(0, 1, 3, 2, 4).reshape(B, 3 * nj, 3 * nj)
        H = H + torch.nn.functional.pad(Ho, (0, 3, 0, 3))
        go = torch.einsum("be,ei,bec->bic", wo, o_A, cur["oerr"]).reshape(B, -1)
        g = g + torch.cat([go, torch.zeros(B, 3, dtype=dt, device=dev)], dim=1)
    H.diagonal(dim1=1, dim2=2).add_(prior_diag[None] + mu[:, None])
    # prior on local deviation (parent frame) -> world-frame gradient R_parent @ dev
    rpar_all = _world_parent(wr)
    rpar = rpar_all[:, J]  # (B, nj, 3, 3)
    gp = (rpar @ cur["dev"][..., None])[..., 0] * prior
    g = g + torch.cat([gp.reshape(B, -1), (t - init_root) * prior_trans], dim=1)
    if limits:
        viol = cur["viol"]
        act = (viol != 0).to(dt)  # (B, nj, 3)
        # residual sl*viol_c, d viol / d w = e_c^T R_parent^T -> H += R diag(act) R^T
        Hl = (rpar * act[:, :, None, :]) @ rpar.transpose(-1, -2) * limit_weight
        gl = (rpar @ (viol * limit_weight)[..., None])[..., 0]
        H.view(B, n * n)[:, diag_idx] += Hl.reshape(B, -1)
        g = g + torch.cat([gl.reshape(B, -1), torch.zeros(B, 3, dtype=dt, device=dev)], dim=1)
    chol, info = torch.linalg.cholesky_ex(H)
    step = torch.cholesky_solve(-g[..., None], chol)[..., 0]
    return step, info, rpar_all


@torch.no_grad()
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
        Number of Gauss-Newton steps (0 returns the input).
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
        step, multiplied by ``damping_decay`` after each, never below
        ``damping_min``. Damping keeps directions the targets do not
        determine (e.g. twists) at the initial pose.
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
    B = local_rot.shape[0]
    dt, dev = local_rot.dtype, local_rot.device
    if steps <= 0 or B == 0:
        return local_rot, root_pos
    init_local = local_rot if init_local is None else init_local
    init_root = root_pos if init_root is None else init_root
    weights = weights.to(dt)
    targets = torch.where(weights[..., None] > 0, targets, torch.zeros((), dtype=dt, device=dev))

    # active keypoints and joints (union over the batch)
    if active is not None and active[0] is not None:
        kp_active = np.asarray(active[0], dtype=bool)
    else:
        kp_active = (weights > 0).any(0).cpu().numpy()
    use_orient = orient_targets is not None and orient_weights is not None
    if use_orient:
        if orient_joints is None:
            from .network import EFFECTOR_JOINTS

            orient_joints = EFFECTOR_JOINTS
        orient_joints = list(orient_joints)
        if active is not None and active[1] is not None:
            o_active = np.asarray(active[1], dtype=bool)
        else:
            o_active = (orient_weights > 0).any(0).cpu().numpy()
        use_orient = bool(o_active.any())
    joint_active = _ANC[kp_active].any(0)
    if use_orient:
        oj = [orient_joints[i] for i in np.flatnonzero(o_active)]
        oi = [int(i) for i in np.flatnonzero(o_active)]
        joint_active |= _ANC_INCL[oj].any(0)
    K = [int(k) for k in np.flatnonzero(kp_active)]
    J = [int(j) for j in np.flatnonzero(joint_active)]
    nk, nj = len(K), len(J)
    if nk == 0 and not use_orient:
        return local_rot, root_pos
    n = 3 * nj + 3
    # index tables of this mask pattern on the device, made once (copies to a GPU wait for its queue)
    skey = (tuple(K), tuple(J), tuple(oj) if use_orient else None, bool(limits), dt, str(dev))
    setup = _SETUPS.get(skey)
    if setup is None:
        setup = {"A": torch.as_tensor(_ANC[np.ix_(K, J)], dtype=dt, device=dev)}  # (nk, nj)
        setup["A_t"] = setup["A"].t().contiguous()
        if use_orient:
            setup["o_A"] = torch.as_tensor(_ANC_INCL[np.ix_(oj, J)], dtype=dt, device=dev)  # (no, nj)
        if limits:
            lo, hi = limit_arrays(dt, dev)
            setup["lo"], setup["hi"] = lo[J], hi[J]
            jj, aa, cc = np.meshgrid(np.arange(nj), np.arange(3), np.arange(3), indexing="ij")
            setup["diag_idx"] = torch.as_tensor(((3 * jj + aa) * n + 3 * jj + cc).reshape(-1), device=dev)
        # pair tables: for related joints (one is an ancestor-or-self of the other)
        # the keypoints moved by both are those moved by the deeper one
        anc_incl = _ANC_INCL[np.ix_(J, J)]  # [a, b]: b is ancestor-or-self of a
        deeper = np.where(anc_incl, np.arange(nj)[:, None], np.where(anc_incl.T, np.arange(nj)[None, :], nj))
        setup["deeper_flat"] = torch.as_tensor(deeper.reshape(-1), device=dev)
        if len(_SETUPS) > 64:
            _SETUPS.clear()
        _SETUPS[skey] = setup
    A_t, deeper_flat = setup["A_t"], setup["deeper_flat"]
    tgt = targets[:, K]
    eye3 = torch.eye(3, dtype=dt, device=dev)
    prior_diag = torch.full((n,), prior, dtype=dt, device=dev)
    prior_diag[-3:] = prior_trans
    if use_orient:
        o_tgt = orient_targets[:, oi]
        o_sw = orient_weights[:, oi].to(dt).sqrt()
        o_A = setup["o_A"]
    if limits:
        lo, hi, diag_idx = setup["lo"], setup["hi"], setup["diag_idx"]
    init_local_inv = init_local[:, J].transpose(-1, -2)
    w_k = weights[:, K]  # (B, nk)

    def evaluate(L, t):
        """Everything the step needs at pose (L, t), and its cost."""
        wr, wp = forward_kinematics(L, t, offsets)
        kp = keypoints_from_world(wr, wp, end_offsets)
        pk = kp[:, K]
        rk = pk - tgt
        st = {"L": L, "t": t, "wr": wr, "wp": wp, "pk": pk, "rk": rk}
        cost = (w_k * (rk * rk).sum(-1)).sum(1)
        if use_orient:
            err = matrix_to_axis_angle(wr[:, oj] @ o_tgt.transpose(-1, -2))  # (B, no, 3)
            st["oerr"] = err
            cost = cost + ((o_sw ** 2) * (err * err).sum(-1)).sum(1)
        LJ = L[:, J]
        if limits:  # one axis-angle conversion for the prior and the limits
            aa = matrix_to_axis_angle(torch.cat([LJ @ init_local_inv, LJ], dim=1))
            dev_loc, v = aa[:, :nj], aa[:, nj:]
        else:
            dev_loc = matrix_to_axis_angle(LJ @ init_local_inv)  # (B, nj, 3), parent frame
        st["dev"] = dev_loc
        cost = cost + prior * (dev_loc * dev_loc).sum((1, 2)) + prior_trans * ((t - init_root) ** 2).sum(1)
        if limits:
            viol = torch.relu(v - hi) - torch.relu(lo - v)  # signed
            st["viol"] = viol
            cost = cost + limit_weight * (viol * viol).sum((1, 2))
        st["cost"] = cost
        return st

    cur = evaluate(local_rot.clone(), root_pos.clone())
    mu = torch.full((B,), float(damping), dtype=dt, device=dev)
    for it in range(steps):
        L, t, wr, wp, pk, rk = cur["L"], cur["t"], cur["wr"], cur["wp"], cur["pk"], cur["rk"]
        wpk = pk * w_k[..., None]
        wrk = rk * w_k[..., None]
        feats = torch.cat(
            [w_k[..., None], wpk, (wpk[..., :, None] * pk[..., None, :]).reshape(B, nk, 9), wrk, torch.cross(pk, wrk, dim=-1)],
            dim=-1,
        )  # (B, nk, 19)
        T = A_t @ feats  # (B, nj, 19): sums over the keypoints each joint moves
        pj = wp[:, J]  # (B, nj, 3)
        if B >= TREE_SOLVE_MIN_BATCH:  # sparse normal matrix, built and factorised batch-last
            g_rot = T[..., 16:19] - torch.cross(pj, T[..., 13:16], dim=-1)
            g = torch.cat([g_rot.reshape(B, -1), wrk.sum(1)], dim=1)
            pair = None
            if use_orient:
                wo = o_sw ** 2
                pair = torch.einsum("be,ei,ej->bij", wo, o_A, o_A)
                go = torch.einsum("be,ei,bec->bic", wo, o_A, cur["oerr"]).reshape(B, -1)
                g = g + torch.cat([go, torch.zeros(B, 3, dtype=dt, device=dev)], dim=1)
            rpar_all = _world_parent(wr)
            rpar = rpar_all[:, J]
            gp = (rpar @ cur["dev"][..., None])[..., 0] * prior
            g = g + torch.cat([gp.reshape(B, -1), (t - init_root) * prior_trans], dim=1)
            Hl = None
            if limits:
                viol = cur["viol"]
                act = (viol != 0).to(dt)
                Hl = (rpar * act[:, :, None, :]) @ rpar.transpose(-1, -2) * limit_weight
                gl = (rpar @ (viol * limit_weight)[..., None])[..., 0]
                g = g + torch.cat([gl.reshape(B, -1), torch.zeros(B, 3, dtype=dt, device=dev)], dim=1)
            step, info = _tree_normal_solve(T, pj, w_k.sum(1), g, prior_diag[None] + mu[:, None], J, pair, Hl)
        else:
            step, info, rpar_all = _dense_step(B, n, nj, T, pj, w_k, wrk, deeper_flat, use_orient, o_sw if use_orient else None,
                                               o_A if use_orient else None, cur, prior_diag, mu, wr, J, prior, t, init_root,
                                               prior_trans, limits, limit_weight, diag_idx if limits else None, eye3)
        step = torch.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0)
        # trust region: at most max_rot radians per joint and max_trans metres per step
        wj = step[:, : 3 * nj].reshape(B, nj, 3)
        wj = wj * (max_rot / wj.norm(dim=-1, keepdim=True).clamp_min(max_rot))
        dtr = step[:, 3 * nj:]
        dtr = dtr * (max_trans / dtr.norm(dim=-1, keepdim=True).clamp_min(max_trans))
        w = torch.zeros(B, NUM_JOINTS, 3, dtype=dt, device=dev)
        w[:, J] = wj
        E = axis_angle_to_matrix(w)
        # re-orthonormalise (round-off would otherwise accumulate over steps)
        L_new = rot6d_to_matrix(matrix_to_rot6d(rpar_all.transpose(-1, -2) @ E @ wr))
        cand = evaluate(L_new, t + dtr)
        # Levenberg-Marquardt acceptance, per frame: keep a step only if it lowers the cost
        ok = (cand["cost"] <= cur["cost"]) & (info == 0)
        if dev.type == "cpu" and bool(ok.all()):  # (on a GPU the test would stall the stream)
            cur = cand
        else:
            cur = {k: torch.where(ok.view((B,) + (1,) * (v.dim() - 1)), v, cur[k]) for k, v in cand.items()}
        mu = torch.where(ok, (mu * damping_decay).clamp_min(damping_min), mu * 10.0)
    L, t = cur["L"], cur["t"]
    return L, t


# ----------------------------------------------------------------------------- numpy path
# For a handful of frames (an interactive "current pose" solve) the cost of
# the torch version is the per-operation overhead of hundreds of tiny
# tensor operations. This float64 numpy twin of :func:`refine` runs the same
# algorithm (same residuals, Jacobian, LM acceptance and trust region) with
# far cheaper small-array operations. :class:`.inference.Solver` uses it on
# the CPU for a single frame (``SMALL_BATCH``); it also accepts batches.

SMALL_BATCH = 1

_LEVELS = []
_depth = [0] * NUM_JOINTS
for _j in range(1, NUM_JOINTS):
    _depth[_j] = _depth[PARENTS[_j]] + 1
for _d in range(1, max(_depth) + 1):
    _idx = [j for j in range(NUM_JOINTS) if _depth[j] == _d]
    _LEVELS.append((np.array(_idx), np.array([PARENTS[j] for j in _idx])))


def _np_fk(L, t, off, eo):
    """FK: world rotations (B,22,3,3), positions (B,22,3), keypoints (B,32,3)."""
    W, P = forward_kinematics_np(L, t, off)
    return W, P, keypoints_from_world_np(W, P, eo)


def _solve_spd(H, g):
    """Solve ``H x = -g`` for symmetric positive definite ``H`` (B, n, n); returns (x, ok)."""
    if H.shape[0] == 1 and _cho is not None:
        # one frame: LAPACK through scipy is cheapest (numpy's cholesky and
        # multi-threaded torch have a large fixed cost on tiny matrices)
        c, info = _cho[0](H[0], lower=1)  # LAPACK dpotrf/dpotrs directly (no wrapper checks)
        if info != 0:
            return np.zeros_like(g), np.zeros(1, dtype=bool)
        x, info = _cho[1](c, g[0], lower=1)
        x = -x[None]
        return x, np.isfinite(x).all(1) & (info == 0)
    chol, info = torch.linalg.cholesky_ex(torch.from_numpy(H))
    x = torch.cholesky_solve(torch.from_numpy(-g[..., None]), chol)[..., 0].numpy()
    return x, (info == 0).numpy() & np.isfinite(x).all(1)


try:  # optional (not bundled with Blender's Python)
    from scipy.linalg.lapack import dpotrf as _cf, dpotrs as _cs

    _cho = (_cf, _cs)
except Exception:  # pragma: no cover
    _cho = None


_NP_SETUP: dict = {}
_PAR_NP = np.array([max(p, 0) for p in PARENTS])


def _np_setup(kp_active, o_active, orient_joints, limits, prior, prior_trans):
    """Index tables of one mask pattern (cached: interactive calls repeat it)."""
    joint_active = _ANC[kp_active].any(0)
    oi = oj = o_A = None
    if o_active is not None:
        oi = [int(i) for i in np.flatnonzero(o_active)]
        oj = [orient_joints[i] for i in oi]
        joint_active = joint_active | _ANC_INCL[oj].any(0)
    K = np.flatnonzero(kp_active)
    J = np.flatnonzero(joint_active)
    nj = len(J)
    if o_active is not None:
        o_A = _ANC_INCL[np.ix_(oj, J)].astype(np.float64)
    A = _ANC[np.ix_(K, J)].astype(np.float64)
    anc_incl = _ANC_INCL[np.ix_(J, J)]
    deeper = np.where(anc_incl, np.arange(nj)[:, None], np.where(anc_incl.T, np.arange(nj)[None, :], nj)).reshape(-1)
    prior_diag = np.full(3 * nj + 3, float(prior))
    prior_diag[-3:] = prior_trans
    lo = hi = None
    if limits:
        lo, hi = (x.numpy().astype(np.float64)[J] for x in limit_arrays(torch.float64))
    return K, J, A, deeper, prior_diag, lo, hi, oi, oj, o_A


def refine_numpy(local_rot, root_pos, targets, weights, offsets, end_offsets, *, steps=DEFAULTS["steps"],
                 orient_targets=None, orient_weights=None, orient_joints=None, prior=DEFAULTS["prior"],
                 prior_trans=DEFAULTS["prior_trans"], damping=DEFAULTS["damping"], damping_decay=DEFAULTS["damping_decay"],
                 damping_min=DEFAULTS["damping_min"], limits=True, limit_weight=DEFAULTS["limit_weight"],
                 init_local=None, init_root=None, max_rot=0.6, max_trans=0.5, return_keypoints=False):
    """Float64 numpy twin of :func:`refine` for a few frames (same arguments, numpy arrays).

    ``offsets`` / ``end_offsets`` must be shared by the batch: (22, 3) / (10, 3).
    With ``return_keypoints`` a third value is returned: the (B, 32, 3)
    keypoints of the result (already computed by the last cost evaluation).
    """
    L = np.asarray(local_rot, dtype=np.float64)
    t = np.asarray(root_pos, dtype=np.float64)
    B = L.shape[0]
    if steps <= 0 or B == 0:
        return (L, t, _np_fk(L, t, np.asarray(offsets, dtype=np.float64), np.asarray(end_offsets, dtype=np.float64))[2]) \
            if return_keypoints else (L, t)
    off = np.asarray(offsets, dtype=np.float64)
    eo = np.asarray(end_offsets, dtype=np.float64)
    w_all = np.asarray(weights, dtype=np.float64)
    init_local = L if init_local is None else np.asarray(init_local, dtype=np.float64)
    init_root = t if init_root is None else np.asarray(init_root, dtype=np.float64)
    kp_active = (w_all > 0).any(0)
    use_orient = orient_targets is not None and orient_weights is not None
    o_active = None
    if use_orient:
        if orient_joints is None:
            from .network import EFFECTOR_JOINTS

            orient_joints = EFFECTOR_JOINTS
        orient_joints = tuple(orient_joints)
        o_active = (np.asarray(orient_weights) > 0).any(0)
        use_orient = bool(o_active.any())
    key = (kp_active.tobytes(), None if not use_orient else (o_active.tobytes(), orient_joints), bool(limits),
           float(prior), float(prior_trans))
    setup = _NP_SETUP.get(key)
    if setup is None:
        setup = _np_setup(kp_active, o_active if use_orient else None, orient_joints, limits, prior, prior_trans)
        if len(_NP_SETUP) > 64:
            _NP_SETUP.clear()
        _NP_SETUP[key] = setup
    K, J, A, deeper, prior_diag, lo, hi, oi, oj, o_A = setup
    nk, nj = len(K), len(J)
    if nk == 0 and not use_orient:
        return (L, t, _np_fk(L, t, off, eo)[2]) if return_keypoints else (L, t)
    n = 3 * nj + 3
    if use_orient:
        o_tgt = np.asarray(orient_targets, dtype=np.float64)[:, oi]
        wo = np.asarray(orient_weights, dtype=np.float64)[:, oi]
    tgt = np.where(w_all[..., None] > 0, np.nan_to_num(np.asarray(targets, dtype=np.float64)), 0.0)[:, K]
    w_k = w_all[:, K]
    init_inv = np.swapaxes(init_local[:, J], -1, -2)
    eye3 = np.eye(3)
    par = _PAR_NP

    def evaluate(L, t):
        W, P, kp = _np_fk(L, t, off, eo)
        pk = kp[:, K]
        rk = pk - tgt
        cost = (w_k * (rk * rk).sum(-1)).sum(1)
        st = {"L": L, "t": t, "W": W, "P": P, "pk": pk, "rk": rk, "kp": kp}
        if use_orient:
            err = matrix_to_axis_angle_np(W[:, oj] @ np.swapaxes(o_tgt, -1, -2))
            st["oerr"] = err
            cost = cost + (wo * (err * err).sum(-1)).sum(1)
        LJ = L[:, J]
        aa = matrix_to_axis_angle_np(np.concatenate([LJ @ init_inv, LJ], 1) if limits else LJ @ init_inv)
        dev = aa[:, :nj]
        st["dev"] = dev
        cost = cost + prior * (dev * dev).sum((1, 2)) + prior_trans * ((t - init_root) ** 2).sum(1)
        if limits:
            v = aa[:, nj:]
            viol = np.maximum(v - hi, 0) - np.maximum(lo - v, 0)
            st["viol"] = viol
            cost = cost + limit_weight * (viol * viol).sum((1, 2))
        st["cost"] = cost
        return st

    cur = evaluate(L, t)
    mu = np.full(B, float(damping))
    for _ in range(steps):
        W, P, pk, rk = cur["W"], cur["P"], cur["pk"], cur["rk"]
        wpk = pk * w_k[..., None]
        wrk = rk * w_k[..., None]
        feats = np.concatenate([w_k[..., None], wpk, (wpk[..., :, None] * pk[..., None, :]).reshape(B, nk, 9), wrk,
                                cross(pk, wrk)], -1)
        T = A.T @ feats  # (B, nj, 19)
        pj = P[:, J]
        T0 = np.concatenate([T[..., :13], np.zeros((B, 1, 13))], 1)
        Tg = T0[:, deeper].reshape(B, nj, nj, 13)
        S, m, M = Tg[..., 0], Tg[..., 1:4], Tg[..., 4:13].reshape(B, nj, nj, 3, 3)
        pa, pb = pj[:, :, None, :], pj[:, None, :, :]
        u = m - S[..., None] * pb
        Q = M - m[..., :, None] * pb[..., None, :] - pa[..., :, None] * u[..., None, :]
        trq = np.trace(Q, axis1=-2, axis2=-1)
        H = np.empty((B, n, n))
        # H_ii' = tr(Q) I - Q^T, rows (i, a), columns (i', c)
        H[:, : 3 * nj, : 3 * nj] = (trq[:, :, None, :, None] * eye3[None, None, :, None, :]
                                    - Q.transpose(0, 1, 4, 2, 3)).reshape(B, 3 * nj, 3 * nj)
        Hrt = skew_np(T[..., 1:4] - T[..., 0:1] * pj).reshape(B, 3 * nj, 3)
        H[:, : 3 * nj, 3 * nj:] = Hrt
        H[:, 3 * nj:, : 3 * nj] = np.swapaxes(Hrt, 1, 2)
        H[:, 3 * nj:, 3 * nj:] = w_k.sum(1)[:, None, None] * eye3
        g_rot = T[..., 16:19] - cross(pj, T[..., 13:16])
        g = np.concatenate([g_rot.reshape(B, -1), wrk.sum(1)], 1)
        if use_orient:
            pair = np.einsum("be,ei,ej->bij", wo, o_A, o_A)
            H[:, : 3 * nj, : 3 * nj] += (pair[:, :, None, :, None] * eye3[None, None, :, None, :]).reshape(B, 3 * nj, 3 * nj)
            g[:, : 3 * nj] += np.einsum("be,ei,bec->bic", wo, o_A, cur["oerr"]).reshape(B, -1)
        H[:, np.arange(n), np.arange(n)] += prior_diag[None] + mu[:, None]
        Wpar = W[:, par]
        Wpar[:, 0] = eye3
        rpar = Wpar[:, J]
        g[:, : 3 * nj] += ((rpar @ cur["dev"][..., None])[..., 0] * prior).reshape(B, -1)
        g[:, 3 * nj:] += (cur["t"] - init_root) * prior_trans
        if limits:
            viol = cur["viol"]
            act = (viol != 0).astype(np.float64)
            Hl = (rpar * act[:, :, None, :]) @ np.swapaxes(rpar, -1, -2) * limit_weight
            Hb = H[:, : 3 * nj, : 3 * nj].reshape(B, nj, 3, nj, 3)
            jj = np.arange(nj)
            Hb[:, jj, :, jj, :] += Hl.transpose(1, 0, 2, 3)
            H[:, : 3 * nj, : 3 * nj] = Hb.reshape(B, 3 * nj, 3 * nj)
            g[:, : 3 * nj] += ((rpar @ (viol * limit_weight)[..., None])[..., 0]).reshape(B, -1)
        step, ok_solve = _solve_spd(H, g)
        if not np.isfinite(step).all():
            step = np.nan_to_num(step)
        wj = step[:, : 3 * nj].reshape(B, nj, 3)
        wj = wj * (max_rot / np.maximum(vector_norm(wj, keepdims=True), max_rot))
        dtr = step[:, 3 * nj:]
        dtr = dtr * (max_trans / np.maximum(vector_norm(dtr, keepdims=True), max_trans))
        w = np.zeros((B, NUM_JOINTS, 3))
        w[:, J] = wj
        L_new = orthonormalise(np.swapaxes(Wpar, -1, -2) @ axis_angle_to_matrix_np(w) @ W)
        cand = evaluate(L_new, cur["t"] + dtr)
        ok = (cand["cost"] <= cur["cost"]) & ok_solve
        if ok.all():
            cur = cand
        else:
            cur = {k: np.where(ok.reshape((B,) + (1,) * (v.ndim - 1)), v, cur[k]) for k, v in cand.items()}
        mu = np.where(ok, np.maximum(mu * damping_decay, damping_min), mu * 10.0)
    if return_keypoints:
        return cur["L"], cur["t"], cur["kp"]
    return cur["L"], cur["t"]
