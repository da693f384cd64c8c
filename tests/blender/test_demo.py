"""``./neural-ik demo``: a generated walk baked onto Rigify's meta-rig, with a rendered contact sheet."""

import json
import struct
import zlib

import numpy as np

from _pkg import pkg
from test_cli_bake import needs_weights, partial_files, weights_args


def _png(path):
    """(width, height, RGB array) of an 8-bit RGB PNG, decoded with zlib (all five filter types)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, color = ihdr[:4]
    assert (depth, color) == (8, 2)
    raw = zlib.decompress(idat)
    stride = width * 3
    img = np.zeros((height, stride), np.int32)
    prev = np.zeros(stride, np.int32)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) % 256
        else:
            cur = np.zeros(stride, np.int32)
            for x in range(stride):
                a = cur[x - 3] if x >= 3 else 0
                b, c = prev[x], (prev[x - 3] if x >= 3 else 0)
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + p) % 256
        img[y] = cur
        prev = cur
    return width, height, img.reshape(height, width, 3)


def test_png_writer_roundtrip(tmp_path):
    pkg()
    from neural_ik.blender_io.contact_sheet import read_png_size, write_png

    rgb = (np.arange(20 * 30 * 3) % 251).astype(np.uint8).reshape(20, 30, 3)
    write_png(str(tmp_path / "a.png"), rgb)
    assert read_png_size(str(tmp_path / "a.png")) == (30, 20)
    w, h, img = _png(tmp_path / "a.png")
    assert (w, h) == (30, 20) and np.array_equal(img, rgb)
    assert not partial_files(tmp_path)


def test_demo_motion_walks_without_sliding():
    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS
    from neural_ik.retarget.metrics import foot_sliding

    kp = walk_keypoints(4.0, 30.0)
    assert kp.shape == (120, 32, 3) and np.isfinite(kp).all()
    feet = kp[:, [KEYPOINTS.index(n) for n in ("heel_l", "toe_tip_l", "heel_r", "toe_tip_r")]]
    assert abs(feet[..., 2].min(axis=1)).max() < 1e-9  # a foot on the floor every frame
    travel = np.linalg.norm(kp[-1, 0, :2] - kp[0, 0, :2])
    assert travel > 1.0  # it walks
    assert foot_sliding(kp, 30.0) < 5.0  # mm per frame while in contact
    hl, hr = KEYPOINTS.index("hand_l"), KEYPOINTS.index("hand_r")
    assert np.ptp(kp[:, hl, 1] - kp[:, 0, 1]) > 0.1 and np.ptp(kp[:, hr, 1] - kp[:, 0, 1]) > 0.1  # arm swing


@needs_weights
def test_demo_writes_everything(run_cli, tmp_path):
    out = tmp_path / "demo"
    result = run_cli("demo", "--out-dir", out, "--seconds", "2", *weights_args())
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    names = ["demo_walk.npz", "demo.blend", "demo.bvh", "demo_report.json", "demo_contact_sheet.png"]
    for name in names:
        assert (out / name).is_file(), name
        assert str(out / name) in result.stdout  # it says where everything went
    assert not partial_files(out)
    report = json.loads((out / "demo_report.json").read_text())
    row = report["clips"][0]
    assert row["status"] == "done" and row["frames"] == 60 and row["target"] == "rigify"
    sheet = report["summary"]["contact_sheet"]
    w, h, img = _png(out / "demo_contact_sheet.png")
    assert (w, h) == (sheet["width"], sheet["height"]) == (960, 480)  # 6 tiles of 320x240
    assert img.reshape(-1, 3).std(axis=0).max() > 10  # not a single flat colour
    # both figures are drawn: orange input keypoints on the left, blue rig on the right of each tile
    tile = img[:240, :320]
    orange = (tile[..., 0] > 150) & (tile[..., 2] < 100)
    blue = (tile[..., 2] > 150) & (tile[..., 0] < 100)
    assert orange[:, :160].sum() > 100 and blue[:, 160:].sum() > 100
