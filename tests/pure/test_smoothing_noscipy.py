"""Without scipy (Blender's own Python bundles numpy only): the same smoothing, the same solve.

- The numpy ports of the Savitzky-Golay filter, the Butterworth design and
  ``filtfilt`` equal scipy's to rounding (when scipy is installed).
- The refinement's one-frame solve falls back to torch without scipy.
- ``tests/blender/test_bake_noscipy.py`` bakes with scipy unimportable.
"""

import subprocess
import sys

import numpy as np
import pytest

from devpkg import REPO


def _smoothing():
    from neural_ik.retarget import smoothing

    return smoothing


@pytest.mark.parametrize("T", [3, 4, 7, 30, 301])
def test_numpy_savgol_equals_scipy(T):
    signal = pytest.importorskip("scipy.signal")
    sm = _smoothing()
    x = np.cumsum(np.random.default_rng(T).normal(size=(T, 6)), 0)
    for window, order in ((3, 2), (5, 2), (7, 3), (17, 3)):
        window = min(window, T if T % 2 else T - 1)
        if window < 3:
            continue
        order = min(order, window - 1)
        want = signal.savgol_filter(x, window, order, axis=0, mode="interp")
        assert np.allclose(sm.savgol_numpy(x, window, order), want, atol=1e-9, rtol=0)


@pytest.mark.parametrize("T", [3, 8, 30, 301])
def test_numpy_butterworth_filtfilt_equals_scipy(T):
    signal = pytest.importorskip("scipy.signal")
    sm = _smoothing()
    x = np.cumsum(np.random.default_rng(T).normal(size=(T, 5)), 0)
    for cutoff, fs in ((12.0, 30.0), (0.6, 30.0), (5.0, 120.0), (13.5, 30.0)):
        for order in (1, 2, 3, 4):
            b, a = signal.butter(order, cutoff, btype="low", fs=fs)
            b2, a2 = sm.butter_numpy(order, cutoff, fs)
            assert np.allclose(b, b2, atol=1e-12, rtol=1e-9) and np.allclose(a, a2, atol=1e-12, rtol=1e-9)
        b, a = signal.butter(2, cutoff, btype="low", fs=fs)
        padlen = min(6, T - 1)
        want = signal.filtfilt(b, a, x, axis=0, padlen=padlen)
        assert np.allclose(sm.filtfilt_numpy(b, a, x, padlen), want, atol=1e-9, rtol=0)


def test_refine_without_scipy_uses_torch():
    """The LM loop's one-frame LAPACK path (model/lm.py) falls back to torch's Cholesky without scipy."""
    code = r"""
import sys
sys.modules["scipy"] = None
sys.path.insert(0, sys.argv[1])
from devpkg import import_package
import_package()
import numpy as np
import torch
from neural_ik.model import lm
assert lm._lapack() is None
H = np.array([[[4.0, 1.0], [1.0, 3.0]]])
g = np.array([[1.0, 2.0]])
x, ok = lm.NUMPY.solve_spd(H, g)
assert ok.all() and np.allclose(H[0] @ x[0], -g[0]), x
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_short_tracks_do_not_import_scipy_signal():
    """Importing scipy.signal takes longer than filtering a short clip: the numpy ports do it; long
    tracks, or a process that has it loaded, use scipy (the same results to rounding)."""
    code = r"""
import sys
sys.path.insert(0, sys.argv[1])
from devpkg import import_package
import_package()
import numpy as np
from neural_ik.retarget import smoothing as sm
x = np.cumsum(np.random.default_rng(0).normal(size=(sm.NUMPY_FRAMES, 3, 3)), 0)
short = sm.smooth_keypoints(x, "butter", 0.5, 30.0)
sm.smooth_keypoints(x[:200], "savgol", 0.5, 30.0)
assert "scipy.signal" not in sys.modules
long = sm.smooth_keypoints(np.concatenate([x, x[::-1]]), "butter", 0.5, 30.0)
assert "scipy.signal" in sys.modules and np.isfinite(long).all()
again = sm.smooth_keypoints(x, "butter", 0.5, 30.0)    # loaded now: scipy's, to rounding
assert np.allclose(again, short, atol=1e-9), np.abs(again - short).max()
print("ok")
"""
    pytest.importorskip("scipy.signal")
    result = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
