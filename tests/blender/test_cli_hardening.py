"""Bad input and bad output paths of ``./neural-ik`` (issue 13, items 1-9).

Each case gets a message naming the file and the problem, exit code 1 (bad
input) or 2 (bad arguments), no traceback, nothing half-written and nothing
of the user's replaced; output paths are checked before any work.
"""

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from _pkg import pkg
from test_cli_bake import REPO, needs_weights, partial_files, weights_args, write_walk_bvh, write_walk_npz


def _no_traceback(result):
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


def _previous(path, text=b"previous"):
    """An existing output that a failed run must leave alone."""
    path.write_bytes(text)
    return path


# ---------------------------------------------------------------------------
# 1. --frames with open ends


@needs_weights
def test_frames_open_ends(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=2.0)  # 60 frames at 30 fps
    for spec, frames in (("30:", 30), (":20", 20), ("10:25", 15)):
        result = run_cli("bake", src, "--target", "rigify", "--frames", spec, "--report", "-", "-q", *weights_args())
        assert result.returncode == 0, (spec, result.stderr)
        _no_traceback(result)
        assert json.loads(result.stdout)["clips"][0]["frames"] == frames, spec
    out = _previous(tmp_path / "o.blend")
    result = run_cli("bake", src, "--target", "rigify", "--frames", "60:", "--out", out, *weights_args())
    assert result.returncode == 1
    assert "walk.npz" in result.stderr and "--frames 60:" in result.stderr and "0:60" in result.stderr
    _no_traceback(result)
    assert out.read_bytes() == b"previous" and not partial_files(tmp_path)


# ---------------------------------------------------------------------------
# 2. huge finite values, an all-zero clip


def test_bake_refuses_huge_and_zero_clips_and_keeps_outputs(run_cli, tmp_path):
    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    kp = walk_keypoints(1.0, 30.0)
    huge = kp.copy()
    huge[5, 3, 1] = 1e200
    for name, positions in (("huge.npz", huge), ("zero.npz", np.zeros_like(kp))):
        src = tmp_path / name
        np.savez(src, positions=positions, joint_names=np.array(KEYPOINTS), fps=30.0)
        out, bvh = _previous(tmp_path / "o.blend"), _previous(tmp_path / "o.bvh")
        result = run_cli("bake", src, "--target", "rigify", "--out", out, "--export", bvh, *weights_args())
        assert result.returncode == 1, result.stderr
        assert name in result.stderr and ("body size is zero" in result.stderr or "corrupt value" in result.stderr)
        _no_traceback(result)
        assert out.read_bytes() == bvh.read_bytes() == b"previous" and not partial_files(tmp_path)


# ---------------------------------------------------------------------------
# 3. unwritable outputs, checked before any work; a full disk mid-write


def _read_only_folder(tmp_path):
    """A folder this process cannot create files in (a read-only mount when running as root)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        probe = folder / "probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return folder
    for candidate in ("/sys", "/proc/sys"):  # root ignores permission bits
        try:
            with open(os.path.join(candidate, ".neural_ik_probe"), "wb"):
                pass
        except OSError:
            return candidate
    pytest.skip("no read-only folder available")


def test_unwritable_outputs_fail_before_any_work(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    (tmp_path / "adir.blend").mkdir()
    (tmp_path / "afile").write_text("a file")
    ro = _read_only_folder(tmp_path)
    cases = [
        (["--out", tmp_path / "adir.blend"], "is a folder"),
        (["--out", tmp_path / "afile" / "x.blend"], "is a file, not a folder"),
        (["--export", tmp_path / "afile" / "sub" / "x.bvh"], "is a file, not a folder"),
        (["--report", tmp_path / "adir.blend"], "is a folder"),
        (["--out", os.path.join(ro, "x.blend")], "cannot write in the folder"),
        (["--report", os.path.join(ro, "r.json")], "cannot write in the folder"),
    ]
    try:
        for argv, fragment in cases:
            result = run_cli("bake", src, "--target", "rigify", *argv, *weights_args())
            assert result.returncode == 2, (argv, result.stderr)
            assert fragment in result.stderr and str(argv[1]) in result.stderr, (argv, result.stderr)
            assert "clip 1/1" not in result.stderr, "checked only after the work started"
            _no_traceback(result)
        clips = tmp_path / "clips"
        clips.mkdir()
        write_walk_npz(clips / "walk.npz", seconds=0.5)
        for argv, fragment in ((["--out-dir", tmp_path / "afile"], "is a file, not a folder"),
                               (["--out-dir", os.path.join(ro, "out")], "cannot write in the folder"),
                               (["--out-dir", tmp_path / "o", "--report", tmp_path / "adir.blend"], "is a folder")):
            result = run_cli("batch", clips, "--target", "rigify", *argv, *weights_args())
            assert result.returncode == 2, (argv, result.stderr)
            assert fragment in result.stderr, (argv, result.stderr)
            assert "clip 1/1" not in result.stderr
            _no_traceback(result)
    finally:
        if str(ro).startswith(str(tmp_path)):
            os.chmod(ro, 0o755)


def _file_size_limit(limit):
    """``preexec_fn``: writes past ``limit`` bytes fail (EFBIG, as a full disk fails mid-write)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


