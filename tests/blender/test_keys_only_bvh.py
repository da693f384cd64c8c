"""A bake whose only outputs are BVH files keeps its keys as arrays, onto any armature Blender loads.

Onto a Blender armature (the meta-rig, an FBX) the keys went into an action
first (about 70 bytes a key point: 1.3 GB for 200,000 frames of the
meta-rig) and were read back for the BVH. Now the armature is read once
(:func:`neural_ik.blender_io.rig.file_armature`) and the numpy BVH writer
writes the keys: the same file, byte for byte. A posed armature keeps
Blender's path (its pose is in the BVH where the bake leaves bones alone).
"""

import argparse

from test_cli_bake import needs_weights, weights_args, write_walk_npz

pytestmark = needs_weights


def _target(spec, exports, blend=None):
    from _pkg import pkg

    pkg()
    from neural_ik.cli.bake import load_bake_target

    args = argparse.Namespace(target=spec, armature=None, target_units=None, target_up_axis=None)
    return load_bake_target(args, exports, blend)


def test_bvh_only_bakes_onto_the_meta_rig_keep_their_keys_as_arrays():
    from neural_ik.readers.bvh_armature import FileArmature

    target = _target("rigify", ["out.bvh"])
    assert isinstance(target.obj, FileArmature) and target.kind == "rigify"
    assert len(target.obj.rig) == len(target.obj.rotation_modes) == len(target.obj.connected) > 100
    assert not isinstance(_target("rigify", ["out.bvh"], "out.blend").obj, FileArmature)
    assert not isinstance(_target("rigify", ["out.fbx"]).obj, FileArmature)


def test_a_posed_armature_goes_through_blender():
    import bpy

    from neural_ik.blender_io.rig import file_armature

    target = _target("rigify", ["out.bvh"])
    obj = bpy.data.objects[target.obj.name]
    assert file_armature(obj) is not None
    obj.pose.bones["hand.L"].rotation_quaternion = (0.9, 0.1, 0.0, 0.0)
    assert file_armature(obj) is None
    obj.pose.bones["hand.L"].rotation_quaternion = (1.0, 0.0, 0.0, 0.0)
    obj.pose.bones["hand.L"].lock_rotation[0] = True
    assert file_armature(obj) is None


def test_the_bvh_is_the_one_blender_writes(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=1.0)
    direct, through = tmp_path / "direct.bvh", tmp_path / "through.bvh"
    for args in (["--export", direct], ["--out", tmp_path / "x.blend", "--export", through]):
        result = run_cli("bake", src, "--target", "rigify", *args, "-q", *weights_args())
        assert result.returncode == 0, result.stderr
    assert direct.read_bytes() == through.read_bytes()
