"""Forward kinematics of the rig-space solve: the posed subset of a rig (numpy or torch), the bones
it leaves unposed, and points attached to bones. Both are :func:`..model.kinematics.level_fk` on the
rig's :meth:`~.rig.RigDescription.relative_rest`.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.kinematics import Tree, level_fk

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
        par = []
        for b in self.posed:
            p = int(rig.parents[b])
            if p >= 0 and p not in self.slot:
                raise ValueError("posed bones must be closed under parents")
            par.append(-1 if p < 0 else self.slot[p])
        rel_rot, rel_pos = rig.relative_rest()
        idx = np.array(self.posed, dtype=np.int64)
        self.rel_rot_np, self.rel_pos_np = rel_rot[idx], rel_pos[idx]
        self.par = par
        self.tree = Tree(par)
        self.dtype = dtype
        self._torch = {}   # device -> the rest as tensors there

    def __call__(self, basis, loc):
        """basis (T, n, 3, 3), loc (T, n, 3) tensors -> W (T, n, 3, 3), X (T, n, 3), base_rot (T, n, 3, 3)."""
        key = str(basis.device)
        if key not in self._torch:
            import torch

            dt = torch_dtype(self.dtype)
            self._torch[key] = (torch.as_tensor(self.rel_rot_np, dtype=dt, device=basis.device),
                                torch.as_tensor(self.rel_pos_np, dtype=dt, device=basis.device))
        rel_rot, rel_pos = self._torch[key]
        return level_fk(self.tree, basis, rel_pos, rest_rot=rel_rot, loc=loc, base=True)

    def numpy(self, basis, loc):
        """The same forward kinematics on float64 numpy arrays."""
        return level_fk(self.tree, basis, self.rel_pos_np, rest_rot=self.rel_rot_np, loc=loc, base=True)


class RestFK:
    """The heads of the bones a solve does not pose (hand ends, fingers), from their posed parents.

    Posing the whole rig again after the solve for them costs more than
    needed: their posed ancestors' rotations and heads are at hand in each
    chunk, so only these bones are posed, as trees hanging from those
    frames; the leaves among them (no unposed child) only get a head.
    """

    def __init__(self, rig, posed_slot, unposed):
        unposed = {int(b) for b in unposed}
        inner = sorted({int(rig.parents[b]) for b in unposed} & unposed)
        leaves = sorted(unposed - set(inner))
        tree = Tree(_parents_within(rig, inner))
        if tree.order is not None:   # (level by level once here, not per call)
            inner = [inner[i] for i in tree.order]
            tree = Tree(_parents_within(rig, inner))
        self.bones = inner + leaves
        self.inner, self.leaves, self.tree = inner, leaves, tree
        self.leaf_tree = Tree(np.full(len(leaves), -1))
        rel_rot, rel_pos = rig.relative_rest()
        self.rel = {"inner": (rel_rot[inner], rel_pos[inner]), "leaves": (rel_rot[leaves], rel_pos[leaves])}
        own = {b: i for i, b in enumerate(inner)}
        # where each tree's roots hang: a posed bone's slot, an inner bone's, or the armature (-1)
        inner_roots = [int(rig.parents[b]) for b in inner[:tree.sizes[0] if tree.sizes else 0]]
        self.inner_from = np.array([posed_slot.get(p, -1) for p in inner_roots], dtype=np.int64)
        leaf_parents = [int(rig.parents[b]) for b in leaves]
        self.leaf_from_posed = np.array([posed_slot.get(p, -1) for p in leaf_parents], dtype=np.int64)
        self.leaf_from_inner = np.array([own.get(p, -1) for p in leaf_parents], dtype=np.int64)

    def numpy(self, W, X, quats, locs):
        """Heads ``(n, len(bones), 3)`` of the unposed bones; ``W``, ``X``: the posed subset's pose,
        ``quats``, ``locs``: the chunk's values of every bone."""
        from ..model.rotations_np import quat_to_matrix

        n = X.shape[0]
        Wi, Xi = np.empty((0, n, 3, 3)), np.empty((0, n, 3))
        if self.inner:   # (joint-major: the leaves read a few of them, the heads are copied once)
            rel_rot, rel_pos = self.rel["inner"]
            Wi, Xi = level_fk(self.tree, quat_to_matrix(np.asarray(np.take(quats, self.inner, 1), dtype=np.float64)), rel_pos, rest_rot=rel_rot,
                              loc=_locations(locs, self.inner), parent_frames=_frames(W, X, [(self.inner_from, W, X)]),
                              joint_major=True)
        out = np.empty((n, len(self.bones), 3))
        out[:, :len(self.inner)] = np.swapaxes(Xi, 0, 1)
        if self.leaves:
            rel_rot, rel_pos = self.rel["leaves"]
            frames = _frames(W, X, [(self.leaf_from_posed, W, X),
                                    (self.leaf_from_inner, np.swapaxes(Wi, 0, 1), np.swapaxes(Xi, 0, 1))])
            out[:, len(self.inner):] = level_fk(self.leaf_tree, None, rel_pos, rest_rot=rel_rot,
                                                loc=_locations(locs, self.leaves), parent_frames=frames)[1]
        return out


def _frames(W, X, sources):
    """Parent frames ``(W (n, k, 3, 3), X (n, k, 3))`` gathered from ``(index, W, X)`` sources
    (-1: from another source, or the armature's frame where none has it)."""
    first = sources[0][0]
    Wf = np.broadcast_to(np.eye(3), (W.shape[0], len(first), 3, 3)).copy()
    Xf = np.zeros((X.shape[0], len(first), 3))
    for idx, Ws, Xs in sources:
        has = idx >= 0
        if has.all():
            Wf, Xf = np.take(Ws, idx, 1), np.take(Xs, idx, 1)
        elif has.any():
            Wf[:, has], Xf[:, has] = Ws[:, idx[has]], Xs[:, idx[has]]
    return Wf, Xf


def _locations(locs, bones):
    """The chunk's locations of ``bones`` (None where all are zero: no product for them)."""
    loc = np.asarray(np.take(locs, bones, 1), dtype=np.float64)   # (take: contiguous, unlike locs[:, bones])
    return loc if loc.any() else None


def _parents_within(rig, bones):
    """Each of ``bones``' parent as a position in ``bones`` (-1: outside them, or none)."""
    own = {b: i for i, b in enumerate(bones)}
    return [own.get(int(rig.parents[b]), -1) for b in bones]


def posed_points(W, X, points_bone_slot, points_offset):
    """Positions (T, P, 3) of points attached to posed bones."""
    return X[:, points_bone_slot] + (W[:, points_bone_slot] @ points_offset[None, :, :, None])[..., 0]
