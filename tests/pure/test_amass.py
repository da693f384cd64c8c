"""AMASS ``.npz`` motions (SMPL, SMPL+H, SMPL-X parameters) read as a source skeleton on a generic body."""

import numpy as np
import pytest

from amass_fixtures import J, Z_UP, planted_trans, still, walk, write_amass

from neural_ik.model.rotations_np import axis_angle_to_matrix
from neural_ik.readers import KeypointReadError, read_keypoints, to_canonical
from neural_ik.readers.amass import REST_OFFSETS, SMPL_JOINTS, SMPL_PARENTS
from neural_ik.retarget.solve import pose_rig


def _point(clip, name):
    return clip.positions[:, clip.joint_names.index(name)]


def _angle(u, v):
    c = (u * v).sum(-1) / np.linalg.norm(u, axis=-1) / np.linalg.norm(v, axis=-1)
    return np.degrees(np.arccos(np.clip(c, -1, 1)))


def _smpl_fk(poses, trans):
    """SMPL's forward kinematics in its own terms (model frame, root rotation as given), joints (T, 22, 3)."""
    R = axis_angle_to_matrix(poses[:, :22])
    T = len(poses)
    world_r = np.empty((T, 22, 3, 3))
    out = np.empty((T, 22, 3))
    for j, p in enumerate(SMPL_PARENTS):
        if p < 0:
            world_r[:, j], out[:, j] = R[:, j], trans + REST_OFFSETS[0]
        else:
            world_r[:, j] = world_r[:, p] @ R[:, j]
            out[:, j] = out[:, p] + world_r[:, p] @ REST_OFFSETS[j]
    return out


def test_t_pose_stands_upright_on_the_floor_facing_minus_y(tmp_path):
    clip = read_keypoints(write_amass(tmp_path / "tpose.npz", still(10), fps=120.0))
    assert clip.fps == 120.0 and clip.units == "m" and clip.up_axis == "Z"
    assert clip.source_rig is not None and len(clip.source_rig.mapping.entries) == 22
    assert clip.source_rig.mapping.entries["toe_l"] == "left_foot"
    assert clip.source_rig.mapping.entries["foot_l"] == "left_ankle"
    assert any("SMPL+H" in w and "generic" in w and "betas ignored" in w and "30 finger joints dropped" in w
               for w in clip.warnings), clip.warnings
    head, pelvis = _point(clip, "head"), _point(clip, "pelvis")
    assert (head[:, 2] - pelvis[:, 2] > 0.5).all()
    assert 1.6 < _point(clip, "head_End")[0, 2] < 1.85
    toe, ankle = _point(clip, "left_foot"), _point(clip, "left_ankle")
    assert (toe[:, 1] < ankle[:, 1] - 0.08).all()          # the toes point along -Y
    assert abs(_point(clip, "left_foot_End")[:, 2].min()) < 1e-6   # grounded
    hand_l, hand_r = _point(clip, "left_wrist"), _point(clip, "right_wrist")
    assert (hand_l[:, 0] > 0.6).all() and (hand_r[:, 0] < -0.6).all()   # T-pose, the body's left at +X
    kp, mask = to_canonical(clip)
    assert mask[:, :22].all()


def test_positions_are_smpl_forward_kinematics(tmp_path):
    rng = np.random.default_rng(3)
    poses = still(12)
    poses[:, 1:22] = rng.normal(scale=0.4, size=(12, 21, 3))
    poses[:, 0] = np.array(Z_UP) + rng.normal(scale=0.2, size=(12, 3))
    trans = rng.normal(scale=0.5, size=(12, 3))
    clip = read_keypoints(write_amass(tmp_path / "random.npz", poses, trans), ground=False)
    idx = [clip.joint_names.index(n) for n in SMPL_JOINTS]
    np.testing.assert_allclose(clip.positions[:, idx], _smpl_fk(poses, trans), atol=1e-9)
    # the source skeleton's pose gives the same joints (the rotations are what carries over)
    src = clip.source_rig
    _, heads = pose_rig(src.rig, src.quaternions, src.locations)
    np.testing.assert_allclose(heads, clip.positions[:, idx], atol=2e-5)


def test_knee_bent_90_degrees(tmp_path):
    clip = read_keypoints(write_amass(tmp_path / "knee.npz", still(5, left_knee=(np.pi / 2, 0, 0))))
    thigh = _point(clip, "left_knee") - _point(clip, "left_hip")
    shin = _point(clip, "left_ankle") - _point(clip, "left_knee")
    bent = axis_angle_to_matrix(np.array([np.pi / 2, 0.0, 0.0])) @ REST_OFFSETS[J["left_ankle"]]
    expected = _angle(REST_OFFSETS[J["left_knee"]], bent)   # the rest's own slight bend included
    assert 90.0 < expected < 96.0
    np.testing.assert_allclose(_angle(thigh, shin), expected, atol=1e-6)
    assert (shin[:, 1] > 0.35).all()                      # the shin points back (+Y), horizontal
    assert abs(_point(clip, "right_foot_End")[:, 2].min()) < 1e-6


