"""Solve Frame and Live Solve: the armature's pose bones set from one frame of keypoints or effectors, no keys.

The bake's own job (:class:`.bake.BakeJob`) on one frame, then the pose
written with one ``foreach_set``; what the animator did not touch (an
effector that did not move) stays as it is.
"""

from __future__ import annotations

import time

import numpy as np

from ..model.skeleton import KEYPOINTS, SPARSE_EFFECTORS, SPARSE_HINTS
from ..pipeline import BakeOptions
from ..pipeline.keys import axis_angle_continuous
from ..retarget.channels import quats_to_euler_continuous
from ..retarget.rigpose import turn_bones_to
from .bake import BakeJob
from .rigify import apply_constants

__all__ = ["solve_current_frame", "UNTOUCHED_M", "UNTOUCHED_DEG"]

#: ``PoseBone.rotation_mode``'s value for quaternions, as ``foreach_get`` reads the enum.
_QUATERNION = 0


def _set_pose(obj, names, quats, locations, root, rotation_mode="BONE"):
    """Set pose-bone rotations (in each bone's mode) and the root location.

    Quaternion bones are written in one ``foreach_set`` and every bone's mode
    read in one ``foreach_get`` (Live Solve sets a pose many times a second),
    the others one by one in their own mode.
    """
    pbs = obj.pose.bones
    n = len(pbs)
    at = {name: i for i, name in enumerate(pbs.keys())}
    modes = np.empty(n, dtype=np.int32)
    pbs.foreach_get("rotation_mode", modes)
    buf = np.empty(n * 4, dtype=np.float32)
    pbs.foreach_get("rotation_quaternion", buf)
    buf = buf.reshape(n, 4)
    quat_bones = False
    for b, name in enumerate(names):
        if name is None:
            continue
        i = at[name]
        if b == root:
            pbs[i].location = locations[b]
        if rotation_mode == "QUATERNION" and modes[i] != _QUATERNION:
            pbs[i].rotation_mode = "QUATERNION"
            modes[i] = _QUATERNION
        if modes[i] == _QUATERNION:
            buf[i] = quats[b]
            quat_bones = True
            continue
        pb = pbs[i]
        q = quats[b]
        if pb.rotation_mode == "AXIS_ANGLE":
            pb.rotation_axis_angle = axis_angle_continuous(q[None, None])[0, 0]
        else:
            pb.rotation_euler = quats_to_euler_continuous(q[None, None], pb.rotation_mode)[0, 0]
    if quat_bones:
        pbs.foreach_set("rotation_quaternion", buf.ravel())


def solve_current_frame(obj, keypoints, mask, options: BakeOptions | None = None, *, mapping=None,
                        solver=None, rotations=None) -> dict:
    """Pose the armature's pose bones from one frame of keypoints (no keys).

    Parameters
    ----------
    obj : bpy.types.Object
        Target armature.
    keypoints : ndarray, shape (1, 32, 3)
        World positions (metres, Z up), NaN = missing (sparse effectors are
        enough in ``"auto"``/``"sparse"`` mode).
    mask : ndarray of bool (1, 32) or None
    options : BakeOptions, optional
        ``mode``, ``refine``, ``scale``, ``in_place``, ``device`` and
        ``rotation_mode`` apply (smoothing and frames do not).
    rotations : dict, optional
        Effector name -> (3, 3) world rotation its bone takes (an effector
        empty's rotation: hands, feet and head turn as their empties do).

    From effectors (a sparse pose), what the animator did not touch stays:
    when no effector moved or turned the pose is left as it is, and a hand,
    foot or head whose effector did not move keeps its turn in the world
    (a foot stays planted while a hand is dragged).

    Returns
    -------
    dict
        ``effector_reach_mm`` (mean, max), ``unreachable`` (list of str),
        ``keypoint_error_mm`` (joints at the rig's scale),
        ``bone_direction_error_deg``, ``seconds``, ``warnings`` and
        ``unchanged`` (nothing moved: the pose was kept).
    """
    options = options or BakeOptions()
    kp = np.asarray(keypoints, dtype=np.float64)
    if kp.ndim == 2:
        kp = kp[None]
    single = BakeOptions(**{**options.__dict__, "frames": None, "smooth": "none", "fps": None,
                            "frame_start": None, "foot_lock": False, "ground": False})
    t0 = time.perf_counter()
    job = BakeJob(obj, kp[:1], None if mask is None else np.asarray(mask).reshape(1, -1), 1.0, single,
                  source_name="pose", mapping=mapping, solver=solver)
    core = job.core
    core.light = True
    known = core.mask[0]
    if not known[[i for i, n in enumerate(KEYPOINTS) if n not in SPARSE_EFFECTORS + SPARSE_HINTS]].any():
        core.mode = "sparse"
    now = _effector_bones_now(obj, job.mapping) if core.mode == "sparse" else {}
    moved = {e: _moved(kp[0, KEYPOINTS.index(e)], now[e], (rotations or {}).get(e)) for e in now
             if e in SPARSE_EFFECTORS}
    if now and not any(moved.values()):
        return _unchanged(kp[0], now, t0, core.warnings)
    core.solve()
    res = core.fit()
    f = core.measure()
    turns = _end_turns(obj, job.mapping, core.plan.rig, now, moved, rotations or {})
    turns = {b: r for b, r in turns.items() if not np.asarray(core.locked.get(b, False)).any()}
    if turns:
        turn_bones_to(core.plan.rig, res.quaternions[0], res.locations[0], turns)
    names = [n if (res.driven[b] or b == core.plan.root) else None for b, n in enumerate(res.bone_names)]
    apply_constants(obj, job.constant_keys)
    _set_pose(obj, names, res.quaternions[0], res.locations[0], core.plan.root, single.rotation_mode)
    return {
        "effector_reach_mm": tuple(float(x) for x in f.effector_reach_mm),
        "unreachable": list(f.unreachable),
        "keypoint_error_mm": tuple(float(x) for x in f.joint_error_mm),
        "bone_direction_error_deg": float(f.bone_direction_error_deg),
        "seconds": time.perf_counter() - t0,
        "warnings": list(core.warnings),
        "unchanged": False,
    }


