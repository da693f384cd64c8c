"""BVH export: Blender's exporter against the numpy writer, on the same baked clips.

Usage (from the repository root, after ``benchmarks/bench_batch.py``, which
leaves its baked clips in ``bench_out/batch/baked/batch.blend``)::

    .venv/bin/python benchmarks/bench_export.py [bench_out/batch/baked/batch.blend]

Every action of the file's armature is exported over its frame range with
Blender's BVH exporter (``export_anim.bvh``, as ``blender_io/export.py`` called it)
and with the numpy writer (``blender_io/export.py``), clip by clip in turn, in one
process; both files are read back with ``model.bvh.read_bvh`` and every
joint's position on every frame compared. Prints the seconds and frames per
second of both writers, the ratio and the largest joint difference.
"""

import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    blend = argv[0] if argv else os.path.join(REPO, "bench_out", "batch", "baked", "batch.blend")
    if not os.path.isfile(blend):
        print("bench_export: {} not found (run benchmarks/bench_batch.py first)".format(blend), file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(REPO, "cli"))
    from standalone import load_package

    load_package()
    import bpy
    import numpy as np

    from neural_ik.blender_io.export import export_armature
    from neural_ik.model.bvh import read_bvh

    bpy.ops.wm.open_mainfile(filepath=blend)
    obj = next(o for o in bpy.data.objects if o.type == "ARMATURE")
    out = os.path.join(REPO, "bench_out", "export")
    os.makedirs(out, exist_ok=True)
    theirs, ours = os.path.join(out, "blender.bvh"), os.path.join(out, "numpy.bvh")
    t_blender = t_numpy = worst = 0.0
    frames = clips = 0
    for action in sorted(bpy.data.actions, key=lambda a: a.name):
        ad = obj.animation_data or obj.animation_data_create()
        ad.action = action
        if hasattr(ad, "action_slot") and len(getattr(action, "slots", ())):
            ad.action_slot = action.slots[0]
        start, end = (int(round(x)) for x in action.frame_range)
        t0 = time.perf_counter()
        export_armature(obj, theirs, start, end, bvh_writer="blender")
        t1 = time.perf_counter()
        used = export_armature(obj, ours, start, end)
        t_numpy += time.perf_counter() - t1
        t_blender += t1 - t0
        a, b = read_bvh(ours), read_bvh(theirs)
        if used != "numpy" or a.names != b.names or a.channels != b.channels:
            print("bench_export: {}: writer {}, hierarchies differ: {}".format(action.name, used, a.names != b.names))
            return 1
        worst = max(worst, float(np.abs(a.world_positions() - b.world_positions()).max()))
        frames += end - start + 1
        clips += 1
    print("{} clips, {} frames, {} bones".format(clips, frames, len(obj.data.bones)))
    print("| writer | seconds | frames/s |")
    print("|---|---:|---:|")
    print("| Blender's BVH exporter | {:.2f} | {:,.0f} |".format(t_blender, frames / t_blender))
    print("| numpy writer | {:.2f} | {:,.0f} |".format(t_numpy, frames / t_numpy))
    print("numpy writer {:.1f}x faster; largest joint difference {:.2e} (armature units)".format(
        t_blender / t_numpy, worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
