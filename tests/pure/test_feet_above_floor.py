"""An ankle never goes through the floor (issue 32): on a rig standing on its floor at rest, a source
ankle that dips below the ankle's rest clearance (markerless capture's noise; Rokoko's clip onto the
meta-rig, measured by benchmarks/bench_foreign.py) is lifted to it, less a slack."""

import numpy as np
import pytest

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake, tuning  # noqa: E402
from neural_ik.pipeline.targets import foot_points  # noqa: E402
from neural_ik.pipeline.targets.dense import DenseRows  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import plan_retarget  # noqa: E402

UP = np.array([0.0, 0.0, 1.0])


@pytest.mark.parametrize("floor_known", [True, False])
def test_an_ankle_below_its_clearance_is_lifted_to_it(floor_known):
    rig = rigs.rigify_metarig_description()
    plan = plan_retarget(rig, auto_map(rig))
    kp = walk_keypoints(1.0, 30.0)[:30]
    rows = DenseRows(plan, kp, np.ones(kp.shape[:2], bool), 1.0, 30.0, UP, tuning.WEIGHTS)
    rows.floor_known = floor_known       # (the meta-rig stands on its floor at rest; a hanging rig does not)
    fp = foot_points(plan, UP)
    ankle = np.tile([0.1, 0.0, 0.0], (30, 1))
    ankle[:, 2] = np.linspace(-0.05, 0.15, 30)           # through the floor, then in the air
    out = rows._ankle_above_floor("l", fp, ankle)
    if not floor_known:
        np.testing.assert_array_equal(out, ankle)
        return
    floor = fp["l"][0][3] - tuning.FOOT_FLOOR_SLACK * rows._foot_length(fp, "l")
    assert 0.05 < floor < fp["l"][0][3]
    np.testing.assert_allclose(out[:, 2], np.maximum(ankle[:, 2], floor))
    np.testing.assert_array_equal(out[:, :2], ankle[:, :2])


def test_a_bake_keeps_the_ankles_up_where_the_source_dips(monkeypatch):
    """The walk with its left ankle pushed 4 cm through the floor for a third of a second, onto the
    meta-rig: the baked ankle stays at its clearance (less the slack); the same bake without the rule
    puts it lower (the test can fail)."""
    rig = rigs.rigify_metarig_description()
    kp = walk_keypoints(2.0, 30.0)
    ka = KEYPOINTS.index("foot_l")
    low = np.argsort(kp[:, ka, 2])[:10]                   # the frames the ankle stands lowest
    kp[low, ka, 2] -= 0.04
    heights, slack0 = {}, tuning.FOOT_FLOOR_SLACK
    for slack in (slack0, 1e9):
        monkeypatch.setattr(tuning, "FOOT_FLOOR_SLACK", slack)
        job = RigBake(rig, auto_map(rig), kp, None, 30.0, BakeOptions(device="cpu", smooth="none"))
        job.run()
        heads = job.full_result().heads
        heights[slack] = heads[low, rig.index("foot.L")] @ UP
    fp = foot_points(job.plan, UP)
    L = np.linalg.norm(rig.head[rig.index("toe.L")] - rig.head[rig.index("foot.L")])
    clearance = fp["l"][0][3] + job.target_info.sole - slack0 * L
    assert heights[slack0].min() > clearance - 3e-3, (heights, clearance)
    assert heights[1e9].min() < heights[slack0].min() - 5e-3, heights
