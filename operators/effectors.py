"""Effector empties for sparse solving, and Live Solve.

- ``neural_ik.add_effectors`` adds one empty per sparse effector (pelvis,
  head, hands, feet: :data:`..model.skeleton.SPARSE_EFFECTORS`) at the
  target armature's current joint positions, under a parent empty, and makes
  them the scene's input. The animator moves (and keys) these empties.
- ``neural_ik.live_solve`` is a modal toggle: a ~30 Hz timer compares the
  effectors' world matrices with the last solved ones and re-solves the
  current frame when one moved, so the body follows the dragged hands and
  feet. Esc, running the operator again or unticking Live Solve stops it.
"""

import bpy
import numpy as np

from .. import preferences
from ..blender_io import bake as bake_mod
from ..blender_io import pose_solve
from ..blender_io import preload
from ..blender_io.rig import rig_description
from ..model.skeleton import SPARSE_EFFECTORS
from .mapping import target_armature
from .wording import ui_text
from .solve import (EFFECTOR_ROOT_TAG, EFFECTOR_TAG, _options, _pose_summary, effector_keypoints, effector_objects,
                    effector_rotation_targets)

#: Timer interval of Live Solve (seconds).
LIVE_INTERVAL = 1.0 / 30.0
_live = {"running": False}


def _shape(joint):
    return {"pelvis": 'CUBE', "head": 'SPHERE'}.get(joint, 'SPHERE' if joint.startswith("hand") else 'CONE')


class NEURAL_IK_OT_add_effectors(bpy.types.Operator):
    """Add hand, foot, head and pelvis empties at the armature's current pose for sparse solving"""

    bl_idname = "neural_ik.add_effectors"
    bl_label = "Add Effectors"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        return target_armature(context) is not None

    def execute(self, context):
        obj = target_armature(context)
        try:
            rig = rig_description(obj)
            mapping = bake_mod.resolve_mapping(obj, rig)
        except bake_mod.BakeError as ex:
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        s = context.scene.neural_ik
        # the solves that follow need the network (from the event loop where there is one)
        preload.start(preferences.device_choice(context), defer=not bpy.app.background)
        kept = _animated_effectors(context, obj)
        if kept is not None:   # keyed empties are the animator's work: used again, never replaced
            s.effector_root, s.source, s.target = kept, 'EFFECTORS', obj
            self.report({'INFO'}, f"{obj.name!r} has keyed effectors {kept.name!r}: using them (delete them "
                                  "to add new ones at the current pose)")
            return {'FINISHED'}
        mw = obj.matrix_world
        size = _display_size(obj, mapping)
        _remove_effectors(context, obj)   # Add Effectors again: one set per armature, at its pose now
        root = bpy.data.objects.new(f"{obj.name} Effectors", None)
        root.empty_display_type = 'PLAIN_AXES'
        root.empty_display_size = 1.5 * size
        root[EFFECTOR_ROOT_TAG] = obj.name
        context.scene.collection.objects.link(root)
        for joint in SPARSE_EFFECTORS:
            pb = obj.pose.bones[mapping.entries[joint]]
            e = bpy.data.objects.new(f"{obj.name} {joint}", None)
            e.empty_display_type = _shape(joint)
            e.empty_display_size = size
            e[EFFECTOR_TAG] = joint
            e.parent = root
            e.location = mw @ pb.head
            e.rotation_mode = 'QUATERNION'   # the bone's turn in the world: turning the empty turns it
            e.rotation_quaternion = (mw @ pb.matrix).to_3x3().normalized().to_quaternion()
            e.show_in_front = True
            context.scene.collection.objects.link(e)
        s.effector_root = root
        s.source = 'EFFECTORS'
        s.target = obj
        self.report({'INFO'}, f"Added {len(SPARSE_EFFECTORS)} effectors for {obj.name!r}")
        return {'FINISHED'}


