"""``./neural-ik bake`` on image keypoints: MediaPipe image landmarks with ``--image-size``, refusals of 2D."""

import json
import pathlib
import sys

from _pkg import pkg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def _image_json(tmp_path):
    pkg()
    from image_fixtures import mediapipe_image, write_mediapipe_json
    from neural_ik.cli.demo_motion import walk_keypoints

    return write_mediapipe_json(tmp_path / "video.json", mediapipe_image(walk_keypoints(3.0, 30.0)))


def test_mediapipe_image_landmarks_baked_with_the_image_size(run_cli, tmp_path):
    src, report = _image_json(tmp_path), tmp_path / "report.json"
    r = run_cli("bake", src, "--target", "rigify", "--image-size", "1920", "1080", "--report", report)
    assert r.returncode == 0, r.stderr
    row = json.loads(report.read_text())["clips"][0]
    assert row["status"] == "done" and row["start"] == "network"
    assert row["upright_share"] == 1.0 and row["knees_backwards"] == 0
    assert abs(row["floor_error_cm"]) < 1.0, row["floor_error_cm"]
    assert any("lifted with --image-size 1920 1080" in w for w in row["warnings"]), row["warnings"]


def test_image_keypoints_refused_with_what_to_do(run_cli, tmp_path):
    pkg()
    from image_fixtures import write_openpose_folder

    src = _image_json(tmp_path)
    r = run_cli("bake", src, "--target", "rigify")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "video.json: 2D image keypoints: MediaPipe image landmarks" in r.stderr and "--image-size W H" in r.stderr
    folder = write_openpose_folder(tmp_path / "openpose")
    r = run_cli("bake", folder, "--target", "rigify")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "openpose: 2D image keypoints (an OpenPose output folder: 3 frames" in r.stderr, r.stderr
    assert "unknown source type" not in r.stderr
    r = run_cli("bake", src, "--target", "rigify", "--image-size", "0", "1080")
    assert r.returncode == 2 and "--image-size: must be at least 1" in r.stderr
