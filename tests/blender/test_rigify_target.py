"""The generated Rigify rig as a target: Auto-Map keys its FK controls, and the deform bones follow.

What the animator sees is the deform skeleton, so the bakes are measured on
the ``DEF-`` bones as Blender evaluates them (constraints and all).
"""

import importlib
import math
import sys
from pathlib import Path

import bpy
import numpy as np
import pytest
from mathutils import Matrix, Vector

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Canonical joint -> the deform bone whose head shows it.
DEF_OF = {"hand_l": "DEF-hand.L", "hand_r": "DEF-hand.R", "foot_l": "DEF-foot.L", "foot_r": "DEF-foot.R",
          "toe_l": "DEF-toe.L", "toe_r": "DEF-toe.R", "forearm_l": "DEF-forearm.L", "calf_r": "DEF-shin.R",
          "upperarm_r": "DEF-upper_arm.R", "thigh_l": "DEF-thigh.L"}


def generated_rig():
    """Rigify's human meta-rig generated into ``rig`` (the meta-rig deleted), the active object."""
    import addon_utils
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    meta = bpy.context.active_object
    assert bpy.ops.pose.rigify_generate() == {'FINISHED'}
    rig = bpy.data.objects["rig"]
    if rig.mode != 'OBJECT':
        bpy.ops.object.mode_set(mode='OBJECT')
    bpy.data.objects.remove(meta)
    bpy.context.view_layer.update()
    bpy.context.view_layer.objects.active = rig
    rig.select_set(True)
    bpy.context.scene.neural_ik.target = rig
    return rig


def _mod(ext, name):
    return importlib.import_module(ext.__name__ + "." + name)


def def_heads(obj, names):
    """World heads of pose bones as Blender evaluates them now."""
    bpy.context.view_layer.update()
    mw = obj.matrix_world
    return {n: np.array(mw @ obj.pose.bones[n].head) for n in names}


def test_auto_map_keys_the_fk_controls_and_the_model_is_blenders(ext, bake):
    """Auto-Map on the generated rig maps the FK controls (no helper bone) and a bake can run; the
    skeleton the solve sees, posed with random turns of the controls, puts every deform bone where
    Blender does once the switches are set (within 0.01 mm)."""
    rigify = _mod(ext, "retarget.rigify")
    solve = _mod(ext, "retarget.solve")
    rig_io = _mod(ext, "blender_io.rig")
    b_rigify = _mod(ext, "blender_io.rigify")
    obj = generated_rig()
    assert bpy.ops.neural_ik.auto_map() == {'FINISHED'}
    entries = {it.joint: it.bone for it in obj.neural_ik_mapping if it.bone}
    assert entries == _mod(ext, "retarget.presets").builtin_entries("RIGIFY_CONTROLS")
    rig = rig_io.rig_description(obj)
    mapping = bake.resolve_mapping(obj, rig)   # raises where the mapping does not fit
    keys = b_rigify.rigify_keys(obj, rig, mapping)
    assert ("upper_arm_parent.L", '["IK_FK"]', (1.0,)) in keys
    assert {k[0] for k in keys} >= {"hips", "chest", "torso", "thigh_parent.R"}
    b_rigify.apply_constants(obj, keys)
    skel = rigify.skeleton_for(rig, mapping)
    rng = np.random.default_rng(3)
    n = len(skel)
    quats = np.zeros((1, n, 4))
    quats[..., 0] = 1.0
    locs = np.zeros((1, n, 3))
    for joint, name in mapping.entries.items():
        b = skel.index(name)
        q = np.concatenate([[1.0], rng.normal(0.0, 0.25, 3)])
        quats[0, b] = q / np.linalg.norm(q)
        pb = obj.pose.bones[name]
        pb.rotation_mode = 'QUATERNION'
        pb.rotation_quaternion = quats[0, b]
    root = skel.index("torso")
    locs[0, root] = (0.1, -0.2, 0.05)
    obj.pose.bones["torso"].location = locs[0, root]
    _rot, heads = solve.pose_rig(skel, quats, locs)
    seen = def_heads(obj, DEF_OF.values())
    for joint, def_bone in DEF_OF.items():
        model = heads[0, skel.index(mapping.entries[joint])]
        assert np.linalg.norm(seen[def_bone] - model) < 1e-5, (joint, seen[def_bone], model)


def _keyed_paths(ext, obj):
    from test_bake import fcurve_arrays
    return fcurve_arrays(ext, obj.animation_data.action, obj)


def _assert_controls_keyed(ext, obj, n_frames):
    keys = _keyed_paths(ext, obj)
    paths = {p for p, _i in keys}
    for bone in ("torso", "hand_fk.L", "forearm_fk.R", "thigh_fk.L", "foot_fk.R", "neck", "shoulder.L"):
        assert any(p.startswith(f'pose.bones["{bone}"].rotation') for p in paths), bone
    assert ('pose.bones["torso"].location', 0) in keys
    ik_fk = keys[('pose.bones["upper_arm_parent.L"]["IK_FK"]', 0)].reshape(-1, 2)
    assert len(ik_fk) == n_frames and (ik_fk[:, 1] == 1.0).all()
    assert not any(p.startswith(('pose.bones["MCH-', 'pose.bones["ORG-', 'pose.bones["DEF-')) for p in paths)


def deform_sheet(ext, obj, path, frames, keypoints):
    """A contact sheet of the deform bones as Blender evaluates them (the input's keypoints beside them)."""
    sheet = _mod(ext, "blender_io.contact_sheet")
    deform = np.array([b.use_deform for b in obj.data.bones])
    poses = [(h[deform], t[deform]) for h, t in sheet.object_poses(obj, frames)]
    w, h = sheet.render_contact_sheet(str(path), keypoints, poses, frames)
    assert path.exists() and (w, h) == (3 * 320, 2 * 240)


