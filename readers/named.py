"""Points named after a skeleton's joints (``Hips``, ``Shoulder_L``, ``LeftUpLeg``...): the skeleton mapper's layout.

Arrays of joint positions from a studio's rig (Unity Humanoid, Mixamo,
MotionBuilder, any BVH-like naming) carry the joint names but no layout of
:mod:`.layouts`. The skeleton mapper (:func:`..retarget.mapping.auto_map`)
knows those names and decides with the hierarchy, as for BVH and FBX
sources: the points become a rest skeleton (a frame where most points are
present), with the file's ``parents`` when it has them, else the tree the
motion shows (joints joined by a bone keep their distance: the minimum
spanning tree of the distances' spread over the clip), and the mapped
joints' positions are the canonical keypoints.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["skeleton_layout", "effector_layout", "infer_parents"]

#: Frames read to infer the tree (spread of distances), at most.
TREE_FRAMES = 200


def skeleton_layout(names, points, parents=None):
    """A :class:`.layouts.Layout` mapping ``names`` onto canonical joints, or ``None`` when not a humanoid.

    Parameters
    ----------
    names : sequence of str
    points : ndarray (T, J, 3)
        Positions (any units and axes); NaN = missing.
    parents : sequence of int, optional
        Parent index of each point (-1: root); inferred from the motion when ``None``.

    Returns
    -------
    (Layout or None, str)
        The layout and how the hierarchy was had (``"the file's parents"`` or
        ``"the hierarchy the motion shows"``).
    """
    from ..retarget.mapping import auto_map, humanoid_check
    from ..retarget.rig import RigDescription
    from .source_rig import bone_tails, layout_from_mapping

    p = np.asarray(points, dtype=np.float64)
    J = p.shape[1]
    how = "the file's parents"
    if parents is None:
        parents, how = infer_parents(p, names), "the hierarchy the motion shows"
    parents = np.asarray(parents, dtype=np.int64)
    order = _topological(parents)
    if order is None:
        return None, how
    rank = np.empty(J, dtype=np.int64)
    rank[order] = np.arange(J)
    par = np.array([rank[parents[j]] if parents[j] >= 0 else -1 for j in order])
    t = int(np.argmax(np.isfinite(p).all(-1).sum(1)))          # the frame with most points: the rest
    heads = np.where(np.isfinite(p[t]), p[t], np.nanmedian(p, axis=0))[order]
    heads = np.nan_to_num(heads)
    tails = bone_tails(heads, par, min_length=1e-6)
    ml = np.broadcast_to(np.eye(4), (J, 4, 4)).copy()
    ml[:, :3, 3] = heads
    rig = RigDescription([str(names[j]) for j in order], par, ml, heads, tails, name="points")
    mapping = auto_map(rig)
    if humanoid_check(mapping):
        return None, how
    return layout_from_mapping(rig, mapping, {}, name="skeleton"), how


def effector_layout(names):
    """A layout of effectors named after joints (``Hips``, ``Head``, ``Hand_L``, ``LeftFoot``...), or None.

    A few points (no skeleton to map) named as the pelvis, the head, the hands
    and the feet (and elbow and knee hints): each name's first role and side.
    """
    from ..model.skeleton import SPARSE_EFFECTORS, SPARSE_HINTS
    from ..retarget.bone_names import parse_name
    from .layouts import Layout

    wanted = set(SPARSE_EFFECTORS) | set(SPARSE_HINTS)
    table = {}
    for n in names:
        pn = parse_name(str(n))
        if not pn.roles:
            continue
        role = pn.roles[0]
        joint = role if role in ("pelvis", "head") else f"{role}_{pn.side.lower()}" if pn.side in "LR" and \
            pn.side else None
        if joint in wanted and joint not in table.values():
            table[str(n)] = joint
    if len([j for j in table.values() if j in SPARSE_EFFECTORS]) < 4 or "pelvis" not in table.values():
        return None
    return Layout("effectors", "effectors named after joints (pelvis, head, hands, feet)", tuple(table), table)


def infer_parents(points, names=()):
    """Parent index of each point: the tree of the motion's bones, rooted at the hips.

    Two points joined by a bone keep their distance over the clip: the tree is
    the minimum spanning tree of the distances' spread (plus a twentieth of
    the distance, which prefers the nearer of two rigid pairs), rooted at the
    point named as the pelvis/hips, else at the tree's centre.
    """
    from ..retarget.bone_names import parse_name

    p = np.asarray(points, dtype=np.float64)
    T, J = p.shape[:2]
    sub = p[:: max(1, T // TREE_FRAMES)]
    d = np.linalg.norm(sub[:, :, None] - sub[:, None, :], axis=-1)
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # (points missing on every frame)
            w = np.nanstd(d, axis=0) + 0.05 * np.nanmedian(d, axis=0)
    w = np.where(np.isfinite(w), w, 1e9)
    edges = _spanning_tree(w)
    roles = [parse_name(str(n)).roles[:1] for n in names] if len(names) == J else [()] * J
    hips = [j for j in range(J) if roles[j] == ("pelvis",)]
    root = hips[0] if hips else _centre(edges, J)
    parents = np.full(J, -1, dtype=np.int64)
    seen, stack = {root}, [root]
    while stack:
        a = stack.pop()
        for b in edges[a]:
            if b not in seen:
                seen.add(b)
                parents[b] = a
                stack.append(b)
    with np.errstate(invalid="ignore"):
        mean = np.where(np.isfinite(np.nanmedian(d, axis=0)), np.nanmedian(d, axis=0), 1e9)
    return _trunk_parents(parents, roles, mean)


#: Roles whose joint hangs from the trunk (a shoulder band or a stiff spine can make the nearest
#: rigid neighbour another limb's root).
_FROM_TRUNK = {("neck",), ("clavicle",), ("thigh",)}
_TRUNK = {("pelvis",), ("spine",)}


def _trunk_parents(parents, roles, dist):
    """Hang a neck, a clavicle or a thigh whose parent is not a trunk joint from the nearest trunk joint."""
    parents = parents.copy()
    trunk = [j for j, r in enumerate(roles) if r in _TRUNK]

    def above(a, b):   # whether a is b or one of b's ancestors
        while b >= 0:
            if a == b:
                return True
            b = parents[b]
        return False

    for j, r in enumerate(roles):
        if r not in _FROM_TRUNK or parents[j] < 0 or roles[parents[j]] in _TRUNK:
            continue
        cands = [t for t in trunk if not above(j, t)]
        if r == ("thigh",):
            cands = [t for t in cands if roles[t] == ("pelvis",)] or cands
        if cands:
            parents[j] = min(cands, key=lambda t: dist[j, t])
    return parents


def _spanning_tree(w):
    """Prim's minimum spanning tree of the weights ``w`` (J, J): adjacency lists."""
    J = len(w)
    edges = [[] for _ in range(J)]
    if J == 0:
        return edges
    inside = np.zeros(J, dtype=bool)
    inside[0] = True
    best, link = w[0].copy(), np.zeros(J, dtype=np.int64)
    for _ in range(J - 1):
        cand = np.where(inside, np.inf, best)
        b = int(np.argmin(cand))
        a = int(link[b])
        edges[a].append(b)
        edges[b].append(a)
        inside[b] = True
        closer = w[b] < best
        best = np.where(closer, w[b], best)
        link = np.where(closer, b, link)
    return edges


def _centre(edges, J):
    """The node whose farthest node (in edges) is nearest."""
    def depth_from(s):
        dist = {s: 0}
        stack = [s]
        while stack:
            a = stack.pop()
            for b in edges[a]:
                if b not in dist:
                    dist[b] = dist[a] + 1
                    stack.append(b)
        return max(dist.values())
    return min(range(J), key=depth_from)


def _topological(parents):
    """Indices with every parent before its children, or None for a cycle or a bad index."""
    J = len(parents)
    if ((parents < -1) | (parents >= J)).any():
        return None
    kids = [[] for _ in range(J)]
    roots = []
    for j, q in enumerate(parents):
        (roots if q < 0 else kids[q]).append(j)
    order, stack = [], list(reversed(roots))
    while stack:
        a = stack.pop()
        order.append(a)
        stack.extend(reversed(kids[a]))
    return order if len(order) == J else None
