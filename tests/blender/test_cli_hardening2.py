"""``./neural-ik`` against a hostile user, second round (issue 35): stale batch skips, two batches in one
folder, long output names, SIGTERM, links in INPUT_DIR, sources that are not files, CUDA asked for
without CUDA, absurd flags and files refused before any work.

Batches onto a BVH skeleton with ``--no-blend --export bvh`` run without Blender and without the
network (seconds); the rest bake short clips onto the meta-rig.
"""

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from source_fixtures import humanoid_bvh
from test_cli_bake import REPO, needs_weights, partial_files, weights_args, write_walk_npz


def _no_traceback(result):
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


def _bvh_folder(tmp_path, n=2, frames=12):
    clips = tmp_path / "clips"
    clips.mkdir(exist_ok=True)
    for i in range(n):
        humanoid_bvh(clips / "walk_{}.bvh".format(i), frames=frames, seed=i)
    target, _ = humanoid_bvh(tmp_path / "target.bvh", scheme="studio", frames=2)
    return clips, target


def _rows(out):
    report = json.loads((out / "report.json").read_text())
    return {os.path.basename(r["source"]): r for r in report["clips"]}, report["summary"]


# ---------------------------------------------------------------------------
# 3. a rerun with other settings, another target or other weights bakes again, saying why


def test_batch_rerun_bakes_again_when_what_it_bakes_from_changes(run_cli, tmp_path):
    clips, target = _bvh_folder(tmp_path)
    out = tmp_path / "out"
    argv = ["batch", clips, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh", "-q"]
    assert run_cli(*argv).returncode == 0
    rows, _ = _rows(out)
    assert {r["status"] for r in rows.values()} == {"done"}
    result = run_cli(*argv)
    assert result.returncode == 0, result.stderr
    assert {r["status"] for r in _rows(out)[0].values()} == {"skipped"}

    def rerun(*extra, why):
        result = run_cli(*argv, *extra)
        assert result.returncode == 0, result.stderr
        rows, _ = _rows(out)
        assert {r["status"] for r in rows.values()} == {"done"}, rows
        assert all(any(why in w for w in r["warnings"]) for r in rows.values()), rows
        assert why in result.stderr or "-q" in argv

    rerun("--no-foot-lock", why="--foot-lock True -> False")
    other, _ = humanoid_bvh(tmp_path / "other.bvh", scheme="asf", frames=2)
    argv[3] = other
    rerun("--no-foot-lock", why="the target {} changed".format(other))
    weights = tmp_path / "other_weights.pt"
    shutil.copy(str(REPO / "weights" / "neural_ik.pt"), str(weights))
    with open(weights, "ab") as fh:
        fh.write(b"\0")
    rerun("--no-foot-lock", "--weights", weights, why="the network weights changed")
    # and the same settings again: skipped
    result = run_cli(*argv, "--no-foot-lock", "--weights", weights)
    assert {r["status"] for r in _rows(out)[0].values()} == {"skipped"}, result.stderr


# ---------------------------------------------------------------------------
# 4. a lock file guards the output folder


def _hold_lock(folder, pid):
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(folder / ".neural_ik.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, json.dumps({"pid": pid, "host": socket.gethostname(), "command": "batch",
                             "started": "2000-01-01 00:00:00"}).encode())
    return fd


