"""Speed of the Neural IK solver (public tools only: time.perf_counter, torch).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_model.py [--weights weights/neural_ik.pt] [--threads 2] [--device cpu]

Prints frames per second of :meth:`Solver.solve` for batches of 1, 64 and
4096 frames (dense and sparse input, network alone and network +
refinement) and the single-pose latency of a "current pose" call (one frame,
skeleton given, network + refinement). Poses are synthetic (no mocap data
needed); the timings do not depend on the pose content.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from _pkg import import_package  # the script's folder is on sys.path


def _pkg():
    import_package()
    from neural_ik.model import inference, network
    from training import train
    from neural_ik.model.skeleton import CANONICAL, keypoints_from_fk_np

    return inference, network, train, CANONICAL, keypoints_from_fk_np


def _time(fn, repeats, min_time=0.0):
    fn()  # warm-up
    ts = []
    t_all = time.perf_counter()
    while len(ts) < repeats or (time.perf_counter() - t_all) < min_time:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) > 10 * repeats:
            break
    return statistics.median(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=None, help="refinement steps (default: the solver's)")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--precision", default="auto", help="the solver's: auto, float32 or bfloat16 (CPU batches)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    inference, network, train, CANONICAL, fk_np = _pkg()
    solver = inference.Solver(a.weights, device=a.device, precision=a.precision)
    steps = a.steps if a.steps is not None else inference.REFINE_DEFAULTS["steps"]
    d = train.synthetic_pose_data(4096, seed=0, sigma_deg=15.0)
    kp = fk_np(d.local_rot.numpy(), d.root_pos.numpy(), CANONICAL)
    sparse = np.full_like(kp, np.nan)
    eff = list(network.EFFECTOR_KP)
    sparse[:, eff] = kp[:, eff]
    sk = CANONICAL
    rep = 2 if a.quick else 5
    print(f"Neural IK speed: device {solver.device}, {torch.get_num_threads()} torch threads, refinement {steps} steps, "
          f"torch {torch.__version__}, CPU batches in {solver.precision} ({a.precision})")
    print()
    print("| input | batch | network alone (frames/s) | network + refinement (frames/s) |")
    print("|---|---:|---:|---:|")
    results = {}
    for name, data in (("dense (32 keypoints)", kp), ("sparse (6 effectors)", sparse)):
        for bs in (1, 64, 4096):
            x = data[:bs]
            r = rep if bs > 1 else 20
            t_net = _time(lambda: solver.solve(x, skeleton=sk, refine=False, batch_size=4096), r)
            t_all = _time(lambda: solver.solve(x, skeleton=sk, refine=True, refine_steps=steps, batch_size=4096), r)
            results[(name, bs)] = (bs / t_net, bs / t_all)
            print(f"| {name} | {bs} | {bs / t_net:,.0f} | {bs / t_all:,.0f} |")
    print()
    print("Single-pose latency (one frame, skeleton given), median of 200 calls:")
    print()
    print("| input | network alone (ms) | network + refinement (ms) |")
    print("|---|---:|---:|")
    for name, data in (("dense", kp), ("sparse", sparse)):
        x = data[0]
        n = 50 if a.quick else 200
        t_net = _time(lambda: solver.solve(x, skeleton=sk, refine=False), n)
        t_all = _time(lambda: solver.solve(x, skeleton=sk, refine=True, refine_steps=steps), n)
        print(f"| {name} | {1000 * t_net:.2f} | {1000 * t_all:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
