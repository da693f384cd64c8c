"""Keep a solved pose that an active action would replace on the next frame change.

Solve Frame poses the bones without keys. When the armature plays an action
that keys those bones, Blender re-evaluates the action on the next frame
change and the pose is gone. :func:`keep_solved_pose` (called by Solve Frame
and Live Solve's caller after posing) does what an animator expects:

- with Auto Keying on, the posed bones are keyed into the active action at the
  current frame (as a manual transform would be);
- otherwise the pose is left as it is and a warning says that the action will
  replace it and how to keep it: **Key Pose** (``neural_ik.key_pose``) or
  Auto Keying.

Without an active action (or when it keys none of the posed bones) nothing
can overwrite the pose and nothing happens.
"""

import re

import bpy

from ..blender_io.actions import action_fcurves
from ..properties import target_armature

_BONE_PATH = re.compile(r'^pose\.bones\["((?:[^"\\]|\\.)*)"\]\.')

_ROTATION_PATH = {"QUATERNION": "rotation_quaternion", "AXIS_ANGLE": "rotation_axis_angle"}


def animated_bones(obj):
    """Names of the pose bones the active action of ``obj`` keys (empty without an action)."""
    ad = obj.animation_data
    action = getattr(ad, "action", None) if ad is not None else None
    if action is None:
        return set()
    names = set()
    for fc in action_fcurves(action, obj):
        match = _BONE_PATH.match(fc.data_path)
        if match:
            names.add(match.group(1).replace('\\"', '"'))
    return names


def posed_bones(obj):
    """Pose bones off their rest pose (rotation or location), in bone order."""
    out = []
    for pb in obj.pose.bones:
        if pb.rotation_mode == 'QUATERNION':
            turned = tuple(pb.rotation_quaternion) != (1.0, 0.0, 0.0, 0.0)
        elif pb.rotation_mode == 'AXIS_ANGLE':
            turned = pb.rotation_axis_angle[0] != 0.0
        else:
            turned = tuple(pb.rotation_euler) != (0.0, 0.0, 0.0)
        if turned or tuple(pb.location) != (0.0, 0.0, 0.0):
            out.append(pb)
    return out


def key_pose(obj, frame, bones=None):
    """Key rotation (each bone's own mode) and location of ``bones`` (default: the posed and the animated ones).

    Returns
    -------
    int
        Number of bones keyed.
    """
    names = animated_bones(obj) | {pb.name for pb in posed_bones(obj)} if bones is None else set(bones)
    count = 0
    for pb in obj.pose.bones:
        if pb.name not in names:
            continue
        group = pb.name
        rotation = _ROTATION_PATH.get(pb.rotation_mode, "rotation_euler")
        pb.keyframe_insert(rotation, frame=frame, group=group)
        pb.keyframe_insert("location", frame=frame, group=group)
        count += 1
    return count


def keep_solved_pose(context, obj, report=None):
    """After a solve posed ``obj``: key the pose (Auto Keying on) or say the action will replace it.

    ``report``: an operator's ``self.report``, called with the message.

    Returns
    -------
    tuple (str, str) or None
        ``(level, message)`` to report (``'INFO'`` when keyed, ``'WARNING'``
        when the action will replace the pose), ``None`` when no action keys
        the posed bones.
    """
    animated = animated_bones(obj)
    if not animated:
        return None
    overwritten = [pb.name for pb in posed_bones(obj) if pb.name in animated]
    if not overwritten:
        return None
    action = obj.animation_data.action
    scene = context.scene
    if scene.tool_settings.use_keyframe_insert_auto:
        n = key_pose(obj, scene.frame_current)
        result = 'INFO', f"Auto Keying: keyed {n} bones into {action.name!r} at frame {scene.frame_current}"
    else:
        result = 'WARNING', (f"The active action {action.name!r} keys {len(overwritten)} of the solved bones and "
                             f"will replace this pose on the next frame change: use Key Pose (or turn on Auto "
                             f"Keying) to keep it")
    if report is not None:
        report({result[0]}, result[1])
    return result


class NEURAL_IK_OT_key_pose(bpy.types.Operator):
    """Key the target armature's solved pose into its active action at the current frame"""

    bl_idname = "neural_ik.key_pose"
    bl_label = "Key Pose"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = target_armature(context)
        return obj is not None and obj.library is None

    def execute(self, context):
        obj = target_armature(context)
        frame = context.scene.frame_current
        n = key_pose(obj, frame)
        if n == 0:
            self.report({'WARNING'}, f"{obj.name!r} is at its rest pose: nothing to key")
            return {'CANCELLED'}
        action = obj.animation_data.action if obj.animation_data else None
        self.report({'INFO'}, f"Keyed {n} bones of {obj.name!r} at frame {frame}"
                              + (f" into {action.name!r}" if action is not None else ""))
        return {'FINISHED'}


classes = [NEURAL_IK_OT_key_pose]
