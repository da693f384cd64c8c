"""Source conventions read with no flags, and bad input refused with a message naming the fix:
nameless arrays, units (inches, CMU), up axis from the motion, image-normalised coordinates, mixed
units, non-humanoid skeletons, two candidates for a limb."""

import json
import re

import numpy as np
import pytest

from source_fixtures import humanoid_bvh, walk_keypoints

from neural_ik.model.bvh import write_bvh
from neural_ik.model.skeleton import KEYPOINTS
from neural_ik.readers import LAYOUTS, KeypointReadError, read_keypoints, to_canonical, upright_share

WALK = walk_keypoints(40)
SMPL_ORDER = [0, 14, 18, 1, 15, 19, 2, 16, 20, 3, 17, 21, 4, 6, 10, 5, 7, 11, 8, 12, 9, 13]


def _layout_points(kp, name):
    lay = LAYOUTS[name]
    face = {"left_eye": (0.03, -0.02, 0.03), "right_eye": (-0.03, -0.02, 0.03),
            "left_ear": (0.07, 0.08, -0.02), "right_ear": (-0.07, 0.08, -0.02)}
    out = np.zeros((kp.shape[0], len(lay.joint_names), 3))
    for j, n in enumerate(lay.joint_names):
        out[:, j] = kp[:, KEYPOINTS.index(lay.to_canonical.get(n, "nose"))] + face.get(n, (0, 0, 0))
    return out


def _yup(p):
    return np.stack([p[..., 0], p[..., 2], -p[..., 1]], -1)


@pytest.mark.parametrize("name,array,layout", [
    ("smpl22", _yup(WALK[:, SMPL_ORDER]), "smpl24"),
    ("h36m", _layout_points(WALK, "h36m17"), "h36m17"),
    ("coco_mm", _layout_points(WALK, "coco17") * 1000.0, "coco17"),
])
def test_nameless_arrays(tmp_path, name, array, layout):
    f = tmp_path / f"{name}.npy"
    np.save(f, array)
    clip = read_keypoints(f)
    assert clip.layout == layout and clip.up_axis in ("Z", "Y")
    assert any("no joint names" in w for w in clip.warnings)
    assert any("--source-fps" in w for w in clip.warnings)  # the rate is asked for by its real flag
    kp, mask = to_canonical(clip)
    assert upright_share(kp, mask) == 1.0
    assert mask[:, KEYPOINTS.index("pelvis")].all() and mask[:, KEYPOINTS.index("head")].all()
    k = KEYPOINTS.index("hand_l")
    np.testing.assert_allclose(kp[:, k] - kp[:, KEYPOINTS.index("foot_l")],
                               WALK[:, k] - WALK[:, KEYPOINTS.index("foot_l")], atol=1e-6)


def test_child_in_inches_and_cmu_adult(tmp_path):
    # a 0.65 m body in cm is an adult in inches; a CMU-unit adult is not read as inches
    p, _ = humanoid_bvh(tmp_path / "in.bvh", "mixamo", up="Y", units="in")
    assert read_keypoints(p).units == "in"
    p, _ = humanoid_bvh(tmp_path / "cmu.bvh", "asf", up="Y", units="cmu")
    assert read_keypoints(p).units == "cmu"


def test_leaning_clip_keeps_its_up_axis(tmp_path):
    p, _ = humanoid_bvh(tmp_path / "lean.bvh", "studio", up="Z", units="cm", lean=1.5, frames=60)
    clip = read_keypoints(p)
    assert clip.up_axis == "Z"


def test_image_normalised_refused(tmp_path):
    mp = _layout_points(WALK, "mediapipe_pose")
    img = (mp[..., [0, 2]] - mp[..., [0, 2]].min()) / 4.0 + 0.3
    frames = [[{"x": float(a), "y": float(1 - b), "z": 0.0} for a, b in fr] for fr in img]
    f = tmp_path / "img.json"
    f.write_text(json.dumps(frames))
    with pytest.raises(KeypointReadError, match=r"img\.json.*image-normalised.*--units m"):
        read_keypoints(f)


def test_mixed_units_refused(tmp_path):
    pts = _layout_points(WALK, "coco17")
    pts[:, 11:] *= 1000.0
    f = tmp_path / "mixed.npz"
    np.savez(f, positions=pts, joint_names=np.array(LAYOUTS["coco17"].joint_names), fps=30.0)
    with pytest.raises(KeypointReadError, match=r"mixed\.npz: mixed units: body segments disagree.*--layout"):
        read_keypoints(f)


