"""The canonical humanoid skeleton.

Every part of Neural IK speaks this skeleton: the network predicts its joint
rotations, the readers map keypoint layouts onto its keypoints and the
retargeter maps its joints onto the bones of a user's rig.

Conventions
-----------
- Blender's axes: Z up, the body faces -Y, the body's left side is +X.
- Metres.
- Rest pose: a T-pose (arms along +-X, palms down, thumbs forward) in which
  every joint's rest frame is aligned with the world axes. A joint's *local
  rotation* is therefore a rotation relative to that axis-aligned rest frame,
  the BVH convention without joint orients.
- Forward kinematics::

      R_world[0] = R_local[0]                 (root orientation)
      p_world[0] = root_position
      R_world[j] = R_world[parent] @ R_local[j]
      p_world[j] = p_world[parent] + R_world[parent] @ offset[j]

- *Keypoints* are the 22 joint origins plus 10 end points (head top, nose,
  hand tips, thumbs, toe tips, heels) rigidly attached to a joint. End points
  carry no rotation of their own; they exist because positions of joint
  origins alone do not fix the twist of the head, hands and feet.

No ``bpy`` here: plain numpy, usable outside Blender.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .kinematics import Tree, level_fk

__all__ = [
    "ancestor_matrix",
    "JOINTS",
    "PARENTS",
    "TREE",
    "REST_OFFSETS",
    "END_POINTS",
    "END_PARENTS",
    "END_OFFSETS",
    "KEYPOINTS",
    "KEYPOINT_JOINT",
    "SPARSE_EFFECTORS",
    "SPARSE_HINTS",
    "MIRROR_JOINTS",
    "MIRROR_KEYPOINTS",
    "BONE_CHILD",
    "Skeleton",
    "CANONICAL",
    "joint_index",
    "keypoint_index",
    "forward_kinematics_np",
    "keypoints_from_fk_np",
    "keypoints_from_world_np",
]

# name, parent, rest offset from the parent joint (metres, Z up, faces -Y)
_JOINT_TABLE = (
    ("pelvis", None, (0.0, 0.0, 0.95)),
    ("spine1", "pelvis", (0.0, 0.0, 0.10)),
    ("spine2", "spine1", (0.0, 0.0, 0.12)),
    ("spine3", "spine2", (0.0, 0.0, 0.12)),
    ("neck", "spine3", (0.0, 0.0, 0.18)),
    ("head", "neck", (0.0, 0.0, 0.10)),
    ("clavicle_l", "spine3", (0.02, 0.0, 0.14)),
    ("upperarm_l", "clavicle_l", (0.15, 0.0, 0.0)),
    ("forearm_l", "upperarm_l", (0.28, 0.0, 0.0)),
    ("hand_l", "forearm_l", (0.25, 0.0, 0.0)),
    ("clavicle_r", "spine3", (-0.02, 0.0, 0.14)),
    ("upperarm_r", "clavicle_r", (-0.15, 0.0, 0.0)),
    ("forearm_r", "upperarm_r", (-0.28, 0.0, 0.0)),
    ("hand_r", "forearm_r", (-0.25, 0.0, 0.0)),
    ("thigh_l", "pelvis", (0.09, 0.0, -0.05)),
    ("calf_l", "thigh_l", (0.0, 0.0, -0.42)),
    ("foot_l", "calf_l", (0.0, 0.0, -0.40)),
    ("toe_l", "foot_l", (0.0, -0.13, -0.05)),
    ("thigh_r", "pelvis", (-0.09, 0.0, -0.05)),
    ("calf_r", "thigh_r", (0.0, 0.0, -0.42)),
    ("foot_r", "calf_r", (0.0, 0.0, -0.40)),
    ("toe_r", "foot_r", (0.0, -0.13, -0.05)),
)

# end points: name, joint it is attached to, offset in that joint's rest frame
_END_TABLE = (
    ("head_top", "head", (0.0, 0.0, 0.18)),
    ("nose", "head", (0.0, -0.11, 0.06)),
    ("hand_tip_l", "hand_l", (0.18, 0.0, 0.0)),
    ("thumb_l", "hand_l", (0.05, -0.06, -0.01)),
    ("hand_tip_r", "hand_r", (-0.18, 0.0, 0.0)),
    ("thumb_r", "hand_r", (-0.05, -0.06, -0.01)),
    ("toe_tip_l", "toe_l", (0.0, -0.06, 0.0)),
    ("heel_l", "foot_l", (0.0, 0.05, -0.07)),
    ("toe_tip_r", "toe_r", (0.0, -0.06, 0.0)),
    ("heel_r", "foot_r", (0.0, 0.05, -0.07)),
)

JOINTS: tuple[str, ...] = tuple(r[0] for r in _JOINT_TABLE)
PARENTS: tuple[int, ...] = tuple(-1 if r[1] is None else JOINTS.index(r[1]) for r in _JOINT_TABLE)
REST_OFFSETS: np.ndarray = np.array([r[2] for r in _JOINT_TABLE], dtype=np.float64)
#: The joints' depth levels, for :func:`.kinematics.level_fk`.
TREE = Tree(PARENTS)

END_POINTS: tuple[str, ...] = tuple(r[0] for r in _END_TABLE)
END_PARENTS: tuple[int, ...] = tuple(JOINTS.index(r[1]) for r in _END_TABLE)
END_OFFSETS: np.ndarray = np.array([r[2] for r in _END_TABLE], dtype=np.float64)

#: All keypoints the network accepts: joint origins first, then end points.
KEYPOINTS: tuple[str, ...] = JOINTS + END_POINTS
#: For each keypoint, the joint whose frame carries it.
KEYPOINT_JOINT: tuple[int, ...] = tuple(range(len(JOINTS))) + END_PARENTS

#: Effectors an animator drags in sparse mode.
SPARSE_EFFECTORS: tuple[str, ...] = ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")
#: Optional pole hints in sparse mode (elbows, knees).
SPARSE_HINTS: tuple[str, ...] = ("forearm_l", "forearm_r", "calf_l", "calf_r")


def _mirror_name(name: str) -> str:
    if name.endswith("_l"):
        return name[:-2] + "_r"
    if name.endswith("_r"):
        return name[:-2] + "_l"
    return name


#: Permutation that swaps left and right joints (``x[..., MIRROR_JOINTS, :]``).
MIRROR_JOINTS: np.ndarray = np.array([JOINTS.index(_mirror_name(n)) for n in JOINTS])
#: Permutation that swaps left and right keypoints.
MIRROR_KEYPOINTS: np.ndarray = np.array([KEYPOINTS.index(_mirror_name(n)) for n in KEYPOINTS])


def _bone_child() -> tuple[int, ...]:
    """Keypoint index that defines each joint's bone direction (its tail)."""
    preferred = {
        "pelvis": "spine1",
        "spine3": "neck",
        "head": "head_top",
        "hand_l": "hand_tip_l",
        "hand_r": "hand_tip_r",
        "toe_l": "toe_tip_l",
        "toe_r": "toe_tip_r",
    }
    out = []
    for j, name in enumerate(JOINTS):
        if name in preferred:
            out.append(KEYPOINTS.index(preferred[name]))
        else:
            children = [c for c, p in enumerate(PARENTS) if p == j]
            out.append(children[0])
    return tuple(out)