#: Writes past this many bytes fail: the reports fit, a .blend (170 KB compressed on 5.0, 1.2 MB on 4.x)
#: and a 1 s BVH of the meta-rig (200 KB) do not.
LIMIT = 100_000


@needs_weights
def test_full_disk_mid_write_keeps_the_cause_and_the_old_files(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=1.0)
    out = _previous(tmp_path / "o.blend")
    result = run_cli("bake", src, "--target", "rigify", "--out", out, "--report", tmp_path / "r.json", "-q",
                     *weights_args(), preexec_fn=_file_size_limit(LIMIT))
    assert result.returncode == 1, result.stderr
    assert "o.blend" in result.stderr and "File too large" in result.stderr
    _no_traceback(result)
    assert out.read_bytes() == b"previous" and not partial_files(tmp_path)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["clips"][0]["status"] == "failed" and "File too large" in report["clips"][0]["error"]

    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(2):
        write_walk_npz(clips / "walk_{}.npz".format(i), seconds=1.0)
    # batch: the .blend does not fit; report.json still lists the clips baked
    outdir = tmp_path / "out"
    result = run_cli("batch", clips, "--target", "rigify", "--out-dir", outdir, "-q", *weights_args(),
                     preexec_fn=_file_size_limit(LIMIT))
    assert result.returncode == 1, result.stderr
    assert "batch.blend" in result.stderr and "File too large" in result.stderr
    _no_traceback(result)
    report = json.loads((outdir / "report.json").read_text())
    assert "File too large" in report["summary"]["blend_error"] and report["summary"]["blend"] is None
    assert [r["status"] for r in report["clips"]] == ["done", "done"]
    assert not (outdir / "batch.blend").exists() and not partial_files(outdir)
    # batch: the exports do not fit; each clip fails with the cause, the report is written
    outdir = tmp_path / "out2"
    result = run_cli("batch", clips, "--target", "rigify", "--out-dir", outdir, "--no-blend", "--export", "bvh",
                     "-q", *weights_args(), preexec_fn=_file_size_limit(LIMIT))
    assert result.returncode == 1, result.stderr
    _no_traceback(result)
    report = json.loads((outdir / "report.json").read_text())
    assert [r["status"] for r in report["clips"]] == ["failed", "failed"]
    assert all("walk_{}.bvh".format(i) in r["error"] and "File too large" in r["error"]
               for i, r in enumerate(report["clips"]))
    assert not list(outdir.glob("*.bvh")) and not partial_files(outdir)


# ---------------------------------------------------------------------------
# 4. deeply nested JSON


