"""``./neural-ik batch``: a folder with a corrupt clip, reruns that skip, Ctrl-C mid-batch."""

import json
import os
import time


from test_cli_bake import REPO, interrupt_batch, needs_weights, partial_files, weights_args, write_walk_npz

pytestmark = needs_weights


def _folder(tmp_path, n=3, seconds=1.0):
    src = tmp_path / "clips"
    (src / "sub").mkdir(parents=True)
    for i in range(n):
        write_walk_npz(src / ("sub" if i == n - 1 else "") / "walk_{}.npz".format(i), seconds=seconds)
    (src / "corrupt.npz").write_bytes(b"\x00not an archive")
    (src / "notes.txt").write_text("ignored: not a keypoint file")
    return src


def _blend_actions(path):
    import bpy

    with bpy.data.libraries.load(str(path), link=False) as (data_from, _):
        return set(data_from.actions)


def test_batch_skips_a_corrupt_clip_then_reruns(run_cli, tmp_path):
    src = _folder(tmp_path)
    out = tmp_path / "out"
    argv = ["batch", src, "--target", "rigify", "--out-dir", out, "--export", "bvh", *weights_args()]
    result = run_cli(*argv)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "corrupt.npz" in result.stderr and "clip 1/4" in result.stderr
    report = json.loads((out / "report.json").read_text())
    status = {os.path.basename(r["source"]): r["status"] for r in report["clips"]}
    assert status == {"corrupt.npz": "failed", "walk_0.npz": "done", "walk_1.npz": "done", "walk_2.npz": "done"}
    assert report["summary"]["failed"] == 1 and report["summary"]["done"] == 3
    assert "corrupt.npz" in report["summary"]["failed_clips"][0]["source"]
    assert report["summary"]["frames"] == 90 and report["summary"]["frames_per_second"] > 0
    for row in report["clips"]:
        if row["status"] == "done":
            assert set(row["seconds"]) >= {"read", "solve", "fit", "write", "export"}
            assert row["keypoint_error_mm"]["mean"] is not None
    for rel in ("walk_0.bvh", "walk_1.bvh", "sub/walk_2.bvh", "batch.blend"):
        assert (out / rel).is_file(), rel
    assert _blend_actions(out / "batch.blend") >= {"walk_0", "walk_1", "sub/walk_2"}
    assert not partial_files(out)

    # rerun: everything up to date is skipped (the corrupt clip fails again)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.bvh")}
    result = run_cli(*argv)
    assert result.returncode == 1
    report = json.loads((out / "report.json").read_text())
    status = {os.path.basename(r["source"]): r["status"] for r in report["clips"]}
    assert status["walk_0.npz"] == status["walk_1.npz"] == status["walk_2.npz"] == "skipped"
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.bvh")} == mtimes

    # a changed clip is baked again; the others' actions are carried over into the new .blend
    time.sleep(0.05)
    os.utime(src / "walk_1.npz")
    (src / "corrupt.npz").unlink()
    result = run_cli(*argv)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    status = {os.path.basename(r["source"]): r["status"] for r in report["clips"]}
    assert status == {"walk_0.npz": "skipped", "walk_1.npz": "done", "walk_2.npz": "skipped"}
    assert _blend_actions(out / "batch.blend") >= {"walk_0", "walk_1", "sub/walk_2"}

    # --force bakes everything, --pattern selects
    result = run_cli(*argv, "--force", "--pattern", "walk_*.npz", "--report", "-", "-q")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [os.path.basename(r["source"]) for r in report["clips"]] == ["walk_0.npz", "walk_1.npz"]
    assert all(r["status"] == "done" for r in report["clips"])


def test_batch_ctrl_c_leaves_no_partial_outputs(tmp_path):
    src = tmp_path / "clips"
    src.mkdir()
    for i in range(6):
        write_walk_npz(src / "walk_{}.npz".format(i), seconds=8.0)
    out = tmp_path / "out"
    done = interrupt_batch([src, "--target", "rigify", "--out-dir", out, "--export", "bvh", *weights_args()], out,
                           first="walk_0.bvh")
    assert 1 <= len(done) < 6 and all(r["frames"] == 240 for r in done)
    assert not (out / "batch.blend").exists()


