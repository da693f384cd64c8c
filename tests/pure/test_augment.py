"""Augmentation invariants (numpy, seeded)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from training import augment as aug  # noqa: E402
from neural_ik.model import skeleton as sk  # noqa: E402


def _poses(n=16, seed=0, deg=30.0):
    rng = np.random.default_rng(seed)
    rv = rng.normal(0, np.deg2rad(deg), (n, 22, 3))
    R = Rotation.from_rotvec(rv.reshape(-1, 3)).as_matrix().reshape(n, 22, 3, 3)
    root = rng.normal(0, 1, (n, 3)) + [0, 0, 1]
    return R, root


def _asym_skeleton(seed=1):
    rng = np.random.default_rng(seed)
    return sk.Skeleton(sk.REST_OFFSETS * rng.uniform(0.9, 1.1, (22, 1)), sk.END_OFFSETS * rng.uniform(0.9, 1.1, (10, 1)))


def _orthonormal(R):
    R = np.asarray(R, dtype=np.float64)
    I = np.broadcast_to(np.eye(3), R.shape)
    return np.allclose(R @ np.swapaxes(R, -1, -2), I, atol=1e-5) and np.allclose(np.linalg.det(R), 1.0, atol=1e-5)


def test_mirror_twice_is_identity():
    R, root = _poses()
    skel = _asym_skeleton()
    R2, root2, s2 = aug.mirror(*aug.mirror(R, root, skel))
    np.testing.assert_allclose(R2, R, atol=1e-12)
    np.testing.assert_allclose(root2, root, atol=1e-12)
    np.testing.assert_allclose(s2.offsets, skel.offsets, atol=1e-12)
    np.testing.assert_allclose(s2.end_offsets, skel.end_offsets, atol=1e-12)


def test_mirror_swaps_and_reflects_keypoints():
    R, root = _poses()
    skel = _asym_skeleton()
    kp = sk.keypoints_from_fk_np(R, root, skel)
    Rm, rootm, sm = aug.mirror(R, root, skel)
    assert _orthonormal(Rm)
    kpm = sk.keypoints_from_fk_np(Rm, rootm, sm)
    np.testing.assert_allclose(kpm, aug.mirror_keypoints(kp), atol=1e-9)
    i, j = sk.keypoint_index("hand_l"), sk.keypoint_index("hand_r")
    np.testing.assert_allclose(kpm[:, i], kp[:, j] * [-1, 1, 1], atol=1e-9)


def test_mirror_preserves_bone_lengths():
    R, root = _poses()
    skel = sk.CANONICAL
    kp = sk.keypoints_from_fk_np(R, root, skel)
    Rm, rootm, _ = aug.mirror(R, root)
    kpm = sk.keypoints_from_fk_np(Rm, rootm, skel)
    par = np.array(sk.PARENTS[1:] + sk.END_PARENTS)
    child = np.arange(1, 32)
    L = np.linalg.norm(kp[:, child] - kp[:, par], axis=-1)
    Lm = np.linalg.norm(kpm[:, child] - kpm[:, par], axis=-1)
    mk = sk.MIRROR_KEYPOINTS
    Lm_swapped = np.linalg.norm(kpm[:, mk[child]] - kpm[:, mk[par]], axis=-1)
    np.testing.assert_allclose(Lm_swapped, L, atol=1e-9)  # bone (c, p) <-> mirrored bone, same length
    np.testing.assert_allclose(np.sort(L, axis=1), np.sort(Lm, axis=1), atol=1e-9)


def test_random_heading_keeps_heights_and_shape():
    R, root = _poses()
    rng = np.random.default_rng(3)
    kp = sk.keypoints_from_fk_np(R, root)
    Rh, rooth, ang = aug.random_heading(R, root, rng)
    assert ang.shape == (16,) and _orthonormal(Rh)
    kph = sk.keypoints_from_fk_np(Rh, rooth)
    np.testing.assert_allclose(kph[..., 2], kp[..., 2], atol=1e-9)
    # pairwise distances preserved
    np.testing.assert_allclose(np.linalg.norm(kph[:, 5] - kph[:, 9], axis=-1), np.linalg.norm(kp[:, 5] - kp[:, 9], axis=-1), atol=1e-9)
    # sequences: one angle per sequence
    Rs = np.stack([R, R])
    _, _, ang2 = aug.random_heading(Rs, np.stack([root, root]), rng, batch_ndim=1)
    assert ang2.shape == (2,)
    # seeded
    a = aug.random_heading(R, root, np.random.default_rng(5))[2]
    b = aug.random_heading(R, root, np.random.default_rng(5))[2]
    np.testing.assert_array_equal(a, b)


def test_perturb_keeps_rotations_orthonormal_and_is_small():
    R, _ = _poses(64)
    R = R.astype(np.float32)
    rng = np.random.default_rng(4)
    P = aug.perturb_rotations(R, rng, sigma_deg=10.0)
    assert P.dtype == np.float32 and P.shape == R.shape
    assert _orthonormal(P)
    np.testing.assert_allclose(P[:, 0], R[:, 0])  # root untouched by default
    rel = np.swapaxes(R.astype(np.float64), -1, -2) @ P.astype(np.float64)
    ang = np.degrees(np.arccos(np.clip((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2, -1, 1)))
    assert ang.max() < 10.0 * 2.5 * np.sqrt(3) + 1e-3


def test_perturb_knee_stays_hinge_and_not_hyperextended():
    n = 500
    R = np.broadcast_to(np.eye(3), (n, 22, 3, 3)).copy()
    rng = np.random.default_rng(6)
    P = aug.perturb_rotations(R, rng, sigma_deg=20.0)
    for name, ax, sign in (("calf_l", 0, 1.0), ("calf_r", 0, 1.0), ("forearm_l", 2, -1.0), ("forearm_r", 2, 1.0)):
        j = sk.joint_index(name)
        phi = aug._flexion(P[:, j], j, ax, sign)
        assert phi.min() > -1e-6, name  # straight pose never hyperextends
    # knee rotation is mostly about X
    rv = Rotation.from_matrix(P[:, sk.joint_index("calf_l")]).as_rotvec()
    assert np.abs(rv[:, 0]).mean() > 5 * np.abs(rv[:, 1:]).mean()


def test_random_bone_lengths():
    rng = np.random.default_rng(7)
    s = aug.random_bone_lengths(sk.CANONICAL, rng, sigma=0.05, scale_sigma=0.1)
    assert isinstance(s, sk.Skeleton)
    rest = s.rest_keypoints()
    feet = [sk.keypoint_index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    assert abs(rest[feet, 2].min()) < 1e-9  # stands on the floor
    # symmetric by default
    np.testing.assert_allclose(np.abs(s.offsets[sk.MIRROR_JOINTS]), np.abs(s.offsets), atol=1e-12)
    off, end = aug.random_bone_lengths(sk.CANONICAL, rng, batch=32)
    assert off.shape == (32, 22, 3) and end.shape == (32, 10, 3)
    ratio = np.linalg.norm(off[:, 1:], axis=-1) / np.linalg.norm(sk.REST_OFFSETS[1:], axis=-1)
    assert 0.5 < ratio.min() and ratio.max() < 2.0 and ratio.std() > 0.01
    # batched FK with per-sample end offsets matches the per-skeleton FK
    R, root = _poses(32)
    kp = aug.keypoints_from_fk_batched(R, root, off, end)
    for b in (0, 7):
        ref = sk.keypoints_from_fk_np(R[b], root[b], sk.Skeleton(off[b], end[b]))
        np.testing.assert_allclose(kp[b], ref, atol=1e-12)


def test_keypoint_noise_and_drop():
    rng = np.random.default_rng(8)
    kp = np.zeros((1000, 32, 3), np.float32)
    noisy = aug.keypoint_noise(kp, rng, sigma_m=0.01)
    assert noisy.dtype == np.float32
    assert abs(noisy.std() - 0.01) < 0.001
    ps = aug.keypoint_noise(kp, rng, sigma_m=0.02, per_sample=True)
    assert ps.std(axis=(1, 2)).max() <= 0.03
    mask = np.ones((1000, 32), bool)
    mask[:, 5] = False
    m = aug.drop_keypoints(mask, rng, p=0.3, keep=("pelvis",))
    assert m.dtype == bool and not m[:, 5].any() and m[:, 0].all()
    assert abs(1 - m[:, 1:5].mean() - 0.3) < 0.03
    assert not (m & ~mask).any()


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_batched_shapes(shape):
    rng = np.random.default_rng(9)
    R = Rotation.random(int(np.prod(shape)) * 22, random_state=1).as_matrix().reshape(shape + (22, 3, 3))
    root = rng.normal(size=shape + (3,))
    Rm, rm, _ = aug.mirror(R, root)
    assert Rm.shape == R.shape and rm.shape == root.shape
    Rh, rh, ang = aug.random_heading(R, root, rng, batch_ndim=len(shape))
    assert ang.shape == shape and Rh.shape == R.shape
    assert aug.perturb_rotations(R, rng).shape == R.shape
