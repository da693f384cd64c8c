"""Armature sources in Blender: an animated armature in the scene, an FBX file, and an armature whose
root bone became the object; each gives a source rig that ``pose_rig`` turns back into its joints."""

import importlib

import bpy
import numpy as np
import pytest

from source_fixtures import humanoid_bvh


@pytest.fixture(scope="module")
def mods(ext):
    def m(name):
        return importlib.import_module(ext.__name__ + "." + name)
    return dict(fbx=m("blender_io.armature_source"), solve=m("retarget.solve"), readers=m("readers"),
                mapping=m("retarget.mapping"))


def _import_bvh(path):
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=1.0, axis_up='Y', axis_forward='-Z')
    return next(o for o in bpy.context.scene.objects if o.type == 'ARMATURE')


def _check(mods, clip, atol=1e-4):
    src = clip.source_rig
    _, heads = mods["solve"].pose_rig(src.rig, src.quaternions, src.locations)
    idx = [clip.joint_names.index(n) for n in src.rig.names]
    np.testing.assert_allclose(heads, clip.positions[:, idx], atol=atol)
    assert mods["mapping"].humanoid_check(src.mapping) == []


def test_scene_armature_and_fbx(mods, tmp_path):
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "studio", up="Y", units="cm", orients="A", frames=12)
    obj = _import_bvh(path)
    clip = mods["fbx"].armature_clip(obj, obj.name)
    assert clip.units == "cm" and clip.source_rig.mapping.entries["hand_l"] == "Hand_L"
    _check(mods, clip)
    # the same motion read from the BVH file directly
    direct = mods["readers"].read_keypoints(path)
    i, k = clip.joint_names.index("Hand_L"), direct.joint_names.index("Hand_L")
    np.testing.assert_allclose(clip.positions[:, i], direct.positions[:, k], atol=2e-4)
    # exported to FBX and read back through Blender's importer
    fbx = tmp_path / "walk.fbx"
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.export_scene.fbx(filepath=str(fbx), use_selection=True, bake_anim=True, add_leaf_bones=False)
    n_objects = len(bpy.data.objects)
    from_fbx = mods["fbx"].read_armature_file(str(fbx))
    assert len(bpy.data.objects) == n_objects  # the import is removed again
    _check(mods, from_fbx)


def test_root_bone_as_object(mods, tmp_path):
    """An armature without a pelvis bone whose object carries the root motion: the object is the pelvis."""
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "mixamo", up="Y", units="m", frames=8)
    obj = _import_bvh(path)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode='EDIT')
    eb = obj.data.edit_bones
    eb.remove(eb["Hips"])
    bpy.ops.object.mode_set(mode='OBJECT')
    obj.name = "Hips"
    for f in range(1, 9):
        obj.location = (0.0, -0.05 * f, 0.02 * f)
        obj.keyframe_insert("location", frame=f)
    clip = mods["fbx"].armature_clip(obj, "walk.fbx")
    src = clip.source_rig
    assert src.mapping.entries["pelvis"] == "Hips" and src.rig.names[0] == "Hips"
    _check(mods, clip)
    # the pelvis point follows the object
    p = clip.positions[:, clip.joint_names.index("Hips")]
    np.testing.assert_allclose(np.diff(p[:, 1]), -0.05, atol=1e-5)


def test_armature_as_input_bakes(mods, ext, tmp_path):
    """Armature as Input: an animated armature in the scene becomes the Input and bakes onto the meta-rig."""
    import addon_utils

    readers = mods["readers"]
    kpo = importlib.import_module(ext.__name__ + ".blender_io.keypoint_objects")
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "asf", up="Y", units="in", orients="random", frames=10)
    src = _import_bvh(path)
    bpy.context.view_layer.objects.active = src
    assert bpy.ops.neural_ik.armature_input(armature=src.name) == {'FINISHED'}
    root = bpy.context.scene.neural_ik.keypoint_object
    assert root is not None and root["source_armature"] == src.name
    pos, names, fps, layout = kpo.read_keypoint_object(root)
    lay = readers.get_layout(layout)  # the skeleton's own mapping, stored as JSON
    assert lay.name == "skeleton"
    clip = readers.KeypointClip(pos, names, fps, layout=lay.name, mapping=lay)
    kp, mask = readers.to_canonical(clip)
    sk = importlib.import_module(ext.__name__ + ".model.skeleton")
    assert mask[:, [sk.KEYPOINTS.index(j) for j in sk.JOINTS]].all()
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    rig = bpy.context.active_object
    bpy.context.scene.neural_ik.target = rig
    assert bpy.ops.neural_ik.bake('EXEC_DEFAULT', True) == {'FINISHED'}
    assert rig.animation_data.action is not None


