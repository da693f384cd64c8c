"""BVH reader / writer tests (synthetic files only)."""

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model.bvh import BVHError, read_bvh, write_bvh, frames_from_rotations  # noqa: E402

RNG = np.random.default_rng(0)


def _chain(tmp_path, order, frames=5, name="chain.bvh", **kw):
    names = ["root", "a", "b"]
    parents = [-1, 0, 1]
    offsets = [[1.0, 2.0, 3.0], [0.0, 10.0, 0.0], [5.0, 0.0, 0.0]]
    rot_ch = tuple(f"{ax}rotation" for ax in order)
    channels = [("Xposition", "Yposition", "Zposition") + rot_ch, rot_ch, rot_ch]
    motion = RNG.uniform(-80, 80, (frames, 12))
    path = tmp_path / name
    write_bvh(path, names, parents, offsets, channels, motion, frame_time=1 / 60, **kw)
    return path, motion


@pytest.mark.parametrize("order", ["".join(p) for p in itertools.permutations("XYZ")])
def test_channel_orders_match_scipy(tmp_path, order):
    path, motion = _chain(tmp_path, order)
    d = read_bvh(path)
    assert d.names == ["root", "a", "b"]
    assert d.num_frames == 5 and abs(d.fps - 60) < 1e-3
    for j, col in enumerate([3, 6, 9]):
        ref = Rotation.from_euler(order, motion[:, col:col + 3], degrees=True).as_matrix()
        np.testing.assert_allclose(d.rotations[:, j], ref, atol=1e-5)
    np.testing.assert_allclose(d.translations[:, 0], motion[:, :3], atol=1e-5)  # replace mode


def test_world_positions_and_end_sites(tmp_path):
    path, motion = _chain(tmp_path, "ZXY", end_sites=[(2, [0.0, 0.0, 4.0])])
    d = read_bvh(path)
    assert len(d.end_sites) == 1 and d.end_sites[0][0] == 2
    R = [Rotation.from_euler("ZXY", motion[:, c:c + 3], degrees=True).as_matrix() for c in (3, 6, 9)]
    w0 = R[0]
    w1 = w0 @ R[1]
    w2 = w1 @ R[2]
    p0 = motion[:, :3]
    p1 = p0 + np.einsum("tij,j->ti", w0, [0, 10, 0])
    p2 = p1 + np.einsum("tij,j->ti", w1, [5, 0, 0])
    e = p2 + np.einsum("tij,j->ti", w2, [0, 0, 4])
    np.testing.assert_allclose(d.world_positions(), np.stack([p0, p1, p2], 1), atol=1e-4)
    np.testing.assert_allclose(d.world_rotations()[:, 2], w2, atol=1e-5)
    np.testing.assert_allclose(d.end_site_positions()[:, 0], e, atol=1e-4)


def test_position_mode_add(tmp_path):
    path, motion = _chain(tmp_path, "ZYX")
    d = read_bvh(path, position_mode="add")
    np.testing.assert_allclose(d.translations[:, 0], motion[:, :3] + [1, 2, 3], atol=1e-5)


def test_six_channels_on_child_and_odd_order(tmp_path):
    names = ["hips", "arm"]
    channels = [("Zrotation", "Xposition", "Yrotation", "Yposition", "Xrotation", "Zposition"),
                ("Xposition", "Yposition", "Zposition", "Yrotation", "Zrotation", "Xrotation")]
    motion = RNG.uniform(-50, 50, (4, 12))
    path = tmp_path / "six.bvh"
    write_bvh(path, names, [-1, 0], [[0, 0, 0], [1, 1, 1]], channels, motion)
    d = read_bvh(path)
    assert d.channels == [tuple(c) for c in channels]
    np.testing.assert_allclose(d.translations[:, 0], motion[:, [1, 3, 5]], atol=1e-5)
    np.testing.assert_allclose(d.translations[:, 1], motion[:, 6:9], atol=1e-5)
    np.testing.assert_allclose(d.rotations[:, 0], Rotation.from_euler("ZYX", motion[:, [0, 2, 4]], degrees=True).as_matrix(), atol=1e-5)
    np.testing.assert_allclose(d.rotations[:, 1], Rotation.from_euler("YZX", motion[:, 9:12], degrees=True).as_matrix(), atol=1e-5)
    da = read_bvh(path, position_mode="add")
    np.testing.assert_allclose(da.translations[:, 1], motion[:, 6:9] + 1, atol=1e-5)


def test_crlf_tabs_blank_lines_and_two_roots(tmp_path):
    text = (
        "HIERARCHY\r\n\r\nROOT A\r\n{\r\n\tOFFSET\t0 0 0\r\n\tCHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation\r\n"
        "\tJOINT A1\r\n\t{\r\n\t\tOFFSET 0 1 0\r\n\t\tCHANNELS 3 Zrotation Yrotation Xrotation\r\n"
        "\t\tEnd Site\r\n\t\t{\r\n\t\t\tOFFSET 0 1 0\r\n\t\t}\r\n\t}\r\n}\r\n"
        "ROOT B\r\n{\r\n  OFFSET 5 0 0\r\n  CHANNELS 3 Xrotation Yrotation Zrotation\r\n"
        "  End Site\r\n  {\r\n    OFFSET 1 0 0\r\n  }\r\n}\r\n"
        "MOTION\r\nFrames:\t2\r\nFrame Time:\t0.04\r\n\r\n"
        "1 2 3 90 0 0 0 0 0 0 0 90\r\n"
        "\r\n"
        "4 5 6 0 0 0 0 0 0 0 0 0\r\n\r\n"
    )
    path = tmp_path / "crlf.bvh"
    path.write_bytes(text.encode())
    d = read_bvh(path)
    assert d.names == ["A", "A1", "B"]
    assert list(d.parents) == [-1, 0, -1]
    assert d.num_frames == 2 and abs(d.fps - 25) < 1e-9
    wp = d.world_positions()
    np.testing.assert_allclose(wp[0, 1], [1 - 1, 2, 3], atol=1e-9)  # Z rotation 90 deg: (0,1,0) -> (-1,0,0)
    np.testing.assert_allclose(wp[0, 2], [5, 0, 0], atol=1e-9)  # second root keeps its OFFSET
    ends = d.end_site_positions()
    np.testing.assert_allclose(ends[0, 1], [5, 1, 0], atol=1e-9)  # B rotated 90 about Z: (1,0,0) -> (0,1,0)


