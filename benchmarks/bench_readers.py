"""Read speed of the keypoint readers on large files.

Writes a ``.npz`` and a ``.csv`` clip of ``--frames`` frames (default
100,000) with 33 MediaPipe landmarks (x, y, z, visibility; FreeMoCap-like
CSV in millimetres with a timestamp column) to a temporary folder, reads each
with :func:`neural_ik.readers.read_keypoints` (validation, layout detection,
unit and axis conversion included) and prints frames/s, seconds and file
size. ``--loadtxt`` also times ``np.loadtxt`` on the CSV for comparison.

Run::

    .venv/bin/python benchmarks/bench_readers.py [--frames 100000] [--repeat 3] [--loadtxt]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from _pkg import import_package  # the script's folder is on sys.path


def _import_package():
    import_package()
    from neural_ik import readers
    return readers


def make_clip(frames: int, rng) -> tuple[np.ndarray, np.ndarray, list]:
    """MediaPipe-like landmarks, metres, Z up: a standing body swaying."""
    readers = _import_package()
    from neural_ik.model.skeleton import CANONICAL, KEYPOINTS
    lay = readers.LAYOUTS["mediapipe_pose"]
    rest = CANONICAL.rest_keypoints()
    base = np.array([rest[KEYPOINTS.index(lay.to_canonical.get(n, "nose"))] for n in lay.joint_names])
    t = np.arange(frames) / 30.0
    pos = base[None] + 0.05 * np.sin(t)[:, None, None] + rng.normal(0, 0.002, (frames, 33, 3))
    vis = rng.uniform(0.5, 1.0, (frames, 33))
    return pos, vis, list(lay.joint_names)


def write_csv(path, pos, vis, names, fps=30.0):
    """FreeMoCap-like CSV: frame, timestamp, <name>_x/_y/_z (mm), <name>_visibility."""
    T, J = pos.shape[:2]
    cols = ["frame", "timestamp"] + [f"{n}_{c}" for n in names for c in ("x", "y", "z", "visibility")]
    table = np.concatenate([pos * 1000.0, vis[..., None]], axis=-1).reshape(T, J * 4)
    table = np.concatenate([np.arange(T)[:, None], (np.arange(T) / fps)[:, None], table], axis=1)
    fmt = ["%d", "%.6f"] + ["%.3f", "%.3f", "%.3f", "%.4f"] * J
    np.savetxt(path, table, fmt=fmt, delimiter=",", header=",".join(cols), comments="")


def bench(fn, repeat):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--loadtxt", action="store_true", help="also time np.loadtxt on the CSV")
    args = ap.parse_args(argv)
    readers = _import_package()
    rng = np.random.default_rng(0)
    pos, vis, names = make_clip(args.frames, rng)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "clip.npz")
        np.savez(npz, positions=pos, joint_names=np.array(names), fps=30.0, confidence=vis, units="m", up_axis="Z")
        csv = os.path.join(tmp, "clip.csv")
        write_csv(csv, pos, vis, names)
        for label, path in (("npz", npz), ("csv", csv)):
            secs, clip = bench(lambda p=path: readers.read_keypoints(p), args.repeat)
            assert clip.num_frames == args.frames and clip.num_joints == 33
            # (the reader stands the clip on its floor: its vertical shift is reported, and undone here)
            back = clip.positions - np.array([0.0, 0.0, clip.floor_shift])
            assert np.allclose(back, pos, atol=1e-3), label
            rows.append((f"read_keypoints {label}", args.frames / secs, secs, os.path.getsize(path) / 1e6))
        if args.loadtxt:
            secs, _ = bench(lambda: np.loadtxt(csv, delimiter=",", skiprows=1), 1)
            rows.append(("np.loadtxt csv (baseline)", args.frames / secs, secs, os.path.getsize(csv) / 1e6))
    print(f"{args.frames} frames x 33 joints (best of {args.repeat})")
    print(f"{'reader':<28}{'frames/s':>14}{'seconds':>10}{'MB':>9}")
    for name, fps, secs, mb in rows:
        print(f"{name:<28}{fps:>14,.0f}{secs:>10.3f}{mb:>9.1f}")
    return rows


if __name__ == "__main__":
    main()
