"""Bad values and names, without Blender (issue 13): the readers' size checks, the cause of a failed
Blender operator, batch output names."""

import os

import numpy as np
import pytest

from neural_ik.cli.batch import output_names
from neural_ik.cli.demo_motion import walk_keypoints
from neural_ik.blender_io.calls import operator_error
from neural_ik.model.skeleton import KEYPOINTS
from neural_ik.readers import KeypointReadError, read_keypoints


@pytest.mark.parametrize("value, dtype", [(1e154, np.float64), (1e200, np.float64), (3e38, np.float32),
                                          (1e308, np.float64)])
def test_reader_refuses_a_huge_finite_value(tmp_path, value, dtype):
    kp = walk_keypoints(1.0, 30.0)
    kp[5, 3, 1] = value
    kp[7, 4, 0] = -value
    path = tmp_path / "huge.npz"
    for units in (None, "m"):
        extra = {"units": units} if units else {}
        np.savez(path, positions=kp.astype(dtype), joint_names=np.array(KEYPOINTS), fps=30.0, **extra)
        with pytest.raises(KeypointReadError) as err:
            read_keypoints(str(path))
        assert "huge.npz" in str(err.value) and "frame 5" in str(err.value)


def test_reader_refuses_an_all_zero_clip(tmp_path):
    path = tmp_path / "zero.npz"
    for units in (None, "m"):
        extra = {"units": units} if units else {}
        np.savez(path, positions=np.zeros((20, len(KEYPOINTS), 3)), joint_names=np.array(KEYPOINTS), fps=30.0,
                 **extra)
        with pytest.raises(KeypointReadError, match="zero.npz: body size is zero"):
            read_keypoints(str(path))


def test_reader_keeps_a_normal_clip_with_travel(tmp_path):
    """The size checks leave real motion alone: a walk far from the origin, a few missing points."""
    kp = walk_keypoints(2.0, 30.0) + np.array([500.0, -300.0, 0.0])
    kp[3:6, 10] = np.nan
    path = tmp_path / "far.npz"
    np.savez(path, positions=kp, joint_names=np.array(KEYPOINTS), fps=30.0, units="m")
    clip = read_keypoints(str(path))
    assert np.isfinite(clip.positions).all()


def test_operator_error_keeps_the_cause():
    frames = "".join('  File "/some/very/long/path/to/blender/scripts/addons_core/io_x/mod_{}.py", line {}, in f\n'
                     "    call_something(argument)\n".format(i, i) for i in range(8))
    text = ("Error: Python: Traceback (most recent call last):\n" + frames
            + "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 184: invalid start byte\n"
            + "Location: /x/bpy/ops.py:109\n")
    assert len(text) > 600
    assert operator_error(RuntimeError(text)) == (
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 184: invalid start byte")
    assert operator_error(RuntimeError("Error: Cannot open file /x/y.blend@ for writing: No space left on "
                                       "device\n")) == (
        "Cannot open file /x/y.blend@ for writing: No space left on device")
    long = "Error: " + "x" * 1000 + " No space left on device"
    assert operator_error(RuntimeError(long)).endswith("No space left on device")


def test_output_names_are_unique_and_deterministic():
    root = "/r"
    sources = sorted(["/r/walk.npz", "/r/walk.bvh", "/r/walk_npz.npz", "/r/Run.npz", "/r/run.bvh", "/r/a/x.npz"])
    names = output_names(sources, root)
    got = dict(zip(sources, names))
    assert [n for n, _ in names] == [n for n, _ in output_names(sources, root)]
    assert len({n.lower() for n, _ in names}) == len(sources)
    assert got["/r/walk_npz.npz"] == ("walk_npz", None) and got["/r/a/x.npz"] == (os.path.join("a", "x"), None)
    assert got["/r/walk.bvh"][0] == "walk_bvh" and got["/r/walk.npz"][0] == "walk_npz_2"
    assert "walk_npz is taken" in got["/r/walk.npz"][1]
    assert {got["/r/Run.npz"][0], got["/r/run.bvh"][0]} == {"Run_npz", "run_bvh"}
