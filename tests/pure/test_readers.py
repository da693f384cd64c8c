"""Keypoint file readers: formats, units, up axes, gaps, resampling and bad input."""

import json

import numpy as np
import pytest

from _pkg import pkg

pkg()
from neural_ik.model.skeleton import CANONICAL, KEYPOINTS  # noqa: E402
from neural_ik.readers import (  # noqa: E402
    LAYOUTS,
    KeypointClip,
    KeypointReadError,
    convert_up_axis,
    fill_gaps,
    read_keypoints,
    resample,
    to_canonical,
)

REST = CANONICAL.rest_keypoints()


def motion(T=12, layout="canonical"):
    """A walking-ish clip (T, J, 3), metres, Z up, of the named layout's direct points (others at the nose)."""
    lay = LAYOUTS[layout]
    idx = [KEYPOINTS.index(lay.to_canonical.get(n, "nose")) for n in lay.joint_names]
    t = np.arange(T)[:, None]
    yaw = 0.02 * t[:, 0]
    c, s = np.cos(yaw), np.sin(yaw)
    R = np.zeros((T, 3, 3))
    R[:, 0, 0], R[:, 0, 1], R[:, 1, 0], R[:, 1, 1], R[:, 2, 2] = c, -s, s, c, 1
    pts = np.einsum("tij,kj->tki", R, REST[idx])
    pts[..., 1] -= 0.03 * t  # walk towards -Y
    return pts


def zup_to_yup(p):
    """Inverse of the Y-up -> Z-up conversion: (X, Y, Z) -> (x, y, z) = (X, Z, -Y)."""
    return np.stack([p[..., 0], p[..., 2], -p[..., 1]], -1)


def zup_to_ydown(p):
    """Inverse of the y-down -> Z-up conversion: (X, Y, Z) -> (X, -Z, Y)."""
    return np.stack([p[..., 0], -p[..., 2], p[..., 1]], -1)


def write_npz(path, pos, names, **extra):
    np.savez(path, positions=pos, joint_names=np.array(names), **extra)
    return path


NAMES = list(KEYPOINTS)


# ---------------------------------------------------------------------------
# axes


def test_up_axis_conversions_are_rotations():
    e = np.eye(3)
    for axis in ("Z", "Y", "-Y", "-Z"):
        M = convert_up_axis(e, axis)  # rows: images of x, y, z
        assert np.linalg.det(M) == pytest.approx(1.0)
    np.testing.assert_allclose(convert_up_axis([1.0, 2.0, 3.0], "Y"), [1, -3, 2])
    np.testing.assert_allclose(convert_up_axis([1.0, 2.0, 3.0], "-Y"), [1, 3, -2])
    # a Y-up figure facing +Z faces -Y in Blender, its left stays +X
    np.testing.assert_allclose(convert_up_axis([[0, 1, 0], [0, 0, 1], [1, 0, 0]], "Y"),
                               [[0, 0, 1], [0, -1, 0], [1, 0, 0]], atol=0)


# ---------------------------------------------------------------------------
# npz / npy


def test_npz_roundtrip_cm_yup(tmp_path):
    pos = motion()
    f = write_npz(tmp_path / "a.npz", zup_to_yup(pos) * 100.0, NAMES, fps=24.0, units="cm", up_axis="Y")
    clip = read_keypoints(f, ground=False)
    assert isinstance(clip, KeypointClip)
    assert clip.fps == 24.0 and clip.units == "cm" and clip.up_axis == "Y" and clip.layout == "canonical"
    np.testing.assert_allclose(clip.positions, pos, atol=1e-9)
    kp, mask = to_canonical(clip)
    assert mask.all()
    np.testing.assert_allclose(kp, pos, atol=1e-9)
    assert clip.source == str(f) and clip.warnings == []


def test_npz_defaults_and_overrides(tmp_path):
    pos = motion(5)
    conf = np.full((5, 32), 0.9)
    f = write_npz(tmp_path / "b.npz", pos * 1000, NAMES, fps=30, confidence=conf)
    with pytest.raises(KeypointReadError, match=r"b\.npz.*absurd scale.*e\+03 m tall in m.*--units mm"):
        read_keypoints(f, units="m")
    guessed = read_keypoints(f)  # the file says nothing: guessed from the size
    assert guessed.units == "mm" and any("units not in the file: millimetres" in w for w in guessed.warnings)
    clip = read_keypoints(f, units="mm", fps=60, ground=False)
    np.testing.assert_allclose(clip.positions, pos)
    assert clip.fps == 60 and clip.confidence.shape == (5, 32)


