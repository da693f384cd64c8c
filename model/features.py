"""The network's input and output sizes and the encoding pieces that need no torch.

The keypoint tables (effectors, hints, mirrored pairs for the heading), the
feature counts of every kind of weights (:func:`num_features`) and the
skeleton and bone-direction features, on torch tensors or numpy arrays
alike: :mod:`.network` (torch) and :mod:`.numpy_net` (numpy) both encode
with them, and a solve that runs in numpy never imports torch.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from .skeleton import (END_OFFSETS, END_PARENTS, JOINTS, KEYPOINTS, MIRROR_KEYPOINTS, PARENTS, REST_OFFSETS, SPARSE_EFFECTORS,
                       SPARSE_HINTS)

__all__ = ["NUM_JOINTS", "NUM_KEYPOINTS", "EFFECTOR_KP", "HINT_KP", "EFFECTOR_JOINTS", "NUM_EFF", "NUM_FEATURES",
           "NUM_OUTPUTS", "SKELETON_INPUTS", "POSE_INPUTS", "DIRECTION_SOFT_LENGTH", "num_features", "bone_directions",
           "skeleton_features", "skeleton_scale"]

NUM_JOINTS = len(JOINTS)
NUM_KEYPOINTS = len(KEYPOINTS)


def _is_torch(x) -> bool:
    """Whether ``x`` is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch")


#: Keypoint indices of the sparse effectors and hints.
EFFECTOR_KP = tuple(KEYPOINTS.index(n) for n in SPARSE_EFFECTORS)
HINT_KP = tuple(KEYPOINTS.index(n) for n in SPARSE_HINTS)
#: Effectors are joints, so their joint index equals their keypoint index.
EFFECTOR_JOINTS = EFFECTOR_KP
NUM_EFF = len(EFFECTOR_KP)

_PELVIS = KEYPOINTS.index("pelvis")

# mirrored pairs (left, right) and their weight in the heading estimate
_PAIR_WEIGHT = {
    "thigh": 3.0, "upperarm": 2.0, "clavicle": 2.0, "calf": 1.0, "foot": 1.0, "toe": 1.0,
    "heel": 1.0, "toe_tip": 1.0, "forearm": 0.5, "hand": 0.5, "hand_tip": 0.3, "thumb": 0.3,
}
_PAIRS_L, _PAIRS_R, _PAIRS_W = [], [], []
for _i, _n in enumerate(KEYPOINTS):
    if _n.endswith("_l"):
        _PAIRS_L.append(_i)
        _PAIRS_R.append(int(MIRROR_KEYPOINTS[_i]))
        _PAIRS_W.append(_PAIR_WEIGHT[_n[:-2]])

_BONE_IDX = {"spine": [1, 2, 3, 4, 5], "legs": [KEYPOINTS.index(n) for n in ("calf_l", "foot_l", "calf_r", "foot_r")]}
_REST_LEN = np.linalg.norm(REST_OFFSETS, axis=1)
_REST_END_LEN = np.linalg.norm(END_OFFSETS, axis=1)
_ID6 = np.array([1.0, 0, 0, 0, 1, 0])
_HEAD_TOP_END = 0  # index of head_top in END_OFFSETS
_REST_SIZE = float(_REST_LEN[_BONE_IDX["spine"]].sum() + _REST_END_LEN[_HEAD_TOP_END] + _REST_LEN[_BONE_IDX["legs"]].sum() / 2)

#: How a network reads the skeleton (``hparams["skeleton_input"]``) and its number of features:
#: "lengths" (bone lengths only: the shipped weights, and any format-2 file without the key) or
#: "offsets" (every offset, so where the joints sit too). See docs/design.md#weights-format.
SKELETON_INPUTS = {"lengths": (NUM_JOINTS - 1) + len(END_OFFSETS), "offsets": 3 * ((NUM_JOINTS - 1) + len(END_OFFSETS))}
#: Each bone as (parent keypoint, child keypoint): every joint but the root and every end point.
_BONE_CHILD = np.arange(1, NUM_KEYPOINTS)
_BONE_PARENT = np.array([PARENTS[k] for k in range(1, NUM_JOINTS)] + list(END_PARENTS))
#: How a network reads the pose (``hparams["pose_input"]``) and its extra features: "positions"
#: (the keypoints in the body's frame: the shipped weights, and any format-2 file without the key)
#: or "directions" (also every bone's direction between its two keypoints, :func:`bone_directions`:
#: the same for a child's body and an adult's, so the rotations need not be read through the
#: proportions).
POSE_INPUTS = {"positions": 0, "directions": 3 * len(_BONE_CHILD)}
#: A bone shorter than this (body-size units, metres of the canonical skeleton) gives a shorter
#: direction vector, smoothly (:func:`bone_directions`).
DIRECTION_SOFT_LENGTH = 0.02
_POSE_FEATURES = NUM_KEYPOINTS * 3 + NUM_KEYPOINTS + NUM_EFF * 6 + NUM_EFF
#: Features of a network reading bone lengths and positions (:func:`num_features` for every kind).
NUM_FEATURES = _POSE_FEATURES + SKELETON_INPUTS["lengths"]
_REST_ALL = np.concatenate([REST_OFFSETS[1:], END_OFFSETS])        # (31, 3)
_REST_ALL_LEN = np.linalg.norm(_REST_ALL, axis=1)
NUM_OUTPUTS = NUM_JOINTS * 6 + 3


