"""The numpy BVH writer (blender_io/export.py) against Blender's own BVH exporter.

A rig with connected and unconnected bones, two root bones (Blender's
exporter then adds a ``__0`` root), quaternion, Euler (several orders) and
axis-angle bones, keys on every frame on some bones, un-keyed bones posed
away from rest, and a bone turning through more than a full turn, is
exported by both writers. Both files are read back with
``model.bvh.read_bvh`` and with Blender's BVH importer; hierarchy, rest
offsets, channels and every joint's position on every frame must agree
(within 0.1 mm).
"""

import importlib
import math

import bpy
import numpy as np
import pytest

T = 40
START = 3


@pytest.fixture(scope="module")
def export_mod(ext):
    return importlib.import_module(ext.__name__ + ".blender_io.export")


@pytest.fixture(scope="module")
def bvh_mod(ext):
    return importlib.import_module(ext.__name__ + ".model.bvh")


@pytest.fixture(scope="module")
def actions_mod(ext):
    return importlib.import_module(ext.__name__ + ".blender_io.actions")


_RIGIFY = []


def _metarig():
    import addon_utils

    if not _RIGIFY:
        try:
            addon_utils.enable("rigify")
        except Exception:  # headless registration may complain; the operator still works
            pass
        _RIGIFY.append(True)
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.active_object
    # a second root bone: Blender's exporter then writes a "__0" root above both
    bpy.ops.object.mode_set(mode="EDIT")
    eb = obj.data.edit_bones.new("prop.root")
    eb.head, eb.tail, eb.roll = (0.4, 0.2, 0.0), (0.4, 0.2, 0.3), 0.0  # bone Y = armature Z
    child = obj.data.edit_bones.new("prop.tip")
    child.head, child.tail, child.parent, child.use_connect = (0.4, 0.2, 0.3), (0.5, 0.4, 0.5), eb, True
    bpy.ops.object.mode_set(mode="OBJECT")
    return obj


def _animate(obj, actions_mod, rng):
    """Keys on every frame on some bones (each in its own mode); other bones posed without keys."""
    pb = obj.pose.bones
    pb["spine"].rotation_mode = "QUATERNION"
    pb["upper_arm.L"].rotation_mode = "ZXY"
    pb["forearm.L"].rotation_mode = "XYZ"
    pb["thigh.R"].rotation_mode = "AXIS_ANGLE"
    pb["shin.R"].rotation_mode = "ZYX"
    pb["prop.root"].rotation_mode = "YZX"
    keyed = ["spine", "spine.001", "upper_arm.L", "forearm.L", "thigh.R", "shin.R", "prop.root", "prop.tip",
             "hand.L", "shoulder.R"]
    t = np.linspace(0.0, 1.0, T)
    frames = START + np.arange(T, dtype=np.float64)
    writer = actions_mod.ActionWriter(obj, "export_test")
    for name in keyed:
        mode = pb[name].rotation_mode
        a = rng.normal(0.0, 0.6, 3)
        if mode == "QUATERNION":
            axis = rng.normal(size=3)
            axis /= np.linalg.norm(axis)
            ang = 1.2 * np.sin(2 * np.pi * t + a[0])
            q = np.concatenate([np.cos(ang / 2)[:, None], np.sin(ang / 2)[:, None] * axis], 1)
            writer.add_vector(f'pose.bones["{name}"].rotation_quaternion', frames, q, group=name)
        elif mode == "AXIS_ANGLE":
            axis = rng.normal(size=3)
            aa = np.concatenate([(0.8 * np.sin(3 * t))[:, None], np.tile(axis, (T, 1)) * (1 + t[:, None])], 1)
            writer.add_vector(f'pose.bones["{name}"].rotation_axis_angle', frames, aa, group=name)
        else:
            e = a + np.outer(np.sin(2 * np.pi * t), rng.normal(0.0, 0.8, 3))
            if name == "prop.root":  # more than a whole turn about its Y (armature Z): continuity
                e[:] = 0.0
                e[:, 1] = np.linspace(-0.5, 2.5 * np.pi, T)
            writer.add_vector(f'pose.bones["{name}"].rotation_euler', frames, e, group=name)
    # locations: the root, an unconnected child, and a connected bone (ignored by Blender)
    for name in ("spine", "shoulder.R", "spine.001", "prop.root"):
        writer.add_vector(f'pose.bones["{name}"].location', frames,
                          0.1 * np.sin(np.outer(2 * np.pi * t, rng.normal(size=3))), group=name)
    writer.finish(assign=True)
    # un-keyed pose values stay as they are during the export
    pb["spine.006"].rotation_quaternion = (0.9, 0.2, -0.3, 0.1)
    pb["thigh.L"].location = (0.0, 0.02, 0.01)
    pb["foot.L"].location = (0.05, 0.0, 0.0)  # connected: no effect
    pb["hand.R"].rotation_quaternion = (0.8, 0.0, 0.5, 0.2)
    bpy.context.scene.render.fps, bpy.context.scene.render.fps_base = 24, 1.0
    return keyed


def _import_world(path):
    """Import a BVH with Blender's importer; per frame world heads and tails of every bone, names, parents."""
    before = set(bpy.data.objects)
    bpy.ops.import_anim.bvh(filepath=str(path), rotate_mode="NATIVE", frame_start=1, use_fps_scale=False,
                            update_scene_fps=False, update_scene_duration=False)
    obj = next(o for o in bpy.data.objects if o not in before)
    names = [b.name for b in obj.data.bones]
    parents = [b.parent.name if b.parent else None for b in obj.data.bones]
    scene = bpy.context.scene
    heads, tails = [], []
    mw = np.array(obj.matrix_world)
    for f in range(1, T + 1):
        scene.frame_set(f)
        h = np.array([tuple(p.head) for p in obj.pose.bones])
        tl = np.array([tuple(p.tail) for p in obj.pose.bones])
        heads.append(h @ mw[:3, :3].T + mw[:3, 3])
        tails.append(tl @ mw[:3, :3].T + mw[:3, 3])
    pnames = [p.name for p in obj.pose.bones]
    return names, parents, pnames, np.array(heads), np.array(tails)


