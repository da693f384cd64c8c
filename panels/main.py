"""Sub-panels of the Neural IK sidebar tab: Target, Mapping, Input, Solve & Bake, Device."""

import json
import textwrap

import bpy

from .. import preferences
from ..blender_io import preload
from ..properties import input_frames, target_armature
from ..model.skeleton import JOINTS
from ..operators.contact_sheet import baked_clip
from ..operators.wording import ui_text

_PARENT = "VIEW3D_PT_neural_ik"


def _settings(context):
    return getattr(context.scene, "neural_ik", None)


def mapping_status(obj):
    """(mapped count, unmapped joint names, stored?) of an armature's mapping."""
    items = getattr(obj, "neural_ik_mapping", None)
    if items is None or len(items) == 0:
        return 0, list(JOINTS), False
    mapped = {it.joint for it in items if it.bone and it.bone in obj.data.bones}
    return len(mapped), [j for j in JOINTS if j not in mapped], True


_ready_cache = {}


def bake_readiness(obj):
    """Whether a bake can run on ``obj``'s mapping: ``(ok, problem)``.

    The same check the bake makes (:func:`..blender_io.mapping_store.resolve_mapping`:
    the stored mapping, or the automatic one when none is stored), cached per
    armature, bone count and mapping so a redraw costs nothing.
    """
    items = getattr(obj, "neural_ik_mapping", None) or ()
    key = (obj.name, obj.data.name, len(obj.data.bones), tuple((it.joint, it.bone) for it in items))
    found = _ready_cache.get(key)
    if found is not None:
        return found
    from ..blender_io import bake
    from ..blender_io.rig import rig_description

    try:
        bake.resolve_mapping(obj, rig_description(obj))
        found = (True, "")
    except Exception as ex:  # BakeError, or a rig that cannot be read
        found = (False, ui_text(ex))
    if len(_ready_cache) > 64:
        _ready_cache.clear()
    _ready_cache[key] = found
    return found


def wrapped_labels(layout, text, context=None, max_lines=6):
    """Labels of ``text`` broken at words to the width of the region (not every N characters)."""
    region = getattr(context, "region", None) if context is not None else None
    width = getattr(region, "width", 0) or 300
    scale = (context.preferences.system.ui_scale if context is not None else 1.0) or 1.0
    chars = max(20, int(width / (7.0 * scale)) - 4)
    lines = textwrap.wrap(text, chars) or [""]
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [textwrap.shorten(" ".join(lines[max_lines - 1:]), chars, placeholder=" ...")]
    col = layout.column(align=True)
    col.scale_y = 0.8
    for line in lines:
        col.label(text=line)


def draw_bake_figures(layout, settings, context=None):
    """The result of the last solve or bake, under the Bake button (the lead's part of the panel).

    ``settings.status`` holds only the figures that apply (no "nan"); this
    draws it wrapped at words.
    """
    if settings.status:
        wrapped_labels(layout.box(), settings.status, context)


class _Sub:
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "Neural IK"
    bl_parent_id = _PARENT

    @classmethod
    def poll(cls, context):
        return _settings(context) is not None


class VIEW3D_PT_neural_ik_target(_Sub, bpy.types.Panel):
    """Target armature and the state of its bone mapping."""

    bl_idname = "VIEW3D_PT_neural_ik_target"
    bl_label = "Target"

    def draw(self, context):
        layout = self.layout
        s = _settings(context)
        layout.prop(s, "target")
        obj = target_armature(context)
        if obj is None:
            layout.label(text="Pick a humanoid armature", icon='INFO')
            return
        n, unmapped, stored = mapping_status(obj)
        ready, problem = bake_readiness(obj)  # the tick means: a bake can run
        if stored:
            layout.label(text=f"{n} of {len(JOINTS)} joints mapped", icon='CHECKMARK' if ready else 'ERROR')
            if unmapped:
                wrapped_labels(layout, "Unmapped: " + ", ".join(unmapped), context, max_lines=2)
        else:
            layout.label(text="Not mapped yet (the bake maps automatically)", icon='INFO' if ready else 'ERROR')
        if not ready:
            wrapped_labels(layout, "Cannot bake: " + problem, context, max_lines=4)
        row = layout.row(align=True)
        row.operator("neural_ik.auto_map", icon='BONE_DATA')
        row.operator("neural_ik.clear_mapping", text="", icon='X')
        row = layout.row(align=True)
        row.menu("NEURAL_IK_MT_mapping_presets", text="Presets", icon='PRESET')
        row.operator("neural_ik.save_mapping_preset", text="Save Preset", icon='EXPORT')


class VIEW3D_PT_neural_ik_mapping(_Sub, bpy.types.Panel):
    """One row per canonical joint: the bone it drives and the mapping confidence."""

    bl_idname = "VIEW3D_PT_neural_ik_mapping"
    bl_label = "Mapping"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        obj = target_armature(context)
        if obj is None or len(obj.neural_ik_mapping) == 0:
            layout.label(text="Run Auto-Map to edit the mapping", icon='INFO')
            return
        col = layout.column(align=True)
        for item in obj.neural_ik_mapping:
            row = col.row(align=True)
            split = row.split(factor=0.32, align=True)
            split.label(text=item.joint)
            split.prop_search(item, "bone", obj.data, "bones", text="")
            if not item.bone:
                icon = 'BLANK1'
            elif item.bone not in obj.data.bones:
                icon = 'ERROR'
            elif item.confidence >= 0.85:
                icon = 'CHECKMARK'
            elif item.confidence >= 0.5:
                icon = 'QUESTION'
            else:
                icon = 'ERROR'
            row.label(text="", icon=icon)


