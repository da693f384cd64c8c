"""The structure of a rig-space solve that every chunk of frames shares (:class:`Problem`), cached per rig.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from .rigfk import RigFK, torch_dtype

__all__ = ["Problem", "cached_problem"]


class Problem:
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
        self.fk = RigFK(rig, self.posed, dtype)
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
        self._t = {}

    def projections(self, targets, c0, c1, T):
        """(n, R, 3, 3) per-frame projections of frames ``c0:c1``, or (R, 3, 3)."""
        if not self.per_frame:
            return self.proj
        return np.stack([np.broadcast_to(row["proj"], (T, 3, 3))[c0:c1] for row in targets.rows], 1)

    def torch(self, device="cpu"):
        """The problem's constants as torch tensors on ``device`` (kept per device)."""
        import torch

        key = str(device)
        if key not in self._t:
            t = lambda a: torch.as_tensor(a, dtype=torch_dtype(self.dtype), device=device)  # noqa: E731
            i = lambda a, dt=None: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
            self._t[key] = dict(pslot=i(self.pslot), poff=t(self.poff), C=t(self.C),
                                pair_CA=t(self.pair_CA), pair_M=t(self.pair_M), Mroot=t(self.Mroot),
                                prior=t(self.prior), pair_r=i(self.pair_r), pair_k=i(self.pair_k),
                                pair_fslot=i(self.pair_fslot),
                                root_fixed=None if self.root_fixed is None else t(self.root_fixed),
                                lock_f=i(self.lock_f, torch.long), lock_e=t(self.lock_e))
        return self._t[key]


def cached_problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype) -> Problem:
    """:class:`Problem`, remembered on the rig for the last few structures.

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
        pb = Problem(rig, targets, free, root, prior_rotation, prior_translation, locked, root_fixed, dtype)
        pb.rig_arrays = arrays
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[key] = pb
    return pb
