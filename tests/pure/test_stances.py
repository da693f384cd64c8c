"""Stances at heights far apart (raised ground, tiptoe, a markerless capture's drift): one floor is kept,
and the bake says so before solving."""

import re

import numpy as np

from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS, SPARSE_EFFECTORS  # noqa: E402
from neural_ik.pipeline import BakeOptions  # noqa: E402
from neural_ik.pipeline.prepare import prepare_source  # noqa: E402
from neural_ik.pipeline.stances import stance_spread  # noqa: E402

FPS = 30.0


def _apart(kp):
    return [w for w in prepare_source(kp, None, FPS, BakeOptions(device="cpu")).warnings if "cm apart" in w]


def test_a_walk_on_one_floor_says_nothing():
    kp = walk_keypoints(4.0, FPS)
    spread = stance_spread(kp, np.isfinite(kp).all(-1), FPS)
    assert spread is not None and spread < 0.02, spread
    assert not _apart(kp)


def test_a_walk_whose_second_half_stands_higher_is_named():
    """Half the walk 15 cm up (a platform, or a capture's height drifting): the warning names 15 cm;
    the effectors alone (ankles, no balls) read the same."""
    kp = walk_keypoints(4.0, FPS)
    up = kp.copy()
    up[len(kp) // 2:, :, 2] += 0.15
    said = _apart(up)
    assert len(said) == 1 and 14 <= int(re.search(r"lie (\d+) cm apart", said[0]).group(1)) <= 16, said
    eff = np.full_like(up, np.nan)
    keep = [KEYPOINTS.index(n) for n in SPARSE_EFFECTORS]
    eff[:, keep] = up[:, keep]
    spread = stance_spread(eff, np.isfinite(eff).all(-1), FPS)
    assert abs(spread - 0.15) < 0.02, spread


def test_a_jump_is_no_raised_ground():
    """The whole body in the air for half a second, landing where it took off: no stance up there."""
    kp = walk_keypoints(4.0, FPS)
    t = np.arange(len(kp)) / FPS
    hop = np.where((t > 1.5) & (t < 2.0), 0.4 * np.sin(np.pi * (t - 1.5) / 0.5), 0.0)
    jumped = kp.copy()
    jumped[..., 2] += hop[:, None]
    assert not _apart(jumped)
