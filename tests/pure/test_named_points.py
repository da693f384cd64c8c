"""Points named after a studio rig's joints: read by the skeleton mapper, with or without ``parents``."""

import numpy as np
import pytest

from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import JOINTS, KEYPOINTS, PARENTS  # noqa: E402
from neural_ik.readers import read_keypoints, to_canonical  # noqa: E402
from neural_ik.readers.named import infer_parents  # noqa: E402
from source_fixtures import UNITY, kinect_points  # noqa: E402

@pytest.fixture(scope="module")
def walk():
    return walk_keypoints(3.0, 30.0)


def _write(path, walk, joints, parents=None):
    idx = [KEYPOINTS.index(j) for j in joints]
    extra = {} if parents is None else {"parents": np.asarray(parents)}
    np.savez(path, positions=walk[:, idx], joint_names=np.array([UNITY[j] for j in joints]), fps=30.0,
             units="m", up_axis="Z", **extra)
    return path


@pytest.mark.parametrize("with_parents", [True, False])
def test_studio_joint_names_map_onto_the_canonical_joints(walk, tmp_path, with_parents):
    joints = list(JOINTS)
    parents = [joints.index(JOINTS[p]) if p >= 0 else -1 for p in PARENTS] if with_parents else None
    clip = read_keypoints(_write(tmp_path / "unity.npz", walk, joints, parents), ground=False)
    assert any("skeleton mapper" in w for w in clip.warnings), clip.warnings
    kp, mask = to_canonical(clip)
    for j in JOINTS:
        assert mask[:, KEYPOINTS.index(j)].all(), j
        np.testing.assert_allclose(kp[:, KEYPOINTS.index(j)], walk[:, KEYPOINTS.index(j)], atol=1e-9, err_msg=j)


def test_the_motion_shows_the_tree(walk):
    idx = [KEYPOINTS.index(j) for j in JOINTS]
    parents = infer_parents(walk[:, idx], [UNITY[j] for j in JOINTS])
    want = np.array(PARENTS)
    assert (parents == want).mean() > 0.9, [(JOINTS[i], JOINTS[p] if p >= 0 else None)
                                             for i, p in enumerate(parents) if p != want[i]]


def test_six_named_effectors(walk, tmp_path):
    eff = ["pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r"]
    clip = read_keypoints(_write(tmp_path / "six.npz", walk, eff), ground=False)
    kp, mask = to_canonical(clip)
    for j in eff:
        np.testing.assert_allclose(kp[:, KEYPOINTS.index(j)], walk[:, KEYPOINTS.index(j)], atol=1e-9)
    assert mask.sum(1).max() == 6


def test_names_nobody_knows_say_so(tmp_path, walk):
    path = tmp_path / "odd.npz"
    np.savez(path, positions=walk[:, :6], joint_names=np.array([f"thing{i}" for i in range(6)]), fps=30.0,
             units="m", up_axis="Z")
    with pytest.raises(Exception, match=r"unknown joint names \(thing0.*--layout"):
        read_keypoints(path)


@pytest.mark.parametrize("time_column,state", [(False, False), (True, False), (False, True)])
def test_headerless_kinect_csv(walk, tmp_path, time_column, state):
    pts = kinect_points(walk)
    cols = [pts]
    if state:
        cols = [np.concatenate([pts, np.full(pts.shape[:2] + (1,), 2.0)], -1)]
    rows = cols[0].reshape(len(walk), -1)
    if time_column:
        rows = np.concatenate([np.arange(len(walk))[:, None] / 30.0, rows], 1)
    path = tmp_path / "kinect.csv"
    np.savetxt(path, rows, delimiter=",", fmt="%.6f")
    clip = read_keypoints(path, ground=False, fps=30.0, units="m")
    assert clip.layout == "kinect_v2" and clip.up_axis == "Y"
    assert any("no header row: read as Kinect v2" in w for w in clip.warnings), clip.warnings
    kp, mask = to_canonical(clip)
    for j in ("pelvis", "spine2", "neck", "head", "hand_l", "calf_r", "toe_l"):
        np.testing.assert_allclose(kp[:, KEYPOINTS.index(j)], walk[:, KEYPOINTS.index(j)], atol=1e-5, err_msg=j)


def test_headerless_csv_of_no_known_count_says_what_to_do(tmp_path):
    path = tmp_path / "odd.csv"
    np.savetxt(path, np.random.default_rng(0).normal(size=(5, 14)), delimiter=",")
    with pytest.raises(Exception, match=r"no header row.*14 columns.*--layout"):
        read_keypoints(path)


@pytest.mark.parametrize("data,kind", [
    ({"version": 1.3, "people": [{"person_id": [-1], "pose_keypoints_2d": [100.0, 200.0, 0.9] * 25}]}, "OpenPose"),
    ([{"image_id": 1, "category_id": 1, "keypoints": [10.0, 20.0, 2] * 17, "score": 0.9}], "COCO results"),
    ({"images": [{"id": 1}], "annotations": [{"keypoints": [1, 2, 2] * 17}]}, "COCO annotation"),
])
def test_2d_image_keypoints_are_named_and_refused_with_what_to_do(tmp_path, data, kind):
    import json

    path = tmp_path / "frame_000000000000_keypoints.json"
    path.write_text(json.dumps(data))
    with pytest.raises(Exception, match=rf"2D image keypoints \([^)]*{kind}.*needs 3D positions.*Lift them"):
        read_keypoints(path)
