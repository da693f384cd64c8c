"""Solve Frame / Live Solve on Rigify's meta-rig: latency and how close the bones get to their empties.

What an animator does: Add Effectors on the meta-rig (the operator), then

1. moves the left-hand empty by 0 to 60 cm (forward and up) and solves:
   ``--repeats`` solves per distance, each from the rest pose, through
   :func:`neural_ik.blender_io.pose_solve.solve_current_frame` (read the rig, the
   pipeline's sparse solve on the rig's own bones, set the pose);
2. drags with Live Solve on: every effector empty moves a little per timer
   tick (hands across the body, a foot lifted, hips and head lowered, 3 mm
   of jitter per tick) and each tick runs what Live Solve's modal timer runs
   (:func:`neural_ik.operators.effectors.live_tick`: read the empties and
   the settings, solve, set the pose, status line), ``--ticks`` ticks; the
   same through the operator call ``bpy.ops.neural_ik.live_solve()`` (the
   tick plus Blender's operator dispatch) is printed alongside.

Prints the median and maximum time and every effector's distance from its
empty, read back from the posed armature (``PoseBone.head`` in world space
after a depsgraph update), not from the solver.

    .venv/bin/python benchmarks/bench_live.py [--repeats 30] [--ticks 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from _pkg import import_package  # the script's folder is on sys.path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2, help="torch's threads, where something loaded it")
    args = ap.parse_args(argv)

    import bpy
    import addon_utils

    pkg = import_package()
    first_solve(pkg, args.threads)
    from neural_ik.blender_io import bake, pose_solve
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
    print(f"Rigify meta-rig, {len(rig)} bones; torch loaded: {'torch' in sys.modules} (the numpy path needs none); "
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
            out = pose_solve.solve_current_frame(obj, kp, None, options, mapping=mapping, solver=solver)
            times.append(time.perf_counter() - t0)
        bpy.context.view_layer.update()
        d = [np.linalg.norm(mw[:3, :3] @ np.array(obj.pose.bones[mapping.entries[e]].head) + mw[:3, 3]
                            - kp[0, KEYPOINTS.index(e)]) * 1000.0 for e in SPARSE_EFFECTORS]
        print(f"{move * 100:8.0f}cm {np.median(times) * 1000:10.1f} {np.max(times) * 1000:8.1f} "
              f"{np.mean(d):14.2f} {np.max(d):13.2f}  {'; '.join(out['unreachable']) or '-'}")
    live_drag(obj, mapping, mw, args.ticks)
    return 0


def first_solve(pkg, threads):
    """The first Solve Frame after enabling: the add-on enabled (its background load started as
    the UI's event loop starts it), the meta-rig, Add Effectors, a hand moved, the operator."""
    import bpy
    import addon_utils

    assert "torch" not in sys.modules
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable("rigify", default_set=True)
    t_enable = time.perf_counter()
    pkg.register()
    from neural_ik.blender_io import preload

    preload.start("cpu")
    bpy.ops.object.armature_human_metarig_add()
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    t_ready = time.perf_counter()
    while preload.loading():
        time.sleep(0.01)
    t_loaded = time.perf_counter()
    if "torch" in sys.modules:   # (a solve on the CPU runs in numpy: torch only where something loaded it)
        sys.modules["torch"].set_num_threads(threads)
    hand = [o for o in bpy.data.objects if o.get("neural_ik_effector") == "hand_l"]
    if hand:
        hand[0].location.y -= 0.2
    bpy.context.view_layer.update()
    t0 = time.perf_counter()
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    second = time.perf_counter() - t0
    print(f"Start-up: the network loaded in the background {t_loaded - t_enable:.2f} s after enabling "
          f"(the scene was ready after {t_ready - t_enable:.2f} s; a Solve Frame clicked before then waits "
          f"for the load); first Solve Frame (operator) {first * 1000:.0f} ms, second {second * 1000:.0f} ms; "
          f"status: {bpy.context.scene.neural_ik.status}")


def live_drag(obj, mapping, mw, ticks):
    """Live Solve's solve, tick after tick, while every empty is dragged (see the module docstring)."""
    import bpy

    from neural_ik.model.skeleton import SPARSE_EFFECTORS
    from neural_ik.operators.effectors import live_tick
    from neural_ik.operators.solve import effector_objects

    for pb in obj.pose.bones:
        pb.rotation_quaternion = (1, 0, 0, 0)
        pb.location = (0, 0, 0)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    root = bpy.context.scene.neural_ik.effector_root
    empties = effector_objects(root)
    start = {k: np.array(e.location) for k, e in empties.items()}
    # knees a little bent from the first tick: at the rest pose the legs are straight
    # and any jitter of the feet or hips puts the feet out of reach
    start["pelvis"] = start["pelvis"] + np.array([0.0, 0.0, -0.03])
    start["head"] = start["head"] + np.array([0.0, 0.0, -0.03])
    pelvis = start["pelvis"]
    # where each drag heads: hands across the body at chest height, feet lifted, hips and head lowered
    goal = dict(start)
    goal["hand_l"] = pelvis + np.array([-0.1, -0.3, 0.35])
    goal["hand_r"] = pelvis + np.array([0.15, -0.35, 0.15])
    goal["foot_l"] = start["foot_l"] + np.array([0.0, -0.15, 0.25])
    goal["foot_r"] = start["foot_r"] + np.array([0.05, 0.1, 0.0])
    goal["pelvis"] = start["pelvis"] + np.array([0.0, 0.0, -0.12])
    goal["head"] = start["head"] + np.array([0.0, -0.08, -0.14])
    rng = np.random.default_rng(0)
    times, op_times, worst = [], [], []
    flagged = 0
    for t in range(ticks):
        s = 0.5 - 0.5 * np.cos(np.pi * min(1.0, 2.0 * t / ticks))   # there and hold, with jitter
        for k, e in empties.items():
            e.location = start[k] + s * (goal[k] - start[k]) + rng.normal(scale=0.003, size=3)
        bpy.context.view_layer.update()
        t0 = time.perf_counter()
        if t % 2:   # what the modal timer runs
            live_tick(bpy.context)
            times.append(time.perf_counter() - t0)
        else:       # the same through Blender's operator call
            assert bpy.ops.neural_ik.live_solve('EXEC_DEFAULT') == {'FINISHED'}
            op_times.append(time.perf_counter() - t0)
        flagged += "not reached" in bpy.context.scene.neural_ik.status
        bpy.context.view_layer.update()
        d = [np.linalg.norm(mw[:3, :3] @ np.array(obj.pose.bones[mapping.entries[k]].head) + mw[:3, 3]
                            - np.array(empties[k].matrix_world.translation)) * 1000.0 for k in SPARSE_EFFECTORS]
        worst.append(max(d))
    times = np.array(times[3:]) * 1000.0          # the first ticks fill the caches
    op_times = np.array(op_times[3:]) * 1000.0
    worst = np.array(worst)
    print(f"\nLive Solve drag, {ticks} ticks (read the empties, solve, pose, status):")
    print(f"  Live Solve tick (live_tick, as the modal timer runs it): median {np.median(times):.1f} ms, "
          f"90th percentile {np.percentile(times, 90):.1f} ms, max {times.max():.1f} ms")
    print(f"  through bpy.ops.neural_ik.live_solve (plus Blender's operator dispatch): median "
          f"{np.median(op_times):.1f} ms, 90th percentile {np.percentile(op_times, 90):.1f} ms")
    print(f"  farthest effector per tick: median {np.median(worst):.2f} mm, max {worst.max():.2f} mm,"
          f" ticks over 1 mm: {int((worst > 1.0).sum())} (reported as not reached: {flagged})")
    print(f"  last status: {bpy.context.scene.neural_ik.status}")

    return 0


if __name__ == "__main__":
    import os
    import sys

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # bpy 4.x can hang or crash at interpreter exit with Rigify enabled
