"""A foot without a toe bone (the Second Life convention: the foot's End Site at the toes) baked from
keypoints onto its own skeleton: the foot points at the source's toe tip, so the toes stand where the
source's do (issue 32)."""

import numpy as np

from _pkg import pkg
from source_fixtures import walk_rotations

pkg()
from neural_ik.model.bvh import frames_from_rotations, read_bvh, write_bvh  # noqa: E402
from neural_ik.model.skeleton import (  # noqa: E402
    END_OFFSETS, END_POINTS, JOINTS, KEYPOINTS, PARENTS, REST_OFFSETS,
)
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.readers.base import to_canonical  # noqa: E402
from neural_ik.readers.bvh import read_bvh_keypoints  # noqa: E402
from neural_ik.readers.bvh_armature import bvh_armature  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.rigpose import pose_rig  # noqa: E402

FPS = 30.0
NAMES = {"pelvis": "hip", "spine1": "abdomen", "spine2": "chest_lo", "spine3": "chest", "neck": "neck",
         "head": "head", "clavicle": "{s}Collar", "upperarm": "{s}Shldr", "forearm": "{s}ForeArm",
         "hand": "{s}Hand", "thigh": "{s}Thigh", "calf": "{s}Shin", "foot": "{s}Foot"}


def _name(j):
    if j.endswith(("_l", "_r")):
        return NAMES[j[:-2]].format(s=j[-1])
    return NAMES[j]


def _toeless_walk_bvh(path, frames=90):
    """The demo walk on a skeleton without toe joints, each foot's End Site at its toe tip (Z up, metres)."""
    G_local, root = walk_rotations(frames, FPS)
    keep = [j for j, n in enumerate(JOINTS) if not n.startswith("toe_")]
    new = {j: i for i, j in enumerate(keep)}
    parents = np.array([-1 if PARENTS[j] < 0 else new[PARENTS[j]] for j in keep])
    offsets = np.array([REST_OFFSETS[j] for j in keep])
    ends = [(new[JOINTS.index("head")], END_OFFSETS[END_POINTS.index("head_top")])]
    for s in "lr":
        tip = REST_OFFSETS[JOINTS.index(f"toe_{s}")] + END_OFFSETS[END_POINTS.index(f"toe_tip_{s}")]
        ends.append((new[JOINTS.index(f"foot_{s}")], tip))
        ends.append((new[JOINTS.index(f"hand_{s}")], END_OFFSETS[END_POINTS.index(f"hand_tip_{s}")]))
    trans = np.broadcast_to(offsets, (frames, len(keep), 3)).copy()
    trans[:, 0] = root
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + \
        [("Zrotation", "Xrotation", "Yrotation")] * (len(keep) - 1)
    motion = frames_from_rotations(channels, G_local[:, keep], trans)
    write_bvh(path, [_name(JOINTS[j]) for j in keep], parents, offsets, channels, motion, frame_time=1.0 / FPS,
              end_sites=ends, precision=8)
    return path


def test_keypoints_onto_a_toeless_foot_put_its_toe_tip_on_the_sources(tmp_path):
    """Keypoints of a skeleton whose feet have no toe bone, baked onto that skeleton: no row held the
    foot's pitch, and the network's foot (its toe bending the canonical tip) lifted the toes off the
    source's at the contacts (cmu_sl's own skeletons), the ankles exact."""
    path = str(_toeless_walk_bvh(tmp_path / "toeless.bvh"))
    clip = read_bvh_keypoints(path, units="m", up_axis="Z")
    kp, mask = to_canonical(clip)
    assert not mask[:, KEYPOINTS.index("toe_l")].any() and mask[:, KEYPOINTS.index("toe_tip_l")].all()
    arm = bvh_armature(read_bvh(path), "Z", 1.0, "toeless", blender_version=(5, 0))
    rig = arm.rig
    job = RigBake(rig, auto_map(rig), kp, mask, clip.fps, BakeOptions(device="cpu"))
    job.run()
    res = job.full_result()
    rot, heads = pose_rig(rig, res.quaternions, res.locations)
    Q = rig.rest_rotation()
    for s in "lr":
        f = rig.index(_name(f"foot_{s}"))
        tail = heads[:, f] + rot[:, f] @ (Q[f].T @ (rig.tail[f] - rig.head[f]))
        ankle, tip = kp[:, KEYPOINTS.index(f"foot_{s}")], kp[:, KEYPOINTS.index(f"toe_tip_{s}")]
        # (the ankle itself may stand a few mm off: a rig standing on its floor keeps its rest heights)
        off = np.linalg.norm((tail - heads[:, f]) - (tip - ankle), axis=-1)
        assert np.max(off) < 0.002, (s, np.median(off), np.max(off))
