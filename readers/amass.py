"""AMASS ``.npz`` motions: SMPL body rotations carried through a generic skeleton.

AMASS (and other SMPL fittings: 3DPW, MoSh++ output) stores no joint
positions but the body model's parameters per frame:

``poses``
    ``(T, 3 x K)`` axis-angle rotations of the SMPL kinematic tree: the root
    (``root_orient``), 21 body joints, then hands (SMPL+H: 156 = 52 joints),
    or jaw, eyes and hands (SMPL-X: 165 = 55 joints), or the two SMPL hand
    joints (72 = 24 joints). SMPL-X releases may instead keep
    ``root_orient`` ``(T, 3)`` and ``pose_body`` ``(T, 63)``.
``trans``
    ``(T, 3)`` the root's translation, metres, Z up.
``mocap_framerate`` (SMPL+H) or ``mocap_frame_rate`` (SMPL-X)
    frames per second.
``betas``, ``gender``, ``dmpls``...
    the body's shape: not read.

The licensed body model is neither needed nor shipped: the 22 body joints
(SMPL's order, names and parents) rest on a generic adult T-pose skeleton of
this module's own (:data:`REST_OFFSETS`, about 1.72 m, in SMPL's model frame:
Y up, facing +Z, the body's left +X), so bone lengths are generic and the
betas are ignored; what carries over onto a rig are the rotations. The
skeleton and its motion become a source skeleton exactly as a BVH file's
(:func:`.bvh.read_bvh_keypoints` on the :class:`..model.bvh.BVHData` built
here): the file's frame is turned once so that the rest stands Z up facing
-Y (``R_root' = R_root A^T``, every other joint ``A R A^T``), which leaves
the posed joints where SMPL's forward kinematics puts them, the pelvis at
``trans`` plus the template's pelvis (SMPL adds it unrotated).

Hand, jaw and eye rotations are dropped with a note: fingers are carried
only onto the source's own skeleton, which a generic rest is not.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.bvh import BVHData
from ..model.rotations_np import axis_angle_to_matrix
from .clip import KeypointReadError

__all__ = ["SMPL_JOINTS", "SMPL_PARENTS", "REST_OFFSETS", "is_body_model", "load_body_model", "read_amass",
           "rest_positions"]

#: SMPL's 22 body joints in its order.
SMPL_JOINTS = (
    "pelvis", "left_hip", "right_hip", "spine1", "left_knee", "right_knee", "spine2",
    "left_ankle", "right_ankle", "spine3", "left_foot", "right_foot", "neck", "left_collar",
    "right_collar", "head", "left_shoulder", "right_shoulder", "left_elbow", "right_elbow",
    "left_wrist", "right_wrist",
)
#: Parent of each joint (SMPL's kinematic tree).
SMPL_PARENTS = (-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19)

# figure: definition -- a generic adult (1.72 m) in SMPL's model frame: x left, y up, z forward, metres
_OFFSETS = {
    "pelvis": (0.0, -0.22, 0.02),      # SMPL's template puts its pelvis below the model's origin
    "left_hip": (0.07, -0.09, 0.0), "right_hip": (-0.07, -0.09, 0.0),
    "spine1": (0.0, 0.11, -0.01),
    "left_knee": (0.02, -0.38, 0.0), "right_knee": (-0.02, -0.38, 0.0),
    "spine2": (0.0, 0.13, 0.0),
    "left_ankle": (-0.01, -0.39, -0.03), "right_ankle": (0.01, -0.39, -0.03),
    "spine3": (0.0, 0.06, 0.02),
    "left_foot": (0.02, -0.06, 0.12), "right_foot": (-0.02, -0.06, 0.12),
    "neck": (0.0, 0.21, -0.03),
    "left_collar": (0.07, 0.12, -0.01), "right_collar": (-0.07, 0.12, -0.01),
    "head": (0.0, 0.09, 0.05),
    "left_shoulder": (0.11, 0.04, -0.01), "right_shoulder": (-0.11, 0.04, -0.01),
    "left_elbow": (0.26, 0.0, -0.01), "right_elbow": (-0.26, 0.0, -0.01),
    "left_wrist": (0.25, 0.0, 0.0), "right_wrist": (-0.25, 0.0, 0.0),
}
#: Rest offsets from the parent (the pelvis: from the model's origin), SMPL's model frame.
REST_OFFSETS = np.array([_OFFSETS[n] for n in SMPL_JOINTS], dtype=np.float64)
# End Sites: the top of the head, the toe tips, the hand tips
_END_SITES = (("head", (0.0, 0.18, 0.01)), ("left_foot", (0.0, -0.02, 0.06)),
              ("right_foot", (0.0, -0.02, 0.06)), ("left_wrist", (0.18, 0.0, 0.0)),
              ("right_wrist", (-0.18, 0.0, 0.0)))

#: SMPL's model frame (Y up, facing +Z) -> Z up, facing -Y: +90 degrees about X.
MODEL_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])

#: Values per frame of ``poses`` -> (body model, joints, what follows the 22 body joints).
_WIDTHS = {
    66: ("SMPL body", ""),
    72: ("SMPL", "2 hand joints"),
    156: ("SMPL+H", "30 finger joints"),
    165: ("SMPL-X", "jaw, eyes and 30 finger joints"),
}
_RATE_KEYS = ("mocap_framerate", "mocap_frame_rate", "frame_rate", "fps")
_POSE_KEYS = ("poses", "root_orient", "pose_body", "trans", "betas")


def is_body_model(keys) -> bool:
    """Whether an ``.npz`` holding ``keys`` is a body-model motion (AMASS) rather than keypoints."""
    keys = set(keys)
    return "positions" not in keys and ("poses" in keys or {"root_orient", "pose_body"} <= keys
                                        or {"betas", "gender"} <= keys)


def _model_name(data, width):
    kind = data.get("surface_model_type")
    if kind is not None and kind.dtype.kind in "US" and kind.size == 1:
        name = str(kind.reshape(()).item()).lower()
        return {"smplx": "SMPL-X", "smplh": "SMPL+H", "smpl": "SMPL"}.get(name, name)
    return _WIDTHS.get(width, ("SMPL",))[0]


def load_body_model(path, archive) -> dict:
    """The arrays :func:`read_amass` reads, taken from an open ``np.load`` archive.

    Other arrays (``dmpls``, MoSh++'s marker tables, which only unpickling
    could read) are never touched.

    Raises
    ------
    KeypointReadError
        A body shape without motion (no ``poses``), or an array that is not
        numbers.
    """
    keys = set(archive.files)
    if "poses" not in keys and not {"root_orient", "pose_body"} <= keys:
        raise KeypointReadError(path, "a body-model file without motion (it has "
                                f"{', '.join(sorted(keys))}; no 'poses'): AMASS keeps a subject's shape in "
                                "shape.npz and each motion in its own .npz with 'poses' and 'trans'")
    out = {}
    for key in _POSE_KEYS + _RATE_KEYS + ("surface_model_type",):
        if key in keys:
            try:
                out[key] = archive[key]
            except ValueError:   # an object array: only pickle reads it
                if key in ("poses", "root_orient", "pose_body", "trans"):
                    raise KeypointReadError(path, f"'{key}' is a Python object array (pickled): save it "
                                            "as a float array") from None
    return out


def _poses(path, data):
    """Body rotations ``(T, 22, 3)`` axis-angle, the model's name and what was dropped."""
    if "poses" in data:
        p = np.asarray(data["poses"])
        if p.ndim == 3 and p.shape[-1] == 3:
            p = p.reshape(p.shape[0], -1)
        if p.ndim != 2 or p.shape[1] not in _WIDTHS:
            raise KeypointReadError(path, f"'poses' has shape {p.shape}: an AMASS motion has (frames, K) "
                                    "axis-angle values with K = 66 (body), 72 (SMPL), 156 (SMPL+H) or 165 (SMPL-X)")
        width, dropped = p.shape[1], _WIDTHS[p.shape[1]][1]
    else:
        root, body = np.asarray(data["root_orient"]), np.asarray(data["pose_body"])
        if root.ndim != 2 or root.shape[1] != 3 or body.shape != (root.shape[0], 63):
            raise KeypointReadError(path, f"'root_orient' {root.shape} and 'pose_body' {body.shape}: expected "
                                    "(frames, 3) and (frames, 63)")
        p, width, dropped = np.concatenate([root, body], axis=1), 66, "jaw, eyes and fingers (not read)"
    if p.dtype.kind not in "fiu":
        raise KeypointReadError(path, f"'poses' must be numbers, got dtype {p.dtype}")
    if p.shape[0] == 0:
        raise KeypointReadError(path, "no frames ('poses' is empty)")
    body = p[:, :66].astype(np.float64)
    bad = ~np.isfinite(body).all(1)
    if bad.any():
        raise KeypointReadError(path, f"frame {int(np.flatnonzero(bad)[0])}: a body rotation is not a finite "
                                f"number ({int(bad.sum())} frames)")
    return body.reshape(-1, 22, 3), _model_name(data, width), dropped


