"""Bake quality figures: keypoint error, jitter and foot sliding (pure numpy)."""

import numpy as np
import pytest

from neural_ik.model import skeleton
from neural_ik.retarget import metrics as metrics_module


@pytest.fixture(scope="module")
def metrics():
    return metrics_module


@pytest.fixture(scope="module")
def sk():
    return skeleton


def test_keypoint_error_mm_and_nan(metrics):
    a = np.zeros((4, 3, 3))
    b = a.copy()
    b[:, 0, 0] = 0.002          # 2 mm everywhere on point 0
    b[3, 1, 2] = 0.010          # 10 mm once
    b[2, 2] = np.nan            # ignored
    mean, mx = metrics.keypoint_error(b, a)
    assert mx == pytest.approx(10.0)
    assert mean == pytest.approx((4 * 2.0 + 10.0) / 11)
    mask = np.ones((4, 3), bool)
    mask[:, 0] = False
    mean, mx = metrics.keypoint_error(b, a, mask)
    assert mx == pytest.approx(10.0) and mean == pytest.approx(10.0 / 7)
    assert np.isnan(metrics.keypoint_error(np.full((1, 1, 3), np.nan), np.zeros((1, 1, 3)))[0])
    with pytest.raises(ValueError):
        metrics.keypoint_error(np.zeros((2, 3, 3)), np.zeros((2, 4, 3)))


def test_jitter(metrics):
    t = np.arange(50) / 30.0
    lin = np.zeros((50, 2, 3))
    lin[:, :, 0] = t[:, None] * 1.5            # constant velocity: no acceleration
    assert metrics.jitter(lin, 30) == pytest.approx(0.0, abs=1e-9)
    par = np.zeros((50, 1, 3))
    par[:, 0, 2] = 0.5 * 4.0 * t ** 2           # constant 4 m/s^2
    assert metrics.jitter(par, 30) == pytest.approx(4.0, rel=1e-6)
    rng = np.random.default_rng(0)
    noisy = lin + rng.normal(0, 0.005, lin.shape)
    assert metrics.jitter(noisy, 30) > 5.0
    assert metrics.jitter(lin[:2], 30) == 0.0


def _walk(sk, fps, slide_speed=0.0, frames=60):
    """Keypoints whose feet stand still (or slide at ``slide_speed`` m/s)."""
    kp = np.broadcast_to(sk.CANONICAL.rest_keypoints(), (frames, 32, 3)).copy()
    kp[..., 2] -= kp[..., 2].min()                      # lowest point on the floor
    t = np.arange(frames) / fps
    feet = [sk.keypoint_index(n) for n in ("heel_l", "toe_tip_l", "heel_r", "toe_tip_r")]
    kp[:, feet, 0] += (slide_speed * t)[:, None]
    return kp


def test_foot_sliding_still_and_sliding(metrics, sk):
    fps = 30.0
    assert metrics.foot_sliding(_walk(sk, fps), fps) == pytest.approx(0.0, abs=1e-9)
    # 0.3 m/s sliding while touching the floor: 10 mm per frame at 30 fps
    assert metrics.foot_sliding(_walk(sk, fps, 0.3), fps) == pytest.approx(10.0, rel=1e-6)
    # fast movement is not a contact (a swing), so it does not count as sliding
    assert metrics.foot_sliding(_walk(sk, fps, 3.0), fps) == 0.0


def test_foot_contacts_height(metrics):
    fps = 30.0
    p = np.zeros((40, 1, 3))
    p[20:, 0, 2] = 0.2                                  # foot lifted after frame 20
    c = metrics.foot_contacts(p, fps)
    assert c[:20, 0].all() and not c[20:, 0].any()
    assert metrics.foot_contacts(p, fps, floor=-1.0).sum() == 0


def test_bone_direction_error_leaves_out_zero_length_end_sites(metrics, sk):
    """A file whose end sites have zero length (rounded to 1e-8 m) gives its end bones no direction:
    a bake that meets every joint reads 0 degrees, not the angle of rounding noise."""
    rng = np.random.default_rng(3)
    kp = np.asarray(sk.CANONICAL.rest_keypoints(), dtype=np.float64)[None].repeat(5, 0)
    kp += rng.normal(scale=0.01, size=kp.shape)
    source = kp.copy()
    ends = [sk.KEYPOINTS.index(n) for n in ("head_top", "hand_tip_l", "hand_tip_r", "toe_tip_l", "toe_tip_r")]
    parents = [sk.BONE_CHILD.index(e) for e in ends]
    source[:, ends] = source[:, parents] + rng.normal(scale=1e-8, size=(5, len(ends), 3))
    assert metrics.bone_direction_error(kp, source) < 1e-6
    turned = kp.copy()
    turned[:, sk.KEYPOINTS.index("forearm_l")] += 0.05     # a real bone off: still counted
    assert metrics.bone_direction_error(turned, source) > 0.5
