"""Human joint limits as data, a differentiable penalty and a projection.

Limits are boxes on the components of each joint's *local rotation vector*
(axis-angle, radians internally, degrees in the table), in the joint's rest
frame (X = body left, Y = body back, Z = up; see :mod:`.skeleton`). For the
moderate ranges of most joints this behaves like an XYZ Euler box while
staying smooth and free of gimbal lock.

Signs, for the left side (the right side is mirrored: ``x`` kept, ``y`` and
``z`` negated and swapped):

- spine/neck/head: +X bends forward, Y bends sideways, Z twists;
- elbow (forearm): flexion brings the forearm forward, a negative Z rotation
  for the left arm (+X towards -Y); X is pronation/supination;
- wrist (hand): +Y flexes the palm-down hand downwards;
- hip (thigh): flexion is negative X, abduction of the left leg negative Y;
- knee (calf): flexion is positive X only (no hyperextension);
- ankle (foot): +X plantar flexion; toes: X.

The anatomical ranges are widened to the 0.1-99.9 percentile range (plus 5
degrees) of the CMU motion retargeted onto this skeleton, both sides pooled,
where that goes further, so that real motion is never penalised. The
retargeting leaves some conventions of its own: the spine's bend is shared
unevenly between ``spine1`` (forward) and ``spine2`` (backward), the elbow
flexes about an axis between -Z and -Y, and the ankle's twist about the foot
axis is wide. ``pelvis`` (the root orientation) is free.
"""

from __future__ import annotations

import numpy as np

from .skeleton import JOINTS

__all__ = ["LIMITS_DEG", "LIMITS_RAD", "limit_arrays", "limit_violation", "limit_penalty", "project_to_limits"]

_F = (-180.0, 180.0)  # free

#: (x range, y range, z range) in degrees for the left side and the centre line.
LIMITS_DEG: dict[str, tuple[tuple[float, float], ...]] = {
    "pelvis": (_F, _F, _F),
    "spine1": ((-45, 94), (-45, 45), (-50, 50)),
    "spine2": ((-78, 70), (-45, 45), (-50, 50)),
    "spine3": ((-45, 70), (-45, 45), (-50, 50)),
    "neck": ((-60, 80), (-50, 50), (-80, 80)),
    "head": ((-60, 80), (-50, 50), (-90, 90)),
    "clavicle_l": ((-45, 45), (-62, 45), (-50, 50)),
    "upperarm_l": ((-166, 169), _F, _F),
    "forearm_l": ((-120, 120), (-78, 40), (-165, 20)),
    "hand_l": ((-125, 151), (-90, 90), (-104, 88)),
    "thigh_l": ((-150, 50), (-100, 45), (-87, 138)),
    "calf_l": ((-15, 165), (-30, 30), (-40, 40)),
    "foot_l": ((-106, 80), (-153, 180), (-97, 90)),
    "toe_l": ((-70, 77), (-30, 30), (-30, 30)),
}


def _full_table() -> np.ndarray:
    out = np.zeros((len(JOINTS), 3, 2))
    for j, name in enumerate(JOINTS):
        if name in LIMITS_DEG:
            out[j] = np.asarray(LIMITS_DEG[name], dtype=float)
        elif name.endswith("_r"):
            left = np.asarray(LIMITS_DEG[name[:-2] + "_l"], dtype=float)
            out[j, 0] = left[0]
            out[j, 1] = -left[1, ::-1]
            out[j, 2] = -left[2, ::-1]
        else:
            raise KeyError(f"no joint limits for {name}")
    return np.radians(out)


#: Every joint's (x, y, z) range (22, 3, 2), radians: (low, high), the right side mirrored.
LIMITS_RAD = _full_table()


def limit_arrays(dtype=None, device="cpu"):
    """``(lo, hi)`` tensors of shape (22, 3), radians (float32 when ``dtype`` is not given)."""
    import torch

    t = torch.as_tensor(LIMITS_RAD, dtype=torch.float32 if dtype is None else dtype, device=device)
    return t[..., 0], t[..., 1]


def limit_violation(local_rot):
    """Per-component violation (radians, >= 0) of the limits, shape (..., 22, 3).

    Parameters
    ----------
    local_rot : Tensor, shape (..., 22, 3, 3)
    """
    import torch

    from .rotations import matrix_to_axis_angle

    lo, hi = limit_arrays(local_rot.dtype, local_rot.device)
    v = matrix_to_axis_angle(local_rot)
    return torch.relu(v - hi) + torch.relu(lo - v)


def limit_penalty(local_rot):
    """Differentiable penalty: mean over the batch of the summed squared violations.

    Zero inside the limits, quadratic outside.
    """
    viol = limit_violation(local_rot)
    return (viol ** 2).sum((-2, -1)).mean()


def project_to_limits(local_rot, skip_root: bool = True):
    """Clamp each joint's rotation vector into its box.

    Parameters
    ----------
    local_rot : Tensor, shape (..., 22, 3, 3)
    skip_root : bool
        Leave joint 0 (the root orientation) untouched.

    Returns
    -------
    Tensor, shape (..., 22, 3, 3)
        Rotations inside the limits (unchanged where already inside).
    """
    import torch

    from .rotations import axis_angle_to_matrix, matrix_to_axis_angle

    lo, hi = limit_arrays(local_rot.dtype, local_rot.device)
    v = matrix_to_axis_angle(local_rot)
    vc = torch.maximum(torch.minimum(v, hi), lo)
    changed = (vc != v).any(-1)
    if skip_root:
        changed[..., 0] = False
    if not bool(changed.any()):
        return local_rot
    return torch.where(changed[..., None, None], axis_angle_to_matrix(vc), local_rot)
