"""Issue 12 item 5: ``neural-ik batch`` against Blender's own constraint bake, whole processes, same clips.

Clips of one folder of ``../shared/mocap/foreign/`` (default ``fair1``: one
skeleton) are cut, or looped when shorter, to 200 frames (``--clips``, default
10) and to 3,000 frames (``--long-clips``, default 2) in a temporary folder
(deleted at the end, never committed). Each set is baked onto the folder's
skeleton (its first clip's BVH in its rest pose) by

- **neural-ik**: ``./neural-ik batch DIR --target SKELETON.bvh --out-dir OUT
  --export bvh --no-blend --device cpu --force`` (one process: start, read,
  solve, write the keys, BVH export), with the folder's units and up axis as
  flags (as Blender's importer gets them);
- **blender**: ``benchmarks/blender_baseline.py --batch DIR --target
  SKELETON.bvh`` (one process: start, the target loaded once, then per clip
  Blender's BVH import, two-bone IK with measured pole targets plus rotation
  copies, ``nla.bake`` with visual keying; ``--blender-export`` adds
  Blender's BVH exporter per clip, the neural side's last step).

Both are timed as whole processes from outside, alternately, ``--repeats``
times (default 3) after one untimed warm-up run of each; the table gives
the medians, frames per second and the ratio (neural-ik / blender: above 1,
Neural IK is faster). Both run with Python's usual bytecode cache (a
``PYTHONDONTWRITEBYTECODE`` in the caller's environment is dropped for them:
a user's Blender writes ``__pycache__`` on first use; without it every run
of ``neural-ik`` would compile its 40 modules anew, about 0.1 s).

    .venv/bin/python benchmarks/bench_vs_blender.py [--folder fair1] [--clips 10] [--long-clips 2] [--repeats 3]
        [--blender-export] [--device cpu] [--jobs N]

The Neural IK side bakes without Blender (a BVH target, BVH exports only,
no ``.blend``: ``readers/bvh_armature.py``) and, by default, one clip per
CPU core at a time (``--jobs``); ``--jobs 1`` measures one process.
"""

from __future__ import annotations

import argparse
import json
import os
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

DEFAULT_ROOT = os.path.normpath(os.path.join(REPO, "..", "shared", "mocap", "foreign"))


def make_set(clips, folder, frames):
    """Write every clip cut or looped to ``frames`` frames into ``folder``; returns the total frames."""
    os.makedirs(folder, exist_ok=True)
    total = 0
    for src in clips:
        total += bb.write_cut_bvh(src, os.path.join(folder, os.path.basename(src)), frames, loop=True)
    return total


