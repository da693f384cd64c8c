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
Normal equations are formed and solved with torch (batched Cholesky), in
chunks of frames; a step that does not lower a frame's cost is rejected for
that frame and its damping raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Targets", "RigSolveResult", "free_bones", "solve_rig", "posed_points"]


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
        armature units, ``weight`` (T,), ``proj`` (3, 3) (from ``axes``),
        ``name``, ``kind``.
    """

    points: list = field(default_factory=list)
    rows: list = field(default_factory=list)

    def point(self, bone: int, offset=(0.0, 0.0, 0.0)) -> int:
        """Index of the point attached to ``bone`` at ``offset`` (added once)."""
        off = np.asarray(offset, dtype=np.float64).reshape(3)
        for i, (b, o) in enumerate(self.points):
            if b == bone and np.allclose(o, off, atol=1e-12):
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
        weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), target.shape[:1]).copy()
        bad = ~np.isfinite(target).all(-1)
        weight[bad] = 0.0
        target = np.where(bad[:, None], 0.0, target)
        axes = np.asarray(axes, dtype=np.float64)
        proj = np.diag(axes) if axes.shape == (3,) else axes.reshape(3, 3)
        if perpendicular:
            n = np.linalg.norm(target, axis=-1, keepdims=True)
            u = np.where(n > 1e-12, target / np.where(n > 1e-12, n, 1.0), 0.0)
            proj = proj[None] @ (np.eye(3) - u[:, :, None] * u[:, None, :])
            target = np.zeros_like(target)   # the perpendicular part of the target itself is zero
        self.rows.append(dict(coef=dict(coef), target=target, weight=weight, proj=proj, name=name, kind=kind))

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


def _skew(v):
    z = torch.zeros_like(v[..., 0])
    x, y, w = v[..., 0], v[..., 1], v[..., 2]
    return torch.stack([torch.stack([z, -w, y], -1), torch.stack([w, z, -x], -1),
                        torch.stack([-y, x, z], -1)], -2)


def _expmap(v):
    """Axis-angle vectors (..., 3) to rotation matrices (Rodrigues)."""
    theta = torch.linalg.norm(v, dim=-1, keepdim=True)[..., None]
    K = _skew(v)
    small = theta < 1e-8
    t = torch.where(small, torch.ones_like(theta), theta)
    a = torch.where(small, 1.0 - theta ** 2 / 6.0, torch.sin(t) / t)
    b = torch.where(small, 0.5 - theta ** 2 / 24.0, (1.0 - torch.cos(t)) / t ** 2)
    eye = torch.eye(3, dtype=v.dtype).expand_as(K)
    return eye + a * K + b * (K @ K)


def _logmap(R):
    """Rotation matrices (..., 3, 3) to axis-angle vectors (small angles exact, pi safe enough)."""
    tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
    cos = ((tr - 1.0) * 0.5).clamp(-1.0, 1.0)
    theta = torch.arccos(cos)
    w = torch.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    s = torch.sin(theta)
    f = torch.where(s.abs() < 1e-6, 0.5 + theta ** 2 / 12.0, theta / (2.0 * s.clamp_min(1e-12)))
    return w * f[..., None]


#: Up to this many frames the solve runs on one torch thread: for tiny
#: problems the thread pool's hand-offs cost milliseconds per call (and make
#: the other thread pools in the process, numpy's BLAS, wait), more than the work.
SMALL_BATCH = 32


class _threads:
    """Context: torch runs on ``n`` threads inside, as before outside."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        self.old = torch.get_num_threads()
        if self.n != self.old:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.n != self.old:
            torch.set_num_threads(self.old)


def _solve_spd(H, g):
    """``-H^-1 g`` per frame for symmetric positive definite ``H`` (n, m, m); 0 where singular."""
    L, info = torch.linalg.cholesky_ex(H)
    step = -torch.cholesky_solve(g[..., None], L)[..., 0]
    return torch.where((info == 0)[:, None], step, torch.zeros_like(step))


def _orthonormalise(m):
    u, _, vh = torch.linalg.svd(m)
    return u @ vh