def test_npz_without_up_axis_detects_it_from_the_motion(tmp_path):
    pos = motion()
    f = write_npz(tmp_path / "y.npz", zup_to_yup(pos), NAMES, fps=24.0, units="m")   # Y up, not said
    clip = read_keypoints(f, ground=False)
    assert clip.up_axis == "Y" and any("up axis Y detected from the motion" in w for w in clip.warnings)
    np.testing.assert_allclose(clip.positions, pos, atol=1e-9)                      # standing, not lying
    z = write_npz(tmp_path / "z.npz", pos, NAMES, fps=24.0, units="m")
    assert read_keypoints(z, ground=False).up_axis == "Z"


def test_npz_mediapipe_names(tmp_path):
    lay = LAYOUTS["mediapipe_pose"]
    src = np.zeros((4, 33, 3))
    direct = [n for n in lay.joint_names if n in lay.to_canonical]
    for n in direct:
        src[:, lay.joint_names.index(n)] = REST[KEYPOINTS.index(lay.to_canonical[n])]
    others = [n for n in lay.joint_names if n not in lay.to_canonical]
    for n in others:
        src[:, lay.joint_names.index(n)] = REST[KEYPOINTS.index("head")]
    f = write_npz(tmp_path / "mp.npz", src, list(lay.joint_names), fps=30)
    clip = read_keypoints(f, ground=False)
    assert clip.layout == "mediapipe_pose"
    kp, mask = to_canonical(clip)
    i = KEYPOINTS.index("hand_l")
    np.testing.assert_allclose(kp[:, i], REST[None, i].repeat(4, 0))
    assert not mask[:, KEYPOINTS.index("spine2")].any()


def test_npy_nameless_or_layout(tmp_path):
    f = tmp_path / "c.npy"
    np.save(f, motion(3, "coco17"))
    assert read_keypoints(f).layout == "coco17"  # recognised from the count and the geometry
    g = tmp_path / "d.npy"
    np.save(g, motion(3)[:, :12])
    with pytest.raises(KeypointReadError, match=r"d\.npy.*12 points per frame.*--layout"):
        read_keypoints(g)
    clip = read_keypoints(f, layout="coco17")
    assert clip.joint_names == list(LAYOUTS["coco17"].joint_names)
    assert any("frame rate" in w for w in clip.warnings)
    with pytest.raises(KeypointReadError, match="17 joints per frame but layout 'mediapipe_pose' has 33"):
        read_keypoints(f, layout="mediapipe_pose")


@pytest.mark.parametrize("case, match", [
    ("garbage", "not a readable .npz"),
    ("truncated", "not a readable .npz"),
    ("empty", "empty file"),
    ("missing", "missing array.*joint_names"),
    ("shape", r"shape \(frames, joints, 3\)"),
    ("names", "2 joint names for 32"),
    ("dup", "duplicate joint names: pelvis"),
    ("inf", r"inf.*frame 1"),
    ("allnan", "every point"),
    ("object", "not a readable .npz"),
    ("unknown", "unknown joint names.*--layout"),
    ("huge", "absurd scale.*cm"),
    ("tiny", "absurd scale"),
    ("strings", "must be numbers"),
])
def test_npz_bad_input(tmp_path, case, match):
    f = tmp_path / f"bad_{case}.npz"
    pos = motion(3)
    if case == "garbage":
        f.write_bytes(np.random.default_rng(0).bytes(4000))
    elif case == "truncated":
        write_npz(f, pos, NAMES, fps=30)
        f.write_bytes(f.read_bytes()[:300])
    elif case == "empty":
        f.write_bytes(b"")
    elif case == "missing":
        np.savez(f, positions=pos, fps=30)
    elif case == "shape":
        write_npz(f, pos[..., :2], NAMES, fps=30)
    elif case == "names":
        write_npz(f, pos, NAMES[:2], fps=30)
    elif case == "dup":
        write_npz(f, pos, ["pelvis"] + NAMES[:-1], fps=30)
    elif case == "inf":
        pos[1, 4, 2] = np.inf
        write_npz(f, pos, NAMES, fps=30)
    elif case == "allnan":
        write_npz(f, pos * np.nan, NAMES, fps=30)
    elif case == "object":
        with open(f, "wb") as fh:
            np.savez(fh, positions=np.array([{"a": 1}], dtype=object), joint_names=np.array(NAMES), fps=30)
    elif case == "unknown":
        write_npz(f, pos, [f"marker{i}" for i in range(32)], fps=30)
    elif case == "huge":
        write_npz(f, pos * 100, NAMES, fps=30, units="m")  # a body 175 m tall
    elif case == "tiny":
        write_npz(f, pos * 0.01, NAMES, fps=30, units="m")
    elif case == "strings":
        write_npz(f, np.full((3, 32, 3), "a"), NAMES, fps=30)
    with pytest.raises(KeypointReadError, match=match) as info:
        read_keypoints(f)
    assert str(f) in str(info.value)


