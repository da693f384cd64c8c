"""model.bvh.write_bvh's motion writing: vectorised number formatting and chunked motion (no bpy)."""

import numpy as np
import pytest

from _pkg import pkg

pkg()
from neural_ik.model import bvh, number_rows  # noqa: E402

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("precision", [0, 3, 6, 8])
def test_format_rows_reads_back_like_percent_formatting(precision):
    block = np.concatenate([
        RNG.uniform(-180, 180, (50, 7)),
        RNG.normal(0, 1e-3, (50, 3)),
        RNG.uniform(-1e6, 1e6, (50, 2)),
        np.zeros((50, 1)),
        -np.full((50, 1), 1e-12),
    ], axis=1)
    text = number_rows.format_rows(block, precision).decode("ascii")
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 51
    ours = np.array([ln.split() for ln in lines[:-1]], dtype=np.float64)
    ref_fmt = " ".join(["%.{}f".format(precision)] * block.shape[1])
    ref = np.array([(ref_fmt % tuple(row)).split() for row in block], dtype=np.float64)
    assert ours.shape == block.shape
    # the same rounding to `precision` decimals (a tie may round the other way)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1.01 * 10.0 ** -precision)
    np.testing.assert_allclose(ours, block, rtol=0, atol=0.5 * 10.0 ** -precision + 1e-9 * np.abs(block).max())
    # a negative value that rounds to zero is written without a sign
    assert not any(ln.split()[-1].startswith("-") for ln in lines[:-1])


@pytest.mark.parametrize("rows", [1, 4])
def test_format_rows_constant_columns(rows):
    block = np.tile([[-123.4567891, 0.5, 1e-9, -7.25, 31415.9]], (rows, 1))
    block[:, 1] += np.arange(rows)  # one varying column among constant ones
    text = number_rows.format_rows(block, 6).decode("ascii")
    ours = np.array([ln.split() for ln in text.splitlines()], dtype=np.float64)
    np.testing.assert_allclose(ours, np.round(block, 6), atol=1e-9)
    const = np.tile([[-9.5, 2.0]], (3, 1))
    ours = np.array([ln.split() for ln in number_rows.format_rows(const, 2).decode().splitlines()], dtype=np.float64)
    np.testing.assert_array_equal(ours, const)


def test_format_rows_declines_non_finite():
    assert number_rows.format_rows(np.array([[1.0, np.nan]]), 6) is None
    assert number_rows.format_rows(np.array([[1.0, np.inf]]), 6) is None


def _skeleton():
    names = ["root", "a", "b"]
    parents = [-1, 0, 1]
    offsets = RNG.normal(size=(3, 3))
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation"),
                ("Zrotation", "Xrotation", "Yrotation"), ("Xrotation", "Yrotation", "Zrotation")]
    return names, parents, offsets, channels


def test_chunked_motion_equals_whole(tmp_path):
    names, parents, offsets, channels = _skeleton()
    motion = RNG.uniform(-170, 170, (23, 12))
    whole, chunked = tmp_path / "whole.bvh", tmp_path / "chunked.bvh"
    bvh.write_bvh(whole, names, parents, offsets, channels, motion)
    bvh.write_bvh(chunked, names, parents, offsets, channels, iter([motion[:5], motion[5:6], motion[6:]]),
                  num_frames=23)
    a, b = bvh.read_bvh(whole), bvh.read_bvh(chunked)
    assert a.num_frames == b.num_frames == 23
    np.testing.assert_allclose(a.motion, b.motion, atol=0)
    np.testing.assert_allclose(a.motion, motion, atol=5e-7)


def test_chunked_motion_frame_count_is_checked(tmp_path):
    names, parents, offsets, channels = _skeleton()
    motion = RNG.uniform(-170, 170, (4, 12))
    with pytest.raises(ValueError, match="num_frames"):
        bvh.write_bvh(tmp_path / "x.bvh", names, parents, offsets, channels, iter([motion]))
    with pytest.raises(ValueError, match="4 frames, 5 announced"):
        bvh.write_bvh(tmp_path / "x.bvh", names, parents, offsets, channels, iter([motion]), num_frames=5)
    with pytest.raises(ValueError, match="more than the 3 frames"):
        bvh.write_bvh(tmp_path / "x.bvh", names, parents, offsets, channels, iter([motion]), num_frames=3)
    with pytest.raises(ValueError, match="columns"):
        bvh.write_bvh(tmp_path / "x.bvh", names, parents, offsets, channels, motion[:, :5])