def _trans(path, data, T, warns):
    if "trans" not in data:
        warns.append("no 'trans' in the file: the root stays in place")
        return np.zeros((T, 3))
    tr = np.asarray(data["trans"])
    if tr.dtype.kind not in "fiu" or tr.shape != (T, 3):
        raise KeypointReadError(path, f"'trans' must be (frames, 3) numbers like 'poses' ({T} frames), got "
                                f"{tr.dtype} {tr.shape}")
    bad = ~np.isfinite(tr).all(1)
    if bad.any():
        raise KeypointReadError(path, f"frame {int(np.flatnonzero(bad)[0])}: 'trans' is not a finite number")
    return tr.astype(np.float64)


def _rate(path, data):
    for key in _RATE_KEYS:
        if key in data:
            v = np.asarray(data[key])
            if v.size != 1 or v.dtype.kind not in "fiu" or not np.isfinite(v).all() or float(v.reshape(())) <= 0:
                raise KeypointReadError(path, f"'{key}' must be one positive number, got {v.dtype} {v.shape}")
            return float(v.reshape(()))
    return None


def rest_positions() -> np.ndarray:
    """The generic skeleton's rest joints ``(22, 3)``, Z up facing -Y, the model's origin at 0."""
    pos = np.zeros((22, 3))
    for j, p in enumerate(SMPL_PARENTS):
        pos[j] = REST_OFFSETS[j] + (pos[p] if p >= 0 else 0.0)
    return pos @ MODEL_TO_Z_UP.T


