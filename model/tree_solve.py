"""The refinement's normal equations for large batches: built and factorised in tree order, batch last.

A joint's rotation couples only with its ancestors, its descendants and the
root translation, so only the structurally non-zero entries of the normal
matrix are built, batch-last (each entry a contiguous row of frames), and
factorised deepest joints first (no fill-in). For large batches on the CPU
this is several times faster than LAPACK's dense per-matrix factorisation.
The same code runs on numpy arrays and torch tensors (the backend
:class:`.lm.ArrayOps` of the refinement).

No ``bpy`` here; torch only where the arrays are tensors.
"""

from __future__ import annotations

import numpy as np

from . import lm
from .features import NUM_JOINTS
from .skeleton import PARENTS

__all__ = ["ANC_INCL", "TREE_SOLVE_MIN_BATCH", "CUDA_TREE_SOLVE_MIN_BATCH", "NUMPY_TREE_MIN_BATCH",
           "tree_cholesky_solve", "tree_normal_solve"]

#: ``[e, j]``: joint ``j`` is joint ``e`` or one of its ancestors (the orientation of ``e`` depends on it).
ANC_INCL = np.zeros((NUM_JOINTS, NUM_JOINTS), dtype=bool)
for _e in range(NUM_JOINTS):
    _c = _e
    while _c >= 0:
        ANC_INCL[_e, _c] = True
        _c = PARENTS[_c]

#: Torch batches at least this large use the tree factorisation (smaller ones LAPACK).
TREE_SOLVE_MIN_BATCH = 128
#: On a GPU from this many frames: below it the dense matrix and batched Cholesky run several
#: times faster there, the tree's column loop launching hundreds of small kernels
#: (docs/tuning.md#cuda_tree_solve_min_batch).
CUDA_TREE_SOLVE_MIN_BATCH = 131072
#: Numpy batches at least this large use it: numpy's dense build costs more per frame than torch's
#: in-place one (docs/tuning.md#numpy_max_frames).
NUMPY_TREE_MIN_BATCH = 16

_TREE_PLANS: dict = {}


def _elimination(J):
    """Symbolic factorisation: ``(anc, rel, perm, cols)``: the active joints' ancestor-or-self and
    related-pair tables, the elimination order (deepest joints first) and, per column, the permuted
    rows below the diagonal that are non-zero (fill-in included, if any)."""
    nj, n = len(J), 3 * len(J) + 3
    depth = [0] * NUM_JOINTS
    for j in range(1, NUM_JOINTS):
        depth[j] = depth[PARENTS[j]] + 1
    anc = ANC_INCL[np.ix_(J, J)]
    rel = anc | anc.T
    pat = np.ones((n, n), dtype=bool)
    pat[: 3 * nj, : 3 * nj] = np.kron(rel, np.ones((3, 3), dtype=bool))
    order = sorted(range(nj), key=lambda i: (-depth[J[i]], i))
    perm = np.concatenate([np.arange(3 * i, 3 * i + 3) for i in order] + [np.arange(3 * nj, n)])
    P = pat[np.ix_(perm, perm)].copy()
    cols = []
    for c in range(n):
        rows = c + 1 + np.flatnonzero(P[c + 1:, c])
        P[np.ix_(rows, rows)] = True
        cols.append(rows)
    return anc, rel, perm, cols


def _tree_plan(J, ops):
    """Elimination plan of the normal matrix for the active joints ``J``.

    A joint's rotation block is coupled only to its ancestors' and
    descendants' blocks (and to the root translation), so eliminating the
    deepest joints first produces no fill-in: every column of the Cholesky
    factor has at most ~20 non-zeros instead of up to 68. Returns the
    elimination order and, per column, the (permuted) rows below the
    diagonal that are non-zero, as index tensors.
    """
    key = (tuple(J), ops.name, str(getattr(ops, "device", "")))
    plan = _TREE_PLANS.get(key)
    if plan is not None:
        return plan
    nj, n = len(J), 3 * len(J) + 3
    anc, rel, perm, cols = _elimination(J)
    # compact storage: the structurally non-zero lower triangle, one row of B values per entry.
    # src: its flat index in the dense (n, n) matrix; vsrc: its row in the "virtual" source
    # stack of tree_normal_solve (rotation blocks of related joint pairs, then the
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
    lt = lambda *a: ops.index(np.asarray(a[0], dtype=np.int64))  # noqa: E731
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


def _ops_of(a):
    """The backend of ``a``: numpy, or torch in its dtype on its device."""
    return lm.NUMPY if isinstance(a, np.ndarray) else lm.torch_ops(a.dtype, a.device)


