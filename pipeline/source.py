"""Canonical joint rotations read straight from a source skeleton's motion (no ``bpy``).

A source with a hierarchy (BVH, FBX, an armature) says how each of its bones
turns, twist included, which keypoints cannot. Its skeleton is planned like a
target rig (:func:`..retarget.solve.plan_retarget`: the alignment ``A_b`` of
each mapped bone with the canonical T-pose), so a posed bone's armature
rotation ``G_b`` gives the world rotation of that body part away from the
T-pose::

    R_world[j] = G_b A_b^T          (b: the bone mapped to joint j)

These replace the network's answer as the start and prior of the rig-space
solve when the source has a skeleton: a clip baked onto its own skeleton
then starts (and ends) exactly where it was. Canonical joints the source has
no bone for follow their canonical parent (rest relative to it).
"""

from __future__ import annotations

import numpy as np

from ..model.skeleton import JOINTS, PARENTS

__all__ = ["source_world_rotations"]


def source_world_rotations(source_rig, W=None, plan=None) -> tuple:
    """World rotations (T, 22, 3, 3) of the canonical joints and which ones the source has.

    Parameters
    ----------
    source_rig : readers.source_rig.SourceRig
    W : ndarray (T, B, 3, 3), optional
        The source's posed rotations when already computed
        (:func:`..retarget.solve.pose_rig`): of all frames, or of a chunk
        of frames (the rotations are per frame).
    plan : RetargetPlan, optional
        The source skeleton's plan when already made.

    Returns
    -------
    rot : ndarray (T, 22, 3, 3)
        In the source's world axes (metres, Z up).
    given : ndarray of bool (22,)
    plan : RetargetPlan
        The source skeleton's plan.
    """
    from ..retarget.solve import pose_rig
    from .core import _cached_plan

    if plan is None:
        plan = _cached_plan(source_rig.rig, source_rig.mapping)
    if W is None:
        W, _ = pose_rig(source_rig.rig, source_rig.quaternions, source_rig.locations)
    T = W.shape[0]
    rot = np.empty((T, len(JOINTS), 3, 3))
    given = np.zeros(len(JOINTS), dtype=bool)
    for j, name in enumerate(JOINTS):      # parents come first in JOINTS
        bone = source_rig.mapping.entries.get(name)
        if bone is not None and source_rig.rig.has(bone) and source_rig.rig.index(bone) in plan.align:
            b = source_rig.rig.index(bone)
            rot[:, j] = W[:, b] @ plan.align[b].T
            given[j] = True
        elif PARENTS[j] >= 0:
            rot[:, j] = rot[:, PARENTS[j]]
        else:
            rot[:, j] = np.eye(3)
    return rot, given, plan
