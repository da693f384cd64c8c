"""``batch --jobs 2`` without Blender: clips baked in forked worker processes (BVH in, BVH out).

- A worker that dies in the middle of a clip (killed: out of memory) fails
  that clip alone, named; another process takes the clips that are left,
  and they are baked as one process bakes them.
- Workers forked from a process whose torch thread pool ran do not hang.
"""

import json
import os
import pathlib
import signal

from _pkg import pkg
from source_fixtures import humanoid_bvh

pkg()
from neural_ik.cli import batch, parser  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


def _clips(folder, names, frames=40):
    folder.mkdir()
    for i, name in enumerate(names):
        humanoid_bvh(folder / name, "mixamo", "Y", "cm", frames=frames + 5 * i, seed=i)
    return folder


def _batch(src, out, target, jobs):
    return parser.main(["batch", str(src), "--target", str(target), "--out-dir", str(out), "--no-blend",
                        "--export", "bvh", "--jobs", str(jobs), "--device", "cpu", "-q"])


def test_a_worker_killed_in_a_clip_fails_that_clip_alone(tmp_path, monkeypatch):
    names = ["a.bvh", "b.bvh", "boom.bvh", "c.bvh", "d.bvh"]
    src = _clips(tmp_path / "clips", names)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "studio", "Y", "cm", "A", frames=1)
    assert _batch(src, tmp_path / "one", target, 1) == 0

    bake_job = batch._bake_job
    here = os.getpid()

    def killed_on_boom(job, *a, **k):   # (forked into the workers: the one that takes boom.bvh dies)
        if os.path.basename(job.source) == "boom.bvh":
            assert os.getpid() != here, "boom.bvh baked in the test's own process, not in a worker"
            os.kill(os.getpid(), signal.SIGKILL)
        return bake_job(job, *a, **k)

    monkeypatch.setattr(batch, "_bake_job", killed_on_boom)
    out = tmp_path / "two"
    assert _batch(src, out, target, 2) == 1
    rows = {os.path.basename(r["source"]): r for r in json.loads((out / "report.json").read_text())["clips"]}
    assert rows["boom.bvh"]["status"] == "failed", rows["boom.bvh"]
    assert "boom.bvh: not baked: a worker process ended abruptly (killed by signal 9" in rows["boom.bvh"]["error"]
    for name in ("a.bvh", "b.bvh", "c.bvh", "d.bvh"):
        assert rows[name]["status"] == "done", rows[name]
        assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert not (out / "boom.bvh").exists()
    assert sorted(p.name for p in out.iterdir()) == ["a.bvh", "b.bvh", "c.bvh", "d.bvh", "report.json"]


def test_workers_forked_from_a_process_whose_torch_ran(tmp_path):
    """A process that ran torch's thread pool before the batch (a pipeline's own tool, this test run)
    forks workers whose copy of that pool is dead: a rig solve on it waited forever. The workers
    set torch to one thread. (In a process of its own, with a time limit: a hang fails the test.)"""
    import subprocess
    import sys

    script = "\n".join([
        "import sys",
        "sys.path[:0] = {!r}".format([str(p) for p in (REPO, REPO / "tests", REPO / "tests" / "pure")]),
        "from _pkg import pkg",
        "pkg()",
        "import torch",
        "a = torch.randn(1500, 1500)",
        "(a @ a).sum()",                     # (the pool's threads started)
        "from neural_ik.cli import parser",
        "sys.exit(parser.main(sys.argv[1:]))",
    ])
    src = _clips(tmp_path / "clips", ["a.bvh", "b.bvh", "c.bvh"], frames=60)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "studio", "Y", "cm", "A", frames=1)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-c", script, "batch", str(src), "--target", str(target), "--out-dir",
                        str(out), "--no-blend", "--export", "bvh", "--jobs", "2", "--device", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "baking 3 clips in 2 processes" in r.stderr
    assert sorted(p.name for p in out.glob("*.bvh")) == ["a.bvh", "b.bvh", "c.bvh"]
