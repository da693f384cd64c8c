"""Where a CPU solve should leave numpy for torch: whole processes, the network path, torch's import counted.

For each clip length, two fresh processes solve the same synthetic keypoints
(dense, every keypoint given; network + refinement, the skeleton fitted) with
:class:`neural_ik.model.inference.Solver` on the CPU, timed from the
process's start (its imports included) to the answer:

- **numpy**: the path a clip of up to ``NUMPY_MAX_FRAMES`` frames takes (the
  limit raised for this run where the length is above it): no torch;
- **torch**: the torch batches (the limit set to 0), with the CPU's default
  precision (``auto``), torch's import included.

Each row gives the medians of ``--repeats`` runs of each and which was
faster. ``NUMPY_MAX_FRAMES`` (``model/batches.py``) should sit near the
crossing. Poses are synthetic (no mocap data needed): the timings do not
depend on the pose content.

    .venv/bin/python benchmarks/bench_numpy_path.py [--frames 300,3000,8192,16384] [--repeats 3] [--blas-threads 1]

Run it on a quiet machine: both paths use every core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
import numpy as np
import devpkg
devpkg.import_package()
from neural_ik.model import batches, inference
from neural_ik.model.rotations_np import axis_angle_to_matrix
from neural_ik.model.skeleton import CANONICAL, keypoints_from_fk_np
batches.NUMPY_MAX_FRAMES = {limit}
rng = np.random.default_rng(0)
n = {frames}
L = axis_angle_to_matrix(rng.normal(0.0, 0.25, (n, 22, 3)))
root = np.stack([np.linspace(0.0, 3.0, n), np.zeros(n), np.full(n, 0.95)], 1)
kp = keypoints_from_fk_np(L, root, CANONICAL)
t1 = time.perf_counter()
res = inference.Solver(device="cpu").solve(kp)
t2 = time.perf_counter()
print("RESULT", t2 - t0, "torch" in sys.modules, float(np.nanmean(res.error_mm)), t1 - t0)
"""


def _run(frames, limit, blas_threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas_threads))
    out = subprocess.run([sys.executable, "-c", _CHILD.format(repo=REPO, frames=frames, limit=limit)],
                         capture_output=True, text=True, timeout=900, env=env)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    if out.returncode != 0 or not line:
        raise SystemExit(f"the child failed: {out.stderr[-2000:]}")
    _, seconds, torch_loaded, err, make = line[-1].split()
    return float(seconds) - float(make), torch_loaded == "True", float(err)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", default="300,3000,8192,16384")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="numpy's BLAS threads (default 1: what ./neural-ik sets, docs/tuning.md#openblas-threads)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.frames.split(",")]
    print(f"CPU solve, whole process (imports, weights, skeleton fit, network + refinement), {os.cpu_count()} "
          f"cores, numpy's BLAS on {args.blas_threads} thread(s); medians of {args.repeats}; the clip's synthesis "
          "not counted")
    print(f"{'frames':>7s} {'numpy s':>8s} {'torch s':>8s} {'torch/numpy':>11s} {'err mm numpy/torch':>19s}  faster")
    for n in sizes:
        runs = {"numpy": [], "torch": []}
        errs = {}
        for _ in range(args.repeats):
            for path, limit in (("numpy", max(n, 1)), ("torch", 0)):
                seconds, torch_loaded, err = _run(n, limit, args.blas_threads)
                if torch_loaded != (path == "torch"):
                    raise SystemExit(f"the {path} run of {n} frames {'did not import' if path == 'torch' else 'imported'} torch")
                runs[path].append(seconds)
                errs[path] = err
        a, b = statistics.median(runs["numpy"]), statistics.median(runs["torch"])
        print(f"{n:7d} {a:8.2f} {b:8.2f} {b / a:11.2f} {errs['numpy']:9.3f} / {errs['torch']:7.3f}  "
              f"{'numpy' if a <= b else 'torch'}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    t = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t:.0f} s)")
    sys.exit(code)
