"""Batch throughput: ``./neural-ik batch`` end to end, and where the time goes.

Generates ``--clips`` clips (default 20) of ``--frames`` frames (default
1000, 30 fps) of the procedural walk (varied cadence and turn), bakes them
onto Rigify's meta-rig with ``./neural-ik batch --export bvh`` (one process:
reading the clips, the network and refinement, retargeting, writing the
actions, Blender's BVH exporter per clip and the combined ``.blend``) and
prints frames per second end to end plus a table by stage from the batch
report.

    .venv/bin/python benchmarks/bench_batch.py [--clips 20] [--frames 1000] [--device cpu] [--weights PATH]

Output in ``bench_out/batch/`` (git-ignored): the clips, the outputs,
``report.json`` and ``bench_batch.json``.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_clips(folder, clips, frames, fps=30.0):
    """Write ``clips`` walks of ``frames`` frames as canonical ``.npz`` files."""
    sys.path.insert(0, os.path.join(REPO, "cli"))
    from standalone import load_package

    load_package()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(clips):
        kp = walk_keypoints(frames / fps, fps, cadence=float(rng.uniform(0.8, 1.0)),
                            turn_degrees=float(rng.uniform(-90, 90)))[:frames]
        np.savez(os.path.join(folder, "walk_{:02d}.npz".format(i)), positions=kp,
                 joint_names=np.array(KEYPOINTS), fps=fps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=20)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "bench_out", "batch"))
    args = ap.parse_args(argv)

    src = os.path.join(args.out, "clips")
    dst = os.path.join(args.out, "baked")
    shutil.rmtree(args.out, ignore_errors=True)
    make_clips(src, args.clips, args.frames)
    cmd = [os.path.join(REPO, "neural-ik"), "batch", src, "--target", "rigify", "--out-dir", dst,
           "--export", "bvh", "--device", args.device, "--quiet", "--report", os.path.join(args.out, "report.json")]
    if args.weights:
        cmd += ["--weights", args.weights]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return proc.returncode
    report = json.load(open(os.path.join(args.out, "report.json")))
    s = report["summary"]
    frames = s["frames"]
    stages = dict(s["seconds_by_stage"])
    stages["load target + network"] = s.get("load_target_seconds", 0.0)
    stages["save .blend"] = s.get("blend_seconds", 0.0)
    accounted = sum(stages.values())
    stages["process start, imports, other"] = max(wall - accounted, 0.0)
    import torch

    result = {
        "clips": args.clips, "frames_per_clip": args.frames, "frames": frames, "device": args.device,
        "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "wall_seconds": round(wall, 2), "frames_per_second": round(frames / wall, 1),
        "seconds_by_stage": {k: round(v, 2) for k, v in stages.items()},
        "keypoint_error_mm": s["keypoint_error_mm"],
    }
    with open(os.path.join(args.out, "bench_batch.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    print("batch: {} clips x {} frames onto Rigify's meta-rig, --export bvh + .blend, device {}".format(
        args.clips, args.frames, args.device))
    print("end to end: {} frames in {:.1f} s = {:.0f} frames/s".format(frames, wall, frames / wall))
    print()
    print("| stage | seconds | share | frames/s of stage |")
    print("|---|---:|---:|---:|")
    for key, value in stages.items():
        rate = "{:.0f}".format(frames / value) if value > 0 else "-"
        print("| {} | {:.2f} | {:.0%} | {} |".format(key, value, value / wall, rate))
    print("| **total (wall)** | **{:.2f}** | 100% | **{:.0f}** |".format(wall, frames / wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
