"""Synthetic AMASS ``.npz`` motions (SMPL+H parameters) for the AMASS reader's tests.

Rotations are axis-angle in SMPL's model frame (Y up, facing +Z, the body's
left +X); the root's turns the model Z up as AMASS files do (+90 degrees
about X). A rotation of the knee about +X by a positive angle bends it (the
shin swings back), of the hip by a negative angle swings the thigh forward.
"""

import numpy as np

from neural_ik.model.rotations_np import axis_angle_to_matrix, matrix_to_axis_angle

J = {n: i for i, n in enumerate((
    "pelvis", "left_hip", "right_hip", "spine1", "left_knee", "right_knee", "spine2",
    "left_ankle", "right_ankle", "spine3", "left_foot", "right_foot", "neck", "left_collar",
    "right_collar", "head", "left_shoulder", "right_shoulder", "left_elbow", "right_elbow",
    "left_wrist", "right_wrist"))}
Z_UP = (np.pi / 2, 0.0, 0.0)


def still(frames, **joints):
    """Poses ``(T, 52, 3)``: the root turned Z up, ``joints`` (name -> axis-angle) held, the rest at rest."""
    p = np.zeros((frames, 52, 3))
    p[:, 0] = Z_UP
    for name, aa in joints.items():
        p[:, J[name]] = aa
    return p


def walk(frames, fps=60.0):
    """A walk-like swing: legs and arms swinging at 1 Hz, knees bending, feet flat, the lower ankle planted.

    Returns ``(poses, trans)``: ``trans`` moves the body so that on every
    frame the lower ankle keeps its place from the frame before (the body
    walks along -Y) and stands at one height.
    """
    t = np.arange(frames) / fps
    ph = 2 * np.pi * t
    p = still(frames)
    p[:, J["left_hip"], 0] = -0.45 * np.sin(ph)
    p[:, J["right_hip"], 0] = 0.45 * np.sin(ph)
    p[:, J["left_knee"], 0] = 0.15 + 0.55 * np.clip(np.sin(ph + 0.8), 0, None)
    p[:, J["right_knee"], 0] = 0.15 + 0.55 * np.clip(-np.sin(ph + 0.8), 0, None)
    for side in ("left", "right"):   # the feet kept flat
        p[:, J[f"{side}_ankle"], 0] = -(p[:, J[f"{side}_hip"], 0] + p[:, J[f"{side}_knee"], 0])
    for side, sign in (("left", -1.0), ("right", 1.0)):   # arms down, swinging against the legs
        down = axis_angle_to_matrix(np.array([0.0, 0.0, sign * np.radians(75.0)]))
        swing = axis_angle_to_matrix(np.stack([-sign * 0.3 * np.sin(ph), 0 * ph, 0 * ph], -1))
        p[:, J[f"{side}_shoulder"]] = matrix_to_axis_angle(swing @ down)
    return p, planted_trans(p)


def planted_trans(poses, height=0.08):
    """``trans`` that keeps the lower ankle of each frame where it stood on the frame before."""
    from neural_ik.readers.amass import body_model_bvh

    ankles = [J["left_ankle"], J["right_ankle"]]
    pos = body_model_bvh("", poses[:, :22], np.zeros((len(poses), 3)), 60.0).world_positions()[:, ankles]
    trans = np.zeros((len(poses), 3))
    for t in range(len(poses)):
        k = int(np.argmin(pos[t, :, 2]))
        trans[t, 2] = height - pos[t, k, 2]
        if t:
            trans[t, :2] = trans[t - 1, :2] - (pos[t, k, :2] - pos[t - 1, k, :2])
    return trans


def write_amass(path, poses, trans=None, fps=60.0, width=156, **extra):
    """Write an AMASS-style ``.npz`` (``poses`` ``(T, width)``); ``width`` 165 writes SMPL-X."""
    T = poses.shape[0]
    flat = np.zeros((T, width))
    flat[:, :66] = poses.reshape(T, -1)[:, :66]
    if trans is None:
        trans = np.tile([0.0, 0.0, 0.92], (T, 1))
    arrays = dict(poses=flat, trans=trans, betas=np.zeros(16), gender=np.array("female"), dmpls=np.zeros((T, 8)))
    arrays["mocap_frame_rate" if width == 165 else "mocap_framerate"] = np.array(fps)
    arrays.update(extra)
    np.savez(path, **arrays)
    return path
