"""Solver throughput on one device, in one short run (under 3 minutes on a GPU).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_gpu.py --device cuda                  # a GPU: batches up to 262,144
    .venv/bin/python benchmarks/bench_gpu.py --device cpu --max-batch 4096  # the CPU: small sizes

Prints, for ``--device``:

1. frames per second of :meth:`Solver.solve` at batch sizes 1, 16, 256,
   4,096, 65,536 and 262,144 (up to ``--max-batch``), network alone and
   network + refinement (3 steps), end to end: numpy keypoints in, numpy
   results out (float32, ``--dtype``), transfers included; the column
   "device" says where the frames were solved (a CUDA solver solves up to
   ``CPU_MAX_FRAMES_ON_CUDA`` frames on the CPU), and "network, on the
   device only" is the network with its inputs already on the device (the
   ceiling without host work and transfers);
2. a 3,000-frame clip with its skeleton fitted (the bake's case: bone
   lengths and directions measured from the clip first), network +
   refinement;
3. single-pose latency ("current pose" solve: Live Solve, Solve Frame),
   dense and sparse, network + refinement, median of 200 calls;
4. the whole bake (:class:`neural_ik.pipeline.RigBake`: network, refinement,
   the rig solve, figures; no Blender) of the walk onto Rigify's meta-rig
   (``tests/data/rigify_metarig.json``) at ``--bake-frames`` frames, on
   ``--device`` and, up to ``--cpu-bake-max`` frames, on the CPU beside it:
   each row says where the network and the rig solve ran, the stages'
   seconds, and how far the device's bones land from the CPU's.

Inputs are the procedural walk (``cli/demo_motion.py``) tiled to the batch
size; the timings do not depend on the pose content. Each figure is the
median of several calls after a warm-up call. ``--sync-debug`` (CUDA) makes
torch warn at every point where the host waits for the GPU during one
large solve. ``--json PATH`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from _pkg import import_package  # the script's folder is on sys.path

SIZES = (1, 16, 256, 4096, 65536, 262144)


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _median_time(fn, repeats, budget, dev):
    """Median seconds of ``fn()`` over at least 2 (at most ``repeats``) calls within ``budget`` seconds."""
    fn()
    _sync(dev)
    ts = []
    start = time.perf_counter()
    while len(ts) < repeats and (len(ts) < 2 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _device_only(net, refine, x, off, eo, a, repeats, dev):
    """Seconds of the network, and of the network + refinement, with the keypoints already on ``dev``."""
    active = (np.isfinite(x).all(-1).any(0), None)
    with torch.inference_mode():
        xt = torch.as_tensor(x, device=dev)
        mt = torch.isfinite(xt).all(-1)

        def on_device():
            L, root, _ = net.predict(xt, mt, off, eo)
            refine(L, root, xt, mt.float(), off, eo, steps=a.steps, active=active)

        return (_median_time(lambda: net.predict(xt, mt, off, eo), repeats, a.budget, dev),
                _median_time(on_device, repeats, a.budget, dev))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--weights", default=None, help="weights file (default: the shipped one)")
    p.add_argument("--max-batch", type=int, default=262144, help="largest batch measured (default 262144)")
    p.add_argument("--steps", type=int, default=3, help="refinement steps (default 3)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"), help="result dtype")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--budget", type=float, default=4.0, help="seconds per measurement at most (default 4)")
    p.add_argument("--sync-debug", action="store_true", help="CUDA: warn where the host waits for the GPU")
    p.add_argument("--bake-frames", default=None,
                   help="clip lengths of the whole bake onto the meta-rig, comma-separated (default "
                        "3000,30000,100000 on a GPU, 300 on the CPU; 0: none)")
    p.add_argument("--cpu-bake-max", type=int, default=3000,
                   help="longest clip also baked on the CPU, to compare (default 3000)")
    p.add_argument("--dense-solve", action="store_true",
                   help="refine with the dense normal matrix and batched Cholesky at every batch size "
                        "(default: the tree factorisation from TREE_SOLVE_MIN_BATCH frames, on a GPU "
                        "CUDA_TREE_SOLVE_MIN_BATCH)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the figures as JSON")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: --device cuda, but torch sees no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    import_package()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model import inference
    from neural_ik.model.network import EFFECTOR_KP
    from neural_ik.model.refine import refine
    from neural_ik.model.skeleton import CANONICAL

    if a.dense_solve:
        from neural_ik.model import tree_solve

        tree_solve.TREE_SOLVE_MIN_BATCH = tree_solve.NUMPY_TREE_MIN_BATCH = sys.maxsize
        tree_solve.CUDA_TREE_SOLVE_MIN_BATCH = sys.maxsize
    t_load = time.perf_counter()
    solver = inference.Solver(a.weights, device=a.device)
    dev = solver.device
    t_load = time.perf_counter() - t_load
    dtype = np.float32 if a.dtype == "float32" else np.float64
    sizes = [s for s in SIZES if s <= a.max_batch] or [a.max_batch]
    walk = walk_keypoints(4096 / 30.0 + 0.1, 30.0, turn_degrees=120.0)[:4096]
    reps = -(-max(sizes) // len(walk))
    kp = np.ascontiguousarray(np.tile(walk, (reps, 1, 1))[:max(sizes)], dtype=np.float32)
    sparse = np.full_like(kp, np.nan)
    eff = list(EFFECTOR_KP)
    sparse[:, eff] = kp[:, eff]
    sk = CANONICAL
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU, {} torch threads".format(
        torch.get_num_threads())
    print("Neural IK solver on {} ({}), torch {}{}, refinement {} steps{}, results {}, weights loaded in {:.1f} s".format(
        dev.type, name, torch.__version__, ", CUDA " + str(torch.version.cuda) if dev.type == "cuda" else "",
        a.steps, " (dense normal matrix)" if a.dense_solve else "", a.dtype, t_load))
    print()
    print("| batch | device | network alone (frames/s) | network + refinement (frames/s) | "
          "network, on the device only (frames/s) | network + refinement, on the device only (frames/s) |")
    print("|---:|---|---:|---:|---:|---:|")
    figures = {"device": dev.type, "device_name": name, "torch": torch.__version__, "dtype": a.dtype,
               "steps": a.steps, "batches": []}
    net = solver.net
    off, eo = solver._skeleton_tensors(sk, dev)
    for bs in sizes:
        x = kp[:bs]
        out = {}

        def net_only():
            out["r"] = solver.solve(x, skeleton=sk, refine=False, batch_size=bs, dtype=dtype)

        def full():
            solver.solve(x, skeleton=sk, refine=True, refine_steps=a.steps, batch_size=bs, dtype=dtype)

        repeats = 20 if bs <= 256 else 5
        t_net = _median_time(net_only, repeats, a.budget, dev)
        t_all = _median_time(full, repeats, a.budget, dev)
        t_dev, t_dev_all = _device_only(net, refine, x, off, eo, a, repeats, dev)
        row = {"batch": bs, "solved_on": out["r"].device, "network": bs / t_net, "network_refine": bs / t_all,
               "network_device_only": bs / t_dev, "network_refine_device_only": bs / t_dev_all}
        figures["batches"].append(row)
        print("| {:,} | {} | {:,.0f} | {:,.0f} | {:,.0f} | {:,.0f} |".format(
            bs, row["solved_on"], row["network"], row["network_refine"], row["network_device_only"],
            row["network_refine_device_only"]), flush=True)
    if dev.type == "cuda":
        figures["gpu_memory_peak_mb"] = torch.cuda.max_memory_allocated(dev) / 2 ** 20
        print("\nGPU memory peak: {:,.0f} MB".format(figures["gpu_memory_peak_mb"]))

    clip = walk_keypoints(3000 / 30.0 + 0.1, 30.0)[:3000]
    t_clip = _median_time(lambda: solver.solve(clip, refine=True, refine_steps=a.steps, dtype=dtype), 3,
                          a.budget * 2, dev)
    figures["clip_3000_fitted"] = 3000 / t_clip
    print("\n3,000-frame clip, skeleton fitted from it, network + refinement: {:.3f} s = {:,.0f} frames/s".format(
        t_clip, 3000 / t_clip))

    print("\nSingle pose (skeleton given), network + refinement, median of 200 calls:\n")
    print("| input | solved on | ms |")
    print("|---|---|---:|")
    figures["single_pose_ms"] = {}
    for label, data in (("dense", kp), ("sparse (6 effectors)", sparse)):
        x = np.asarray(data[0], dtype=np.float64)
        r = solver.solve(x, skeleton=sk, refine=True, refine_steps=a.steps)
        t = _median_time(lambda: solver.solve(x, skeleton=sk, refine=True, refine_steps=a.steps), 200, 30.0, dev)
        figures["single_pose_ms"][label] = 1000 * t
        print("| {} | {} | {:.2f} |".format(label, r.device, 1000 * t))

    spec = a.bake_frames or ("3000,30000,100000" if dev.type == "cuda" else "300")
    frames = [int(x) for x in spec.split(",") if int(x) > 0]
    if frames:
        figures["bake"] = bake_table(frames, dev, a.cpu_bake_max)

    if a.sync_debug and dev.type == "cuda":
        bs = sizes[-1]
        print("\nHost waits on the GPU during one solve of {:,} frames (torch sync debug mode):".format(bs),
              flush=True)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            solver.solve(kp[:bs], skeleton=sk, refine=True, refine_steps=a.steps, batch_size=bs, dtype=dtype)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


def _metarig():
    """Rigify's meta-rig as stored data (the tests' copy: no Blender here)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import rigs

    return rigs.rigify_metarig_description()


