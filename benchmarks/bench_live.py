"""Solve Frame / Live Solve on Rigify's meta-rig: latency and how close the bones get to their empties.

What an animator does: Add Effectors on the meta-rig, drag the left-hand
empty by 0 to 60 cm (forward and up), solve the current frame. Each solve
goes through :func:`neural_ik.blender_io.bake.solve_current_frame` (read the
rig, the pipeline's sparse solve on the rig's own bones, set the pose), as
Live Solve's timer calls it. Prints, per drag distance, the median and
maximum solve time over ``--repeats`` solves and every effector's distance
from its empty, read back from the posed armature (``PoseBone.head`` in
world space after a depsgraph update), not from the solver.

    .venv/bin/python benchmarks/bench_live.py [--repeats 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _pkg import import_package  # the script's folder is on sys.path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import bpy
    import addon_utils
    import torch

    torch.set_num_threads(args.threads)
    import_package()
    from neural_ik.blender_io import bake
    from neural_ik.blender_io.rig import rig_description
    from neural_ik.model.skeleton import KEYPOINTS, SPARSE_EFFECTORS

    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.object
    rig = rig_description(obj)
    mapping = bake.resolve_mapping(obj, rig)
    mw = np.array(obj.matrix_world)
    rest = {e: mw[:3, :3] @ np.array(obj.pose.bones[mapping.entries[e]].head) + mw[:3, 3]
            for e in SPARSE_EFFECTORS}
    options = bake.BakeOptions(device="cpu", mode="sparse")
    solver = bake.get_solver("cpu")
    print(f"Rigify meta-rig, {len(rig)} bones; torch threads {torch.get_num_threads()}; "
          f"{args.repeats} solves per row (median / max ms); effector distances read from the posed armature")
    print(f"{'hand moved':>10s} {'median ms':>10s} {'max ms':>8s} {'reach mean mm':>14s} {'reach max mm':>13s}  "
          "not reached")
    for move in (0.0, 0.2, 0.4, 0.6):
        kp = np.full((1, len(KEYPOINTS), 3), np.nan)
        for e in SPARSE_EFFECTORS:
            kp[0, KEYPOINTS.index(e)] = rest[e]
        kp[0, KEYPOINTS.index("hand_l")] += np.array([0.0, -move, 0.5 * move]) / np.sqrt(1.25)
        times = []
        out = None
        for _ in range(args.repeats):
            for pb in obj.pose.bones:          # every solve starts from the rest pose
                pb.rotation_quaternion = (1, 0, 0, 0)
                pb.rotation_euler = (0, 0, 0)
                pb.location = (0, 0, 0)
            t0 = time.perf_counter()
            out = bake.solve_current_frame(obj, kp, None, options, mapping=mapping, solver=solver)
            times.append(time.perf_counter() - t0)
        bpy.context.view_layer.update()
        d = [np.linalg.norm(mw[:3, :3] @ np.array(obj.pose.bones[mapping.entries[e]].head) + mw[:3, 3]
                            - kp[0, KEYPOINTS.index(e)]) * 1000.0 for e in SPARSE_EFFECTORS]
        print(f"{move * 100:8.0f}cm {np.median(times) * 1000:10.1f} {np.max(times) * 1000:8.1f} "
              f"{np.mean(d):14.2f} {np.max(d):13.2f}  {'; '.join(out['unreachable']) or '-'}")
    return 0


if __name__ == "__main__":
    import os
    import sys

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # bpy 4.x can hang or crash at interpreter exit with Rigify enabled