class VIEW3D_PT_neural_ik_input(_Sub, bpy.types.Panel):
    """Keypoint object or effector empties."""

    bl_idname = "VIEW3D_PT_neural_ik_input"
    bl_label = "Input"

    def draw(self, context):
        layout = self.layout
        s = _settings(context)
        layout.row().prop(s, "source", expand=True)
        if s.source == 'KEYPOINTS':
            layout.prop(s, "keypoint_object")
            root = s.keypoint_object
            if root is not None:
                lay = str(root.get('layout', '?'))
                lay = json.loads(lay).get("name", "mapping") if lay.startswith("{") else lay  # Layout.to_json
                layout.label(text=f"{lay}: {root.get('frame_count', 0)} frames "
                                  f"at {root.get('fps', 0):g} fps")
            layout.operator("neural_ik.import_keypoints", text="Import Keypoints...", icon='IMPORT')
            layout.operator("neural_ik.armature_input", icon='ARMATURE_DATA')
        else:
            layout.prop(s, "effector_root")
            layout.operator("neural_ik.add_effectors", icon='EMPTY_AXIS')
            layout.prop(s, "effector_rotations")
            layout.operator("neural_ik.live_solve", text="Stop Live Solve" if s.live_solve else "Live Solve",
                            icon='PAUSE' if s.live_solve else 'PLAY', depress=s.live_solve)


class VIEW3D_PT_neural_ik_bake(_Sub, bpy.types.Panel):
    """Solve the current frame or bake a range into a new action."""

    bl_idname = "VIEW3D_PT_neural_ik_bake"
    bl_label = "Solve & Bake"

    def draw(self, context):
        layout = self.layout
        s = _settings(context)
        if preload.loading():
            layout.label(text="Loading network...", icon='TIME')
        row = layout.row(align=True)
        row.operator("neural_ik.solve_frame", icon='POSE_HLT')
        obj = target_armature(context)
        if obj is not None and obj.animation_data is not None and obj.animation_data.action is not None:
            row.operator("neural_ik.key_pose", icon='KEY_HLT')  # the action replaces an unkeyed pose
        layout.use_property_split = True
        layout.use_property_decorate = False
        col = layout.column()
        col.prop(s, "mode")
        col.prop(s, "refine")
        col = layout.column(heading="Range")
        col.prop(s, "use_clip_range")
        sub = col.column(align=True)
        sub.enabled = not s.use_clip_range
        sub.prop(s, "frame_from")
        sub.prop(s, "frame_to")
        span = input_frames(s)
        if span is not None and s.use_clip_range:  # the keys land on the input's frames (its Start Frame)
            col.label(text=f"Frames {span[0]}-{span[1]}")
        elif span is not None and not (span[0] <= s.frame_from <= s.frame_to <= span[1]):
            col.label(text=f"Outside the input's frames {span[0]}-{span[1]}", icon='ERROR')
        col = layout.column()
        col.prop(s, "smooth")
        sub = col.column()
        sub.enabled = s.smooth != 'none'
        sub.prop(s, "smooth_strength")
        sub.prop(s, "smooth_target")
        col = layout.column()
        col.prop(s, "rotation_mode")
        col.prop(s, "in_place")
        col.prop(s, "ground")
        col.prop(s, "foot_lock")
        col.prop(s, "auto_scale")
        sub = col.column()
        sub.enabled = not s.auto_scale
        sub.prop(s, "scale")
        col.prop(s, "bake_into")
        layout.use_property_split = False
        layout.operator("neural_ik.bake", icon='REC')
        draw_bake_figures(layout, s, context)
        if obj is not None and baked_clip(obj) is not None:   # (the CLI's --preview, after a bake)
            layout.operator("neural_ik.render_contact_sheet", text="Render Contact Sheet...", icon='RENDER_STILL')


class VIEW3D_PT_neural_ik_device(_Sub, bpy.types.Panel):
    """Compute device preference and what is in use."""

    bl_idname = "VIEW3D_PT_neural_ik_device"
    bl_label = "Device"
    bl_options = {'DEFAULT_CLOSED'}

    @classmethod
    def poll(cls, context):
        return True

    def draw(self, context):
        layout = self.layout
        prefs = preferences.get_preferences(context)
        if prefs is not None:
            layout.prop(prefs, "device")
        preferences.draw_dependencies(layout, preferences.device_choice(context))


classes = [
    VIEW3D_PT_neural_ik_target,
    VIEW3D_PT_neural_ik_mapping,
    VIEW3D_PT_neural_ik_input,
    VIEW3D_PT_neural_ik_bake,
    VIEW3D_PT_neural_ik_device,
]