#: Effectors whose bone takes its empty's turn (the pelvis' turn is the whole body's).
_END_EFFECTORS = ("head", "hand_l", "hand_r", "foot_l", "foot_r")


#: An effector within this of its bone (metres, world) and turned less than this (degrees) is untouched.
UNTOUCHED_M = 1e-4


UNTOUCHED_DEG = 0.1


#: A foot's toe keeps its turn relative to the foot when the foot takes its empty's turn.
_END_CHILDREN = {"foot_l": "toe_l", "foot_r": "toe_r"}


def _end_turns(obj, mapping, rig, now, moved, rotations) -> dict:
    """Bone index -> armature-space rotation for the hands, feet (their toes with them) and head:
    the empty's turn where given, the bone's turn now where the effector did not move."""
    out = {}
    to_armature = _orthonormal(np.array(obj.matrix_world)[:3, :3]).T   # (its scale ignored)
    for e in _END_EFFECTORS:
        if e not in now or (moved[e] and e not in rotations):
            continue
        world = _orthonormal(rotations[e]) if e in rotations else now[e][1]
        out[rig.index(mapping.entries[e])] = to_armature @ world
        child = _END_CHILDREN.get(e)
        if child in now:
            out[rig.index(mapping.entries[child])] = to_armature @ (world @ now[e][1].T @ now[child][1])
    return out


def _effector_bones_now(obj, mapping) -> dict:
    """Effector (and toe) name -> (world head, world rotation) of its mapped pose bone as posed now."""
    mw = np.array(obj.matrix_world)
    names, mats = [], []
    for e in SPARSE_EFFECTORS + tuple(_END_CHILDREN.values()):
        pb = obj.pose.bones.get(mapping.entries.get(e, ""))
        if pb is not None:
            names.append(e)
            mats.append(mw @ np.array(pb.matrix))
    if not names:
        return {}
    mats = np.array(mats)
    rots = _orthonormal(mats[:, :3, :3])    # (one decomposition for all of them)
    return {e: (mats[i, :3, 3].copy(), rots[i]) for i, e in enumerate(names)}


def _orthonormal(m):
    """The nearest rotation to a matrix or to each of a stack (scale and shear taken out)."""
    u, _, vt = np.linalg.svd(np.asarray(m, dtype=np.float64))
    return u @ vt


def _moved(target, now, rotation=None) -> bool:
    """Whether an effector's target (position, and rotation if given) differs from its bone now."""
    if not np.isfinite(target).all():
        return False
    if np.linalg.norm(target - now[0]) > UNTOUCHED_M:
        return True
    if rotation is None:
        return False
    cos = (np.trace(now[1].T @ _orthonormal(rotation)) - 1.0) / 2.0
    return bool(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))) > UNTOUCHED_DEG)


def _unchanged(kp, now, t0, warnings) -> dict:
    """The answer of a solve in which no effector moved: the pose as it is."""
    d = [np.linalg.norm(kp[KEYPOINTS.index(e)] - now[e][0]) * 1000.0 for e in now
         if e in SPARSE_EFFECTORS and np.isfinite(kp[KEYPOINTS.index(e)]).all()]
    nan = float("nan")
    return {"effector_reach_mm": (float(np.mean(d)) if d else nan, float(np.max(d)) if d else nan),
            "unreachable": [], "keypoint_error_mm": (nan, nan), "bone_direction_error_deg": nan,
            "seconds": time.perf_counter() - t0, "warnings": list(warnings), "unchanged": True}
