"""Inference API: shapes, modes, devices, skeleton fitting, weights errors."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import batches, inference as I  # noqa: E402
from training import train as T  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, KEYPOINTS, Skeleton, keypoints_from_fk_np  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="module", params=[("lengths", "positions"), ("offsets", "positions"), ("lengths", "directions")],
                ids=["lengths", "offsets", "directions"])
def weights(request, tmp_path_factory):
    """A tiny network reading the skeleton's bone lengths or its offsets, the pose's positions or also its
    bones' directions."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "tiny.pt"
    skeleton_input, pose_input = request.param
    T.export_weights(T.IKNet(32, 1, skeleton_input=skeleton_input, pose_input=pose_input), path, T.TrainConfig(), {})
    return path


@pytest.fixture(scope="module")
def poses():
    d = T.synthetic_pose_data(12, seed=5, sigma_deg=10.0)
    sk = CANONICAL.scaled(1.05)
    kp = keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), sk)
    return kp, sk


def test_solve_shapes_and_modes(weights, poses):
    kp, sk = poses
    s = I.Solver(weights, device="cpu")
    calls = []
    r = s.solve(kp, batch_size=5, progress=lambda done, total: calls.append((done, total)))
    assert r.mode == "dense"
    assert r.local_rot.shape == (12, 22, 3, 3) and r.local_rot.dtype == np.float64
    assert r.root_pos.shape == (12, 3) and r.keypoints.shape == (12, 32, 3) and r.error_mm.shape == (12,)
    assert calls == [(5, 12), (10, 12), (12, 12)]
    assert set(r.seconds) >= {"network", "refine"}
    # batches give the same answer as one batch
    r2 = s.solve(kp, batch_size=4096)
    np.testing.assert_allclose(r.keypoints, r2.keypoints, atol=2e-4)
    s.solve(kp, refine=False, batch_size=5)  # network alone: identical batches
    np.testing.assert_allclose(s.solve(kp, refine=False, batch_size=5).local_rot,
                               s.solve(kp, refine=False).local_rot, atol=1e-5)
    # single frame
    r1 = s.solve(kp[0], skeleton=sk)
    assert r1.local_rot.shape == (1, 22, 3, 3)
    # auto sparse detection
    sp = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sp[:, eff] = kp[:, eff]
    assert s.solve(sp, refine=False).mode == "sparse"
    assert I.detect_mode(np.isfinite(kp).all(-1)) == "dense"


def test_refinement_reaches_targets_through_the_api(weights, poses):
    kp, sk = poses
    s = I.Solver(weights, device="cpu")
    # a barely trained network: give the refinement more steps
    r = s.solve(kp, skeleton=sk, refine_steps=25)
    assert np.median(r.error_mm) < 1.0, r.error_mm
    r0 = s.solve(kp, skeleton=sk, refine=False)
    assert np.median(r0.error_mm) > np.median(r.error_mm)
    # missing keypoints (NaN) are ignored
    kp2 = kp.copy()
    kp2[:, 9] = np.nan
    r2 = s.solve(kp2, skeleton=sk, refine_steps=2)
    assert np.isfinite(r2.local_rot).all()


def test_fit_skeleton_recovers_bone_lengths(poses):
    kp, sk = poses
    fit = I.fit_skeleton(kp)
    np.testing.assert_allclose(np.linalg.norm(fit.offsets[1:], axis=1), np.linalg.norm(sk.offsets[1:], axis=1), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(fit.end_offsets, axis=1), np.linalg.norm(sk.end_offsets, axis=1), atol=1e-6)
    sp = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sp[:, eff] = kp[:, eff]
    fit2 = I.fit_skeleton(sp)
    assert abs(fit2.height() / sk.height() - 1) < 0.1


def test_bad_inputs(weights):
    s = I.Solver(weights, device="cpu")
    with pytest.raises(ValueError):
        s.solve(np.zeros((3, 31, 3)))
    with pytest.raises(ValueError):
        s.solve(np.zeros((3, 32, 3)), mode="both")


