"""The benchmarks that need neither Blender nor the shared mocap run to their tables (small sizes).

Three of them had stopped running after changes elsewhere (a constant that
moved, a reader that began standing clips on their floor, a bake result whose
arrays are now released) and nothing noticed. Each runs here as a user runs
it, in a process of its own; its table must come out. ``check_sources.py``
(Blender) is run in ``tests/blender/test_benchmarks_blender.py``.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv,expect", [
    (["bench_model.py", "--quick"], "| dense (32 keypoints) | 4096 |"),
    (["bench_gpu.py", "--device", "cpu", "--max-batch", "64"], "| sparse (6 effectors) | cpu |"),
    (["bench_gpu.py", "--device", "cpu", "--max-batch", "16", "--bake-frames", "120"],
     "| 120 | cpu | cpu (network) | cpu |"),
    (["bench_readers.py", "--frames", "300", "--repeat", "1"], "read_keypoints csv"),
    (["bench_fk.py", "--repeats", "3"], "rig FK numpy, meta-rig's"),
    (["bench_numpy_path.py", "--frames", "200", "--repeats", "1"], "\n    200 "),
])
def test_benchmark_runs(argv, expect):
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / argv[0]), *argv[1:]], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert expect in r.stdout, r.stdout[-3000:]


def test_network_floor_runs(tmp_path):
    """network_floor.py: every frame of every clip through the network, in one process; an empty folder fails."""
    import numpy as np

    sys.path.insert(0, str(REPO / "tests"))
    from _pkg import pkg

    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    for i, frames in enumerate((40, 25)):
        np.savez(tmp_path / f"clip{i}.npz", positions=walk_keypoints(frames / 30.0, 30.0), joint_names=np.array(KEYPOINTS),
                 fps=30.0, units="m", up_axis="Z")
    script = str(REPO / "benchmarks" / "network_floor.py")
    r = subprocess.run([sys.executable, script, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "network_floor: 65 frames in" in r.stderr, r.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, script, str(empty)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
