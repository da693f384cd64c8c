"""Temporal smoothing of keypoints and rotations.

Methods (:data:`METHODS`):

- ``"none"``: unchanged copy.
- ``"oneeuro"``: One-Euro filter (Casiez et al. 2012), adaptive cutoff
  (smooths slow motion strongly, follows fast motion). Run forward and
  backward and averaged (offline use: the two lags cancel; :func:`one_euro`
  is the plain causal filter). Sequential over frames (inherent), vectorised
  over all other axes.
- ``"savgol"``: zero-phase Savitzky-Golay (``scipy.signal.savgol_filter``,
  ``mode="interp"``).
- ``"butter"``: zero-phase Butterworth low-pass (``scipy.signal.butter`` +
  ``filtfilt``, odd padding).

A single ``strength`` in [0, 1] sets each filter's parameters (0 = no
change); see :func:`filter_params`. Keypoints may contain NaN (missing
detections): gaps are linearly interpolated for filtering and put back as
NaN. Quaternions are made sign-continuous (hemisphere aligned), filtered
component-wise and renormalised, which is accurate for the small angular
steps between frames. Clips shorter than a filter's window are handled by
shrinking the window (or returning the input for 1-2 frames).

``scipy`` is optional: Blender's Python bundles numpy but not scipy. The two
zero-phase filters use scipy's compiled routines when it imports and
otherwise numpy ports of the same algorithms (:func:`savgol_numpy`,
:func:`butter_numpy`, :func:`filtfilt_numpy`), which give the same results
(to rounding; compared with scipy in ``tests/pure/test_smoothing_noscipy.py``).
"""

from __future__ import annotations

import sys

import numpy as np

from .channels import quat_continuity

__all__ = ["METHODS", "filter_params", "smooth_keypoints", "smooth_rotations", "one_euro", "savgol_numpy",
           "butter_numpy", "filtfilt_numpy"]

METHODS = ("none", "oneeuro", "savgol", "butter")


def filter_params(method: str, strength: float, fps: float) -> dict:
    """Parameters a method uses for a given strength.

    - oneeuro: ``min_cutoff`` from 6 Hz (strength 0) down to 0.3 Hz
      (strength 1), log-spaced; ``beta`` (per unit/s) from 1.5 down to 0.15;
      ``d_cutoff`` 1 Hz.
    - savgol: window ``0.05 + 0.55 * strength`` seconds (odd, >= 5 frames
      when strength > 0), polynomial order 3 (2 for short windows).
    - butter: cutoff ``12 * 0.05 ** strength`` Hz (12 Hz down to 0.6 Hz), order 2,
      capped below Nyquist.
    """
    s = float(np.clip(strength, 0.0, 1.0))
    fps = float(fps)
    if method == "oneeuro":
        return {"min_cutoff": 6.0 * (0.05 ** s), "beta": 1.5 * (0.1 ** s), "d_cutoff": 1.0}
    if method == "savgol":
        win = int(round((0.05 + 0.55 * s) * fps))
        win = max(win, 5) | 1
        return {"window": win, "polyorder": 3 if win >= 7 else 2}
    if method == "butter":
        cutoff = min(12.0 * (0.05 ** s), 0.45 * fps)
        return {"cutoff": cutoff, "order": 2}
    if method == "none":
        return {}
    raise ValueError(f"unknown smoothing method {method!r}; known: {', '.join(METHODS)}")


