"""What a contact sheet of a bake shows, as arrays (no ``bpy``): the input and the baked rig at a few frames.

:func:`preview_pose` reads a fitted :class:`.core.RigBake` before its
whole-clip arrays are let go: the baked rig's bones (heads and tails, world
space, metres) and the input keypoints at the same frames. The renderer
(``blender_io/contact_sheet.py``) draws them side by side over the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PreviewPose", "pick_frames", "preview_pose"]


@dataclass
class PreviewPose:
    """A bake at a few frames, world space, metres (Z up).

    Attributes
    ----------
    frames : list of int
        The baked frames shown (0-based: the first baked frame is 0).
    heads, tails : ndarray (N, B, 3)
        Every bone of the rig, as posed by the bake (on a generated Rigify
        rig its mapped controls: its other bones follow them through
        constraints the bake does not evaluate).
    keypoints : ndarray (N, 32, 3)
        The input keypoints at those frames (NaN where not given).
    """

    frames: list
    heads: np.ndarray
    tails: np.ndarray
    keypoints: np.ndarray


def pick_frames(n_frames, count=6):
    """``count`` frame indices spread evenly over ``n_frames`` (first and last included)."""
    count = max(1, min(int(count), int(n_frames)))
    if count == 1:
        return [0]
    return sorted(set(int(round(i * (n_frames - 1) / (count - 1))) for i in range(count)))


def preview_pose(job, count=6) -> PreviewPose:
    """:class:`PreviewPose` of ``count`` frames of a fitted ``job`` (its result and source still held)."""
    from ..retarget.rigify import is_generated_rigify
    from ..retarget.rigpose import pose_rig

    frames = pick_frames(job.n_frames, count)
    res, rig = job.result, job.full_rig     # (every bone drawn, those the bake left at rest too)
    cols = [rig.index(n) for n in res.bone_names]
    quats = np.zeros((len(frames), len(rig), 4))
    quats[..., 0] = 1.0
    quats[:, cols] = np.asarray(res.quaternions)[frames]
    locs = np.zeros((len(frames), len(rig), 3))
    locs[:, cols] = np.asarray(res.locations)[frames]
    rot, heads = pose_rig(rig, quats, locs)
    length = np.linalg.norm(rig.tail - rig.head, axis=-1)
    tails = heads + rot[..., :, 1] * length[None, :, None]     # (a bone points along its Y axis)
    if is_generated_rigify(rig):
        shown = sorted(rig.index(b) for b in job.plan.mapping.entries.values())
        heads, tails = heads[:, shown], tails[:, shown]
    M = np.asarray(job.object_matrix, dtype=np.float64)
    world = lambda p: p @ M[:3, :3].T + M[:3, 3]                   # noqa: E731
    keypoints = world(np.asarray(job.src_m)[frames] / job.unit)     # (src_m: armature axes, metres)
    return PreviewPose(frames, world(heads), world(tails), keypoints)