def _lowest_foot_points(obj, side):
    """World heights of a foot's deform points now: ankle, ball, toe tip."""
    bpy.context.view_layer.update()
    mw = obj.matrix_world
    foot, toe = obj.pose.bones[f"DEF-foot.{side}"], obj.pose.bones[f"DEF-toe.{side}"]
    return min((mw @ p).z for p in (foot.tail, toe.head, toe.tail))


def test_foreign_clip_bakes_onto_the_controls(ext, tmp_path):
    """A foreign BVH (ASF bone names, centimetres, Y up) imported and baked with the operators onto the
    generated rig: the FK controls and the switches are keyed, nothing else; on every frame the source's
    toe touches its floor (within 1.5 cm), that foot's lowest deform point is on the rig's floor (its
    height at rest) within 1 cm."""
    from source_fixtures import humanoid_bvh
    src, world = humanoid_bvh(tmp_path / "walk.bvh", scheme="asf", up="Y", units="cm", frames=60)
    obj = generated_rig()
    rest_floor = {s: _lowest_foot_points(obj, s) for s in "LR"}
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(src)) == {'FINISHED'}
    bpy.context.scene.neural_ik.target = obj
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}, bpy.context.scene.neural_ik.status
    _assert_controls_keyed(ext, obj, 60)
    sk = _mod(ext, "model.skeleton")
    scene = bpy.context.scene
    shown = [1, 12, 24, 36, 48, 60]
    deform_sheet(ext, obj, tmp_path / "foreign.png", shown, world[np.array(shown) - 1])
    checked = 0
    for s, side in (("l", "L"), ("r", "R")):
        toe = world[:, sk.KEYPOINTS.index(f"toe_{s}"), 2]
        for t in np.flatnonzero(toe < 0.015):
            scene.frame_set(scene.frame_start + int(t))
            gap = _lowest_foot_points(obj, side) - rest_floor[side]
            assert abs(gap) < 0.01, (side, int(t), gap)
            checked += 1
    assert checked >= 6


def test_six_effectors_bake_onto_the_controls(ext, tmp_path):
    """Add Effectors on the generated rig, the hands keyed along arcs and the pelvis bobbing, the feet left
    where they stand: the bake keys the controls and switches; on every frame each deform hand is within
    1 mm of its empty and each foot stays on the rig's floor within 1 cm."""
    obj = generated_rig()
    rest_floor = {s: _lowest_foot_points(obj, s) for s in "LR"}
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    scene = bpy.context.scene
    empties = {c["neural_ik_effector"]: c for c in scene.neural_ik.effector_root.children}
    scene.frame_start, scene.frame_end = 1, 12
    start = {j: e.location.copy() for j, e in empties.items()}
    for f in range(1, 13):
        a = 2.0 * math.pi * (f - 1) / 11.0
        empties["hand_l"].location = start["hand_l"] + Vector((-0.1 * math.sin(a), -0.15 * math.sin(a), 0.1 * a / 6))
        empties["hand_r"].location = start["hand_r"] + Vector((0.08, -0.2 * (1 - math.cos(a)) / 2, 0.05))
        empties["pelvis"].location = start["pelvis"] + Vector((0.0, 0.0, -0.03 * (1 - math.cos(a)) / 2))
        empties["head"].location = start["head"] + Vector((0.0, -0.02, -0.03 * (1 - math.cos(a)) / 2))
        for j in ("hand_l", "hand_r", "pelvis", "head"):
            empties[j].keyframe_insert("location", frame=f)
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}, scene.neural_ik.status
    _assert_controls_keyed(ext, obj, 12)
    sk = _mod(ext, "model.skeleton")
    shown = [1, 3, 5, 7, 9, 12]
    kp = np.full((len(shown), len(sk.KEYPOINTS), 3), np.nan)
    for i, f in enumerate(shown):
        scene.frame_set(f)
        for j, e in empties.items():
            kp[i, sk.KEYPOINTS.index(j)] = e.matrix_world.translation
    deform_sheet(ext, obj, tmp_path / "effectors.png", shown, kp)
    for f in range(1, 13):
        scene.frame_set(f)
        seen = def_heads(obj, ["DEF-hand.L", "DEF-hand.R"])
        for j, bone in (("hand_l", "DEF-hand.L"), ("hand_r", "DEF-hand.R")):
            miss = np.linalg.norm(seen[bone] - np.array(empties[j].matrix_world.translation))
            assert miss < 1e-3, (f, j, miss)
        for s in "LR":
            assert abs(_lowest_foot_points(obj, s) - rest_floor[s]) < 0.01, (f, s)


def test_solve_frame_on_the_controls_switches_to_fk(ext):
    """Solve Frame with a dragged hand empty: the limbs switch to FK (no key) and the deform hand reaches
    the empty within 1 mm."""
    obj = generated_rig()
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    empties = {c["neural_ik_effector"]: c for c in bpy.context.scene.neural_ik.effector_root.children}
    hand = empties["hand_l"]
    hand.location = hand.location + Vector((-0.1, -0.2, 0.15))
    bpy.context.view_layer.update()
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    assert obj.pose.bones["upper_arm_parent.L"]["IK_FK"] == 1.0
    assert obj.animation_data is None or obj.animation_data.action is None
    seen = def_heads(obj, ["DEF-hand.L"])["DEF-hand.L"]
    assert np.linalg.norm(seen - np.array(hand.matrix_world.translation)) < 1e-3
