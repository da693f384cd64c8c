"""``batch --jobs``: clips baked in worker processes where the bake needs no Blender.

- Two processes write, byte for byte, the files one process writes, and the
  same report (a corrupt clip fails alone, named, exit code 1).
- Ctrl-C stops the workers: exit code 130, no temporary files, the report
  lists what completed, every file left behind is whole.
- A bake through Blender (a ``.blend`` asked for) goes one clip at a time
  and says so when ``--jobs`` asked for more.
- Fewer workers where memory is short.
"""

import json
import os
import sys


from test_cli_bake import REPO, interrupt_batch, partial_files, write_walk_bvh

sys.path.insert(0, str(REPO / "tests"))


def _clips(folder, n, seconds=1.0):
    folder.mkdir()
    for i in range(n):
        write_walk_bvh(folder / "walk_{}.bvh".format(i), seconds=seconds + 0.1 * i)
    return folder


def _target(tmp_path):
    from source_fixtures import humanoid_bvh

    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "studio", "Y", "cm", "A", frames=1)
    return target


def _rows(path):
    rows = json.loads(path.read_text())["clips"]
    keep = ("source", "status", "frames", "fps", "floor_error_cm", "bone_direction_error_deg", "joint_error_mm",
            "error", "warnings")
    return [{k: r.get(k) for k in keep} for r in rows]


def test_two_processes_write_what_one_writes(run_cli, tmp_path):
    src = _clips(tmp_path / "clips", 4)
    (src / "corrupt.bvh").write_text("HIERARCHY\nROOT Hips\n{\n  OFFSET 0 0\n")
    target = _target(tmp_path)
    outs = {}
    for jobs in (1, 2):
        out = tmp_path / "out_{}".format(jobs)
        r = run_cli("batch", src, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh",
                    "--jobs", jobs)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and "corrupt.bvh" in r.stderr
        assert ("baking 5 clips in 2 processes" in r.stderr) == (jobs == 2)
        outs[jobs] = out
    files = sorted(p.name for p in outs[1].glob("*.bvh"))
    assert files == ["walk_{}.bvh".format(i) for i in range(4)]
    assert files == sorted(p.name for p in outs[2].glob("*.bvh"))
    for name in files:
        assert (outs[1] / name).read_bytes() == (outs[2] / name).read_bytes(), name
    assert _rows(outs[1] / "report.json") == _rows(outs[2] / "report.json")
    assert not partial_files(outs[2])


def test_ctrl_c_stops_the_workers(tmp_path):
    src = _clips(tmp_path / "clips", 8, seconds=12.0)
    out = tmp_path / "out"
    done = interrupt_batch([src, "--target", _target(tmp_path), "--out-dir", out, "--no-blend", "--export", "bvh",
                            "--jobs", "2"], out, first="walk_*.bvh")
    assert 1 <= len(done) < 8
    statuses = {r["status"] for r in json.loads((out / "report.json").read_text())["clips"]}
    assert statuses <= {"done", "interrupted", "not run"}


def test_a_bake_through_blender_goes_one_clip_at_a_time(run_cli, tmp_path):
    src = _clips(tmp_path / "clips", 2, seconds=0.5)
    out = tmp_path / "out"
    r = run_cli("batch", src, "--target", _target(tmp_path), "--out-dir", out, "--export", "bvh", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    assert "--jobs 2: one clip at a time: the bake goes through Blender" in r.stderr
    assert (out / "batch.blend").is_file()


def test_fewer_workers_where_memory_is_short(ext, tmp_path, monkeypatch):
    import argparse
    import importlib

    clips = importlib.import_module(ext.__name__ + ".cli.clips")
    workers = importlib.import_module(ext.__name__ + ".cli.workers")
    targets = importlib.import_module(ext.__name__ + ".blender_io.targets")
    src = _clips(tmp_path / "clips", 6, seconds=0.5)
    target = targets.direct_target(str(_target(tmp_path)))
    assert target is not None
    jobs = [clips.ClipJob(str(p), str(src), str(tmp_path / "out"), ["bvh"], p.stem) for p in sorted(src.iterdir())]
    args = argparse.Namespace(jobs=4)
    sources = importlib.import_module(ext.__name__ + ".cli.sources")
    longest = max(sources.peek_frame_count(job.source) for job in jobs)
    need = workers.WORKER_BASE_BYTES + workers.WORKER_FRAME_BYTES * longest
    monkeypatch.setattr(workers, "_available_memory", lambda: 10 * need)
    # (this test runs in Blender's bpy, where clips go one at a time; the rule is checked as outside it)
    assert workers.worker_count(args, target, jobs, in_blender=False) == 4
    assert workers.worker_count(args, target, jobs) == 1
    monkeypatch.setattr(workers, "_available_memory", lambda: 2.5 * need)
    assert workers.worker_count(args, target, jobs, in_blender=False) == 2
    monkeypatch.setattr(workers, "_available_memory", lambda: 0.5 * need)
    assert workers.worker_count(args, target, jobs, in_blender=False) == 1
    monkeypatch.setattr(workers, "_available_memory", lambda: None)
    assert workers.worker_count(argparse.Namespace(jobs=9), target, jobs[:3], in_blender=False) == 3


def test_a_killed_workers_temporary_files_are_found_by_name(ext, tmp_path):
    """What a killed worker leaves (atomic_output's temporary file, Blender's backup of it) goes; the
    outputs themselves and other clips' files stay."""
    import importlib

    outputs = importlib.import_module(ext.__name__ + ".outputs")
    out = tmp_path / "walk [1].bvh"          # glob characters in the name
    keep = [tmp_path / "walk [1].bvh", tmp_path / "walk.bvh", tmp_path / ".walk.x.partial.fbx"]
    for p in keep:
        p.write_text("x")
    with outputs.atomic_output(str(out)) as tmp:
        for left in (tmp, tmp + "1"):
            open(left, "w").write("half")
        outputs.remove_partials(str(out))
        assert not any(os.path.exists(p) for p in (tmp, tmp + "1"))
        open(tmp, "w").write("whole")           # (the writer finishes: renamed as usual)
    assert all(p.exists() for p in keep) and out.read_text() == "whole"
