"""A rig posed from pose-bone values (forward kinematics by depth level), and bones turned to given rotations.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import matmul_each, matrix_to_quat, quat_to_matrix
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
    sel = np.arange(n) if bones is None else np.unique(np.asarray(bones, dtype=np.int64))
    slot = np.full(n, -1)
    slot[sel] = np.arange(len(sel))
    levels = []
    for idx, par, rel_rot, rel_pos in _level_offsets(rig):
        if bones is not None:
            keep = slot[idx] >= 0
            if not keep.any():
                continue
            idx = idx[keep]
            par = None if par is None else par[keep]
            rel_rot, rel_pos = rel_rot[keep], rel_pos[keep]   # (roots too: a rig may have several)
        levels.append((idx, par, rel_rot, rel_pos, slot[idx]))
    W = np.empty((n, T, 3, 3)) if rotations else None
    X = np.empty((n, T, 3))
    for a, b in frame_chunks(T, chunk):
        # bone-major: contiguous per bone
        basis = np.swapaxes(quat_to_matrix(np.asarray(quats[a:b][:, sel], dtype=np.float64)), 0, 1)
        locs = None if locations is None else \
            np.swapaxes(np.asarray(locations[a:b], dtype=np.float64)[:, sel], 0, 1)
        Wc = W[:, a:b] if rotations else np.empty((n, b - a, 3, 3))
        Xc = X[:, a:b]
        # one batch per depth level (a bone's parent is always one level up)
        for idx, par, rel_rot, rel_pos, k in levels:
            if par is None:
                base_rot = rel_rot
                base_pos = rel_pos[..., 0]
            else:
                Wp = Wc[par]
                base_rot = matmul_each(Wp, rel_rot[:, 0])
                base_pos = Xc[par] + matmul_each(Wp, rel_pos[:, 0])[..., 0]
            Wc[idx] = base_rot @ basis[k]
            if locs is None:
                Xc[idx] = base_pos
            else:
                Xc[idx] = base_pos + (base_rot @ locs[k][..., None])[..., 0]
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


def _level_offsets(rig):
    """:func:`depth_levels` with each bone's rest rotation and head relative to its parent.

    List of ``(bones, parents, rel_rot (k, 1, 3, 3), rel_pos (k, 1, 3, 1))``;
    for the roots the armature-space rest rotation and head. Computed once
    per rig (per ``matrix_local`` array).
    """
    cached = rig.__dict__.get("_level_offsets")
    if cached is not None and cached[0] is rig.matrix_local and cached[1] is rig.head:
        return cached[2]
    Q = rig.rest_rotation()
    h = rig.head
    out = []
    for idx, par in depth_levels(rig):
        if par is None:
            rel_rot = Q[idx][:, None]
            rel_pos = h[idx][:, None, :, None]
        else:
            QpT = np.swapaxes(Q[par], -1, -2)
            rel_rot = (QpT @ Q[idx])[:, None]
            rel_pos = (QpT @ (h[idx] - h[par])[..., None])[:, None]
        out.append((idx, par, rel_rot, rel_pos))
    rig.__dict__["_level_offsets"] = (rig.matrix_local, rig.head, out)
    return out
