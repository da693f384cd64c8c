"""Hostile sources read without Blender (issue 35): a BVH with a byte-order mark or a rotation of 1e200
degrees, a TRC without a usable DataRate, JSON with a 100,000-digit integer, .npy/.npz headers
declaring huge arrays, --up-axis -Z, the ranges of --scale and --fps, paths that are not files."""

import io
import os
import zipfile

import numpy as np
import pytest

from neural_ik.cli.demo_motion import walk_keypoints
from neural_ik.cli.parser import build_parser, main
from neural_ik.model.bvh import BVHError, read_bvh
from neural_ik.model.skeleton import KEYPOINTS
from neural_ik.readers import KeypointReadError, get_layout, read_keypoints
from source_fixtures import humanoid_bvh, opencap_markers, write_trc


def test_bvh_with_a_byte_order_mark_is_read(tmp_path):
    plain, _ = humanoid_bvh(tmp_path / "plain.bvh", frames=8)
    bom = tmp_path / "bom.bvh"
    bom.write_bytes(b"\xef\xbb\xbf" + open(plain, "rb").read())
    assert read_bvh(str(bom)).num_frames == 8
    assert read_keypoints(str(bom)).num_frames == 8


def test_bvh_rotation_of_1e200_degrees_is_refused_naming_the_line(tmp_path):
    path, _ = humanoid_bvh(tmp_path / "rot.bvh", frames=8)
    lines = open(path).read().splitlines()
    first = [i for i, ln in enumerate(lines) if ln.startswith("Frame Time")][0] + 1
    values = lines[first + 3].split()
    values[4] = "1e200"   # the root's second rotation channel (its first three are positions)
    lines[first + 3] = " ".join(values)
    open(path, "w").write("\n".join(lines) + "\n")
    with pytest.raises(BVHError) as err:
        read_bvh(str(path))
    text = str(err.value)
    assert "rot.bvh" in text and "line {}".format(first + 4) in text and "rotation" in text and "frame 3" in text
    with pytest.raises(KeypointReadError):
        read_keypoints(str(path))
    values[4] = "7200"    # twenty turns: unwrapped angles are fine
    lines[first + 3] = " ".join(values)
    open(path, "w").write("\n".join(lines) + "\n")
    assert read_bvh(str(path)).num_frames == 8


@pytest.mark.parametrize("rate", ["0", "NaN", "-60"])
def test_trc_rate_comes_from_the_time_column(tmp_path, rate):
    markers, _walk = opencap_markers(frames=30)
    path = write_trc(tmp_path / "m.trc", markers, rate=60.0)
    lines = open(path).read().split("\n")
    cells = lines[2].split("\t")
    cells[0] = cells[1] = cells[5] = rate          # DataRate, CameraRate, OrigDataRate
    lines[2] = "\t".join(cells)
    open(path, "w").write("\n".join(lines))
    clip = read_keypoints(str(path))
    assert clip.fps == 60.0
    assert any("Time column" in w and "60 fps" in w for w in clip.warnings), clip.warnings


def test_json_with_a_huge_integer_names_the_file(tmp_path):
    src = tmp_path / "big.json"
    src.write_text('{"fps": 30, "frames": [[1' + "1" * 100_000 + "]]}")
    with pytest.raises(KeypointReadError) as err:
        read_keypoints(str(src))
    assert "big.json" in str(err.value) and "too long" in str(err.value)
    layout = tmp_path / "lay.json"
    layout.write_text('{"a": ' + "1" * 100_000 + "}")
    with pytest.raises(ValueError) as err:
        get_layout(str(layout))
    assert "lay.json" in str(err.value) and "set_int_max_str_digits" not in str(err.value)


def _header(shape, descr="<f8"):
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 64


@pytest.mark.parametrize("shape, words", [((1000, 100_000_000, 3), "GiB"), ((10, 200_000, 3), "points per frame")])
def test_npy_and_npz_headers_declaring_huge_arrays(tmp_path, shape, words):
    npy = tmp_path / "huge.npy"
    npy.write_bytes(_header(shape))
    npz = tmp_path / "huge.npz"
    with zipfile.ZipFile(npz, "w") as archive:
        archive.writestr("positions.npy", _header(shape))
        archive.writestr("joint_names.npy", _header((3,), "<U8"))
        archive.writestr("fps.npy", _header(()))
    for path in (npy, npz):
        with pytest.raises(KeypointReadError) as err:
            read_keypoints(str(path), layout="coco17")
        assert path.name in str(err.value) and words in str(err.value) and str(shape) in str(err.value)


def test_a_normal_npz_still_reads(tmp_path):
    path = tmp_path / "walk.npz"
    np.savez(path, positions=walk_keypoints(0.5, 30.0), joint_names=np.array(KEYPOINTS), fps=30.0)
    assert read_keypoints(str(path)).num_frames == 15


def test_up_axis_minus_z_parses(tmp_path, capsys):
    # the source is missing: the run stops at that check, after parsing
    code = main(["bake", str(tmp_path / "a.npz"), "--target", "rigify", "--up-axis", "-Z", "--target-up-axis", "-Y"])
    err = capsys.readouterr().err
    assert code == 2 and "no such file" in err and "expected one argument" not in err, err
    from neural_ik.cli.parser import join_negative_values

    assert join_negative_values(["--up-axis", "-q"]) == ["--up-axis", "-q"]


@pytest.mark.parametrize("flag, value", [("--scale", "1e300"), ("--scale", "1e6"), ("--scale", "1e-9"),
                                         ("--fps", "1e-9"), ("--fps", "1e9"), ("--source-fps", "1e-9")])
def test_absurd_scale_and_fps_are_refused(flag, value, capsys):
    with pytest.raises(SystemExit) as ex:
        build_parser().parse_args(["bake", "a.npz", flag, value])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and value in err and "outside" in err


def test_paths_that_are_not_files(tmp_path):
    from neural_ik.cli.pathcheck import not_a_file, not_a_folder

    (tmp_path / "folder.npz").mkdir()
    os.mkfifo(tmp_path / "fifo.npz")
    os.symlink("loop.npz", tmp_path / "loop.npz")
    os.symlink("missing.npz", tmp_path / "dangling.npz")
    assert "folder" in not_a_file(str(tmp_path / "folder.npz"))
    assert "FIFO" in not_a_file(str(tmp_path / "fifo.npz"))
    assert "loop" in not_a_file(str(tmp_path / "loop.npz"))
    assert "broken symbolic link" in not_a_file(str(tmp_path / "dangling.npz"))
    assert not_a_file(str(tmp_path / "nothing.npz")) == "no such file"
    assert not_a_folder(str(tmp_path / "nothing")) == "no such folder"
    assert "FIFO" in not_a_folder(str(tmp_path / "fifo.npz"))