#: For each joint, the keypoint at its bone's tail (used for bone directions).
BONE_CHILD: tuple[int, ...] = _bone_child()


def joint_index(name: str) -> int:
    """Index of a canonical joint by name.

    Raises
    ------
    KeyError
        With the list of valid names when ``name`` is unknown.
    """
    try:
        return JOINTS.index(name)
    except ValueError:
        raise KeyError(f"unknown canonical joint {name!r}; known: {', '.join(JOINTS)}") from None


def keypoint_index(name: str) -> int:
    """Index of a canonical keypoint by name (joints and end points)."""
    try:
        return KEYPOINTS.index(name)
    except ValueError:
        raise KeyError(f"unknown canonical keypoint {name!r}; known: {', '.join(KEYPOINTS)}") from None


@dataclass
class Skeleton:
    """A canonical skeleton with concrete bone lengths.

    Parameters
    ----------
    offsets : ndarray, shape (22, 3)
        Rest offsets of the joints from their parents (row 0 is the root's
        rest position).
    end_offsets : ndarray, shape (10, 3)
        Rest offsets of the end points from their joints.
    """

    offsets: np.ndarray = field(default_factory=lambda: REST_OFFSETS.copy())
    end_offsets: np.ndarray = field(default_factory=lambda: END_OFFSETS.copy())

    @property
    def parents(self) -> tuple[int, ...]:
        return PARENTS

    def scaled(self, factor: float) -> "Skeleton":
        """The same skeleton uniformly scaled."""
        return Skeleton(self.offsets * factor, self.end_offsets * factor)

    def rest_keypoints(self) -> np.ndarray:
        """World keypoint positions in the rest pose, shape (32, 3)."""
        rot = np.broadcast_to(np.eye(3), (len(JOINTS), 3, 3))
        return keypoints_from_fk_np(rot, self.offsets[0], self)

    def height(self) -> float:
        """Standing height in the rest pose (floor to head top), metres."""
        kp = self.rest_keypoints()
        return float(kp[:, 2].max() - min(kp[:, 2].min(), 0.0))


