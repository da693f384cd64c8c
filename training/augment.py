"""Data augmentation for canonical poses (numpy, batched, seeded).

Every function works on any leading batch shape and takes an explicit
``numpy.random.Generator`` so runs are reproducible. Shapes follow
:mod:`.skeleton`: local rotations ``(..., 22, 3, 3)``, root positions
``(..., 3)``, keypoints ``(..., 32, 3)``, keypoint masks ``(..., 32)``.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from neural_ik.model import skeleton as sk
from neural_ik.model.rotations_np import axis_angle_to_matrix, axis_rotation
from neural_ik.model.skeleton import Skeleton

__all__ = [
    "MIRROR_MATRIX",
    "JOINT_AXIS_SCALE",
    "mirror",
    "mirror_skeleton",
    "mirror_keypoints",
    "random_heading",
    "perturb_rotations",
    "random_bone_lengths",
    "keypoints_from_fk_batched",
    "keypoint_noise",
    "drop_keypoints",
]

#: Reflection x -> -x (the body's left/right).
MIRROR_MATRIX = np.diag([-1.0, 1.0, 1.0])

_NJ = len(sk.JOINTS)
_END_MIRROR = np.array([sk.END_POINTS.index(sk.KEYPOINTS[k]) for k in sk.MIRROR_KEYPOINTS[_NJ:]])


def _axis_scales() -> np.ndarray:
    """Per-joint, per-local-axis perturbation scale (22, 3).

    Local axes are those of the rest T-pose (world aligned): X = left,
    Y = back, Z = up. Knees bend about X, elbows about Z (arms along X); their
    other axes barely move. The forearm keeps some twist (X, pronation).
    """
    table = {
        "pelvis": (0.5, 0.5, 0.5),
        "spine1": (0.5, 0.3, 0.3),
        "spine2": (0.5, 0.3, 0.3),
        "spine3": (0.5, 0.3, 0.3),
        "neck": (0.6, 0.4, 0.6),
        "head": (0.8, 0.5, 0.8),
        "clavicle": (0.2, 0.3, 0.3),
        "upperarm": (1.0, 1.0, 1.0),
        "forearm": (0.6, 0.05, 1.0),
        "hand": (0.6, 1.0, 1.0),
        "thigh": (1.0, 0.6, 0.6),
        "calf": (1.0, 0.05, 0.05),
        "foot": (1.0, 0.3, 0.4),
        "toe": (0.8, 0.05, 0.05),
    }
    out = np.zeros((_NJ, 3))
    for j, name in enumerate(sk.JOINTS):
        out[j] = table[name[:-2] if name.endswith(("_l", "_r")) else name]
    return out


#: Per-joint, per-local-axis scale of :func:`perturb_rotations` (22, 3).
JOINT_AXIS_SCALE: np.ndarray = _axis_scales()

# hinge joints: (joint index, local axis, sign of flexion)
_HINGES = (
    (sk.JOINTS.index("calf_l"), 0, 1.0),
    (sk.JOINTS.index("calf_r"), 0, 1.0),
    (sk.JOINTS.index("forearm_l"), 2, -1.0),
    (sk.JOINTS.index("forearm_r"), 2, 1.0),
)
_HINGE_MAX = np.deg2rad(155.0)


def mirror_skeleton(skeleton: Skeleton) -> Skeleton:
    """Left/right mirrored skeleton (offsets reflected and swapped)."""
    M = MIRROR_MATRIX
    return Skeleton(
        skeleton.offsets[sk.MIRROR_JOINTS] @ M,
        skeleton.end_offsets[_END_MIRROR] @ M,
    )


def mirror(local_rot: np.ndarray, root_pos: np.ndarray, skeleton: Skeleton | None = None):
    """Mirror poses left/right.

    The reflection ``M = diag(-1, 1, 1)`` conjugates every rotation
    (``R' = M R M``), left and right joints swap (``MIRROR_JOINTS``) and the
    root's x is negated. World keypoints of the result are
    ``kp[..., MIRROR_KEYPOINTS, :] * (-1, 1, 1)``. Mirroring twice is the
    identity.

    Parameters
    ----------
    local_rot : ndarray, shape (..., 22, 3, 3)
    root_pos : ndarray, shape (..., 3)
    skeleton : Skeleton, optional
        Mirrored too (for asymmetric subject skeletons).

    Returns
    -------
    local_rot, root_pos, skeleton
        ``skeleton`` is ``None`` when none was given.
    """
    M = MIRROR_MATRIX
    lr = np.asarray(local_rot)
    out = M @ lr[..., sk.MIRROR_JOINTS, :, :] @ M
    rp = np.asarray(root_pos) * np.array([-1.0, 1.0, 1.0], dtype=np.asarray(root_pos).dtype)
    return out.astype(lr.dtype, copy=False), rp, (mirror_skeleton(skeleton) if skeleton is not None else None)


def mirror_keypoints(kp: np.ndarray) -> np.ndarray:
    """Mirror keypoints (..., 32, 3): swap left/right and negate x."""
    kp = np.asarray(kp)
    return kp[..., sk.MIRROR_KEYPOINTS, :] * np.array([-1.0, 1.0, 1.0], dtype=kp.dtype)


def random_heading(local_rot, root_pos, rng: np.random.Generator, batch_ndim: int = 1, max_angle: float = np.pi,
                   center: np.ndarray | None = None):
    """Rotate poses about the vertical (Z) axis by random angles.

    Parameters
    ----------
    local_rot : ndarray, shape (..., 22, 3, 3)
    root_pos : ndarray, shape (..., 3)
    rng : numpy.random.Generator
    batch_ndim : int
        How many leading axes get independent angles; the remaining ones
        share them (e.g. ``1`` for ``(B, T, 22, 3, 3)`` sequences: one angle
        per sequence; ``0`` for a single clip ``(T, 22, 3, 3)``).
    max_angle : float
        Angles are uniform in ``[-max_angle, max_angle]`` (radians).
    center : ndarray, shape (3,), optional
        Point on the vertical axis of rotation (default the origin).

    Returns
    -------
    local_rot, root_pos, angles
        ``angles`` has shape ``local_rot.shape[:batch_ndim]``. Heights are
        unchanged.
    """
    lr = np.asarray(local_rot)
    rp = np.asarray(root_pos)
    bshape = lr.shape[:batch_ndim]
    angles = rng.uniform(-max_angle, max_angle, size=bshape)
    Rz = axis_rotation(2, angles)  # bshape + (3, 3)
    extra = lr.ndim - 3 - batch_ndim
    Rz_e = Rz.reshape(bshape + (1,) * extra + (3, 3))
    out = lr.copy()
    out[..., 0, :, :] = Rz_e @ lr[..., 0, :, :]
    c = np.zeros(3) if center is None else np.asarray(center, dtype=np.float64)
    new_root = np.einsum("...ij,...j->...i", Rz_e, rp - c) + c
    return out, new_root.astype(rp.dtype, copy=False), angles


def perturb_rotations(local_rot, rng: np.random.Generator, sigma_deg: float = 10.0, axis_scale: np.ndarray | None = None,
                      include_root: bool = False, clip_sigmas: float = 2.5):
    """Small random local rotations to create new plausible poses.

    Each joint gets ``L' = L @ exp(v)`` with ``v ~ N(0, (sigma * scale_j)^2)``
    per local axis, truncated at ``clip_sigmas`` standard deviations. The
    per-joint axis scales (:data:`JOINT_AXIS_SCALE`) keep knees and elbows
    hinge-like; the flexion of knees and elbows is then clamped to
    ``[0, 155]`` degrees so that no perturbation hyperextends them.

    Parameters
    ----------
    local_rot : ndarray, shape (..., 22, 3, 3)
    rng : numpy.random.Generator
    sigma_deg : float
        Base standard deviation in degrees.
    axis_scale : ndarray, shape (22, 3), optional
        Overrides :data:`JOINT_AXIS_SCALE`.
    include_root : bool
        Also perturb the root orientation (row 0).
    clip_sigmas : float
        Truncation of the normal draws.

    Returns
    -------
    ndarray, same shape and dtype as ``local_rot`` (orthonormal rotations)
    """
    lr = np.asarray(local_rot)
    scale = JOINT_AXIS_SCALE if axis_scale is None else np.asarray(axis_scale, dtype=np.float64)
    sig = np.deg2rad(sigma_deg) * scale
    if not include_root:
        sig = sig.copy()
        sig[0] = 0.0
    z = np.clip(rng.standard_normal(lr.shape[:-2] + (3,)), -clip_sigmas, clip_sigmas)
    v = z * sig
    src = lr.astype(np.float64)
    out = src @ axis_angle_to_matrix(v)
    # hinge clamp: flexion angle of the child direction in the hinge plane;
    # the bounds widen to the unperturbed angle, so data poses are never changed
    for j, ax, sign in _HINGES:
        R = out[..., j, :, :]
        phi0 = _flexion(src[..., j, :, :], j, ax, sign)
        phi = _flexion(R, j, ax, sign)
        lo = np.minimum(0.0, phi0)
        hi = np.maximum(_HINGE_MAX, phi0)
        fix = (np.clip(phi, lo, hi) - phi) * sign
        if np.any(fix != 0):
            out[..., j, :, :] = axis_rotation(ax, fix) @ R
    return out.astype(lr.dtype, copy=False)


def _flexion(R, j, ax, sign):
    """Signed flexion angle of hinge joint ``j`` (rotation of its bone about local axis ``ax``)."""
    c = sk.BONE_CHILD[j]
    rest = sk.REST_OFFSETS[c] if c < _NJ else sk.END_OFFSETS[c - _NJ]
    d0 = rest / np.linalg.norm(rest)
    d = np.einsum("...ij,j->...i", R, d0)
    cross = np.cross(d0, d)
    return np.arctan2(cross[..., ax], np.einsum("...i,i->...", d, d0)) * sign


def _rest_positions(offsets: np.ndarray, end_offsets: np.ndarray) -> np.ndarray:
    """Rest-pose keypoints (identity rotations, root at offsets[0]) for batched offsets."""
    pos = np.empty(offsets.shape[:-2] + (_NJ, 3))
    pos[..., 0, :] = offsets[..., 0, :]
    for j in range(1, _NJ):
        pos[..., j, :] = pos[..., sk.PARENTS[j], :] + offsets[..., j, :]
    ends = pos[..., list(sk.END_PARENTS), :] + end_offsets
    return np.concatenate([pos, ends], axis=-2)


def random_bone_lengths(skeleton: Skeleton, rng: np.random.Generator, sigma: float = 0.05, scale_sigma: float = 0.08,
                        batch=None, symmetric: bool = True, max_rel: float = 0.25):
    """Random bone lengths and overall scale.

    Every joint and end offset is multiplied by ``(1 + N(0, sigma))``
    (clipped to ``1 +- max_rel``; left and right share factors when
    ``symmetric``), then everything by ``exp(N(0, scale_sigma))``. The root
    rest height is recomputed so that the rest pose stands on z = 0 (lowest
    heel / toe tip), as for the loaded skeletons.

    Parameters
    ----------
    skeleton : Skeleton
    rng : numpy.random.Generator
    sigma : float
        Relative per-bone standard deviation.
    scale_sigma : float
        Standard deviation of the log overall scale.
    batch : int or tuple, optional
        Draw a batch: returns arrays instead of a Skeleton.
    symmetric : bool
    max_rel : float

    Returns
    -------
    Skeleton, or (offsets (B..., 22, 3), end_offsets (B..., 10, 3)) with ``batch``
    """
    shape = () if batch is None else ((batch,) if np.isscalar(batch) else tuple(batch))
    f_j = 1.0 + np.clip(rng.normal(0.0, sigma, shape + (_NJ,)), -max_rel, max_rel)
    f_e = 1.0 + np.clip(rng.normal(0.0, sigma, shape + (len(sk.END_POINTS),)), -max_rel, max_rel)
    if symmetric:
        f_j = 0.5 * (f_j + f_j[..., sk.MIRROR_JOINTS])
        f_e = 0.5 * (f_e + f_e[..., _END_MIRROR])
    s = np.exp(rng.normal(0.0, scale_sigma, shape))[..., None, None]
    off = skeleton.offsets * f_j[..., None] * s
    end = skeleton.end_offsets * f_e[..., None] * s
    # stand on the floor: root rest height from the legs
    off[..., 0, :] = skeleton.offsets[0] * s[..., 0, :]
    rest = _rest_positions(off, end)
    feet = [sk.KEYPOINTS.index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    low = rest[..., feet, 2].min(axis=-1)
    off[..., 0, 2] -= low
    if batch is None:
        return Skeleton(off, end)
    return off, end


def keypoints_from_fk_batched(local_rot, root_pos, offsets, end_offsets) -> np.ndarray:
    """``keypoints_from_fk_np`` with per-sample end offsets.

    Parameters
    ----------
    local_rot : ndarray, shape (..., 22, 3, 3)
    root_pos : ndarray, shape (..., 3)
    offsets : ndarray, shape (..., 22, 3) or (22, 3)
    end_offsets : ndarray, shape (..., 10, 3) or (10, 3)

    Returns
    -------
    ndarray, shape (..., 32, 3)
    """
    return sk.keypoints_from_fk_np(local_rot, root_pos, Skeleton(offsets, np.asarray(end_offsets, dtype=np.float64)))


def keypoint_noise(kp, rng: np.random.Generator, sigma_m: float = 0.01, per_sample: bool = False, batch_ndim: int = 1):
    """Add Gaussian noise to keypoints.

    Parameters
    ----------
    kp : ndarray, shape (..., 32, 3)
    rng : numpy.random.Generator
    sigma_m : float
        Standard deviation in metres.
    per_sample : bool
        Draw each sample's sigma uniformly in ``[0, sigma_m]`` (over the
        first ``batch_ndim`` axes) instead of using ``sigma_m`` everywhere.
    batch_ndim : int

    Returns
    -------
    ndarray, same shape and dtype
    """
    kp = np.asarray(kp)
    noise = rng.standard_normal(kp.shape)
    if per_sample:
        s = rng.uniform(0.0, sigma_m, kp.shape[:batch_ndim])
        noise *= s.reshape(s.shape + (1,) * (kp.ndim - batch_ndim))
    else:
        noise *= sigma_m
    return (kp + noise).astype(kp.dtype, copy=False)


def drop_keypoints(mask, rng: np.random.Generator, p: float = 0.2, keep=()):
    """Randomly hide available keypoints.

    Parameters
    ----------
    mask : ndarray of bool, shape (..., 32)
        True where a keypoint is given.
    rng : numpy.random.Generator
    p : float
        Probability of hiding each given keypoint.
    keep : sequence of int or str
        Keypoints never hidden (indices or names, e.g. ``("pelvis",)``).

    Returns
    -------
    ndarray of bool, same shape (a subset of ``mask``)
    """
    mask = np.asarray(mask, dtype=bool)
    drop = rng.random(mask.shape) < p
    if keep:
        idx = [sk.KEYPOINTS.index(k) if isinstance(k, str) else int(k) for k in keep]
        drop[..., idx] = False
    return mask & ~drop
