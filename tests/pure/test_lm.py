"""The one Levenberg-Marquardt loop (model/lm.py) on a toy problem, on both array backends."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import lm  # noqa: E402

DAMPING = lm.Damping(start=1e-3, decay=0.5, floor=1e-9)


class Rosenbrock:
    """Per frame: residuals ``(10 (y - x^2), 1 - x, sqrt(p) (x - x0), sqrt(p) (y - y0))``; minimum near (1, 1)."""

    def __init__(self, ops, start, prior=0.0, fail=()):
        self.ops = ops
        self.start_xy = ops.asarray(start)
        self.x0 = ops.copy(self.start_xy)
        self.prior = prior
        self.fail = np.zeros(len(start), dtype=bool)
        self.fail[list(fail)] = True
        self.shares, self.taken, self.dampings = [], [], []

    def start(self):
        return self.evaluate(self.start_xy)

    def evaluate(self, xy):
        x, y = xy[:, 0], xy[:, 1]
        r = self.ops.xp.stack([10 * (y - x * x), 1 - x], 1)
        d = xy - self.x0
        return {"xy": xy, "r": r, "cost": (r * r).sum(1) + self.prior * (d * d).sum(1)}

    def step(self, s, mu):
        ops = self.ops
        self.dampings.append(ops.numpy(mu).copy())
        x = s["xy"][:, 0]
        n = x.shape[0]
        Jm = ops.zeros((n, 2, 2))
        Jm[:, 0, 0], Jm[:, 0, 1], Jm[:, 1, 0] = -20 * x, 10.0, -1.0
        H = ops.T(Jm) @ Jm
        H[:, 0, 0] += self.prior + mu
        H[:, 1, 1] += self.prior + mu
        g = (ops.T(Jm) @ s["r"][..., None])[..., 0] + self.prior * (s["xy"] - self.x0)
        step, ok = ops.solve_spd(H, g)
        ok = ok & ops.asarray(~self.fail).bool() if ops.name == "torch" else ok & ~self.fail
        return ops.where(ok[:, None], step, 0.0), ok

    def candidate(self, s, step):
        return self.evaluate(s["xy"] + step)

    def fade_prior(self, s, share):
        self.shares.append(share)
        return s

    def take(self, idx):
        idx = self.ops.numpy(idx).astype(int) if self.ops.name == "torch" else idx
        self.taken.append(np.array(idx))
        self.x0 = self.x0[self.ops.index(idx)]
        self.fail = self.fail[idx]


def _ops(name):
    return lm.NUMPY if name == "numpy" else lm.torch_ops(torch.float64)


START = [[-1.2, 1.0], [0.0, 0.0], [2.0, 3.0], [0.5, -1.0]]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_every_frame_reaches_the_minimum(backend):
    ops = _ops(backend)
    pb = Rosenbrock(ops, START)
    s, done = lm.levenberg_marquardt(pb, iterations=100, damping=DAMPING)
    assert done == 100
    np.testing.assert_allclose(ops.numpy(s["xy"]), 1.0, atol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_failed_solve_keeps_the_frame_and_grows_its_damping(backend):
    ops = _ops(backend)
    pb = Rosenbrock(ops, START, fail=[2])
    s, _ = lm.levenberg_marquardt(pb, iterations=5, damping=DAMPING)
    xy = ops.numpy(s["xy"])
    np.testing.assert_array_equal(xy[2], START[2])    # never moved
    mu = np.array(pb.dampings)
    np.testing.assert_allclose(mu[:, 2], 1e-3 * 10.0 ** np.arange(5))   # rejected: x10 each time
    ratio = mu[1:] / mu[:-1]
    assert np.isin(np.round(ratio, 12), [0.5, 10.0]).all()               # accepted: x0.5
    assert (ratio[:, [0, 1, 3]] == 0.5).any()


def test_converged_frames_leave_the_batch_and_come_back_in_the_result():
    pb = Rosenbrock(lm.NUMPY, START)
    s, done = lm.levenberg_marquardt(pb, iterations=200, damping=DAMPING, rtol=1e-12, keep=("xy", "cost"))
    assert pb.taken, "no frame left the batch"
    assert set(s) == {"xy", "cost"} and s["xy"].shape == (4, 2)
    np.testing.assert_allclose(s["xy"], 1.0, atol=1e-4)
    assert done < 200


def test_the_prior_fades_to_its_floor_and_a_short_step_stops_the_loop():
    pb = Rosenbrock(lm.NUMPY, START, prior=1e-3)
    _, done = lm.levenberg_marquardt(pb, iterations=6, damping=DAMPING, prior_decay=0.5, prior_floor=0.1)
    assert pb.shares == [0.5, 0.25, 0.125, 0.1, 0.1]
    pb = Rosenbrock(lm.NUMPY, [[1.0, 1.0]] * 2)   # at the minimum: the first step is (near) zero
    _, done = lm.levenberg_marquardt(pb, iterations=50, damping=DAMPING, tol=1e-9, min_iterations=3)
    assert done == 3
