"""Solver: result dtypes, bounded memory, and the CUDA path (CUDA tests skip without a GPU)."""

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import inference as I  # noqa: E402
from training import train as T  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, KEYPOINTS, keypoints_from_fk_np  # noqa: E402

torch.set_num_threads(2)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "tiny.pt"
    T.export_weights(T.IKNet(32, 1), path, T.TrainConfig(), {})
    return path


@pytest.fixture(scope="module")
def poses():
    d = T.synthetic_pose_data(300, seed=7, sigma_deg=12.0)
    sk = CANONICAL.scaled(0.97)
    kp = keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), sk)
    kp[::7, 5] = np.nan  # some keypoints missing
    return kp, sk


def _sparse(kp):
    sp = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sp[:, eff] = kp[:, eff]
    return sp


def test_float32_results_equal_float64(weights, poses):
    kp, sk = poses
    s = I.Solver(weights, device="cpu")
    a = s.solve(kp, skeleton=sk, batch_size=64)
    b = s.solve(kp.astype(np.float32), skeleton=sk, batch_size=64, dtype=np.float32)
    assert a.local_rot.dtype == np.float64 and b.local_rot.dtype == np.float32
    assert b.root_pos.dtype == np.float32 and b.keypoints.dtype == np.float32
    assert a.device == b.device == "cpu"
    np.testing.assert_allclose(a.keypoints, b.keypoints, atol=1e-5)
    np.testing.assert_allclose(a.error_mm, b.error_mm, atol=1e-3, equal_nan=True)
    # the error is the mean distance to the given keypoints
    given = np.isfinite(kp).all(-1)
    ref = np.array([np.linalg.norm(a.keypoints[t][given[t]] - kp[t][given[t]], axis=-1).mean() * 1000
                    for t in range(len(kp))])
    np.testing.assert_allclose(a.error_mm, ref, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="dtype"):
        s.solve(kp, skeleton=sk, dtype=np.int32)


def test_lone_last_frame_and_sparse_orientations(weights, poses):
    kp, sk = poses
    s = I.Solver(weights, device="cpu")
    sp = _sparse(kp[:9])
    ori = np.full((9, 6, 3, 3), np.nan)
    ori[:, 0] = np.eye(3)
    whole = s.solve(sp, skeleton=sk, orientations=ori, batch_size=16)
    split = s.solve(sp, skeleton=sk, orientations=ori, batch_size=4)  # 4 + 4 + a lone frame (numpy twin)
    assert whole.mode == split.mode == "sparse"
    # (the tiny random network leaves sparse frames far from converged, so the batches are not compared)
    assert np.isfinite(split.keypoints).all() and np.isfinite(split.error_mm).all()
    np.testing.assert_allclose(whole.keypoints[:, 0], split.keypoints[:, 0], atol=1e-2)
    dense = s.solve(kp[:9], skeleton=sk, batch_size=16)
    dense_split = s.solve(kp[:9], skeleton=sk, batch_size=4)
    np.testing.assert_allclose(dense.keypoints, dense_split.keypoints, atol=1e-3)
    np.testing.assert_allclose(dense.error_mm, dense_split.error_mm, atol=0.5)


def test_memory_does_not_grow_with_the_clip_beyond_the_outputs(weights, poses):
    kp, sk = poses
    s = I.Solver(weights, device="cpu")
    big = np.tile(kp, (80, 1, 1))  # 24,000 frames: a (T, 32, 3) float64 copy would be 18 MB
    s.solve(big[:600], skeleton=sk, batch_size=512, refine=False)  # warm up (caches)
    for dtype in (np.float32, np.float64):
        item = np.dtype(dtype).itemsize
        outputs = len(big) * ((22 * 9 + 3 + 32 * 3) * item + 8)
        tracemalloc.start()
        r = s.solve(big, skeleton=sk, batch_size=512, refine=False, dtype=dtype)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert r.local_rot.shape[0] == len(big)
        # outputs, the (T, 32) masks and a batch's worth of temporaries; no (T, 32, 3) float64 copies
        assert peak < outputs + len(big) * 3 * 32 + 6e6, (dtype, peak, outputs)


def _close_frames(a, b, atol=1e-3, median=1e-4):
    """The share of frames whose keypoints all lie within ``atol`` of each other (the median frame's
    largest difference is asserted under ``median``)."""
    worst = np.abs(a - b).max(axis=(1, 2))
    assert np.median(worst) < median, np.median(worst)
    return float(np.mean(worst <= atol))


