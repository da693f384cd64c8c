"""A procedural walk in canonical keypoints, for ``neural-ik demo`` and the tests.

The motion is built with the canonical skeleton's forward kinematics from a
few sinusoids: a walk cycle (hip, knee and ankle flexion, pelvis twist and
bob), arm swing opposite to the legs with bent elbows, a counter-rotating
chest, and a smooth left turn in the middle of the clip. The root's
horizontal motion is integrated from the stance foot (the lower one) so that
the foot on the ground does not slide, and each frame is lifted so that the
lowest foot point touches the floor (z = 0).

No ``bpy`` and nothing read from disk: plain numpy.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import axis_rotation
from ..model.skeleton import CANONICAL, JOINTS, KEYPOINTS, Skeleton, keypoints_from_fk_np

__all__ = ["walk_rotations", "walk_keypoints", "save_npz"]

_J = {name: i for i, name in enumerate(JOINTS)}
_FOOT_POINTS = [KEYPOINTS.index(n) for n in ("heel_l", "toe_tip_l", "heel_r", "toe_tip_r")]


def _smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def walk_rotations(seconds: float = 4.0, fps: float = 30.0, *, cadence: float = 0.9,
                   turn_degrees: float = 60.0):
    """Local joint rotations of the walk (root yaw included, root at the origin).

    Parameters
    ----------
    seconds : float
        Length of the clip.
    fps : float
        Frames per second.
    cadence : float
        Gait cycles (two steps) per second.
    turn_degrees : float
        Total left turn, spread smoothly over the middle half of the clip.

    Returns
    -------
    ndarray, shape (T, 22, 3, 3)
        Local rotations in the canonical convention (see :mod:`..model.skeleton`).
    """
    n = max(int(round(seconds * fps)), 2)
    t = np.arange(n) / float(fps)
    phase = 2.0 * np.pi * cadence * t
    # amplitude ramps up over the first half second: the walker starts from a stand
    ramp = _smoothstep(t / 0.5)
    rx = lambda a: axis_rotation(0, a)  # noqa: E731
    ry = lambda a: axis_rotation(1, a)  # noqa: E731
    rz = lambda a: axis_rotation(2, a)  # noqa: E731

    rot = np.broadcast_to(np.eye(3), (n, len(JOINTS), 3, 3)).copy()
    heading = np.radians(turn_degrees) * _smoothstep((t - 0.25 * seconds) / (0.5 * seconds))
    pelvis_twist = 0.08 * ramp * np.sin(phase)
    rot[:, _J["pelvis"]] = rz(heading + pelvis_twist) @ rx(-0.05 * ramp)
    rot[:, _J["spine1"]] = rx(0.02 + 0.02 * np.sin(2 * phase) * ramp)
    rot[:, _J["spine2"]] = rz(-0.5 * pelvis_twist)
    rot[:, _J["spine3"]] = rz(-0.7 * pelvis_twist)
    rot[:, _J["neck"]] = rz(0.4 * pelvis_twist) @ rx(0.03)
    rot[:, _J["head"]] = rz(0.3 * pelvis_twist) @ rx(-0.02 * np.sin(2 * phase))

    for side, offset, sign in (("l", 0.0, 1.0), ("r", np.pi, -1.0)):
        ph = phase + offset
        # legs: negative rotation about X swings the leg forward (-Y)
        hip = ramp * (-0.38 * np.sin(ph)) - 0.05
        knee = 0.06 + ramp * 0.72 * np.clip(np.cos(ph + 0.35), 0.0, 1.0) ** 1.5
        ankle = ramp * (0.12 * np.sin(ph + 0.4)) - 0.03
        rot[:, _J["thigh_" + side]] = rx(hip) @ ry(sign * 0.03)
        rot[:, _J["calf_" + side]] = rx(knee)
        rot[:, _J["foot_" + side]] = rx(ankle)
        rot[:, _J["toe_" + side]] = rx(-0.25 * ramp * np.clip(np.sin(ph - 0.6), 0.0, 1.0))
        # arms: down at the sides, swinging opposite to the leg of the same side
        swing = ramp * 0.32 * np.sin(ph)
        down = sign * np.radians(78.0)
        rot[:, _J["clavicle_" + side]] = ry(sign * 0.06)
        rot[:, _J["upperarm_" + side]] = rx(swing) @ ry(down) @ rx(sign * 0.15)
        elbow = 0.25 + 0.2 * np.clip(-np.sin(ph), 0.0, 1.0) * ramp
        rot[:, _J["forearm_" + side]] = rz(-sign * elbow)
        rot[:, _J["hand_" + side]] = rz(-sign * 0.1) @ rx(sign * 0.1)
    return rot


def walk_keypoints(seconds: float = 4.0, fps: float = 30.0, *, skeleton: Skeleton | None = None,
                   cadence: float = 0.9, turn_degrees: float = 60.0) -> np.ndarray:
    """World keypoints of the procedural walk.

    Parameters
    ----------
    seconds, fps, cadence, turn_degrees
        See :func:`walk_rotations`.
    skeleton : Skeleton, optional
        Bone lengths (default: the canonical skeleton).

    Returns
    -------
    ndarray, shape (T, 32, 3)
        Metres, Z up, the walker starting at the origin facing -Y.
    """
    skeleton = skeleton or CANONICAL
    rot = walk_rotations(seconds, fps, cadence=cadence, turn_degrees=turn_degrees)
    n = rot.shape[0]
    rel = keypoints_from_fk_np(rot, np.zeros((n, 3)), skeleton)  # root at the origin
    feet = rel[:, _FOOT_POINTS, :]
    # the stance point is the lowest foot point; moving the root against its
    # motion keeps it planted
    root = np.zeros((n, 3))
    for i in range(1, n):
        k = int(np.argmin(feet[i - 1, :, 2]))
        root[i, :2] = root[i - 1, :2] - (feet[i, k, :2] - feet[i - 1, k, :2])
    root[:, 2] = -feet[:, :, 2].min(axis=1)  # lowest foot point on the floor
    return rel + root[:, None, :]


def save_npz(path, keypoints: np.ndarray, fps: float) -> None:
    """Write canonical keypoints in the ``.npz`` interchange format.

    Parameters
    ----------
    path : str
        Output file (``.npz``).
    keypoints : ndarray, shape (T, 32, 3)
    fps : float
    """
    with open(path, "wb") as handle:
        np.savez(handle, positions=np.asarray(keypoints, dtype=np.float64),
                 joint_names=np.array(KEYPOINTS), fps=float(fps), units="m", up_axis="Z")
