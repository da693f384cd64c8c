"""Rotation channels as Blender keys them: sign-continuous quaternions, Euler angles in Blender's convention.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import euler_to_matrix, quat_to_matrix
from .chunks import frame_chunks

__all__ = ["quat_continuity", "quats_to_euler_continuous", "continue_eulers", "euler_to_matrix_blender",
           "matrix_to_euler_blender"]


def quat_continuity(quats: np.ndarray, out=None, *, chunk=None) -> np.ndarray:
    """Flip quaternion signs so consecutive frames have a non-negative dot product.

    Parameters
    ----------
    quats : ndarray (T, ..., 4)
    out : ndarray, optional
        Where to write the result (may be ``quats`` itself, of any float type).
    chunk : int, optional
        Frames at a time (default :data:`CHUNK_FRAMES`): no whole-clip
        temporaries; the result does not depend on it.

    Returns
    -------
    ndarray, same shape (vectorised: cumulative product of the sign changes).
    """
    q = np.asarray(quats)
    if not np.issubdtype(q.dtype, np.floating):
        q = q.astype(np.float64)
    if out is None:
        out = np.array(q, dtype=np.float64)
    elif out is not q:
        out[...] = q
    if q.shape[0] < 2:
        return out
    sign = np.ones(q.shape[1:-1])    # the sign given to the frame before the chunk
    prev = None                      # that frame as it came
    for a, b in frame_chunks(q.shape[0], chunk):
        part = np.asarray(q[a:b], dtype=np.float64)
        before = part[:-1] if prev is None else np.concatenate([prev[None], part[:-1]])
        flips = np.where(np.sum((part[1:] if prev is None else part) * before, axis=-1) < 0, -1.0, 1.0)
        signs = np.cumprod(flips, axis=0) * sign
        if prev is None:
            signs = np.concatenate([sign[None], signs], axis=0)
        prev = part[-1].copy()       # (before out, which may be q, changes it)
        out[a:b] *= signs[..., None]
        sign = signs[-1]
    return out


# --------------------------------------------------------------------------
# Euler angles, Blender convention
# --------------------------------------------------------------------------
_AX = {"X": 0, "Y": 1, "Z": 2}


def euler_to_matrix_blender(euler, order: str = "XYZ") -> np.ndarray:
    """Blender ``rotation_euler`` (radians) to matrices.

    Parameters
    ----------
    euler : array_like (..., 3)
        Angles indexed by axis, ``(x, y, z)``, whatever the order: exactly
        ``PoseBone.rotation_euler`` (``mathutils.Euler((x, y, z), order)``).
    order : str
        Blender's rotation order, naming the axes in the order they are
        applied: ``"XYZ"`` is ``Rz @ Ry @ Rx``, ``"ZXY"`` is ``Ry @ Rx @ Rz``.

    Returns
    -------
    ndarray (..., 3, 3)
    """
    # Blender's order names the axes as applied: the intrinsic product reverses it
    e = np.asarray(euler, dtype=np.float64)
    return euler_to_matrix(e[..., [_AX[c] for c in reversed(order)]], order[::-1], degrees=False)


def _matrix_to_euler_by_position(m, order):
    """Angles ``(a, b, c)`` of the first, second and third applied axis (see below)."""
    i, j, k = (_AX[c] for c in order)
    par = 1.0 if (j - i) % 3 == 1 else -1.0
    b = np.arcsin(np.clip(-par * m[..., k, i], -1.0, 1.0))
    a = np.arctan2(par * m[..., k, j], m[..., k, k])
    c = np.arctan2(par * m[..., j, i], m[..., i, i])
    # gimbal lock: put everything in the first angle
    lock = np.abs(m[..., k, i]) > 1.0 - 1e-9
    a_lock = np.arctan2(-par * m[..., j, k], m[..., j, j])
    a = np.where(lock, a_lock, a)
    c = np.where(lock, 0.0, c)
    return np.stack([a, b, c], axis=-1)


def _by_axis(e_pos, order):
    """Reorder angles given per applied axis (position in ``order``) to (x, y, z)."""
    return e_pos[..., [order.index(c) for c in "XYZ"]]


def matrix_to_euler_blender(mat, order: str = "XYZ") -> np.ndarray:
    """Matrices to Blender Euler angles (radians).

    Parameters
    ----------
    mat : array_like (..., 3, 3)
    order : str
        Blender rotation order (see :func:`euler_to_matrix_blender`).

    Returns
    -------
    ndarray (..., 3)
        Angles indexed by axis ``(x, y, z)`` (``PoseBone.rotation_euler``),
        the middle applied axis' angle in [-pi/2, pi/2].
    """
    m = np.asarray(mat, dtype=np.float64)
    return _by_axis(_matrix_to_euler_by_position(m, order), order)


def quats_to_euler_continuous(quats, order: str = "XYZ", *, chunk=None) -> np.ndarray:
    """Quaternions (T, B, 4) to Blender Euler angles (T, B, 3) without jumps.

    The angles are indexed by axis ``(x, y, z)`` whatever ``order`` is, as
    ``PoseBone.rotation_euler`` stores them. Each frame takes, among the
    equivalent Euler triples (the two Tait-Bryan branches ``(a, b, c)`` /
    ``(a+pi, pi-b, c+pi)``, ``a, b, c`` the angles of the first, second and
    third applied axis, plus any multiples of 2 pi), the one nearest the
    previous frame. Vectorised over frames: the branch switches where the
    other branch is nearer the previous frame's (both branches move by the
    same amounts, so the choice is a cumulative parity), then ``np.unwrap``
    removes 2 pi jumps. ``chunk`` frames at a time (default
    :data:`CHUNK_FRAMES`), each chunk following the previous one
    (:func:`continue_eulers`).
    """
    q = np.asarray(quats)
    out = np.empty(q.shape[:-1] + (3,))
    prev_q = prev_e = None
    for a, b in frame_chunks(q.shape[0], chunk):
        out[a:b] = continue_eulers(np.asarray(q[a:b], dtype=np.float64), order, prev_q, prev_e)
        if b > a:
            prev_q, prev_e = np.asarray(q[b - 1], dtype=np.float64), out[b - 1]
    return out


_TURN = 2.0 * np.pi


def _wrapped(x):
    """Angles ``x`` (radians) less whole turns, into [-pi, pi] (``rint``: a float modulo is twice as slow)."""
    return x - _TURN * np.rint(x * (1.0 / _TURN))


def _eulers_of_chunk(q, order, matrices=False):
    """:func:`quats_to_euler_continuous` of frames ``q`` (T, B, 4), or of rotation matrices (T, B, 3, 3)
    with ``matrices``; the first frame on the principal branch."""
    e1 = _matrix_to_euler_by_position(q if matrices else quat_to_matrix(q), order)
    if e1.shape[0] < 2:
        return _by_axis(e1, order)
    e2 = e1 + np.array([np.pi, 0.0, np.pi])
    e2[..., 1] = np.pi - e1[..., 1]

    def wrapdist(a, b):
        d = _wrapped(a - b)
        return d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2]   # (7x np.sum over 3)

    d_same = wrapdist(e1[1:], e1[:-1])
    d_cross = wrapdist(e2[1:], e1[:-1])
    switch = (d_cross + 1e-12 < d_same).astype(np.int64)
    branch = np.concatenate([np.zeros((1,) + switch.shape[1:], np.int64), np.cumsum(switch, axis=0) % 2])
    e = np.where(branch[..., None] == 1, e2, e1)
    # np.unwrap along the frames: every jump of pi or more between frames taken out in whole turns
    jump = np.diff(e, axis=0)
    e[1:] -= _TURN * np.cumsum(np.rint(jump * (1.0 / _TURN)), axis=0)
    return _by_axis(e, order)


def _other_branch(e, order):
    """The other Tait-Bryan solution of Euler angles ``e`` (..., 3) by axis, Blender ``order``."""
    i, j, k = ("XYZ".index(c) for c in order)
    out = e.copy()
    out[..., i] += np.pi
    out[..., j] = np.pi - e[..., j]
    out[..., k] += np.pi
    return out


def continue_eulers(q, order, prev_q=None, prev_e=None, *, matrices=False):
    """Continuous Blender Eulers (T, B, 3) of quaternions ``q`` (T, B, 4), following ``prev_e`` (B, 3).

    The chunk's Eulers with the previous chunk's last rotation ``prev_q``
    (B, 4) in front; that first frame is then moved onto the previous
    chunk's last Euler triple ``prev_e`` (the other Tait-Bryan branch and/or
    whole turns), and the chunk with it. Without ``prev_q`` the first frame
    is on the principal branch. ``matrices``: ``q`` and ``prev_q`` are
    rotation matrices, (T, B, 3, 3) and (B, 3, 3).
    """
    if prev_q is None:
        return _eulers_of_chunk(q, order, matrices)
    e = _eulers_of_chunk(np.concatenate([prev_q[None], q]), order, matrices)
    alt = _other_branch(e, order)
    d_same = (_wrapped(prev_e - e[0]) ** 2).sum(-1)
    d_alt = (_wrapped(prev_e - alt[0]) ** 2).sum(-1)
    e = np.where((d_alt < d_same)[None, ..., None], alt, e)
    e += np.round((prev_e - e[0]) / _TURN)[None] * _TURN
    return e[1:]
