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
import sys

import numpy as np

from ..model.rotations_np import vector_norm
from .levenberg import NUMPY, levenberg_marquardt, torch_ops

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
        weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), target.shape[:1]).copy()
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
        self.rows.append(dict(coef=dict(coef), target=target, weight=weight, proj=proj, name=name, kind=kind))

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
        from .solve import quat_continuity

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


def _torch_dtype(dtype):
    """The torch path's precision: ``dtype``, float32 when not given."""
    import torch

    return torch.float32 if dtype is None else dtype


class _RigFK:
    """Forward kinematics of the posed subset of a rig, batched over frames (torch, or numpy for a few frames)."""

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
        self.dtype = dtype
        self.rel_rot_np, self.rel_pos_np = rel_rot, rel_pos
        self.par = [int(x) for x in par]
        self._torch = None
        self._levels_np = None

    def _levels(self):
        """``(slice, parent slots or None, rest rotations, rest offsets)`` per depth level (numpy)."""
        if self._levels_np is None:
            # posed bones are sorted by depth: every level is a contiguous slice
            depth = np.zeros(len(self.par), dtype=np.int64)
            for i, p in enumerate(self.par):
                depth[i] = 0 if p < 0 else depth[p] + 1
            self._levels_np = []
            for d in range(int(depth.max()) + 1 if depth.size else 0):
                idx = np.flatnonzero(depth == d)
                sl = slice(int(idx[0]), int(idx[-1]) + 1)
                assert idx[-1] - idx[0] + 1 == len(idx)
                par = None if d == 0 else np.array([self.par[i] for i in idx])
                self._levels_np.append((sl, par, self.rel_rot_np[sl], self.rel_pos_np[sl][..., None]))
        return self._levels_np

    def __call__(self, basis, loc):
        """basis (T, n, 3, 3), loc (T, n, 3) tensors -> W (T, n, 3, 3), X (T, n, 3), base_rot (T, n, 3, 3)."""
        import torch

        if self._torch is None:
            dt = _torch_dtype(self.dtype)
            self._torch = [(sl, None if par is None else torch.as_tensor(par), torch.as_tensor(rr, dtype=dt),
                            torch.as_tensor(rp, dtype=dt)) for sl, par, rr, rp in self._levels()]
        return _level_fk(basis, loc, self._torch, lambda shape: torch.empty(shape, dtype=basis.dtype))

    def numpy(self, basis, loc):
        """The same forward kinematics on float64 numpy arrays."""
        return _level_fk(basis, loc, self._levels(), np.empty)


def _level_fk(basis, loc, levels, empty):
    """Forward kinematics one depth level at a time (numpy or torch arrays alike): ``(W, X, B)``.

    ``W`` the bones' armature-space rotations, ``X`` their heads, ``B`` their
    rotations before their own pose (the parent's with the rest offset).
    """
    T, n = basis.shape[:2]
    W = empty((T, n, 3, 3))
    X = empty((T, n, 3))
    B = empty((T, n, 3, 3))
    for sl, par, rr, rp in levels:
        if par is None:
            br = rr
            bp = rp[..., 0]
        else:
            Wp = W[:, par]
            br = Wp @ rr
            bp = X[:, par] + (Wp @ rp)[..., 0]
        B[:, sl] = br
        W[:, sl] = br @ basis[:, sl]
        X[:, sl] = bp + (br @ loc[:, sl, :, None])[..., 0]
    return W, X, B


