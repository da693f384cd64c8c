"""``neural-ik batch`` against Blender's own constraint bake, whole processes, the same clips.

Clips of one folder of ``../shared/mocap/foreign/`` (default ``fair1``) are
cut, or looped when shorter, to 200 frames (``--clips``, default 10) and to
3,000 frames (``--long-clips``, default 2) in a temporary folder (deleted at
the end, never committed), and baked by both sides onto each target of
``--targets``:

- ``own``: the folder's skeleton (its first clip's BVH in its rest pose);
- ``rigify``: Rigify's human meta-rig, another rig with other proportions.

Each input of ``--inputs`` is one row per set and target:

- ``keypoints``: the clips' joint positions only (``.npz``, canonical names,
  metres, Z up): **the network runs** on every frame, then the rig solve.
  Blender's side bakes the BVH of the same clips (it has no keypoint
  importer; its constraints copy the file's rotations: the easier job).
- ``bvh``: the BVH files themselves: Neural IK copies their rotations (the
  network does not run) and solves the rig where the target differs.

Each row says which path ran, read from Neural IK's own report (``start``:
``network`` or ``source``, every clip). The sides:

- **neural-ik**: ``./neural-ik batch DIR --target TARGET --out-dir OUT
  --export bvh --no-blend --device cpu --force`` (one process: start, read,
  solve, write the keys, BVH export);
- **blender**: ``benchmarks/blender_baseline.py --batch DIR --target
  TARGET`` (one process: start, the target loaded once, then per clip
  Blender's BVH import, two-bone IK with measured pole targets plus
  rotation copies, ``nla.bake`` with visual keying);
- **floor** (keypoint rows): ``benchmarks/network_floor.py DIR``, the least
  a keypoint bake can take (start, imports, the reader and the network on
  every frame, nothing else); Blender's time over it is the largest ratio
  the network path can reach on the machine (``at most``).

Both are timed as whole processes from outside, alternately, ``--repeats``
times (default 3) after one untimed warm-up run of each; the table gives
the medians, frames per second and the ratio (above 1: Neural IK is
faster). A user's Blender writes ``__pycache__`` on first use, so both run
with Python's bytecode cache.

    .venv/bin/python benchmarks/bench_vs_blender.py [--folder fair1] [--inputs keypoints,bvh]
        [--targets own,rigify] [--clips 10] [--long-clips 2] [--repeats 3] [--jobs N] [--json OUT.json]

The machine's other work shows in the wall times (2 cores): run it on a
quiet machine.
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

import numpy as np

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


def keypoint_set(bvh_folder, folder, units, up):
    """Every BVH of ``bvh_folder`` as an ``.npz`` of its joint positions alone (canonical names, metres, Z up)."""
    sys.path.insert(0, os.path.join(REPO, "cli"))
    from standalone import load_package

    load_package()
    from neural_ik.readers import read_keypoints, to_canonical
    from neural_ik.model.skeleton import KEYPOINTS

    os.makedirs(folder, exist_ok=True)
    for name in sorted(os.listdir(bvh_folder)):
        clip = read_keypoints(os.path.join(bvh_folder, name), units=units, up_axis=up, ground=False)
        kp, mask = to_canonical(clip)
        kp = np.where(mask[..., None], kp, np.nan)
        np.savez(os.path.join(folder, name[:-4] + ".npz"), positions=kp, joint_names=np.array(KEYPOINTS),
                 fps=float(clip.fps), units="m", up_axis="Z")


def time_process(cmd, env=None):
    """Wall seconds of one whole process; raises on a non-zero exit."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError("{} exited {}:\n{}".format(" ".join(cmd[:3]), proc.returncode, proc.stderr[-3000:]))
    return wall, proc


