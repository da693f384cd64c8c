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
from neural_ik.cli import clips, parser  # noqa: E402

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

    bake_job = clips.bake_job
    here = os.getpid()

    def killed_on_boom(job, *a, **k):   # (forked into the workers: the one that takes boom.bvh dies)
        if os.path.basename(job.source) == "boom.bvh":
            assert os.getpid() != here, "boom.bvh baked in the test's own process, not in a worker"
            os.kill(os.getpid(), signal.SIGKILL)
        return bake_job(job, *a, **k)

    monkeypatch.setattr(clips, "bake_job", killed_on_boom)
    out = tmp_path / "two"
    assert _batch(src, out, target, 2) == 1
    rows = {os.path.basename(r["source"]): r for r in json.loads((out / "report.json").read_text())["clips"]}
    assert rows["boom.bvh"]["status"] == "failed", rows["boom.bvh"]
    assert "boom.bvh: not baked: a worker process ended abruptly (killed by signal 9" in rows["boom.bvh"]["error"]
    for name in ("a.bvh", "b.bvh", "c.bvh", "d.bvh"):
        assert rows[name]["status"] == "done", rows[name]
        assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert not (out / "boom.bvh").exists()
    # (besides the record of what the outputs were baked from: cli/fingerprint.py)
    assert sorted(p.name for p in out.iterdir()) == [".neural_ik_batch.json", "a.bvh", "b.bvh", "c.bvh", "d.bvh",
                                                     "report.json"]


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


def test_a_files_armature_measures_while_its_exports_are_written(tmp_path, monkeypatch):
    """Onto a BVH target (no Blender) a clip's figures are measured on a second thread while its keys
    are written and its BVH exported (BakeJob.run's after_keys). The files and the report's figures
    are those of the bake done one stage after the other (a clip longer than OVERLAP_MAX_FRAMES);
    an export that cannot be written still fails its clip, named, and the next clip is baked."""
    from neural_ik.blender_io import bake as bake_io

    src = _clips(tmp_path / "clips", ["a.bvh", "b.bvh"], frames=60)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "studio", "Y", "cm", "A", frames=1)
    calls = []
    run = bake_io.BakeJob.run

    def spy(self, *a, **k):
        calls.append(k.get("after_keys") is not None and self.n_frames <= bake_io.OVERLAP_MAX_FRAMES)
        return run(self, *a, **k)

    monkeypatch.setattr(bake_io.BakeJob, "run", spy)
    assert _batch(src, tmp_path / "overlap", target, 1) == 0
    assert calls == [True, True]
    monkeypatch.setattr(bake_io, "OVERLAP_MAX_FRAMES", 0)
    assert _batch(src, tmp_path / "serial", target, 1) == 0
    assert calls[2:] == [False, False]
    reports = [json.loads((tmp_path / d / "report.json").read_text())["clips"] for d in ("overlap", "serial")]
    for a, b in zip(*reports):
        assert a["status"] == b["status"] == "done"
        for key in ("keypoint_error_mm", "jitter", "foot_sliding_mm", "bone_direction_error_deg", "warnings"):
            assert a[key] == b[key], key
    for name in ("a.bvh", "b.bvh"):
        assert (tmp_path / "overlap" / name).read_bytes() == (tmp_path / "serial" / name).read_bytes(), name
    # an export that fails while the figures are measured (a disk full, say)
    monkeypatch.undo()
    from neural_ik.blender_io import export
    from neural_ik.errors import UserError

    write = export.write_keys_bvh

    def full_disk(armature, result, path, *a, **k):
        if os.path.basename(path) == "a.bvh":
            raise UserError("{}: cannot write (No space left on device)".format(path))
        return write(armature, result, path, *a, **k)

    monkeypatch.setattr(export, "write_keys_bvh", full_disk)
    out = tmp_path / "full"
    assert _batch(src, out, target, 1) == 1
    rows = {os.path.basename(r["source"]): r for r in json.loads((out / "report.json").read_text())["clips"]}
    assert rows["a.bvh"]["status"] == "failed" and "a.bvh" in rows["a.bvh"]["error"], rows["a.bvh"]
    assert rows["b.bvh"]["status"] == "done"


def test_headline_names_effectors_only_for_bakes_from_effectors():
    from neural_ik.cli.report import headline

    row = {"floor_error_cm": 0.3, "effector_reach_mm": {"mean": 1.0, "max": 6.5}, "bone_direction_error_deg": 0.8}
    assert "effectors within" not in headline(dict(row, mode="dense"))
    assert "effectors within 6.5 mm" in headline(dict(row, mode="sparse"))
