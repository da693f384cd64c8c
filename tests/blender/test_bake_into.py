"""Bake Into: NLA Strip. The bake plays from a strip on a new NLA track the animator can mute to compare with
their own animation, which is pushed down unchanged; one undo takes it all back."""

import importlib
import pathlib
import sys

import bpy
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rigs  # noqa: E402
from test_bake import fcurve_arrays, pose_heads  # noqa: E402
from test_operators import _import_clip, exact_solver  # noqa: E402,F401  (a fixture)


def _own_action(obj):
    """The animator's action: the left upper arm raised on frames 1-20."""
    pb = obj.pose.bones["mixamorig:LeftArm"]
    pb.rotation_mode = 'QUATERNION'
    for frame, angle in ((1, 0.3), (20, 0.9)):
        pb.rotation_quaternion = (np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2))
        pb.keyframe_insert("rotation_quaternion", frame=frame)
    obj.animation_data.action.name = "mine"
    return obj.animation_data.action


def test_bake_into_nla_strip_mute_to_compare_and_undo(ext, sk, exact_solver, tmp_path):  # noqa: F811
    _solver, kp = exact_solver
    _import_clip(sk, kp, tmp_path)
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    scene = bpy.context.scene
    scene.neural_ik.target = obj
    scene.frame_start = 1
    mine = _own_action(obj)
    own_keys = fcurve_arrays(ext, mine, obj)
    scene.neural_ik.bake_into = 'NLA'
    bpy.ops.ed.undo_push(message="before bake")
    n_actions = len(bpy.data.actions)
    assert bpy.ops.neural_ik.bake('EXEC_DEFAULT', True) == {'FINISHED'}
    obj = bpy.data.objects["Hero"]
    ad = obj.animation_data
    assert ad.action is None and len(bpy.data.actions) == n_actions + 1
    tracks = list(ad.nla_tracks)
    assert [t.strips[0].action.name for t in tracks] == ["mine", "walk"]     # bottom to top
    assert tracks[1].name == "walk" and "NLA strip 'walk'" in scene.neural_ik.status
    actions = importlib.import_module(ext.__name__ + ".blender_io.actions")
    if actions.is_layered_api():
        assert tracks[1].strips[0].action_slot is not None
    mine = bpy.data.actions["mine"]
    assert mine.use_fake_user
    for key, co in fcurve_arrays(ext, mine).items():
        np.testing.assert_array_equal(co, own_keys[key])                # the animator's keys untouched
    baked = pose_heads(obj, range(1, 21))["mixamorig:LeftHand"]
    np.testing.assert_allclose(baked, kp[:, sk.joint_index("hand_l")], atol=2e-4)   # the strip plays
    tracks[1].mute = True       # the animator's own keys play again (the bones they key)
    for frame, angle in ((1, 0.3), (20, 0.9)):
        scene.frame_set(frame)
        q = obj.pose.bones["mixamorig:LeftArm"].rotation_quaternion
        np.testing.assert_allclose(tuple(q), (np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)), atol=1e-6)
    tracks[1].mute = False
    bpy.ops.ed.undo()
    obj = bpy.data.objects["Hero"]
    assert len(bpy.data.actions) == n_actions and "walk" not in bpy.data.actions
    assert obj.animation_data.action.name == "mine" and len(obj.animation_data.nla_tracks) == 0


def test_bake_into_nla_strip_without_an_action(ext, sk, exact_solver, tmp_path):  # noqa: F811
    _solver, kp = exact_solver
    _import_clip(sk, kp, tmp_path)
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    scene = bpy.context.scene
    scene.neural_ik.target = obj
    scene.frame_start = 1
    scene.neural_ik.bake_into = 'NLA'
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    ad = obj.animation_data
    assert ad.action is None and [t.name for t in ad.nla_tracks] == ["walk"]
    np.testing.assert_allclose(pose_heads(obj, range(1, 21))["mixamorig:LeftHand"],
                               kp[:, sk.joint_index("hand_l")], atol=2e-4)
