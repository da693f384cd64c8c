"""``batch --scheduler`` against ``batch --jobs``: the Dask overhead per clip and the scaling.

Writes ``--clips`` (default 40) keypoint clips of ``--frames`` frames
(default 200, 30 fps: the procedural walk, varied cadence and turn, as
canonical ``.npz`` positions) and a target ``.bvh`` of the canonical
skeleton into a temporary folder (deleted at the end, never committed), then
bakes them with

    ./neural-ik batch CLIPS --target rig.bvh --out-dir OUT --no-blend --export bvh --force --device cpu HOW

for HOW in ``--jobs 1``, ``--jobs 2``, ``--scheduler local:1`` and
``--scheduler local:2``: whole processes timed from outside (start, the
LocalCluster's start and close, every worker's load of the network, the
bakes, the report), alternately, ``--repeats`` times (default 3), medians.

The table gives wall seconds, frames per second, the scaling from one
worker to two, ``cluster start`` (the time from the process start to its
"baking N clips on W Dask workers" line: the LocalCluster up, before any
worker loaded the network), the time outside the bakes per clip ((wall -
the report's bake seconds of every clip / workers) / clips: start, cluster,
scheduling, waits) and the Dask overhead per clip: that time of
``--scheduler local:N`` less that of ``--jobs N``. It compares the time
around the bakes, not the bakes themselves: ``--jobs 1`` bakes in the
command's own process, with the threads of torch and of the rig solve,
while the workers of ``--jobs 2`` and of Dask bake on one thread each; on
a machine whose cores other jobs keep busy, the bakes' own seconds differ
between the two for that reason alone.

    .venv/bin/python benchmarks/bench_cluster.py [--clips 40] [--frames 200] [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from _pkg import REPO, import_package

RUNS = (("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"]),
        ("local:1", ["--scheduler", "local:1"]), ("local:2", ["--scheduler", "local:2"]))


def make_set(folder, clips, frames, fps=30.0):
    """The clips and ``rig.bvh`` (the canonical skeleton, Y up, metres) in ``folder``; returns the target."""
    import_package()
    from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations
    from neural_ik.model.bvh import frames_from_rotations, write_bvh
    from neural_ik.model.skeleton import JOINTS, KEYPOINTS, PARENTS, REST_OFFSETS

    src = os.path.join(folder, "clips")
    os.makedirs(src)
    rng = np.random.default_rng(0)
    for i in range(clips):
        kp = walk_keypoints(frames / fps, fps, cadence=float(rng.uniform(0.8, 1.0)),
                            turn_degrees=float(rng.uniform(-90, 90)))[:frames]
        np.savez(os.path.join(src, "walk_{:02d}.npz".format(i)), positions=kp, joint_names=np.array(KEYPOINTS),
                 fps=fps)
    c = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]])   # Blender (x, y, z) -> BVH (x, z, -y)
    rot = walk_rotations(1 / fps, fps)[:1]
    offsets = REST_OFFSETS @ c.T
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + [
        ("Zrotation", "Xrotation", "Yrotation")] * (len(JOINTS) - 1)
    trans = offsets[None].copy()
    trans[:, 0] = walk_keypoints(1 / fps, fps)[:1, 0] @ c.T
    target = os.path.join(folder, "rig.bvh")
    write_bvh(target, list(JOINTS), PARENTS, offsets, channels,
              frames_from_rotations(channels, c @ rot @ c.T, trans), frame_time=1.0 / fps)
    return src, target


def run_once(src, target, out, how):
    """``(wall, start, close, report)`` of one whole process: its seconds, those to its first "baking" or
    "clip" line, those after its last clip's "done" line."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(REPO, "neural-ik"), "batch", src, "--target", target, "--out-dir", out, "--no-blend",
           "--export", "bvh", "--force", "--device", "cpu", *how]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    started = last = None
    tail = []
    for line in proc.stderr:
        now = time.perf_counter() - t0
        if started is None and line.startswith(("baking ", "clip ")):
            started = now
        if line.startswith("clip ") and ": done," in line:
            last = now
        tail = (tail + [line])[-20:]
    proc.wait()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit("{} failed ({}):\n{}".format(" ".join(how), proc.returncode, "".join(tail)))
    with open(os.path.join(out, "report.json")) as fh:
        return wall, started, wall - last, json.load(fh)


def table(results, clips, frames):
    """The markdown table of the medians."""
    def med(label, f):
        return statistics.median(f(*run) for run in results[label])

    lines = ["| run | wall s | frames/s | scaling 1 -> 2 | start s | close s | outside the bakes, per clip "
             "| the same, start and close excluded | Dask overhead per clip, all / between |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, _how in RUNS:
        wall = med(label, lambda w, s, c, b: w)
        one = "--jobs 1" if label.startswith("--jobs") else "local:1"
        scaling = "{:.2f}x".format(med(one, lambda w, s, c, b: w) / wall) if label.endswith("2") else ""
        outside = med(label, lambda w, s, c, b: 1000 * (w - b) / clips)
        between = med(label, lambda w, s, c, b: 1000 * (w - s - c - b) / clips)
        over = ""
        if label.startswith("local"):
            base = "--jobs " + label[-1]
            over = "{:+.0f} / {:+.0f} ms".format(outside - med(base, lambda w, s, c, b: 1000 * (w - b) / clips),
                                                 between - med(base, lambda w, s, c, b: 1000 * (w - s - c - b)
                                                               / clips))
        lines.append("| {} | {:.2f} | {:.0f} | {} | {:.2f} | {:.2f} | {:.0f} ms | {:.0f} ms | {} |".format(
            "`" + label + "`" if label.startswith("--") else "`--scheduler {}`".format(label), wall,
            clips * frames / wall, scaling, med(label, lambda w, s, c, b: s), med(label, lambda w, s, c, b: c),
            outside, between, over))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=40)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the timings here")
    a = ap.parse_args(argv)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)   # (as a user's runs: the bytecode cache in use)
    folder = tempfile.mkdtemp(prefix="neural_ik_bench_cluster_")
    try:
        src, target = make_set(folder, a.clips, a.frames)
        results = {label: [] for label, _how in RUNS}
        for r in range(a.repeats):
            for label, how in RUNS:
                wall, started, close, report = run_once(src, target, os.path.join(folder, "out"), how)
                assert report["summary"]["done"] == a.clips, report["summary"]
                busy = sum(float(r["seconds_total"]) for r in report["clips"]) / int(how[1][-1])
                results[label].append((wall, started, close, busy))
                print("repeat {} {}: {:.2f} s, bakes {:.2f} s a worker, start {:.2f} s, close {:.2f} s".format(
                    r + 1, label, wall, busy, started, close), file=sys.stderr)
        print(table(results, a.clips, a.frames))
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"clips": a.clips, "frames": a.frames, "runs": results}, fh, indent=1)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