def tree_cholesky_solve(H, g, J):
    """Solve ``H x = -g`` (batched, symmetric positive definite) with the sparse tree factorisation.

    Same role as ``cholesky_ex`` + ``cholesky_solve`` (returns ``(x, info)``,
    ``info != 0`` where a pivot was not positive or not finite) but touches
    only the structurally non-zero entries of the lower triangle: for large
    batches on the CPU this is several times faster than LAPACK's dense
    per-matrix factorisation. ``H`` and ``g``: numpy arrays or torch tensors.
    """
    ops = _ops_of(H)
    perm, src, cols, n, _ = _tree_plan(J, ops)
    B = H.shape[0]
    # batch last: each matrix entry is a contiguous row of B values, so the
    # gathers / scatters below move whole rows
    A = ops.contiguous(ops.T(H.reshape(B, n * n)[:, src]))
    return _tree_factor_solve(ops, A, g, perm, cols, n)


def _tree_factor_solve(ops, A, g, perm, cols, n):
    """Factorise the compact lower triangle ``A`` (nnz, B) in place and solve for ``-g`` (B, n).

    Every index list of a column names distinct rows, so ``A[rows] -= ...`` adds nothing twice."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):   # (a bad frame is flagged, not warned of)
        return _factor_solve(ops, A, g, perm, cols, n)


def _factor_solve(ops, A, g, perm, cols, n):
    xp = ops.xp
    B = A.shape[1]
    b = ops.contiguous(ops.T(-g[:, perm]))
    diag = ops.empty((n, B))
    tiny = xp.finfo(A.dtype).tiny
    bad = ~xp.isfinite(A).all(0)
    for c, dc, r, rc, rr, ii, jj in cols:
        piv = A[dc]
        bad |= ~(piv > 0)
        d = xp.sqrt(ops.clamp_min(piv, tiny))
        diag[c] = d
        if len(r):
            col = A[rc] / d
            A[rc] = col
            A[rr] -= col[ii] * col[jj]
    for c, dc, r, rc, rr, ii, jj in cols:  # forward: L y = b (in place)
        b[c] /= diag[c]
        if len(r):
            b[r] -= A[rc] * b[c]
    for c, dc, r, rc, rr, ii, jj in reversed(cols):  # backward: L^T x = y (in place)
        if len(r):
            b[c] -= (A[rc] * b[r]).sum(0)
        b[c] /= diag[c]
    out = ops.empty(tuple(g.shape))
    out[:, perm] = ops.T(b)
    return out, bad


def tree_normal_solve(ops, T, pj, w_sum, g, diag_add, J, orient_pair=None, Hl=None):
    """Build only the structurally non-zero entries of the normal matrix (batch last) and solve.

    Same matrix as the dense construction of :mod:`.refine`: rotation
    blocks ``tr(Q) I - Q^T`` of related joint pairs, rotation-translation
    blocks ``[m_i - S_i p_i]_x``, the translation block ``sum(w) I``; plus
    the orientation pair terms, the joint-limit blocks and ``diag_add``
    (prior + damping, (B, n)) on the diagonal. Returns ``(x, bad)``
    (``bad``: a pivot was not positive or not finite).
    """
    perm, _, cols, n, (vsrc, pi, pk, dp, diag_pairs, diag_pos) = _tree_plan(J, ops)
    B = T.shape[0]
    Tt = ops.contiguous(ops.permute(T[..., :13], (1, 2, 0)))  # (nj, 13, B)
    Pt = ops.contiguous(ops.permute(pj, (1, 2, 0)))  # (nj, 3, B)
    Tg = Tt[dp]  # (np, 13, B): sums over the keypoints both joints move
    S, m, M = Tg[:, 0], Tg[:, 1:4], Tg[:, 4:13].reshape(-1, 3, 3, B)
    pa, pb = Pt[pi], Pt[pk]
    u = m - S[:, None] * pb
    Q = M - m[:, :, None] * pb[:, None, :] - pa[:, :, None] * u[:, None, :]  # (np, 3, 3, B)
    blk = -ops.swap12(Q)
    d3 = ops.index(np.arange(3))
    extra = Q[:, 0, 0] + Q[:, 1, 1] + Q[:, 2, 2]
    if orient_pair is not None:  # (B, nj, nj)
        extra = extra + ops.permute(orient_pair, (1, 2, 0))[pi, pk]  # (np, B)
    blk[:, d3, d3] += extra[:, None]
    if Hl is not None:  # (B, nj, 3, 3) on the diagonal blocks
        blk[diag_pairs] += ops.permute(Hl, (1, 2, 3, 0))
    v = Tt[:, 1:4] - Tt[:, 0:1] * Pt  # (nj, 3, B)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    o = x * 0.0
    rt = ops.xp.stack([o, -z, y, z, o, -x, -y, x, o], 1)  # (nj, 9, B): [v]_x
    tt = ops.zeros((9, B))
    tt[0::4] = w_sum
    A = ops.cat([blk.reshape(-1, B), rt.reshape(-1, B), tt], 0)[vsrc]
    A[diag_pos] += ops.T(diag_add)
    return _tree_factor_solve(ops, A, g, perm, cols, n)
