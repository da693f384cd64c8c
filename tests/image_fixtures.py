"""Image keypoint files made from a known 3D motion: MediaPipe image landmarks, OpenPose frames.

The camera looks along +Y at a body facing -Y (Blender's axes): image x is
world X, image y (down) is -Z, depth (away from the camera) is +Y, relative
to the hips' midpoint as MediaPipe gives it. Orthographic, ``px_per_m``
pixels a metre.
"""

import json

import numpy as np

from neural_ik.model.skeleton import KEYPOINTS
from neural_ik.readers import LAYOUTS

_FACE = {"left_eye": (0.03, -0.02, 0.03), "right_eye": (-0.03, -0.02, 0.03),
         "left_ear": (0.07, 0.08, -0.02), "right_ear": (-0.07, 0.08, -0.02)}


def mediapipe_points(kp):
    """MediaPipe Pose's 33 landmarks (T, 33, 3) placed on canonical keypoints (T, 32, 3)."""
    lay = LAYOUTS["mediapipe_pose"]
    out = np.zeros((kp.shape[0], len(lay.joint_names), 3))
    for j, n in enumerate(lay.joint_names):
        if n in ("left_index", "left_pinky", "right_index", "right_pinky"):   # knuckles: half way to the finger tips
            s = n[0]
            out[:, j] = 0.5 * (kp[:, KEYPOINTS.index("hand_" + s)] + kp[:, KEYPOINTS.index("hand_tip_" + s)])
            continue
        out[:, j] = kp[:, KEYPOINTS.index(lay.to_canonical.get(n, "nose"))] + _FACE.get(n, (0, 0, 0))
    return out


def mediapipe_image(kp, width=1920, height=1080, px_per_m=400.0, origin=(960.0, 950.0)):
    """Image landmarks (T, 33, 3): x, y divided by the image size, z relative to the hips' midpoint / width."""
    mp = mediapipe_points(kp)
    lay = LAYOUTS["mediapipe_pose"].joint_names
    hips = 0.5 * (mp[:, lay.index("left_hip")] + mp[:, lay.index("right_hip")])
    u = (origin[0] + px_per_m * mp[..., 0]) / width
    v = (origin[1] - px_per_m * mp[..., 2]) / height
    z = px_per_m * (mp[..., 1] - hips[:, None, 1]) / width
    return np.stack([u, v, z], -1)


def write_mediapipe_json(path, points, key="landmarks", fps=30):
    """Frames of ``{key: [{"x", "y", "z", "visibility"}...]}`` in ``{"fps", "frames"}``."""
    frames = [{key: [{"x": float(a), "y": float(b), "z": float(c), "visibility": 0.95} for a, b, c in fr]}
              for fr in points]
    path.write_text(json.dumps({"fps": fps, "frames": frames}))
    return path


def write_openpose_folder(folder, frames=3):
    """An OpenPose output folder: one ``*_keypoints.json`` a frame, one person, BODY_25."""
    folder.mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        person = {"person_id": [-1], "pose_keypoints_2d": [320.0 + t, 240.0, 0.9] * 25,
                  "face_keypoints_2d": [], "hand_left_keypoints_2d": [], "hand_right_keypoints_2d": []}
        (folder / f"clip_{t:012d}_keypoints.json").write_text(json.dumps({"version": 1.3, "people": [person]}))
    return folder
