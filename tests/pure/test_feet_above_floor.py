"""A rig's foot never goes through the floor (issue 32): where the source's foot, along which the rig's
longer foot lies, or the source's ankle (markerless capture's tiptoe and dips) would put the rig's ball
or ankle below its clearance, the rows turn the foot up about the ankle and lift the ankle. The real
clip this came from (../shared/mocap/foreign/rokoko, onto the meta-rig) is measured by
benchmarks/bench_foreign.py; here the rule itself, on the meta-rig's own foot."""

import numpy as np
import pytest

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.pipeline import tuning  # noqa: E402
from neural_ik.pipeline.targets import foot_points  # noqa: E402
from neural_ik.pipeline.targets.dense import DenseRows  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import plan_retarget  # noqa: E402

UP = np.array([0.0, 0.0, 1.0])


def _rows():
    rig = rigs.rigify_metarig_description()
    plan = plan_retarget(rig, auto_map(rig))
    kp = walk_keypoints(1.0, 30.0)[:30]
    rows = DenseRows(plan, kp, np.ones(kp.shape[:2], bool), 1.0, 30.0, UP, tuning.WEIGHTS)
    rows.bone_directions(0.0)
    rows.floor_known = True          # (the meta-rig stands on its floor at rest)
    return rows, foot_points(plan, UP)


@pytest.mark.parametrize("rule", ["on", "off"])
def test_a_foot_pointing_into_the_floor_turns_up_about_its_ankle(rule, monkeypatch):
    if rule == "off":
        monkeypatch.setattr(tuning, "FOOT_FLOOR_SLACK", 1e9)
    rows, fp = _rows()
    L = rows._foot_length(fp, "l")
    h = fp["l"][1][3]                                  # the ball's rest clearance
    row = rows.tg.rows[rows.feet_row["foot_l"]]
    steep = np.cos(np.radians(60.0)) * np.array([0.0, -1.0, 0.0]) - np.sin(np.radians(60.0)) * UP
    row["target"][:] = (L * np.array([0.0, -1.0, 0.0])).astype(row["target"].dtype)   # flat...
    row["target"][10:20] = (L * steep).astype(row["target"].dtype)                     # ...then 60 degrees down
    ankle = np.tile([0.1, 0.0, 0.09], (30, 1))         # 9 cm up: the ball along the foot 2 cm under
    before = row["target"].copy()
    n_rows = len(rows.tg.rows)
    rows._foot_above_floor("l", fp, ankle, np.ones(30, bool))
    d = row["target"].astype(np.float64)
    ball = ankle + L * d / np.linalg.norm(d, axis=-1, keepdims=True)
    if rule == "off":
        assert (ball[10:20] @ UP < h - 0.015).all() and len(rows.tg.rows) == n_rows
        return
    slack = tuning.FOOT_FLOOR_SLACK * L
    np.testing.assert_allclose(ball[10:20] @ UP, h - slack, atol=1e-6)          # at its clearance, no lower
    np.testing.assert_allclose(np.linalg.norm(d[10:20], axis=-1), L, rtol=1e-6)  # the foot's length kept
    assert ball[10:20, 1].max() < 0.1 and np.allclose(ball[10:20, 0], 0.1)      # its heading kept
    np.testing.assert_array_equal(row["target"][:10], before[:10])               # the other frames as they were
    assert rows.info.floor_lifted == 10
    toe = rows.tg.rows[-1]                             # the toe along the floor, where the foot turned
    assert toe["name"] == "toe_l along the floor" and (toe["weight"][10:20] > 0).all() and not toe["weight"][:10].any()
    assert abs(toe["target"][10:20] @ UP).max() < 1e-6


@pytest.mark.parametrize("rule", ["on", "off"])
def test_an_ankle_below_its_clearance_is_lifted_to_it(rule, monkeypatch):
    if rule == "off":
        monkeypatch.setattr(tuning, "FOOT_FLOOR_SLACK", 1e9)
    rows, fp = _rows()
    ankle = np.tile([0.1, 0.0, 0.0], (30, 1))
    ankle[:, 2] = np.linspace(-0.05, 0.15, 30)           # through the floor, then in the air
    out = rows._ankle_above_floor("l", fp, ankle)
    floor = fp["l"][0][3] - tuning.FOOT_FLOOR_SLACK * rows._foot_length(fp, "l")
    if rule == "off":
        np.testing.assert_array_equal(out, ankle)
        return
    np.testing.assert_allclose(out[:, 2], np.maximum(ankle[:, 2], floor))
    np.testing.assert_array_equal(out[:, :2], ankle[:, :2])