def test_small_body_warns_with_the_units_flag(tmp_path):
    """A body 0.70 m tall (an adult's clip in inches read as centimetres) warns; a small child's does not
    (tests/pure/test_readers.py)."""
    f = tmp_path / "small.npz"
    np.savez(f, positions=WALK * 0.4, joint_names=np.array(KEYPOINTS), fps=30.0, units="m")
    clip = read_keypoints(f)
    assert any("0.70 m tall" in w and "--units" in w for w in clip.warnings), clip.warnings


def test_non_humanoid_skeleton_refused(tmp_path):
    f = tmp_path / "snake.bvh"
    write_bvh(f, ["root", "seg1", "seg2"], [-1, 0, 1], [[0, 0, 0], [0, 10, 0], [0, 10, 0]],
              [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")]
              + [("Zrotation", "Xrotation", "Yrotation")] * 2, np.zeros((2, 12)))
    with pytest.raises(KeypointReadError,
                       match=r"snake\.bvh: not a humanoid skeleton.*no bone for pelvis, head, upperarm_l"
                             r".*Mapped: nothing.*--layout"):
        read_keypoints(f)


def test_two_candidates_for_a_limb_refused(tmp_path):
    import re

    p, _ = humanoid_bvh(tmp_path / "ok.bvh", "mixamo", up="Y", units="cm", frames=3)
    text = p.read_text()
    # a second left arm chain (no channels of its own) hanging from the chest
    arm = text[text.index("JOINT LeftShoulder"):text.index("JOINT RightShoulder")]
    arm2 = re.sub(r"\b(LeftShoulder|LeftArm|LeftForeArm|LeftHand)\b", r"\g<1>2", arm)
    arm2 = arm2.replace("CHANNELS 3 Zrotation Xrotation Yrotation", "CHANNELS 0")
    f = tmp_path / "two.bvh"
    f.write_text(text.replace("JOINT RightShoulder", arm2 + "JOINT RightShoulder", 1))
    with pytest.raises(KeypointReadError, match=r"two\.bvh.*two candidates for hand_l: LeftHand, LeftHand2.*--layout"):
        read_keypoints(f)


def test_opencap_markers_give_joint_centres(tmp_path):
    from source_fixtures import opencap_markers, write_trc

    markers, walk = opencap_markers()
    f = write_trc(tmp_path / "opencap.trc", markers, units="mm", up="Y")
    clip = read_keypoints(f, ground=False)
    assert clip.layout == "markers" and clip.units == "mm" and clip.up_axis == "Y"
    assert any("regressed from 26 anatomical markers" in w for w in clip.warnings)
    kp, mask = to_canonical(clip)
    for name in ("pelvis", "thigh_l", "thigh_r", "calf_l", "foot_r", "upperarm_l", "forearm_r", "hand_l",
                 "toe_tip_l", "heel_r"):
        k = KEYPOINTS.index(name)
        assert mask[:, k].all(), name
        np.testing.assert_allclose(kp[:, k], walk[:, k], atol=2e-3, err_msg=name)  # within 2 mm
    # no head points in the set: masked, not refused
    assert not mask[:, KEYPOINTS.index("head")].any()


def test_marker_set_missing_half_a_leg_refused(tmp_path):
    from source_fixtures import opencap_markers, write_trc

    markers, _ = opencap_markers(drop=("l_knee_study", "l_mknee_study", "l_ankle_study", "l_mankle_study"))
    f = write_trc(tmp_path / "half.trc", markers)
    with pytest.raises(KeypointReadError, match=r"half\.trc: marker set missing part of a leg: no left knee.*"
                                                 r"no left ankle.*Recognised markers:.*--layout"):
        read_keypoints(f)


@pytest.mark.parametrize("orients", ["none", "A"])
def test_nameless_skeleton_mapped_by_geometry(tmp_path, orients):
    """Joints named j0..j21: the hierarchy and the rest geometry decide (sides from the toes' direction)."""
    from source_fixtures import bone_names

    from neural_ik.model.skeleton import JOINTS

    p, world = humanoid_bvh(tmp_path / "anon.bvh", "mixamo", up="Y", units="cm", orients=orients)
    text = p.read_text()
    for i, n in sorted(enumerate(bone_names("mixamo")), key=lambda x: -len(x[1])):
        text = re.sub(rf"\b{n}\b", f"j{i}", text)
    p.write_text(text)
    clip = read_keypoints(p)
    m = clip.source_rig.mapping
    assert m.entries == {j: f"j{i}" for i, j in enumerate(JOINTS)}
    assert all(m.confidence[j] <= 0.6 for j in m.entries)
    kp, mask = to_canonical(clip)
    np.testing.assert_allclose(kp[:, :22], world[:, :22] + [0, 0, clip.floor_shift], atol=1e-5)