def test_bvh_clips_never_load_the_network(run_cli, tmp_path):
    """Clips whose skeleton gives every rotation bake without the network: no torch import, no weights read.

    The weights file is corrupt: the BVH clips (one long enough for the rig
    solve's parallel numpy chunks) are baked onto a BVH skeleton of other
    proportions all the same; a keypoint clip in the same folder, which
    needs the network, fails with the weights' message.
    """
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from source_fixtures import humanoid_bvh
    from test_cli_bake import write_walk_bvh

    src = tmp_path / "clips"
    src.mkdir()
    write_walk_bvh(src / "long.bvh", seconds=10.0)      # 300 frames: several numpy chunks
    write_walk_bvh(src / "short.bvh", seconds=1.0)
    write_walk_npz(src / "points.npz", seconds=1.0)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, frames=1)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a weights file")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    result = run_cli("batch", src, "--target", target, "--out-dir", out, "--export", "bvh", "--no-blend",
                     "--weights", bad, "--report", tmp_path / "report.json", env=env)
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    status = {os.path.basename(r["source"]): r for r in report["clips"]}
    assert status["long.bvh"]["status"] == "done" and status["short.bvh"]["status"] == "done"
    assert status["long.bvh"]["frames"] == 300
    assert status["points.npz"]["status"] == "failed"
    assert "cannot load" in result.stderr and "bad.pt" in result.stderr
    # torch was never imported: not for the BVH clips, and the keypoint clip's weights are read
    # (and refused) without it
    lines = result.stderr.splitlines()
    assert any(line.startswith("import time:") for line in lines)
    assert not [line for line in lines if line.startswith("import time:") and line.endswith("| torch")]
    for name in ("long.bvh", "short.bvh"):
        assert (out / name).is_file()


def test_a_keypoint_batch_on_the_cpu_never_imports_torch(run_cli, tmp_path):
    """Short keypoint clips go through the network and the rig solve in numpy: no torch import."""
    src = tmp_path / "clips"
    src.mkdir()
    write_walk_npz(src / "a.npz", seconds=2.0)
    write_walk_npz(src / "b.npz", seconds=1.0)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    result = run_cli("batch", src, "--target", "rigify", "--out-dir", out, "--export", "bvh", "--no-blend",
                     "--device", "cpu", "--jobs", "1", "--report", tmp_path / "report.json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["status"] for r in report["clips"]] == ["done", "done"]
    assert all(r["start"] == "network" for r in report["clips"]), report["clips"]
    lines = result.stderr.splitlines()
    assert any(line.startswith("import time:") and "neural_ik.model.numpy_net" in line for line in lines)
    assert not [line for line in lines if line.startswith("import time:") and line.endswith("| torch")]
    assert (out / "a.bvh").is_file() and (out / "b.bvh").is_file()


def test_batch_releases_each_clip_once_written(ext, tmp_path):
    """Memory does not grow with the clips: with --no-blend each clip's action is removed once exported
    (the .blend of a batch without --no-blend keeps every clip's action, as it must)."""
    import importlib
    import sys

    import bpy

    sys.path.insert(0, str(REPO / "tests"))
    from source_fixtures import humanoid_bvh
    from test_cli_bake import write_walk_bvh

    src = tmp_path / "clips"
    src.mkdir()
    names = ["walk_{}".format(i) for i in range(3)]
    for name in names:
        write_walk_bvh(src / (name + ".bvh"), seconds=1.0)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, frames=1)
    parser = importlib.import_module(ext.__name__ + ".cli.parser")
    for no_blend in (True, False):
        out = tmp_path / ("exports" if no_blend else "with_blend")
        argv = ["batch", str(src), "--target", str(target), "--out-dir", str(out), "--export", "bvh", "-q"]
        assert parser.main(argv + (["--no-blend"] if no_blend else []), prog=parser.PROG_STANDALONE) == 0
        for name in names:
            assert (out / (name + ".bvh")).is_file()
        kept = set(names) & set(bpy.data.actions.keys())
        if no_blend:
            assert not kept, kept
        else:
            assert kept == set(names)
            assert _blend_actions(out / "batch.blend") >= set(names)


_NO_DASK = r"""
import runpy, sys
sys.modules["dask"] = sys.modules["distributed"] = None  # as where it is not installed: every import fails
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_scheduler_without_dask_says_how_to_install_it(tmp_path):
    """``--scheduler`` where Dask does not import: exit code 2, naming the packages to install."""
    import subprocess
    import sys

    from source_fixtures import humanoid_bvh

    src = tmp_path / "clips"
    src.mkdir()
    write_walk_npz(src / "walk.npz", seconds=0.5)
    humanoid_bvh(tmp_path / "rig.bvh", "studio", "Y", "cm", "A", frames=1)
    argv = ["batch", str(src), "--target", str(tmp_path / "rig.bvh"), "--out-dir", str(tmp_path / "out"),
            "--no-blend", "--export", "bvh", "--scheduler", "local:2"]
    r = subprocess.run([sys.executable, "-c", _NO_DASK, str(REPO / "cli" / "standalone.py"), *argv],
                       capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "--scheduler needs Dask's distributed package" in r.stderr
    assert "pip install dask==" in r.stderr and "distributed==" in r.stderr
    assert not (tmp_path / "out" / "report.json").exists()


def test_batch_of_an_empty_folder_names_what_it_looked_for(run_cli, tmp_path):
    """A folder with no clip in it: the message lists the file types read (before: a traceback,
    a local list shadowing the module that holds them)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("batch", empty, "--target", "rigify", "--out-dir", tmp_path / "out")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "no keypoint files" in result.stderr and ".bvh" in result.stderr and ".npz" in result.stderr
