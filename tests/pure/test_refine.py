"""Gauss-Newton refinement reaches its targets."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import fk, limits, network as N, refine as RF, rotations as R, tree_solve as TS  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, joint_index, keypoint_index  # noqa: E402

torch.set_num_threads(2)


def _problem(n=16, seed=0, init_sigma=0.1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    gt = limits.project_to_limits(R.axis_angle_to_matrix(torch.randn(n, 22, 3, generator=g, dtype=dtype) * 0.3))
    gt[:, 0] = R.axis_angle_to_matrix(torch.randn(n, 3, generator=g, dtype=dtype))
    root = torch.tensor([0.0, 0.0, 0.95], dtype=dtype) + 0.05 * torch.randn(n, 3, generator=g, dtype=dtype)
    off, eo = fk.skeleton_tensors(CANONICAL, dtype=dtype)
    target = fk.fk_keypoints(gt, root, off, eo)
    init = gt @ R.axis_angle_to_matrix(torch.randn(n, 22, 3, generator=g, dtype=dtype) * init_sigma)
    init_root = root + 0.02 * torch.randn(n, 3, generator=g, dtype=dtype)
    return gt, root, init, init_root, target, off, eo


def test_dense_refinement_reaches_targets():
    gt, root, init, r0, target, off, eo = _problem()
    w = torch.ones(target.shape[:2], dtype=target.dtype)
    before = (fk.fk_keypoints(init, r0, off, eo) - target).norm(dim=-1).mean()
    L, t = RF.refine(init, r0, target, w, off, eo, steps=8)
    after = (fk.fk_keypoints(L, t, off, eo) - target).norm(dim=-1).mean()
    assert before > 0.02
    assert after < 1e-4, float(after)  # < 0.1 mm
    # still proper rotations
    eye = torch.eye(3, dtype=L.dtype).expand_as(L)
    assert torch.allclose(L.transpose(-1, -2) @ L, eye, atol=1e-8)


def test_sparse_refinement_reaches_effectors_and_keeps_the_rest():
    gt, root, init, r0, target, off, eo = _problem(seed=1)
    w = torch.zeros(target.shape[:2], dtype=target.dtype)
    w[:, list(N.EFFECTOR_KP)] = 1.0
    L, t = RF.refine(init, r0, target, w, off, eo, steps=8)
    kp = fk.fk_keypoints(L, t, off, eo)
    err = (kp - target)[:, list(N.EFFECTOR_KP)].norm(dim=-1)
    assert err.max() < 1e-3, float(err.max())  # every effector within 1 mm
    # joints that move no effector keep the initial rotation exactly
    toe = joint_index("toe_l")
    assert torch.allclose(L[:, toe], init[:, toe], atol=1e-12)
    # the prior keeps the solution near the initial pose
    assert R.geodesic_angle(L, init).mean() < 0.2


def test_orientation_targets():
    gt, root, init, r0, target, off, eo = _problem(seed=2)
    w = torch.zeros(target.shape[:2], dtype=target.dtype)
    w[:, list(N.EFFECTOR_KP)] = 1.0
    wr_gt, _ = fk.forward_kinematics(gt, root, off)
    ot = wr_gt[:, list(N.EFFECTOR_JOINTS)]
    ow = torch.full((gt.shape[0], 6), 0.01, dtype=gt.dtype)
    L, t = RF.refine(init, r0, target, w, off, eo, steps=10, orient_targets=ot, orient_weights=ow)
    wr, _ = fk.forward_kinematics(L, t, off)
    ang = R.geodesic_angle(wr[:, list(N.EFFECTOR_JOINTS)], ot)
    assert ang.max() < 0.01, float(ang.max())


def test_zero_steps_and_no_targets_return_input():
    gt, root, init, r0, target, off, eo = _problem(n=2)
    L, t = RF.refine(init, r0, target, torch.ones(2, 32, dtype=target.dtype), off, eo, steps=0)
    assert L is init and t is r0
    L, t = RF.refine(init, r0, target, torch.zeros(2, 32, dtype=target.dtype), off, eo, steps=3)
    assert torch.equal(L, init)


def test_refinement_respects_knee_limit():
    # a target that needs the knee bent backwards (hyperextension) is not reached that way
    dtype = torch.float64
    off, eo = fk.skeleton_tensors(CANONICAL, dtype=dtype)
    L0 = torch.eye(3, dtype=dtype).expand(1, 22, 3, 3).clone()
    knee = joint_index("calf_l")
    bent_back = L0.clone()
    bent_back[0, knee] = R.axis_angle_to_matrix(torch.tensor([-0.9, 0.0, 0.0], dtype=dtype))
    root = torch.tensor([[0.0, 0.0, 0.95]], dtype=dtype)
    target = fk.fk_keypoints(bent_back, root, off, eo)
    w = torch.zeros(1, 32, dtype=dtype)
    w[0, keypoint_index("foot_l")] = 1.0
    w[0, keypoint_index("thigh_l")] = 1.0
    w[0, keypoint_index("calf_l")] = 1.0
    L, _ = RF.refine(L0, root, target, w, off, eo, steps=10, limits=True)
    v = R.matrix_to_axis_angle(L[0, knee])
    lo, _ = limits.limit_arrays(dtype)
    assert v[0] > lo[knee, 0] - 0.05  # within 3 degrees of the hyperextension limit
    L2, _ = RF.refine(L0, root, target, w, off, eo, steps=10, limits=False)
    assert R.matrix_to_axis_angle(L2[0, knee])[0] < -0.6  # without limits it bends backwards


def test_float32_batch():
    gt, root, init, r0, target, off, eo = _problem(n=64, seed=3, dtype=torch.float32)
    w = torch.ones(target.shape[:2])
    L, t = RF.refine(init, r0, target, w, off, eo, steps=6)
    after = (fk.fk_keypoints(L, t, off, eo) - target).norm(dim=-1).mean()
    assert after < 5e-4


def test_numpy_twin_matches_torch():
    gt, root, init, r0, target, off, eo = _problem(n=3, seed=4)
    w = torch.zeros(target.shape[:2], dtype=target.dtype)
    w[:, list(N.EFFECTOR_KP)] = 1.0
    w[:, :5] = 1.0
    wr_gt, _ = fk.forward_kinematics(gt, root, off)
    ot = wr_gt[:, list(N.EFFECTOR_JOINTS)]
    ow = torch.full((3, 6), 0.01, dtype=gt.dtype)
    a = RF.refine(init, r0, target, w, off, eo, steps=4, orient_targets=ot, orient_weights=ow)
    b = RF.refine_numpy(init.numpy(), r0.numpy(), target.numpy(), w.numpy(), off.numpy(), eo.numpy(), steps=4,
                        orient_targets=ot.numpy(), orient_weights=ow.numpy())
    np.testing.assert_allclose(a[0].numpy(), b[0], atol=1e-8)
    np.testing.assert_allclose(a[1].numpy(), b[1], atol=1e-8)
    c = RF.refine_numpy(init[:1].numpy(), r0[:1].numpy(), target[:1].numpy(), w[:1].numpy(), off.numpy(), eo.numpy(), steps=4,
                        orient_targets=ot[:1].numpy(), orient_weights=ow[:1].numpy())  # single frame (scipy path)
    np.testing.assert_allclose(c[0], b[0][:1], atol=1e-8)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_tree_solver_matches_dense_cholesky(backend):
    # the sparse (tree-ordered) factorisation used for large batches, one code on either array library
    rng = np.random.default_rng(7)
    arr = (lambda a: torch.as_tensor(a)) if backend == "torch" else (lambda a: a)
    for J in (list(range(22)), [0, 1, 2, 3, 4, 5, 13, 14, 15, 16, 17]):
        nj = len(J)
        n = 3 * nj + 3
        anc = TS.ANC_INCL[np.ix_(J, J)]
        pat = np.ones((n, n), dtype=bool)
        pat[: 3 * nj, : 3 * nj] = np.kron(anc | anc.T, np.ones((3, 3), dtype=bool))
        X = rng.standard_normal((8, n, 2 * n))
        H = (X @ np.swapaxes(X, 1, 2) / n) * pat + 0.5 * np.eye(n)
        rhs = rng.standard_normal((8, n))
        ref = -np.linalg.solve(H, rhs[..., None])[..., 0]
        x, info = TS.tree_cholesky_solve(arr(H.copy()), arr(rhs), J)
        np.testing.assert_allclose(np.asarray(x), ref, atol=1e-9)
        assert not np.asarray(info).any()
        H[3] = -H[3]  # not positive definite: flagged
        assert np.asarray(TS.tree_cholesky_solve(arr(H), arr(rhs), J)[1])[3] != 0


def test_large_batch_refinement_matches_small_batches():
    gt, root, init, r0, target, off, eo = _problem(n=TS.TREE_SOLVE_MIN_BATCH, seed=5)
    w = torch.ones(target.shape[:2], dtype=target.dtype)
    L, t = RF.refine(init, r0, target, w, off, eo, steps=4)  # tree solver
    L2, t2 = RF.refine(init[:8], r0[:8], target[:8], w[:8], off, eo, steps=4)  # LAPACK
    assert torch.allclose(L[:8], L2, atol=1e-8) and torch.allclose(t[:8], t2, atol=1e-8)
    # sparse effectors with orientation targets (pair terms of the normal matrix)
    w = torch.zeros(target.shape[:2], dtype=target.dtype)
    w[:, list(N.EFFECTOR_KP)] = 1.0
    wr_gt, _ = fk.forward_kinematics(gt, root, off)
    ot = wr_gt[:, list(N.EFFECTOR_JOINTS)]
    ow = torch.full((gt.shape[0], 6), 0.01, dtype=gt.dtype)
    ow[::3, 2] = 0.0
    L, t = RF.refine(init, r0, target, w, off, eo, steps=4, orient_targets=ot, orient_weights=ow)
    L2, t2 = RF.refine(init[:8], r0[:8], target[:8], w[:8], off, eo, steps=4, orient_targets=ot[:8], orient_weights=ow[:8])
    assert torch.allclose(L[:8], L2, atol=1e-8) and torch.allclose(t[:8], t2, atol=1e-8)


def test_each_backend_factorises_the_tree_from_its_own_batch():
    """numpy and torch on the CPU from small batches; a GPU only from very large ones (its dense
    matrix and batched Cholesky outrun the tree's column loop of small kernels below that)."""
    from neural_ik.model import lm

    assert RF._tree_min_batch(lm.NUMPY) == TS.NUMPY_TREE_MIN_BATCH
    assert RF._tree_min_batch(lm.torch_ops(torch.float32, "cpu")) == TS.TREE_SOLVE_MIN_BATCH
    assert RF._tree_min_batch(lm.torch_ops(torch.float32, "cuda")) == TS.CUDA_TREE_SOLVE_MIN_BATCH
    assert TS.NUMPY_TREE_MIN_BATCH <= TS.TREE_SOLVE_MIN_BATCH < 4096 < TS.CUDA_TREE_SOLVE_MIN_BATCH