def _expect_error(tmp_path, text, line, fragment=None):
    path = tmp_path / "bad.bvh"
    path.write_text(text)
    with pytest.raises(BVHError) as exc:
        read_bvh(path)
    msg = str(exc.value)
    assert "bad.bvh" in msg and f"line {line}" in msg, msg
    assert isinstance(exc.value, ValueError)
    if fragment:
        assert fragment in msg, msg
    return msg


GOOD = """HIERARCHY
ROOT hips
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  JOINT leg
  {
    OFFSET 0 -1 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    End Site
    {
      OFFSET 0 -1 0
    }
  }
}
MOTION
Frames: 3
Frame Time: 0.0333333
0 1 2 3 4 5 6 7 8
0 1 2 3 4 5 6 7 8
0 1 2 3 4 5 6 7 8
"""


def test_good_reference_parses():
    d = read_bvh("mem.bvh", text=GOOD)
    assert d.num_frames == 3 and d.num_joints == 2


def test_truncated_motion(tmp_path):
    lines = GOOD.splitlines()
    text = "\n".join(lines[:-1]) + "\n0 1 2 3\n"
    _expect_error(tmp_path, text, 21, "truncated")


def test_missing_frame_line(tmp_path):
    text = "\n".join(GOOD.splitlines()[:-1]) + "\n"
    _expect_error(tmp_path, text, 20, "truncated")


def test_frames_mismatch_extra(tmp_path):
    text = GOOD + "0 1 2 3 4 5 6 7 8\n"
    _expect_error(tmp_path, text, 22, "Frames")


def test_garbage_token(tmp_path):
    text = GOOD.replace("0 1 2 3 4 5 6 7 8\n0 1 2 3 4 5 6 7 8\n0 1 2", "0 1 2 3 4 5 6 7 8\n0 1 2 3 x4 5 6 7 8\n0 1 2")
    _expect_error(tmp_path, text, 20, "x4")


def test_bad_channel_name(tmp_path):
    _expect_error(tmp_path, GOOD.replace("Zrotation Xrotation Yrotation\n    End", "Zrotation Xrot Yrotation\n    End"), 9, "Xrot")


def test_missing_brace(tmp_path):
    text = GOOD.replace("  }\n}\nMOTION", "  }\nMOTION")
    _expect_error(tmp_path, text, 15, "missing")


def test_bad_offset_number(tmp_path):
    _expect_error(tmp_path, GOOD.replace("OFFSET 0 -1 0\n    CHANNELS", "OFFSET 0 -1 abc\n    CHANNELS"), 8, "abc")


def test_bad_frames_header(tmp_path):
    _expect_error(tmp_path, GOOD.replace("Frames: 3", "Frames: three"), 17)


def test_roundtrip_rotations(tmp_path):
    R = Rotation.random(6 * 3, random_state=3).as_matrix().reshape(6, 3, 3, 3)
    channels = [("Xposition", "Yposition", "Zposition", "Yrotation", "Xrotation", "Zrotation"),
                ("Xrotation", "Zrotation", "Yrotation"), ("Zrotation", "Yrotation", "Xrotation")]
    offsets = np.array([[0, 0, 0], [0, 2, 0], [0, 2, 0.5]])
    trans = np.broadcast_to(offsets, (6, 3, 3)).copy()
    trans[:, 0] = RNG.normal(size=(6, 3))
    motion = frames_from_rotations(channels, R, trans, offsets)
    path = tmp_path / "rt.bvh"
    write_bvh(path, ["a", "b", "c"], [-1, 0, 1], offsets, channels, motion, newline="\r\n", indent="  ")
    d = read_bvh(path)
    np.testing.assert_allclose(d.rotations, R, atol=1e-5)
    np.testing.assert_allclose(d.translations, trans, atol=1e-5)


def test_speed_large_file(tmp_path):
    import time
    J, T = 100, 1400
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Yrotation", "Xrotation")] + [("Zrotation", "Yrotation", "Xrotation")] * (J - 1)
    parents = [-1] + list(range(J - 1))  # a chain: index order is depth-first
    motion = RNG.uniform(-90, 90, (T, 3 + 3 * J))
    path = tmp_path / "big.bvh"
    write_bvh(path, [f"j{i}" for i in range(J)], parents, RNG.normal(size=(J, 3)), channels, motion)
    t = time.perf_counter()
    d = read_bvh(path)
    d.world_positions()
    assert time.perf_counter() - t < 2.0
    assert d.rotations.shape == (T, J, 3, 3)
