"""The least a keypoint bake can take: a whole process that reads the clips and runs the network alone.

For every ``.npz`` of ``DIR``, in one process: the package's imports, the
reader (``read_keypoints`` and ``to_canonical``, as ``neural-ik batch`` reads a
file) and the network's answer on every frame (``Solver.solve(...,
refine=False)``, on the CPU: the numpy layers up to their frame limit, as a
bake runs them). Nothing else: no refinement, no rig solve, no file written.
A bake of the same clips cannot be faster than this process, so Blender's time
over it is the largest speed-up the network path can reach on the machine
(:mod:`bench_vs_blender` times it beside both sides).

    .venv/bin/python benchmarks/network_floor.py DIR
"""

from __future__ import annotations

import os
import sys
import time

from _pkg import import_package  # the script's folder is on sys.path


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: network_floor.py DIR (a folder of .npz keypoint clips)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    import_package()
    from neural_ik.pipeline.cache import get_solver
    from neural_ik.readers import read_keypoints, to_canonical

    solver = get_solver("cpu")
    frames = 0
    for name in sorted(os.listdir(argv[0])):
        if not name.endswith(".npz"):
            continue
        kp, mask = to_canonical(read_keypoints(os.path.join(argv[0], name)))
        out = solver.solve(kp, mask, refine=False)
        frames += len(out.local_rot)
    print(f"network_floor: {frames} frames in {time.perf_counter() - t0:.3f} s (in the process)", file=sys.stderr)
    return 0 if frames else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