def test_single_frame_is_a_pose(tmp_path):
    f = write_npz(tmp_path / "one.npz", REST[None], NAMES, fps=30)
    clip = read_keypoints(f)
    assert clip.num_frames == 1
    assert any("single frame" in w for w in clip.warnings)


def test_unknown_extension(tmp_path):
    f = tmp_path / "a.fbx"
    f.write_bytes(b"Kaydara FBX Binary")
    with pytest.raises(KeypointReadError, match="FBX goes through Blender"):
        read_keypoints(f)
    with pytest.raises(KeypointReadError, match="no such file"):
        read_keypoints(tmp_path / "nothere.csv")


# ---------------------------------------------------------------------------
# json


def mediapipe_frames(T=6):
    lay = LAYOUTS["mediapipe_pose"]
    pos = np.full((T, 33, 3), np.nan)
    src = motion(T)
    for j, n in enumerate(lay.joint_names):
        if n in lay.to_canonical:
            pos[:, j] = src[:, KEYPOINTS.index(lay.to_canonical[n])]
    # ears 6 cm above the head joint, knuckles half way to the finger tips
    for side, s, sign in (("left", "l", 1), ("right", "r", -1)):
        head = src[:, KEYPOINTS.index("head")]
        pos[:, lay.joint_names.index(f"{side}_ear")] = head + [sign * 0.07, 0, 0.06]
        hand, tip = src[:, KEYPOINTS.index(f"hand_{s}")], src[:, KEYPOINTS.index(f"hand_tip_{s}")]
        pos[:, lay.joint_names.index(f"{side}_index")] = 0.5 * (hand + tip)
        pos[:, lay.joint_names.index(f"{side}_pinky")] = 0.5 * (hand + tip)
    for j in range(33):
        if np.isnan(pos[0, j, 0]):
            pos[:, j] = src[:, KEYPOINTS.index("nose")]
    # world landmarks: origin at the hips, y down
    pos -= 0.5 * (pos[:, [23], :] + pos[:, [24], :])
    return zup_to_ydown(pos), src


def test_json_mediapipe_bare_list(tmp_path):
    mp, src = mediapipe_frames()
    frames = [[{"x": float(p[0]), "y": float(p[1]), "z": float(p[2]), "visibility": 0.8} for p in fr] for fr in mp]
    f = tmp_path / "mp.json"
    f.write_text(json.dumps(frames))
    clip = read_keypoints(f, ground=False)
    assert clip.layout == "mediapipe_pose" and clip.up_axis == "-Y" and clip.units == "m"
    assert clip.confidence.shape == (6, 33) and np.allclose(clip.confidence, 0.8)
    kp, mask = to_canonical(clip)
    hips = 0.5 * (src[:, [KEYPOINTS.index("thigh_l")]] + src[:, [KEYPOINTS.index("thigh_r")]])
    want = src - hips
    for name in ("pelvis", "neck", "head", "hand_l", "hand_tip_r", "foot_l", "nose"):
        k = KEYPOINTS.index(name)
        assert mask[:, k].all()
        np.testing.assert_allclose(kp[:, k], want[:, k], atol=1e-6, err_msg=name)