@cuda
def test_cuda_matches_cpu_float32_and_float64(weights, poses, monkeypatch):
    """A GPU solve is the CPU's torch solve (float32 refinement) on another device: the same poses,
    but for a few frames where an untrained network's start leaves the refinement ill-posed (the
    summation order decides there)."""
    from neural_ik.model import batches

    monkeypatch.setattr(batches, "NUMPY_MAX_FRAMES", 0)    # (numpy refines in float64: other arithmetic)
    kp, sk = poses
    cpu = I.Solver(weights, device="cpu", precision="float32").solve(kp, skeleton=sk, batch_size=128)
    g = I.Solver(weights, device="cuda")
    for dtype in (np.float64, np.float32):
        r = g.solve(kp, skeleton=sk, batch_size=128, dtype=dtype)
        assert r.device == "cuda" and r.local_rot.dtype == dtype
        assert _close_frames(r.keypoints, cpu.keypoints) >= 0.97
        assert np.nanmedian(np.abs(r.error_mm - cpu.error_mm)) < 1e-2
    sp = _sparse(kp)
    ori = np.full((len(kp), 6, 3, 3), np.nan)
    ori[:, 0] = np.eye(3)
    a = I.Solver(weights, device="cpu", precision="float32").solve(sp, skeleton=sk, orientations=ori, batch_size=100)
    b = g.solve(sp, skeleton=sk, orientations=ori, batch_size=100, dtype=np.float32)
    # (six effectors and a prior that fades: many poses reach them, float32 sums pick among them)
    assert _close_frames(a.keypoints, b.keypoints, atol=5e-3, median=1e-3) >= 0.9


@cuda
def test_cuda_progress_and_pinned_outputs(weights, poses):
    kp, sk = poses
    calls = []
    r = I.Solver(weights, device="cuda").solve(kp, skeleton=sk, batch_size=128, dtype=np.float32,
                                                 progress=lambda d, t: calls.append((d, t)))
    assert calls == [(128, 300), (256, 300), (300, 300)]
    assert torch.from_numpy(r.local_rot).is_pinned()


@cuda
def test_single_pose_on_a_cuda_solver_runs_on_the_cpu(weights, poses):
    kp, sk = poses
    g = I.Solver(weights, device="cuda")
    one = g.solve(kp[0], skeleton=sk)
    few = g.solve(kp[:I.CPU_MAX_FRAMES_ON_CUDA], skeleton=sk)
    many = g.solve(kp[:I.CPU_MAX_FRAMES_ON_CUDA + 1], skeleton=sk)
    assert one.device == few.device == "cpu" and many.device == "cuda"
    ref = I.Solver(weights, device="cpu").solve(kp[:I.CPU_MAX_FRAMES_ON_CUDA + 1], skeleton=sk)
    np.testing.assert_allclose(one.keypoints[0], ref.keypoints[0], atol=2e-4)
    np.testing.assert_allclose(many.keypoints, ref.keypoints, atol=1e-3)


def test_preload_loads_in_the_background_and_get_solver_shares_it(weights):
    from neural_ik.model import cache as model_cache
    from neural_ik.pipeline import cache

    model_cache.clear_solver_cache()
    assert cache.preload_solver("cpu", weights=str(weights), precision="float32")
    solver = cache.get_solver("cpu", weights=str(weights), precision="float32")   # waits, no second load
    assert not cache.solver_loading()
    assert len(model_cache._SOLVERS) == 1 and next(iter(model_cache._SOLVERS.values())) is solver
    out = solver.solve(np.asarray(CANONICAL.rest_keypoints())[None], mode="dense")
    assert np.isfinite(out.local_rot).all()
    model_cache.clear_solver_cache()


def test_preload_failure_is_reported_by_the_next_get_solver(tmp_path):
    from neural_ik.pipeline import cache
    from neural_ik.pipeline.options import BakeError

    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a weights file")
    cache.preload_solver("cpu", weights=str(bad))          # the thread fails quietly ...
    with pytest.raises(BakeError, match="broken.pt"):      # ... and the caller hears of it
        cache.get_solver("cpu", weights=str(bad))
    assert not cache.solver_loading()