def _alpha(cutoff, dt):
    tau = 1.0 / (2.0 * np.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


def one_euro(x: np.ndarray, fps: float, min_cutoff: float = 1.0, beta: float = 0.0,
             d_cutoff: float = 1.0) -> np.ndarray:
    """One-Euro filter along axis 0 of ``x`` (T, ...), vectorised over the rest (no NaN)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    if len(x) == 0:
        return out
    dt = 1.0 / fps
    a_d = _alpha(d_cutoff, dt)
    prev = x[0].copy()
    dprev = np.zeros_like(prev)
    out[0] = prev
    for t in range(1, len(x)):
        dx = (x[t] - prev) / dt
        dprev = dprev + a_d * (dx - dprev)
        cutoff = min_cutoff + beta * np.abs(dprev)
        a = _alpha(cutoff, dt)
        prev = prev + a * (x[t] - prev)
        out[t] = prev
    return out


def _fill_nan(x2d):
    """Linear interpolation over NaN along axis 0 of (T, C); all-NaN columns stay NaN."""
    x = x2d.copy()
    nan = np.isnan(x)
    if not nan.any():
        return x, nan
    t = np.arange(len(x))
    for c in np.nonzero(nan.any(axis=0))[0]:
        ok = ~nan[:, c]
        if ok.any():
            x[:, c] = np.interp(t, t[ok], x[ok, c])
    return x, nan


#: Tracks up to this many frames are filtered by the numpy ports unless ``scipy.signal`` is
#: already loaded: importing it takes about a second, longer than filtering a short clip.
NUMPY_FRAMES = 1000


def _scipy_signal(frames: int = NUMPY_FRAMES + 1):
    """``scipy.signal`` for tracks of ``frames`` frames, or ``None``: the numpy ports (short tracks,
    or no scipy, as in Blender's own Python)."""
    if frames <= NUMPY_FRAMES and "scipy.signal" not in sys.modules:
        return None
    try:
        from scipy import signal
    except ImportError:
        return None
    return signal


def savgol_numpy(x: np.ndarray, window: int, polyorder: int) -> np.ndarray:
    """Savitzky-Golay smoothing along axis 0, as ``scipy.signal.savgol_filter(x, window, polyorder, axis=0)``.

    Each interior sample is the value at its centre of the polynomial of
    degree ``polyorder`` fitted (least squares) to the ``window`` samples
    around it; the first and last ``window // 2`` samples take the
    polynomial fitted to the first / last window (scipy's ``mode="interp"``).

    Parameters
    ----------
    x : ndarray (T, C)
    window : int
        Odd, ``polyorder < window <= T``.
    polyorder : int

    Returns
    -------
    ndarray (T, C)
    """
    x = np.asarray(x, dtype=np.float64)
    T = x.shape[0]
    half = window // 2
    pos = np.arange(window, dtype=np.float64) - half  # centred: better conditioned
    V = pos[:, None] ** np.arange(polyorder + 1)[None, :]
    hat = V @ np.linalg.pinv(V)  # (window, window): values of the fitted polynomial at each position
    out = np.empty_like(x)
    frames = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)  # (T - window + 1, C, window)
    out[half:T - half] = frames @ hat[half]
    out[:half] = hat[:half] @ x[:window]
    out[T - half:] = hat[window - half:] @ x[T - window:]
    return out


def butter_numpy(order: int, cutoff: float, fs: float):
    """Digital Butterworth low-pass ``(b, a)``, as ``scipy.signal.butter(order, cutoff, btype="low", fs=fs)``.

    The analog prototype's poles, pre-warped to ``cutoff`` and mapped with
    the bilinear transform.
    """
    wn = 2.0 * float(cutoff) / float(fs)  # fraction of Nyquist
    warped = 4.0 * np.tan(np.pi * wn / 2.0)
    m = np.arange(-order + 1, order, 2)
    poles = -np.exp(1j * np.pi * m / (2 * order)) * warped
    gain = warped ** order
    fs2 = 4.0
    poles_z = (fs2 + poles) / (fs2 - poles)
    gain_z = gain * np.real(1.0 / np.prod(fs2 - poles))
    b = gain_z * np.real(np.poly(-np.ones(order)))
    a = np.real(np.poly(poles_z))
    return b, a


def _lfilter(b, a, x, zi):
    """Direct-form II transposed IIR filter along axis 0 of (T, C), initial state ``zi`` (n - 1, C)."""
    n = len(a)
    y = np.empty_like(x)
    z = zi.copy()
    for t in range(x.shape[0]):
        xt = x[t]
        yt = b[0] * xt + z[0]
        for k in range(n - 2):
            z[k] = b[k + 1] * xt + z[k + 1] - a[k + 1] * yt
        z[n - 2] = b[n - 1] * xt - a[n - 1] * yt
        y[t] = yt
    return y


def filtfilt_numpy(b, a, x: np.ndarray, padlen: int) -> np.ndarray:
    """Zero-phase filtering along axis 0, as ``scipy.signal.filtfilt(b, a, x, axis=0, padlen=padlen)``.

    Odd extension by ``padlen`` samples at both ends, forward and backward
    passes started in the filter's steady state for the first sample
    (``lfilter_zi``).
    """
    b = np.asarray(b, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b, a = b / a[0], a / a[0]
    n = max(len(a), len(b))
    b = np.pad(b, (0, n - len(b)))
    a = np.pad(a, (0, n - len(a)))
    x = np.asarray(x, dtype=np.float64)
    if padlen > 0:
        x = np.concatenate([2.0 * x[:1] - x[padlen:0:-1], x, 2.0 * x[-1:] - x[-2:-padlen - 2:-1]])
    companion = np.zeros((n - 1, n - 1))
    companion[0] = -a[1:]
    companion[1:, :-1] += np.eye(n - 2)
    zi = np.linalg.solve(np.eye(n - 1) - companion.T, b[1:] - a[1:] * b[0])
    y = _lfilter(b, a, x, zi[:, None] * x[:1])
    y = _lfilter(b, a, y[::-1], zi[:, None] * y[-1:])[::-1]
    return y[padlen:len(y) - padlen] if padlen > 0 else y


def _filter_2d(x, method, strength, fps):
    """Filter (T, C) along time; x has no NaN except whole columns."""
    T = len(x)
    if method == "none" or strength <= 0 or T < 3:
        return x.copy()
    p = filter_params(method, strength, fps)
    good = ~np.isnan(x).any(axis=0)
    out = x.copy()
    xs = x[:, good]
    if xs.size == 0:
        return out
    if method == "oneeuro":
        # offline: forward and backward passes averaged, so their lags cancel
        fwd = one_euro(xs, fps, **p)
        bwd = one_euro(xs[::-1], fps, **p)[::-1]
        out[:, good] = 0.5 * (fwd + bwd)
        return out
    signal = _scipy_signal(T)
    if method == "savgol":
        win = min(p["window"], T if T % 2 else T - 1)
        if win < 3:
            return out
        order = min(p["polyorder"], win - 1)
        if signal is not None:
            out[:, good] = signal.savgol_filter(xs, win, order, axis=0, mode="interp")
        else:
            out[:, good] = savgol_numpy(xs, win, order)
        return out
    if method == "butter":
        if signal is not None:
            b, a = signal.butter(p["order"], p["cutoff"], btype="low", fs=fps)
        else:
            b, a = butter_numpy(p["order"], p["cutoff"], fps)
        padlen = min(3 * max(len(a), len(b)), T - 1)
        if signal is not None:
            out[:, good] = signal.filtfilt(b, a, xs, axis=0, padlen=padlen)
        else:
            out[:, good] = filtfilt_numpy(b, a, xs, padlen)
        return out
    raise ValueError(f"unknown smoothing method {method!r}; known: {', '.join(METHODS)}")


def smooth_keypoints(x, method: str = "oneeuro", strength: float = 0.5, fps: float = 30.0) -> np.ndarray:
    """Smooth keypoint tracks over time.

    Parameters
    ----------
    x : ndarray (T, K, 3) (any trailing shape works)
        Positions; NaN marks missing values (kept NaN in the output).
    method : one of :data:`METHODS`
    strength : float in [0, 1]
    fps : float
        Frame rate (the filters are specified in Hz / seconds).

    Returns
    -------
    ndarray, same shape.
    """
    if method not in METHODS:
        raise ValueError(f"unknown smoothing method {method!r}; known: {', '.join(METHODS)}")
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    if shape[0] == 0:
        return x.copy()
    flat = x.reshape(shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    filled, nan = _fill_nan(flat)
    out = _filter_2d(filled, method, float(strength), float(fps))
    out[nan] = np.nan
    return out.reshape(shape)


def smooth_rotations(quats, method: str = "oneeuro", strength: float = 0.5, fps: float = 30.0) -> np.ndarray:
    """Smooth quaternion tracks (T, B, 4) (w, x, y, z) on the rotation manifold.

    Hemisphere-aligns each track frame to frame, filters the components,
    renormalises, and keeps the output sign-continuous.
    """
    if method not in METHODS:
        raise ValueError(f"unknown smoothing method {method!r}; known: {', '.join(METHODS)}")
    q = np.asarray(quats, dtype=np.float64)
    if q.shape[0] == 0:
        return q.copy()
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    q = quat_continuity(q / np.where(n > 1e-12, n, 1.0))
    if method == "none" or strength <= 0 or len(q) < 3:
        return q
    out = smooth_keypoints(q, method, strength, fps)
    n = np.linalg.norm(out, axis=-1, keepdims=True)
    out = np.where(n > 1e-9, out / np.where(n > 1e-9, n, 1.0), q)
    return quat_continuity(out)