class _RestFK:
    """The heads of the bones a solve does not pose (hand ends, fingers), from their posed parents.

    Posing the whole rig again after the solve for them costs more than
    needed: their posed ancestors' rotations and
    heads are at hand in each chunk, so only these bones are posed, parents
    first, and only those with an unposed child get a rotation.
    """

    def __init__(self, rig, posed_slot, unposed):
        Q, h = rig.rest_rotation(), rig.head
        order = sorted((int(b) for b in unposed), key=lambda b: (rig.depth[b], b))
        own = {b: i for i, b in enumerate(order)}
        parents = {int(rig.parents[b]) for b in order}
        self.bones = order
        self.steps = []
        for b in order:
            p = int(rig.parents[b])
            if p < 0:
                src, rel_rot, rel_pos = None, Q[b], h[b]
            else:
                src = ("posed", posed_slot[p]) if p in posed_slot else ("rest", own[p])
                rel_rot, rel_pos = Q[p].T @ Q[b], Q[p].T @ (h[b] - h[p])
            self.steps.append((b, src, rel_rot, rel_pos, b in parents))

    def numpy(self, W, X, quats, locs):
        """Heads ``(n, len(bones), 3)`` of the unposed bones; ``W``, ``X``: the posed subset's pose,
        ``quats``, ``locs``: the chunk's values of every bone."""
        from ..model.rotations_np import quat_to_matrix

        n = X.shape[0]
        out = np.empty((n, len(self.bones), 3))
        Wr = {}
        for i, (b, src, rel_rot, rel_pos, needed) in enumerate(self.steps):
            if src is None:
                base_rot = np.broadcast_to(rel_rot, (n, 3, 3))
                base_pos = np.broadcast_to(rel_pos, (n, 3))
            else:
                kind, j = src
                Wp, Xp = (W[:, j], X[:, j]) if kind == "posed" else (Wr[j], out[:, j])
                base_rot = Wp @ rel_rot
                base_pos = Xp + Wp @ rel_pos
            out[:, i] = base_pos + (base_rot @ locs[:, b, :, None])[..., 0]
            if needed:
                Wr[i] = base_rot @ quat_to_matrix(quats[:, b])
        return out


def posed_points(W, X, points_bone_slot, points_offset):
    """Positions (T, P, 3) of points attached to posed bones."""
    return X[:, points_bone_slot] + (W[:, points_bone_slot] @ points_offset[None, :, :, None])[..., 0]


