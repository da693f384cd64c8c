"""Temporal smoothing of keypoints and rotations.

Methods (:data:`METHODS`):

- ``"none"``: unchanged copy.
- ``"oneeuro"``: One-Euro filter (Casiez et al. 2012), adaptive cutoff
  (smooths slow motion strongly, follows fast motion). Run forward and
  backward and averaged (offline use: the two lags cancel; :func:`one_euro`
  is the plain causal filter). Sequential over frames (inherent), vectorised
  over all other axes.
- ``"savgol"``: zero-phase Savitzky-Golay (``scipy.signal.savgol_filter``).
- ``"butter"``: zero-phase Butterworth low-pass (``scipy.signal.filtfilt``).

A single ``strength`` in [0, 1] sets each filter's parameters (0 = no
change); see :func:`filter_params`. Keypoints may contain NaN (missing
detections): gaps are linearly interpolated for filtering and put back as
NaN. Quaternions are made sign-continuous (hemisphere aligned), filtered
component-wise and renormalised, which is accurate for the small angular
steps between frames. Clips shorter than a filter's window are handled by
shrinking the window (or returning the input for 1-2 frames).

``scipy`` is imported lazily (only the zero-phase filters need it).
"""

from __future__ import annotations

import numpy as np

from .solve import quat_continuity

__all__ = ["METHODS", "filter_params", "smooth_keypoints", "smooth_rotations", "one_euro"]

METHODS = ("none", "oneeuro", "savgol", "butter")


def filter_params(method: str, strength: float, fps: float) -> dict:
    """Parameters a method uses for a given strength.

    - oneeuro: ``min_cutoff`` from 6 Hz (strength 0) down to 0.3 Hz
      (strength 1), log-spaced; ``beta`` (per unit/s) from 1.5 down to 0.15;
      ``d_cutoff`` 1 Hz.
    - savgol: window ``0.05 + 0.55 * strength`` seconds (odd, >= 5 frames
      when strength > 0), polynomial order 3 (2 for short windows).
    - butter: cutoff ``12 * 0.05 ** strength`` Hz (12 Hz -> 0.6 Hz), order 2,
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
    from scipy import signal

    if method == "savgol":
        win = min(p["window"], T if T % 2 else T - 1)
        if win < 3:
            return out
        order = min(p["polyorder"], win - 1)
        out[:, good] = signal.savgol_filter(xs, win, order, axis=0, mode="interp" if win <= T else "nearest")
        return out
    if method == "butter":
        b, a = signal.butter(p["order"], p["cutoff"], btype="low", fs=fps)
        padlen = min(3 * max(len(a), len(b)), T - 1)
        out[:, good] = signal.filtfilt(b, a, xs, axis=0, padlen=padlen)
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
