"""Compact storage of the training cache's motion: quantised rotation vectors, delta-coded per clip, LZMA.

A cache of the whole CMU database has to travel with the working tree to a
GPU machine, so its motion is stored at a fraction of the size of 6D float16
rotations:

- local rotations as rotation vectors in steps of :data:`ROT_STEP` radians
  (int16; at most a twentieth of a degree off), root positions in steps of
  :data:`ROOT_STEP` metres (int32);
- each clip's first frame as it is, the following frames as differences to
  the frame before (motion is smooth, so the numbers are small);
- the integers joint by joint (one channel's frames next to each other),
  compressed with LZMA.

Pure numpy; no ``bpy``.
"""

from __future__ import annotations

import lzma

import numpy as np

from neural_ik.model.rotations_np import axis_angle_to_matrix, matrix_to_axis_angle

__all__ = ["ROT_STEP", "ROOT_STEP", "quantise_rotations", "quantise_root", "encode", "decode"]

#: Radians per unit of the stored rotation vectors.
ROT_STEP = 2.0 ** -10
#: Metres per unit of the stored root positions.
ROOT_STEP = 1e-4
_BLOCK = 1 << 15


def quantise_rotations(local_rot) -> np.ndarray:
    """Local rotations (T, J, 3, 3) as int16 rotation vectors (T, J, 3) in steps of :data:`ROT_STEP`."""
    v = matrix_to_axis_angle(np.asarray(local_rot, dtype=np.float64))
    return np.round(v / ROT_STEP).astype(np.int16)


def quantise_root(root) -> np.ndarray:
    """Root positions (T, 3) in metres as int32 steps of :data:`ROOT_STEP`."""
    return np.round(np.asarray(root, dtype=np.float64) / ROOT_STEP).astype(np.int32)


def _deltas(q, starts):
    d = q.astype(np.int64)
    d[1:] -= q[:-1]
    d[starts] = q[starts]
    return d


def _undelta(d, starts, n):
    bounds = list(starts) + [n]
    out = np.empty(d.shape, dtype=np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):
        np.cumsum(d[a:b], axis=0, out=out[a:b])
    return out


def encode(rotq, rootq, clip) -> dict:
    """Arrays for the cache file from the quantised motion of all frames.

    Parameters
    ----------
    rotq : ndarray (N, J, 3) int16
        :func:`quantise_rotations` of every clip, clips one after the other.
    rootq : ndarray (N, 3) int32
        :func:`quantise_root` likewise.
    clip : ndarray (N,)
        The clip of each frame (consecutive frames of one clip are consecutive rows).
    """
    n, nj = rotq.shape[:2]
    starts = _starts(clip)
    # a step from +pi to -pi is the largest difference; it still fits 16 bits
    rd = _deltas(rotq.reshape(n, -1), starts).astype(np.int16)
    pd = _deltas(rootq, starts).astype(np.int32)
    return {"rotq": np.frombuffer(lzma.compress(np.ascontiguousarray(rd.T).tobytes()), dtype=np.uint8),
            "rootq": np.frombuffer(lzma.compress(np.ascontiguousarray(pd.T).tobytes()), dtype=np.uint8),
            "codec": np.array([n, nj], dtype=np.int64), "codec_steps": np.array([ROT_STEP, ROOT_STEP])}


def decode(z, clip) -> tuple:
    """``(local_rot (N, J, 3, 3) float32, root (N, 3) float32)`` from the arrays of :func:`encode`."""
    n, nj = (int(x) for x in z["codec"])
    rot_step, root_step = (float(x) for x in z["codec_steps"])
    starts = _starts(clip)
    rd = np.frombuffer(lzma.decompress(z["rotq"].tobytes()), dtype=np.int16).reshape(nj * 3, n).T
    pd = np.frombuffer(lzma.decompress(z["rootq"].tobytes()), dtype=np.int32).reshape(3, n).T
    v = _undelta(rd, starts, n).reshape(n, nj, 3)
    L = np.empty((n, nj, 3, 3), dtype=np.float32)
    for s in range(0, n, _BLOCK):
        L[s:s + _BLOCK] = axis_angle_to_matrix(v[s:s + _BLOCK] * rot_step)
    root = (_undelta(pd, starts, n) * root_step).astype(np.float32)
    return L, root


def _starts(clip):
    c = np.asarray(clip)
    if c.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