def _bake(rig, mapping, kp, device):
    """One whole bake of ``kp`` onto ``rig`` on ``device``: (job, seconds)."""
    from neural_ik.pipeline import BakeOptions, RigBake

    t0 = time.perf_counter()
    job = RigBake(rig, mapping, kp, None, 30.0, BakeOptions(device=device))
    job.run()
    if device == "cuda":
        torch.cuda.synchronize()
    return job, time.perf_counter() - t0


def bake_table(sizes, dev, cpu_max):
    """Section 4: the whole bake of the walk onto the meta-rig, per clip length and device."""
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.retarget.mapping import auto_map

    rig = _metarig()
    mapping = auto_map(rig)
    print("\nWhole bake of the walk onto the meta-rig (keypoints, network path: RigBake.run, no Blender):\n")
    print("| frames | device | network on | rig solve on | seconds | frames/s | solve s | fit s | "
          "joint error (mean mm) | the CPU's bones from the device's (mean / max mm) |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|")
    warm = walk_keypoints(200 / 30.0 + 0.1, 30.0)[:200]
    rows = []
    for n in sizes:
        kp = walk_keypoints(n / 30.0 + 0.1, 30.0, turn_degrees=120.0)[:n]
        heads = {}
        for device in ([dev.type, "cpu"] if dev.type != "cpu" and n <= cpu_max else [dev.type]):
            _bake(rig, mapping, warm, device)     # (the solver loaded, the kernels compiled)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            job, t = _bake(rig, mapping, kp, device)
            heads[device] = job.full_result().heads
            gap = ""
            if device == "cpu" and dev.type != "cpu":
                d = np.linalg.norm(heads[dev.type] - heads["cpu"], axis=-1) * 1000.0
                gap = (float(np.nanmean(d)), float(np.nanmax(d)))
            row = {"frames": n, "device": device, "network_on": str(job.solved.device), "rig_on": job.rig_device,
                   "start": job.start, "seconds": t, "frames_per_second": n / t,
                   "solve_s": job.seconds.get("solve"), "fit_s": job.seconds.get("fit"),
                   "joint_error_mm": job.figures.joint_error_mm[0], "gap_to_device_mm": gap or None}
            if device == "cuda":
                row["gpu_memory_peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
            rows.append(row)
            print("| {:,} | {} | {} ({}) | {} | {:.2f} | {:,.0f} | {:.2f} | {:.2f} | {:.2f} | {} |".format(
                n, device, row["network_on"], job.start, row["rig_on"], t, n / t, row["solve_s"], row["fit_s"],
                row["joint_error_mm"], "" if gap == "" else "{:.2f} / {:.1f}".format(*gap)), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
