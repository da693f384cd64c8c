"""Keypoint layouts: registry, detection, mapping onto canonical keypoints."""

import json

import numpy as np
import pytest

from _pkg import pkg

pkg()
from neural_ik.model.skeleton import CANONICAL, KEYPOINTS  # noqa: E402
from neural_ik.readers import (  # noqa: E402
    LAYOUTS,
    KeypointClip,
    detect_layout,
    get_layout,
    layout_table,
    load_mapping,
    to_canonical,
)
from neural_ik.readers.layouts import canonical_weights, normalize_name  # noqa: E402

REST = CANONICAL.rest_keypoints()
K = {n: REST[i] for i, n in enumerate(KEYPOINTS)}


def _extra_points():
    """Source points with no direct canonical counterpart, placed on the rest pose."""
    e = {}
    for side, s, sign in (("left", "l", 1.0), ("right", "r", -1.0)):
        S = side[0].upper()
        hand, tip = K[f"hand_{s}"], K[f"hand_tip_{s}"]
        mcp = hand + 0.5 * (tip - hand)
        ear = K["head"] + np.array([sign * 0.07, 0.0, 0.06])
        big = K[f"toe_tip_{s}"] + np.array([-sign * 0.02, 0, 0])
        small = K[f"toe_tip_{s}"] + np.array([sign * 0.02, 0, 0])
        e.update({
            f"{side}_ear": ear, f"{S}Ear": ear,
            f"{side}_index": mcp + [0, -0.03, 0], f"{side}_pinky": mcp + [0, 0.03, 0],
            f"{side}_hand": mcp,
            f"{side}_big_toe": big, f"{side}_small_toe": small, f"{S}BigToe": big, f"{S}SmallToe": small,
            f"{side}_eye": K["nose"] + [sign * 0.03, 0.02, 0.03],
            f"{S}Eye": K["nose"] + [sign * 0.03, 0.02, 0.03],
        })
        # Character Creator: finger joints before the tip, mid toe half way to the toe tip
        d = 0.02 * (tip - hand) / np.linalg.norm(tip - hand)
        e[f"CC_Base_{S}_Mid3"], e[f"CC_Base_{S}_Mid2"] = tip - 0.8 * d, tip - 1.8 * d
        e[f"CC_Base_{S}_MidToe1"] = 0.5 * (K[f"toe_{s}"] + K[f"toe_tip_{s}"])
    e["MidHip"] = 0.5 * (K["thigh_l"] + K["thigh_r"])
    e["Neck"] = 0.5 * (K["upperarm_l"] + K["upperarm_r"])
    return e


def synth(layout):
    """Source points of ``layout`` generated from the canonical rest pose (NaN when not placeable)."""
    extra = _extra_points()
    pts = []
    for n in layout.joint_names:
        if n in layout.to_canonical:
            pts.append(K[layout.to_canonical[n]])
        elif n in extra and not (layout.name == "smplx" and n.split("_")[-1] in ("index", "pinky")):
            pts.append(extra[n])
        else:
            pts.append([np.nan] * 3)
    return np.array(pts, dtype=float)


def test_registry_and_table():
    rows = layout_table()
    names = [r["name"] for r in rows]
    for expected in ("canonical", "mediapipe_pose", "coco17", "h36m17", "openpose_body25", "smpl24",
                     "smplx", "mixamo", "cmu", "cc_base", "rigify", "ue_mannequin"):
        assert expected in names
    for r in rows:
        assert r["joints"] == len(r["joint_names"]) == len(set(r["joint_names"]))
        assert r["description"] and r["notes"]
        assert set(r["canonical"]) <= set(KEYPOINTS)
    assert LAYOUTS["mediapipe_pose"].joint_names[0] == "nose" and len(LAYOUTS["mediapipe_pose"].joint_names) == 33
    assert len(LAYOUTS["coco17"].joint_names) == 17
    assert len(LAYOUTS["openpose_body25"].joint_names) == 25
    assert len(LAYOUTS["smpl24"].joint_names) == 24


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_detect_own_names(name):
    got, score = detect_layout(LAYOUTS[name].joint_names)
    assert got == name and score == pytest.approx(1.0)


