"""Forward kinematics of the rig-space solve: the posed subset of a rig by depth level (numpy or torch),
the bones it leaves unposed, and points attached to bones.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RigFK", "RestFK", "level_fk", "posed_points", "torch_dtype"]


def torch_dtype(dtype):
    """The torch path's precision: ``dtype``, float32 when not given."""
    import torch

    return torch.float32 if dtype is None else dtype


class RigFK:
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
            dt = torch_dtype(self.dtype)
            self._torch = [(sl, None if par is None else torch.as_tensor(par), torch.as_tensor(rr, dtype=dt),
                            torch.as_tensor(rp, dtype=dt)) for sl, par, rr, rp in self._levels()]
        return level_fk(basis, loc, self._torch, lambda shape: torch.empty(shape, dtype=basis.dtype))

    def numpy(self, basis, loc):
        """The same forward kinematics on float64 numpy arrays."""
        return level_fk(basis, loc, self._levels(), np.empty)


def level_fk(basis, loc, levels, empty):
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


class RestFK:
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
            out[:, i] = base_pos + (base_rot @ np.asarray(locs[:, b, :, None], dtype=np.float64))[..., 0]
            if needed:
                Wr[i] = base_rot @ quat_to_matrix(np.asarray(quats[:, b], dtype=np.float64))
        return out


def posed_points(W, X, points_bone_slot, points_offset):
    """Positions (T, P, 3) of points attached to posed bones."""
    return X[:, points_bone_slot] + (W[:, points_bone_slot] @ points_offset[None, :, :, None])[..., 0]
