"""Bake throughput and keypoint-object keying speed.

1. Bakes a ``--frames`` (default 3,000) frame procedural walk
   (:mod:`neural_ik.cli.demo_motion`) onto Rigify's human meta-rig with
   :func:`neural_ik.blender_io.bake.bake_keypoints` and prints frames/s split
   into inference (network + refinement, with and without refinement),
   the rig-space solve (contacts included; one more row bakes without them) and
   keyframe writing, with the quality figures: floor error (cm), joint error (at the
   leg-length scale: includes the meta-rig's other proportions), mean
   bone-direction error (degrees, proportion-independent), jitter and foot
   sliding (mm/frame). Without ``weights/neural_ik.pt`` the
   inference rows say so and the rest runs with an exact stand-in solver.
2. Keys a ``--key-frames`` (default 10,000) frame, 33-point keypoint object
   (MediaPipe layout) with
   :func:`neural_ik.blender_io.keypoint_objects.create_keypoint_object`.

``--weights PATH`` times another weights file; ``--untrained 512x4`` times an
untrained network of that width x blocks (the speed of a trained one of the
same size; its accuracy figures mean nothing).

Run (CPU threads follow ``--threads``, default 2)::

    .venv/bin/python benchmarks/bench_bake.py [--frames 3000] [--key-frames 10000] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from _pkg import REPO, import_package  # the script's folder is on sys.path


class _ExactSolver:
    """Returns the known walk (used when no weights are available)."""

    def __init__(self, rot, root):
        self.rot, self.root = rot, root

    def solve(self, keypoints, mask=None, **kw):
        from neural_ik.model.skeleton import CANONICAL
        T = len(keypoints)
        return SimpleNamespace(local_rot=self.rot[:T], root_pos=self.root[:T], keypoints=keypoints,
                               skeleton=CANONICAL, error_mm=np.zeros(T), seconds=0.0)


def _metarig():
    import addon_utils
    import bpy
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    return bpy.context.active_object


def untrained_weights(spec, folder):
    """Write an untrained network of ``"WIDTHxBLOCKS"`` as a weights file; returns its path."""
    from neural_ik.model.network import IKNet
    from training.train import export_weights

    width, blocks = (int(x) for x in spec.lower().split("x"))
    return export_weights(IKNet(width, blocks), Path(folder) / f"untrained_{width}x{blocks}.pt")


def bench_bake(frames, fps=30.0, weights=None, label=""):
    import bpy
    from neural_ik.blender_io import bake
    from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations
    from neural_ik.model.skeleton import keypoints_from_fk_np

    seconds = frames / fps
    kp = walk_keypoints(seconds, fps)[:frames]
    bpy.context.scene.render.fps = int(fps)
    rows = []
    weights = Path(weights) if weights else REPO / "weights" / "neural_ik.pt"
    solvers = []
    if weights.exists():
        solver = bake.get_solver("cpu", weights=str(weights))
        solver.solve(kp[:64])                                  # warm-up
        solvers += [(label + "network + refinement", solver, True, True),
                    (label + "network + refinement, no contacts", solver, True, False),
                    (label + "network only", solver, False, True)]
    else:
        rot = walk_rotations(seconds, fps)[:frames]
        rel = keypoints_from_fk_np(rot, np.zeros((frames, 3)))
        root = kp[:, 0] - rel[:, 0]
        solvers += [("exact stand-in (no weights)", _ExactSolver(rot, root), True, True),
                    ("exact stand-in, no contacts", _ExactSolver(rot, root), True, False)]
    for label, solver, refine, lock in solvers:
        obj = _metarig()
        t0 = time.perf_counter()
        res = bake.bake_keypoints(obj, kp, None, fps, bake.BakeOptions(refine=refine, fps=fps, foot_lock=lock),
                                  source_name="walk", solver=solver)
        total = time.perf_counter() - t0
        rows.append((label, res, total))
        bpy.data.objects.remove(obj)
    return rows


def bench_keying(frames):
    import bpy
    from neural_ik.blender_io.keypoint_objects import create_keypoint_object
    from neural_ik.readers import KeypointClip, LAYOUTS

    names = list(LAYOUTS["mediapipe_pose"].joint_names)
    rng = np.random.default_rng(0)
    pos = rng.normal(0, 0.3, (frames, len(names), 3)) + [0, 0, 1]
    clip = KeypointClip(pos, names, 30.0, layout="mediapipe_pose")
    t0 = time.perf_counter()
    root = create_keypoint_object(clip, name="bench", frame_start=1)
    dt = time.perf_counter() - t0
    assert len(root.children) == len(names)
    return dt, len(names)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--key-frames", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", help="weights file (default: weights/neural_ik.pt)")
    ap.add_argument("--untrained", metavar="WxB", help="time an untrained network of width x blocks")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    import bpy
    import_package()
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    weights, label = args.weights, ""
    if args.untrained:
        import tempfile
        weights = untrained_weights(args.untrained, tempfile.mkdtemp(prefix="nik_bench_"))
        label = f"untrained {args.untrained}: "
    rows = bench_bake(args.frames, weights=weights, label=label)
    print(f"\nBake: {args.frames} frames onto Rigify's meta-rig, {args.threads} CPU threads "
          f"(torch {torch.__version__})")
    print(f"{'solver':40s} {'total fps':>10s} {'start pose':>16s} {'rig solve':>16s} {'write':>16s} "
          f"{'floor cm':>8s} {'bone deg':>8s} {'joint mm':>8s} {'jitter':>8s} {'slide mm':>8s}")
    for label, res, total in rows:
        s = res.seconds
        cells = [f"{res.frames / s[k]:8.0f} f/s {s[k]:5.2f}s" if s[k] > 0 else "-" for k in ("solve", "fit", "write")]
        print(f"{label:40s} {res.frames / total:10.0f} {cells[0]:>16s} {cells[1]:>16s} {cells[2]:>16s} "
              f"{res.figures.floor_error_cm:+8.1f} {res.bone_direction_error_deg:8.2f} "
              f"{res.keypoint_error_mm[0]:8.1f} {res.jitter:8.2f} {res.foot_sliding_mm:8.2f}")
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    dt, joints = bench_keying(args.key_frames)
    print(f"\nKeypoint object: {args.key_frames} frames x {joints} points keyed in {dt:.2f} s "
          f"({args.key_frames * joints / dt / 1e6:.2f} M point-frames/s)")


if __name__ == "__main__":
    main()
