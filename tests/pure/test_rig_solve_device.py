"""The rig solve's torch path in float64, on the CPU and on a GPU, takes the numpy path's steps, and a
bake whose network ran on a GPU solves the rig there too with the same result."""

import numpy as np
import pytest

import rigs
from _pkg import pkg
from walks import walk_on

pkg()

import torch  # noqa: E402

from neural_ik.model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.retarget import rigsolve  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.rigsolve import Targets, free_bones, solve_rig  # noqa: E402
from neural_ik.retarget.solve import plan_retarget, pose_rig, target_keypoints  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


def _problem(seed=3, frames=rigsolve.SMALL_BATCH + 40):
    """The meta-rig with point and perpendicular rows on its mapped bones, a locked forearm axis and a
    start pose away from the targets' pose."""
    rig = rigs.rigify_metarig_description()
    mapping = auto_map(rig)
    plan = plan_retarget(rig, mapping)
    rng = np.random.default_rng(seed)
    T, B = frames, len(rig)
    q_true = matrix_to_quat(axis_angle_to_matrix(rng.normal(scale=0.3, size=(T, B, 3))))
    loc = np.zeros((T, B, 3))
    loc[:, plan.root] = rng.normal(scale=0.05, size=(T, 3))
    _, X = pose_rig(rig, q_true, loc)
    q0 = matrix_to_quat(quat_to_matrix(q_true) @ axis_angle_to_matrix(rng.normal(scale=0.2, size=(T, B, 3))))
    ent = [rig.index(b) for b in mapping.entries.values() if rig.has(b)]
    tg = Targets()
    for b in ent[::2]:
        tg.add({tg.point(b): 1.0}, X[:, b], 1.0)
    for b in ent[1::2]:
        p = rig.parents[b]
        tg.add({tg.point(b): 1.0, tg.point(p): -1.0}, X[:, b] - X[:, p], 0.5, perpendicular=True)
    locked = {rig.index(mapping.entries["forearm_l"]): np.array([True, False, True])}
    return rig, plan, q0, loc, tg, free_bones(rig, ent, plan.root), locked, X[:, ent], ent


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("decay", [0.3, 1.0])
def test_the_torch_path_in_float64_takes_the_numpy_steps(device, decay, monkeypatch):
    """Frames are independent problems with the same damping schedule: in float64 the two backends
    end on the same pose within micrometres (a fading prior's stiff normal equations included), on any device.

    (numpy's normal equations made float64 here too: where the prior stays it forms them in float32.)
    """
    from neural_ik.retarget import levenberg

    monkeypatch.setattr(levenberg, "_normal_dtype", lambda ops, decay: np.float64 if ops.name == "numpy" else ops.dtype)
    rig, plan, q0, loc, tg, free, locked, target, ent = _problem()
    kw = dict(iterations=8, locked=locked, prior_decay=decay, tol=0.0)
    ref = solve_rig(rig, q0, loc, tg, free, plan.root, backend="numpy", **kw)
    # a GPU takes the torch path in float64 by itself; the CPU only when asked
    extra = dict(backend="torch", dtype=torch.float64) if device == "cpu" else {}
    got = solve_rig(rig, q0, loc, tg, free, plan.root, device=device, **extra, **kw)
    # (Cholesky against numpy's solver on normal equations that grow stiff as the prior fades, a GPU's
    # summation order: tens of micrometres)
    np.testing.assert_allclose(got.heads, ref.heads, atol=5e-5)
    np.testing.assert_allclose(np.abs(np.sum(got.quaternions * ref.quaternions, -1)), 1.0, atol=1e-8)
    np.testing.assert_allclose(got.residual, ref.residual, atol=5e-5)
    start = np.linalg.norm(target - pose_rig(rig, q0, loc)[1][:, ent], axis=-1).mean()
    assert got.residual.mean() < 0.2 * start


@CUDA
def test_a_gpu_takes_the_torch_path_in_chunks_of_thousands(monkeypatch):
    """On a GPU the chunks are :data:`GPU_CHUNK` frames, not the CPU's, whatever the caller asked."""
    rig, plan, q0, loc, tg, free, locked, _, _ = _problem(frames=200)
    seen = []
    real = rigsolve._ChunkSolve.solve

    def spy(self, c0, c1, tick):
        seen.append((c1 - c0, self.use_torch))
        return real(self, c0, c1, tick)

    monkeypatch.setattr(rigsolve._ChunkSolve, "solve", spy)
    solve_rig(rig, q0, loc, tg, free, plan.root, iterations=3, chunk=64, device="cuda")
    assert seen == [(200, True)]


@CUDA
def test_a_bake_on_the_gpu_gives_the_cpu_bake():
    """Keypoints baked with ``device="cuda"``: the network and the rig solve run on the GPU, and the
    bones land where the CPU's bake puts them (float32 network layers against numpy's: a millimetre)."""
    rig = rigs.rigify_metarig_description()
    plan, mapping, truth = walk_on(rig, seconds=4.0)
    kp = target_keypoints(plan, truth.quaternions, truth.locations) @ plan.K.T
    heads = {}
    for device in ("cpu", "cuda"):
        job = RigBake(rig, mapping, kp, None, 30.0, BakeOptions(device=device, smooth="none"))
        job.run()
        assert str(job.solved.device).startswith(device)
        heads[device] = job.full_result().heads
    err = np.linalg.norm(heads["cuda"] - heads["cpu"], axis=-1)
    assert np.nanmax(err) < 2e-3 * plan.leg_length, np.nanmax(err)
