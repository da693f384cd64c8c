"""``bake --preview``: a contact sheet of every bake, the input and the baked rig side by side on the floor."""

import json

import numpy as np
import pytest

from test_cli_bake import needs_weights, partial_files, weights_args, write_walk_bvh, write_walk_npz
from test_demo import _png

TILE_W, TILE_H = 320, 240


def _figures(img):
    """Per tile: (orange input pixels, blue rig pixels) as boolean masks of the tile's left and right halves."""
    out = []
    for r in range(img.shape[0] // TILE_H):
        for c in range(img.shape[1] // TILE_W):
            tile = img[r * TILE_H:(r + 1) * TILE_H, c * TILE_W:(c + 1) * TILE_W].astype(int)
            orange = (tile[..., 0] > 150) & (tile[..., 2] < 100)
            blue = (tile[..., 2] > 150) & (tile[..., 0] < 100)
            out.append((orange[:, :TILE_W // 2], blue[:, TILE_W // 2:]))
    return out


def _lowest_row(mask):
    rows = np.flatnonzero(mask.any(axis=1))
    return int(rows.max())


@needs_weights
@pytest.mark.parametrize("target", ["rigify", "bvh"])
def test_bake_preview_shows_input_and_rig_standing_on_one_floor(run_cli, tmp_path, target):
    """The demo walk baked onto the meta-rig (Blender's armature) and onto a BVH skeleton (a file's armature,
    no Blender object): six tiles, each with the orange input on the left and the blue rig on the right,
    whose lowest pixels (the feet) lie within 10 px (11 cm at this framing: the input's joints are drawn
    as spheres of 3.2 cm, the rig's end bones end at their toe joints) of each other: both stand on the
    floor; a rig floating 15 cm above it would not pass."""
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=2.0)
    if target == "bvh":
        tgt = tmp_path / "skeleton.bvh"
        write_walk_bvh(tgt, seconds=0.2)
        target_args = ["--target", str(tgt), "--export", str(tmp_path / "out.bvh")]
    else:
        target_args = ["--target", "rigify"]
    sheet = tmp_path / "sheet.png"
    report = tmp_path / "report.json"
    result = run_cli("bake", src, *target_args, "--preview", sheet, "--report", report, *weights_args())
    assert result.returncode == 0, result.stderr
    row = json.loads(report.read_text())["clips"][0]
    assert str(sheet) in row["outputs"] and not partial_files(tmp_path)
    w, h, img = _png(sheet)
    assert (w, h) == (3 * TILE_W, 2 * TILE_H)
    for i, (orange, blue) in enumerate(_figures(img)):
        assert orange.sum() > 100 and blue.sum() > 100, i
        assert abs(_lowest_row(orange) - _lowest_row(blue)) <= 10, (i, _lowest_row(orange), _lowest_row(blue))


def test_bake_preview_must_be_png_before_any_work(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=1.0)
    result = run_cli("bake", src, "--target", "rigify", "--preview", tmp_path / "sheet.jpg")
    assert result.returncode == 2
    assert "--preview" in result.stderr and "sheet.jpg" in result.stderr and ".png" in result.stderr
    assert not (tmp_path / "sheet.jpg").exists()


@needs_weights
def test_batch_previews_one_sheet_per_clip_and_kept_fresh(run_cli, tmp_path):
    """``batch --previews`` onto a BVH skeleton in two worker processes: DIR/<clip>.png beside each export,
    listed in the clip's row, and DIR/previews_index.png with a tile of each; a second run skips both
    clips as up to date (the index made again from their sheets), and a clip whose sheet was deleted is
    baked again."""
    src = tmp_path / "in"
    src.mkdir()
    write_walk_npz(src / "a.npz", seconds=1.0)
    write_walk_npz(src / "b.npz", seconds=1.5)
    tgt = tmp_path / "skeleton.bvh"
    write_walk_bvh(tgt, seconds=0.2)
    out = tmp_path / "out"
    argv = ["batch", src, "--target", tgt, "--out-dir", out, "--export", "bvh", "--no-blend", "--previews",
            "--jobs", "2", "--report", tmp_path / "r.json", *weights_args()]
    result = run_cli(*argv)
    assert result.returncode == 0, result.stderr
    rows = {r["source"].rsplit("/", 1)[-1]: r for r in json.loads((tmp_path / "r.json").read_text())["clips"]}
    for name in ("a", "b"):
        sheet = out / (name + ".png")
        assert str(sheet) in rows[name + ".npz"]["outputs"]
        w, h, img = _png(sheet)
        assert (w, h) == (3 * TILE_W, 2 * TILE_H)
        assert all(o.sum() > 100 and b.sum() > 100 for o, b in _figures(img))
    assert not partial_files(out)
    index = out / "previews_index.png"
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["previews_index"] == str(index)
    w, h, img = _png(index)   # one tile of each clip's sheet, side by side
    assert (w, h) == (2 * TILE_W, TILE_H)
    assert all(o.sum() > 100 and b.sum() > 100 for o, b in _figures(img))
    index.unlink()
    again = run_cli(*argv)
    assert again.returncode == 0, again.stderr
    assert [r["status"] for r in json.loads((tmp_path / "r.json").read_text())["clips"]] == ["skipped"] * 2
    assert _png(index)[:2] == (2 * TILE_W, TILE_H)   # (made again from the sheets of clips up to date)
    (out / "b.png").unlink()
    third = run_cli(*argv)
    status = {r["source"].rsplit("/", 1)[-1]: r["status"] for r in json.loads((tmp_path / "r.json").read_text())["clips"]}
    assert third.returncode == 0 and status == {"a.npz": "skipped", "b.npz": "done"} and (out / "b.png").is_file()


def test_batch_previews_refused_on_a_cluster(run_cli, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    write_walk_npz(src / "a.npz", seconds=1.0)
    tgt = tmp_path / "skeleton.bvh"
    write_walk_bvh(tgt, seconds=0.2)
    result = run_cli("batch", src, "--target", tgt, "--out-dir", tmp_path / "out", "--export", "bvh", "--no-blend",
                     "--previews", "--scheduler", "local:1")
    assert result.returncode == 2
    assert "--previews" in result.stderr and "--scheduler" in result.stderr


def test_read_png_reads_back_what_write_png_wrote_and_nothing_else(tmp_path):
    from _pkg import pkg

    pkg()
    import struct
    import zlib

    from neural_ik.blender_io.contact_sheet import read_png, write_png

    rgb = (np.arange(12 * 7 * 3) % 251).astype(np.uint8).reshape(12, 7, 3)
    write_png(str(tmp_path / "a.png"), rgb)
    assert np.array_equal(read_png(str(tmp_path / "a.png")), rgb)
    raw = b"".join(b"\x01" + bytes(7 * 3) for _ in range(12))   # rows with the Sub filter: another writer's
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))  # noqa: E731
    (tmp_path / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 12, 8, 2, 0, 0, 0))
                                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    with pytest.raises(ValueError, match="row filters"):
        read_png(str(tmp_path / "b.png"))
