"""Canonical joint rotations read straight from a source skeleton's motion (no ``bpy``).

A source with a hierarchy (BVH, FBX, an armature) says how each of its bones
turns, twist included, which keypoints cannot. Its skeleton is planned like a
target rig (:func:`..retarget.plan.plan_retarget`: the alignment ``A_b`` of
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
from . import tuning
from .plans import cached_plan

__all__ = ["source_world_rotations", "source_pose", "joints_from_source_rig", "source_rest_is_human",
           "rest_is_human", "source_heights", "source_lengths", "source_to_armature", "shared_bones"]

_J = {n: i for i, n in enumerate(JOINTS)}


def source_world_rotations(source_rig, W=None, plan=None) -> tuple:
    """World rotations (T, 22, 3, 3) of the canonical joints and which ones the source has.

    Parameters
    ----------
    source_rig : readers.source_rig.SourceRig
    W : ndarray (T, B, 3, 3), optional
        The source's posed rotations when already computed
        (:func:`..retarget.rigpose.pose_rig`): of all frames, or of a chunk
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
    from ..retarget.rigpose import pose_rig

    if plan is None:
        plan = cached_plan(source_rig.rig, source_rig.mapping)
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


def source_pose(src, a, b):
    """``(W, X)``: the source skeleton posed at frames ``a:b`` (every bone; :func:`..retarget.rigpose.pose_rig`).

    The last chunk posed is kept on the source: a clip of one chunk (most
    clips) is posed once, not three times (its joints, its canonical
    rotations, the bones whose turn the rig copies).
    """
    from ..retarget.rigpose import pose_rig

    key = (a, b, id(src.quaternions), id(src.locations))
    cached = src.__dict__.get("_pose_cache")
    if cached is not None and cached[0] == key:
        return cached[1]
    out = pose_rig(src.rig, src.quaternions[a:b], src.locations[a:b], chunk=b - a)
    src.__dict__["_pose_cache"] = (key, out)
    return out


def joints_from_source_rig(kp, source_rig, chunk):
    """Keypoints whose joints are the source skeleton's mapped bone heads (the same mapper as the rig's).

    A reader may place a canonical joint between bones (a CMU ``LHipJoint``
    and ``LeftHip``); the targets of the rig-space solve must name the very
    points the source skeleton's mapping names, or a skeleton baked onto
    itself would be pulled away from where it is. The source is posed
    ``chunk`` frames at a time, only the mapped bones and their ancestors.
    """
    from ..retarget.chunks import frame_chunks
    from ..retarget.rigpose import pose_rig

    out = kp.copy()
    rig = source_rig.rig
    pairs = [(j, rig.index(source_rig.mapping.entries[name])) for j, name in enumerate(JOINTS)
             if source_rig.mapping.entries.get(name) is not None and rig.has(source_rig.mapping.entries[name])]
    if not pairs:
        return out
    need = sorted({b for _, b in pairs} | {a for _, b in pairs for a in rig.ancestors(b)})
    chunks = list(frame_chunks(len(kp), chunk))
    for a, b in chunks:
        if len(chunks) == 1:   # (posed whole once, for the stages after this one too)
            _, X = source_pose(source_rig, a, b)
        else:
            _, X = pose_rig(rig, source_rig.quaternions[a:b], source_rig.locations[a:b], bones=need, chunk=b - a)
        for j, sb in pairs:
            part = out[a:b, j]
            given = np.isfinite(part).all(-1)         # a masked joint stays masked
            part[given] = X[given, sb]
    return out


def source_rest_is_human(source_rig) -> bool:
    """Whether the source skeleton's rest is a standing human pose (T, A, any joint orients).

    Its joint rotations are read relative to that rest; a rest lying down or
    with limbs folded (markerless captures that rest along one axis) would
    turn every rotation wrong (:data:`.tuning.SOURCE_REST_LIMITS`).
    """
    try:
        splan = cached_plan(source_rig.rig, source_rig.mapping)
    except ValueError:
        return False
    return rest_is_human(splan)


def rest_is_human(plan) -> bool:
    """Whether a planned rig's rest is a standing human pose: each limb and spine joint within
    :data:`.tuning.SOURCE_REST_LIMITS` of the canonical T-pose (any joint orients)."""
    rig, entries = plan.rig, plan.mapping.entries
    for j, lim in tuning.SOURCE_REST_LIMITS.items():
        bone = entries.get(j)
        if bone is None or not rig.has(bone):
            continue
        C = plan.offset.get(rig.index(bone))
        if C is None:
            continue
        ang = np.degrees(np.arccos(np.clip((np.trace(C) - 1.0) / 2.0, -1.0, 1.0)))
        if ang > lim:
            return False
    return True


def source_heights(src):
    """Flat-foot heights (metres) of the source's ankles and balls per side, from its skeleton when known."""
    from .targets import foot_points

    if src is None:
        return None
    try:
        splan = cached_plan(src.rig, src.mapping)
    except ValueError:
        return None
    fp = foot_points(splan, np.array([0.0, 0.0, 1.0]))
    if not fp:
        return None
    return {side: {name: h for name, _b, _o, h in pts if name in ("ankle", "ball")} for side, pts in fp.items()}


def source_lengths(src):
    """Rest positions (metres) of the source skeleton's mapped joints, when it has a skeleton."""
    if src is None:
        return None
    out = {}
    for j, bone in src.mapping.entries.items():
        if j in _J and src.rig.has(bone):
            out[j] = src.rig.head[src.rig.index(bone)]
    return out


def source_to_armature(minv, unit):
    """Rotation from the source's world (the clip's space) into the rig's armature axes."""
    Rm = minv[:3, :3] * unit
    return Rm / np.cbrt(np.linalg.det(Rm))


def shared_bones(src, plan, minv, unit):
    """``(pairs, same)``: (rig bone, source bone) pairs sharing a name, and whether it is the same skeleton.

    The same skeleton: every bone the two share by name rests at the same
    place relative to the pelvis (:data:`.tuning.SAME_SKELETON_TOLERANCE`
    of the leg length), whatever the bones' rolls or joint orients.
    """
    rig = plan.rig
    shared = [(b, src.rig.index(rig.names[b])) for b in range(len(rig)) if src.rig.has(rig.names[b])]
    same = False
    pelvis_s = src.rig.index(src.mapping.entries["pelvis"]) if "pelvis" in src.mapping.entries else -1
    if (shared and pelvis_s >= 0 and plan.leg_length > 0
            and len(shared) >= tuning.SAME_SKELETON_SHARED * len(plan.mapping.entries)):
        R = source_to_armature(minv, unit)
        ht = rig.head[[b for b, _ in shared]] - rig.head[plan.root]
        hs = (src.rig.head[[sb for _, sb in shared]] - src.rig.head[pelvis_s]) @ R.T / unit
        same = bool(np.max(np.linalg.norm(ht - hs, axis=-1)) < tuning.SAME_SKELETON_TOLERANCE * plan.leg_length)
    return shared, same