def neural_quality(report, total):
    """What neural-ik's report says of its bakes, and which path ran (every clip's ``start``)."""
    s = report["summary"]
    if s.get("failed"):
        raise RuntimeError("neural-ik batch failed clips: {}".format(s.get("failed_clips")))
    if s["frames"] != total:
        raise RuntimeError("neural-ik baked {} frames, expected {}".format(s["frames"], total))
    starts = sorted({c.get("start") or "?" for c in report["clips"]})
    return {"path": "+".join(starts),
            "floor_cm_max": max(abs(c["floor_error_cm"]) for c in report["clips"] if c.get("floor_error_cm") is not None),
            "bone_dir_deg": s.get("bone_direction_error_deg"),
            "knees_back": sum(c.get("knees_backwards") or 0 for c in report["clips"])}


def run_row(row, args, env, tmp):
    """Time both sides on one (input, target, set); returns the row's results."""
    out_n, out_b = os.path.join(tmp, "out_neural"), os.path.join(tmp, "out_blender")
    report = os.path.join(tmp, "report.json")
    neural = [os.path.join(REPO, "neural-ik"), "batch", row["neural_dir"], "--target", row["target"],
              "--out-dir", out_n, "--export", "bvh", "--no-blend", "--device", args.device, "--force", "-q",
              "--report", report] + row["hints"]
    if args.jobs is not None:
        neural += ["--jobs", str(args.jobs)]
    blender = [sys.executable, os.path.join(HERE, "blender_baseline.py"), "--batch", row["bvh_dir"], "--target",
               row["blender_target"], "--scale", str(row["scale"]), "--up", row["up"]]
    sides = [("neural-ik", neural, out_n), ("blender", blender, out_b)]
    if row["input"] == "keypoints":   # the least any keypoint bake of these clips can take (network_floor.py)
        sides.append(("floor", [sys.executable, os.path.join(HERE, "network_floor.py"), row["neural_dir"]], out_n))
    times = {name: [] for name, _cmd, _out in sides}
    quality = None
    for r in range(-1, args.repeats):   # run -1: the warm-up, not timed
        for name, cmd, out in sides:
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out, exist_ok=True)
            wall, _proc = time_process(cmd, env=env)
            if name == "neural-ik":
                quality = neural_quality(json.load(open(report)), row["frames"])
            if r >= 0:
                times[name].append(wall)
                print("  {} run {}: {} {:.1f} s".format(row["label"], r + 1, name, wall), file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"set": row["label"], "input": row["input"], "target": row["target_name"], "frames": row["frames"],
            "seconds": med, "runs": times, "fps": {k: row["frames"] / v for k, v in med.items()}, "quality": quality}


def plan_rows(args, clips, tmp):
    """The rows to time: every set, input and target, their folders written."""
    scale, up, units = bb.FOLDER_UNITS.get(args.folder, (1.0, "Y", None))
    hints = (["--units", units] if units else []) + (["--up-axis", up] if up != "Y" else [])
    own = os.path.join(tmp, "skeleton.bvh")
    bb.write_cut_bvh(clips[0], own, 1, loop=False)
    own_hints = (["--target-units", units] if units else []) + (["--target-up-axis", up] if up != "Y" else [])
    targets = {"own": (own, own, own_hints),
               "rigify": ("rigify", "rigify", [])}
    sets = [(args.clips, args.short_frames), (args.long_clips, args.long_frames)]
    rows = []
    for count, frames in sets:
        if not count:
            continue
        bvh_dir = os.path.join(tmp, "bvh_{}".format(frames))
        total = make_set(clips[:count], bvh_dir, frames)
        kp_dir = os.path.join(tmp, "npz_{}".format(frames))
        if "keypoints" in args.inputs:
            keypoint_set(bvh_dir, kp_dir, units, up)
        for inp in args.inputs:
            for tname in args.targets:
                target, blender_target, target_hints = targets[tname]
                rows.append({"label": "{} x {} frames".format(count, frames), "input": inp, "frames": total,
                             "neural_dir": kp_dir if inp == "keypoints" else bvh_dir, "bvh_dir": bvh_dir,
                             "target": target, "blender_target": blender_target, "target_name": tname,
                             "hints": target_hints + (hints if inp == "bvh" else []), "scale": scale, "up": up})
    return rows


