"""Smoothing of keypoints and quaternions (plain numpy + scipy)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix  # noqa: E402
from neural_ik.retarget.smoothing import METHODS, filter_params, one_euro, smooth_keypoints, \
    smooth_rotations  # noqa: E402

FPS = 30.0
SMOOTHERS = [m for m in METHODS if m != "none"]


def clean_signal(T=150, K=5):
    t = np.arange(T) / FPS
    base = np.stack([np.sin(2 * np.pi * 0.5 * t), 0.5 * np.cos(2 * np.pi * 0.3 * t), 0.3 * t], -1)
    return base[:, None, :] + np.arange(K)[None, :, None] * 0.1


def mean_acc(x):
    return float(np.nanmean(np.linalg.norm(np.diff(x, 2, axis=0), axis=-1)))


@pytest.mark.parametrize("method", SMOOTHERS)
def test_reduces_jitter_keeps_clean_signal(method):
    rng = np.random.default_rng(0)
    clean = clean_signal()
    noisy = clean + rng.normal(size=clean.shape) * 0.01
    out = smooth_keypoints(noisy, method, 0.5, FPS)
    assert out.shape == noisy.shape
    assert mean_acc(out) < 0.5 * mean_acc(noisy)
    assert np.mean(np.abs(out - clean)) < np.mean(np.abs(noisy - clean))
    kept = smooth_keypoints(clean, method, 0.5, FPS)
    assert np.mean(np.abs(kept - clean)) < 0.015
    # stronger smoothing smooths more
    assert mean_acc(smooth_keypoints(noisy, method, 1.0, FPS)) < mean_acc(smooth_keypoints(noisy, method, 0.2, FPS))


@pytest.mark.parametrize("method", METHODS)
def test_none_and_zero_strength_unchanged(method):
    x = clean_signal() + np.random.default_rng(1).normal(size=clean_signal().shape) * 0.01
    assert np.array_equal(smooth_keypoints(x, method, 0.0, FPS), x)
    assert np.array_equal(smooth_keypoints(x, "none", 1.0, FPS), x)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("T", [0, 1, 2, 3, 4, 6, 9])
def test_short_clips(method, T):
    rng = np.random.default_rng(T)
    x = rng.normal(size=(T, 3, 3))
    out = smooth_keypoints(x, method, 1.0, FPS)
    assert out.shape == x.shape and np.all(np.isfinite(out))
    q = rng.normal(size=(T, 2, 4))
    qo = smooth_rotations(q, method, 1.0, FPS)
    assert qo.shape == q.shape
    if T:
        assert np.allclose(np.linalg.norm(qo, axis=-1), 1.0)


@pytest.mark.parametrize("method", SMOOTHERS)
def test_nan_aware(method):
    rng = np.random.default_rng(2)
    clean = clean_signal()
    x = clean + rng.normal(size=clean.shape) * 0.01
    x[40:50, 1] = np.nan
    x[:, 3, 0] = np.nan  # a coordinate never seen
    out = smooth_keypoints(x, method, 0.5, FPS)
    assert np.array_equal(np.isnan(out), np.isnan(x))
    ok = ~np.isnan(x)
    assert np.mean(np.abs(out[ok] - clean[ok])) < 0.015


@pytest.mark.parametrize("method", SMOOTHERS)
def test_rotations_on_manifold(method):
    rng = np.random.default_rng(3)
    T = 120
    t = np.arange(T) / FPS
    axis = np.array([0.3, 0.9, 0.1]) / np.linalg.norm([0.3, 0.9, 0.1])
    clean = matrix_to_quat(axis_angle_to_matrix((1.5 * np.sin(2 * np.pi * 0.4 * t))[:, None] * axis))[:, None]
    noise = matrix_to_quat(axis_angle_to_matrix(rng.normal(size=(T, 1, 3)) * 0.03))
    noisy = matrix_to_quat(quat_to_matrix(clean) @ quat_to_matrix(noise))
    noisy[::2] *= -1  # sign flips must not matter
    out = smooth_rotations(noisy, method, 0.5, FPS)
    assert np.allclose(np.linalg.norm(out, axis=-1), 1.0)
    assert np.sum(out[1:] * out[:-1], axis=-1).min() > 0  # continuous

    def ang(a, b):
        return 2 * np.arccos(np.clip(np.abs(np.sum(a * b, axis=-1)), 0, 1))

    # One-Euro keeps some lag at the clip ends
    assert ang(out, clean).mean() < (0.8 if method == "oneeuro" else 0.6) * ang(noisy, clean).mean()
    assert ang(out[1:], out[:-1]).std() < ang(noisy[1:], noisy[:-1]).std()


def test_params_and_errors():
    for m in METHODS:
        filter_params(m, 0.5, FPS)
    assert filter_params("savgol", 1.0, FPS)["window"] % 2 == 1
    assert filter_params("butter", 0.0, 10.0)["cutoff"] < 5.0  # below Nyquist
    with pytest.raises(ValueError):
        smooth_keypoints(np.zeros((5, 1, 3)), "kalman", 0.5, FPS)
    # the causal One-Euro filter follows a constant exactly and lags a ramp
    assert np.allclose(one_euro(np.ones((10, 2)), FPS), 1.0)
