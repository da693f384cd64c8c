"""Network encoding invariances and joint limits."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import features, fk, limits, network as N, rotations as R  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, joint_index  # noqa: E402

torch.set_num_threads(2)


def _poses(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    L = R.axis_angle_to_matrix(torch.randn(n, 22, 3, generator=g, dtype=torch.float64) * 0.3)
    L = limits.project_to_limits(L)
    root = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64).expand(n, 3)
    off, eo = fk.skeleton_tensors(CANONICAL, dtype=torch.float64)
    return L, root, off, eo


def test_encoding_invariant_to_heading_translation_and_scale():
    L, root, off, eo = _poses()
    kp = fk.fk_keypoints(L, root, off, eo)
    mask = torch.ones(kp.shape[:2], dtype=torch.bool)
    f0, _ = N.encode(kp, mask, off, eo)
    rz = R.rot_z(torch.tensor(1.1, dtype=torch.float64))
    kp2 = kp @ rz.T + torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)
    f1, _ = N.encode(kp2, mask, off, eo)
    np.testing.assert_allclose(f0.numpy(), f1.numpy(), atol=1e-9)
    f2, frame = N.encode(kp * 1.2, mask, off * 1.2, eo * 1.2)
    np.testing.assert_allclose(f0.numpy(), f2.numpy(), atol=1e-9)
    assert torch.allclose(frame[2], torch.full((8,), 1.2, dtype=torch.float64))


def test_missing_keypoints_do_not_leak():
    L, root, off, eo = _poses(2)
    kp = fk.fk_keypoints(L, root, off, eo)
    mask = torch.ones(kp.shape[:2], dtype=torch.bool)
    mask[:, 9] = False
    kp_nan = kp.clone()
    kp_nan[:, 9] = float("nan")
    a, _ = N.encode(kp, mask, off, eo)
    b, _ = N.encode(kp_nan, mask, off, eo)
    assert torch.isfinite(b).all()
    np.testing.assert_allclose(a.numpy(), b.numpy())


def test_network_equivariant_to_heading():
    torch.manual_seed(0)
    net = N.IKNet(32, 1).double().eval()
    torch.nn.init.normal_(net.out.weight, std=0.1)
    L, root, off, eo = _poses(4)
    kp = fk.fk_keypoints(L, root, off, eo)
    mask = torch.ones(kp.shape[:2], dtype=torch.bool)
    la, ra, _ = net.predict(kp, mask, off, eo)
    rz = R.rot_z(torch.tensor(0.7, dtype=torch.float64))
    lb, rb, _ = net.predict(kp @ rz.T, mask, off, eo)
    np.testing.assert_allclose(lb[:, 1:].detach().numpy(), la[:, 1:].detach().numpy(), atol=1e-9)
    np.testing.assert_allclose((rz @ la[:, 0]).detach().numpy(), lb[:, 0].detach().numpy(), atol=1e-9)
    np.testing.assert_allclose((ra @ rz.T).detach().numpy(), rb.detach().numpy(), atol=1e-9)
    # outputs are rotations
    eye = torch.eye(3, dtype=torch.float64)
    np.testing.assert_allclose((la.transpose(-1, -2) @ la).detach().numpy(), eye.expand_as(la).numpy(), atol=1e-9)


def test_sparse_heading_from_pelvis_orientation():
    L, root, off, eo = _poses(3)
    kp = fk.fk_keypoints(L, root, off, eo)
    mask = torch.zeros(kp.shape[:2], dtype=torch.bool)
    mask[:, list(N.EFFECTOR_KP)] = True
    orient = torch.eye(3, dtype=torch.float64).expand(3, 6, 3, 3).clone()
    rz = R.rot_z(torch.tensor(0.5, dtype=torch.float64))
    orient[:, 0] = rz
    om = torch.zeros(3, 6, dtype=torch.bool)
    om[:, 0] = True
    kp_same = kp.clone()
    kp_same[:, list(N.EFFECTOR_KP)] = root[:, None]  # no left/right information in the positions
    h = N.estimate_heading(kp_same, mask, orient, om)
    np.testing.assert_allclose(h.numpy(), 0.5, atol=1e-9)


def test_limit_penalty_behaviour():
    eye = torch.eye(3, dtype=torch.float64).expand(1, 22, 3, 3).clone()
    assert float(limits.limit_penalty(eye)) == 0.0
    knee = joint_index("calf_l")
    bad = eye.clone()
    bad[0, knee] = R.axis_angle_to_matrix(torch.tensor([-0.8, 0.0, 0.0], dtype=torch.float64))  # hyperextension
    good = eye.clone()
    good[0, knee] = R.axis_angle_to_matrix(torch.tensor([1.5, 0.0, 0.0], dtype=torch.float64))  # normal flexion
    assert float(limits.limit_penalty(good)) == 0.0
    p_bad = float(limits.limit_penalty(bad))
    assert p_bad > 0.0
    # quadratic growth and a gradient that points back inside
    aa = torch.tensor([-0.8, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
    x = eye.clone()
    x[0, knee] = R.axis_angle_to_matrix(aa)
    limits.limit_penalty(x).backward()
    assert aa.grad[0] < 0  # increasing x (towards flexion) lowers the penalty
    # projection clamps into the box, leaves valid rotations alone, keeps the root free
    proj = limits.project_to_limits(bad)
    assert float(limits.limit_penalty(proj)) < 1e-12
    np.testing.assert_allclose(limits.project_to_limits(good).numpy(), good.numpy())
    root_spin = eye.clone()
    root_spin[0, 0] = R.axis_angle_to_matrix(torch.tensor([0.0, 0.0, 3.0], dtype=torch.float64))
    np.testing.assert_allclose(limits.project_to_limits(root_spin).numpy(), root_spin.numpy())


def test_limits_are_mirrored():
    lo, hi = limits.limit_arrays(torch.float64)
    l, r = joint_index("forearm_l"), joint_index("forearm_r")
    assert torch.allclose(lo[l, 0], lo[r, 0]) and torch.allclose(hi[l, 0], hi[r, 0])
    assert torch.allclose(lo[l, 2], -hi[r, 2]) and torch.allclose(hi[l, 2], -lo[r, 2])
    assert math.isclose(float(hi[joint_index("calf_l"), 0]), math.radians(165))


def test_skeleton_features_lengths_and_offsets():
    off, eo = fk.skeleton_tensors(CANONICAL, dtype=torch.float64)
    off, eo = off.expand(3, -1, -1).clone(), eo.expand(3, -1, -1).clone()
    scale = N.skeleton_scale(off, eo)
    for kind in N.SKELETON_INPUTS:      # the canonical skeleton reads as zeros, at any size
        f = N.skeleton_features(off, eo, scale, kind)
        assert f.shape == (3, N.SKELETON_INPUTS[kind]) and float(f.abs().max()) < 1e-9
        f2 = N.skeleton_features(off * 1.3, eo * 1.3, N.skeleton_scale(off * 1.3, eo * 1.3), kind)
        assert float(f2.abs().max()) < 1e-9
    # a clavicle that sits elsewhere, as long as before: only the offsets show it
    c = joint_index("clavicle_l")
    turn = R.axis_angle_to_matrix(torch.tensor([0.3, 0.3, 0.3], dtype=torch.float64))
    off2 = off.clone()
    off2[0, c] = turn @ off[0, c]
    lengths = N.skeleton_features(off2, eo, scale, "lengths")
    offsets = N.skeleton_features(off2, eo, scale, "offsets")
    assert float(lengths.abs().max()) < 1e-9
    assert float(offsets[0].abs().max()) > 0.01 and float(offsets[1:].abs().max()) < 1e-9
    np.testing.assert_allclose(offsets[0].reshape(-1, 3)[c - 1].numpy(), (off2[0, c] - off[0, c]).numpy() / float(scale[0]))
    # the lengths as the network always read them: each bone over the scaled canonical one, minus 1
    off3 = off * torch.linspace(0.8, 1.2, 22, dtype=torch.float64)[None, :, None]
    s3 = N.skeleton_scale(off3, eo)
    want = off3[:, 1:].norm(dim=-1) / off[:, 1:].norm(dim=-1) / s3[:, None] - 1.0
    np.testing.assert_allclose(N.skeleton_features(off3, eo, s3, "lengths")[:, :21].numpy(), want.numpy(), atol=1e-12)
    # numpy and torch alike
    for kind in N.SKELETON_INPUTS:
        a = N.skeleton_features(off2, eo, scale, kind).numpy()
        b = N.skeleton_features(off2.numpy(), eo.numpy(), scale.numpy(), kind)
        np.testing.assert_allclose(a, b, atol=1e-12)
    assert N.num_features("offsets") - N.num_features("lengths") == 2 * N.SKELETON_INPUTS["lengths"]
    with pytest.raises(ValueError, match="skeleton_input"):
        N.IKNet(8, 1, skeleton_input="angles")


def test_bone_directions_read_the_pose_the_same_for_other_proportions():
    # the same pose on a body with 30 % longer thighs and shins and a longer spine: the keypoints'
    # positions move, every bone's direction stays; a bone with a missing end reads zero
    L, root, off, eo = _poses(4, seed=3)
    kp = fk.fk_keypoints(L, root, off, eo)
    off2 = off.clone()
    for n, f in (("calf_l", 1.3), ("calf_r", 1.3), ("foot_l", 1.3), ("foot_r", 1.3), ("spine2", 1.2)):
        off2[joint_index(n)] *= f
    kp2 = fk.fk_keypoints(L, root, off2, eo)
    mask = torch.ones(4, 32, dtype=torch.bool)
    m = mask.double()
    a = N.bone_directions(kp, m).reshape(4, 31, 3)
    b = N.bone_directions(kp2, m).reshape(4, 31, 3)
    assert float((kp - kp2).abs().max()) > 0.05
    n = a.norm(dim=-1)
    long = torch.cat([off[1:], eo]).norm(dim=-1) > 0.1     # (unit vectors, but for the shortest bones)
    np.testing.assert_allclose(n[:, long].numpy(), 1.0, atol=0.02)
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=0.005)
    mask[:, joint_index("forearm_l")] = False
    c = N.bone_directions(kp, mask.double()).reshape(4, 31, 3)
    hit = [i for i in range(31) if i + 1 == joint_index("forearm_l") or int(features._BONE_PARENT[i]) == joint_index("forearm_l")]
    assert len(hit) == 2 and float(c[:, hit].abs().max()) == 0.0    # the upper arm and the forearm
    keep = [i for i in range(31) if i not in hit]
    np.testing.assert_allclose(c[:, keep].numpy(), a[:, keep].numpy())
    np.testing.assert_allclose(N.bone_directions(kp.numpy(), m.numpy()), N.bone_directions(kp, m).numpy(), atol=1e-12)
    # in the features, after the positions, for a network that reads them
    feats, _ = N.encode(kp, mask, off, eo, pose_input="directions")
    plain, _ = N.encode(kp, mask, off, eo)
    assert feats.shape[1] == N.num_features("lengths", "directions") == plain.shape[1] + 93
    np.testing.assert_allclose(feats[:, :96].numpy(), plain[:, :96].numpy())
    np.testing.assert_allclose(feats[:, 96:189].numpy(), N.bone_directions(feats[:, :96].reshape(4, 32, 3), mask.double()).numpy(),
                               atol=1e-12)
    with pytest.raises(ValueError, match="pose_input"):
        N.IKNet(8, 1, pose_input="velocities")