class _Problem:
    """What every chunk of frames shares: the posed subset, the targets' structure, the prior, the locks.

    All arrays are float64 numpy; :meth:`torch` gives them as tensors for
    the batched path.
    """

    def __init__(self, rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype):
        free = [int(b) for b in free]
        point_bones = [b for b, _ in targets.points]
        # the bones that move each point when they turn: its bone's ancestors, and its bone
        # unless the point is that bone's head (a bone turns about its head)
        movers = [set(rig.ancestors(b)) | ({b} if np.any(o) else set()) for b, o in targets.points]
        # a free bone that moves no target point never moves (no row pulls it, its prior holds
        # it where it starts: its step is zero): it is left out of the unknowns (a dense bake's
        # problem: 5 of 23 bones, a third of the normal equations' work)
        moving = set().union(*movers)
        keep = [i for i, b in enumerate(free) if b in moving]
        pr = np.broadcast_to(np.asarray(prior_rotation, dtype=np.float64), (len(free),))[keep]
        free = [free[i] for i in keep]
        need = set(free) | set(point_bones) | ({root} if root >= 0 else set())
        posed = set()
        for b in need:
            posed.add(b)
            posed.update(rig.ancestors(b))
        self.posed = sorted(posed, key=lambda i: (rig.depth[i], i))
        #: bones the solve leaves as they are (their heads come from full forward kinematics)
        self.unposed = np.setdiff1d(np.arange(len(rig)), self.posed)
        self.fk = _RigFK(rig, self.posed, dtype)
        slot = self.fk.slot
        self.nF = nF = len(free)
        self.fslot = np.array([slot[b] for b in free], dtype=np.int64)
        self.root_slot = slot[root] if root >= 0 else -1
        P = len(targets.points)
        R = len(targets.rows)
        self.R = R
        self.pslot = np.array([slot[b] for b in point_bones], dtype=np.int64)
        self.poff = np.array([o for _, o in targets.points], dtype=np.float64).reshape(P, 3)
        # which free bones move each point: A[p, f] = 1 if free[f] is bone(p)'s ancestor, or bone(p)
        # itself where p is not its head
        A = np.array([[1.0 if f in m else 0.0 for f in free] for m in movers]).reshape(P, nF)
        moved_by_root = np.array([1.0 if (root >= 0 and (b == root or rig.is_ancestor(root, b))) else 0.0
                                  for b in point_bones])
        C = np.zeros((R, P))
        for r_i, row in enumerate(targets.rows):
            for p_i, c in row["coef"].items():
                C[r_i, p_i] += c
        # CA[r, p, k] = C[r, p] A[p, k]; M = C A (per pair below); Mroot = C moved_by_root
        CA = C[:, :, None] * A[None]
        self.C, self.Mroot = C, C @ moved_by_root
        # the Jacobian's (row, free bone) blocks that can be non-zero: a row moves with a bone
        # when one of its points hangs below it (most rows reach a few bones: a fifth of the
        # blocks of a dense bake's problem); the Jacobian is computed for these pairs only
        pair_r, pair_k = np.nonzero(np.abs(CA).sum(1) > 0)
        self.pair_r, self.pair_k = pair_r, pair_k
        self.pair_fslot = self.fslot[pair_k]
        self.pair_CA = np.ascontiguousarray(CA[pair_r, :, pair_k]).reshape(len(pair_r), P)   # (S, P)
        self.pair_M = self.pair_CA.sum(1)                                                     # M = C A, (S,)
        self.per_frame = any(row["proj"].ndim == 3 for row in targets.rows)
        if self.per_frame:   # stacked per chunk (a (T, R, 3, 3) array is large for long clips)
            self.diag_only = False
            self.proj = None
        else:
            self.proj = np.array([row["proj"] for row in targets.rows]).reshape(R, 3, 3)
            self.diag_only = bool(np.allclose(self.proj, self.proj * np.eye(3)))
        prior = np.repeat(pr, 3)
        if root >= 0:
            prior = np.concatenate([prior, np.full(3, float(prior_translation))])
        self.prior = prior
        self.root_fixed = None if root_fixed is None else np.asarray(root_fixed, dtype=np.float64)
        lf, le = [], []
        for f_i, b in enumerate(free):
            for ax in np.flatnonzero(np.asarray((locked or {}).get(b, (False,) * 3), dtype=bool)):
                lf.append(f_i)
                le.append(np.eye(3)[ax])
        self.lock_f = lf
        self.lock_e = np.array(le).reshape(-1, 3)
        self.dtype = dtype
        self._t = None

    def projections(self, targets, c0, c1, T):
        """(n, R, 3, 3) per-frame projections of frames ``c0:c1``, or (R, 3, 3)."""
        if not self.per_frame:
            return self.proj
        return np.stack([np.broadcast_to(row["proj"], (T, 3, 3))[c0:c1] for row in targets.rows], 1)

    def torch(self):
        import torch

        if self._t is None:
            t = lambda a: torch.as_tensor(a, dtype=_torch_dtype(self.dtype))  # noqa: E731
            self._t = dict(pslot=torch.as_tensor(self.pslot), poff=t(self.poff), C=t(self.C),
                           pair_CA=t(self.pair_CA), pair_M=t(self.pair_M), Mroot=t(self.Mroot), prior=t(self.prior),
                           pair_r=torch.as_tensor(self.pair_r), pair_k=torch.as_tensor(self.pair_k),
                           pair_fslot=torch.as_tensor(self.pair_fslot),
                           root_fixed=None if self.root_fixed is None else t(self.root_fixed),
                           lock_f=torch.as_tensor(self.lock_f, dtype=torch.long), lock_e=t(self.lock_e))
        return self._t


def _problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype) -> _Problem:
    """:class:`_Problem`, remembered on the rig for the last few structures.

    Solve Frame and Live Solve pose the same rig with the same targets (only
    their values change) many times a second; the key is everything the
    problem is built from except the target values and weights.
    """
    key = (tuple(int(b) for b in free), int(root), float(prior_translation), str(dtype),
           np.asarray(prior_rotation, dtype=np.float64).tobytes(),
           tuple((b, o.tobytes()) for b, o in targets.points),
           tuple((tuple(r["coef"].items()), r["proj"].shape, r["proj"].tobytes() if r["proj"].ndim == 2 else b"")
                 for r in targets.rows),
           tuple((int(b), tuple(bool(x) for x in np.asarray(v).reshape(-1))) for b, v in sorted((locked or {}).items())),
           None if root_fixed is None else np.asarray(root_fixed, dtype=np.float64).tobytes())
    cache = rig.__dict__.setdefault("_rigsolve_problems", {})
    pb = cache.get(key)
    arrays = (rig.matrix_local, rig.head, rig.parents)
    if pb is None or any(a is not b for a, b in zip(pb.rig_arrays, arrays)):
        pb = _Problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype)
        pb.rig_arrays = arrays
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[key] = pb
    return pb