def test_detect_prefixed_and_partial():
    mix = ["mixamorig:" + n for n in LAYOUTS["mixamo"].joint_names] + ["mixamorig:LeftHandIndex1", "mixamorig:LeftHandIndex2"]
    assert detect_layout(mix)[0] == "mixamo"
    assert detect_layout(["mixamorig1:Hips", "mixamorig1:Spine", "mixamorig1:LeftUpLeg", "mixamorig1:LeftArm"])[0] == "mixamo"
    cmu = ["Hips", "LHipJoint", "LeftUpLeg", "LowerBack", "Spine", "Spine1", "Neck", "Neck1", "Head"]
    assert detect_layout(cmu)[0] == "cmu"
    assert detect_layout(["foo", "bar"]) == (None, 0.0)
    # the whole MediaPipe body plus 42 hand and 100 face points (FreeMoCap's combined export)
    many = list(LAYOUTS["mediapipe_pose"].joint_names) + [f"right_hand_{i}" for i in range(21)] + \
        [f"left_hand_{i}" for i in range(21)] + [f"face_{i}" for i in range(100)]
    name, score = detect_layout(many)
    assert name == "mediapipe_pose" and score == pytest.approx(0.9)
    assert detect_layout(LAYOUTS["smpl24"].joint_names[:22])[0] == "smpl24"
    assert normalize_name("Armature|DEF-spine.001") == "def_spine_001"


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_rest_pose_maps_to_rest_keypoints(name):
    lay = LAYOUTS[name]
    src = synth(lay)
    clip = KeypointClip(src[None].repeat(3, 0), list(lay.joint_names), 30.0, layout=name)
    kp, mask = to_canonical(clip)
    assert kp.shape == (3, 32, 3) and mask.shape == (3, 32)
    assert mask[0].sum() == canonical_weights(lay, lay.joint_names)[1].sum() >= 16
    err = np.linalg.norm(kp[0][mask[0]] - REST[mask[0]], axis=-1)
    # derived points are approximations; the worst is the ball of the foot from heel/toe tip (5 mm)
    assert err.max() < 0.01, dict(zip(np.array(KEYPOINTS)[mask[0]], err.round(3)))
    assert np.isnan(kp[~mask]).all()


def test_missing_joints_masked():
    lay = LAYOUTS["coco17"]
    _, defined = canonical_weights(lay, lay.joint_names)
    for k in ("spine1", "spine2", "spine3", "clavicle_l", "hand_tip_l", "heel_r", "toe_l"):
        assert not defined[KEYPOINTS.index(k)]
    for k in ("pelvis", "neck", "head", "nose", "hand_l", "foot_r"):
        assert defined[KEYPOINTS.index(k)]
    # a derived point needs all its sources: no ears -> no head
    names = [n for n in lay.joint_names if "ear" not in n]
    _, defined = canonical_weights(lay, names)
    assert not defined[KEYPOINTS.index("head")]


def test_nan_source_masks_derived():
    lay = LAYOUTS["mediapipe_pose"]
    src = synth(lay)[None].repeat(2, 0)
    src[1, lay.joint_names.index("left_hip")] = np.nan
    clip = KeypointClip(src, list(lay.joint_names), 30.0, layout=lay.name)
    kp, mask = to_canonical(clip)
    assert mask[0, KEYPOINTS.index("pelvis")] and not mask[1, KEYPOINTS.index("pelvis")]
    assert not mask[1, KEYPOINTS.index("thigh_l")] and mask[1, KEYPOINTS.index("thigh_r")]


def test_min_confidence():
    lay = LAYOUTS["coco17"]
    src = synth(lay)[None]
    conf = np.ones((1, 17))
    conf[0, lay.joint_names.index("nose")] = 0.1
    clip = KeypointClip(src, list(lay.joint_names), 30.0, confidence=conf, layout=lay.name)
    assert to_canonical(clip)[1][0, KEYPOINTS.index("nose")]
    assert not to_canonical(clip, min_confidence=0.5)[1][0, KEYPOINTS.index("nose")]


def test_user_mapping_file_and_dict(tmp_path):
    mapping = {"Root": "pelvis", "Chest": "spine3", "L_Wrist": "hand_l", "R_Wrist": "hand_r"}
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(mapping))
    lay = load_mapping(f)
    assert lay.name == "mine"
    names = ["Root", "Chest", "L_Wrist", "R_Wrist", "Tail"]
    src = np.array([K["pelvis"], K["spine3"], K["hand_l"], K["hand_r"], [0, 1, 1]])[None]
    clip = KeypointClip(src, names, 24.0)
    for lay_arg in (mapping, str(f), lay):
        kp, mask = to_canonical(clip, lay_arg)
        assert mask[0].sum() == 4
        np.testing.assert_allclose(kp[0, KEYPOINTS.index("hand_r")], K["hand_r"])
    full = {"name": "withderived", "to_canonical": {"Root": "pelvis"},
            "derived": {"spine1": [["Root", 0.5], ["Chest", 0.5]]}}
    kp, mask = to_canonical(clip, full)
    np.testing.assert_allclose(kp[0, KEYPOINTS.index("spine1")], 0.5 * (K["pelvis"] + K["spine3"]))


def test_bad_mappings(tmp_path):
    with pytest.raises(ValueError, match="unknown canonical keypoints"):
        load_mapping({"a": "elbow_left"})
    with pytest.raises(ValueError, match="sum to"):
        load_mapping({"to_canonical": {}, "derived": {"pelvis": [["a", 0.3]]}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_mapping(bad)
    with pytest.raises(KeyError, match="known"):
        get_layout("nonsense")


def test_six_canonical_effectors_are_the_canonical_layout():
    """A file of six effectors under the tool's own names is the canonical layout, exactly: no "detected as"
    warning naming another layout that happens to share the names (the UE mannequin's pelvis, hand_l...)."""
    got, score = detect_layout(["pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r"])
    assert got == "canonical" and score == pytest.approx(1.0)