def print_table(results):
    print("\n{:<18} {:<10} {:<7} {:<8} {:>7} {:>12} {:>11} {:>14} {:>13} {:>7} {:>8} {:>9}".format(
        "clips", "input", "target", "path", "frames", "neural-ik s", "blender s", "neural-ik fr/s", "blender fr/s",
        "ratio", "floor s", "at most"))
    for r in results:
        floor = r["seconds"].get("floor")
        print("{:<18} {:<10} {:<7} {:<8} {:>7} {:>12.2f} {:>11.2f} {:>14.0f} {:>13.0f} {:>6.2f}x {:>8} {:>9}".format(
            r["set"], r["input"], r["target"], r["quality"]["path"], r["frames"], r["seconds"]["neural-ik"],
            r["seconds"]["blender"], r["fps"]["neural-ik"], r["fps"]["blender"],
            r["fps"]["neural-ik"] / r["fps"]["blender"], "-" if floor is None else "{:.2f}".format(floor),
            "-" if floor is None else "{:.1f}x".format(r["seconds"]["blender"] / floor)))
    print("(whole processes: start, imports, target, every clip; ratio = neural-ik frames/s / blender frames/s;\n"
          " path: what gave Neural IK's start pose on every clip, 'network' (keypoints through the network)\n"
          " or 'source' (the BVH's own rotations copied, no network); Blender always bakes the BVH;\n"
          " floor: network_floor.py, one process that reads the clips in turn and runs the network alone on\n"
          " every frame (no refinement, no rig solve, nothing written); at most = blender s / floor s, the\n"
          " largest ratio the network path can reach here)")
    print("\nneural-ik's bakes, as its report gives them (a fast bake is worth nothing if these are off):")
    for r in results:
        q = r["quality"]
        print("  {:<18} {:<10} {:<7} feet off the floor at most {:.1f} cm, bone directions {:.1f} deg, knees "
              "backwards on {} frames".format(r["set"], r["input"], r["target"], q["floor_cm_max"],
                                              q["bone_dir_deg"] or float("nan"), q["knees_back"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=DEFAULT_ROOT)
    ap.add_argument("--folder", default="fair1")
    ap.add_argument("--inputs", default="keypoints,bvh", help="keypoints and/or bvh (default both)")
    ap.add_argument("--targets", default="own,rigify", help="own and/or rigify (default both)")
    ap.add_argument("--clips", type=int, default=10, help="clips of 200 frames (default 10)")
    ap.add_argument("--long-clips", type=int, default=2, help="clips of 3,000 frames (default 2)")
    ap.add_argument("--short-frames", type=int, default=200)
    ap.add_argument("--long-frames", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=None,
                    help="neural-ik batch --jobs N (default: its own, one process per core)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.inputs = [x for x in args.inputs.split(",") if x]
    args.targets = [x for x in args.targets.split(",") if x]
    if set(args.inputs) - {"keypoints", "bvh"} or set(args.targets) - {"own", "rigify"}:
        ap.error("--inputs takes keypoints,bvh and --targets own,rigify")
    src_dir = os.path.join(args.root, args.folder)
    if not os.path.isdir(src_dir):
        print("bench_vs_blender: {}: no such folder".format(src_dir), file=sys.stderr)
        return 2
    clips = sorted(os.path.join(src_dir, f) for f in os.listdir(src_dir) if f.lower().endswith(".bvh"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # a SIGTERM (timeout, kill) ends the run through the finally below, which removes the cut clips
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="bench_vs_blender_")
    results = []
    try:
        rows = plan_rows(args, clips, tmp)
        print("bench_vs_blender: {} ({} clips there, looped where shorter); {} repeats, medians; neural-ik "
              "--jobs {}".format(args.folder, len(clips), args.repeats,
                                 "default" if args.jobs is None else args.jobs), flush=True)
        for row in rows:
            results.append(run_row(row, args, env, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
