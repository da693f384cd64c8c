"""The retargeting plan: what is constant for one (rig, mapping) pair (:func:`plan_retarget`).

The rig's body frame ``K``, every mapped bone's rest offset rotation ``C_b``
and alignment ``A_b``, the drivers of the bones between mapped ones and the
twist bones, and the rig's leg length (see :mod:`.solve` for the maths).

No ``bpy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.rotations_np import axis_angle_to_matrix, rotation_between, vector_norm
from ..model.skeleton import BONE_CHILD, CANONICAL, END_OFFSETS, END_PARENTS, END_POINTS, JOINTS, PARENTS, Skeleton

__all__ = ["RetargetPlan", "plan_retarget", "body_frame", "end_offset_on_rig", "SPINE_SHAPES",
           "SPINE_REST_MAX_DEGREES", "CANONICAL_DIRS"]


#: The most (degrees) by which a pelvis -> head path bone may point away from the line from the
#: pelvis' head to the head's for its rest to be taken as the rig's posture (``spine="rest"``):
#: fair1's hips-to-spine bone is 33 degrees off it, Rokoko's, whose rest lies along an axis, 77.
SPINE_REST_MAX_DEGREES = 45.0


#: The ways :func:`plan_retarget` carries the canonical spine's shape onto a rig.
SPINE_SHAPES = ("segments", "rest")


_J = {n: i for i, n in enumerate(JOINTS)}


_END_JOINTS = tuple(JOINTS[i] for i in range(len(JOINTS)) if BONE_CHILD[i] >= len(JOINTS))


def _canonical_dirs() -> np.ndarray:
    kp = CANONICAL.rest_keypoints()
    d = kp[list(BONE_CHILD)] - kp[: len(JOINTS)]
    return d / vector_norm(d, keepdims=True)


CANONICAL_DIRS = _canonical_dirs()


def _unit(v, eps=1e-9):
    v = np.asarray(v, dtype=np.float64)
    n = np.linalg.norm(v)
    return None if n < eps else v / n


def body_frame(rig, mapping, snap_degrees: float = 30.0) -> np.ndarray:
    """The rig's body frame ``K`` (3, 3): columns = left, back, up in armature space.

    Canonical axes map onto these (canonical +X = left, +Y = back, +Z = up).
    Snapped to the nearest signed axis permutation within ``snap_degrees``.
    """
    mats = rig.align_matrices()
    h = mats[:, :3, 3]

    def pos(j):
        b = mapping.entries.get(j)
        return h[rig.index(b)] if b is not None and rig.has(b) else None

    lefts = []
    for a, b in (("thigh_l", "thigh_r"), ("upperarm_l", "upperarm_r"), ("hand_l", "hand_r"),
                 ("foot_l", "foot_r")):
        pa, pb = pos(a), pos(b)
        if pa is not None and pb is not None and _unit(pa - pb) is not None:
            lefts.append(_unit(pa - pb))
    left = _unit(np.sum(lefts, axis=0)) if lefts else None
    if left is None:
        left = np.array([1.0, 0.0, 0.0])
    top = next((pos(j) for j in ("head", "neck", "spine3", "spine2") if pos(j) is not None), None)
    bottom = pos("pelvis")
    if bottom is None:
        bottom = next((p for p in (pos("thigh_l"), pos("thigh_r")) if p is not None), None)
    up = _unit(top - bottom) if top is not None and bottom is not None else None
    if up is None:
        up = np.array([0.0, 0.0, 1.0])
    up = _unit(up - np.dot(up, left) * left)
    if up is None:
        up = np.array([0.0, 0.0, 1.0])
    fwd = np.cross(left, up)
    K = np.stack([left, -fwd, up], axis=1)
    snap = np.zeros((3, 3))
    for c in range(3):
        r = int(np.argmax(np.abs(K[:, c])))
        snap[r, c] = np.sign(K[r, c])
    if abs(np.linalg.det(snap) - 1.0) < 1e-6:
        cos = (np.trace(snap.T @ K) - 1.0) / 2.0
        if np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))) <= snap_degrees:
            K = snap
    return K


@dataclass
class RetargetPlan:
    """Everything constant for one (rig, mapping) pair; see :func:`plan_retarget`.

    Attributes
    ----------
    bone_names : list of str
        All bones of the rig, in the rig's order (the outputs' bone axis).
    K : ndarray (3, 3)
        Body frame (canonical axes -> armature axes).
    align : dict
        Bone index -> ``A_b`` (3, 3), the armature rotation of the bone when
        the canonical pose is the T-pose.
    offset : dict
        Bone index -> ``C_b`` (3, 3), rest offset rotation (body coordinates).
    drivers : dict
        Bone index -> ``(joint_a, joint_b, w)``: the bone follows
        ``slerp(R[joint_a], R[joint_b], w)``.
    twist : dict
        Bone index -> ``(joint, child_joint)`` for twist bones.
    root : int
        Index of the pelvis bone (gets the root motion), -1 if unmapped.
    leg_length : float
        Target thigh + calf length, armature units.
    twist_share : float
    spine : str
        ``"segments"`` or ``"rest"``: how the canonical spine's shape is
        carried onto the rig (the one used: a ``"rest"`` asked of a rig whose
        rest is no standing posture is ``"segments"``).
    """

    rig: object
    mapping: object
    bone_names: list
    K: np.ndarray
    rest_rot: np.ndarray
    rest_head: np.ndarray
    rel_rot: np.ndarray
    rel_pos: np.ndarray
    align: dict = field(default_factory=dict)
    offset: dict = field(default_factory=dict)
    drivers: dict = field(default_factory=dict)
    twist: dict = field(default_factory=dict)
    root: int = -1
    leg_length: float = 0.0
    twist_share: float = 0.0
    path: list = field(default_factory=list)
    spine: str = "segments"


def plan_retarget(rig, mapping, *, twist_share: float = 0.0, spine: str = "segments") -> RetargetPlan:
    """Precompute the retargeting of canonical rotations onto ``rig``.

    Parameters
    ----------
    rig : RigDescription
    mapping : BoneMapping
        Usually :func:`.mapping.auto_map` (possibly edited by the user).
    twist_share : float
        Share in [0, 1] of the child joint's twist given to twist bones;
        0 leaves them at rest.
    spine : str
        One of :data:`SPINE_SHAPES` (see the module docstring): ``"rest"``
        keeps the rig's rest posture as its upright.

    Returns
    -------
    RetargetPlan

    Raises
    ------
    ValueError
        When the mapping names bones missing from the rig.
    """
    if spine not in SPINE_SHAPES:
        raise ValueError(f"unknown spine shape {spine!r} (one of {', '.join(SPINE_SHAPES)})")
    missing = [b for b in mapping.entries.values() if not rig.has(b)]
    if missing:
        raise ValueError(f"mapping names bones missing from the rig: {missing}")
    Q = rig.rest_rotation()
    h = rig.head.copy()
    rel_rot, rel_pos = (a.copy() for a in rig.relative_rest())
    K = body_frame(rig, mapping)
    am = rig.align_matrices()
    u, _, vt = np.linalg.svd(am[:, :3, :3])
    Qa = u @ vt
    ha = am[:, :3, 3]
    length = np.linalg.norm(rig.tail - rig.head, axis=-1)
    ta = ha + Qa[:, :, 1] * length[:, None]
    plan = RetargetPlan(rig, mapping, list(rig.names), K, Q, h, rel_rot, rel_pos,
                        twist_share=float(twist_share))
    ent = {j: rig.index(b) for j, b in mapping.entries.items() if j in _J}
    bone_joint = {b: j for j, b in ent.items()}

    # pelvis -> head path (with both ends) for spine/neck interpolation
    path = []
    if "pelvis" in ent and "head" in ent and rig.is_ancestor(ent["pelvis"], ent["head"]):
        path = [ent["pelvis"]] + rig.path(ent["pelvis"], ent["head"]) + [ent["head"]]
    plan.path = path
    offsets, plan.spine = _rest_spine(K, ha, path, spine)
    _rest_offsets(rig, K, ha, ta, ent, path, plan.spine, offsets)
    for b, C in offsets.items():
        plan.offset[b] = C
        plan.align[b] = K @ C @ K.T @ Qa[b]
    _add_drivers(plan, path, bone_joint)
    if twist_share:
        _add_twist_bones(plan, rig, mapping)
    plan.root = ent.get("pelvis", -1)
    plan.leg_length = _rig_leg_length(h, ent, path)
    return plan


def _rest_spine(K, ha, path, spine):
    """``(offsets, spine used)``: with ``spine="rest"`` and a standing rest, every path bone but the
    head takes the rotation that turns the pelvis-to-head line upright; else no offsets, "segments"."""
    offsets = {}
    up = np.array([0.0, 0.0, 1.0])
    if spine == "rest":
        spine = "segments"
        line = _unit(K.T @ (ha[path[-1]] - ha[path[0]])) if path else None
        if line is not None:
            segs = [_unit(K.T @ (ha[path[k + 1]] - ha[path[k]])) for k in range(len(path) - 1)]
            if all(e is None or np.dot(e, line) >= np.cos(np.radians(SPINE_REST_MAX_DEGREES)) for e in segs):
                spine = "rest"
                upright = rotation_between(line, up)
                for b in path[:-1]:
                    offsets[b] = upright
    return offsets, spine


def _rest_offsets(rig, K, ha, ta, ent, path, spine, offsets):
    """The rest offset rotations ``C_b`` of the path and the mapped bones, added to ``offsets``."""
    up = np.array([0.0, 0.0, 1.0])

    def tail_or_inherit(b, j):
        d = CANONICAL_DIRS[_J[j]]
        e = _unit(K.T @ (ta[b] - ha[b]))
        if e is not None and np.dot(e, d) > np.cos(np.radians(45.0)):
            return rotation_between(e, d)
        p = PARENTS[_J[j]]
        while p >= 0 and JOINTS[p] not in ent:
            p = PARENTS[p]
        if p >= 0 and ent[JOINTS[p]] in offsets:
            return offsets[ent[JOINTS[p]]]
        return np.eye(3) if e is None else rotation_between(e, d)

    # process joints parents first so end bones can inherit
    for k, b in enumerate(path[:-1] if spine == "segments" else ()):
        # the next path head away from this one (a BVH root often shares its
        # head with the first spine joint: its direction is the spine's, not
        # its tail's, which a converter may point anywhere)
        e = None
        for nxt in path[k + 1:]:
            e = _unit(K.T @ (ha[nxt] - ha[b]))
            if e is not None:
                break
        if e is None:
            e = _unit(K.T @ (ta[b] - ha[b]))
        offsets[b] = np.eye(3) if e is None else rotation_between(e, up)
    for j in JOINTS:
        if j not in ent or ent[j] in offsets:
            continue
        b = ent[j]
        if j in _END_JOINTS:
            offsets[b] = tail_or_inherit(b, j)
            continue
        child = JOINTS[BONE_CHILD[_J[j]]]
        e = None
        if child in ent:
            e = _unit(K.T @ (ha[ent[child]] - ha[b]))
        offsets[b] = tail_or_inherit(b, j) if e is None else rotation_between(e, CANONICAL_DIRS[_J[j]])

    for j in ("hand_l", "hand_r"):
        if j in ent:
            offsets[ent[j]] = _knuckle_twist(rig, ent[j], j, offsets[ent[j]], K, ha)


def _add_drivers(plan, path, bone_joint):
    """The drivers of the mapped bones (their joint) and of the path bones between them (a slerp)."""
    for b, j in bone_joint.items():
        plan.drivers[b] = (_J[j], _J[j], 0.0)
    # interpolated path bones
    for k, b in enumerate(path):
        if b in bone_joint:
            continue
        lo = max(i for i in range(k) if path[i] in bone_joint)
        his = [i for i in range(k + 1, len(path)) if path[i] in bone_joint]
        hi = his[0] if his else lo
        w = 0.0 if hi == lo else (k - lo) / (hi - lo)
        plan.drivers[b] = (_J[bone_joint[path[lo]]], _J[bone_joint[path[hi]]], w)


def _add_twist_bones(plan, rig, mapping):
    """The mapping's twist bones that no driver moves, each with its joint and that joint's child."""
    for j, bones in mapping.twist.items():
        if j not in _J:
            continue
        kids = [c for c, p in enumerate(PARENTS) if p == _J[j]]
        if not kids:
            continue
        for name in bones:
            if rig.has(name) and rig.index(name) not in plan.drivers:
                plan.twist[rig.index(name)] = (_J[j], kids[0])


def _rig_leg_length(h, ent, path) -> float:
    """Thigh + calf of the rig (mean of the legs mapped), else from the torso; 0 without either."""
    legs = []
    for s in ("l", "r"):
        if all(f"{x}_{s}" in ent for x in ("thigh", "calf", "foot")):
            legs.append(np.linalg.norm(h[ent[f"calf_{s}"]] - h[ent[f"thigh_{s}"]])
                        + np.linalg.norm(h[ent[f"foot_{s}"]] - h[ent[f"calf_{s}"]]))
    if legs:
        return float(np.mean(legs))
    if len(path) >= 2:  # fall back on the torso length
        torso = np.linalg.norm(h[path[-1]] - h[path[0]])
        canon = np.linalg.norm(CANONICAL.rest_keypoints()[_J["head"]] - CANONICAL.offsets[0])
        return float(torso / canon * leg_length_of(CANONICAL))
    return 0.0

def _knuckle_twist(rig, b, j, C, K, ha):
    """Correct a hand's rest offset about the hand axis with its knuckle line.

    When the hand has index and pinky (or little) finger bones, the line from
    the pinky's base to the index's base must point forward (canonical -Y) in
    the T-pose (palms down). Rest hands rolled about their axis (palms
    forward...) are then turned palm-down. Skipped when the knuckle line is
    not roughly perpendicular to the hand.
    """
    from .bone_names import parse_name

    def first(words):
        found = [i for i in rig.descendants(b) if set(parse_name(rig.names[i]).tokens) & words]
        return min(found, key=lambda i: rig.depth[i]) if found else None

    idx, pky = first({"index"}), first({"pinky", "little"})
    if idx is None or pky is None:
        return C
    d = CANONICAL_DIRS[_J[j]]
    k = K.T @ (ha[idx] - ha[pky])
    n = np.linalg.norm(k)
    if n < 1e-9:
        return C
    e = C.T @ d  # rest hand direction (body coordinates)
    kp = k - np.dot(k, e) * e
    if np.linalg.norm(kp) < 0.5 * n:
        return C
    v = C @ (kp / np.linalg.norm(kp))
    kc = np.array([0.0, -1.0, 0.0]) - np.dot([0.0, -1.0, 0.0], d) * d
    kc /= np.linalg.norm(kc)
    angle = np.arctan2(np.dot(d, np.cross(v, kc)), np.dot(v, kc))
    return axis_angle_to_matrix(d * angle) @ C


def leg_length_of(skel: Skeleton) -> float:
    o = np.asarray(skel.offsets)
    return float(np.mean([np.linalg.norm(o[_J[f"calf_{s}"]]) + np.linalg.norm(o[_J[f"foot_{s}"]])
                          for s in "lr"]))


def end_offset_on_rig(plan: "RetargetPlan", point: str):
    """Where the canonical end point ``point`` (``hand_tip_l``...) sits on the rig, in its joint's bone frame.

    The canonical end offset at the rig's scale (leg lengths), carried by the
    bone's alignment: the point :func:`target_keypoints` reads. None where
    the joint is not mapped.
    """
    e = END_POINTS.index(point)
    b = plan.mapping.entries.get(JOINTS[END_PARENTS[e]])
    if b is None or not plan.rig.has(b) or plan.rig.index(b) not in plan.align:
        return None
    return end_scale(plan) * (plan.align[plan.rig.index(b)].T @ (plan.K @ END_OFFSETS[e]))


def end_scale(plan) -> float:
    """The rig's size per canonical metre, by leg length: the end points' scale."""
    return plan.leg_length / leg_length_of(CANONICAL) if plan.leg_length > 0 else 1.0
