"""What a long bake holds: float32 channels, rows and source; smaller network batches on the CPU.

The memory itself is measured by ``benchmarks/bench_memory.py``; these check the rules that keep it.
"""

import numpy as np

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake, tuning  # noqa: E402
from neural_ik.pipeline.cache import get_solver  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402


class _Recording:
    """The CPU solver, recording the batch size and dtype each solve was asked for."""

    def __init__(self):
        self.solver = get_solver("cpu")
        self.device = self.solver.device
        self.asked = []

    def solve(self, kp, *args, **kwargs):
        self.asked.append((len(kp), kwargs.get("batch_size"), kwargs.get("dtype")))
        return self.solver.solve(kp, *args, **kwargs)


def _bake(monkeypatch, long_frames):
    monkeypatch.setattr(tuning, "LONG_CLIP_FRAMES", long_frames)
    rig = rigs.rigify_metarig_description()
    solver = _Recording()
    job = RigBake(rig, auto_map(rig), walk_keypoints(2.0, 30.0)[:40], None, 30.0, BakeOptions(smooth="none"),
                  solver=solver)
    job.solve()
    assert job.src_m.dtype == np.float32
    job.fit()
    return job, solver.asked


def test_a_long_clip_goes_through_the_network_in_smaller_batches(monkeypatch):
    _, asked = _bake(monkeypatch, long_frames=10)
    assert asked == [(40, tuning.LONG_CLIP_BATCH, np.float32)]
    _, asked = _bake(monkeypatch, long_frames=10_000)
    assert asked == [(40, 4096, np.float32)]


def test_a_long_bake_holds_float32_channels_rows_and_heads(monkeypatch):
    short, _ = _bake(monkeypatch, long_frames=10_000)
    assert short.result.quaternions.dtype == short.result.locations.dtype == np.float64
    job, _ = _bake(monkeypatch, long_frames=10)
    res = job.result
    assert res.quaternions.dtype == res.locations.dtype == res.heads.dtype == np.float32
    kept = [r for r in job.targets.rows if "target" in r]   # (the effector rows the figures read)
    assert kept and all(r["target"].dtype == r["weight"].dtype == np.float32 for r in kept)
    # the float32 channels are the rotations to a float32's precision: unit quaternions
    norm = np.linalg.norm(res.quaternions.astype(np.float64), axis=-1)
    assert np.abs(norm - 1.0).max() < 1e-6
