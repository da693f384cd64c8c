"""The source skeleton of hierarchy sources (``KeypointClip.source_rig``): pose_rig reproduces
the clip's joints for every BVH convention (axes, units, joint orients, rest poses); resampling and
slicing carry it; the one skeleton mapper maps every naming scheme."""

import numpy as np
import pytest

from source_fixtures import bone_names, humanoid_bvh

from neural_ik.model.skeleton import JOINTS, KEYPOINTS
from neural_ik.readers import read_keypoints, resample, to_canonical
from neural_ik.retarget.mapping import humanoid_check
from neural_ik.retarget.solve import pose_rig


def _heads_vs_clip(clip):
    src = clip.source_rig
    _, heads = pose_rig(src.rig, src.quaternions, src.locations)
    mapped = [src.rig.index(b) for b in src.mapping.entries.values()]
    idx = [clip.joint_names.index(src.rig.names[b]) for b in mapped]
    return heads[:, mapped], clip.positions[:, idx]


@pytest.mark.parametrize("scheme", ["mixamo", "studio", "asf", "metarig"])
@pytest.mark.parametrize("up,units,orients", [
    ("Y", "cm", "none"), ("Z", "in", "A"), ("Y", "in", "random"), ("Z", "cm", "random"),
    ("Y", "m", "A"), ("Z", "mm", "none"),
])
def test_pose_rig_reproduces_bvh_joints(tmp_path, scheme, up, units, orients):
    path, world = humanoid_bvh(tmp_path / f"{scheme}.bvh", scheme, up=up, units=units, orients=orients,
                               floor=0.25)
    clip = read_keypoints(path)
    src = clip.source_rig
    assert src is not None and src.quaternions.dtype == np.float32 and src.locations.dtype == np.float32
    assert src.quaternions.shape == (clip.num_frames, len(src.rig), 4)
    # detection from the data: up axis, units, floor
    assert clip.up_axis == up and clip.units == units
    assert clip.floor_shift == pytest.approx(-0.25, abs=0.02)
    # the one mapper maps every body joint of each naming scheme
    assert src.mapping.entries == dict(zip(JOINTS, bone_names(scheme)))
    assert humanoid_check(src.mapping) == []
    got, want = _heads_vs_clip(clip)
    np.testing.assert_allclose(got, want, atol=1e-5)  # 0.01 mm
    # and the clip's canonical keypoints are the walk, on the floor
    kp, mask = to_canonical(clip)
    j = [KEYPOINTS.index(n) for n in JOINTS]
    np.testing.assert_allclose(kp[:, j], world[:, j] + [0, 0, clip.floor_shift], atol=1e-5)
    assert mask[:, KEYPOINTS.index("head_top")].all() and mask[:, KEYPOINTS.index("toe_tip_l")].all()


def test_rig_rest_and_tails(tmp_path):
    path, _ = humanoid_bvh(tmp_path / "a.bvh", "mixamo", up="Y", units="cm", orients="random")
    clip = read_keypoints(path, ground=False)
    rig = clip.source_rig.rig
    # rest rotation = the file's axis conversion (Y up -> Z up), heads in metres
    C = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0.0]])
    np.testing.assert_allclose(rig.matrix_local[:, :3, :3], np.broadcast_to(C, (len(rig), 3, 3)), atol=1e-12)
    np.testing.assert_allclose(rig.matrix_local[:, :3, 3], rig.head)
    assert (np.linalg.norm(rig.tail - rig.head, axis=1) > 0).all()
    # a bone with one child ends at that child's head
    fa = rig.index("LeftForeArm")
    np.testing.assert_allclose(rig.tail[fa], rig.head[rig.index("LeftHand")])


def test_no_ground_keeps_heights(tmp_path):
    path, world = humanoid_bvh(tmp_path / "f.bvh", "studio", up="Z", units="m", floor=0.4)
    clip = read_keypoints(path, ground=False)
    assert clip.floor_shift == 0.0
    got, want = _heads_vs_clip(clip)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert clip.positions[:, 0, 2].min() > 1.2
    grounded = read_keypoints(path)
    assert any("grounded" in w and "--no-ground" in w for w in grounded.warnings)


def test_resample_and_frames_carry_the_rig(tmp_path):
    path, _ = humanoid_bvh(tmp_path / "r.bvh", "asf", up="Y", units="in", orients="random", frames=31, fps=60)
    clip = read_keypoints(path)
    part = clip.frames(5, 20)
    assert part.source_rig.num_frames == 15
    got, want = _heads_vs_clip(part)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # 60 -> 30 fps: every other source frame, exact
    half = resample(clip, 30.0)
    assert half.source_rig.num_frames == half.num_frames == 16
    got, want = _heads_vs_clip(half)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # 60 -> 48 fps: in-between frames by slerp, close to the interpolated joints
    odd = resample(clip, 48.0)
    assert odd.source_rig.num_frames == odd.num_frames
    got, want = _heads_vs_clip(odd)
    assert np.abs(got - want).max() < 0.01