CANONICAL = Skeleton()


def forward_kinematics_np(local_rot: np.ndarray, root_pos: np.ndarray, offsets: np.ndarray | None = None):
    """Forward kinematics in numpy (float64; :func:`.kinematics.level_fk`).

    Parameters
    ----------
    local_rot : ndarray, shape (..., 22, 3, 3)
        Local joint rotations (row 0 is the root's world orientation).
    root_pos : ndarray, shape (..., 3)
        World position of the root joint.
    offsets : ndarray, shape (22, 3) or (..., 22, 3), optional
        Rest offsets; defaults to the canonical skeleton.

    Returns
    -------
    world_rot : ndarray, shape (..., 22, 3, 3)
    world_pos : ndarray, shape (..., 22, 3)
    """
    off = REST_OFFSETS if offsets is None else np.asarray(offsets, dtype=np.float64)
    return level_fk(TREE, np.asarray(local_rot, dtype=np.float64), off,
                    root_pos=np.asarray(root_pos, dtype=np.float64))


def keypoints_from_fk_np(local_rot: np.ndarray, root_pos: np.ndarray, skeleton: Skeleton | None = None) -> np.ndarray:
    """World positions of all 32 keypoints, shape (..., 32, 3).

    The skeleton's arrays may carry the batch dimensions too (per-sample
    offsets (..., 22, 3) and end offsets (..., 10, 3)).
    """
    skeleton = skeleton or CANONICAL
    world_rot, world_pos = forward_kinematics_np(local_rot, root_pos, skeleton.offsets)
    return keypoints_from_world_np(world_rot, world_pos, skeleton.end_offsets)


def keypoints_from_world_np(world_rot: np.ndarray, world_pos: np.ndarray, end_offsets) -> np.ndarray:
    """The 32 keypoints (..., 32, 3) from the joints' world rotations and positions and the end offsets."""
    eo = np.asarray(end_offsets, dtype=np.float64)[..., None]       # (..., 10, 3, 1)
    ends = world_pos[..., END_PARENTS, :] + (world_rot[..., END_PARENTS, :, :] @ eo)[..., 0]
    return np.concatenate([world_pos, ends], axis=-2)


def ancestor_matrix() -> np.ndarray:
    """Boolean (32, 22) matrix: keypoint k moves when joint j rotates.

    A joint's rotation moves every keypoint carried by the joint itself or
    by any descendant, except the joint's own origin.
    """
    out = np.zeros((len(KEYPOINTS), len(JOINTS)), dtype=bool)
    for k in range(len(KEYPOINTS)):
        j = KEYPOINT_JOINT[k]
        is_end = k >= len(JOINTS)
        # an end point moves with its carrying joint; a joint origin only with its ancestors
        cur = j if is_end else PARENTS[j]
        while cur >= 0:
            out[k, cur] = True
            cur = PARENTS[cur]
    return out
