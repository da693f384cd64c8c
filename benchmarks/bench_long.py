"""Issue 12 item 3: one very long clip through ``./neural-ik bake ... --export bvh``, wall time and peak memory.

A clip of ``../shared/mocap/foreign`` (default the ``sfu`` walk) is looped to
``--frames`` frames (default 100,000; the root jumps back at every repeat:
fine for time and memory, not for quality figures) in a temporary folder
(deleted at the end, never committed) and baked as a whole process by

    ./neural-ik bake LONG.bvh --target SKELETON.bvh --export OUT.bvh --device cpu -q --report REPORT.json

onto each target of ``--targets``:

- ``own``: the clip's own skeleton (its first frame as a rest-pose BVH):
  the source's rotations are copied, the rig solve only measures;
- ``other``: another studio's skeleton (``fair1/dab.bvh``, Z up, inches):
  another body, so the dense rig-space solve runs on every frame.

Each run's peak resident memory is the child's own ``ru_maxrss``
(``os.wait4``), its wall time is measured from outside; the table gives
the medians of ``--repeats`` runs and the stage seconds of the last
run's report (read, solve, fit, write the keys, export).

    .venv/bin/python benchmarks/bench_long.py [--frames 100000] [--targets own,other] [--repeats 1]
        [--source PATH] [--flags "--smooth butter"] [--json OUT.json]

``--flags`` adds bake flags to every run (the table names them).

The machine's other work shows in the wall times (2 cores): run it on a quiet
machine, and only a few times.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import blender_baseline as bb  # noqa: E402

FOREIGN = os.path.normpath(os.path.join(REPO, "..", "shared", "mocap", "foreign"))
DEFAULT_SOURCE = os.path.join(FOREIGN, "sfu", "0005_Walking001.bvh")
#: ``other`` target: a skeleton of another studio and body, and the flags its file needs.
OTHER_TARGET = (os.path.join(FOREIGN, "fair1", "dab.bvh"), ["--target-units", "in", "--target-up-axis", "Z"])


def run_measured(cmd):
    """Run ``cmd`` (cwd: the repository); returns ``(wall seconds, peak RSS in MB, CompletedProcess-like)``.

    The peak is the process's own maximum resident set (``os.wait4``'s
    ``ru_maxrss``, kB on Linux), not the benchmark's or an earlier run's.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # the pipes are drained by a thread while wait4 collects the child's own rusage
        import threading

        out = {}

        def drain(name, stream):
            out[name] = stream.read()

        threads = [threading.Thread(target=drain, args=(n, s)) for n, s in (("stdout", proc.stdout),
                                                                              ("stderr", proc.stderr))]
        for t in threads:
            t.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        for t in threads:
            t.join()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = out["stderr"].decode("utf-8", "replace")
    if proc.returncode != 0:
        raise RuntimeError("{} exited {}:\n{}".format(" ".join(cmd[:3]), proc.returncode, stderr[-3000:]))
    return wall, usage.ru_maxrss * 1024 / 1e6, stderr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="BVH clip to loop (default: the sfu walk)")
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--targets", default="own", help="comma-separated: own, other (default: own)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--flags", default="", help="more bake flags for every run, e.g. '--smooth butter'")
    ap.add_argument("--json", default=None, help="also write the rows there")
    args = ap.parse_args(argv)

    if not os.path.isfile(args.source):
        print("bench_long: {}: no such file (the mocap of ../shared)".format(args.source), file=sys.stderr)
        return 2
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in ("own", "other")]
    if unknown:
        print("bench_long: unknown target(s) {}: use own, other".format(", ".join(unknown)), file=sys.stderr)
        return 2
    # a SIGTERM (timeout, kill) ends the run through the finally below, which removes the cut clip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="bench_long_")
    rows = []
    try:
        clip = os.path.join(tmp, "long.bvh")
        frames = bb.write_cut_bvh(args.source, clip, args.frames, loop=True)
        own = os.path.join(tmp, "skeleton.bvh")
        bb.write_cut_bvh(args.source, own, 1, loop=False)
        print("bench_long: {} looped to {:,} frames ({:.0f} MB), {} repeat(s), --device {}".format(
            os.path.basename(args.source), frames, os.path.getsize(clip) / 1e6, args.repeats, args.device))
        for name in targets:
            if name == "own":
                target, flags = own, []
            else:
                target, flags = OTHER_TARGET
                if not os.path.isfile(target):
                    print("bench_long: {}: no such file; skipping 'other'".format(target), file=sys.stderr)
                    continue
            out = os.path.join(tmp, "out.bvh")
            report = os.path.join(tmp, "report.json")
            cmd = [os.path.join(REPO, "neural-ik"), "bake", clip, "--target", target] + flags + [
                "--export", out, "--device", args.device, "-q", "--report", report] + shlex.split(args.flags)
            walls, peaks = [], []
            for r in range(args.repeats):
                for path in (out, report):
                    if os.path.exists(path):
                        os.remove(path)
                wall, peak, _ = run_measured(cmd)
                rep = json.load(open(report))
                row = rep["clips"][0]
                if row.get("status") != "done" or row.get("frames") != frames:
                    raise RuntimeError("bake of {} frames: {}".format(frames, row))
                walls.append(wall)
                peaks.append(peak)
                print("  {} run {}: {:.1f} s, {:.0f} MB peak".format(name, r + 1, wall, peak), file=sys.stderr,
                      flush=True)
            rows.append({"target": " ".join([name] + shlex.split(args.flags)), "frames": frames, "seconds": statistics.median(walls),
                         "peak_mb": statistics.median(peaks), "runs": list(zip(walls, peaks)),
                         "stages": row.get("seconds", {}), "out_mb": os.path.getsize(out) / 1e6})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    stages = ("read", "solve", "fit", "write", "export")
    print("| target | frames | wall s | peak RSS MB | " + " | ".join(s + " s" for s in stages) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(stages))
    for r in rows:
        print("| {} | {:,} | {:.1f} | {:.0f} | {} |".format(
            r["target"], r["frames"], r["seconds"], r["peak_mb"],
            " | ".join("{:.1f}".format(r["stages"].get(s, float("nan"))) for s in stages)))
    print("(whole processes: start, imports, target, read, bake, BVH export; peak = the process's maximum RSS)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
