"""Batched rotation utilities in torch.

All functions accept arbitrary leading batch dimensions, work on CPU and
CUDA, and are differentiable. Conventions:

- Rotation matrices act on column vectors (``v_world = R @ v_local``).
- The continuous 6D representation (Zhou et al., "On the Continuity of
  Rotation Representations in Neural Networks", CVPR 2019) is the first two
  *columns* of the matrix, concatenated: ``[R[:, 0], R[:, 1]]``.
- Quaternions are ``(w, x, y, z)``, scalar first.
- Axis-angle (rotation vector) is ``angle * unit_axis``.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "device_constant",
    "matrix_to_rot6d",
    "rot6d_to_matrix",
    "quat_to_matrix",
    "matrix_to_quat",
    "axis_angle_to_matrix",
    "matrix_to_axis_angle",
    "skew",
    "geodesic_angle",
    "rot_z",
    "random_rotation",
]

_EPS = 1e-8


def matrix_to_rot6d(rot: torch.Tensor) -> torch.Tensor:
    """Continuous 6D representation of rotation matrices.

    Parameters
    ----------
    rot : Tensor, shape (..., 3, 3)

    Returns
    -------
    Tensor, shape (..., 6)
        The first two columns of ``rot``, concatenated.
    """
    return torch.cat([rot[..., :, 0], rot[..., :, 1]], dim=-1)


def rot6d_to_matrix(d6: torch.Tensor) -> torch.Tensor:
    """Rotation matrices from the 6D representation (Gram-Schmidt).

    Parameters
    ----------
    d6 : Tensor, shape (..., 6)
        Two (not necessarily orthonormal) 3-vectors.

    Returns
    -------
    Tensor, shape (..., 3, 3)
        Proper rotation matrices whose first column is ``d6[..., :3]``
        normalised and whose second column lies in the plane of both vectors.
    """
    a1, a2 = d6[..., :3], d6[..., 3:]
    b1 = a1 / a1.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    a2 = a2 - (b1 * a2).sum(-1, keepdim=True) * b1
    b2 = a2 / a2.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    b3 = torch.cross(b1, b2, dim=-1)
    return torch.stack([b1, b2, b3], dim=-1)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices from quaternions ``(w, x, y, z)`` (normalised first).

    Parameters
    ----------
    q : Tensor, shape (..., 4)

    Returns
    -------
    Tensor, shape (..., 3, 3)
    """
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    w, x, y, z = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    rows = [
        1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy),
        2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx),
        2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy),
    ]
    return torch.stack(rows, dim=-1).reshape(q.shape[:-1] + (3, 3))


def _quat_coef() -> torch.Tensor:
    # rows 0..8: coefficients of m00, m01, ..., m22; row 9: constants
    c = torch.zeros(10, 4, 4, dtype=torch.float64)
    e = lambda i, j: 3 * i + j  # noqa: E731
    # candidate 0 (w largest): [1+tr, m21-m12, m02-m20, m10-m01]
    c[9, 0, 0] = 1; c[e(0, 0), 0, 0] = c[e(1, 1), 0, 0] = c[e(2, 2), 0, 0] = 1  # noqa: E702
    c[e(2, 1), 0, 1], c[e(1, 2), 0, 1] = 1, -1
    c[e(0, 2), 0, 2], c[e(2, 0), 0, 2] = 1, -1
    c[e(1, 0), 0, 3], c[e(0, 1), 0, 3] = 1, -1
    # candidate 1 (x largest): [m21-m12, 1+m00-m11-m22, m01+m10, m02+m20]
    c[e(2, 1), 1, 0], c[e(1, 2), 1, 0] = 1, -1
    c[9, 1, 1] = 1; c[e(0, 0), 1, 1], c[e(1, 1), 1, 1], c[e(2, 2), 1, 1] = 1, -1, -1  # noqa: E702
    c[e(0, 1), 1, 2] = c[e(1, 0), 1, 2] = 1
    c[e(0, 2), 1, 3] = c[e(2, 0), 1, 3] = 1
    # candidate 2 (y largest): [m02-m20, m01+m10, 1-m00+m11-m22, m12+m21]
    c[e(0, 2), 2, 0], c[e(2, 0), 2, 0] = 1, -1
    c[e(0, 1), 2, 1] = c[e(1, 0), 2, 1] = 1
    c[9, 2, 2] = 1; c[e(0, 0), 2, 2], c[e(1, 1), 2, 2], c[e(2, 2), 2, 2] = -1, 1, -1  # noqa: E702
    c[e(1, 2), 2, 3] = c[e(2, 1), 2, 3] = 1
    # candidate 3 (z largest): [m10-m01, m02+m20, m12+m21, 1-m00-m11+m22]
    c[e(1, 0), 3, 0], c[e(0, 1), 3, 0] = 1, -1
    c[e(0, 2), 3, 1] = c[e(2, 0), 3, 1] = 1
    c[e(1, 2), 3, 2] = c[e(2, 1), 3, 2] = 1
    c[9, 3, 3] = 1; c[e(0, 0), 3, 3], c[e(1, 1), 3, 3], c[e(2, 2), 3, 3] = -1, -1, 1  # noqa: E702
    return c.reshape(10, 16)


_QUAT_COEF = _quat_coef()

_CONSTANTS: dict = {}