class _RigFK:
    """Forward kinematics of the posed subset of a rig, torch, batched over frames."""

    def __init__(self, rig, posed, dtype):
        self.posed = list(posed)                      # parents before children
        self.slot = {b: i for i, b in enumerate(self.posed)}
        Q = rig.rest_rotation()
        h = rig.head
        n = len(self.posed)
        rel_rot = np.empty((n, 3, 3))
        rel_pos = np.empty((n, 3))
        par = np.full(n, -1)
        for i, b in enumerate(self.posed):
            p = int(rig.parents[b])
            if p < 0:
                rel_rot[i], rel_pos[i] = Q[b], h[b]
            else:
                if p not in self.slot:
                    raise ValueError("posed bones must be closed under parents")
                par[i] = self.slot[p]
                rel_rot[i] = Q[p].T @ Q[b]
                rel_pos[i] = Q[p].T @ (h[b] - h[p])
        self.rel_rot_list = list(torch.as_tensor(rel_rot, dtype=dtype).unbind(0))
        self.rel_pos_list = list(torch.as_tensor(rel_pos, dtype=dtype).unbind(0))
        self.rel_rot_np, self.rel_pos_np = rel_rot, rel_pos
        self.par = [int(x) for x in par]

    def __call__(self, basis, loc):
        """basis (T, n, 3, 3), loc (T, n, 3) -> W (T, n, 3, 3), X (T, n, 3), base_rot (T, n, 3, 3)."""
        T, n = basis.shape[:2]
        if T <= SMALL_BATCH:
            return self._small(basis, loc)
        W, X, B = [None] * n, [None] * n, [None] * n
        rr, rp = self.rel_rot_list, self.rel_pos_list
        for i in range(n):           # parents first; per-bone views, no gathers
            p = self.par[i]
            if p < 0:
                br = rr[i].expand(T, 3, 3)
                bp = rp[i].expand(T, 3)
            else:
                Wp = W[p]
                br = Wp @ rr[i]
                bp = X[p] + Wp @ rp[i]
            B[i] = br
            W[i] = br @ basis[:, i]
            X[i] = bp + (br @ loc[:, i, :, None])[..., 0]
        return torch.stack(W, 1), torch.stack(X, 1), torch.stack(B, 1)


    def _small(self, basis, loc):
        """The same forward kinematics in numpy, for a few frames (a pose being dragged).

        ``bench_live.py``: a torch call costs several microseconds whatever its
        size, a numpy call on 3x3 matrices about one; a chain of ~30 bones
        evaluated ~20 times per solve makes that the difference between tens of
        milliseconds and a few. Same algorithm, same results
        (``tests/pure/test_pipeline.py`` checks they agree).
        """
        b = basis.numpy()
        lc = loc.numpy()
        T, n = b.shape[:2]
        W = np.empty((T, n, 3, 3))
        X = np.empty((T, n, 3))
        B = np.empty((T, n, 3, 3))
        rr, rp = self.rel_rot_np, self.rel_pos_np
        for i in range(n):
            p = self.par[i]
            if p < 0:
                br = np.broadcast_to(rr[i], (T, 3, 3))
                bp = np.broadcast_to(rp[i], (T, 3))
            else:
                Wp = W[:, p]
                br = Wp @ rr[i]
                bp = X[:, p] + Wp @ rp[i]
            B[:, i] = br
            W[:, i] = br @ b[:, i]
            X[:, i] = bp + (br @ lc[:, i, :, None])[..., 0]
        dt = basis.dtype
        return torch.from_numpy(W).to(dt), torch.from_numpy(X).to(dt), torch.from_numpy(B).to(dt)


def posed_points(W, X, points_bone_slot, points_offset):
    """Positions (T, P, 3) of points attached to posed bones."""
    return X[:, points_bone_slot] + (W[:, points_bone_slot] @ points_offset[None, :, :, None])[..., 0]