def test_json_object_named_with_gaps(tmp_path):
    mp, _ = mediapipe_frames(10)
    names = LAYOUTS["mediapipe_pose"].joint_names
    frames = []
    for t, fr in enumerate(mp):
        if t in (4, 5):
            frames.append({"landmarks": []})  # no detection
            continue
        frames.append({"landmarks": [{"name": n, "x": p[0], "y": p[1], "z": p[2], "visibility": 1.0}
                                     for n, p in zip(names, fr.tolist())]})
    frames[0]["landmarks"][15]["x"] = None  # left_wrist missing in the first frame
    f = tmp_path / "obj.json"
    f.write_text(json.dumps({"fps": 25, "up_axis": "-Y", "frames": frames}))
    clip = read_keypoints(f)
    assert clip.fps == 25
    assert np.isfinite(clip.positions[4:6]).all()  # 2-frame gap filled
    assert np.isnan(clip.positions[0, 15]).all()  # leading gap stays
    assert any("filled 1 gap of up to 2 frames in nose" in w for w in clip.warnings)
    assert any("left_wrist: 1 of 10 frames missing" in w for w in clip.warnings)
    clip0 = read_keypoints(f, max_gap=0)
    assert np.isnan(clip0.positions[4:6]).all()


@pytest.mark.parametrize("text, match", [
    ('[[{"x": 1, "y": 2, "z": 3}]', "truncated JSON at line 1"),
    ("{}", "'frames'"),
    ("[]", "no frames"),
    ('[[{"x": "a", "y": 0, "z": 0}]]', "frame 0, landmark 0"),
    ('[[[0, 0, 0], [1, 1, 1]]]', "2 points per frame match no nameless layout.*--layout"),
])
def test_json_bad(tmp_path, text, match):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(KeypointReadError, match=match):
        read_keypoints(f)


def test_json_binary_garbage(tmp_path):
    f = tmp_path / "g.json"
    f.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(KeypointReadError, match=r"g\.json"):
        read_keypoints(f)


# ---------------------------------------------------------------------------
# csv


