"""Bone-mapping operators: auto-map, clear, the built-in presets, save and load JSON presets.

The mapping lives on the armature object (``Object.neural_ik_mapping``, see
:mod:`..properties`); the bake reads it through
:func:`..blender_io.mapping_store.stored_mapping`.
"""

import bpy
from bpy.props import EnumProperty, StringProperty
from bpy_extras.io_utils import ExportHelper, ImportHelper

from ..blender_io import bake as bake_mod
from ..blender_io.rig import rig_description
from ..properties import target_armature


def _mapped_count(mapping):
    from ..model.skeleton import JOINTS
    return sum(1 for j in JOINTS if j in mapping.entries)


class _NeedsArmature:
    @classmethod
    def poll(cls, context):
        return target_armature(context) is not None


class NEURAL_IK_OT_auto_map(_NeedsArmature, bpy.types.Operator):
    """Find the bone of every canonical joint from the hierarchy and bone names"""

    bl_idname = "neural_ik.auto_map"
    bl_label = "Auto-Map"
    bl_options = {'REGISTER', 'UNDO'}

    def execute(self, context):
        from ..retarget.mapping import humanoid_check
        from ..retarget.rigify import map_target

        obj = target_armature(context)
        mapping = map_target(rig_description(obj))
        bake_mod.store_mapping(obj, mapping)
        missing = humanoid_check(mapping)
        n = _mapped_count(mapping)
        if missing:
            self.report({'WARNING'}, f"{n} of 22 joints mapped; not usable yet: {', '.join(missing)}")
        else:
            self.report({'INFO'}, f"{n} of 22 joints mapped on {obj.name!r}")
        return {'FINISHED'}


class NEURAL_IK_OT_clear_mapping(_NeedsArmature, bpy.types.Operator):
    """Forget the stored bone mapping of the target armature (the bake then maps automatically)"""

    bl_idname = "neural_ik.clear_mapping"
    bl_label = "Clear Mapping"
    bl_options = {'REGISTER', 'UNDO'}

    def execute(self, context):
        target_armature(context).neural_ik_mapping.clear()
        return {'FINISHED'}


def _builtin_items():
    from ..retarget.presets import BUILTIN
    return [(key, label, description) for key, (label, description, _table) in BUILTIN.items()]


class NEURAL_IK_OT_apply_mapping_preset(_NeedsArmature, bpy.types.Operator):
    """Map the target armature's bones by a built-in naming scheme"""

    bl_idname = "neural_ik.apply_mapping_preset"
    bl_label = "Apply Mapping Preset"
    bl_options = {'REGISTER', 'UNDO'}

    preset: EnumProperty(name="Preset", items=_builtin_items(), description="The naming scheme of the rig")

    @classmethod
    def description(cls, context, properties):
        from ..retarget.presets import BUILTIN
        return BUILTIN[properties.preset][1]

    def execute(self, context):
        from ..retarget.mapping import humanoid_check
        from ..retarget.presets import BUILTIN, builtin_mapping
        from ..retarget.rigify import skeleton_for

        obj = target_armature(context)
        rig = rig_description(obj)
        label = BUILTIN[self.preset][0]
        mapping, missing = builtin_mapping(self.preset, rig)
        if missing:
            self.report({'ERROR'}, f"{obj.name!r} is no {label} rig: it has no bone "
                                   + ", ".join(repr(b) for b in missing[:4]) + (" ..." if len(missing) > 4 else ""))
            return {'CANCELLED'}
        errors = mapping.validate(skeleton_for(rig, mapping)) + humanoid_check(mapping)
        if errors:
            self.report({'ERROR'}, f"the {label} preset does not fit {obj.name!r}: " + "; ".join(errors[:3]))
            return {'CANCELLED'}
        bake_mod.store_mapping(obj, mapping)
        self.report({'INFO'}, f"{_mapped_count(mapping)} of 22 joints mapped by the {label} preset")
        return {'FINISHED'}


class NEURAL_IK_MT_mapping_presets(bpy.types.Menu):
    """The built-in mapping presets, then the user's own JSON presets"""

    bl_idname = "NEURAL_IK_MT_mapping_presets"
    bl_label = "Mapping Presets"

    def draw(self, context):
        layout = self.layout
        for key, label, _description in _builtin_items():
            layout.operator("neural_ik.apply_mapping_preset", text=label).preset = key
        layout.separator()
        layout.operator("neural_ik.load_mapping_preset", text="Load Preset...", icon='IMPORT')
        layout.operator("neural_ik.save_mapping_preset", text="Save Preset...", icon='EXPORT')


class NEURAL_IK_OT_save_mapping_preset(_NeedsArmature, bpy.types.Operator, ExportHelper):
    """Save the target armature's bone mapping as a JSON preset"""

    bl_idname = "neural_ik.save_mapping_preset"
    bl_label = "Save Mapping Preset"
    bl_options = {'REGISTER'}

    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={'HIDDEN'})

    def execute(self, context):
        from ..retarget.presets import save_preset

        obj = target_armature(context)
        rig = rig_description(obj)
        mapping = bake_mod.stored_mapping(obj)
        if mapping is None:
            mapping = bake_mod.auto_mapping(rig)
        try:
            save_preset(self.filepath, mapping, rig, name=obj.name)
        except OSError as ex:
            self.report({'ERROR'}, f"cannot write {self.filepath}: {ex}")
            return {'CANCELLED'}
        self.report({'INFO'}, f"Saved the mapping of {obj.name!r} to {self.filepath}")
        return {'FINISHED'}


class NEURAL_IK_OT_load_mapping_preset(_NeedsArmature, bpy.types.Operator, ImportHelper):
    """Load a JSON bone-mapping preset onto the target armature"""

    bl_idname = "neural_ik.load_mapping_preset"
    bl_label = "Load Mapping Preset"
    bl_options = {'REGISTER', 'UNDO'}

    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={'HIDDEN'})

    def execute(self, context):
        from ..retarget.presets import load_preset

        obj = target_armature(context)
        rig = rig_description(obj)
        try:
            mapping, warnings = load_preset(self.filepath, rig)
        except (OSError, ValueError) as ex:   # json errors are ValueErrors
            self.report({'ERROR'}, f"cannot load preset {self.filepath}: {ex}")
            return {'CANCELLED'}
        from ..retarget.rigify import skeleton_for

        errors = mapping.validate(skeleton_for(rig, mapping))
        if errors:
            self.report({'ERROR'}, f"preset does not fit {obj.name!r}: " + "; ".join(errors[:3]))
            return {'CANCELLED'}
        bake_mod.store_mapping(obj, mapping)
        for w in warnings:
            self.report({'WARNING'}, w)
        self.report({'INFO'}, f"{_mapped_count(mapping)} of 22 joints mapped from the preset")
        return {'FINISHED'}


classes = [
    NEURAL_IK_OT_auto_map,
    NEURAL_IK_OT_clear_mapping,
    NEURAL_IK_OT_apply_mapping_preset,
    NEURAL_IK_MT_mapping_presets,
    NEURAL_IK_OT_save_mapping_preset,
    NEURAL_IK_OT_load_mapping_preset,
]
