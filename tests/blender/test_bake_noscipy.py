"""A bake with scipy unimportable (as in Blender's own Python, which bundles numpy only).

``--smooth savgol`` / ``--smooth butter`` with the refinement on, run with
``sys.modules["scipy"] = None`` (every ``import scipy`` fails), succeeds and
writes the same motion as with scipy (the numpy ports in
``retarget/smoothing.py``; compared with scipy in
``tests/pure/test_smoothing_noscipy.py``).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from test_cli_bake import REPO, needs_weights, weights_args, write_walk_npz


_NO_SCIPY = r"""
import runpy, sys
sys.modules["scipy"] = None  # as in Blender's Python: `import scipy` fails
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _bake(tmp_path, src, smooth, no_scipy):
    tag = "{}_{}".format(smooth, "noscipy" if no_scipy else "scipy")
    bvh = tmp_path / (tag + ".bvh")
    argv = ["bake", str(src), "--target", "rigify", "--smooth", smooth, "--smooth-strength", "0.6", "--export",
            str(bvh), "--report", "-", "-q", *weights_args()]
    cli = str(REPO / "cli" / "standalone.py")
    cmd = [sys.executable, "-c", _NO_SCIPY, cli, *argv] if no_scipy else [sys.executable, cli, *argv]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(REPO))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["clips"][0]["status"] == "done"
    motion = bvh.read_text().split("Frame Time:")[1].splitlines()[1:]
    return np.array([[float(v) for v in line.split()] for line in motion if line.strip()])


@needs_weights
@pytest.mark.parametrize("smooth", ["savgol", "butter"])
def test_bake_without_scipy(tmp_path, smooth):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=1.5)
    without = _bake(tmp_path, src, smooth, no_scipy=True)
    with_scipy = _bake(tmp_path, src, smooth, no_scipy=False)
    assert without.shape == with_scipy.shape and without.shape[0] > 40
    # the same motion (BVH channels: armature units and degrees): the filters agree to 1e-9; the rig
    # solve's convergence test may stop an iteration apart on a frame, a few thousandths of a degree
    diff = np.abs(without - with_scipy)
    assert diff.max() < 0.05 and diff.mean() < 1e-3, (diff.max(), diff.mean())