def body_model_bvh(path, rotations, trans, fps) -> BVHData:
    """The motion as a parsed BVH file of the generic skeleton (Z up, metres).

    Parameters
    ----------
    rotations : ndarray (T, 22, 3)
        Axis-angle, SMPL's frames (AMASS: the root's includes the turn to Z up).
    trans : ndarray (T, 3)
    fps : float or None
    """
    A = MODEL_TO_Z_UP
    R = axis_angle_to_matrix(rotations)
    R[:, 1:] = A @ R[:, 1:] @ A.T
    R[:, 0] = R[:, 0] @ A.T
    offsets = REST_OFFSETS @ A.T
    T = R.shape[0]
    translations = np.broadcast_to(offsets, (T, 22, 3)).copy()
    translations[:, 0] = trans + REST_OFFSETS[0]      # SMPL: the root joint at trans + J0, J0 unrotated
    ends = [(SMPL_JOINTS.index(n), np.asarray(o, dtype=np.float64) @ A.T) for n, o in _END_SITES]
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + [
        ("Zrotation", "Xrotation", "Yrotation")] * 21
    return BVHData(path=str(path), names=list(SMPL_JOINTS), parents=np.asarray(SMPL_PARENTS, dtype=np.int64),
                   offsets=offsets, channels=channels, end_sites=ends, rotations=R, translations=translations,
                   frame_time=1.0 / fps if fps else 0.0, motion=np.zeros((T, 0)))


def read_amass(path, data, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read an AMASS motion (``data``: :func:`load_body_model`'s arrays) as a source skeleton's clip."""
    from .bvh import read_bvh_keypoints

    rotations, model, dropped = _poses(path, data)
    warns = []
    trans = _trans(path, data, rotations.shape[0], warns)
    rate = _rate(path, data)
    bvh = body_model_bvh(path, rotations, trans, rate)
    clip = read_bvh_keypoints(path, layout=layout, units=units or "m", up_axis=up_axis or "Z", fps=fps,
                              max_gap=max_gap, ground=ground, bvh=bvh)
    note = (f"{model} body rotations on a generic adult skeleton (bone lengths generic, betas ignored; "
            "the rotations carry over)")
    if dropped:
        note += f"; {dropped} dropped (fingers carry over only onto the source's own skeleton)"
    clip.warnings[:0] = [note] + warns
    return clip
