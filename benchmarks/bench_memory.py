"""Peak memory of a keypoint bake onto the meta-rig against the clip's length, and its growth per frame.

A canonical ``.npz`` of the demo walk (:func:`cli.demo_motion.walk_keypoints`,
generated: nothing read from disk) of each length in ``--frames`` (default
10,000, 50,000 and 200,000 frames at 30 fps) is baked as a whole process by

    ./neural-ik bake CLIP.npz --target rigify --out OUT.blend --device cpu -q --report REPORT.json

(``--output bvh``: ``--export OUT.bvh`` instead of the ``.blend``; ``none``:
no output). The peak is the child's own maximum resident set (``os.wait4``'s
``ru_maxrss``: the whole process, Blender, torch and the keys), as
``/usr/bin/time -v`` reports it. A short clip (``--base-frames``, default
300) gives the fixed part; the table gives each run's peak, its wall time,
the stage seconds of its report and the growth per frame between
consecutive lengths and against the short clip.

    .venv/bin/python benchmarks/bench_memory.py [--frames 10000,50000,200000] [--output blend|bvh|none]
        [--flags "--no-refine"] [--json OUT.json]

Long: a 200,000-frame bake takes minutes (most of it the fit). Run it on a
quiet machine; the figures of memory hold on a busy one, the times do not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _pkg import REPO, import_package  # noqa: E402
from bench_long import run_measured  # noqa: E402


def write_clip(path, frames, fps=30.0):
    """The demo walk of ``frames`` frames as a canonical ``.npz``."""
    import numpy as np

    import_package()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    kp = walk_keypoints(frames / fps, fps)[:frames]
    np.savez(path, positions=kp.astype(np.float32), joint_names=np.array(KEYPOINTS), fps=fps)
    return int(kp.shape[0])


def bake_peak(folder, frames, output, flags):
    """Bake a ``frames``-frame clip; returns ``(peak MB, wall s, stage seconds)``."""
    clip = os.path.join(folder, "walk_{}.npz".format(frames))
    write_clip(clip, frames)
    report = os.path.join(folder, "report_{}.json".format(frames))
    outs = {"blend": ["--out", os.path.join(folder, "out_{}.blend".format(frames))],
            "bvh": ["--export", os.path.join(folder, "out_{}.bvh".format(frames))], "none": []}[output]
    cmd = [os.path.join(REPO, "neural-ik"), "bake", clip, "--target", "rigify", *outs, "--device", "cpu", "-q",
           "--report", report, "--max-frames", str(max(frames, 1)), *flags]
    wall, peak, _stderr = run_measured(cmd)
    with open(report) as fh:
        seconds = json.load(fh)["clips"][0]["seconds"]
    for name in os.listdir(folder):   # (a 200,000-frame .blend is hundreds of MB)
        os.unlink(os.path.join(folder, name))
    return peak, wall, seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", default="10000,50000,200000", help="clip lengths, comma separated")
    ap.add_argument("--base-frames", type=int, default=300, help="the short clip giving the fixed part")
    ap.add_argument("--output", choices=("blend", "bvh", "none"), default="blend")
    ap.add_argument("--flags", default="", help="more bake flags for every run")
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    lengths = [args.base_frames] + [int(x) for x in args.frames.split(",") if x.strip()]
    flags = shlex.split(args.flags)
    rows = []
    with tempfile.TemporaryDirectory(prefix="neural_ik_bench_memory_") as folder:
        for n in lengths:
            peak, wall, seconds = bake_peak(folder, n, args.output, flags)
            rows.append({"frames": n, "peak_mb": round(peak, 1), "wall_s": round(wall, 1),
                         "seconds": {k: round(v, 1) for k, v in seconds.items()}})
            print("{:>8,} frames: peak {:8.1f} MB, {:7.1f} s".format(n, peak, wall), file=sys.stderr, flush=True)
    base = rows[0]
    print("| frames | peak RSS (MB) | wall (s) | read / solve / fit / write / export (s) | kB/frame vs previous "
          "| kB/frame vs {} frames |".format(base["frames"]))
    print("|---|---|---|---|---|---|")
    for prev, row in zip([None] + rows[:-1], rows):
        s = row["seconds"]
        stages = " / ".join(str(s.get(k, 0.0)) for k in ("read", "solve", "fit", "write", "export"))

        def per_frame(other):
            if other is None or other["frames"] == row["frames"]:
                return "-"
            return "{:.1f}".format((row["peak_mb"] - other["peak_mb"]) * 1e3 / (row["frames"] - other["frames"]))

        print("| {:,} | {:.0f} | {:.0f} | {} | {} | {} |".format(row["frames"], row["peak_mb"], row["wall_s"], stages,
                                                              per_frame(prev), per_frame(base)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"output": args.output, "flags": flags, "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