def test_weights_errors(tmp_path, weights):
    with pytest.raises(I.WeightsError, match="not found"):
        I.Solver(tmp_path / "missing.pt")
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(I.WeightsError, match="corrupt"):
        I.Solver(bad)
    blob = torch.load(weights, weights_only=True)
    v = dict(blob, format_version=99)
    torch.save(v, tmp_path / "v.pt")
    with pytest.raises(I.WeightsError, match="version 99"):
        I.Solver(tmp_path / "v.pt")
    st = dict(blob["state"])
    st["inp.weight"] = torch.zeros(5, 5, dtype=torch.float16)
    torch.save(dict(blob, state=st), tmp_path / "shape.pt")
    with pytest.raises(I.WeightsError, match="shape"):
        I.Solver(tmp_path / "shape.pt")
    hp = dict(blob["hparams"], skeleton_input="angles")
    torch.save(dict(blob, hparams=hp), tmp_path / "kind.pt")
    with pytest.raises(I.WeightsError, match="unknown skeleton input 'angles'"):
        I.Solver(tmp_path / "kind.pt")
    hp = dict(blob["hparams"], pose_input="velocities")
    torch.save(dict(blob, hparams=hp), tmp_path / "pose.pt")
    with pytest.raises(I.WeightsError, match="unknown pose input 'velocities'"):
        I.Solver(tmp_path / "pose.pt")
    torch.save({"hello": 1}, tmp_path / "other.pt")
    with pytest.raises(I.WeightsError, match="not a Neural IK"):
        I.Solver(tmp_path / "other.pt")
    assert issubclass(I.WeightsError, ValueError)


