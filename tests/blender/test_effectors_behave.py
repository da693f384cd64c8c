"""Effectors that behave (the real network): what the animator did not touch stays where it is.

On Rigify's meta-rig, in metres, in centimetres with an object scale of 0.01
(a Mixamo-style FBX) and turned about Z: an untouched Solve Frame changes no
bone; dragging one hand turns no foot bone; turning a hand empty turns its
hand bone as much.
"""

import math
import sys
from pathlib import Path

import bpy
import numpy as np
import pytest
from mathutils import Matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOL_DEG = 0.5


def _metarig(kind):
    import addon_utils
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.active_object
    if kind == "cm":   # bones in centimetres, the object scaled 0.01: the same body in the world
        bpy.ops.object.mode_set(mode='EDIT')
        for eb in obj.data.edit_bones:
            eb.head *= 100.0
            eb.tail *= 100.0
        bpy.ops.object.mode_set(mode='OBJECT')
        obj.scale = (0.01, 0.01, 0.01)
    elif kind == "turned":
        obj.matrix_world = Matrix.Rotation(math.radians(70.0), 4, 'Z') @ Matrix.Translation((0.5, -0.3, 0.0))
    bpy.context.view_layer.update()
    s = bpy.context.scene.neural_ik
    s.target = obj
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    empties = {c["neural_ik_effector"]: c for c in s.effector_root.children}
    return obj, empties


def _world_rotations(obj):
    bpy.context.view_layer.update()
    mw = np.array(obj.matrix_world)
    out = {}
    for pb in obj.pose.bones:
        m = mw[:3, :3] @ np.array(pb.matrix)[:3, :3]
        u, _, vt = np.linalg.svd(m)
        out[pb.name] = u @ vt
    return out


def _angle(a, b):
    return math.degrees(math.acos(max(-1.0, min(1.0, (np.trace(a.T @ b) - 1.0) / 2.0))))


def _turned(before, after, names=None):
    names = names or before
    return {n: _angle(before[n], after[n]) for n in names}


@pytest.mark.parametrize("kind", ["m", "cm", "turned"])
def test_effectors_behave(ext, kind):
    obj, empties = _metarig(kind)
    rest = _world_rotations(obj)
    # 1 mm of the meta-rig's body (its hands 1.3 m apart at rest) in the scene's units: the
    # centimetre rig's body is a hundred times larger in the world
    mw = np.array(obj.matrix_world)
    span = np.linalg.norm(mw[:3, :3] @ (np.array(obj.pose.bones["hand.L"].head) - np.array(obj.pose.bones["hand.R"].head)))
    tol = 1e-3 * span / 1.3
    # untouched: nothing changes
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    assert max(_turned(rest, _world_rotations(obj)).values()) < TOL_DEG
    assert "pose is kept" in bpy.context.scene.neural_ik.status
    # one hand dragged forward and up: the hand reaches it, no foot bone turns
    hand = empties["hand_l"]
    mw = np.array(obj.matrix_world)
    hand.location = hand.location + bpy.context.scene.cursor.location.__class__(
        tuple(_orthonormal(mw[:3, :3]) @ np.array([0.0, -0.25, 0.15])))
    bpy.context.view_layer.update()
    before = _world_rotations(obj)
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    after = _world_rotations(obj)
    feet = [b for b in ("foot.L", "foot.R", "toe.L", "toe.R")]
    turned = _turned(before, after, feet)
    assert max(turned.values()) < TOL_DEG, turned
    bpy.context.view_layer.update()
    head = np.array(obj.matrix_world) @ np.append(np.array(obj.pose.bones["hand.L"].head), 1.0)
    assert np.linalg.norm(head[:3] - np.array(hand.matrix_world.translation)) < tol
    # the hand empty turned 90 degrees about the world's up: the hand bone turns 90 degrees
    before = after
    hand.rotation_quaternion = Matrix.Rotation(math.radians(90.0), 3, 'Z').to_quaternion() @ hand.rotation_quaternion
    bpy.context.view_layer.update()
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    after = _world_rotations(obj)
    assert abs(_angle(before["hand.L"], after["hand.L"]) - 90.0) < 2.0
    target = np.array(hand.matrix_world)[:3, :3]
    assert _angle(_orthonormal(target), after["hand.L"]) < 2.0
    assert max(_turned(before, after, feet).values()) < TOL_DEG


def _orthonormal(m):
    u, _, vt = np.linalg.svd(np.asarray(m, dtype=np.float64))
    return u @ vt


def test_baked_empties_are_met_where_they_are(ext):
    """A clip baked from the animator's empties, every empty keyed 4 cm lower than Add Effectors put it
    (the feet through the floor): the hands land on their empties, the body is not moved to the rig's
    standing height as another body's effectors are, and the status line says how far the feet sink."""
    obj, empties = _metarig("m")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 30
    for e in empties.values():
        e.location.z -= 0.04
        for f in (1, 30):
            e.keyframe_insert("location", frame=f)
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    status = scene.neural_ik.status
    assert "vertically" not in status
    for f in (1, 15, 30):
        scene.frame_set(f)
        for side in "LR":
            head = np.array(obj.matrix_world) @ np.append(np.array(obj.pose.bones[f"hand.{side}"].head), 1.0)
            assert np.linalg.norm(head[:3] - np.array(empties[f"hand_{side.lower()}"].matrix_world.translation)) < 1e-3
    assert "feet -4.0 cm from the floor" in status, status
