"""The toe tip's line (issue 32): keypoints baked onto their own skeleton, a foot without a toe bone
(the Second Life convention: the foot's End Site at the toes) or a toe bone on a skeleton hanging from
its hips (a BVH import), point at the source's toe tip, so the toes stand where the source's do."""

import numpy as np
import pytest

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
         "hand": "{s}Hand", "thigh": "{s}Thigh", "calf": "{s}Shin", "foot": "{s}Foot", "toe": "{s}Toe"}


def _name(j):
    if j.endswith(("_l", "_r")):
        return NAMES[j[:-2]].format(s=j[-1])
    return NAMES[j]


def _walk_bvh(path, toes, hanging, frames=90):
    """The demo walk as a BVH file (Z up, metres), with or without toe joints (without: each foot's End
    Site at its toe tip), its rest standing on the floor or hanging from the hips at the origin. The toe
    tip lies lower than the canonical one (a toe pointing down at rest, as other skeletons' do)."""
    G_local, root = walk_rotations(frames, FPS)
    keep = [j for j, n in enumerate(JOINTS) if toes or not n.startswith("toe_")]
    new = {j: i for i, j in enumerate(keep)}
    parents = np.array([-1 if PARENTS[j] < 0 else new[PARENTS[j]] for j in keep])
    offsets = np.array([REST_OFFSETS[j] for j in keep])
    if hanging:
        offsets[0] = 0.0
    ends = [(new[JOINTS.index("head")], END_OFFSETS[END_POINTS.index("head_top")])]
    for s in "lr":
        tip = END_OFFSETS[END_POINTS.index(f"toe_tip_{s}")] + np.array([0.0, 0.0, -0.025])
        if toes:
            ends.append((new[JOINTS.index(f"toe_{s}")], tip))
        else:
            ends.append((new[JOINTS.index(f"foot_{s}")], REST_OFFSETS[JOINTS.index(f"toe_{s}")] + tip))
        ends.append((new[JOINTS.index(f"hand_{s}")], END_OFFSETS[END_POINTS.index(f"hand_tip_{s}")]))
    trans = np.broadcast_to(offsets, (frames, len(keep), 3)).copy()
    trans[:, 0] = root
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + \
        [("Zrotation", "Xrotation", "Yrotation")] * (len(keep) - 1)
    motion = frames_from_rotations(channels, G_local[:, keep], trans)
    write_bvh(path, [_name(JOINTS[j]) for j in keep], parents, offsets, channels, motion, frame_time=1.0 / FPS,
              end_sites=ends, precision=8)
    return path


@pytest.mark.parametrize("toes,hanging", [(False, False), (False, True), (True, True)])
def test_keypoints_onto_their_own_skeleton_put_its_toe_tips_on_the_sources(tmp_path, toes, hanging):
    """Keypoints of a skeleton baked back onto that skeleton: the bone ending at the toe tip (a toe-less
    foot, a toe) points at the source's tip. Before, no row held a toe-less foot's pitch, and the
    network's foot (its canonical toe taking part of the bend) lifted the toes off the source's at the
    contacts (cmu_sl's own skeletons), the ankles exact."""
    path = str(_walk_bvh(tmp_path / "walk.bvh", toes, hanging))
    clip = read_bvh_keypoints(path, units="m", up_axis="Z")
    kp, mask = to_canonical(clip)
    assert mask[:, KEYPOINTS.index("toe_l")].any() == toes and mask[:, KEYPOINTS.index("toe_tip_l")].all()
    rig = bvh_armature(read_bvh(path), "Z", 1.0, "walk", blender_version=(5, 0)).rig
    job = RigBake(rig, auto_map(rig), kp, mask, clip.fps, BakeOptions(device="cpu"))
    job.run()
    res = job.full_result()
    rot, heads = pose_rig(rig, res.quaternions, res.locations)
    Q = rig.rest_rotation()
    for s in "lr":
        b = rig.index(_name(f"toe_{s}" if toes else f"foot_{s}"))
        tail = heads[:, b] + rot[:, b] @ (Q[b].T @ (rig.tail[b] - rig.head[b]))
        tip = kp[:, KEYPOINTS.index(f"toe_tip_{s}")]
        head = kp[:, KEYPOINTS.index(f"toe_{s}" if toes else f"foot_{s}")]
        # (the bone's line, not its head: a rig standing on its floor at rest keeps its rest heights)
        off = np.linalg.norm((tail - heads[:, b]) - (tip - head), axis=-1)
        assert np.max(off) < 0.002, (s, np.median(off), np.max(off))


@pytest.mark.parametrize("hanging", [True, False])
def test_a_toe_bone_is_aimed_at_the_toe_tip_on_a_hanging_rig_only(tmp_path, hanging):
    """A toe bone's line is held by a row along the source's ball-to-toe-tip line on a skeleton hanging
    from its hips (before, only the start pose held it: Rokoko's and cmu_hahne's own skeletons from
    their keypoints put the toes through the floor or beside the source's); on a rig standing on its
    floor at rest, whose foot is pitched onto its own flat foot, it is left to the start pose."""
    from neural_ik.pipeline.targets import dense_targets, rest_floor_gap
    from neural_ik.retarget.solve import plan_retarget

    path = str(_walk_bvh(tmp_path / "walk.bvh", True, hanging, frames=30))
    kp, mask = to_canonical(read_bvh_keypoints(path, units="m", up_axis="Z"))
    rig = bvh_armature(read_bvh(path), "Z", 1.0, "walk", blender_version=(5, 0)).rig
    plan = plan_retarget(rig, auto_map(rig))
    tg, info = dense_targets(plan, kp, mask, 1.0, FPS, np.array([0.0, 0.0, 1.0]),
                             rest_floor_gap=rest_floor_gap(plan, np.eye(4)))
    rows = {r["name"]: i for i, r in enumerate(tg.rows)}
    assert ("toe_l>toe_tip_l" in rows) == hanging, sorted(rows)
    if hanging:
        i = rows["toe_l>toe_tip_l"]
        b = rig.index(_name("toe_l"))
        L = float(np.linalg.norm(rig.tail[b] - rig.head[b]))
        line = kp[:, KEYPOINTS.index("toe_tip_l")] - kp[:, KEYPOINTS.index("toe_l")]
        want = L * line / np.linalg.norm(line, axis=-1, keepdims=True)
        np.testing.assert_allclose(tg.rows[i]["target"], want, atol=1e-5)
        assert info.rigid[i] == pytest.approx(L)