def solve_rig(rig, quats, locations, targets: Targets, free, root: int, *, prior_rotation=0.02,
              prior_translation=0.02, iterations: int = 8, locked=None, chunk: int = 1024, tol: float = 1e-5,
              prior_decay: float = 0.3, prior_floor: float = 1e-3, root_fixed=None,
              dtype=torch.float32, progress=None) -> RigSolveResult:
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
    progress : callable, optional
        ``progress(done_frames, total_frames)``.

    Returns
    -------
    RigSolveResult
    """
    from ..model.rotations_np import matrix_to_quat, quat_to_matrix

    quats = np.asarray(quats, dtype=np.float64)
    locations = np.asarray(locations, dtype=np.float64)
    T, nb = quats.shape[:2]
    free = [int(b) for b in free]
    point_bones = [b for b, _ in targets.points]
    need = set(free) | set(point_bones) | ({root} if root >= 0 else set())
    posed = set()
    for b in need:
        posed.add(b)
        posed.update(rig.ancestors(b))
    posed = sorted(posed, key=lambda i: (rig.depth[i], i))
    fk = _RigFK(rig, posed, dtype)
    slot = fk.slot
    nF = len(free)
    fslot = np.array([slot[b] for b in free], dtype=np.int64)
    P = len(targets.points)
    R = len(targets.rows)
    pslot = torch.as_tensor([slot[b] for b in point_bones], dtype=torch.long)
    poff = torch.as_tensor(np.array([o for _, o in targets.points]).reshape(P, 3), dtype=dtype)
    # which free bones move each point: A[p, f] = 1 if free[f] is bone(p) or its ancestor
    A = np.zeros((P, nF))
    for p_i, b in enumerate(point_bones):
        chain = {b, *rig.ancestors(b)}
        for f_i, f in enumerate(free):
            if f in chain:
                A[p_i, f_i] = 1.0
    moved_by_root = np.array([1.0 if (root >= 0 and (b == root or rig.is_ancestor(root, b))) else 0.0
                              for b in point_bones])
    C = np.zeros((R, P))
    for r_i, row in enumerate(targets.rows):
        for p_i, c in row["coef"].items():
            C[r_i, p_i] += c
    Ct = torch.as_tensor(C, dtype=dtype)
    # CA[r, p, k] = C[r, p] A[p, k]; M = C A; Mroot = C moved_by_root
    CA = torch.as_tensor(C[:, :, None] * A[None], dtype=dtype)
    M = torch.as_tensor(C @ A, dtype=dtype)
    Mroot = torch.as_tensor(C @ moved_by_root, dtype=dtype)
    per_frame = any(row["proj"].ndim == 3 for row in targets.rows)
    if per_frame:   # stacked per chunk below (a (T, R, 3, 3) array is large for long clips)
        diag_only = False
        proj_all = None
    else:
        proj_np = np.array([row["proj"] for row in targets.rows]).reshape(R, 3, 3)
        diag_only = bool(np.allclose(proj_np, proj_np * np.eye(3)))
        proj_all = torch.as_tensor(proj_np, dtype=dtype)
    tgt_all = np.stack([row["target"] for row in targets.rows], 1) if R else np.zeros((T, 0, 3))
    w_all = np.stack([row["weight"] for row in targets.rows], 1) if R else np.zeros((T, 0))
    pr = np.broadcast_to(np.asarray(prior_rotation, dtype=np.float64), (nF,))
    prior_diag = np.repeat(pr, 3)
    if root >= 0:
        prior_diag = np.concatenate([prior_diag, np.full(3, float(prior_translation))])
    root_fixed_t = None if root_fixed is None else torch.as_tensor(np.asarray(root_fixed), dtype=dtype)
    lock_axes = None
    if locked:
        lf, le = [], []
        for f_i, b in enumerate(free):
            for ax in np.flatnonzero(np.asarray(locked.get(b, (False,) * 3), dtype=bool)):
                lf.append(f_i)
                le.append(np.eye(3)[ax])
        if lf:
            lock_axes = True
            lock_f = torch.as_tensor(lf)
            lock_e = torch.as_tensor(np.array(le), dtype=dtype)
    prior_t = torch.as_tensor(prior_diag, dtype=dtype)

    out_quats = quats.copy()
    out_locs = locations.copy()
    heads = np.empty((T, nb, 3))
    resid = np.zeros((T, R))
    posed_idx = np.array(posed, dtype=np.int64)

    done_iterations = 0
    # while the prior fades, keep iterating until it is nearly gone
    min_iterations = int(np.ceil(np.log(prior_floor) / np.log(prior_decay))) if 0 < prior_decay < 1 else 0
    min_iterations = min(min_iterations, int(iterations))
    with _threads(1 if T <= SMALL_BATCH else torch.get_num_threads()):
        for c0 in range(0, T, chunk):
            c1 = min(T, c0 + chunk)
            n = c1 - c0
            basis = torch.as_tensor(quat_to_matrix(quats[c0:c1][:, posed_idx]), dtype=dtype)
            loc = torch.as_tensor(locations[c0:c1][:, posed_idx], dtype=dtype)
            basis0 = basis[:, fslot].clone()
            root_head0 = None
            tgt = torch.as_tensor(tgt_all[c0:c1], dtype=dtype)
            wts = torch.as_tensor(w_all[c0:c1], dtype=dtype)
            if per_frame:
                proj = torch.as_tensor(np.stack([np.broadcast_to(row["proj"], (T, 3, 3))[c0:c1]
                                                 for row in targets.rows], 1), dtype=dtype)
            else:
                proj = proj_all[None]
            wproj = wts[..., None, None] * proj                          # (n, R, 3, 3)
            wdiag = torch.diagonal(wproj, dim1=-2, dim2=-1)             # (n, R, 3)
            lam = torch.full((n,), 1e-3, dtype=dtype)

            def evaluate(basis, loc):
                W, X, Bm = fk(basis, loc)
                pts = posed_points(W, X, pslot, poff)                    # (n, P, 3)
                comb = torch.einsum("rp,tpi->tri", Ct, pts)
                if diag_only:
                    r_t = wdiag * (comb - tgt)                            # (n, R, 3)
                else:
                    r_t = (wproj @ (comb - tgt)[..., None])[..., 0]
                eta = _logmap(basis0.transpose(-1, -2) @ basis[:, fslot])  # (n, F, 3)
                r_p = [eta.reshape(n, -1)]
                if root >= 0:
                    r_p.append(X[:, slot[root]] - root_head0)
                r_prior = pw * torch.cat(r_p, 1)
                cost = (r_t ** 2).sum((1, 2)) + (r_prior ** 2).sum(1)
                return W, X, Bm, pts, r_t, r_prior, cost

            W, X, Bm, pts, r_t, r_prior, cost = (None,) * 7
            pw = prior_t
            if root >= 0:
                _, X0, _ = fk(basis, loc)
                root_head0 = X0[:, slot[root]].clone()
            W, X, Bm, pts, r_t, r_prior, cost = evaluate(basis, loc)
            pw = prior_t
            for it in range(int(iterations)):
                if it and prior_decay < 1.0:   # continuation: the prior fades, the targets are met exactly
                    new_pw = prior_t * max(prior_decay ** it, prior_floor)
                    ratio = new_pw / pw
                    cost = cost - (r_prior ** 2).sum(1) + ((r_prior * ratio) ** 2).sum(1)
                    r_prior = r_prior * ratio
                    pw = new_pw
                # Jacobian of row r w.r.t. a world-axis increment d_k of free bone k
                # (the subtree of k turns about X_k): sum_p C[r,p] A[p,k] d_k x (p - X_k)
                # = -[v_rk]_x d_k with v_rk = q_rk - M_rk X_k.
                q = torch.einsum("rpk,tpi->trki", CA, pts)               # (n, R, F, 3)
                v = q - M[None, :, :, None] * X[:, None, fslot]          # (n, R, F, 3)
                Jd = torch.zeros((n, R, 3, nF, 3), dtype=dtype)
                vx, vy, vz = v[..., 0], v[..., 1], v[..., 2]
                Jd[:, :, 0, :, 1] = vz
                Jd[:, :, 0, :, 2] = -vy
                Jd[:, :, 1, :, 0] = -vz
                Jd[:, :, 1, :, 2] = vx
                Jd[:, :, 2, :, 0] = vy
                Jd[:, :, 2, :, 1] = -vx
                if diag_only:
                    Jd = (Jd * wdiag[:, :, :, None, None]).reshape(n, 3 * R, 3 * nF)
                else:
                    Jd = (wproj.reshape(n * R, 3, 3) @ Jd.reshape(n * R, 3, 3 * nF)).reshape(n, 3 * R, 3 * nF)
                if root >= 0:
                    Jr = Mroot[None, :, None, None] * wproj                    # (n, R, 3, 3)
                    Jd = torch.cat([Jd, Jr.reshape(n, 3 * R, 3)], -1)
                rt = r_t.reshape(n, 3 * R)
                H = Jd.transpose(1, 2) @ Jd
                g = (Jd.transpose(1, 2) @ rt[..., None])[..., 0]
                # prior rows: r = w (eta_acc + W_k^T d_k): H += w^2 I, g += w W_k r
                Wf = W[:, fslot]
                gp = (Wf @ r_prior[:, :3 * nF].reshape(n, nF, 3, 1))[..., 0].reshape(n, 3 * nF)
                if root >= 0:
                    gp = torch.cat([gp, r_prior[:, 3 * nF:]], 1)
                H = H + torch.diag_embed(pw ** 2).expand_as(H)
                g = g + pw * gp
                diag = torch.diagonal(H, dim1=-2, dim2=-1)
                H = H + torch.diag_embed(lam[:, None] * diag + 1e-9)
                if lock_axes is not None:   # locked bone axes: stiff springs on (W_k e_a) . d_k
                    u = (Wf[:, lock_f] @ lock_e[None, :, :, None])[..., 0]        # (n, Lk, 3)
                    for j, f_i in enumerate(lock_f.tolist()):
                        sl = slice(3 * f_i, 3 * f_i + 3)
                        H[:, sl, sl] += 1e6 * (u[:, j, :, None] * u[:, j, None, :])
                if root >= 0 and root_fixed is not None:   # root translation held in these directions
                    H[:, 3 * nF:, 3 * nF:] += 1e6 * root_fixed_t
                step = _solve_spd(H, g)
                d_w = step[:, :3 * nF].reshape(n, nF, 3)
                eta = (Wf.transpose(-1, -2) @ d_w[..., None])[..., 0]            # bone frame
                nb_basis = basis.clone()
                nb_basis[:, fslot] = basis[:, fslot] @ _expmap(eta)
                nloc = loc
                if root >= 0:
                    tau = step[:, 3 * nF:]
                    rs = slot[root]
                    nloc = loc.clone()
                    nloc[:, rs] = loc[:, rs] + (Bm[:, rs].transpose(-1, -2) @ tau[..., None])[..., 0]
                cand = evaluate(nb_basis, nloc)
                better = cand[-1] <= cost
                bm = better[:, None, None, None]
                basis = torch.where(bm, nb_basis, basis)
                loc = torch.where(better[:, None, None], nloc, loc)
                W, X, Bm, pts, r_t, r_prior = (torch.where(better.reshape((-1,) + (1,) * (a.dim() - 1)), a, b)
                                               for a, b in zip(cand[:-1], (W, X, Bm, pts, r_t, r_prior)))
                cost = torch.where(better, cand[-1], cost)
                lam = torch.where(better, (lam / 3.0).clamp_min(1e-7), lam * 10.0)
                done_iterations = max(done_iterations, it + 1)
                # every frame converged: a further step would move nothing that matters
                if float(step.abs().max()) < tol and it + 1 >= min_iterations:
                    break
                if progress is not None:
                    progress(c0 + n * 0.999, T)
            basis = _orthonormalise(basis)
            W, X, _ = fk(basis, loc)
            # unweighted residual lengths
            pts = posed_points(W, X, pslot, poff)
            comb = torch.einsum("rp,tpi->tri", Ct, pts)
            resid[c0:c1] = torch.linalg.norm((proj @ (comb - tgt)[..., None])[..., 0], dim=-1).numpy()
            b_np = basis.numpy()
            out_quats[c0:c1, posed_idx] = matrix_to_quat(b_np)
            out_locs[c0:c1, posed_idx] = loc.numpy()
            heads[c0:c1, posed_idx] = X.numpy()
            if progress is not None:
                progress(c1, T)
    # bones outside the posed subset: their heads by full FK, in chunks (memory stays bounded)
    rest = np.setdiff1d(np.arange(nb), posed_idx)
    if rest.size:
        from .solve import pose_rig
        for c0 in range(0, T, 4096):
            _, Xf = pose_rig(rig, out_quats[c0:c0 + 4096], out_locs[c0:c0 + 4096])
            heads[c0:c0 + 4096, rest] = Xf[:, rest]
    from .solve import quat_continuity
    return RigSolveResult(quat_continuity(out_quats), out_locs, heads, resid, done_iterations)