def _display_size(obj, mapping) -> float:
    """Empty size in world units: 6 % of the rig's height in the world (any object scale or bone units)."""
    mw = np.array(obj.matrix_world)
    heads = np.array([mw[:3, :3] @ np.array(obj.data.bones[b].head_local) + mw[:3, 3]
                      for b in mapping.entries.values() if b in obj.data.bones])
    height = float(np.ptp(heads[:, 2])) if len(heads) > 1 else 0.0
    return 0.06 * (height if height > 1e-6 else 1.0)


def _effector_sets(context, obj):
    return [o for o in context.scene.objects if o.get(EFFECTOR_ROOT_TAG) == obj.name]


def _animated_effectors(context, obj):
    """The effector set of ``obj`` whose root or empties carry keys, or None."""
    for root in _effector_sets(context, obj):
        if any(o.animation_data is not None and o.animation_data.action is not None
               for o in [root, *root.children]):
            return root
    return None


def _remove_effectors(context, obj):
    """Delete the effector sets made for ``obj`` (their empties too)."""
    for root in _effector_sets(context, obj):
        for child in list(root.children):
            bpy.data.objects.remove(child, do_unlink=True)
        bpy.data.objects.remove(root, do_unlink=True)


def _matrices(root):
    objs = effector_objects(root)
    return np.array([np.array(objs[k].matrix_world) for k in sorted(objs)]) if objs else np.zeros((0, 4, 4))


def live_tick(context) -> dict:
    """What Live Solve does on a timer tick once an empty moved: solve the pose, set it, say how close.

    Reads the empties and the settings, poses the target armature through
    :func:`..blender_io.pose_solve.solve_current_frame` and writes the status
    line. ``benchmarks/bench_live.py`` times this call.

    Raises
    ------
    BakeError
    """
    s = context.scene.neural_ik
    out = pose_solve.solve_current_frame(target_armature(context), effector_keypoints(s.effector_root), None,
                                       _options(context), rotations=effector_rotation_targets(context))
    s.status = "Live: " + _pose_summary(out)
    return out


class NEURAL_IK_OT_live_solve(bpy.types.Operator):
    """Re-solve the pose whenever an effector moves (Esc or run again to stop)"""

    bl_idname = "neural_ik.live_solve"
    bl_label = "Live Solve"
    bl_options = {'REGISTER'}

    _timer = None

    @classmethod
    def poll(cls, context):
        s = getattr(context.scene, "neural_ik", None)
        return s is not None and s.effector_root is not None and target_armature(context) is not None

    def invoke(self, context, event):
        s = context.scene.neural_ik
        if _live["running"]:
            s.live_solve = False     # the running instance stops at its next tick
            return {'FINISHED'}
        self._last = None
        self._errors = 0
        _live["running"] = True
        s.live_solve = True
        wm = context.window_manager
        self._timer = wm.event_timer_add(LIVE_INTERVAL, window=context.window)
        wm.modal_handler_add(self)
        self.report({'INFO'}, "Live Solve: move the effectors (Esc to stop)")
        return {'RUNNING_MODAL'}

    def execute(self, context):
        """One solve of the current effector pose (scripts and tests)."""
        return {'FINISHED'} if self._solve(context) else {'CANCELLED'}

    def _solve(self, context):
        try:
            live_tick(context)
        except bake_mod.BakeError as ex:
            self.report({'ERROR'}, ui_text(ex))
            return False
        return True

    def modal(self, context, event):
        s = context.scene.neural_ik
        if event.type == 'ESC' or not s.live_solve or s.effector_root is None:
            return self._stop(context)
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        m = _matrices(s.effector_root)
        if self._last is not None and self._last.shape == m.shape and np.allclose(m, self._last, atol=1e-6):
            return {'PASS_THROUGH'}
        self._last = m
        if not self._solve(context):
            return self._stop(context)
        return {'PASS_THROUGH'}

    def _stop(self, context):
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None
        _live["running"] = False
        context.scene.neural_ik.live_solve = False
        return {'CANCELLED'}

    def cancel(self, context):
        self._stop(context)


classes = [NEURAL_IK_OT_add_effectors, NEURAL_IK_OT_live_solve]


def unregister():
    _live["running"] = False
