"""Writing a baked armature's BVH with numpy, no loop over frames (what :mod:`.export` writes for ``.bvh``):
the hierarchy, the channels read from the action's fcurves (:func:`read_pose_channels`) or from a bake's keys
(:func:`.export.write_keys_bvh`), the motion in chunks of :data:`BVH_CHUNK_FRAMES` frames (see :mod:`.export` for
what matches Blender's own exporter)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


__all__ = ["BVH_CHUNK_FRAMES", "PoseChannels", "bvh_hierarchy", "bvh_motion_chunks", "write_armature_bvh",
           "read_pose_channels"]


#: Frames composed and written at a time by the numpy BVH writer.
BVH_CHUNK_FRAMES = 2048


_EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")


_TRANSFORMS = ("location", "rotation_quaternion", "rotation_euler", "rotation_axis_angle", "scale")


_SIZES = {"location": 3, "rotation_quaternion": 4, "rotation_euler": 3, "rotation_axis_angle": 4, "scale": 3}


@dataclass
class PoseChannels:
    """An armature's rest skeleton and its pose-bone channels over a frame range (plain arrays).

    Attributes
    ----------
    rig : retarget.rig.RigDescription
        Rest skeleton (bones in the armature's order).
    connected : ndarray of bool, shape (B,)
        ``Bone.use_connect`` (a connected bone's location has no effect and
        its BVH joint has rotation channels only).
    rotation_modes : list of str
        ``PoseBone.rotation_mode`` per bone.
    static : dict
        ``location`` (B, 3), ``rotation_quaternion`` (B, 4), ``rotation_euler``
        (B, 3), ``rotation_axis_angle`` (B, 4): the pose bones' current values.
    keyed : dict
        ``(property, bone, index) -> (T,) values``, one per fcurve, a value
        per exported frame.
    num_frames : int
    frame_time : float
        Seconds per frame.
    """

    rig: object
    connected: np.ndarray
    rotation_modes: list
    static: dict
    keyed: dict = field(default_factory=dict)
    num_frames: int = 1
    frame_time: float = 1.0 / 30.0

    def _rotation_prop(self, b):
        mode = self.rotation_modes[b]
        return {"QUATERNION": "rotation_quaternion", "AXIS_ANGLE": "rotation_axis_angle"}.get(mode, "rotation_euler")

    def moving(self):
        """Bones whose BVH channels change over the frames (bool, (B,)): a key on their mode's rotation or,
        unconnected, on their location."""
        out = np.zeros(len(self.rotation_modes), dtype=bool)
        for prop, b, _ in self.keyed:
            if prop == self._rotation_prop(b) or (prop == "location" and not self.connected[b]):
                out[b] = True
        return out

    def values(self, prop, a, b, bones):
        """Channel ``prop`` of ``bones`` for frames ``a:b``, shape (b - a, len(bones), size), float64."""
        bones = np.asarray(bones, dtype=np.int64)
        slot = {int(x): k for k, x in enumerate(bones)}
        out = np.empty((b - a, len(bones), _SIZES[prop]))
        out[:] = np.asarray(self.static[prop], dtype=np.float64)[bones]
        for (p, bone, i), v in self.keyed.items():
            if p == prop and bone in slot:
                out[:, slot[bone], i] = v[a:b]
        return out

    def matrices(self, a, b, bones):
        """Rotation of ``bones`` (their rotation mode's channel) as matrices, (b - a, len(bones), 3, 3).

        Euler and axis-angle channels straight to matrices (no quaternion on the way)."""
        from ..model.rotations_np import axis_angle_to_matrix, quat_to_matrix
        from ..retarget.channels import euler_to_matrix_blender

        bones = np.asarray(bones, dtype=np.int64)
        modes = np.array(self.rotation_modes)[bones]
        out = np.empty((b - a, len(bones), 3, 3))
        k = np.flatnonzero(~np.isin(modes, list(_EULER_ORDERS) + ["AXIS_ANGLE"]))
        if k.size:
            out[:, k] = quat_to_matrix(self.values("rotation_quaternion", a, b, bones[k]))
        for order in _EULER_ORDERS:
            k = np.flatnonzero(modes == order)
            if k.size:
                out[:, k] = euler_to_matrix_blender(self.values("rotation_euler", a, b, bones[k]), order)
        k = np.flatnonzero(modes == "AXIS_ANGLE")
        if k.size:
            aa = self.values("rotation_axis_angle", a, b, bones[k])
            n = np.linalg.norm(aa[..., 1:], axis=-1, keepdims=True)
            vec = np.where(n > 0, aa[..., 1:] / np.where(n > 0, n, 1.0), 0.0) * aa[..., :1]
            out[:, k] = axis_angle_to_matrix(vec)
        return out

    def locations(self, a, b, bones):
        """Pose locations of ``bones`` for frames ``a:b`` (zero on connected bones: Blender ignores them)."""
        bones = np.asarray(bones, dtype=np.int64)
        loc = self.values("location", a, b, bones)
        loc[:, self.connected[bones]] = 0.0
        return loc


def _bvh_rot_order(mode):
    """Channel order Blender's exporter writes for a rotation mode (``XYZ`` unless an Euler order)."""
    return mode if mode in _EULER_ORDERS else "XYZ"


def bvh_hierarchy(rig, connected, rotation_modes):
    """The joints of Blender's BVH export of an armature.

    Parameters
    ----------
    rig : RigDescription
    connected : ndarray of bool (B,)
    rotation_modes : sequence of str (B,)

    Returns
    -------
    dict
        ``names``, ``parents``, ``offsets`` (J, 3), ``channels``,
        ``end_sites`` (for :func:`..model.bvh.write_bvh`) and ``bones``
        (bone index of each joint, -1 for the ``__0`` root that Blender adds
        above several root bones).
    """
    n = len(rig.names)
    parents = np.asarray(rig.parents)
    head = np.asarray(rig.head, dtype=np.float64)
    tail = np.asarray(rig.tail, dtype=np.float64)
    roots = [b for b in range(n) if parents[b] < 0]
    names, jparents, offsets, channels, bones = [], [], [], [], []
    extra = 0
    if len(roots) != 1:  # Blender writes a dummy root without channels
        taken = set(rig.names)
        key = 0
        while "__%d" % key in taken:
            key += 1
        names.append("__%d" % key)
        jparents.append(-1)
        offsets.append(np.zeros(3))
        channels.append(())
        bones.append(-1)
        extra = 1
    for b in range(n):
        p = int(parents[b])
        names.append(rig.names[b])
        jparents.append(p + extra if p >= 0 else (0 if extra else -1))
        offsets.append(head[b] - head[p] if p >= 0 else head[b])
        order = _bvh_rot_order(rotation_modes[b])
        rot = tuple(c + "rotation" for c in order)
        channels.append(rot if (connected[b] and p >= 0) else ("Xposition", "Yposition", "Zposition") + rot)
        bones.append(b)
    has_child = np.zeros(n, dtype=bool)
    has_child[parents[parents >= 0]] = True
    end_sites = [(b + extra, tail[b] - head[b]) for b in range(n) if not has_child[b]]
    return {"names": names, "parents": jparents, "offsets": np.array(offsets), "channels": channels,
            "end_sites": end_sites, "bones": bones}


def _local_channels(pose, a, b, bones, Q, rest_offset):
    """BVH rotation (matrices) and location of ``bones`` for frames ``a:b``.

    With full inheritance a bone's pose matrix is ``P_j = P_p R_p^-1 R_j
    B_j`` (rest matrices ``R``, basis ``B`` = location, rotation), so the
    matrix Blender's exporter writes, ``R_p P_p^-1 P_j R_j^-1``, is
    ``R_j B_j R_j^-1``: the basis seen in the armature's axes. Its rotation
    is the basis rotation seen through the rest rotation, ``Q_j B_j
    Q_j^T``, its location (the joint's offset plus the translation)
    ``head_j - head_p + Q_j location_j``. No forward kinematics and nothing
    from other bones; one 2-D product per bone (a bone's frames at once).
    """
    from ..model.rotations_np import change_basis

    m = pose.matrices(a, b, bones)
    loc = pose.locations(a, b, bones)
    for i, bone in enumerate(bones):
        m[:, i] = change_basis(Q[bone], m[:, i])
        loc[:, i] = loc[:, i] @ Q[bone].T
    loc += rest_offset[bones]
    return m, loc


def bvh_motion_chunks(pose: PoseChannels, hierarchy, chunk_frames=BVH_CHUNK_FRAMES):
    """Channel values (t, C) of :func:`bvh_hierarchy`'s joints, chunk by chunk.

    Each bone's channels depend on its own pose values only (see
    :func:`_local_channels`), so bones without keys are computed once and
    only the keyed ones per frame. Eulers are in each bone's order and
    continuous from frame to frame (as Blender's exporter keeps them),
    across chunks too.

    Yields
    ------
    ndarray, shape (t, C), float64
    """
    from ..retarget.channels import continue_eulers

    rig = pose.rig
    n = len(rig.names)
    parents = np.asarray(rig.parents)
    head = np.asarray(rig.head, dtype=np.float64)
    rest_offset = head - np.where(parents[:, None] >= 0, head[np.maximum(parents, 0)], 0.0)
    Q = rig.rest_rotation()
    orders = [_bvh_rot_order(m) for m in pose.rotation_modes]
    axis_of = np.array([["XYZ".index(c) for c in o] for o in orders]).reshape(n, 3)  # angle by axis -> channel
    moving = pose.moving()
    # column sources: per joint, (bone, component) into src (t, B, 6): location xyz, then angles in channel order
    cols_b, cols_c = [], []
    for j, b in enumerate(hierarchy["bones"]):
        if b < 0:
            continue
        if len(hierarchy["channels"][j]) == 6:
            cols_b += [b, b, b]
            cols_c += [0, 1, 2]
        cols_b += [b, b, b]
        cols_c += [3, 4, 5]
    cols_b, cols_c = np.array(cols_b, dtype=np.int64), np.array(cols_c, dtype=np.int64)

    def eulers(m, bones, state=None):
        """Degrees in channel order, (t, len(bones), 3), of matrices ``m`` (t, len(bones), 3, 3); ``state``
        carries continuity between chunks."""
        out = np.empty(m.shape[:-2] + (3,))
        for o in sorted(set(orders[b] for b in bones)):
            k = np.flatnonzero([orders[b] == o for b in bones])
            prev = (None, None) if state is None else state.get(o, (None, None))
            # Blender's Euler order is the channel order reversed
            e = continue_eulers(m[:, k], o[::-1], *prev, matrices=True)
            if state is not None:
                state[o] = (m[-1, k], e[-1])
            out[:, k] = np.rad2deg(np.take_along_axis(e, axis_of[bones[k]][None], axis=-1))
        return out

    fixed = np.flatnonzero(~moving)
    keyed = np.flatnonzero(moving)
    template = np.zeros((n, 6))
    if fixed.size:
        m, loc = _local_channels(pose, 0, 1, fixed, Q, rest_offset)
        template[fixed, :3] = loc[0]
        template[fixed, 3:] = eulers(m, fixed)[0]
    state = {}
    step = max(int(chunk_frames), 1)
    for a in range(0, pose.num_frames, step):
        b = min(a + step, pose.num_frames)
        src = np.empty((b - a, n, 6))
        src[:] = template
        if keyed.size:
            m, loc = _local_channels(pose, a, b, keyed, Q, rest_offset)
            src[:, keyed, :3] = loc
            src[:, keyed, 3:] = eulers(m, keyed, state)
        yield src[:, cols_b, cols_c]


def write_armature_bvh(path, pose: PoseChannels, chunk_frames=BVH_CHUNK_FRAMES):
    """Write Blender's BVH export of ``pose`` (see the module docstring) with numpy.

    Parameters
    ----------
    path : str
    pose : PoseChannels
    chunk_frames : int
        Frames composed at a time (memory is bounded by this, not by the clip length).
    """
    from ..model.bvh import write_bvh

    h = bvh_hierarchy(pose.rig, pose.connected, pose.rotation_modes)
    write_bvh(path, h["names"], h["parents"], h["offsets"], h["channels"], bvh_motion_chunks(pose, h, chunk_frames),
              frame_time=pose.frame_time, end_sites=h["end_sites"], num_frames=pose.num_frames)


def numpy_bvh_unsupported(obj):
    """Why the numpy BVH writer would not match Blender's evaluation of ``obj`` (``None``: it would)."""
    arm = obj.data
    if getattr(arm, "pose_position", "POSE") != "POSE":
        return "the armature shows its rest position"
    for pb in obj.pose.bones:
        if any(not c.mute and c.influence > 0 for c in pb.constraints):
            return "bone {!r} has constraints".format(pb.name)
    for bone in arm.bones:
        if (bone.inherit_scale != "FULL" or not bone.use_inherit_rotation or not bone.use_local_location
                or bone.use_relative_parent):
            return "bone {!r} does not inherit its parent's full transform".format(bone.name)
    ad = obj.animation_data
    if ad is not None:
        if len(ad.drivers):
            return "the armature has drivers"
        if any(not t.mute and len(t.strips) for t in ad.nla_tracks) or getattr(ad, "use_tweak_mode", False):
            return "the armature has NLA strips"
        if ad.action is not None and (ad.action_blend_type != "REPLACE" or ad.action_influence < 1.0):
            return "the action is blended"
    return None


def _bone_paths(obj):
    """``'pose.bones["name"]'`` -> bone index."""
    import bpy

    return {'pose.bones["{}"]'.format(bpy.utils.escape_identifier(b.name)): i for i, b in enumerate(obj.data.bones)}


def read_pose_channels(obj, frame_start, frame_end):
    """Read an armature's rest skeleton and pose channels over ``frame_start..frame_end`` (inclusive).

    Rest arrays and current pose values are read with ``foreach_get``, the
    keyed channels from the active action's fcurves (keyframe coordinates
    with ``foreach_get``; a value per frame where a key sits on every
    exported frame, or a single key).

    Returns
    -------
    PoseChannels or str
        The channels, or why they cannot stand for Blender's evaluation (the
        caller then uses Blender's exporter).
    """
    import bpy

    from .actions import action_fcurves
    from .rig import rig_description

    reason = numpy_bvh_unsupported(obj)
    if reason is not None:
        return reason
    rig = rig_description(obj)
    n = len(rig.names)
    bones = obj.data.bones
    pbones = obj.pose.bones
    pose_index = {pb.name: i for i, pb in enumerate(pbones)}
    perm = np.array([pose_index[name] for name in rig.names], dtype=np.int64)  # pose order -> bone order
    connected = np.zeros(n, dtype=bool)
    bones.foreach_get("use_connect", connected)
    connected &= np.asarray(rig.parents) >= 0
    static = {}
    for prop in _TRANSFORMS:
        buf = np.empty(n * _SIZES[prop], dtype=np.float32)
        pbones.foreach_get(prop, buf)
        static[prop] = buf.reshape(n, _SIZES[prop])[perm].astype(np.float64)
    if not np.allclose(static["scale"], 1.0, atol=1e-6):
        return "pose bones are scaled"
    modes = [pbones[name].rotation_mode for name in rig.names]
    frames = np.arange(int(frame_start), int(frame_end) + 1, dtype=np.float64)
    keyed = {}
    ad = obj.animation_data
    action = ad.action if ad is not None else None
    if action is not None:
        paths = _bone_paths(obj)
        for fc in action_fcurves(action, obj):
            head, _, prop = fc.data_path.rpartition(".")
            b = paths.get(head)
            if b is None or prop not in _TRANSFORMS or fc.mute:
                continue  # not a pose-bone transform (or muted: Blender ignores it too)
            if len(fc.modifiers):
                return "fcurve {}[{}] has modifiers".format(fc.data_path, fc.array_index)
            k = len(fc.keyframe_points)
            if k == 0:
                continue
            co = np.empty(2 * k, dtype=np.float32)
            fc.keyframe_points.foreach_get("co", co)
            x, y = co[0::2].astype(np.float64), co[1::2]
            if k == 1:
                values = np.full(len(frames), y[0], dtype=np.float32)
            else:
                at = np.clip(np.searchsorted(x, frames - 1e-3), 0, k - 1)
                if not (np.abs(x[at] - frames) < 1e-3).all():
                    return "fcurve {}[{}] has no key on some exported frames".format(fc.data_path, fc.array_index)
                values = y[at]
            if prop == "scale":
                if not np.allclose(values, 1.0, atol=1e-6):
                    return "pose bones are scaled"
                continue
            keyed[(prop, b, int(fc.array_index))] = values
    scene = bpy.context.scene
    return PoseChannels(rig=rig, connected=connected, rotation_modes=modes, static=static, keyed=keyed,
                        num_frames=len(frames), frame_time=1.0 / (scene.render.fps / scene.render.fps_base))
