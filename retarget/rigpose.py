"""A rig posed from pose-bone values (:func:`..model.kinematics.level_fk`), and bones turned to given rotations.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.kinematics import Tree, level_fk
from ..model.rotations_np import matrix_to_quat, quat_to_matrix
from .chunks import frame_chunks

__all__ = ["pose_rig", "turn_bones_to"]


def pose_rig(rig, quats, locations=None, *, bones=None, chunk=None, rotations=True):
    """Forward kinematics of a rig from pose-bone values.

    Parameters
    ----------
    rig : RigDescription
    quats : ndarray (T, B, 4)
        ``rotation_quaternion`` (w, x, y, z) per bone.
    locations : ndarray (T, B, 3), optional
        ``location`` per bone.
    bones : sequence of int, optional
        Pose only these bones (closed under parents: every ancestor of a bone
        listed must be listed); the other entries of the outputs are
        undefined (and take no memory: the outputs are bone-major).
    chunk : int, optional
        Frames posed at a time (default :data:`CHUNK_FRAMES`; the result does
        not depend on it).
    rotations : bool
        ``False``: the heads only (``rot`` is ``None``; the rotations are
        kept a chunk at a time: a long clip's would take 72 bytes per frame
        and bone).

    Returns
    -------
    rot : ndarray (T, B, 3, 3) or None
        Armature-space pose rotations (``PoseBone.matrix`` rotation part).
    heads : ndarray (T, B, 3)
        Armature-space head positions.
    """
    quats = np.asarray(quats)
    T, n = quats.shape[:2]
    sel, tree, rel_rot, rel_pos = _posed_tree(rig, bones)
    rows = slice(None) if np.array_equal(sel, np.arange(n)) else sel   # (every bone in its order: no gather)
    W = np.empty((n, T, 3, 3)) if rotations else None
    X = np.empty((n, T, 3))
    for a, b in frame_chunks(T, chunk):
        # (take: a contiguous copy; indexing a middle axis leaves a transposed one, slower to make and read)
        basis = quat_to_matrix(np.asarray(quats[a:b], dtype=np.float64).take(sel, 1))
        locs = None if locations is None else np.asarray(locations[a:b], dtype=np.float64).take(sel, 1)
        Wc, Xc = level_fk(tree, basis, rel_pos, rest_rot=rel_rot, loc=locs, joint_major=True)
        if rotations:
            W[rows, a:b] = Wc
        X[rows, a:b] = Xc
    return (np.swapaxes(W, 0, 1) if rotations else None), np.swapaxes(X, 0, 1)


def turn_bones_to(rig, quats, locations, targets: dict) -> None:
    """Give bones the armature-space rotations ``targets`` (bone -> (3, 3)) by their own pose rotation.

    One pose (``quats`` (B, 4), ``locations`` (B, 3), changed in place). A
    bone turns about its head, so no joint above it moves: an effector's hand,
    foot or head takes its empty's orientation and its position stays met.
    Bones are taken parents first; a bone's children turn with it.
    """
    order = sorted(targets, key=lambda i: (rig.depth[i], i))
    rot, _ = pose_rig(rig, quats[None], locations[None], bones=_closed_under_parents(rig, order))
    rot = rot[0]
    turned = {}   # bone -> (its rotation before, after): a descendant turns with it
    for b in order:
        now = rot[b]
        for a in reversed(order[:order.index(b)]):
            if a in turned and rig.is_ancestor(a, b):
                before, after = turned[a]
                now = after @ before.T @ now
                break
        target = np.asarray(targets[b], dtype=np.float64)
        basis = quat_to_matrix(quats[b])
        # the bone's world rotation is base @ basis: the new basis is base^T @ target
        q = matrix_to_quat(basis @ now.T @ target)
        quats[b] = q * (1.0 if float(np.dot(q, quats[b])) >= 0.0 else -1.0)
        turned[b] = (now, target)


def _closed_under_parents(rig, bones):
    out = set()
    for b in bones:
        while b >= 0 and b not in out:
            out.add(int(b))
            b = int(rig.parents[b])
    return sorted(out)


def depth_levels(rig):
    """Bones grouped by depth: list of ``(bones, parents)`` index arrays, roots first.

    ``parents`` is ``None`` for the roots. Computed once per rig.
    """
    cached = rig.__dict__.get("_depth_levels")
    if cached is not None and cached[0] is rig.parents:
        return cached[1]
    depth = np.asarray(rig.depth)
    parents = np.asarray(rig.parents)
    out = []
    for d in range(int(depth.max()) + 1 if depth.size else 0):
        idx = np.flatnonzero(depth == d)
        out.append((idx, None if d == 0 else parents[idx]))
    rig.__dict__["_depth_levels"] = (rig.parents, out)
    return out


def _posed_tree(rig, bones):
    """``(bones, tree, rel_rot, rel_pos)`` of the bones posed (every bone when ``bones`` is None):
    level by level, their :class:`..model.kinematics.Tree` and rest constants. The last few are remembered
    on the rig (per ``parents``, ``matrix_local`` and ``head`` array)."""
    sel = None if bones is None else tuple(np.unique(np.asarray(bones, dtype=np.int64)).tolist())
    cache = rig.__dict__.get("_posed_trees")
    if cache is None or cache[0] is not rig.parents or cache[1] is not rig.matrix_local or cache[2] is not rig.head:
        cache = rig.__dict__["_posed_trees"] = (rig.parents, rig.matrix_local, rig.head, {})
    found = cache[3].get(sel)
    if found is None:
        idx = np.arange(len(rig)) if sel is None else np.array(sel, dtype=np.int64)
        slot = np.full(len(rig), -1)
        slot[idx] = np.arange(len(idx))
        tree = Tree(np.where(rig.parents[idx] >= 0, slot[np.maximum(rig.parents[idx], 0)], -1))
        if tree.order is not None:   # (the bones level by level once here, not per call)
            idx = idx[tree.order]
            slot[idx] = np.arange(len(idx))
            tree = Tree(np.where(rig.parents[idx] >= 0, slot[np.maximum(rig.parents[idx], 0)], -1))
        rel_rot, rel_pos = rig.relative_rest()
        found = (idx, tree, rel_rot[idx], rel_pos[idx])
        if len(cache[3]) >= 8:
            cache[3].pop(next(iter(cache[3])), None)
        cache[3][sel] = found
    return found
