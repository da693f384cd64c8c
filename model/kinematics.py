"""Forward kinematics of a tree of joints, one depth level at a time, on numpy or torch arrays alike.

The one forward kinematics of Neural IK: the canonical skeleton in torch
(:func:`.fk.forward_kinematics`: training, the refinement, evaluation) and in
numpy (:func:`.skeleton.forward_kinematics_np`), a rig's posed bones
(:class:`..retarget.rigfk.RigFK`), the bones a rig solve leaves unposed
(:class:`..retarget.rigfk.RestFK`), a whole rig posed from its pose-bone
values (:func:`..retarget.rigpose.pose_rig`) and a BVH file's joints
(:meth:`.bvh.BVHData.world`). For a joint ``j`` with parent ``p``::

    B[j] = W[p] @ rest_rot[j]                          (its frame before its own rotation)
    W[j] = B[j] @ rot[j]
    X[j] = X[p] + W[p] @ offset[j] + B[j] @ loc[j]

A root's parent frame is the identity at the origin, or the frame given for
it (``parent_frames``). The canonical skeleton is the case without rest
rotations and local translations: ``W[j] = W[p] @ R_local[j]``,
``X[j] = X[p] + W[p] @ offset[j]``.

The joints of one depth level are computed together, a few array operations
per level instead of per joint. :class:`Tree` orders the joints level by
level so that a level is one block and its parents are the level above, a
slice of it, or (rarely) a gather from it. Inside, arrays are joint-major
(joint, frames..., 3, c): a level is a contiguous block, and a product with
one constant matrix per joint (rest offsets, rest rotations) runs over all
frames of a joint at once. Level results stay separate arrays, joined at the
end, so torch's autograd differentiates through it. No ``bpy``; torch is
never imported here (tensors bring their own operators).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Tree", "level_fk"]


class Tree:
    """The depth levels of a tree of joints (built once per skeleton).

    Parameters
    ----------
    parents : sequence of int, shape (n,)
        Parent of each joint, -1 for a root.

    Attributes
    ----------
    order : ndarray (n,) or None
        The joints level by level; ``None`` where the given order already
        runs level by level (a rig's bones sorted by depth: nothing to
        reorder). Otherwise children follow their parents' order, so that
        the children of consecutive parents are consecutive.
    inverse : ndarray (n,) or None
        Position of each joint in ``order``.
    levels : list of ``(start, stop, parents)``
        Each level's block of ``order``; ``parents`` is ``None`` for the
        roots, else ``("all",)``, ``("slice", a, b)`` or ``("index", idx)``:
        where the level's parents are in the level above (``"all"``: the
        whole level above, one parent each in order, or its one joint).
    """

    def __init__(self, parents):
        parents = np.asarray(parents, dtype=np.int64).reshape(-1)
        n = len(parents)
        if np.any(parents >= n) or np.any(parents < -1):
            raise ValueError("parent index out of range")
        depth = _depths(parents)
        order = np.arange(n) if np.all(np.diff(depth) >= 0) else _by_parent_order(parents)
        keep = bool(np.array_equal(order, np.arange(n)))
        self.parents, self.depth, self.n = parents, depth, n
        self.order = None if keep else order
        self.inverse = None if keep else np.argsort(order)
        pos = np.argsort(order)
        self.levels = []
        start = 0
        for d in range(int(depth.max()) + 1 if n else 0):
            stop = start + int(np.count_nonzero(depth == d))
            spec = None
            if d:
                above, above_stop, _ = self.levels[-1]
                spec = _parent_spec(pos[parents[order[start:stop]]] - above, above_stop - above)
            self.levels.append((start, stop, spec))
            start = stop
        self.sizes = [b - a for a, b, _ in self.levels]
        self._torch_index = {}

    def __len__(self):
        return self.n

    def blocks(self, a, nb):
        """``a`` (..., n, 3, c) as the levels' joint-major blocks (size, ..., 3, c), its leading
        dimensions padded with ones to ``nb``."""
        a = _joint_major(a, nb)
        if self.order is not None:
            a = _take(a, self.index(self.order, a))
        if isinstance(a, np.ndarray):
            return [a[s:e] for s, e, _ in self.levels]
        return a.split(self.sizes, 0)   # (its gradient is one concatenation, a slice's a zeroed copy)

    def joined(self, parts, joint_major=False):
        """The levels' blocks (size, ..., 3, c) as one new array (..., n, 3, c) in the joints' order
        (``joint_major``: (n, ..., 3, c))."""
        if isinstance(parts[0], np.ndarray):
            if self.order is None and not joint_major and parts[0].size >= _ROWS_EACH * 9 * parts[0].shape[0]:
                return self._written(parts)
            out = np.concatenate(parts, 0)
            if self.order is not None:
                out = out.take(self.inverse, 0)
            return out if joint_major else np.ascontiguousarray(_move(out, 0, -3))
        import torch

        if joint_major or parts[0][0].numel() < _STACK_FROM * parts[0].shape[-1] * 3:
            out = torch.cat(parts, 0)
            if self.order is not None:
                out = out.index_select(0, self.index(self.inverse, out))
            return out if joint_major else out.movedim(0, -3).contiguous()
        pieces = [p for part in parts for p in part.unbind(0)]   # (many frames: one copy, a stack of views)
        if self.order is not None:
            pieces = [pieces[i] for i in self.inverse]
        return torch.stack(pieces, -3)

    def _written(self, parts):
        """numpy's :meth:`joined` of many frames in the given order: each block written into its place
        (one copy; a concatenation then a transposed copy is two)."""
        lead = _shape(*(p.shape[1:-2] for p in parts))
        out = np.empty(lead + (self.n,) + tuple(parts[0].shape[-2:]), dtype=parts[0].dtype)
        view = _move(out, -3, 0)
        for (s, e, _), part in zip(self.levels, parts):
            view[s:e] = part
        return out

    def index(self, idx, like):
        """The index array ``idx`` (one of this tree's) for arrays like ``like``."""
        if isinstance(like, np.ndarray):
            return idx
        key = (id(idx), like.device)
        t = self._torch_index.get(key)
        if t is None:
            import torch

            with torch.inference_mode(False):   # (kept for later calls, autograd's included)
                t = self._torch_index[key] = torch.as_tensor(idx, device=like.device)
        return t


def level_fk(tree, rot, offsets, *, rest_rot=None, loc=None, root_pos=None, parent_frames=None, base=False,
             joint_major=False):
    """Forward kinematics of ``tree``, one depth level at a time (numpy or torch arrays alike).

    Parameters
    ----------
    tree : Tree
    rot : array (..., n, 3, 3) or None
        Each joint's own rotation (a local rotation; a pose bone's basis);
        None: the identity (only the joints' heads matter, as for leaves).
    offsets : array (n, 3) or (..., n, 3)
        Each joint's rest position in its parent's frame (a root's: in its
        parent frame; unused where ``root_pos`` is given).
    rest_rot : array (n, 3, 3), optional
        Each joint's rest rotation in its parent's frame (identity when None).
    loc : array (..., n, 3), optional
        Each joint's translation in its frame before its own rotation.
    root_pos : array (..., 3), optional
        The roots' position, in place of their offsets.
    parent_frames : (array (..., r, 3, 3), array (..., r, 3)), optional
        The world rotation and position of each root's parent (the ``r``
        roots in index order); the identity at the origin when None.
    base : bool
        Also return ``B``.
    joint_major : bool
        Return the joints first: ``W`` (n, ..., 3, 3), ``X`` (n, ..., 3).

    Every array is of the same kind as ``offsets`` (numpy, or torch on its
    device, of its dtype); the leading dimensions broadcast.

    Returns
    -------
    W : array (..., n, 3, 3)
    X : array (..., n, 3)
    B : array (..., n, 3, 3), only with ``base``.
    """
    if root_pos is not None and parent_frames is not None:
        raise ValueError("root_pos and parent_frames exclude each other")
    pf = () if parent_frames is None else parent_frames
    wb = _shape(*(a.shape[:-3] for a in (rot,) if a is not None), *(f.shape[:-3] for f in pf[:1]))
    batch = _shape(wb, offsets.shape[:-2], *(f.shape[:-2] for f in pf[1:]),
                   *(a.shape[:-1] for a in (root_pos,) if a is not None),
                   *(a.shape[:-2] for a in (loc,) if a is not None))
    nb = len(batch)
    wbatch = (1,) * (nb - len(wb)) + wb
    if not tree.n:
        empty = tuple(_zeros(offsets, (0,) + wb + (3, 3) if joint_major else wb + (0, 3, 3)) for _ in range(2))
        X = _zeros(offsets, (0,) + batch + (3,) if joint_major else batch + (0, 3))
        return (empty[0], X, empty[1]) if base else (empty[0], X)
    rots = None if rot is None else tree.blocks(rot, nb)
    offs = tree.blocks(offsets[..., None], nb)
    shared = offsets.ndim == 2                  # one offset per joint: products per joint
    rests = None if rest_rot is None else tree.blocks(rest_rot, nb)
    locs = None if loc is None else tree.blocks(loc[..., None], nb)
    Ws, Xs, Bs = [], [], []
    for i, (start, stop, spec) in enumerate(tree.levels):
        if spec is not None:
            Wq, Xq = _parents(tree, spec, Ws[-1], Xs[-1])
        elif pf:                                # the roots hang from the frames given
            Wq, Xq = _joint_major(pf[0], nb), _joint_major(pf[1][..., None], nb)
        else:                                   # or from the identity at the origin
            Wq = Xq = None
        rr = None if rests is None else rests[i]
        Bl = Wq if rr is None else (rr if Wq is None else _times_each(Wq, rr))
        if rots is None:
            Wl = _eye(offsets) if Bl is None else Bl
        else:
            Wl = rots[i] if Bl is None else Bl @ rots[i]
        if spec is None and root_pos is not None:
            Xl = _joint_major(root_pos[..., None, :, None], nb)
        elif Wq is None:
            Xl = offs[i]
        else:
            Xl = Xq + (_times_each(Wq, offs[i]) if shared else Wq @ offs[i])
        if locs is not None:
            Xl = Xl + (locs[i] if Bl is None else Bl @ locs[i])
        k = stop - start
        Ws.append(_broadcast(Wl, (k,) + wbatch + (3, 3)))
        Xs.append(_broadcast(Xl, (k,) + batch + (3, 1)))
        if base:
            Bs.append(_broadcast(_eye(offsets) if Bl is None else Bl, (k,) + wbatch + (3, 3)))
    shape = (tree.n,) + wb + (3, 3) if joint_major else wb + (tree.n, 3, 3)
    W, X = tree.joined(Ws, joint_major).reshape(shape), tree.joined(Xs, joint_major)[..., 0]
    return (W, X, tree.joined(Bs, joint_major).reshape(shape)) if base else (W, X)


def _parents(tree, spec, Wp, Xp):
    """A level's parents' world rotations and positions, from the level above."""
    if spec[0] == "all":
        return Wp, Xp
    if spec[0] == "slice":
        return Wp[spec[1]:spec[2]], Xp[spec[1]:spec[2]]
    idx = tree.index(spec[1], Wp)
    return _take(Wp, idx), _take(Xp, idx)


def _times_each(A, C):
    """``A @ C`` for joint-major ``A`` (kq, ..., 3, 3) and one matrix per joint ``C`` (k, 1.., 3, m).

    numpy with many frames: one product per joint over all its frames, or one
    product for all where they share a parent (kq == 1), instead of numpy's
    small product per frame (torch's batched product is as fast as either).
    """
    if not isinstance(A, np.ndarray) or A.size < _ROWS_EACH * 9 * A.shape[0]:
        return A @ C
    kq, k, m = A.shape[0], C.shape[0], C.shape[-1]
    lead = A.shape[1:-2]
    rows = A.reshape(kq, -1, 3)
    C3 = C.reshape(k, 3, m)
    if kq == k:
        return (rows @ C3).reshape((k,) + lead + (3, m))
    out = (rows[0] @ C3.transpose(1, 0, 2).reshape(3, k * m)).reshape(lead + (3, k, m))
    return _move(out, -2, 0)


#: Frames from which numpy's products with one matrix per joint run per joint (:func:`_times_each`).
_ROWS_EACH = 64

#: Frames from which torch joins the levels as a stack of views (one copy; fewer operations below).
_STACK_FROM = 1024


def _joint_major(a, nb):
    """``a`` (..., r, 3, c) as (r, ..., 3, c), its leading dimensions padded with ones to ``nb``."""
    pad = nb + 3 - a.ndim
    a = _move(a, -3, 0)
    return a.reshape(a.shape[:1] + (1,) * pad + a.shape[1:]) if pad else a


def _move(a, src, dst):
    """``a`` with axis ``src`` moved to ``dst`` (numpy's ``moveaxis`` without its argument checks)."""
    if not isinstance(a, np.ndarray):
        return a.movedim(src, dst)
    key = (a.ndim, src, dst)
    axes = _AXES.get(key)
    if axes is None:
        axes = list(range(a.ndim))
        axes.insert(dst % a.ndim, axes.pop(src % a.ndim))
        axes = _AXES[key] = tuple(axes)
    return a.transpose(axes)


_AXES = {}


def _shape(*shapes):
    """The broadcast of shapes (numpy's rule, without the cost of numpy's call)."""
    out = ()
    for s in shapes:
        s = tuple(s)
        if s == out or not s:
            continue
        if not out:
            out = s
            continue
        n = max(len(out), len(s))
        a, b = (1,) * (n - len(out)) + out, (1,) * (n - len(s)) + s
        if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out = tuple(max(x, y) if x != 1 and y != 1 else x * y for x, y in zip(a, b))
    return out


def _take(a, idx):
    """``a``'s entries ``idx`` along the first axis (torch: ``index_select``, cheaper than indexing)."""
    return a.take(idx, 0) if isinstance(a, np.ndarray) else a.index_select(0, idx)


def _broadcast(a, shape):
    if a.shape == shape:
        return a
    return np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else a.expand(shape)


def _zeros(like, shape):
    return np.zeros(shape, dtype=like.dtype) if isinstance(like, np.ndarray) else like.new_zeros(shape)


def _eye(like):
    if isinstance(like, np.ndarray):
        return np.eye(3, dtype=like.dtype)
    import torch

    return torch.eye(3, dtype=like.dtype, device=like.device)


def _depths(parents):
    """Depth of each joint (roots 0); ``ValueError`` for a cycle."""
    depth = np.full(len(parents), -1, dtype=np.int64)
    for j in range(len(parents)):
        chain = []
        k = j
        while k >= 0 and depth[k] < 0:
            chain.append(k)
            k = int(parents[k])
            if len(chain) > len(parents):
                raise ValueError("the parents form a cycle")
        d = -1 if k < 0 else depth[k]
        for c in reversed(chain):
            d += 1
            depth[c] = d
    return depth


def _by_parent_order(parents):
    """The joints level by level; within a level in their parents' order, then by index."""
    level = [int(j) for j in np.flatnonzero(parents < 0)]
    order = []
    while level:
        order.extend(level)
        level = [int(c) for p in level for c in np.flatnonzero(parents == p)]
    return np.array(order, dtype=np.int64)


def _parent_spec(par, above):
    """Where a level's parents are in the level above (``above`` joints): all of it, a slice, or a gather."""
    if above == 1 or np.array_equal(par, np.arange(above)):
        return ("all",)
    if np.array_equal(par, np.arange(par[0], par[0] + len(par))) or np.all(par == par[0]):
        stop = int(par[0]) + (1 if np.all(par == par[0]) else len(par))
        return ("slice", int(par[0]), stop)
    return ("index", par)
