"""Retargeting maths: canonical joint rotations -> pose bones of a target rig.

Approach
--------
The canonical skeleton's rest is a T-pose with identity joint frames, so a
canonical *world* rotation ``R_j`` says how joint ``j``'s body part is turned
away from the T-pose. For each mapped target bone ``b`` a constant
*alignment* ``A_b`` (armature space) is computed once (:func:`plan_retarget`)
such that the bone's armature-space pose rotation is::

    G_b(t) = K @ R_j(t) @ K^T @ A_b,      A_b = K @ C_b @ K^T @ Q_b

- ``Q_b``: the bone's rest rotation (``matrix_local``), or the reference
  pose's rotation when the rig has a ``reference_matrix``.
- ``K``: the rig's *body frame* in armature space (columns: the rig's left,
  back, up), estimated from the rest (thighs/upper arms for left,
  pelvis->head for up) and snapped to the nearest axis permutation when
  within 30 degrees (a rig facing +Y or lying on its back still works, the
  natural tilt of a spine does not tilt the motion).
- ``C_b``: the *rest offset rotation*: the smallest rotation taking the
  target's rest bone direction (in body coordinates) onto the canonical
  T-pose direction of the joint. Bone directions come from positions, never
  from bone axes or rolls: head -> head of the bone mapped to the joint's
  canonical child (``BONE_CHILD``); spine/neck path bones: head -> next path
  bone's head (canonical direction: up). End bones (hands, head, toes, a
  foot without toe) use head -> tail when it lies within 45 degrees of the
  canonical direction, otherwise inherit the parent joint's ``C`` (rest of
  the end bone assumed neutral relative to its parent: BVH-style rigs whose
  bone axes all point one way).
  Twist about the bone is fixed by the smallest-rotation choice in body
  coordinates (hands with index and pinky bones: by the knuckle line, which
  must point forward in the palms-down T-pose): an A-pose arm is rotated about the body's forward axis, a bent
  rest elbow about its bend axis, a tilted spine about the lateral axis. This
  is well defined as long as a rest bone is not pointing opposite to its
  T-pose direction (> ~150 degrees away); give a ``reference_matrix`` pose in
  that case.

Hence the canonical T-pose gives every rig a T-pose, whatever its rest
(T-pose, A-pose, bent limbs, rolls, any axis convention), and any pose gives
the same bone directions in armature space for all rigs.

The pose-bone rotation follows from Blender's pose composition, bone ``b``
with parent ``p``: ``M_b = M_p @ Rest_p^-1 @ Rest_b @ Basis_b``, so
``Basis_b = (M_p_rot @ Q_p^T @ Q_b)^T @ G_b``, evaluated parents first
(bones between mapped ones stay at rest, which also folds a missing clavicle
into the upper arm: its world rotation is still matched).

Spine shape (``spine``): by default every bone on the pelvis -> head path
points up in the T-pose (``"segments"``): the canonical spine's shape is
carried onto the rig's as it is. With ``spine="rest"`` the path keeps its
rest shape and the line from the pelvis' head to the head's is what points
up: a rig's own posture (its author's S-curve, a skeleton's chest behind its
hips) is its upright, and the canonical spine's bend is added to it. Only a
standing rest has a posture: a path bone more than
:data:`SPINE_REST_MAX_DEGREES` off that line (a skeleton lying along an axis,
a spine bent through a right angle) falls back to ``"segments"``.

Spine and neck: bones on the pelvis -> head path that are mapped follow their
joint; the others (``BoneMapping.extra_spine``) get a slerp of the world
rotations of the mapped bones around them by path position. With 2 spine
bones the second takes spine3's world rotation (spine2 + spine3 combined),
with 4 one bone between spine2 and spine3 shares their rotation: the chest
orientation (where the arms hang) always matches.

Twist bones (``BoneMapping.twist``) stay at rest unless ``twist_share > 0``:
then they turn about the limb axis by ``twist_share`` times the twist of the
child joint's local rotation (hand for the forearm, forearm for the upper
arm...).

Root motion: the mapped pelvis bone's head is placed at
``rest_head + K @ (scale * (root_pos - source_rest_root))``; horizontal
(canonical X, Y) displacement is dropped with ``in_place``. ``scale="auto"``
is the ratio of the target's leg length (thigh + calf, armature units) to the
source skeleton's.

Output frames
-------------
- ``quaternions[t, b]``: ``PoseBone.rotation_quaternion`` (w, x, y, z) of
  bone ``b``, i.e. ``matrix_basis``'s rotation (relative to the bone's rest in
  its parent's posed frame). Identity for bones not driven.
- ``locations[t, b]``: ``PoseBone.location``, in the bone's own rest frame
  (``matrix_basis`` translation); zero except for the root (pelvis) bone.
  Ignored by Blender for connected bones (``use_connect``): the pelvis is
  expected not to be connected.
- ``heads[t, b]``: posed head positions in armature space (object local,
  before ``matrix_world``) for checking.
All in armature units: the armature object's transform is not applied (the
Blender layer keys pose bones, which are relative to the object anyway).

No ``bpy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.rotations_np import axis_angle_to_matrix, change_basis, euler_to_matrix, matmul_each, matrix_to_quat, \
    quat_slerp, quat_to_matrix, rotation_between, vector_norm
from ..model.skeleton import BONE_CHILD, CANONICAL, END_OFFSETS, END_PARENTS, END_POINTS, JOINTS, KEYPOINTS, \
    PARENTS, Skeleton, forward_kinematics_np

__all__ = ["RetargetPlan", "RetargetResult", "plan_retarget", "retarget", "pose_rig",
           "target_keypoints", "quats_to_euler_continuous", "continue_eulers", "quat_continuity",
           "euler_to_matrix_blender", "matrix_to_euler_blender", "body_frame", "CHUNK_FRAMES", "frame_chunks",
           "twist_angle", "end_offset_on_rig", "turn_bones_to"]

#: Frames per chunk of the per-frame work (:func:`retarget`, :func:`pose_rig`,
#: :func:`target_keypoints`, :func:`quats_to_euler_continuous`): whole-clip
#: outputs, temporaries of one chunk (a 100,000-frame clip's (T, B, 3, 3)
#: temporaries would take gigabytes). Results do not depend on it.
CHUNK_FRAMES = 4096

#: The most (degrees) by which a pelvis -> head path bone may point away from the line from the
#: pelvis' head to the head's for its rest to be taken as the rig's posture (``spine="rest"``):
#: fair1's hips-to-spine bone is 33 degrees off it, Rokoko's, whose rest lies along an axis, 77.
SPINE_REST_MAX_DEGREES = 45.0
#: The ways :func:`plan_retarget` carries the canonical spine's shape onto a rig.
SPINE_SHAPES = ("segments", "rest")

_J = {n: i for i, n in enumerate(JOINTS)}
_END_JOINTS = tuple(JOINTS[i] for i in range(len(JOINTS)) if BONE_CHILD[i] >= len(JOINTS))


def frame_chunks(n_frames: int, chunk=None):
    """``(a, b)`` frame ranges of at most ``chunk`` frames (default :data:`CHUNK_FRAMES`) covering ``n_frames``."""
    step = max(int(chunk or CHUNK_FRAMES), 1)
    n_frames = int(n_frames)
    if n_frames <= 0:
        return [(0, 0)]
    return [(a, min(a + step, n_frames)) for a in range(0, n_frames, step)]


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


@dataclass
class RetargetResult:
    """Output of :func:`retarget` (see the module docstring for the frames).

    Attributes
    ----------
    bone_names : list of str
        All rig bones (B).
    quaternions : ndarray (T, B, 4)
        Pose-bone ``rotation_quaternion`` (w, x, y, z), sign-continuous.
    locations : ndarray (T, B, 3)
        Pose-bone ``location`` (zero except the root bone).
    heads : ndarray (T, B, 3)
        Posed bone heads in armature space.
    scale : float
        Root-motion scale used (armature units per source metre).
    driven : ndarray (B,) of bool
        Bones whose rotation is set (mapped, interpolated or twist bones);
        the others are identity and may be left unkeyed.
    root_bone : str or None
        Bone carrying the root motion.
    """

    bone_names: list
    quaternions: np.ndarray
    locations: np.ndarray
    heads: np.ndarray
    scale: float
    driven: np.ndarray
    root_bone: str | None = None

    def on_rig(self, rig) -> "RetargetResult":
        """This result with a column for every bone of ``rig`` (a bake of its posed bones only, see
        :mod:`.posed`): the bones it does not hold stay at rest, their heads posed anew."""
        if list(rig.names) == list(self.bone_names):
            return self
        cols = np.array([rig.index(n) for n in self.bone_names], dtype=np.int64)
        T, B = len(self.quaternions), len(rig)
        quats = np.zeros((T, B, 4))
        quats[..., 0] = 1.0
        quats[:, cols] = self.quaternions
        locs = np.zeros((T, B, 3))
        locs[:, cols] = self.locations
        driven = np.zeros(B, dtype=bool)
        driven[cols] = self.driven
        _, heads = pose_rig(rig, quats, locs, rotations=False)
        return RetargetResult(list(rig.names), quats, locs, heads, self.scale, driven, self.root_bone)


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
    n = len(rig)
    Q = rig.rest_rotation()
    h = rig.head.copy()
    rel_rot = np.empty((n, 3, 3))
    rel_pos = np.empty((n, 3))
    for b in range(n):
        p = rig.parents[b]
        if p < 0:
            rel_rot[b], rel_pos[b] = Q[b], h[b]
        else:
            rel_rot[b] = Q[p].T @ Q[b]
            rel_pos[b] = Q[p].T @ (h[b] - h[p])
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
    plan.spine = spine

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
    for b, C in offsets.items():
        plan.offset[b] = C
        plan.align[b] = K @ C @ K.T @ Qa[b]
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
    # twist bones
    if twist_share:
        for j, bones in mapping.twist.items():
            if j not in _J:
                continue
            kids = [c for c, p in enumerate(PARENTS) if p == _J[j]]
            if not kids:
                continue
            for name in bones:
                if rig.has(name) and rig.index(name) not in plan.drivers:
                    plan.twist[rig.index(name)] = (_J[j], kids[0])
    plan.root = ent.get("pelvis", -1)
    legs = []
    for s in ("l", "r"):
        if all(f"{x}_{s}" in ent for x in ("thigh", "calf", "foot")):
            legs.append(np.linalg.norm(h[ent[f"calf_{s}"]] - h[ent[f"thigh_{s}"]])
                        + np.linalg.norm(h[ent[f"foot_{s}"]] - h[ent[f"calf_{s}"]]))
    if legs:
        plan.leg_length = float(np.mean(legs))
    elif len(path) >= 2:  # fall back on the torso length
        torso = np.linalg.norm(h[path[-1]] - h[path[0]])
        canon = np.linalg.norm(CANONICAL.rest_keypoints()[_J["head"]] - CANONICAL.offsets[0])
        plan.leg_length = float(torso / canon * _leg_length(CANONICAL))
    return plan


def _knuckle_twist(rig, b, j, C, K, ha):
    """Correct a hand's rest offset about the hand axis with its knuckle line.

    When the hand has index and pinky (or little) finger bones, the line from
    the pinky's base to the index's base must point forward (canonical -Y) in
    the T-pose (palms down). Rest hands rolled about their axis (palms
    forward...) are then turned palm-down. Skipped when the knuckle line is
    not roughly perpendicular to the hand.
    """
    from .mapping import parse_name

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


def _leg_length(skel: Skeleton) -> float:
    o = np.asarray(skel.offsets)
    return float(np.mean([np.linalg.norm(o[_J[f"calf_{s}"]]) + np.linalg.norm(o[_J[f"foot_{s}"]])
                          for s in "lr"]))


def twist_angle(q, axis):
    """Twist angle (...) of unit quaternions (..., 4) (w, x, y, z) about a fixed unit axis (swing-twist), in [-pi, pi)."""
    a = 2.0 * np.arctan2(q[..., 1:] @ axis, q[..., 0])
    return (a + np.pi) % (2 * np.pi) - np.pi


def _twist_angle(rot, axis):
    """:func:`twist_angle` of rotations (T, 3, 3)."""
    return twist_angle(matrix_to_quat(rot), axis)


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
    return _end_scale(plan) * (plan.align[plan.rig.index(b)].T @ (plan.K @ END_OFFSETS[e]))


def _end_scale(plan) -> float:
    """The rig's size per canonical metre, by leg length: the end points' scale."""
    return plan.leg_length / _leg_length(CANONICAL) if plan.leg_length > 0 else 1.0


def quat_continuity(quats: np.ndarray, out=None, *, chunk=None) -> np.ndarray:
    """Flip quaternion signs so consecutive frames have a non-negative dot product.

    Parameters
    ----------
    quats : ndarray (T, ..., 4)
    out : ndarray, optional
        Where to write the result (may be ``quats`` itself, float64).
    chunk : int, optional
        Frames at a time (default :data:`CHUNK_FRAMES`): no whole-clip
        temporaries; the result does not depend on it.

    Returns
    -------
    ndarray, same shape (vectorised: cumulative product of the sign changes).
    """
    q = np.asarray(quats, dtype=np.float64)
    if out is None:
        out = q.copy()
    elif out is not q:
        out[...] = q
    if q.shape[0] < 2:
        return out
    sign = np.ones(q.shape[1:-1])    # the sign given to the frame before the chunk
    prev = None                      # that frame as it came
    for a, b in frame_chunks(q.shape[0], chunk):
        part = q[a:b]
        before = part[:-1] if prev is None else np.concatenate([prev[None], part[:-1]])
        flips = np.where(np.sum((part[1:] if prev is None else part) * before, axis=-1) < 0, -1.0, 1.0)
        signs = np.cumprod(flips, axis=0) * sign
        if prev is None:
            signs = np.concatenate([sign[None], signs], axis=0)
        prev = part[-1].copy()       # (before out, which may be q, changes it)
        out[a:b] *= signs[..., None]
        sign = signs[-1]
    return out


def retarget(plan: RetargetPlan, local_rot, root_pos, source_skeleton: Skeleton | None = None, *,
             scale=None, in_place: bool = False, world_rotations=None, chunk=None) -> RetargetResult:
    """Retarget solver output onto the planned rig.

    Parameters
    ----------
    plan : RetargetPlan
    local_rot : ndarray (T, 22, 3, 3)
        Canonical local joint rotations (row 0: root orientation).
    root_pos : ndarray (T, 3)
        Canonical root (pelvis) position, metres.
    source_skeleton : Skeleton, optional
        The fitted source skeleton (defaults to the canonical one): its
        root rest position and leg length define the root motion.
    scale : float, "auto" or None
        Root-motion scale (armature units per source metre); ``None`` or
        ``"auto"``: target leg length / source leg length.
    in_place : bool
        Drop the horizontal root displacement (keep the vertical).
    world_rotations : dict or callable, optional
        Bone index -> (T, 3, 3) armature-space rotations that bone takes
        instead of what the canonical joints give it (bones the source has
        too but no canonical joint stands for: a CMU ``LHipJoint``, an extra
        neck bone); or ``world_rotations(a, b)`` giving that dict for frames
        ``a:b`` (asked a chunk at a time: nothing whole-clip held).
    chunk : int, optional
        Frames converted at a time (default :data:`CHUNK_FRAMES`; the
        result does not depend on it).

    Returns
    -------
    RetargetResult
    """
    src = source_skeleton or CANONICAL
    local_rot = np.asarray(local_rot, dtype=np.float64)
    root_pos = np.asarray(root_pos, dtype=np.float64).reshape(-1, 3)
    if local_rot.ndim == 3:
        local_rot = local_rot[None]
    T = local_rot.shape[0]
    if scale is None or (isinstance(scale, str) and scale == "auto"):
        scale = plan.leg_length / _leg_length(src) if plan.leg_length > 0 else 1.0
    scale = float(scale)
    n = len(plan.bone_names)
    quats = np.zeros((T, n, 4))
    quats[..., 0] = 1.0
    locs = np.zeros((T, n, 3))
    Xb = np.empty((n, T, 3))     # bone-major (contiguous per bone)
    driven = np.zeros(n, dtype=bool)
    delta = root_pos - np.asarray(src.offsets[0], dtype=np.float64)
    if in_place:
        delta = delta.copy()
        delta[:, :2] = 0.0
    for a, b in frame_chunks(T, chunk):
        if world_rotations is None or callable(world_rotations):
            world = None if world_rotations is None else world_rotations(a, b)
        else:
            world = {k: v[a:b] for k, v in world_rotations.items()}
        _retarget_chunk(plan, local_rot[a:b], delta[a:b], scale, world, quats[a:b], locs[a:b], Xb[:, a:b], driven)
    quat_continuity(quats, out=quats, chunk=chunk)
    root_name = plan.bone_names[plan.root] if plan.root >= 0 else None
    return RetargetResult(list(plan.bone_names), quats, locs, np.swapaxes(Xb, 0, 1), scale, driven, root_name)


def _retarget_chunk(plan, local_rot, delta, scale, world_rotations, quats, locs, Xb, driven):
    """:func:`retarget` of frames ``local_rot`` (t, 22, 3, 3), written into ``quats`` (t, B, 4), ``locs``
    (t, B, 3) and the bone-major ``Xb`` (B, t, 3) (views of the whole clip's arrays); marks ``driven``."""
    T = local_rot.shape[0]
    K = plan.K
    world_rotations = world_rotations or {}
    if any(b not in world_rotations for b in set(plan.drivers) | set(plan.twist)):
        Rw, _ = forward_kinematics_np(local_rot, np.zeros((T, 3)))
        Rk = change_basis(K, Rw)  # canonical world rotations in armature axes
    else:   # (the source's own skeleton: every bone takes the source's turn, no canonical joint is read)
        Rw = Rk = None
    qk = None
    n = len(plan.bone_names)
    rig = plan.rig
    bases = {}
    special = set(plan.drivers) | set(plan.twist) | set(world_rotations) | {plan.root}
    # bone-major arrays (contiguous per bone); one batch per depth level, the
    # bones with a driver, a twist or the root handled one by one
    Wb = np.empty((n, T, 3, 3))
    for idx, par in _levels(rig):
        if par is None:
            base_rot = np.broadcast_to(plan.rel_rot[idx][:, None], (len(idx), T, 3, 3))
            base_pos = np.broadcast_to(plan.rel_pos[idx][:, None], (len(idx), T, 3))
        else:
            Wp = Wb[par]
            base_rot = matmul_each(Wp, plan.rel_rot[idx])
            base_pos = Xb[par] + matmul_each(Wp, plan.rel_pos[idx][..., None])[..., 0]
        Wb[idx] = base_rot
        Xb[idx] = base_pos
        for i, b in enumerate(idx):
            if b not in special:
                continue
            br = base_rot[i]
            basis = None
            if b in world_rotations:
                basis = np.swapaxes(br, -1, -2) @ world_rotations[b]
            elif b in plan.drivers:
                ja, jb, w = plan.drivers[b]
                if ja == jb or w == 0.0:
                    R = Rk[:, ja]
                elif w == 1.0:
                    R = Rk[:, jb]
                else:
                    if qk is None:
                        qk = {}
                    for j in (ja, jb):
                        if j not in qk:
                            qk[j] = matrix_to_quat(Rk[:, j])
                    R = quat_to_matrix(quat_slerp(qk[ja], qk[jb], np.full(T, w)))
                G = matmul_each(R[None], plan.align[b][None])[0]
                basis = np.swapaxes(br, -1, -2) @ G
            elif b in plan.twist:
                j, c = plan.twist[b]
                angle = _twist_angle(np.swapaxes(Rw[:, j], -1, -2) @ Rw[:, c], CANONICAL_DIRS[j])
                axis_w = Rk[:, j] @ (K @ CANONICAL_DIRS[j])
                axis_l = np.einsum("tji,tj->ti", br, axis_w)
                basis = axis_angle_to_matrix(axis_l * (plan.twist_share * angle)[:, None])
            if basis is not None:
                driven[b] = True
                Wb[b] = br @ basis
                bases[b] = basis
            if b == plan.root:
                H = plan.rest_head[b] + scale * (delta @ K.T)
                locs[:, b] = np.einsum("tji,tj->ti", br, H - base_pos[i])
                Xb[b] = H
    if bases:   # one conversion for all driven bones
        idx = list(bases)
        quats[:, idx] = matrix_to_quat(np.stack([bases[b] for b in idx], axis=1))


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


def _levels(rig):
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
    """:func:`_levels` with each bone's rest rotation and head relative to its parent.

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
    for idx, par in _levels(rig):
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


def target_keypoints(plan: RetargetPlan, quats, locations=None, *, unit_scale: float = 1.0, chunk=None) -> np.ndarray:
    """Canonical keypoints (T, 32, 3) read from a posed target rig.

    Joint keypoints are the posed heads of the mapped bones; unmapped spine /
    neck joints are interpolated along the pelvis -> head path at their
    canonical height fractions; end points are the canonical end offsets
    (scaled to the rig's leg length) carried by the recovered canonical
    rotation of their joint. Missing joints (clavicle, toe) are NaN.

    Positions are in armature space expressed in canonical axes
    (``K^T @ x``), times ``unit_scale`` (pass the armature's object scale to
    get metres from a scaled rig). No other scaling: these are the keypoints
    to give the solver for a round trip. Posed ``chunk`` frames at a time
    (default :data:`CHUNK_FRAMES`).
    """
    T = np.shape(quats)[0]
    out = np.full((T, len(KEYPOINTS), 3), np.nan)
    for a, b in frame_chunks(T, chunk):
        _target_keypoints_chunk(plan, quats[a:b], None if locations is None else locations[a:b], out[a:b])
    if unit_scale != 1.0:
        out *= unit_scale
    return out


def _target_keypoints_chunk(plan, quats, locations, out):
    """:func:`target_keypoints` of a few frames, written into ``out`` (t, 32, 3) (NaN-filled)."""
    rig = plan.rig
    need = {rig.index(b) for b in plan.mapping.entries.values() if rig.has(b)} | set(plan.path)
    need |= {a for b in list(need) for a in rig.ancestors(b)}
    W, X = pose_rig(rig, quats, locations, bones=sorted(need), chunk=len(quats) or 1)   # only what is read
    K = plan.K
    Rc = {}
    ent = {j: rig.index(b) for j, b in plan.mapping.entries.items() if j in _J}
    if ent:
        js = [_J[j] for j in ent]
        bs = list(ent.values())
        out[:, js] = X[:, bs] @ K
    # G = K R K^T A  ->  R = K^T G A^T K (only the joints carrying end points)
    for j in {JOINTS[e] for e in END_PARENTS} & set(ent):
        b = ent[j]
        Rc[j] = K.T @ W[:, b] @ (plan.align[b].T @ K)
    if plan.path:
        rest = plan.rest_head[plan.path]
        seg = np.linalg.norm(np.diff(rest, axis=0), axis=-1)
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        ckp = CANONICAL.rest_keypoints()
        c0, c1 = ckp[_J["pelvis"], 2], ckp[_J["head"], 2]
        for j in ("spine1", "spine2", "spine3", "neck"):
            if j in ent:
                continue
            f = (ckp[_J[j], 2] - c0) / (c1 - c0) * cum[-1]
            k = int(np.clip(np.searchsorted(cum, f, side="right") - 1, 0, len(seg) - 1))
            w = 0.0 if seg[k] == 0 else (f - cum[k]) / seg[k]
            pa, pb = X[:, plan.path[k]], X[:, plan.path[k + 1]]
            out[:, _J[j]] = ((1 - w) * pa + w * pb) @ K
    s = _end_scale(plan)
    for e, j in enumerate(END_PARENTS):
        name = JOINTS[j]
        if name in Rc:
            out[:, len(JOINTS) + e] = out[:, j] + s * (Rc[name] @ END_OFFSETS[e])


# --------------------------------------------------------------------------
# Euler angles, Blender convention
# --------------------------------------------------------------------------
_AX = {"X": 0, "Y": 1, "Z": 2}


def euler_to_matrix_blender(euler, order: str = "XYZ") -> np.ndarray:
    """Blender ``rotation_euler`` (radians) to matrices.

    Parameters
    ----------
    euler : array_like (..., 3)
        Angles indexed by axis, ``(x, y, z)``, whatever the order: exactly
        ``PoseBone.rotation_euler`` (``mathutils.Euler((x, y, z), order)``).
    order : str
        Blender's rotation order, naming the axes in the order they are
        applied: ``"XYZ"`` is ``Rz @ Ry @ Rx``, ``"ZXY"`` is ``Ry @ Rx @ Rz``.

    Returns
    -------
    ndarray (..., 3, 3)
    """
    # Blender's order names the axes as applied: the intrinsic product reverses it
    e = np.asarray(euler, dtype=np.float64)
    return euler_to_matrix(e[..., [_AX[c] for c in reversed(order)]], order[::-1], degrees=False)


def _matrix_to_euler_by_position(m, order):
    """Angles ``(a, b, c)`` of the first, second and third applied axis (see below)."""
    i, j, k = (_AX[c] for c in order)
    par = 1.0 if (j - i) % 3 == 1 else -1.0
    b = np.arcsin(np.clip(-par * m[..., k, i], -1.0, 1.0))
    a = np.arctan2(par * m[..., k, j], m[..., k, k])
    c = np.arctan2(par * m[..., j, i], m[..., i, i])
    # gimbal lock: put everything in the first angle
    lock = np.abs(m[..., k, i]) > 1.0 - 1e-9
    a_lock = np.arctan2(-par * m[..., j, k], m[..., j, j])
    a = np.where(lock, a_lock, a)
    c = np.where(lock, 0.0, c)
    return np.stack([a, b, c], axis=-1)


def _by_axis(e_pos, order):
    """Reorder angles given per applied axis (position in ``order``) to (x, y, z)."""
    return e_pos[..., [order.index(c) for c in "XYZ"]]


def matrix_to_euler_blender(mat, order: str = "XYZ") -> np.ndarray:
    """Matrices to Blender Euler angles (radians).

    Parameters
    ----------
    mat : array_like (..., 3, 3)
    order : str
        Blender rotation order (see :func:`euler_to_matrix_blender`).

    Returns
    -------
    ndarray (..., 3)
        Angles indexed by axis ``(x, y, z)`` (``PoseBone.rotation_euler``),
        the middle applied axis' angle in [-pi/2, pi/2].
    """
    m = np.asarray(mat, dtype=np.float64)
    return _by_axis(_matrix_to_euler_by_position(m, order), order)


def quats_to_euler_continuous(quats, order: str = "XYZ", *, chunk=None) -> np.ndarray:
    """Quaternions (T, B, 4) to Blender Euler angles (T, B, 3) without jumps.

    The angles are indexed by axis ``(x, y, z)`` whatever ``order`` is, as
    ``PoseBone.rotation_euler`` stores them. Each frame takes, among the
    equivalent Euler triples (the two Tait-Bryan branches ``(a, b, c)`` /
    ``(a+pi, pi-b, c+pi)``, ``a, b, c`` the angles of the first, second and
    third applied axis, plus any multiples of 2 pi), the one nearest the
    previous frame. Vectorised over frames: the branch switches where the
    other branch is nearer the previous frame's (both branches move by the
    same amounts, so the choice is a cumulative parity), then ``np.unwrap``
    removes 2 pi jumps. ``chunk`` frames at a time (default
    :data:`CHUNK_FRAMES`), each chunk following the previous one
    (:func:`continue_eulers`).
    """
    q = np.asarray(quats)
    out = np.empty(q.shape[:-1] + (3,))
    prev_q = prev_e = None
    for a, b in frame_chunks(q.shape[0], chunk):
        out[a:b] = continue_eulers(np.asarray(q[a:b], dtype=np.float64), order, prev_q, prev_e)
        if b > a:
            prev_q, prev_e = np.asarray(q[b - 1], dtype=np.float64), out[b - 1]
    return out


_TURN = 2.0 * np.pi


def _wrapped(x):
    """Angles ``x`` (radians) less whole turns, into [-pi, pi] (``rint``: a float modulo is twice as slow)."""
    return x - _TURN * np.rint(x * (1.0 / _TURN))


def _eulers_of_chunk(q, order, matrices=False):
    """:func:`quats_to_euler_continuous` of frames ``q`` (T, B, 4), or of rotation matrices (T, B, 3, 3)
    with ``matrices``; the first frame on the principal branch."""
    e1 = _matrix_to_euler_by_position(q if matrices else quat_to_matrix(q), order)
    if e1.shape[0] < 2:
        return _by_axis(e1, order)
    e2 = e1 + np.array([np.pi, 0.0, np.pi])
    e2[..., 1] = np.pi - e1[..., 1]

    def wrapdist(a, b):
        d = _wrapped(a - b)
        return d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2]   # (7x np.sum over 3)

    d_same = wrapdist(e1[1:], e1[:-1])
    d_cross = wrapdist(e2[1:], e1[:-1])
    switch = (d_cross + 1e-12 < d_same).astype(np.int64)
    branch = np.concatenate([np.zeros((1,) + switch.shape[1:], np.int64), np.cumsum(switch, axis=0) % 2])
    e = np.where(branch[..., None] == 1, e2, e1)
    # np.unwrap along the frames: every jump of pi or more between frames taken out in whole turns
    jump = np.diff(e, axis=0)
    e[1:] -= _TURN * np.cumsum(np.rint(jump * (1.0 / _TURN)), axis=0)
    return _by_axis(e, order)


def _other_branch(e, order):
    """The other Tait-Bryan solution of Euler angles ``e`` (..., 3) by axis, Blender ``order``."""
    i, j, k = ("XYZ".index(c) for c in order)
    out = e.copy()
    out[..., i] += np.pi
    out[..., j] = np.pi - e[..., j]
    out[..., k] += np.pi
    return out


def continue_eulers(q, order, prev_q=None, prev_e=None, *, matrices=False):
    """Continuous Blender Eulers (T, B, 3) of quaternions ``q`` (T, B, 4), following ``prev_e`` (B, 3).

    The chunk's Eulers with the previous chunk's last rotation ``prev_q``
    (B, 4) in front; that first frame is then moved onto the previous
    chunk's last Euler triple ``prev_e`` (the other Tait-Bryan branch and/or
    whole turns), and the chunk with it. Without ``prev_q`` the first frame
    is on the principal branch. ``matrices``: ``q`` and ``prev_q`` are
    rotation matrices, (T, B, 3, 3) and (B, 3, 3).
    """
    if prev_q is None:
        return _eulers_of_chunk(q, order, matrices)
    e = _eulers_of_chunk(np.concatenate([prev_q[None], q]), order, matrices)
    alt = _other_branch(e, order)
    d_same = (_wrapped(prev_e - e[0]) ** 2).sum(-1)
    d_alt = (_wrapped(prev_e - alt[0]) ** 2).sum(-1)
    e = np.where((d_alt < d_same)[None, ..., None], alt, e)
    e += np.round((prev_e - e[0]) / _TURN)[None] * _TURN
    return e[1:]