def test_armature_as_input_onto_its_own_skeleton_is_exact(mods, ext, tmp_path):
    """The UI's bake of an input made from a skeleton starts from that skeleton's rotations (as the CLI's does):
    onto a copy of the same skeleton every joint comes back within 1 mm; edited keypoints are baked from
    themselves."""
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "studio", up="Y", units="m", orients="random", frames=12)
    src = _import_bvh(path)
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, 12
    assert bpy.ops.neural_ik.armature_input(armature=src.name) == {'FINISHED'}
    root = bpy.context.scene.neural_ik.keypoint_object
    before = set(bpy.data.objects)
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=1.0, axis_up='Y', axis_forward='-Z')
    target = next(o for o in set(bpy.data.objects) - before if o.type == 'ARMATURE')
    target.animation_data.action = None
    for pb in target.pose.bones:
        pb.rotation_quaternion = (1, 0, 0, 0)
        pb.rotation_euler = (0, 0, 0)
        pb.location = (0, 0, 0)
    bpy.context.scene.neural_ik.target = target
    assert bpy.ops.neural_ik.bake('EXEC_DEFAULT', True) == {'FINISHED'}
    worst = 0.0
    for f in (1, 5, 12):
        bpy.context.scene.frame_set(f)
        for pb in src.pose.bones:
            a = src.matrix_world @ pb.head
            b = target.matrix_world @ target.pose.bones[pb.name].head
            worst = max(worst, (a - b).length)
    assert worst < 0.001, worst
    # the keypoints edited: no longer the skeleton's; baked from the keypoints themselves
    solve = importlib.import_module(ext.__name__ + ".operators.solve")
    kp, _m, _f, _n = solve.scene_input(bpy.context)
    assert solve.source_rig_of(root, kp) is not None
    kp[3, 0] += 0.05
    assert solve.source_rig_of(root, kp) is None


def test_no_animated_armature(mods):
    with pytest.raises(RuntimeError, match="choose an animated armature"):
        bpy.ops.neural_ik.armature_input()


@pytest.mark.parametrize("ext_name", [".glb", ".blend"])
def test_gltf_and_blend_sources(mods, tmp_path, ext_name):
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "mixamo", up="Y", units="cm", frames=8)
    obj = _import_bvh(path)
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    out = tmp_path / ("walk" + ext_name)
    if ext_name == ".glb":
        bpy.ops.export_scene.gltf(filepath=str(out), use_selection=True, export_animations=True)
    else:
        bpy.ops.wm.save_as_mainfile(filepath=str(out), copy=True)
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    clip = mods["fbx"].read_armature_file(str(out), ground=False)
    assert len(bpy.data.objects) == 0  # nothing left behind
    assert clip.source_rig.mapping.entries["foot_r"] == "RightFoot"
    _check(mods, clip)
    direct = mods["readers"].read_keypoints(path, ground=False)
    i, k = clip.joint_names.index("LeftHand"), direct.joint_names.index("LeftHand")
    np.testing.assert_allclose(clip.positions[:, i], direct.positions[:, k], atol=2e-3)


def test_import_keypoints_reads_an_fbx(mods, tmp_path):
    path, _ = humanoid_bvh(tmp_path / "walk.bvh", "studio", up="Y", units="cm", frames=6)
    obj = _import_bvh(path)
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    fbx = tmp_path / "walk.fbx"
    bpy.ops.export_scene.fbx(filepath=str(fbx), use_selection=True, bake_anim=True, add_leaf_bones=False)
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(fbx)) == {'FINISHED'}
    root = bpy.context.scene.neural_ik.keypoint_object
    assert root is not None and root["layout"].startswith("{")  # the skeleton's own mapping
    assert not [o for o in bpy.data.objects if o.type == 'ARMATURE']  # the import was removed