def write_csv(path, pos, names, time=None, vis=None, fmt="{:.4f}", prefix=""):
    cols = (["frame"] if time is None else ["frame", "timestamp"])
    for n in names:
        cols += [f"{prefix}{n}_x", f"{prefix}{n}_y", f"{prefix}{n}_z"] + ([f"{prefix}{n}_visibility"] if vis is not None else [])
    lines = [",".join(cols)]
    for t in range(pos.shape[0]):
        row = [str(t)] + ([] if time is None else [repr(float(time[t]))])
        for j in range(pos.shape[1]):
            row += ["" if np.isnan(v) else fmt.format(v) for v in pos[t, j]]
            if vis is not None:
                row.append(f"{vis:.2f}")
        lines.append(",".join(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csv_freemocap_mm(tmp_path):
    lay = LAYOUTS["coco17"]
    pos = motion(20, "coco17")
    f = write_csv(tmp_path / "fmc.csv", pos * 1000.0, lay.joint_names, time=np.arange(20) / 60.0)
    clip = read_keypoints(f, ground=False)
    assert clip.layout == "coco17" and clip.units == "mm" and clip.up_axis == "Z" and clip.fps == 60
    np.testing.assert_allclose(clip.positions, pos, atol=1e-6)
    assert any("units not in the file: millimetres" in w for w in clip.warnings)


def test_csv_numbered_mediapipe_columns_and_gaps(tmp_path):
    mp, _ = mediapipe_frames(8)
    mp = mp * 1000
    mp[3, 0] = np.nan  # empty cells: a one-frame gap in the nose
    f = write_csv(tmp_path / "num.csv", mp, [str(i) for i in range(33)], vis=0.5, prefix="mediapipe_body_")
    clip = read_keypoints(f, fps=30)
    assert clip.layout == "mediapipe_pose" and clip.joint_names[0] == "nose"
    assert clip.up_axis == "-Y"  # detected from the pose
    np.testing.assert_allclose(clip.positions[3, 0], 0.5 * (clip.positions[2, 0] + clip.positions[4, 0]))
    assert np.allclose(clip.confidence, 0.5)


def test_csv_ms_timestamps_and_overrides(tmp_path):
    pos = motion(10)
    f = write_csv(tmp_path / "ms.csv", zup_to_yup(pos), KEYPOINTS, time=np.arange(10) * 40.0)  # ms
    clip = read_keypoints(f, up_axis="Y", units="m", ground=False)
    assert clip.fps == 25
    np.testing.assert_allclose(clip.positions, pos, atol=1e-4)


@pytest.mark.parametrize("text, match", [
    ("", "empty file"),
    ("a,b,c\n1,2,3\n", r"no <name>_x"),
    ("nose_x,nose_y\n1,2\n", "missing x, y or z"),
    ("1,2,3\n4,5,6\n", "no header row"),
    ("nose_x,nose_y,nose_z\n", "no data rows"),
    ("nose_x,nose_y,nose_z,nose_x\n1,2,3,4\n", "duplicate column"),
])
def test_csv_bad_header(tmp_path, text, match):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(KeypointReadError, match=match):
        read_keypoints(f)


def test_csv_truncated_and_garbage(tmp_path):
    f = write_csv(tmp_path / "t.csv", motion(5, "coco17") * 1000, LAYOUTS["coco17"].joint_names)
    text = f.read_text()
    f.write_text(text[: len(text) - 40])
    with pytest.raises(KeypointReadError, match=r"t\.csv.*line 6:.*truncated"):
        read_keypoints(f)
    lines = text.splitlines()
    lines[3] = lines[3].replace("0", "x", 1)
    f.write_text("\n".join(lines))
    with pytest.raises(KeypointReadError, match="line 4:.*not a number"):
        read_keypoints(f)
    f.write_bytes(b"\x00\x01\x02garbage" * 100)
    with pytest.raises(KeypointReadError, match="binary"):
        read_keypoints(f)


def test_csv_inf_and_unknown_names(tmp_path):
    f = write_csv(tmp_path / "i.csv", motion(3, "coco17"), LAYOUTS["coco17"].joint_names)
    lines = f.read_text().splitlines()
    cells = lines[2].split(",")
    cells[5] = "inf"
    lines[2] = ",".join(cells)
    f.write_text("\n".join(lines))
    with pytest.raises(KeypointReadError, match="inf"):
        read_keypoints(f)
    g = write_csv(tmp_path / "u.csv", motion(3, "coco17"), [f"m{i}" for i in range(17)])
    by_order = read_keypoints(g, layout="coco17")  # unnamed points taken in the layout's order
    assert by_order.joint_names[0] == "nose" and any("in its order" in w for w in by_order.warnings)
    with pytest.raises(KeypointReadError, match="maps none"):
        read_keypoints(g, layout="mediapipe_pose")
    with pytest.raises(KeypointReadError, match=r"u\.csv: unknown joint names \(m0, m1"):
        read_keypoints(g)
    assert read_keypoints(g, layout={f"m{i}": LAYOUTS["coco17"].to_canonical[n]
                                     for i, n in enumerate(LAYOUTS["coco17"].joint_names)
                                     if n in LAYOUTS["coco17"].to_canonical}).layout == "custom"


# ---------------------------------------------------------------------------
# trc


def write_trc(path, pos, names, rate=100.0, units="mm"):
    T, J = pos.shape[:2]
    lines = [
        f"PathFileType\t4\t(X/Y/Z)\t{path.name}",
        "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
        f"{rate:.2f}\t{rate:.2f}\t{T}\t{J}\t{units}\t{rate:.2f}\t1\t{T}",
        "Frame#\tTime\t" + "\t\t\t".join(names) + "\t\t",
        "\t\t" + "\t".join(f"X{i + 1}\tY{i + 1}\tZ{i + 1}" for i in range(J)),
        "",
    ]
    for t in range(T):
        cells = [str(t + 1), f"{t / rate:.4f}"]
        for j in range(J):
            cells += ["" if np.isnan(v) else f"{v:.5f}" for v in pos[t, j]]
        lines.append("\t".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trc_yup_mm_with_gaps(tmp_path):
    names = list(LAYOUTS["openpose_body25"].joint_names)
    lay = LAYOUTS["openpose_body25"]
    src = motion(15)
    pos = np.zeros((15, 25, 3))
    for j, n in enumerate(names):
        if n in lay.to_canonical:
            pos[:, j] = src[:, KEYPOINTS.index(lay.to_canonical[n])]
        else:
            pos[:, j] = src[:, KEYPOINTS.index("neck")]
    raw = zup_to_yup(pos) * 1000
    raw[7:9, 3] = np.nan   # RElbow: 2-frame gap
    raw[:, 24] = np.nan    # RHeel never seen
    f = write_trc(tmp_path / "op.trc", raw, names, rate=50)
    clip = read_keypoints(f, ground=False)
    assert clip.fps == 50 and clip.units == "mm" and clip.up_axis == "Y" and clip.layout == "openpose_body25"
    ok = np.ones(25, bool)
    ok[24] = False
    np.testing.assert_allclose(clip.positions[:, ok], pos[:, ok], atol=1e-3)  # gap filled linearly
    np.testing.assert_allclose(clip.positions[:7, ok], pos[:7, ok], atol=1e-6)
    assert np.isnan(clip.positions[:, 24]).all()
    assert any("filled 1 gap of up to 2 frames in RElbow" in w for w in clip.warnings)
    kp, mask = to_canonical(clip)
    assert not mask[:, KEYPOINTS.index("heel_r")].any() and mask[:, KEYPOINTS.index("heel_l")].all()


def test_trc_bad(tmp_path):
    f = tmp_path / "x.trc"
    f.write_text("hello\nworld\n")
    with pytest.raises(KeypointReadError, match="truncated header"):
        read_keypoints(f)
    f.write_text("something else\n1\n2\n3\n4\n5\n")
    with pytest.raises(KeypointReadError, match="not a TRC"):
        read_keypoints(f)
    write_trc(f, motion(3) * 1000, NAMES)
    lines = f.read_text().splitlines()
    lines[-1] = lines[-1] + "\t1\t2"
    f.write_text("\n".join(lines))
    with pytest.raises(KeypointReadError, match="expected 98"):
        read_keypoints(f)


# ---------------------------------------------------------------------------
# bvh


#: A thumb chain's two joint offsets and its End Site (canonical axes, metres, the left hand's; x mirrored
#: for the right): the thumb point is their sum from the wrist.
THUMB_CHAIN = ((0.03, -0.03, -0.01), (0.02, -0.02, 0.0), (0.01, -0.01, 0.0))


def write_mixamo_bvh(path, frames=3, scale=100.0, thumbs=False):
    """A Mixamo-named BVH (Y up, cm) with the canonical proportions, in rest pose, root moving.

    ``thumbs``: each hand gets a two-joint thumb chain (:data:`THUMB_CHAIN`) ending in an End Site.
    """
    from neural_ik.model.skeleton import JOINTS, PARENTS, REST_OFFSETS
    mix = {v: k for k, v in LAYOUTS["mixamo"].to_canonical.items() if k in LAYOUTS["mixamo"].joint_names}
    children = {j: [c for c, p in enumerate(PARENTS) if p == j] for j in range(len(JOINTS))}

    def off(v):
        y = zup_to_yup(np.asarray(v)) * scale
        return " ".join(f"{c:.4f}" for c in y)

    out = ["HIERARCHY"]

    def emit(j, depth):
        ind = "  " * depth
        kind = "ROOT" if PARENTS[j] < 0 else "JOINT"
        out.append(f"{ind}{kind} {mix[JOINTS[j]]}")
        out.append(f"{ind}{{")
        out.append(f"{ind}  OFFSET {off(REST_OFFSETS[j])}")
        ch = "6 Xposition Yposition Zposition Zrotation Xrotation Yrotation" if PARENTS[j] < 0 else "3 Zrotation Xrotation Yrotation"
        out.append(f"{ind}  CHANNELS {ch}")
        for c in children[j]:
            emit(c, depth + 1)
        if JOINTS[j] == "head":
            out.append(f"{ind}  End Site")
            out.append(f"{ind}  {{")
            out.append(f"{ind}    OFFSET {off([0, 0, 0.18])}")
            out.append(f"{ind}  }}")
        if thumbs and JOINTS[j] in ("hand_l", "hand_r"):
            sx = 1.0 if JOINTS[j] == "hand_l" else -1.0
            side = "Left" if sx > 0 else "Right"
            (a, b, e) = (np.array(v) * [sx, 1.0, 1.0] for v in THUMB_CHAIN)
            out.extend([f"{ind}  JOINT {side}HandThumb1", f"{ind}  {{", f"{ind}    OFFSET {off(a)}",
                    f"{ind}    CHANNELS 3 Zrotation Xrotation Yrotation", f"{ind}    JOINT {side}HandThumb2",
                    f"{ind}    {{", f"{ind}      OFFSET {off(b)}", f"{ind}      CHANNELS 3 Zrotation Xrotation Yrotation",
                    f"{ind}      End Site", f"{ind}      {{", f"{ind}        OFFSET {off(e)}", f"{ind}      }}",
                    f"{ind}    }}", f"{ind}  }}"])
        out.append(f"{ind}}}")

    emit(0, 0)
    nch = 6 + 3 * (len(JOINTS) - 1) + (12 if thumbs else 0)
    out += ["MOTION", f"Frames: {frames}", "Frame Time: 0.0333333"]
    for t in range(frames):
        root = zup_to_yup(REST_OFFSETS[0] + [0, -0.1 * t, 0]) * scale
        out.append(" ".join(f"{v:.4f}" for v in list(root) + [0.0] * (nch - 3)))
    path.write_text("\n".join(out) + "\n")
    return path


def test_bvh_mixamo_cm(tmp_path):
    f = write_mixamo_bvh(tmp_path / "mix.bvh")
    clip = read_keypoints(f, ground=False)
    # a skeleton: mapped by the hierarchy-aware bone mapping, not a name table
    assert clip.layout == "skeleton" and clip.up_axis == "Y" and clip.units == "cm"
    assert clip.source_rig is not None and clip.source_rig.mapping.entries["hand_l"] == "LeftHand"
    assert clip.fps == pytest.approx(30.0, rel=1e-4)
    assert "Head_End" in clip.joint_names
    kp, mask = to_canonical(clip)
    for k in ("pelvis", "spine3", "hand_l", "toe_r", "head_top"):
        i = KEYPOINTS.index(k)
        assert mask[:, i].all()
        np.testing.assert_allclose(kp[2, i], REST[i] + [0, -0.2, 0], atol=1e-5, err_msg=k)
    assert not mask[:, KEYPOINTS.index("nose")].any()
    assert not mask[:, KEYPOINTS.index("thumb_l")].any()      # (no thumb joints: no thumb point)


def test_bvh_thumb_chain_gives_the_thumb(tmp_path):
    """A hand's one thumb chain gives the canonical thumb point: the End Site at its tip (what shows how
    the hand is turned about itself)."""
    clip = read_keypoints(write_mixamo_bvh(tmp_path / "mix.bvh", thumbs=True), ground=False)
    kp, mask = to_canonical(clip)
    tip = np.sum(THUMB_CHAIN, axis=0)
    for s, sx in (("l", 1.0), ("r", -1.0)):
        i, h = KEYPOINTS.index(f"thumb_{s}"), KEYPOINTS.index(f"hand_{s}")
        assert mask[:, i].all()
        np.testing.assert_allclose(kp[2, i] - kp[2, h], tip * [sx, 1.0, 1.0], atol=1e-5)
    assert clip.source_rig.mapping.entries["hand_l"] == "LeftHand"     # (the thumbs map no joint)


def test_bvh_metres_and_bad(tmp_path):
    f = write_mixamo_bvh(tmp_path / "m.bvh", scale=1.0)
    assert read_keypoints(f).units == "m"
    text = f.read_text()
    f.write_text(text[: text.index("MOTION") + 30])
    with pytest.raises(KeypointReadError, match=r"m\.bvh.*bad BVH"):
        read_keypoints(f)
    f.write_bytes(b"\xff\xfe\x00garbage" * 50)
    with pytest.raises(KeypointReadError, match=r"m\.bvh"):
        read_keypoints(f)


# ---------------------------------------------------------------------------
# gaps and resampling


def test_fill_gaps():
    T = 30
    p = np.zeros((T, 2, 3))
    p[:, 0, 0] = np.arange(T)
    p[:, 1, 0] = np.arange(T)
    p[5:8, 0] = np.nan       # 3 frames: filled
    p[10:20, 0] = np.nan     # 10 frames: kept missing
    p[:2, 1] = np.nan        # leading: kept missing
    p[25, 1, 2] = np.nan     # one coordinate missing -> the point is missing -> filled
    q, filled, msgs = fill_gaps(p, max_gap=5, joint_names=["a", "b"])
    np.testing.assert_allclose(q[5:8, 0, 0], [5, 6, 7])
    assert np.isnan(q[10:20, 0]).all() and np.isnan(q[:2, 1]).all()
    np.testing.assert_allclose(q[25, 1], [25, 0, 0])
    assert filled.sum() == 4
    assert "filled 1 gap of up to 3 frames in a" in msgs
    assert "a: 10 of 30 frames missing (masked)" in msgs
    assert "b: 2 of 30 frames missing (masked)" in msgs


def test_resample():
    T = 11
    p = np.zeros((T, 1, 3))
    p[:, 0, 0] = np.arange(T) * 0.1
    p[6, 0] = np.nan
    clip = KeypointClip(p, ["a"], 10.0, confidence=np.ones((T, 1)), layout=None)
    r = resample(clip, 20.0)
    assert r.num_frames == 21 and r.fps == 20.0
    assert r.duration == pytest.approx(clip.duration)
    np.testing.assert_allclose(r.positions[:11, 0, 0], np.arange(11) * 0.05)
    assert np.isnan(r.positions[11:14, 0]).all() and np.isfinite(r.positions[14, 0]).all()
    np.testing.assert_allclose(r.positions[-1, 0, 0], 1.0)
    r2 = resample(clip, 4.0)  # down: 1 s of data -> frames at 0, .25, .5, .75, 1.0
    assert r2.num_frames == 5
    np.testing.assert_allclose(r2.positions[:, 0, 0], [0, 0.25, 0.5, 0.75, 1.0])
    assert any("resampled" in w for w in r2.warnings)
    with pytest.raises(ValueError):
        resample(clip, 0)


def test_csv_empty_cells_at_line_ends(tmp_path):
    pos = motion(6, "coco17")
    pos[2, -1] = np.nan   # last joint: empty cells at the end of the line
    pos[3, :2] = np.nan   # runs of empty cells
    f = tmp_path / "e.csv"
    names = LAYOUTS["coco17"].joint_names
    lines = [",".join(f"{n}_{c}" for n in names for c in "xyz")]
    for t in range(6):
        lines.append(",".join("" if np.isnan(v) else f"{v:.6f}" for v in pos[t].ravel()))
    f.write_text("\r\n".join(lines) + "\r\n")
    clip = read_keypoints(f, units="m", up_axis="Z", max_gap=0)
    np.testing.assert_array_equal(np.isnan(clip.positions), np.isnan(pos))
    np.testing.assert_allclose(clip.positions[0], pos[0], atol=1e-6)


def test_bvh_frame_time_rounded_to_whole_rate(tmp_path):
    """``Frame Time: 0.016667`` reads as 60 fps, not 59.9988."""
    from neural_ik.model.bvh import write_bvh
    from neural_ik.readers import read_keypoints

    names = ["Hips", "Spine", "Head"]
    path = tmp_path / "rate.bvh"
    motion = np.zeros((3, 6 + 3 + 3))
    motion[:, 1] = 100.0
    write_bvh(path, names, [-1, 0, 1], np.array([[0, 100.0, 0], [0, 20.0, 0], [0, 50.0, 0]]),
              [["Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation"],
               ["Zrotation", "Xrotation", "Yrotation"], ["Zrotation", "Xrotation", "Yrotation"]],
              motion, 0.016667)
    clip = read_keypoints(path, layout={"Hips": "pelvis", "Spine": "spine2", "Head": "head"}, units="cm")
    assert clip.fps == 60.0


def test_frame_extents_are_numpys_nan_ignoring_bounding_boxes():
    """frame_extents (the readers' body-size checks, the bake's empty-body check) gives each frame's
    bounding-box sides as nanmax - nanmin over the points would: missing points left out, NaN for a
    frame without any, inf where the values overflow."""
    import warnings

    from neural_ik.readers.measure import frame_extents

    rng = np.random.default_rng(0)
    p = rng.normal(size=(400, 27, 3)) * 100.0
    p[rng.random(p.shape[:2]) < 0.3] = np.nan
    p[10:20] = np.nan
    p[5, 3, 1], p[5, 4, 1] = 1e308, -1e308
    with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = np.nanmax(p, axis=1) - np.nanmin(p, axis=1)
        got = frame_extents(p)
    np.testing.assert_array_equal(got, ref)
    assert np.isnan(got[10:20]).all() and np.isinf(got[5, 1])
    assert frame_extents(np.zeros((3, 0, 3))).shape == (3, 3)
    for a, b in ((5, 6), (0, 8), (9, 17), (10, 11)):   # a few frames (a dragged pose) take another path
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(frame_extents(p[a:b]), ref[a:b])


def test_a_child_is_no_unit_mistake(tmp_path):
    """A body 0.9 m tall (a small child, as foreign/fair1's five-year-old) reads with no units warning; an
    adult's clip in inches taken for centimetres (0.69 m) and a body 2.7 m tall still get one."""
    pos = motion(6)
    size = float(np.ptp(pos[..., 2]))
    for height, units, warned in ((0.9, "m", False), (1.75 / 2.54, "m", True), (2.7, "m", True)):
        f = write_npz(tmp_path / f"h{height:.2f}.npz", pos * (height / size), NAMES, fps=30, units=units)
        said = [w for w in read_keypoints(f).warnings if "check the units" in w]
        assert bool(said) == warned, (height, said)
