"""Batched, differentiable forward kinematics in torch (:func:`.kinematics.level_fk`).

Same convention as :mod:`.skeleton` (see its module docstring)::

    R_world[0] = R_local[0]
    p_world[0] = root_position
    R_world[j] = R_world[parent] @ R_local[j]
    p_world[j] = p_world[parent] + R_world[parent] @ offset[j]

End points (keypoints 22..31) are ``p_world[k] + R_world[k] @ end_offset``
of the joint ``k`` that carries them.

Offsets may be shared (``(22, 3)``) or per sample (``(..., 22, 3)``); all
leading batch dimensions broadcast. Works on any device and dtype.
"""

from __future__ import annotations

import numpy as np
import torch

from .features import NUM_JOINTS, NUM_KEYPOINTS
from .kinematics import level_fk
from .skeleton import END_OFFSETS, END_PARENTS, REST_OFFSETS, TREE, Skeleton, ancestor_matrix

__all__ = [
    "NUM_JOINTS",
    "NUM_KEYPOINTS",
    "forward_kinematics",
    "keypoints_from_world",
    "fk_keypoints",
    "skeleton_tensors",
    "ancestor_matrix",
]

_END_PARENTS = list(END_PARENTS)


def skeleton_tensors(skeleton: Skeleton | None = None, dtype=torch.float32, device="cpu"):
    """``(offsets (22,3), end_offsets (10,3))`` of a skeleton as tensors."""
    sk = skeleton or Skeleton()
    return (
        torch.as_tensor(np.asarray(sk.offsets), dtype=dtype, device=device),
        torch.as_tensor(np.asarray(sk.end_offsets), dtype=dtype, device=device),
    )


def forward_kinematics(local_rot: torch.Tensor, root_pos: torch.Tensor, offsets: torch.Tensor | None = None):
    """World joint rotations and positions.

    Parameters
    ----------
    local_rot : Tensor, shape (..., 22, 3, 3)
        Local rotations; row 0 is the root's world orientation.
    root_pos : Tensor, shape (..., 3)
        World position of the root joint.
    offsets : Tensor, shape (22, 3) or (..., 22, 3), optional
        Rest offsets (canonical skeleton when None). Row 0 is unused.

    Returns
    -------
    world_rot : Tensor, shape (..., 22, 3, 3)
    world_pos : Tensor, shape (..., 22, 3)
    """
    if offsets is None:
        offsets = torch.as_tensor(REST_OFFSETS, dtype=local_rot.dtype, device=local_rot.device)
    return level_fk(TREE, local_rot, offsets, root_pos=root_pos)


def keypoints_from_world(world_rot: torch.Tensor, world_pos: torch.Tensor, end_offsets: torch.Tensor | None = None) -> torch.Tensor:
    """All 32 keypoints from world joint rotations/positions.

    Parameters
    ----------
    world_rot : Tensor, shape (..., 22, 3, 3)
    world_pos : Tensor, shape (..., 22, 3)
    end_offsets : Tensor, shape (10, 3) or (..., 10, 3), optional

    Returns
    -------
    Tensor, shape (..., 32, 3)
    """
    if end_offsets is None:
        end_offsets = torch.as_tensor(END_OFFSETS, dtype=world_pos.dtype, device=world_pos.device)
    ends = world_pos[..., _END_PARENTS, :] + (world_rot[..., _END_PARENTS, :, :] @ end_offsets[..., None])[..., 0]
    return torch.cat([world_pos, ends], dim=-2)


def fk_keypoints(local_rot, root_pos, offsets=None, end_offsets=None, return_world: bool = False):
    """Forward kinematics straight to the 32 keypoints.

    Parameters
    ----------
    local_rot : Tensor, shape (..., 22, 3, 3)
    root_pos : Tensor, shape (..., 3)
    offsets : Tensor, shape (22, 3) or (..., 22, 3), optional
    end_offsets : Tensor, shape (10, 3) or (..., 10, 3), optional
    return_world : bool
        Also return ``(world_rot, world_pos)``.

    Returns
    -------
    keypoints : Tensor, shape (..., 32, 3)
    (world_rot, world_pos) : only when ``return_world``.
    """
    world_rot, world_pos = forward_kinematics(local_rot, root_pos, offsets)
    kp = keypoints_from_world(world_rot, world_pos, end_offsets)
    if return_world:
        return kp, (world_rot, world_pos)
    return kp
