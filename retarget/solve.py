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

from dataclasses import dataclass

import numpy as np

from ..model.rotations_np import axis_angle_to_matrix, change_basis, matmul_each, matrix_to_quat, quat_slerp, \
    quat_to_matrix
from ..model.skeleton import CANONICAL, END_OFFSETS, END_PARENTS, JOINTS, KEYPOINTS, Skeleton, forward_kinematics_np
from .channels import continue_eulers, euler_to_matrix_blender, matrix_to_euler_blender, quat_continuity, \
    quats_to_euler_continuous
from .chunks import CHUNK_FRAMES, frame_chunks
from .plan import CANONICAL_DIRS, SPINE_REST_MAX_DEGREES, SPINE_SHAPES, RetargetPlan, body_frame, end_offset_on_rig, \
    end_scale, leg_length_of, plan_retarget
from .rigpose import depth_levels, pose_rig, turn_bones_to

__all__ = ["RetargetPlan", "RetargetResult", "plan_retarget", "retarget", "pose_rig",
           "target_keypoints", "quats_to_euler_continuous", "continue_eulers", "quat_continuity",
           "euler_to_matrix_blender", "matrix_to_euler_blender", "body_frame", "CHUNK_FRAMES", "frame_chunks",
           "twist_angle", "end_offset_on_rig", "turn_bones_to", "SPINE_SHAPES", "SPINE_REST_MAX_DEGREES"]

_J = {n: i for i, n in enumerate(JOINTS)}


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


def twist_angle(q, axis):
    """Twist angle (...) of unit quaternions (..., 4) (w, x, y, z) about a fixed unit axis (swing-twist), in [-pi, pi)."""
    a = 2.0 * np.arctan2(q[..., 1:] @ axis, q[..., 0])
    return (a + np.pi) % (2 * np.pi) - np.pi


def _twist_angle(rot, axis):
    """:func:`twist_angle` of rotations (T, 3, 3)."""
    return twist_angle(matrix_to_quat(rot), axis)


#: A long bake's storage of its pose channels (quaternions, locations): the precision of Blender's
#: keys; every chunk is computed in float64 (a long clip's float64 channels take hundreds of MB).
POSE_DTYPE = np.float32


def retarget(plan: RetargetPlan, local_rot, root_pos, source_skeleton: Skeleton | None = None, *,
             scale=None, in_place: bool = False, world_rotations=None, chunk=None,
             with_heads: bool = True, dtype=np.float64) -> RetargetResult:
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
    with_heads : bool
        Keep the posed heads (``heads`` is None otherwise: a caller that
        poses the rig again saves a long clip's (T, B, 3) array).
    dtype : numpy dtype
        Of the quaternions and locations (:data:`POSE_DTYPE` halves a bake's
        channels; the arithmetic is float64 either way).

    Returns
    -------
    RetargetResult
    """
    src = source_skeleton or CANONICAL
    local_rot = np.asarray(local_rot)    # (float64 a chunk at a time: a long clip's copy would be hundreds of MB)
    root_pos = np.asarray(root_pos, dtype=np.float64).reshape(-1, 3)
    if local_rot.ndim == 3:
        local_rot = local_rot[None]
    T = local_rot.shape[0]
    if scale is None or (isinstance(scale, str) and scale == "auto"):
        scale = plan.leg_length / leg_length_of(src) if plan.leg_length > 0 else 1.0
    scale = float(scale)
    n = len(plan.bone_names)
    quats = np.zeros((T, n, 4), dtype)
    quats[..., 0] = 1.0
    locs = np.zeros((T, n, 3), dtype)
    heads = np.empty((T, n, 3)) if with_heads else None
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
        Xb = np.empty((n, b - a, 3))     # bone-major (contiguous per bone), float64 while the chunk is posed
        _retarget_chunk(plan, np.asarray(local_rot[a:b], dtype=np.float64), delta[a:b], scale, world, quats[a:b],
                        locs[a:b], Xb, driven)
        if heads is not None:
            heads[a:b] = np.swapaxes(Xb, 0, 1)
    quat_continuity(quats, out=quats, chunk=chunk)
    root_name = plan.bone_names[plan.root] if plan.root >= 0 else None
    return RetargetResult(list(plan.bone_names), quats, locs, heads, scale, driven, root_name)


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
    for idx, par in depth_levels(rig):
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


def target_keypoints(plan: RetargetPlan, quats, locations=None, *, unit_scale: float = 1.0, chunk=None,
                     dtype=np.float64) -> np.ndarray:
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
    (default :data:`CHUNK_FRAMES`), stored as ``dtype`` (float32 halves a long clip's figures).
    """
    T = np.shape(quats)[0]
    out = np.full((T, len(KEYPOINTS), 3), np.nan, dtype=dtype)
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
    s = end_scale(plan)
    for e, j in enumerate(END_PARENTS):
        name = JOINTS[j]
        if name in Rc:
            out[:, len(JOINTS) + e] = out[:, j] + s * (Rc[name] @ END_OFFSETS[e])