def test_second_batch_into_a_folder_is_refused_and_a_stale_lock_taken_over(run_cli, tmp_path):
    clips, target = _bvh_folder(tmp_path)
    out = tmp_path / "out"
    argv = ["batch", clips, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh"]
    fd = _hold_lock(out, os.getpid())
    try:
        result = run_cli(*argv)
    finally:
        os.close(fd)
    assert result.returncode == 1, result.stderr
    _no_traceback(result)
    assert str(out / ".neural_ik.lock") in result.stderr and "process {}".format(os.getpid()) in result.stderr
    assert not (out / "report.json").exists() and not list(out.glob("*.bvh"))
    # a lock left by a process that has ended
    dead = subprocess.Popen(["true"])
    dead.wait()
    (out / ".neural_ik.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    result = run_cli(*argv)
    assert result.returncode == 0, result.stderr
    assert "took over" in result.stderr and str(dead.pid) in result.stderr
    assert not (out / ".neural_ik.lock").exists()
    # two at once: one of them is refused, the report is the other's, whole
    procs = [subprocess.Popen([str(REPO / "neural-ik"), *map(str, argv), "--force"], stderr=subprocess.PIPE,
                              text=True, cwd=str(REPO)) for _ in range(2)]
    codes = sorted((p.wait(timeout=300), p.stderr.read()) for p in procs)
    if codes[1][0] == 1:   # (the first may end before the second starts: then both run)
        assert codes[0][0] == 0 and "another neural-ik batch" in codes[1][1]
    assert {r["status"] for r in _rows(out)[0].values()} == {"done"}


# ---------------------------------------------------------------------------
# 7. long output names


def test_long_output_names_work_or_are_refused_before_any_work(run_cli, tmp_path):
    src, _ = humanoid_bvh(tmp_path / "walk.bvh", frames=12)
    target, _ = humanoid_bvh(tmp_path / "target.bvh", scheme="studio", frames=2)
    long_ok = tmp_path / ("a" * 246 + ".bvh")           # 250 bytes: fits, its temporary name too
    result = run_cli("bake", src, "--target", target, "--export", long_ok, "-q")
    assert result.returncode == 0, result.stderr
    assert long_ok.is_file() and not partial_files(tmp_path)
    too_long = tmp_path / ("b" * 256 + ".bvh")
    result = run_cli("bake", src, "--target", target, "--export", too_long)
    assert result.returncode == 2 and "file name too long" in result.stderr and "clip 1/1" not in result.stderr
    _no_traceback(result)


# ---------------------------------------------------------------------------
# 8. SIGTERM like Ctrl-C


@needs_weights
def test_sigterm_during_a_batch_cleans_up_and_reports(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(3):
        write_walk_npz(clips / "walk_{}.npz".format(i), seconds=1.0)
    out = tmp_path / "out"
    proc = subprocess.Popen([str(REPO / "neural-ik"), "batch", str(clips), "--target", "rigify", "--out-dir",
                             str(out), "--export", "bvh", "--export", "fbx", *weights_args()],
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    deadline = time.time() + 300
    while not list(out.glob("*.bvh")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr, stderr
    assert "SIGTERM" in stderr, stderr
    assert not partial_files(out)
    rows, summary = _rows(out)
    assert summary["interrupted"] is True and summary["signal"] == "SIGTERM"
    done = [r for r in rows.values() if r["status"] == "done"]
    listed = sorted(os.path.basename(p) for r in done for p in r["outputs"])
    assert sorted(p.name for p in out.glob("walk_*")) == listed


@needs_weights
def test_sigterm_during_a_bake_cleans_up_and_reports(tmp_path):
    src = tmp_path / "long.npz"
    write_walk_npz(src, seconds=20.0)
    proc = subprocess.Popen([str(REPO / "neural-ik"), "bake", str(src), "--target", "rigify", "--out",
                             str(tmp_path / "o.blend"), "--report", str(tmp_path / "r.json"), *weights_args()],
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    deadline = time.time() + 120
    first = proc.stderr.readline()   # (the progress line: the run's handlers are in place)
    while "clip 1/1" not in first:
        assert time.time() < deadline and first, proc.communicate()
        first = proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["clips"][0]["status"] == "interrupted" and report["summary"]["signal"] == "SIGTERM"
    assert not (tmp_path / "o.blend").exists() and not partial_files(tmp_path)


# ---------------------------------------------------------------------------
# 12. links in INPUT_DIR; 13. a SOURCE that is not a file


def test_batch_names_every_link_it_does_not_bake(run_cli, tmp_path):
    clips, target = _bvh_folder(tmp_path, n=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    humanoid_bvh(elsewhere / "linked_walk.bvh", frames=12)
    os.symlink("missing.bvh", clips / "dangling.bvh")
    os.symlink("loop.bvh", clips / "loop.bvh")
    os.symlink(str(elsewhere), clips / "more")        # a linked folder: searched
    os.symlink("..", clips / "up")                     # holds INPUT_DIR: not followed
    out = tmp_path / "out"
    result = run_cli("batch", clips, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh")
    assert result.returncode == 1, result.stderr
    _no_traceback(result)
    rows, summary = _rows(out)
    assert rows["walk_0.bvh"]["status"] == rows["linked_walk.bvh"]["status"] == "done"
    assert (out / "more" / "linked_walk.bvh").is_file()
    assert rows["dangling.bvh"]["status"] == "failed" and "broken symbolic link" in rows["dangling.bvh"]["error"]
    assert rows["loop.bvh"]["status"] == "failed" and "loop" in rows["loop.bvh"]["error"]
    assert rows["up"]["status"] == "skipped" and "holds INPUT_DIR" in rows["up"]["reason"]
    assert summary["failed"] == 2 and "dangling.bvh" in result.stderr


def test_source_that_is_not_a_file_is_named(run_cli, tmp_path):
    (tmp_path / "folder.npz").mkdir()
    os.mkfifo(tmp_path / "fifo.npz")
    os.symlink("loop.npz", tmp_path / "loop.npz")
    for name, words in (("folder.npz", "is a folder"), ("fifo.npz", "FIFO"), ("loop.npz", "symbolic link loop")):
        result = run_cli("bake", tmp_path / name, "--target", "rigify", timeout=60)
        assert result.returncode == 2 and words in result.stderr and name in result.stderr, result.stderr
        _no_traceback(result)
    result = run_cli("batch", tmp_path / "fifo.npz", "--target", "rigify", "--out-dir", tmp_path / "o")
    assert result.returncode == 2 and "FIFO" in result.stderr


# ---------------------------------------------------------------------------
# 2, 5, 6, 9, 11, 15: refused or read, before any work


def test_absurd_flags_and_files_are_refused_before_any_work(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    for flag, value in (("--scale", "1e300"), ("--scale", "1e6"), ("--fps", "1e-9")):
        result = run_cli("bake", src, "--target", "rigify", flag, value, "--out", tmp_path / "o.blend")
        assert result.returncode == 2 and flag in result.stderr and "outside" in result.stderr, result.stderr
        _no_traceback(result)
    big = tmp_path / "big.json"
    big.write_text('{"fps": 30, "frames": [[1' + "1" * 100_000 + "]]}")
    result = run_cli("bake", big, "--target", "rigify", "--report", tmp_path / "r.json")
    assert result.returncode == 1 and "big.json" in result.stderr and "too long" in result.stderr
    _no_traceback(result)
    assert json.loads((tmp_path / "r.json").read_text())["clips"][0]["status"] == "failed"
    lay = tmp_path / "lay.json"
    lay.write_text('{"a": ' + "1" * 100_000 + "}")
    result = run_cli("bake", src, "--target", "rigify", "--layout", lay)
    assert result.returncode == 2 and "lay.json" in result.stderr
    import io

    import numpy as np

    head = io.BytesIO()
    np.lib.format.write_array_header_2_0(head, {"descr": "<f8", "fortran_order": False,
                                                "shape": (1000, 100_000_000, 3)})
    huge = tmp_path / "huge.npy"
    huge.write_bytes(head.getvalue() + b"\0" * 64)
    result = run_cli("bake", huge, "--target", "rigify", "--layout", "coco17")
    assert result.returncode == 1 and "huge.npy" in result.stderr and "GiB" in result.stderr
    _no_traceback(result)


def test_bom_bvh_and_minus_z_up_axis_bake(run_cli, tmp_path):
    src, _ = humanoid_bvh(tmp_path / "plain.bvh", frames=12, up="-Z")
    bom = tmp_path / "bom.bvh"
    bom.write_bytes(b"\xef\xbb\xbf" + open(src, "rb").read())
    target, _ = humanoid_bvh(tmp_path / "target.bvh", scheme="studio", frames=2, up="-Y")
    result = run_cli("bake", bom, "--target", target, "--up-axis", "-Z", "--target-up-axis", "-Y",
                     "--export", tmp_path / "o.bvh", "--report", "-", "-q")
    assert result.returncode == 0, result.stderr
    _no_traceback(result)
    row = json.loads(result.stdout)["clips"][0]
    assert row["status"] == "done" and row["frames"] == 12 and (tmp_path / "o.bvh").is_file()
    assert row["upright_share"] == 1.0, row


# ---------------------------------------------------------------------------
# 16. --device cuda without CUDA


@needs_weights
def test_cuda_asked_without_cuda_is_one_line_and_reported(run_cli, tmp_path):
    from _pkg import pkg

    pkg()
    from neural_ik.device import cuda_available

    if cuda_available():
        pytest.skip("CUDA is available here")
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    result = run_cli("bake", src, "--target", "rigify", "--device", "cuda", "--report", tmp_path / "r.json", "-q",
                     *weights_args())
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--device cuda" in lines[0] and "CPU" in lines[0], lines
    assert "RuntimeWarning" not in result.stderr and "warnings.warn" not in result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert "CUDA is not available" in report["summary"]["device_fallback"]
    assert any("--device cuda" in w for w in report["clips"][0]["warnings"])


@needs_weights
def test_sigint_during_the_blend_save_is_not_lost(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    write_walk_npz(clips / "walk.npz", seconds=0.5)
    out = tmp_path / "out"
    proc = subprocess.Popen([str(REPO / "neural-ik"), "batch", str(clips), "--target", "rigify", "--out-dir",
                             str(out), *weights_args()], stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    deadline = time.time() + 300
    while not list(out.glob(".batch.*partial.blend*")):   # Blender is saving the .blend
        if proc.poll() is not None:
            pytest.skip("the save ended before it was seen (a fast disk)")
        assert time.time() < deadline
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    rows, summary = _rows(out)
    assert summary["interrupted"] is True and summary["signal"] == "SIGINT"
    assert not partial_files(out)
    if summary["blend"] is not None:   # the save completed: the file is whole and listed
        assert (out / "batch.blend").is_file() and str(out / "batch.blend") in rows["walk.npz"]["outputs"]


@needs_weights
def test_keys_are_never_inf_or_nan(bake):
    """--scale is bounded on the command line; the bake itself refuses to write a key Blender cannot draw."""
    import addon_utils
    import bpy

    from _pkg import pkg

    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints

    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.active_object
    with pytest.raises(bake.BakeError) as err:
        bake.bake_keypoints(obj, walk_keypoints(0.5, 30.0), None, 30.0, bake.BakeOptions(scale=1e300),
                            source_name="walk")
    assert "non-finite" in str(err.value) and "--scale" in str(err.value)
    assert not bpy.data.actions, "a half-made action was left"