def time_process(cmd, env=None):
    """Wall seconds of one whole process; raises on a non-zero exit."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError("{} exited {}:\n{}".format(" ".join(cmd[:3]), proc.returncode, proc.stderr[-3000:]))
    return wall, proc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=DEFAULT_ROOT)
    ap.add_argument("--folder", default="fair1")
    ap.add_argument("--clips", type=int, default=10, help="clips of 200 frames (default 10)")
    ap.add_argument("--long-clips", type=int, default=2, help="clips of 3,000 frames (default 2)")
    ap.add_argument("--short-frames", type=int, default=200)
    ap.add_argument("--long-frames", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--blender-export", action="store_true", help="Blender's side also exports each clip as BVH")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=None,
                    help="neural-ik batch --jobs N (default: its own, one process per core)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    src_dir = os.path.join(args.root, args.folder)
    if not os.path.isdir(src_dir):
        print("bench_vs_blender: {}: no such folder".format(src_dir), file=sys.stderr)
        return 2
    clips = sorted(os.path.join(src_dir, f) for f in os.listdir(src_dir) if f.lower().endswith(".bvh"))
    scale, up, units = bb.FOLDER_UNITS.get(args.folder, (1.0, "Y", None))
    hints = (["--units", units] if units else []) + (["--up-axis", up] if up != "Y" else [])
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # a SIGTERM (timeout, kill) ends the run through the finally below, which removes the cut clips
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="bench_vs_blender_")
    results = []
    try:
        target = os.path.join(tmp, "skeleton.bvh")
        bb.write_cut_bvh(clips[0], target, 1, loop=False)
        sets = []
        if args.clips:
            sets.append(("{} x {} frames".format(args.clips, args.short_frames), clips[:args.clips], args.short_frames))
        if args.long_clips:
            sets.append(("{} x {} frames".format(args.long_clips, args.long_frames), clips[:args.long_clips],
                         args.long_frames))
        print("bench_vs_blender: {} ({} clips there, looped where shorter), target: its skeleton; {} repeats, "
              "medians; blender side {}BVH export; neural-ik --jobs {}".format(
                  args.folder, len(clips), args.repeats, "with " if args.blender_export else "without ",
                  "default" if args.jobs is None else args.jobs))
        for label, chosen, frames in sets:
            folder = os.path.join(tmp, "set_{}".format(frames))
            total = make_set(chosen, folder, frames)
            out_n = os.path.join(tmp, "out_neural")
            out_b = os.path.join(tmp, "out_blender")
            neural = [os.path.join(REPO, "neural-ik"), "batch", folder, "--target", target, "--out-dir", out_n,
                      "--export", "bvh", "--no-blend", "--device", args.device, "--force", "-q",
                      "--report", os.path.join(tmp, "report.json")] + hints
            if args.jobs is not None:
                neural += ["--jobs", str(args.jobs)]
            blender = [python, os.path.join(HERE, "blender_baseline.py"), "--batch", folder, "--target", target,
                       "--scale", str(scale), "--up", up]
            if args.blender_export:
                blender += ["--export-dir", out_b]
            times = {"neural-ik": [], "blender": []}
            for r in range(-1, args.repeats):   # run -1: the warm-up, not timed
                for name, cmd, out in (("neural-ik", neural, out_n), ("blender", blender, out_b)):
                    shutil.rmtree(out, ignore_errors=True)
                    os.makedirs(out, exist_ok=True)
                    wall, proc = time_process(cmd, env=env)
                    if r < 0:
                        continue
                    if name == "neural-ik":
                        rep = json.load(open(os.path.join(tmp, "report.json")))
                        s = rep["summary"]
                        if s.get("failed"):
                            raise RuntimeError("neural-ik batch failed clips: {}".format(s.get("failed_clips")))
                        if s["frames"] != total:
                            raise RuntimeError("neural-ik baked {} frames, expected {}".format(s["frames"], total))
                        quality = {"floor_cm_max": max(abs(c["floor_error_cm"]) for c in rep["clips"]
                                                       if c.get("floor_error_cm") is not None),
                                   "bone_dir_deg": s.get("bone_direction_error_deg"),
                                   "knees_back": sum(c.get("knees_backwards") or 0 for c in rep["clips"])}
                    times[name].append(wall)
                    print("  {} run {}: {} {:.1f} s".format(label, r + 1, name, wall), file=sys.stderr, flush=True)
            med = {k: statistics.median(v) for k, v in times.items()}
            results.append({"set": label, "frames": total, "seconds": med, "runs": times,
                            "fps": {k: total / v for k, v in med.items()}, "quality": quality})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n{:<20} {:>7} {:>14} {:>14} {:>16} {:>16} {:>8}".format(
        "clips", "frames", "neural-ik s", "blender s", "neural-ik fr/s", "blender fr/s", "ratio"))
    for r in results:
        print("{:<20} {:>7} {:>14.2f} {:>14.2f} {:>16.0f} {:>16.0f} {:>7.2f}x".format(
            r["set"], r["frames"], r["seconds"]["neural-ik"], r["seconds"]["blender"], r["fps"]["neural-ik"],
            r["fps"]["blender"], r["fps"]["neural-ik"] / r["fps"]["blender"]))
    print("(whole processes: start, imports, target, every clip; ratio = neural-ik frames/s / blender frames/s)")
    print("\nneural-ik's bakes, as its report gives them (a fast bake is worth nothing if these are off):")
    for r in results:
        q = r["quality"]
        print("  {:<20} feet off the floor at most {:.1f} cm, bone directions {:.1f} deg, knees backwards on {} "
              "frames".format(r["set"], q["floor_cm_max"], q["bone_dir_deg"] or float("nan"), q["knees_back"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