def test_device_errors(weights):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            I.Solver(weights, device="cuda")
    assert I.Solver(weights, device="auto").device.type in ("cpu", "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_cuda_matches_cpu(weights, poses):
    kp, sk = poses
    a = I.Solver(weights, device="cpu").solve(kp, skeleton=sk)
    b = I.Solver(weights, device="cuda").solve(kp, skeleton=sk)
    np.testing.assert_allclose(a.keypoints, b.keypoints, atol=1e-3)


@pytest.mark.skipif(not I.DEFAULT_WEIGHTS.exists(), reason="shipped weights not present")
def test_shipped_weights(poses):
    kp, sk = poses
    s = I.Solver(device="cpu")
    r = s.solve(kp, skeleton=sk)
    assert np.median(r.error_mm) < 1.0
    sp = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sp[:, eff] = kp[:, eff]
    rs = s.solve(sp, skeleton=sk)
    assert rs.mode == "sparse" and np.median(rs.error_mm) < 1.0


def test_single_frame_numpy_path_matches_torch(weights, poses, monkeypatch):
    # one CPU frame runs the numpy network (+ numpy refinement); the torch batches in float32,
    # as numpy computes
    kp, sk = poses
    s = I.Solver(weights, device="cpu", precision="float32")
    monkeypatch.setattr(batches, "NUMPY_MAX_FRAMES", 1)   # (two frames: torch)
    assert s._np_net is not None
    ori = np.full((len(kp), 6, 3, 3), np.nan)
    ori[:, 0] = np.eye(3)
    for x, o in ((kp, None), (np.where(np.arange(32)[None, :, None] % 3 == 0, np.nan, kp), None), (kp, ori)):
        batch = s.solve(x[:2], skeleton=sk, refine=False, orientations=None if o is None else o[:2])
        one = s.solve(x[0], skeleton=sk, refine=False, orientations=None if o is None else o[0])
        np.testing.assert_allclose(one.local_rot[0], batch.local_rot[0], atol=2e-5)
        np.testing.assert_allclose(one.root_pos[0], batch.root_pos[0], atol=2e-5)
        np.testing.assert_allclose(one.keypoints[0], batch.keypoints[0], atol=2e-5)
        ref1 = s.solve(x[0], skeleton=sk, refine_steps=3, orientations=None if o is None else o[0])
        ref2 = s.solve(x[:2], skeleton=sk, refine_steps=3, orientations=None if o is None else o[:2])
        # (three LM steps from an untrained network's pose: from the offsets network's start the numpy
        # and torch refinements part by up to a quarter of a millimetre)
        np.testing.assert_allclose(ref1.keypoints[0], ref2.keypoints[0],
                                   atol=2e-4 if s.net.skeleton_input == "lengths" else 5e-4)
        assert np.isfinite(ref1.error_mm).all()


def test_numpy_twin_reads_a_skeleton_of_other_placements_as_the_network_does(weights, poses):
    kp, sk = poses
    a = 0.5   # every joint placed elsewhere (each offset turned about X), the ends longer
    turn = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    off = np.array(sk.offsets)
    off[1:] = off[1:] @ turn.T
    sk2 = Skeleton(off, np.array(sk.end_offsets) * 1.1)
    s = I.Solver(weights, device="cpu", precision="float32")
    batch = s.solve(kp[:2], skeleton=sk2, refine=False)
    one = s.solve(kp[0], skeleton=sk2, refine=False)
    np.testing.assert_allclose(one.local_rot[0], batch.local_rot[0], atol=2e-5)
    other = s.solve(kp[:2], skeleton=sk, refine=False)
    moved = np.abs(other.local_rot - batch.local_rot).max()
    if s.net.skeleton_input == "offsets":   # (a network reading lengths sees the same skeleton twice but for the ends)
        assert moved > 1e-4, moved


def test_the_networks_root_is_placed_on_the_given_keypoints(poses):
    # the network's rotations kept, its root moved so the pose's keypoints sit on the given ones
    # as a whole: the mean difference over the given keypoints is zero, in the batched (torch) and
    # the single-frame (numpy) path alike, dense and sparse; off, the root is the network's own
    kp, sk = poses
    s = I.Solver(device="cpu", precision="float32")   # (the batches as the numpy twin computes)
    sp = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sp[:, eff] = kp[:, eff] + np.array([0.0, 0.0, 0.03])   # a body 3 cm off its own skeleton's pelvis height
    for x in (kp, sp):
        given = np.isfinite(x).all(-1)
        for r in (s.solve(x, skeleton=sk, refine=False), s.solve(x[0], skeleton=sk, refine=False)):
            n = len(r.keypoints)
            mean = np.nanmean(np.where(given[:n, :, None], x[:n] - r.keypoints, np.nan), axis=1)
            np.testing.assert_allclose(mean, 0.0, atol=1e-5)
    placed = s.solve(sp, skeleton=sk, refine=False)
    s.place_root = False
    try:
        own = s.solve(sp, skeleton=sk, refine=False)
        one = s.solve(sp[0], skeleton=sk, refine=False)
    finally:
        s.place_root = True
    np.testing.assert_allclose(own.local_rot, placed.local_rot, atol=1e-6)      # the rotations are the network's
    np.testing.assert_allclose(one.root_pos[0], own.root_pos[0], atol=2e-5)
    mean_own = np.nanmean(np.where(np.isfinite(sp).all(-1)[..., None], sp - own.keypoints, np.nan), axis=1)
    assert np.linalg.norm(mean_own, axis=-1).mean() > 5e-3     # the network alone leaves its root off
    # (and that is what the placement moved: the whole pose, by that mean)
    np.testing.assert_allclose(placed.root_pos - own.root_pos, mean_own, atol=1e-5)


def test_measure_skeleton_in_the_networks_frames(poses):
    # a body whose joints sit elsewhere at rest (every offset turned 0.4 rad about X: a spine that
    # leans, hips and clavicles placed otherwise) in a few poses: the solver's own fit keeps the
    # canonical directions (rotations from the canonical T-pose), so the network's rotations miss the
    # keypoints on it; measured in the network's own frames, the same rotations meet them far better
    kp0, sk = poses
    a = 0.4
    turn = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    off = np.array(sk.offsets)
    off[1:] = off[1:] @ turn.T
    other = Skeleton(off, np.array(sk.end_offsets) @ turn.T)
    d = T.synthetic_pose_data(4, seed=9, sigma_deg=10.0)
    L = np.repeat(d.local_rot.numpy(), 6, axis=0)
    kp = keypoints_from_fk_np(L, np.repeat(d.root_pos.numpy(), 6, axis=0), other)
    s = I.Solver(device="cpu")

    def miss(skeleton):
        r = s.solve(kp, skeleton=skeleton, refine=False)
        return float(np.linalg.norm(r.keypoints - kp, axis=-1).mean())

    fitted = s.measure_skeleton(kp)                  # what solve(skeleton=None) uses
    network = s.measure_skeleton(kp, refine=False)
    np.testing.assert_allclose(np.linalg.norm(network.offsets[1:], axis=-1), np.linalg.norm(off[1:], axis=-1), rtol=0.05, atol=2e-3)
    assert miss(network) < 0.6 * miss(fitted), (miss(network), miss(fitted))   # (15 against 34 mm)
    assert abs(miss(None) - miss(fitted)) < 1e-9
    with pytest.raises(ValueError, match="shape"):
        s.measure_skeleton(kp[0])


def test_measured_skeleton_keeps_the_bones_lengths():
    """Keypoints of a rigid body in varied poses: every bone measured keeps the length it has on every frame.

    The offsets are medians over the poses in their parents' frames; the plain median of vectors scattered about
    one direction is shorter than they are (the legs measured 0.1 % short scaled a CMU clip's bake onto its own
    skeleton by that: 1.7 mm at 1.5 m from the origin)."""
    d = T.synthetic_pose_data(64, seed=3, sigma_deg=25.0)
    kp = keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), CANONICAL)
    fitted = I.Solver(device="cpu").measure_skeleton(kp)
    np.testing.assert_allclose(np.linalg.norm(fitted.offsets[1:], axis=-1),
                               np.linalg.norm(CANONICAL.offsets[1:], axis=-1), rtol=1e-6, atol=0)
    np.testing.assert_allclose(np.linalg.norm(fitted.end_offsets, axis=-1),
                               np.linalg.norm(CANONICAL.end_offsets, axis=-1), rtol=1e-6, atol=0)


