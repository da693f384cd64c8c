"""Torch FK and rotation utilities."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import fk, rotations as R  # noqa: E402
from neural_ik.model.skeleton import (  # noqa: E402
    CANONICAL, JOINTS, KEYPOINTS, Skeleton, forward_kinematics_np, joint_index, keypoint_index, keypoints_from_fk_np,
)

torch.set_num_threads(2)


def _rot_z(deg):
    a = math.radians(deg)
    return np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1.0]])


def test_rest_pose_matches_skeleton():
    rot = torch.eye(3).expand(22, 3, 3)
    kp = fk.fk_keypoints(rot, torch.tensor(CANONICAL.offsets[0], dtype=torch.float32))
    np.testing.assert_allclose(kp.numpy(), CANONICAL.rest_keypoints(), atol=1e-6)


def test_elbow_90_degrees_by_hand():
    rot = np.broadcast_to(np.eye(3), (22, 3, 3)).copy()
    rot[joint_index("forearm_l")] = _rot_z(90.0)  # bend the left forearm forward/around +Z
    kp = fk.fk_keypoints(torch.tensor(rot), torch.tensor([0.0, 0.0, 0.95], dtype=torch.float64))
    kp = kp.numpy()
    elbow = kp[joint_index("forearm_l")]
    hand = kp[joint_index("hand_l")]
    tip = kp[keypoint_index("hand_tip_l")]
    # the forearm (0.25 m along +X at rest) now points along +Y
    np.testing.assert_allclose(hand - elbow, [0.0, 0.25, 0.0], atol=1e-12)
    np.testing.assert_allclose(tip - hand, [0.0, 0.18, 0.0], atol=1e-12)
    # the shoulder stays put: shoulder x = 0.02 + 0.15, elbow x = +0.28 further
    np.testing.assert_allclose(elbow, [0.02 + 0.15 + 0.28, 0.0, 0.95 + 0.10 + 0.12 + 0.12 + 0.14], atol=1e-12)


def test_knee_90_degrees_by_hand():
    rot = np.broadcast_to(np.eye(3), (22, 3, 3)).copy()
    a = math.radians(90)
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    rot[joint_index("calf_r")] = rx  # shin rotates about +X: -Z goes to +Y (knee bends backwards)
    kp = fk.fk_keypoints(torch.tensor(rot), torch.zeros(3, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(kp[joint_index("foot_r")] - kp[joint_index("calf_r")], [0, 0.40, 0], atol=1e-12)


@pytest.mark.parametrize("per_sample", [False, True])
def test_torch_fk_matches_numpy(per_sample):
    g = torch.Generator().manual_seed(0)
    rot = R.random_rotation((5, 22), generator=g, dtype=torch.float64)
    root = torch.randn(5, 3, generator=g, dtype=torch.float64)
    if per_sample:
        off = torch.tensor(CANONICAL.offsets) * (1 + 0.1 * torch.randn(5, 22, 1, generator=g, dtype=torch.float64))
    else:
        off = torch.tensor(CANONICAL.offsets)
    wr, wp = fk.forward_kinematics(rot, root, off)
    wr_np, wp_np = forward_kinematics_np(rot.numpy(), root.numpy(), off.numpy())
    np.testing.assert_allclose(wr.numpy(), wr_np, atol=1e-10)
    np.testing.assert_allclose(wp.numpy(), wp_np, atol=1e-10)
    sk = Skeleton(CANONICAL.offsets * 1.1, CANONICAL.end_offsets * 0.9)
    kp = fk.fk_keypoints(rot, root, torch.tensor(sk.offsets), torch.tensor(sk.end_offsets))
    np.testing.assert_allclose(kp.numpy(), keypoints_from_fk_np(rot.numpy(), root.numpy(), sk), atol=1e-10)


def test_fk_is_differentiable():
    rot6 = torch.randn(3, 22, 6, dtype=torch.float64, requires_grad=True)
    root = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    f = lambda a, b: fk.fk_keypoints(R.rot6d_to_matrix(a), b).sum()  # noqa: E731
    assert torch.autograd.gradcheck(f, (rot6, root), eps=1e-6, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_fk_cuda_matches_cpu():
    rot = R.random_rotation((7, 22))
    root = torch.randn(7, 3)
    a = fk.fk_keypoints(rot, root)
    b = fk.fk_keypoints(rot.cuda(), root.cuda(), torch.tensor(CANONICAL.offsets, dtype=torch.float32, device="cuda"),
                        torch.tensor(CANONICAL.end_offsets, dtype=torch.float32, device="cuda"))
    np.testing.assert_allclose(a.numpy(), b.cpu().numpy(), atol=1e-5)


def test_rot6d_round_trip():
    rot = R.random_rotation((100,), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    back = R.rot6d_to_matrix(R.matrix_to_rot6d(rot))
    np.testing.assert_allclose(back.numpy(), rot.numpy(), atol=1e-12)
    # any 6D vector maps to a proper rotation
    m = R.rot6d_to_matrix(torch.randn(50, 6, dtype=torch.float64))
    np.testing.assert_allclose((m.transpose(-1, -2) @ m).numpy(), np.broadcast_to(np.eye(3), (50, 3, 3)), atol=1e-12)
    np.testing.assert_allclose(torch.linalg.det(m).numpy(), 1.0, atol=1e-12)


def test_quaternion_and_axis_angle_round_trips():
    g = torch.Generator().manual_seed(2)
    rot = R.random_rotation((200,), generator=g, dtype=torch.float64)
    np.testing.assert_allclose(R.quat_to_matrix(R.matrix_to_quat(rot)).numpy(), rot.numpy(), atol=1e-10)
    aa = R.matrix_to_axis_angle(rot)
    np.testing.assert_allclose(R.axis_angle_to_matrix(aa).numpy(), rot.numpy(), atol=1e-10)
    # near-identity and near-pi
    small = torch.tensor([[1e-9, 0, 0], [0, 0, 3.14159]], dtype=torch.float64)
    np.testing.assert_allclose(R.matrix_to_axis_angle(R.axis_angle_to_matrix(small)).numpy(), small.numpy(), atol=1e-8)


def test_geodesic_angle():
    a = R.axis_angle_to_matrix(torch.tensor([0.0, 0.0, 0.3], dtype=torch.float64))
    b = R.axis_angle_to_matrix(torch.tensor([0.0, 0.0, -0.5], dtype=torch.float64))
    assert abs(float(R.geodesic_angle(a, b)) - 0.8) < 1e-6
    assert float(R.geodesic_angle(a, a)) < 2e-3  # clamped near zero


def test_ancestor_matrix():
    A = fk.ancestor_matrix()
    assert not A[keypoint_index("pelvis")].any()
    assert A[keypoint_index("hand_l"), joint_index("forearm_l")]
    assert not A[keypoint_index("hand_l"), joint_index("hand_l")]
    assert A[keypoint_index("hand_tip_l"), joint_index("hand_l")]
    assert not A[keypoint_index("hand_tip_l"), joint_index("hand_r")]
    assert A[:, 0].sum() == 31
