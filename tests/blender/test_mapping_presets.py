"""Built-in mapping presets: each one applied from the menu's operator to an armature with its bone names,
then a bake onto it (a BVH source: its own rotations start the solve, no network needed)."""

import importlib
import sys
from pathlib import Path

import bpy
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import rigs  # noqa: E402
from test_rigify_target import generated_rig  # noqa: E402

#: Preset -> how to make an armature with its names.
ARMATURES = {
    "MIXAMO": lambda: rigs.build_blender_armature(rigs.humanoid("mixamo"), name="mixamo"),
    "UE_MANNEQUIN": lambda: rigs.build_blender_armature(rigs.humanoid("unreal", pose="A"), name="manny"),
    "CHARACTER_CREATOR": lambda: rigs.build_blender_armature(rigs.humanoid("cc"), name="cc"),
    "VROID": lambda: rigs.build_blender_armature(rigs.humanoid("vrm"), name="vroid"),
    "RIGIFY_METARIG": lambda: _metarig(),
    "RIGIFY_CONTROLS": lambda: generated_rig(),
    "RIGIFY_DEFORM": lambda: generated_rig(),
}


def _metarig():
    import addon_utils
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    return bpy.context.active_object


def _stored(obj):
    return {it.joint: it.bone for it in obj.neural_ik_mapping if it.bone}


def test_every_builtin_preset_is_tested(ext):
    presets = importlib.import_module(ext.__name__ + ".retarget.presets")
    assert set(presets.BUILTIN) == set(ARMATURES)
    menu = bpy.types.NEURAL_IK_MT_mapping_presets
    assert menu.bl_label == "Mapping Presets"


@pytest.mark.parametrize("preset", sorted(ARMATURES))
def test_builtin_preset_maps_and_bakes(ext, preset, tmp_path):
    from source_fixtures import humanoid_bvh
    presets = importlib.import_module(ext.__name__ + ".retarget.presets")
    src, _world = humanoid_bvh(tmp_path / "walk.bvh", scheme="mixamo", frames=12)
    obj = ARMATURES[preset]()
    scene = bpy.context.scene
    scene.neural_ik.target = obj
    assert bpy.ops.neural_ik.apply_mapping_preset(preset=preset) == {'FINISHED'}
    entries = presets.builtin_entries(preset)
    assert _stored(obj) == {j: b for j, b in entries.items() if b in obj.data.bones}
    assert len(_stored(obj)) >= 21      # (a preset may name a spine bone a rig lacks)
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(src)) == {'FINISHED'}
    scene.neural_ik.target = obj
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}, scene.neural_ik.status
    action = obj.animation_data.action
    actions = importlib.import_module(ext.__name__ + ".blender_io.actions")
    paths = {fc.data_path for fc in actions.action_fcurves(action, obj)}
    for joint in ("pelvis", "hand_l", "calf_r", "head"):
        assert any(p.startswith(f'pose.bones["{entries[joint]}"].rotation') for p in paths), joint
    assert f'pose.bones["{entries["pelvis"]}"].location' in paths


def test_a_preset_that_does_not_fit_says_which_bones_are_missing(ext):
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="mixamo")
    bpy.context.scene.neural_ik.target = obj
    with pytest.raises(RuntimeError, match="no UE Mannequin rig: it has no bone 'pelvis'"):
        bpy.ops.neural_ik.apply_mapping_preset(preset="UE_MANNEQUIN")
    assert len(obj.neural_ik_mapping) == 0
