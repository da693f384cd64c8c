"""A Plug-in Gait C3D file baked with no flags onto Rigify's meta-rig: upright, feet on the floor."""

import json
import pathlib
import sys

import pytest

from _pkg import pkg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
pytest.importorskip("c3d")


def test_bake_plug_in_gait_c3d_onto_rigify(run_cli, tmp_path):
    pkg()
    from c3d_fixtures import plug_in_gait_markers, write_c3d
    from neural_ik.cli.demo_motion import walk_keypoints

    path = write_c3d(tmp_path / "gait.c3d", plug_in_gait_markers(walk_keypoints(3.0, 100.0)), fps=100.0)
    report = tmp_path / "report.json"
    r = run_cli("bake", path, "--target", "rigify", "--export", tmp_path / "gait.bvh", "--report", report)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    row = json.loads(report.read_text())["clips"][0]
    assert row["status"] == "done" and row["start"] == "network" and row["frames"] > 0
    assert row["upright_share"] == 1.0 and row["knees_backwards"] == 0
    assert abs(row["floor_error_cm"]) < 2.0, row["floor_error_cm"]
    assert any("regressed from" in w for w in row["warnings"]), row["warnings"]
