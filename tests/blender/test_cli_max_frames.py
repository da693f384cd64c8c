"""``--max-frames``: a clip longer than the limit (source frames, or frames after resampling to ``--fps``)
is refused before any long work, with a message naming the file, the frame count and the flag."""

import json
import os
import pathlib

import numpy as np
import pytest

from _pkg import pkg

REPO = pathlib.Path(__file__).resolve().parents[2]
WEIGHTS = os.environ.get("NEURAL_IK_WEIGHTS") or str(REPO / "weights" / "neural_ik.pt")
needs_weights = pytest.mark.skipif(not os.path.isfile(WEIGHTS), reason="network weights not available")


def _weights():
    return ["--weights", WEIGHTS] if os.environ.get("NEURAL_IK_WEIGHTS") else []


def _walk(path, seconds=2.0, fps=30.0):
    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    kp = walk_keypoints(seconds, fps)
    np.savez(path, positions=kp, joint_names=np.array(KEYPOINTS), fps=fps)
    return len(kp)


def test_peek_frame_count(tmp_path):
    pkg()
    from neural_ik.cli.sources import peek_frame_count
    from neural_ik.model.bvh import write_bvh

    n = _walk(tmp_path / "walk.npz")
    assert peek_frame_count(str(tmp_path / "walk.npz")) == n
    np.save(tmp_path / "walk.npy", np.zeros((17, 33, 3), dtype=np.float32))
    assert peek_frame_count(str(tmp_path / "walk.npy")) == 17
    write_bvh(tmp_path / "a.bvh", ["r", "c"], [-1, 0], np.ones((2, 3)),
              [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation"),
               ("Zrotation", "Xrotation", "Yrotation")], np.zeros((9, 9)))
    assert peek_frame_count(str(tmp_path / "a.bvh")) == 9
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert peek_frame_count(str(tmp_path / "bad.npz")) is None  # the reader reports it
    (tmp_path / "x.json").write_text("[]")
    assert peek_frame_count(str(tmp_path / "x.json")) is None


def test_longer_clip_is_refused_before_loading(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    n = _walk(src)
    out = tmp_path / "o.blend"
    result = run_cli("bake", src, "--target", "rigify", "--out", out, "--max-frames", "50", "--report", "-",
                     *_weights())
    assert result.returncode == 1, result.stderr
    assert "walk.npz" in result.stderr and "{} frames".format(n) in result.stderr
    assert "--max-frames 50" in result.stderr and "Traceback" not in result.stderr
    row = json.loads(result.stdout)["clips"][0]
    assert row["status"] == "failed" and "--max-frames" in row["error"]
    assert not out.exists()


def test_resampled_length_counts(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    _walk(src)  # 60 frames at 30 fps -> 59,001 frames at 30,000 fps (--fps stops at 32,767: cli/limits.py)
    result = run_cli("bake", src, "--target", "rigify", "--fps", "30000", "--max-frames", "50000",
                     "--out", tmp_path / "o.blend", *_weights())
    assert result.returncode == 1, result.stderr
    assert "walk.npz" in result.stderr and "59,001 frames at 30000 fps" in result.stderr
    assert "--max-frames 50,000" in result.stderr and "Traceback" not in result.stderr


def test_bad_max_frames_is_a_usage_error(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    _walk(src, seconds=0.2)
    for value in ("0", "-3", "many"):
        result = run_cli("bake", src, "--target", "rigify", "--max-frames", value)
        assert result.returncode == 2 and "--max-frames" in result.stderr, result.stderr


@needs_weights
def test_batch_skips_the_long_clip_and_bakes_a_range(run_cli, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _walk(folder / "long.npz", seconds=2.0)
    _walk(folder / "short.npz", seconds=1.0)
    result = run_cli("batch", folder, "--target", "rigify", "--out-dir", tmp_path / "out", "--no-blend",
                     "--export", "bvh", "--max-frames", "40", "--no-refine", "-q", *_weights())
    assert result.returncode == 1, result.stderr
    rows = {pathlib.Path(r["source"]).name: r for r in json.loads((tmp_path / "out" / "report.json").read_text())["clips"]}
    assert rows["long.npz"]["status"] == "failed" and "60 frames" in rows["long.npz"]["error"]
    assert rows["short.npz"]["status"] == "done" and rows["short.npz"]["frames"] == 30
    # --frames counts: 40 of the 60 frames fit
    result = run_cli("bake", folder / "long.npz", "--target", "rigify", "--frames", "0:40", "--max-frames", "40",
                     "--no-refine", "-q", "--report", "-", *_weights())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["clips"][0]["frames"] == 40