def device_constant(array, dtype, device) -> torch.Tensor:
    """A module-level constant (numpy array or tensor) as a tensor of ``dtype`` on ``device``, made once.

    Copying a small constant to a GPU on every call (``torch.as_tensor(x,
    device="cuda")``) waits for the device to finish its queued work; the
    copy is kept here instead, per (constant, dtype, device). Only for
    constants that live as long as the program (the cache keys on their
    identity and keeps a reference).
    """
    key = (id(array), dtype, str(device))
    hit = _CONSTANTS.get(key)
    if hit is None:
        if len(_CONSTANTS) > 256:
            _CONSTANTS.clear()
        with torch.inference_mode(False):  # made inside a solve's inference mode, still usable by autograd
            hit = (torch.as_tensor(array, dtype=dtype, device=device), array)
        _CONSTANTS[key] = hit
    return hit[0]


def matrix_to_quat(rot: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``(w, x, y, z)`` with ``w >= 0`` from rotation matrices.

    Uses the numerically stable branch selection (Shepperd's method) for
    every element, batched without Python loops.

    Parameters
    ----------
    rot : Tensor, shape (..., 3, 3)

    Returns
    -------
    Tensor, shape (..., 4)
    """
    # the four candidate solutions (each well conditioned for one case) are
    # linear in the matrix entries: one matmul builds them all
    coef = device_constant(_QUAT_COEF, rot.dtype, rot.device)
    cands = (rot.reshape(rot.shape[:-2] + (9,)) @ coef[:9] + coef[9]).unflatten(-1, (4, 4))
    best = cands.diagonal(dim1=-2, dim2=-1).contiguous().argmax(-1)  # argmax over a strided view is slow
    q = torch.gather(cands, -2, best[..., None, None].expand(best.shape + (1, 4))).squeeze(-2)
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    return torch.where(q[..., :1] < 0, -q, q)


def skew(v: torch.Tensor) -> torch.Tensor:
    """Cross-product matrices ``[v]_x`` with ``[v]_x @ u == v x u``.

    Parameters
    ----------
    v : Tensor, shape (..., 3)

    Returns
    -------
    Tensor, shape (..., 3, 3)
    """
    x, y, z = v.unbind(-1)
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], -1).reshape(v.shape[:-1] + (3, 3))


def axis_angle_to_matrix(aa: torch.Tensor) -> torch.Tensor:
    """Rotation matrices from rotation vectors (Rodrigues, stable near zero).

    Parameters
    ----------
    aa : Tensor, shape (..., 3)

    Returns
    -------
    Tensor, shape (..., 3, 3)
    """
    theta2 = (aa * aa).sum(-1, keepdim=True)[..., None]  # (...,1,1)
    small = theta2 < 1e-8
    theta2_safe = torch.where(small, torch.ones_like(theta2), theta2)
    theta = theta2_safe.sqrt()
    a = torch.where(small, 1 - theta2 / 6, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24, (1 - torch.cos(theta)) / theta2_safe)
    k = skew(aa)
    eye = torch.eye(3, dtype=aa.dtype, device=aa.device)
    return eye + a * k + b * (k @ k)


def matrix_to_axis_angle(rot: torch.Tensor) -> torch.Tensor:
    """Rotation vectors (angle in [0, pi]) from rotation matrices.

    Parameters
    ----------
    rot : Tensor, shape (..., 3, 3)

    Returns
    -------
    Tensor, shape (..., 3)
    """
    q = matrix_to_quat(rot)
    w = q[..., :1]
    xyz = q[..., 1:]
    s = xyz.norm(dim=-1, keepdim=True)
    angle = 2 * torch.atan2(s, w)
    small = s < 1e-6
    factor = torch.where(small, 2.0 / w.clamp_min(_EPS), angle / s.clamp_min(1e-12))
    return xyz * factor


def geodesic_angle(r1: torch.Tensor, r2: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Angle of the relative rotation ``r1^T r2`` in radians, in [0, pi].

    Parameters
    ----------
    r1, r2 : Tensor, shape (..., 3, 3)
        When ``r2`` is None the angle of ``r1`` itself is returned.
    eps : float
        Clamp margin that keeps the gradient of ``acos`` finite.

    Returns
    -------
    Tensor, shape (...)
    """
    if r2 is None:
        tr = r1.diagonal(dim1=-2, dim2=-1).sum(-1)
    else:
        tr = (r1 * r2).sum((-2, -1))  # trace(r1^T r2)
    c = ((tr - 1) * 0.5).clamp(-1 + eps, 1 - eps)
    return torch.acos(c)


def rot_z(angle: torch.Tensor) -> torch.Tensor:
    """Rotations about +Z by ``angle`` radians, shape (..., 3, 3)."""
    c, s = torch.cos(angle), torch.sin(angle)
    o, i = torch.zeros_like(angle), torch.ones_like(angle)
    return torch.stack([c, -s, o, s, c, o, o, o, i], -1).reshape(angle.shape + (3, 3))


def random_rotation(shape, generator=None, dtype=torch.float32, device="cpu", max_angle: float = math.pi) -> torch.Tensor:
    """Random rotations with uniform axes and angles uniform in [0, max_angle].

    With ``max_angle=pi`` this is not exactly Haar-uniform but covers SO(3);
    for tests and synthetic poses that suffices.

    Returns
    -------
    Tensor, shape (*shape, 3, 3)
    """
    shape = tuple(shape)
    axis = torch.randn(shape + (3,), generator=generator, dtype=dtype, device=device)
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    ang = torch.rand(shape + (1,), generator=generator, dtype=dtype, device=device) * max_angle
    return axis_angle_to_matrix(axis * ang)
