"""``batch --scheduler``: the clips of a batch as tasks of a Dask cluster (a LocalCluster of 2 workers here).

- The cluster writes, byte for byte, the files one local process writes, and
  the same report rows (a corrupt clip fails alone, named; exit code 1).
- Faults: a worker killed mid-clip has its clip run again on another worker
  (then failed, naming the worker, when it dies again); a clip the worker
  cannot read fails naming the worker and the path; Ctrl-C stops the
  workers (exit code 130, the report of what finished, no temporary file).
- What the workers cannot bake (a ``.blend``, Blender's exporters) is refused
  with exit code 2, naming the flag to change; Dask is never imported by the
  extension, only by the ``--scheduler`` path.
"""

import json
import os
import subprocess
import sys

import pytest

from test_batch_jobs import _rows, _target
from test_cli_bake import REPO, interrupt_batch, needs_weights, partial_files, weights_args, write_walk_bvh, \
    write_walk_npz

pytest.importorskip("distributed", reason="dask[distributed] is not installed (./setup.sh installs it)")

pytestmark = needs_weights


def _folder(tmp_path, n_npz=2):
    src = tmp_path / "clips"
    src.mkdir()
    for i in range(n_npz):
        write_walk_npz(src / "walk_{}.npz".format(i), seconds=0.6 + 0.1 * i)
    write_walk_bvh(src / "run.bvh", seconds=0.6)
    return src


def _report(out):
    return json.loads((out / "report.json").read_text())


def test_the_cluster_writes_what_one_process_writes(run_cli, tmp_path):
    src = _folder(tmp_path)
    (src / "corrupt.npz").write_bytes(b"\x00not an archive")
    target = _target(tmp_path)
    outs = {}
    for how in (["--jobs", "1"], ["--scheduler", "local:2"]):
        out = tmp_path / ("out" + how[1].replace(":", "_"))
        r = run_cli("batch", src, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh", *how,
                    *weights_args())
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and "corrupt.npz" in r.stderr
        assert ("baking 4 clips on 2 Dask workers (local:2)" in r.stderr) == (how[0] == "--scheduler")
        assert "4 clips: 3 done, 0 skipped, 1 failed" in r.stderr
        outs[how[0]] = out
    files = sorted(p.name for p in outs["--jobs"].glob("*.bvh"))
    assert files == ["run.bvh", "walk_0.bvh", "walk_1.bvh"]
    assert files == sorted(p.name for p in outs["--scheduler"].glob("*.bvh"))
    for name in files:
        assert (outs["--jobs"] / name).read_bytes() == (outs["--scheduler"] / name).read_bytes(), name
    assert _rows(outs["--jobs"] / "report.json") == _rows(outs["--scheduler"] / "report.json")
    rows = _report(outs["--scheduler"])["clips"]
    assert all(r["worker"].startswith("tcp://") for r in rows if r["status"] == "done")
    assert not partial_files(outs["--scheduler"])
    # a rerun skips what is up to date, as the local batch does
    r = run_cli("batch", src, "--target", target, "--out-dir", outs["--scheduler"], "--no-blend", "--export", "bvh",
                "--scheduler", "local:2", *weights_args())
    assert r.returncode == 1, r.stderr
    status = {os.path.basename(r["source"]): r["status"] for r in _report(outs["--scheduler"])["clips"]}
    assert status == {"corrupt.npz": "failed", "run.bvh": "skipped", "walk_0.npz": "skipped",
                      "walk_1.npz": "skipped"}


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux's /proc")
def test_a_killed_workers_clip_is_run_again_and_faults_name_the_worker(run_cli, tmp_path):
    src = _folder(tmp_path, n_npz=3)
    # a file every process lists but none can read (reading /proc/self/mem at 0 fails, even for root)
    os.symlink("/proc/self/mem", src / "unreadable.npz")
    record = tmp_path / "deaths.txt"
    env = dict(os.environ, NEURAL_IK_TEST_KILL="walk_0.npz:1,walk_1.npz:9", NEURAL_IK_TEST_KILL_RECORD=str(record))
    out = tmp_path / "out"
    r = run_cli("batch", src, "--target", _target(tmp_path), "--out-dir", out, "--no-blend", "--export", "bvh",
                "--scheduler", "local:2", *weights_args(), env=env)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    deaths = [line.split() for line in record.read_text().splitlines()]
    rows = {os.path.basename(r["source"]): r for r in _report(out)["clips"]}
    assert [d[0] for d in deaths].count("walk_0.npz") == 1, (deaths, rows)    # killed once, then baked
    assert [d[0] for d in deaths].count("walk_1.npz") == 2, (deaths, rows)    # killed, run again, killed again
    assert {k: v["status"] for k, v in rows.items()} == {
        "run.bvh": "done", "walk_0.npz": "done", "walk_1.npz": "failed", "walk_2.npz": "done",
        "unreadable.npz": "failed"}
    assert "ended abruptly twice, the last time tcp://" in rows["walk_1.npz"]["error"]
    error = rows["unreadable.npz"]["error"]
    assert str(src / "unreadable.npz") in error and "worker tcp://" in error and "cannot read the input" in error
    assert sorted(p.name for p in out.glob("*.bvh")) == ["run.bvh", "walk_0.bvh", "walk_2.bvh"]
    assert not partial_files(out)


def test_ctrl_c_stops_the_cluster(tmp_path):
    src = tmp_path / "clips"
    src.mkdir()
    for i in range(6):
        write_walk_bvh(src / "walk_{}.bvh".format(i), seconds=8.0 + 0.1 * i)
    out = tmp_path / "out"
    done = interrupt_batch([src, "--target", _target(tmp_path), "--out-dir", out, "--no-blend", "--export", "bvh",
                            "--scheduler", "local:2"], out, first="walk_*.bvh")
    assert 1 <= len(done) < 6
    statuses = {r["status"] for r in _report(out)["clips"]}
    assert statuses <= {"done", "interrupted", "not run"}


@pytest.mark.parametrize("argv, fragment", [
    ([], "add --no-blend"),
    (["--no-blend", "--export", "fbx"], "--export fbx goes through Blender's exporter"),
    (["--no-blend", "--export", "bvh", "--target", "rigify"], "give a .bvh target"),
    (["--no-blend", "--export", "bvh", "--scheduler", "local:0"], "local:N needs N"),
])
def test_what_the_workers_cannot_bake_is_refused(run_cli, tmp_path, argv, fragment):
    src = _folder(tmp_path, n_npz=1)
    argv = ["--target", _target(tmp_path), "--scheduler", "local:2"] + argv
    r = run_cli("batch", src, "--out-dir", tmp_path / "out", *argv)
    assert r.returncode == 2, r.stderr
    assert fragment in r.stderr and "Traceback" not in r.stderr


def test_only_the_scheduler_path_imports_dask():
    """Every module of the extension imports without Dask loading (cli/cluster_task.py is the
    --scheduler path's own, imported when it runs)."""
    code = r"""
import pkgutil, importlib, sys
sys.path.insert(0, sys.argv[1] + "/cli")
import standalone
pkg = standalone.load_package(sys.argv[1])
for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
    if info.name.split(".")[1] not in ("training", "benchmarks", "tests") and not info.name.endswith("cluster_task"):
        importlib.import_module(info.name)
importlib.import_module(pkg.__name__ + ".cli.parser").build_parser()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")))
"""
    r = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