_OPENBLAS = None


def _openblas():
    """``(get, set)`` thread-count functions of numpy's bundled OpenBLAS, or None (another BLAS)."""
    global _OPENBLAS
    if _OPENBLAS is None:
        found = ()
        try:
            import ctypes
            import glob

            libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
            for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
                lib = ctypes.CDLL(path)
                for name in ("openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads64_",
                             "openblas_{}_num_threads"):
                    get, put = (getattr(lib, name.format(x), None) for x in ("get", "set"))
                    if get is not None and put is not None:
                        found = (get, put)
                        break
                if found:
                    break
        except (OSError, AttributeError):
            pass
        _OPENBLAS = found
    return _OPENBLAS or None


class _blas_threads:
    """Context: numpy's OpenBLAS runs on ``n`` threads inside (where it can be told), as before outside."""

    def __init__(self, n):
        self.n = int(n)
        self.lib = _openblas()

    def __enter__(self):
        if self.lib is not None:
            self.old = int(self.lib[0]())
            self.lib[1](self.n)

    def __exit__(self, *exc):
        if self.lib is not None:
            self.lib[1](self.old)


class _threads:
    """Context: torch (where it is loaded) runs on ``n`` threads inside, as before outside."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        self.torch = sys.modules.get("torch")
        if self.torch is not None:
            self.old = self.torch.get_num_threads()
            if self.n != self.old:
                self.torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.torch is not None and self.n != self.old:
            self.torch.set_num_threads(self.old)


def solve_rig(rig, quats, locations, targets: Targets, free, root: int, *, prior_rotation=0.02,
              prior_translation=0.02, iterations: int = 8, locked=None, chunk: int = 1024, tol: float = 1e-5,
              rtol: float = FINISHED_RTOL,
              prior_decay: float = 0.3, prior_floor: float = 1e-3, root_fixed=None,
              dtype=None, progress=None, all_heads: bool = True, backend: str = "auto",
              overwrite: bool = False) -> RigSolveResult:
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
        ``auto`` and ``numpy``: float64 numpy (:data:`.levenberg.NUMPY`,
        float32 normal equations where the prior stays; long clips in
        chunks of :data:`NUMPY_CHUNK` frames on two threads): on the CPU as
        fast as torch or faster, also where the network has loaded torch
        (docs/tuning.md#numpy_chunk), and a bake that needs no network never
        imports torch. ``torch``: chunks of more than :data:`SMALL_BATCH`
        frames in torch, the same loop.
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
    from ..model.rotations_np import matrix_to_quat, quat_to_matrix

    quats = np.asarray(quats, dtype=np.float64)
    locations = np.asarray(locations, dtype=np.float64)
    T, nb = quats.shape[:2]
    pb = _problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype)
    R = pb.R

    def stacked(key, c0, c1):
        """The rows' targets (t, R, 3) or weights (t, R) of frames c0:c1 (per chunk: a long clip's
        whole (T, R, 3) would be a copy of every target)."""
        if not R:
            return np.zeros((c1 - c0, 0, 3) if key == "target" else (c1 - c0, 0))
        return np.stack([row[key][c0:c1] for row in targets.rows], 1)

    out_quats = quats if overwrite else quats.copy()      # (a chunk reads its frames before it stores them)
    out_locs = locations if overwrite else locations.copy()
    heads = np.empty((T, nb, 3)) if all_heads else np.full((T, nb, 3), np.nan)
    resid = np.zeros((T, R))
    posed_idx = np.array(pb.posed, dtype=np.int64)
    rest_fk = None
    if pb.unposed.size and all_heads:   # (once per problem: problems are cached)
        rest_fk = pb.__dict__.get("rest_fk")
        if rest_fk is None:
            rest_fk = pb.rest_fk = _RestFK(rig, {int(b): i for i, b in enumerate(pb.posed)}, pb.unposed)

    done_iterations = 0
    # while the prior fades, keep iterating until it is nearly gone
    min_iterations = int(np.ceil(np.log(prior_floor) / np.log(prior_decay))) if 0 < prior_decay < 1 else 0
    min_iterations = min(min_iterations, int(iterations))
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"backend must be 'auto', 'numpy' or 'torch', got {backend!r}")
    use_torch = int(iterations) > 0 and T > SMALL_BATCH and backend == "torch"

    def solve_chunk(c0, c1, tick):
        n = c1 - c0
        basis = quat_to_matrix(quats[c0:c1][:, posed_idx])
        loc = locations[c0:c1][:, posed_idx]
        proj = pb.projections(targets, c0, c1, T)
        tgt, w = stacked("target", c0, c1), stacked("weight", c0, c1)
        kw = dict(iterations=iterations, prior_decay=prior_decay, prior_floor=prior_floor,
                  min_iterations=min_iterations, tol=tol, rtol=rtol, progress=tick)
        posed = None
        if int(iterations) <= 0:   # only the residuals of the start pose
            it = 0
        elif use_torch and n > SMALL_BATCH:
            basis, loc, it, posed = levenberg_marquardt(pb, torch_ops(pb.dtype), basis, loc, tgt, w, proj, **kw)
        else:
            with _threads(1):
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
        X_rest = rest_fk.numpy(W, X, quats[c0:c1], locations[c0:c1]) if rest_fk is not None else None
        return c0, c1, q, loc, X, X_rest, res, it

    def store(c0, c1, q, loc, X, X_rest, res, it):
        out_quats[c0:c1, posed_idx] = q
        out_locs[c0:c1, posed_idx] = loc
        heads[c0:c1, posed_idx] = X
        if X_rest is not None:
            heads[c0:c1, rest_fk.bones] = X_rest
        resid[c0:c1] = res
        if progress is not None:
            progress(c1, T)
        return it

    workers = 1 if use_torch or int(iterations) <= 0 else max(min(MAX_THREADS, os.cpu_count() or 1), 1)
    # (the residuals alone, no step: no Jacobian to keep in cache, so the caller's chunks)
    step = int(chunk) if use_torch or int(iterations) <= 0 else min(int(chunk), NUMPY_CHUNK)
    # numpy's BLAS on one thread: its small products and 70 x 70 solves gain nothing from
    # more, and two chunks at once each starting BLAS threads crawl
    # (and torch's, where it is loaded and the numpy path runs: set once here, not by each
    # pooled chunk: two threads setting torch's thread count at once race)
    with _blas_threads(1), (contextlib.nullcontext() if use_torch else _threads(1)):
        # (with the cores shared, a short clip's two or three unequal chunks gain less than they cost)
        if workers < 2 or T <= step or (THREADS_ALLOWED is not None and T < 4 * step):
            for c0 in range(0, T, step):
                c1 = min(T, c0 + step)
                tick = None if progress is None else (lambda: progress(c0 + (c1 - c0) * 0.999, T))
                done_iterations = max(done_iterations, store(*solve_chunk(c0, c1, tick)))
        else:
            # numpy on one core per chunk (its arrays release the GIL): several chunks at once
            # (as many as THREADS_ALLOWED says, asked again as each finishes); progress (and
            # with it a cancel) in this thread as chunks finish
            from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

            pool = ThreadPoolExecutor(max_workers=workers)
            starts = list(range(0, T, step))[::-1]
            running = set()
            try:
                while starts or running:
                    limit = workers if THREADS_ALLOWED is None else max(1, min(workers, int(THREADS_ALLOWED())))
                    while starts and len(running) < limit:
                        c0 = starts.pop()
                        running.add(pool.submit(solve_chunk, c0, min(T, c0 + step), None))
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for fut in done:   # stored, not kept (a long clip's results would add up)
                        done_iterations = max(done_iterations, store(*fut.result()))
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    from .solve import quat_continuity
    return RigSolveResult(quat_continuity(out_quats, out=out_quats), out_locs, heads, resid, done_iterations)