def test_walk_rate_root_and_planted_feet(tmp_path):
    poses, trans = walk(120)
    clip = read_keypoints(write_amass(tmp_path / "walk.npz", poses, trans, fps=60.0))
    assert clip.fps == 60.0 and clip.num_frames == 120
    pelvis = _point(clip, "pelvis")
    assert pelvis[-1, 1] - pelvis[0, 1] < -0.5          # walks along -Y, facing it
    ankles = np.stack([_point(clip, "left_ankle"), _point(clip, "right_ankle")], 1)
    low = ankles[np.arange(120), np.argmin(ankles[..., 2], 1)]
    assert np.ptp(low[:, 2]) < 1e-6                       # the stance ankle at one height


@pytest.mark.parametrize("split", [False, True])
def test_smplx_body_is_read_by_name(tmp_path, split):
    poses, trans = walk(30)
    ref = read_keypoints(write_amass(tmp_path / "h.npz", poses, trans))
    if split:   # SMPL-X G releases: root_orient and pose_body beside poses
        flat = poses.reshape(30, -1)
        path = tmp_path / "x.npz"
        np.savez(path, root_orient=flat[:, :3], pose_body=flat[:, 3:66], pose_hand=np.zeros((30, 90)),
                 trans=trans, mocap_frame_rate=np.array(60.0), surface_model_type=np.array("smplx"),
                 betas=np.zeros(16))
    else:
        path = write_amass(tmp_path / "x.npz", poses, trans, width=165)
    clip = read_keypoints(path)
    assert any(w.startswith("SMPL-X body rotations") and "jaw, eyes" in w for w in clip.warnings), clip.warnings
    np.testing.assert_allclose(clip.positions, ref.positions, atol=1e-9)
    assert clip.fps == 60.0


def test_smpl_72_and_missing_rate(tmp_path):
    path = tmp_path / "smpl.npz"
    np.savez(path, poses=np.tile(np.r_[Z_UP, np.zeros(69)], (4, 1)), trans=np.zeros((4, 3)))
    clip = read_keypoints(path)
    assert clip.fps == 30.0 and any("--source-fps" in w for w in clip.warnings)
    assert any("SMPL body rotations" in w and "2 hand joints dropped" in w for w in clip.warnings)
    assert read_keypoints(path, fps=50.0).fps == 50.0


@pytest.mark.parametrize("arrays, message", [
    (dict(betas=np.zeros(16), gender=np.array("male")), r"shape\.npz: a body-model file without motion.*no 'poses'"),
    (dict(poses=np.zeros((4, 100)), trans=np.zeros((4, 3))), r"'poses' has shape \(4, 100\).*66.*156.*165"),
    (dict(poses=np.zeros((4, 156)), trans=np.zeros((5, 3))), r"'trans' must be \(frames, 3\).*\(5, 3\)"),
    (dict(poses=np.full((4, 156), np.nan), trans=np.zeros((4, 3))), r"frame 0: a body rotation is not a finite"),
    (dict(poses=np.zeros((4, 156)), trans=np.zeros((4, 3)), mocap_framerate=np.array(-5.0)),
     r"'mocap_framerate' must be one positive number"),
    (dict(root_orient=np.zeros((4, 3)), pose_body=np.zeros((4, 60))), r"'pose_body' \(4, 60\)"),
])
def test_bad_body_model_files_name_the_file_and_problem(tmp_path, arrays, message):
    path = tmp_path / "shape.npz"
    np.savez(path, **arrays)
    with pytest.raises(KeypointReadError, match=message):
        read_keypoints(path)


def test_pickled_poses_are_refused(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, poses=np.array([np.zeros(156)] * 3 + [None], dtype=object), trans=np.zeros((4, 3)))
    with pytest.raises(KeypointReadError, match=r"pickled\.npz: 'poses' is a Python object array"):
        read_keypoints(path)


def test_keypoint_npz_is_not_taken_for_amass(tmp_path):
    from source_fixtures import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    path = tmp_path / "kp.npz"
    np.savez(path, positions=walk_keypoints(8), joint_names=np.array(KEYPOINTS), fps=30.0, betas=np.zeros(10))
    clip = read_keypoints(path)
    assert clip.source_rig is None and clip.layout == "canonical"


def test_planted_trans_helper_keeps_a_still_body_still():
    trans = planted_trans(still(6))
    assert np.ptp(trans, axis=0).max() < 1e-9


def test_frame_count_peeked_from_the_header(tmp_path):
    from neural_ik.cli.sources import peek_frame_count

    assert peek_frame_count(str(write_amass(tmp_path / "walk.npz", still(17)))) == 17
