"""Points named after a studio rig's joints: read by the skeleton mapper, with or without ``parents``."""

import numpy as np
import pytest

from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import JOINTS, KEYPOINTS, PARENTS  # noqa: E402
from neural_ik.readers import read_keypoints, to_canonical  # noqa: E402
from neural_ik.readers.named import infer_parents  # noqa: E402

#: Unity Humanoid-style names of the canonical joints.
UNITY = {"pelvis": "Hips", "spine1": "Spine", "spine2": "Chest", "spine3": "UpperChest", "neck": "Neck",
         "head": "Head"}
for _s, _S in (("l", "L"), ("r", "R")):
    UNITY.update({f"clavicle_{_s}": f"Shoulder_{_S}", f"upperarm_{_s}": f"UpperArm_{_S}",
                  f"forearm_{_s}": f"LowerArm_{_S}", f"hand_{_s}": f"Hand_{_S}", f"thigh_{_s}": f"UpperLeg_{_S}",
                  f"calf_{_s}": f"LowerLeg_{_S}", f"foot_{_s}": f"Foot_{_S}", f"toe_{_s}": f"Toes_{_S}"})


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


def _kinect(walk):
    """Kinect v2's 25 joints (SDK order) placed on the canonical walk, in camera axes (Y up)."""
    from neural_ik.readers.layouts import KINECT_V2

    k = {n: KEYPOINTS.index(n) for n in KEYPOINTS}
    up = np.array([0.0, 0.0, 0.1])
    where = {"SpineBase": walk[:, k["pelvis"]], "SpineMid": walk[:, k["spine2"]], "Neck": walk[:, k["head"]],
             "Head": walk[:, k["head"]] + up, "SpineShoulder": walk[:, k["neck"]]}
    for s, side in (("l", "Left"), ("r", "Right")):
        where.update({f"Shoulder{side}": walk[:, k[f"upperarm_{s}"]], f"Elbow{side}": walk[:, k[f"forearm_{s}"]],
                      f"Wrist{side}": walk[:, k[f"hand_{s}"]],
                      f"Hand{side}": 0.5 * (walk[:, k[f"hand_{s}"]] + walk[:, k[f"hand_tip_{s}"]]),
                      f"HandTip{side}": walk[:, k[f"hand_tip_{s}"]], f"Thumb{side}": walk[:, k[f"thumb_{s}"]],
                      f"Hip{side}": walk[:, k[f"thigh_{s}"]], f"Knee{side}": walk[:, k[f"calf_{s}"]],
                      f"Ankle{side}": walk[:, k[f"foot_{s}"]], f"Foot{side}": walk[:, k[f"toe_{s}"]]})
    pts = np.stack([where[n] for n in KINECT_V2.joint_names], 1)
    return np.stack([pts[..., 0], pts[..., 2], -pts[..., 1]], -1)     # Z up -> Y up


@pytest.mark.parametrize("time_column,state", [(False, False), (True, False), (False, True)])
def test_headerless_kinect_csv(walk, tmp_path, time_column, state):
    pts = _kinect(walk)
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
