"""Retargeting maths against Blender itself: Euler conventions against ``mathutils``,
posed heads and matrices against a keyed armature (the maths: ``tests/pure/test_retarget_math.py``)."""

import bpy
import mathutils
import numpy as np
import pytest

from neural_ik.model.rotations_np import matrix_to_quat, quat_to_matrix
from neural_ik.retarget.mapping import auto_map
from neural_ik.retarget.solve import euler_to_matrix_blender, matrix_to_euler_blender, plan_retarget, \
    pose_rig, quats_to_euler_continuous, retarget
from rigs import build_blender_armature, description_from_blender, humanoid, random_motion


@pytest.mark.parametrize("order", ["XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"])
def test_euler_matches_mathutils(order):
    """Angles are indexed by axis (x, y, z) for every order, as ``rotation_euler`` stores them."""
    rng = np.random.default_rng(7)
    e = rng.uniform(-1.4, 1.4, size=(20, 3))
    m = euler_to_matrix_blender(e, order)
    for k in range(len(e)):
        want = np.array(mathutils.Euler(e[k].tolist(), order).to_matrix())
        assert np.allclose(m[k], want, atol=1e-6)
        q = mathutils.Euler(e[k].tolist(), order).to_quaternion()
        assert np.allclose(np.array(q.to_matrix()), m[k], atol=1e-6)
    # moderate angles: one Euler triple has its middle angle within +-pi/2 and
    # Blender's to_euler picks that one too: compare the values themselves
    small = rng.uniform(-1.0, 1.0, size=(20, 3))
    qs = np.array([list(mathutils.Euler(x.tolist(), order).to_quaternion()) for x in small])
    for got in (matrix_to_euler_blender(quat_to_matrix(qs), order),
                quats_to_euler_continuous(qs[:, None], order)[:, 0]):
        ref = np.array([list(mathutils.Quaternion(x.tolist()).to_euler(order)) for x in qs])
        assert np.allclose(got, ref, atol=1e-5)
        assert np.allclose(got, small, atol=1e-5)
    # any rotation: Blender reads our values back as the same rotation
    q = rng.normal(size=(20, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    for got in (matrix_to_euler_blender(quat_to_matrix(q), order),
                quats_to_euler_continuous(q[:, None], order)[:, 0]):
        for k in range(len(q)):
            back = np.array(mathutils.Euler(got[k].tolist(), order).to_matrix())
            assert np.allclose(back, quat_to_matrix(q[k]), atol=1e-5)
    assert np.allclose(quat_to_matrix(matrix_to_quat(m)), m)



def test_blender_agrees_with_pose_maths():
    """Key the result on a real Blender armature: pose-bone heads match ours."""
    rig = humanoid("unreal", pose="A", axes="random", seed=11, spine=4, neck=2)
    obj = build_blender_armature(rig, "UE")
    back = description_from_blender(obj)  # foreach_get extraction gives the same rig
    assert sorted(back.names) == sorted(rig.names)  # Blender may reorder bones
    order = [rig.index(n) for n in back.names]
    par = [back.names[p] if p >= 0 else None for p in back.parents]
    assert par == [rig.names[rig.parents[i]] if rig.parents[i] >= 0 else None for i in order]
    assert np.allclose(back.matrix_local, rig.matrix_local[order], atol=1e-5)
    assert np.allclose(back.tail, rig.tail[order], atol=1e-5)
    plan = plan_retarget(back, auto_map(back))
    R, root = random_motion(T=4, seed=12)
    res = retarget(plan, R, root)
    for pb in obj.pose.bones:
        pb.rotation_mode = "QUATERNION"
    for t in range(len(R)):
        for b, pb in enumerate(obj.pose.bones):
            i = back.index(pb.name)
            pb.rotation_quaternion = res.quaternions[t, i].tolist()
            pb.location = res.locations[t, i].tolist()
        bpy.context.view_layer.update()
        heads = np.array([list(obj.pose.bones[n].head) for n in back.names])
        assert np.allclose(heads, res.heads[t], atol=1e-4)
        mats = np.array([np.array(obj.pose.bones[n].matrix)[:3, :3] for n in back.names])
        W, _ = pose_rig(back, res.quaternions[t:t + 1], res.locations[t:t + 1])
        assert np.allclose(mats, W[0], atol=1e-4)