def test_numpy_bvh_matches_blenders_exporter(tmp_path, export_mod, bvh_mod, actions_mod):
    obj = _metarig()
    _animate(obj, actions_mod, np.random.default_rng(3))
    end = START + T - 1
    ours, theirs = tmp_path / "numpy.bvh", tmp_path / "blender.bvh"
    assert export_mod.export_armature(obj, str(ours), START, end) == "numpy"
    assert export_mod.export_armature(obj, str(theirs), START, end, bvh_writer="blender").startswith("blender")

    a, b = bvh_mod.read_bvh(ours), bvh_mod.read_bvh(theirs)
    assert a.names == b.names and a.names[0] == "__0" and "prop.tip" in a.names
    np.testing.assert_array_equal(a.parents, b.parents)
    assert a.channels == b.channels
    assert a.channels[a.index("upper_arm.L")][-3:] == ("Zrotation", "Xrotation", "Yrotation")
    assert len(a.channels[a.index("prop.tip")]) == 3  # connected: rotations only
    np.testing.assert_allclose(a.offsets, b.offsets, atol=1e-5)
    assert [p for p, _ in a.end_sites] == [p for p, _ in b.end_sites]
    np.testing.assert_allclose([o for _, o in a.end_sites], [o for _, o in b.end_sites], atol=1e-5)
    assert a.num_frames == b.num_frames == T
    assert a.frame_time == pytest.approx(b.frame_time, abs=1e-6)
    wa, wb = a.world_positions(), b.world_positions()
    assert np.abs(wa - wb).max() < 1e-4  # 0.1 mm
    # the motion really moves (not a comparison of two rest poses)
    assert np.ptp(wa[:, a.index("hand.L")], axis=0).max() > 0.05
    # Eulers continuous from frame to frame, like Blender's
    rot_cols = np.array([c.endswith("rotation") for ch in a.channels for c in ch], dtype=bool)
    assert np.abs(np.diff(a.motion[:, rot_cols], axis=0)).max() < 90.0

    # Blender's importer reads both to the same armature and motion
    na, pa, pna, ha, ta = _import_world(ours)
    nb, pb_, pnb, hb, tb = _import_world(theirs)
    assert na == nb and pa == pb_ and pna == pnb
    assert np.abs(ha - hb).max() < 1e-4 and np.abs(ta - tb).max() < 1e-4


def test_chunks_continue_the_eulers(tmp_path, export_mod, bvh_mod, actions_mod):
    obj = _metarig()
    _animate(obj, actions_mod, np.random.default_rng(5))
    pose = export_mod.read_pose_channels(obj, START, START + T - 1)
    assert not isinstance(pose, str), pose
    whole, chunked = tmp_path / "whole.bvh", tmp_path / "chunked.bvh"
    export_mod.write_armature_bvh(str(whole), pose)
    export_mod.write_armature_bvh(str(chunked), pose, chunk_frames=7)
    a, b = bvh_mod.read_bvh(whole), bvh_mod.read_bvh(chunked)
    np.testing.assert_allclose(a.motion, b.motion, atol=2e-6)
    j = a.index("prop.root")
    spin = a.motion[:, sum(len(c) for c in a.channels[:j]) + 4]  # Zrotation (channels XYZ pos, YZX rot)
    assert spin[-1] - spin[0] > 360.0  # more than a turn, written without wrapping


def test_falls_back_to_blender_where_numpy_would_differ(tmp_path, export_mod, bvh_mod, actions_mod):
    obj = _metarig()
    _animate(obj, actions_mod, np.random.default_rng(7))
    con = obj.pose.bones["hand.L"].constraints.new("COPY_ROTATION")
    con.target = obj
    con.subtarget = "spine"
    path = tmp_path / "constrained.bvh"
    used = export_mod.export_armature(obj, str(path), START, START + T - 1)
    assert used.startswith("blender") and "constraints" in used
    # a muted constraint changes nothing: numpy again
    con.mute = True
    assert export_mod.export_armature(obj, str(path), START, START + T - 1) == "numpy"
    # an fcurve without a key on every exported frame
    fc = actions_mod.action_fcurves(obj.animation_data.action, obj)[0]
    fc.keyframe_points.remove(fc.keyframe_points[5])
    used = export_mod.export_armature(obj, str(path), START, START + T - 1)
    assert used.startswith("blender") and "no key" in used
    assert bvh_mod.read_bvh(path).num_frames == T


def test_unanimated_armature_exports_its_pose(tmp_path, export_mod, bvh_mod):
    obj = _metarig()
    obj.pose.bones["upper_arm.R"].rotation_quaternion = (math.cos(0.4), 0.0, 0.0, math.sin(0.4))
    ours, theirs = tmp_path / "numpy.bvh", tmp_path / "blender.bvh"
    assert export_mod.export_armature(obj, str(ours), 1, 3) == "numpy"
    export_mod.export_armature(obj, str(theirs), 1, 3, bvh_writer="blender")
    a, b = bvh_mod.read_bvh(ours), bvh_mod.read_bvh(theirs)
    assert np.abs(a.world_positions() - b.world_positions()).max() < 1e-4