def test_bfloat16_batches_are_the_float32_network_within_its_rounding(weights, poses):
    """``precision``: the layers of CPU batches in bfloat16 turn the bones within a few tenths of a
    degree of float32's (outputs stay float32, rotations orthonormal); "auto" is bfloat16 only where
    the CPU has it natively; an unknown precision is refused."""
    kp, sk = poses
    a = I.Solver(weights, device="cpu", precision="float32")
    b = I.Solver(weights, device="cpu", precision="bfloat16")
    assert (a.precision, b.precision) == ("float32", "bfloat16")
    assert I.Solver(weights, device="cpu").precision == ("bfloat16" if I.cpu_has_bfloat16() else "float32")
    ra, rb = a.solve(kp, skeleton=sk, refine=False), b.solve(kp, skeleton=sk, refine=False)
    assert rb.local_rot.dtype == ra.local_rot.dtype
    eye = np.broadcast_to(np.eye(3), rb.local_rot.shape)
    np.testing.assert_allclose(rb.local_rot @ np.swapaxes(rb.local_rot, -1, -2), eye, atol=1e-5)
    cos = (np.einsum("...ij,...ij->...", ra.local_rot, rb.local_rot) - 1.0) / 2.0
    deg = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))
    assert 0.0 < deg.max() < 3.0 and deg.mean() < 0.5, (deg.mean(), deg.max())
    one = b.solve(kp[0], skeleton=sk, refine=False)    # a lone frame: the float32 numpy twin
    np.testing.assert_allclose(one.local_rot[0], a.solve(kp[:2], skeleton=sk, refine=False).local_rot[0], atol=2e-5)
    with pytest.raises(ValueError, match="unknown precision 'float16'"):
        I.Solver(weights, device="cpu", precision="float16")


def test_the_cli_precision_reaches_the_solver(capsys):
    """``--precision`` of every bake command parses, is refused when unknown, and is the solver's."""
    from neural_ik.cli import bake as cli_bake, info
    from neural_ik.cli.parser import build_parser, precision_choice
    from neural_ik.model.cache import clear_solver_cache
    from neural_ik.pipeline.cache import LazySolver
    from neural_ik.pipeline.options import BakeError

    parser = build_parser()
    for argv, want in ((["bake", "x.npz", "--target", "rigify"], "auto"),
                       (["bake", "x.npz", "--target", "rigify", "--precision", "float32"], "float32"),
                       (["batch", "in", "--target", "rigify", "--out-dir", "o", "--precision", "bfloat16"], "bfloat16")):
        args = parser.parse_args(argv)
        assert precision_choice(args) == want
    with pytest.raises(SystemExit):
        parser.parse_args(["bake", "x.npz", "--target", "rigify", "--precision", "float16"])
    assert "invalid choice: 'float16'" in capsys.readouterr().err
    with pytest.raises(BakeError, match="unknown precision 'half'"):
        LazySolver("cpu", precision="half")
    clear_solver_cache()
    try:
        args = parser.parse_args(["bake", "x.npz", "--target", "rigify", "--device", "cpu", "--precision", "float32"])
        s = cli_bake.get_solver(args).load()
        assert s.precision == "float32"
        assert cli_bake.get_solver(parser.parse_args(["bake", "x.npz", "--target", "rigify", "--device", "cpu",
                                                      "--precision", "bfloat16"])).load().precision == "bfloat16"
        assert info._precision_in_use(args, "cpu") == "float32 (float32 in numpy up to 8192 frames, float32 above on the CPU)"
        args = parser.parse_args(["info", "--precision", "bfloat16"])
        assert info._precision_in_use(args, "cpu") == "bfloat16 (bfloat16 on the CPU)"
    finally:
        clear_solver_cache()