def test_deeply_nested_json_is_a_clear_error(run_cli, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    deep_obj = tmp_path / "deepobj.json"
    deep_obj.write_text('{"a":' * 100000 + "1" + "}" * 100000)
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    for argv, code, fragment in (
        ([deep], 1, "deep.json: nested too deeply"),
        ([src, "--layout", deep_obj], 2, "--layout {}: JSON nested too deeply".format(deep_obj)),
        ([src, "--mapping", deep_obj], 2, "--mapping {}: JSON nested too deeply".format(deep_obj)),
        ([src, "--mapping", deep], 2, "--mapping {}: JSON nested too deeply".format(deep)),
    ):
        result = run_cli("bake", *argv, "--target", "rigify", *weights_args())
        assert result.returncode == code, (argv, result.stderr)
        assert fragment in result.stderr, result.stderr
        assert "RecursionError" not in result.stderr
        _no_traceback(result)


# ---------------------------------------------------------------------------
# 5. --frame-start outside Blender's frame range


def test_frame_start_outside_blender_limits(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    for value in ("99999999999", "-1048575"):
        result = run_cli("bake", src, "--target", "rigify", "--frame-start", value)
        assert result.returncode == 2, result.stderr
        assert "--frame-start" in result.stderr and "-1048574..1048574" in result.stderr
        _no_traceback(result)
    out = _previous(tmp_path / "o.blend")
    result = run_cli("bake", src, "--target", "rigify", "--frame-start", "1048570", "--out", out, *weights_args())
    assert result.returncode == 1, result.stderr
    assert "walk.npz" in result.stderr and "past Blender's last frame 1048574" in result.stderr
    _no_traceback(result)
    assert out.read_bytes() == b"previous"


# ---------------------------------------------------------------------------
# 6. Blender importer/exporter errors: no traceback, the real cause kept


def test_importer_traceback_does_not_leak(run_cli, tmp_path):
    bad = tmp_path / "bad.bvh"
    bad.write_bytes(b"HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n CHANNELS 6 Xposition Yposition Zposition "
                    b"Zrotation Xrotation Yrotation\n End Site\n {\n OFFSET 0 1 0\n }\n}\nMOTION\nFrames: 1\n"
                    b"Frame Time: 0.03\n0 0 0 0 0 \xff\xfe 0\n")
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    result = run_cli("bake", src, "--target", bad, *weights_args())
    assert result.returncode == 1, result.stderr
    # (a BVH target is read by the project's reader first, for its units and up axis)
    assert "--target {}: cannot be loaded (".format(bad) in result.stderr, result.stderr
    assert "line 14: non-numeric motion value" in result.stderr, result.stderr
    _no_traceback(result)
    assert "File \"" not in result.stderr and "Location:" not in result.stderr


# ---------------------------------------------------------------------------
# 7. batch: unique output names


@needs_weights
def test_batch_names_do_not_collide(run_cli, tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    write_walk_npz(clips / "walk.npz", seconds=1.0)
    write_walk_npz(clips / "walk_npz.npz", seconds=0.5)
    write_walk_bvh(clips / "walk.bvh", seconds=1.0)
    out = tmp_path / "out"
    result = run_cli("batch", clips, "--target", "rigify", "--out-dir", out, "--export", "bvh", "-q", *weights_args())
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    rows = {os.path.basename(r["source"]): r for r in report["clips"]}
    assert rows["walk_npz.npz"]["action"] == "walk_npz" and rows["walk.npz"]["action"] == "walk_npz_2"
    assert rows["walk.bvh"]["action"] == "walk_bvh"
    assert any("walk_npz is taken" in w for w in rows["walk.npz"]["warnings"])
    exports = {r["outputs"][0] for r in report["clips"]}
    assert exports == {str(out / n) for n in ("walk_npz.bvh", "walk_npz_2.bvh", "walk_bvh.bvh")}
    for row in report["clips"]:
        assert os.path.isfile(row["outputs"][0])
    # the 0.5 s clip (16 frames) and the 1 s clips (31 frames) went to different files
    frames = {os.path.basename(p): int(open(p).read().split("Frames:")[1].split()[0]) for p in exports}
    assert frames["walk_npz.bvh"] < frames["walk_npz_2.bvh"]


# ---------------------------------------------------------------------------
# 8. the same file twice, outputs that would become inputs


def test_same_output_twice_or_an_input_is_refused(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    out = _previous(tmp_path / "o.blend")
    for argv, fragment in (
        (["--out", out, "--report", out], "the same file as --out"),
        (["--export", tmp_path / "a.bvh", "--export", str(tmp_path / "x" / ".." / "a.bvh")], "the same file as"),
        (["--report", src], "would replace the input"),
    ):
        result = run_cli("bake", src, "--target", "rigify", *argv, *weights_args())
        assert result.returncode == 2, (argv, result.stderr)
        assert fragment in result.stderr, result.stderr
        _no_traceback(result)
    assert out.read_bytes() == b"previous" and src.stat().st_size > 100
    clips = tmp_path / "clips"
    clips.mkdir()
    write_walk_npz(clips / "walk.npz", seconds=0.5)
    for argv, fragment in (
        (["--out-dir", clips / "out"], "lies inside INPUT_DIR"),
        (["--out-dir", clips], "lies inside INPUT_DIR"),
        (["--out-dir", tmp_path / "o2", "--report", clips / "r.json"], "--report {}: lies inside INPUT_DIR".format(
            clips / "r.json")),
        (["--out-dir", tmp_path / "o3", "--out", "b.blend", "--report", tmp_path / "o3" / "b.blend"],
         "the same file as --out"),
    ):
        result = run_cli("batch", clips, "--target", "rigify", *argv, *weights_args())
        assert result.returncode == 2, (argv, result.stderr)
        assert fragment in result.stderr, result.stderr
        _no_traceback(result)
    assert sorted(p.name for p in clips.iterdir()) == ["walk.npz"]


# ---------------------------------------------------------------------------
# 9. a .blend target's scripts never run and are not carried into --out


def _crafted_blend(path, marker_dir):
    """A rig whose text block (registered) and Python driver write marker files when they run."""
    import bpy

    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    bpy.ops.object.armature_add()
    arm = bpy.context.active_object
    text = bpy.data.texts.new("evil.py")
    text.write("open({!r}, 'w').write('ran')\n".format(str(marker_dir / "text_ran")))
    text.use_module = True
    fc = arm.driver_add("location", 0)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = "len(str(open({!r}, 'w').write('ran')))*0".format(str(marker_dir / "driver_ran"))
    simple = arm.driver_add("location", 1)
    simple.driver.type = "SCRIPTED"
    simple.driver.expression = "frame * 0"  # a simple expression: no Python, stays live
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    for marker in marker_dir.glob("*_ran"):
        marker.unlink()


def _open_trusted(path):
    import bpy

    bpy.ops.wm.open_mainfile(filepath=str(path), load_ui=False, use_scripts=True)
    bpy.context.scene.frame_set(2)
    bpy.context.view_layer.update()


def test_blend_target_scripts_never_run(ext, tmp_path):
    import importlib

    import bpy

    targets = importlib.import_module(ext.__name__ + ".blender_io.targets")
    export = importlib.import_module(ext.__name__ + ".blender_io.export")
    markers = tmp_path / "markers"
    markers.mkdir()
    evil = tmp_path / "evil.blend"
    _crafted_blend(evil, markers)
    prefs = bpy.context.preferences.filepaths
    saved = prefs.use_scripts_auto_execute
    try:
        # the test can fail: trusted, the file's scripts do run
        _open_trusted(evil)
        assert {p.name for p in markers.iterdir()} == {"text_ran", "driver_ran"}
        for p in markers.iterdir():
            p.unlink()
        prefs.use_scripts_auto_execute = True  # a user who allows auto-run
        target = targets.load_target(str(evil))
        bpy.context.scene.frame_set(3)
        bpy.context.view_layer.update()
        assert not list(markers.iterdir()), "a script of the target ran"
        assert any("text block(s) 'evil.py'" in w for w in target.warnings)
        assert any("1 Python driver expression(s) muted" in w for w in target.warnings)
        out = tmp_path / "out.blend"
        export.save_blend(str(out))
        _open_trusted(out)
        assert not list(markers.iterdir()), "a script copied into --out ran"
        assert bpy.data.texts["evil.py"].as_string().startswith("open(")  # the text itself is kept
        assert not bpy.data.texts["evil.py"].use_module
        drivers = {fc.array_index: fc for fc in bpy.data.objects["Armature"].animation_data.drivers}
        assert drivers[0].mute and not drivers[1].mute
    finally:
        prefs.use_scripts_auto_execute = saved


@needs_weights
def test_blend_target_bake_reports_disabled_scripts(run_cli, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    rig = tmp_path / "rig.blend"
    import bpy

    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    import addon_utils

    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    text = bpy.data.texts.new("rig_ui.py")
    text.write("open({!r}, 'w').write('ran')\n".format(str(markers / "text_ran")))
    text.use_module = True
    bpy.ops.wm.save_as_mainfile(filepath=str(rig))
    result = run_cli("bake", src, "--target", rig, "--out", tmp_path / "o.blend", "--report", "-", "-q",
                     *weights_args())
    assert result.returncode == 0, result.stderr
    assert not list(markers.iterdir())
    warnings = json.loads(result.stdout)["clips"][0]["warnings"]
    assert any("rig_ui.py" in w and "no longer registered" in w for w in warnings), warnings


# ---------------------------------------------------------------------------
# the launcher


def test_launcher_venv_variable(tmp_path):
    env = dict(os.environ, NEURAL_IK_VENV=str(tmp_path / "novenv"))
    result = subprocess.run([str(REPO / "neural-ik"), "info"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert "no virtual environment at {}".format(tmp_path / "novenv") in result.stderr
    env["NEURAL_IK_VENV"] = os.path.dirname(os.path.dirname(sys.executable))  # this test's own environment
    result = subprocess.run([str(REPO / "neural-ik"), "layouts"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "coco17" in result.stdout
