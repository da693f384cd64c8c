"""Numpy rotation helpers (no scipy, usable inside Blender).

Conventions: rotation matrices act on column vectors (``v' = R @ v``).
Euler orders are *intrinsic* and written as the BVH channel order, e.g.
``"ZYX"`` means ``R = Rz(a) @ Ry(b) @ Rx(c)`` (scipy's uppercase orders).
Quaternions are ``(w, x, y, z)``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "vector_norm",
    "cross",
    "skew",
    "orthonormalise",
    "axis_rotation",
    "euler_to_matrix",
    "matrix_to_euler",
    "axis_angle_to_matrix",
    "matrix_to_axis_angle",
    "matrix_to_quat",
    "quat_to_matrix",
    "quat_slerp",
    "rotation_between",
    "resample_rotations",
    "change_basis",
    "matmul_each",
]

_AXES = {"X": 0, "Y": 1, "Z": 2}


def axis_rotation(axis: int, angle: np.ndarray) -> np.ndarray:
    """Rotation matrices about a coordinate axis.

    Parameters
    ----------
    axis : int
        0, 1 or 2 for X, Y, Z.
    angle : ndarray, shape (...)
        Angles in radians.

    Returns
    -------
    ndarray, shape (..., 3, 3)
    """
    angle = np.asarray(angle, dtype=np.float64)
    c, s = np.cos(angle), np.sin(angle)
    out = np.zeros(angle.shape + (3, 3))
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    out[..., axis, axis] = 1.0
    out[..., i, i] = c
    out[..., j, j] = c
    out[..., i, j] = -s
    out[..., j, i] = s
    return out


def change_basis(M: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``M @ R @ M.T`` for a stack of matrices ``R`` (..., 3, 3) and one 3 x 3 ``M``.

    Two plain matrix products over all rows at once (BLAS), not a stacked
    product per matrix (``einsum``, ``M @ R @ M.T``), which is an order of
    magnitude slower on a clip's rotations.
    """
    R = np.asarray(R, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    shape = R.shape
    A = (R.reshape(-1, 3) @ M.T).reshape(shape)                # R M^T
    out = (np.swapaxes(A, -1, -2).reshape(-1, 3) @ M.T).reshape(shape)   # (M A)^T = A^T M^T
    return np.ascontiguousarray(np.swapaxes(out, -1, -2))


def matmul_each(A: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``A[k] @ C[k]`` for stacks ``A`` (k, ..., n, m) and one matrix per ``k``, ``C`` (k, m, p).

    With many rows per ``k`` (a clip's frames), one plain 2-D product per
    ``k`` (BLAS over all its rows at once) instead of a stacked product of
    small matrices: a bone's 3,000 frames times its rest offset in a
    twentieth of the time. A few rows: the stacked product.
    """
    A = np.asarray(A, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    rows = A[0].size // A.shape[-1] if len(A) else 0
    if rows < 64:
        return A @ C.reshape(C.shape[:1] + (1,) * (A.ndim - 3) + C.shape[1:])
    out = np.empty(A.shape[:-1] + C.shape[-1:])
    for k in range(len(C)):
        out[k] = (A[k].reshape(-1, A.shape[-1]) @ C[k]).reshape(out.shape[1:])
    return out


def euler_to_matrix(angles: np.ndarray, order: str = "ZYX", degrees: bool = True) -> np.ndarray:
    """Intrinsic euler angles to matrices.

    Each axis rotation turns two columns of the product so far (``M
    R_x(a)`` mixes columns Y and Z only), entry by entry on whole arrays,
    skipping the zeros and ones of the first: the closed form, not stacked
    3 x 3 matrix products (a 3,000-frame BVH's rotations in a quarter of
    the time).

    Parameters
    ----------
    angles : ndarray, shape (..., len(order))
        Angles in the order of ``order``.
    order : str
        Axis letters, 1 to 3 of them (``"ZYX"``, ``"XZ"``...), intrinsic.
    degrees : bool
        Whether ``angles`` are in degrees.

    Returns
    -------
    ndarray, shape (..., 3, 3)
    """
    angles = np.asarray(angles, dtype=np.float64)
    if degrees:
        angles = np.deg2rad(angles)
    # the nine entries as separate arrays, the constants 0 and 1 as Python numbers (never multiplied)
    m = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    for k, ax in enumerate(order.upper()):
        i, j = [(1, 2), (2, 0), (0, 1)][_AXES[ax]]
        c, s = np.cos(angles[..., k]), np.sin(angles[..., k])
        ns = -s
        for row in m:   # (M R)[:, i] = c M[:, i] + s M[:, j];  (M R)[:, j] = c M[:, j] - s M[:, i]
            row[i], row[j] = _lin(c, row[i], s, row[j]), _lin(c, row[j], ns, row[i])
    out = np.empty(angles.shape[:-1] + (3, 3))
    for r in range(3):
        for col in range(3):
            out[..., r, col] = m[r][col]
    return out


def _lin(a, x, b, y):
    """``a x + b y`` for arrays ``a``, ``b``, where ``x``, ``y`` are arrays or the numbers 0 and 1."""
    terms = [f if isinstance(v, float) and v == 1.0 else f * v
             for f, v in ((a, x), (b, y)) if not (isinstance(v, float) and v == 0.0)]
    return terms[0] + terms[1] if len(terms) == 2 else terms[0] if terms else 0.0


def matrix_to_euler(mat: np.ndarray, order: str = "ZYX", degrees: bool = True) -> np.ndarray:
    """Matrices to intrinsic Tait-Bryan angles (inverse of :func:`euler_to_matrix`).

    Parameters
    ----------
    mat : ndarray, shape (..., 3, 3)
    order : str
        Three distinct axis letters.
    degrees : bool

    Returns
    -------
    ndarray, shape (..., 3)
    """
    order = order.upper()
    if len(order) != 3 or len(set(order)) != 3:
        raise ValueError(f"matrix_to_euler needs three distinct axes, got {order!r}")
    i, j, k = (_AXES[a] for a in order)
    s = 1.0 if (i, j, k) in ((0, 1, 2), (1, 2, 0), (2, 0, 1)) else -1.0
    mat = np.asarray(mat, dtype=np.float64)
    b = np.arcsin(np.clip(s * mat[..., i, k], -1.0, 1.0))
    a = np.arctan2(-s * mat[..., j, k], mat[..., k, k])
    c = np.arctan2(-s * mat[..., i, j], mat[..., i, i])
    # gimbal lock: put everything into a
    lock = np.abs(s * mat[..., i, k]) > 1.0 - 1e-9
    if np.any(lock):
        c = np.where(lock, 0.0, c)
        # with c = 0: R = Ri(a) Rj(+-90) -> a from the j/k block of column j
        a_lock = np.arctan2(mat[..., k, j], mat[..., j, j])
        a = np.where(lock, a_lock, a)
    out = np.stack([a, b, c], axis=-1)
    return np.rad2deg(out) if degrees else out


def axis_angle_to_matrix(aa: np.ndarray) -> np.ndarray:
    """Rotation vectors (axis * angle, radians) to matrices, shape (..., 3, 3).

    Rodrigues written out entry by entry (no (..., 3, 3) cross-product
    matrices and their product: the rig solve calls it twice an iteration),
    with the series near zero angle.
    """
    v = np.asarray(aa, dtype=np.float64)
    theta2 = (v * v).sum(-1)
    small = theta2 < 1e-16
    t = np.sqrt(np.where(small, 1.0, theta2))
    a = np.where(small, 1.0 - theta2 / 6.0, np.sin(t) / t)
    b = np.where(small, 0.5 - theta2 / 24.0, (1.0 - np.cos(t)) / (t * t))
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    bxy, bxz, byz = b * x * y, b * x * z, b * y * z
    R = np.empty(v.shape + (3,))
    R[..., 0, 0] = 1.0 - b * (y * y + z * z)
    R[..., 1, 1] = 1.0 - b * (x * x + z * z)
    R[..., 2, 2] = 1.0 - b * (x * x + y * y)
    R[..., 0, 1] = bxy - a * z
    R[..., 1, 0] = bxy + a * z
    R[..., 0, 2] = bxz + a * y
    R[..., 2, 0] = bxz - a * y
    R[..., 1, 2] = byz - a * x
    R[..., 2, 1] = byz + a * x
    return R


def vector_norm(v, keepdims: bool = False) -> np.ndarray:
    """Lengths of the vectors along the last axis (a few components: points, quaternions), float64.

    ``np.linalg.norm(v, axis=-1)`` to the bit (the squares added in the same
    order), about seven times faster on such short vectors: numpy reduces a
    3-long axis element by element, here each component is one pass over
    all the vectors.
    """
    v = np.asarray(v, dtype=np.float64)
    out = np.zeros(v.shape[:-1])
    for i in range(v.shape[-1]):
        out += v[..., i] * v[..., i]
    np.sqrt(out, out=out)
    return out[..., None] if keepdims else out[()]


def cross(a, b) -> np.ndarray:
    """Cross products along the last axis, shape (..., 3) (component-wise: ``np.cross`` is several times slower)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)


def skew(v) -> np.ndarray:
    """Cross-product matrices ``[v]_x`` with ``[v]_x @ u == v x u``, shape (..., 3, 3)."""
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = np.zeros_like(x)
    return np.stack([o, -z, y, z, o, -x, -y, x, o], -1).reshape(v.shape[:-1] + (3, 3))


def orthonormalise(m) -> np.ndarray:
    """The rotation nearest in the Gram-Schmidt sense: first column kept in direction, second made
    orthogonal to it, third their cross product (the decoding of a 6D rotation), shape (..., 3, 3)."""
    a, b = m[..., :, 0], m[..., :, 1]
    x = a / vector_norm(a, keepdims=True)
    b = b - (x * b).sum(-1, keepdims=True) * x
    y = b / vector_norm(b, keepdims=True)
    return np.stack([x, y, cross(x, y)], -1)


def matrix_to_quat(mat: np.ndarray) -> np.ndarray:
    """Matrices to unit quaternions ``(w, x, y, z)`` with ``w >= 0``, shape (..., 4).

    Per matrix the best conditioned of the four classic formulas (largest of
    ``1 + trace`` and ``1 + 2 m_ii - trace``); long inputs in blocks, so the
    temporaries stay small (a 100,000-frame clip has millions of matrices).
    """
    m = np.asarray(mat, dtype=np.float64)
    shape = m.shape[:-2]
    m = m.reshape(-1, 3, 3)
    if m.shape[0] <= FEW_MATRICES:
        return _matrix_to_quat_few(m).reshape(shape + (4,))
    out = np.empty((m.shape[0], 4))
    for s in range(0, m.shape[0], 1 << 16):
        out[s:s + (1 << 16)] = _matrix_to_quat_block(m[s:s + (1 << 16)])
    return out.reshape(shape + (4,))


#: Up to this many matrices :func:`matrix_to_quat` works in Python floats, one at a time: a live
#: solve converts a few bones' matrices a dozen times a tick, and the block's array set-up costs
#: more (docs/tuning.md#few_matrices).
FEW_MATRICES = 32


def _matrix_to_quat_few(m):
    """:func:`_matrix_to_quat_block`'s formulas and choice, one matrix at a time (the same numbers)."""
    out = np.empty((m.shape[0], 4))
    for i, ((m00, m01, m02), (m10, m11, m12), (m20, m21, m22)) in enumerate(m.tolist()):
        d0 = 1.0 + m00 + m11 + m22
        d1 = 1.0 + m00 - m11 - m22
        d2 = 1.0 - m00 + m11 - m22
        d3 = 1.0 - m00 - m11 + m22
        hi01, hi23 = d1 > d0, d3 > d2
        if (d3 if hi23 else d2) > (d1 if hi01 else d0):
            q = (m10 - m01, m02 + m20, m12 + m21, d3) if hi23 else (m02 - m20, m01 + m10, d2, m12 + m21)
        else:
            q = (m21 - m12, d1, m01 + m10, m02 + m20) if hi01 else (d0, m21 - m12, m02 - m20, m10 - m01)
        s = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
        s = -s if q[0] < 0 else s
        out[i] = (q[0] / s, q[1] / s, q[2] / s, q[3] / s)
    return out


def _matrix_to_quat_block(m):
    c = np.ascontiguousarray(m.reshape(-1, 9).T)      # (9, n): every entry contiguous
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = c
    d0 = 1.0 + m00 + m11 + m22
    d1 = 1.0 + m00 - m11 - m22
    d2 = 1.0 - m00 + m11 - m22
    d3 = 1.0 - m00 - m11 + m22
    # the largest of d0..d3, the first of equals (by comparisons: faster than np.argmax over the four)
    hi01, hi23 = d1 > d0, d3 > d2
    best = np.where(np.where(hi23, d3, d2) > np.where(hi01, d1, d0), 2 + hi23, hi01.astype(np.int64))
    # row k of the 4 x 4 candidates (d0, a, b, c / a, d1, d, e / b, d, d2, f / c, e, f, d3) is
    # proportional to q: each matrix's best conditioned row, written per case for the matrices
    # of that case (a 16-row stack and a gather over it took three times as long)
    q = np.empty((4, c.shape[1]))
    for k, (sk, rows) in enumerate(((d0, ((m21, m12, -1), (m02, m20, -1), (m10, m01, -1))),
                                    (d1, ((m21, m12, -1), (m01, m10, 1), (m02, m20, 1))),
                                    (d2, ((m02, m20, -1), (m01, m10, 1), (m12, m21, 1))),
                                    (d3, ((m10, m01, -1), (m02, m20, 1), (m12, m21, 1))))):
        i = np.flatnonzero(best == k)
        if not i.size:
            continue
        others = [r for r in range(4) if r != k]
        q[k, i] = sk[i]
        for r, (u, v, sign) in zip(others, rows):
            q[r, i] = u[i] - v[i] if sign < 0 else u[i] + v[i]
    s = np.sqrt((q * q).sum(0))
    q /= np.where(q[0] < 0, -s, s)     # unit length, w >= 0
    return np.ascontiguousarray(q.T)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Quaternions ``(w, x, y, z)`` (any length: normalised here) to matrices, shape (..., 3, 3).

    The normalisation is folded into ``s = 2 / |q|^2`` (no square root);
    the components are made contiguous once, so every product runs on
    contiguous arrays. Many quaternions go in blocks of :data:`QUAT_BLOCK`
    whose temporaries stay in the CPU's cache.
    """
    q = np.asarray(q, dtype=np.float64)
    n = q.size // 4
    if n <= QUAT_BLOCK:
        return _quat_to_matrix(q)
    flat = q.reshape(n, 4)
    out = np.empty((n, 3, 3))
    for a in range(0, n, QUAT_BLOCK):
        out[a:a + QUAT_BLOCK] = _quat_to_matrix(flat[a:a + QUAT_BLOCK])
    return out.reshape(q.shape[:-1] + (3, 3))


#: Quaternions per block of :func:`quat_to_matrix` (a block's temporaries fit a core's cache).
QUAT_BLOCK = 4096


def _quat_to_matrix(q):
    w, x, y, z = np.ascontiguousarray(np.moveaxis(q, -1, 0))
    s = 2.0 / (w * w + x * x + y * y + z * z)
    xs, ys, zs = x * s, y * s, z * s
    wx, wy, wz = w * xs, w * ys, w * zs
    xx, xy, xz = x * xs, x * ys, x * zs
    yy, yz, zz = y * ys, y * zs, z * zs
    out = np.empty(q.shape[:-1] + (3, 3))
    out[..., 0, 0] = 1.0 - (yy + zz)
    out[..., 0, 1] = xy - wz
    out[..., 0, 2] = xz + wy
    out[..., 1, 0] = xy + wz
    out[..., 1, 1] = 1.0 - (xx + zz)
    out[..., 1, 2] = yz - wx
    out[..., 2, 0] = xz - wy
    out[..., 2, 1] = yz + wx
    out[..., 2, 2] = 1.0 - (xx + yy)
    return out


def matrix_to_axis_angle(mat: np.ndarray) -> np.ndarray:
    """Matrices to rotation vectors (radians, angle in [0, pi]), shape (..., 3).

    From the trace and the antisymmetric part (exact for small angles: the
    ratio of the angle to its sine does not suffer from the arccos's
    rounding), through the quaternion where the angle nears pi and the
    antisymmetric part vanishes. A few matrices cost a few microseconds (a
    live solve takes logarithms a dozen times per drag tick).
    """
    R = np.asarray(mat, dtype=np.float64)
    tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
    theta = np.arccos(np.clip((tr - 1.0) * 0.5, -1.0, 1.0))
    w = np.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    s = np.sin(theta)
    out = w * np.where(s < 1e-6, 0.5 + theta ** 2 / 12.0, theta / (2.0 * np.maximum(s, 1e-12)))[..., None]
    far = theta > _NEAR_PI
    if far.any():
        q = matrix_to_quat(R[far])
        v = q[..., 1:]
        n = vector_norm(v, keepdims=True)
        out[far] = v * (2.0 * np.arctan2(n, q[..., :1]) / np.maximum(n, 1e-300))
    return out


#: Angles (radians) beyond which :func:`matrix_to_axis_angle` goes through the quaternion.
_NEAR_PI = 3.0


def quat_slerp(q0: np.ndarray, q1: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Spherical linear interpolation (shortest path), broadcasting ``t`` of shape (...,)."""
    q0 = np.asarray(q0, dtype=np.float64)
    q1 = np.asarray(q1, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)[..., None]
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(dot < 0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin = np.sin(theta)
    lin = dot > 0.9995
    safe = np.where(lin, 1.0, sin)
    w0 = np.where(lin, 1.0 - t, np.sin((1.0 - t) * theta) / safe)
    w1 = np.where(lin, t, np.sin(t * theta) / safe)
    out = w0 * q0 + w1 * q1
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Smallest rotation taking direction ``a`` onto direction ``b``, shape (..., 3, 3)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    axis = np.cross(a, b)
    s = np.linalg.norm(axis, axis=-1, keepdims=True)
    c = np.sum(a * b, axis=-1, keepdims=True)
    angle = np.arctan2(s, c)
    # antiparallel: any axis perpendicular to a
    perp = np.cross(a, np.where(np.abs(a[..., :1]) < 0.9, [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]))
    perp = perp / np.linalg.norm(perp, axis=-1, keepdims=True)
    axis = np.where(s < 1e-12, perp, axis / np.where(s < 1e-12, 1.0, s))
    return axis_angle_to_matrix(axis * angle)


def resample_rotations(rot: np.ndarray, src_times: np.ndarray, dst_times: np.ndarray) -> np.ndarray:
    """Slerp-resample rotation matrices along axis 0.

    Parameters
    ----------
    rot : ndarray, shape (T, ..., 3, 3)
    src_times : ndarray, shape (T,)
        Increasing sample times.
    dst_times : ndarray, shape (T2,)
        Times within ``[src_times[0], src_times[-1]]``.

    Returns
    -------
    ndarray, shape (T2, ..., 3, 3)
    """
    q = matrix_to_quat(rot)
    idx = np.clip(np.searchsorted(src_times, dst_times, side="right") - 1, 0, len(src_times) - 2) if len(src_times) > 1 else np.zeros(len(dst_times), int)
    if len(src_times) == 1:
        return np.repeat(rot[:1], len(dst_times), axis=0)
    t = (dst_times - src_times[idx]) / (src_times[idx + 1] - src_times[idx])
    t = np.clip(t, 0.0, 1.0).reshape((-1,) + (1,) * (q.ndim - 2))
    t = np.broadcast_to(t, (len(dst_times),) + q.shape[1:-1])
    return quat_to_matrix(quat_slerp(q[idx], q[idx + 1], t))