def num_features(skeleton_input: str = "lengths", pose_input: str = "positions") -> int:
    """Input size of a network that reads the skeleton as ``skeleton_input`` (:data:`SKELETON_INPUTS`)
    and the pose as ``pose_input`` (:data:`POSE_INPUTS`)."""
    if skeleton_input not in SKELETON_INPUTS:
        raise ValueError(f"skeleton_input must be one of {tuple(SKELETON_INPUTS)}, got {skeleton_input!r}")
    if pose_input not in POSE_INPUTS:
        raise ValueError(f"pose_input must be one of {tuple(POSE_INPUTS)}, got {pose_input!r}")
    return _POSE_FEATURES + SKELETON_INPUTS[skeleton_input] + POSE_INPUTS[pose_input]


def bone_directions(rel, m):
    """Every bone's direction between its keypoints, shape (..., 31 * 3); torch or numpy alike.

    Parameters
    ----------
    rel : Tensor or ndarray, shape (..., 32, 3)
        Keypoints in the body's frame, divided by the body size.
    m : Tensor or ndarray, shape (..., 32)
        1 where a keypoint is given, 0 where not.

    Returns
    -------
    The child's keypoint minus the parent's over ``sqrt(length**2 +``
    :data:`DIRECTION_SOFT_LENGTH` ``**2)``: a unit vector for a bone of a few
    centimetres or more, shorter for shorter ones (two points that nearly
    coincide, as some conventions' spine and neck, give no direction worth
    reading, and no jump as they part); zero where either end is missing.
    """
    d = rel[..., _BONE_CHILD, :] - rel[..., _BONE_PARENT, :]
    both = m[..., _BONE_CHILD] * m[..., _BONE_PARENT]
    if _is_torch(d):
        n = (d * d).sum(-1, keepdim=True).add(DIRECTION_SOFT_LENGTH ** 2).sqrt()
    else:
        n = np.sqrt((d * d).sum(-1, keepdims=True) + DIRECTION_SOFT_LENGTH ** 2)
    f = d / n * both[..., None]
    return f.reshape(f.shape[:-2] + (-1,))


def skeleton_features(offsets, end_offsets, scale, skeleton_input: str = "lengths"):
    """The skeleton's features, shape (..., :data:`SKELETON_INPUTS` [kind]); torch or numpy alike.

    Parameters
    ----------
    offsets : Tensor or ndarray, shape (..., 22, 3)
    end_offsets : Tensor or ndarray, shape (..., 10, 3)
    scale : Tensor or ndarray, shape (...,)
        :func:`skeleton_scale` of the skeleton.
    skeleton_input : str
        "lengths": each bone's length over the scaled canonical one, minus 1;
        "offsets": each offset (in its parent's frame) over the scale, minus
        the canonical offset.
    """
    num_features(skeleton_input)     # (an unknown kind is refused there)
    th = _is_torch(offsets)
    if th:
        import torch

        from .rotations import device_constant
    cat = torch.cat if th else np.concatenate
    allo = cat([offsets[..., 1:, :], end_offsets], -2)       # (..., 31, 3)
    s = scale[..., None, None]
    if skeleton_input == "offsets":
        rest = device_constant(_REST_ALL, allo.dtype, allo.device) if th else _REST_ALL
        f = allo / s - rest
        return f.reshape(f.shape[:-2] + (-1,))
    rest = device_constant(_REST_ALL_LEN, allo.dtype, allo.device) if th else _REST_ALL_LEN
    ln = allo.norm(dim=-1) if th else np.linalg.norm(allo, axis=-1)
    return ln / rest / s[..., 0] - 1.0


def skeleton_scale(offsets, end_offsets):
    """Body size relative to the canonical skeleton, shape (...,); torch or numpy alike.

    Spine + neck + head + head-top length plus the mean leg length (thigh to
    ankle), divided by the canonical value; pose independent.
    """
    if _is_torch(offsets):
        ln, le = offsets.norm(dim=-1), end_offsets.norm(dim=-1)
    else:
        ln, le = np.linalg.norm(offsets, axis=-1), np.linalg.norm(end_offsets, axis=-1)
    size = ln[..., _BONE_IDX["spine"]].sum(-1) + le[..., _HEAD_TOP_END] + ln[..., _BONE_IDX["legs"]].sum(-1) / 2
    return size / _REST_SIZE
