"""A tiny training run on synthetic poses; augmentation consistency; export."""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import fk  # noqa: E402
from neural_ik.model.network import num_features  # noqa: E402
from training import train as T  # noqa: E402
from neural_ik.model.skeleton import MIRROR_KEYPOINTS  # noqa: E402

torch.set_num_threads(2)


def test_tiny_training_lowers_loss(tmp_path):
    data = T.synthetic_pose_data(256, seed=0)
    cfg = T.TrainConfig(steps=40, batch=64, width=64, blocks=1, lr=3e-3, log_every=10, ckpt_every=20, eval_every=40)
    net, hist = T.train(cfg, data, tmp_path / "run", heldout=T.synthetic_pose_data(64, seed=1), progress=False)
    first, last = hist[0]["loss"], hist[-1]["loss"]
    assert last < 0.8 * first, (first, last)
    assert (tmp_path / "run" / "checkpoint.pt").exists() and (tmp_path / "run" / "final.pt").exists()
    assert "heldout_dense_deg" in hist[-1]


def test_a_network_reading_bone_directions_trains_exports_and_loads(tmp_path):
    # --pose-input directions end to end: trained, its checkpoint exported, the file read back by the
    # solver (its hparams say how to read the pose) and solving as the network it was
    from neural_ik.model import inference as I

    data = T.synthetic_pose_data(256, seed=0)
    cfg = T.TrainConfig(steps=30, batch=64, width=64, blocks=1, lr=3e-3, log_every=10, ckpt_every=30, eval_every=1000,
                        pose_input="directions")
    net, hist = T.train(cfg, data, tmp_path / "run", progress=False)
    assert hist[-1]["loss"] < 0.9 * hist[0]["loss"]
    assert net.pose_input == "directions" and net.inp.in_features == num_features("lengths", "directions")
    path = T.export_checkpoint(tmp_path / "run" / "final.pt", tmp_path / "w.pt")
    assert torch.load(path, weights_only=True)["hparams"]["pose_input"] == "directions"
    s = I.Solver(path, device="cpu")
    assert s.net.pose_input == "directions"
    kp = fk.fk_keypoints(data.local_rot[:3], data.root_pos[:3], data.offsets[:3], data.end_offsets[:3]).numpy()
    r = s.solve(kp.astype(np.float64), refine=False)
    with torch.no_grad():
        L, _, _ = net.eval().predict(torch.as_tensor(kp, dtype=torch.float32), torch.ones(3, 32, dtype=torch.bool),
                                     torch.as_tensor(r.skeleton.offsets, dtype=torch.float32),
                                     torch.as_tensor(r.skeleton.end_offsets, dtype=torch.float32))
    np.testing.assert_allclose(r.local_rot[:, 1:], L[:, 1:].numpy(), atol=2e-2)   # (float16 weights in the file)


def test_resume_continues_from_checkpoint(tmp_path):
    data = T.synthetic_pose_data(256, seed=0)
    cfg = T.TrainConfig(steps=6, batch=16, width=16, blocks=1, log_every=3, ckpt_every=3, eval_every=1000)
    T.train(cfg, data, tmp_path, progress=False)
    cfg2 = T.TrainConfig(steps=9, batch=16, width=16, blocks=1, log_every=3, ckpt_every=3, eval_every=1000)
    _, hist = T.train(cfg2, data, tmp_path, progress=False)
    assert [h["step"] for h in hist] == [9]


def test_augmented_batch_is_consistent():
    data = T.synthetic_pose_data(64, seed=3)
    cfg = T.TrainConfig(p_mirror=1.0, p_swap=0.5, p_synth=0.5)
    aug = T.Augmenter(data, cfg, torch.device("cpu"), torch.Generator().manual_seed(0))
    b = aug.sample(32)
    kp = fk.fk_keypoints(b["local"], b["root"], b["offsets"], b["end_offsets"])
    np.testing.assert_allclose(kp.numpy(), b["kp"].numpy(), atol=1e-5)
    eye = torch.eye(3).expand_as(b["local"])
    assert torch.allclose(b["local"].transpose(-1, -2) @ b["local"], eye, atol=1e-4)
    assert b["mask"].any(1).all()
    sparse = b["sparse"]
    if sparse.any():
        assert b["mask"][sparse].sum(1).max() <= 10


def test_mirroring_matches_mirrored_keypoints():
    data = T.synthetic_pose_data(8, seed=4)
    cfg = T.TrainConfig(p_mirror=1.0, p_swap=0.0, p_synth=0.0, bone_sigma=0.0, scale_sigma=0.0, noise_m=0.0)
    g = torch.Generator().manual_seed(0)
    aug = T.Augmenter(data, cfg, torch.device("cpu"), g)
    g_state = g.get_state()
    b = aug.sample(8)
    # recompute with the same indices and heading but without mirroring
    g.set_state(g_state)
    aug.cfg = T.TrainConfig(p_mirror=0.0, p_swap=0.0, p_synth=0.0, bone_sigma=0.0, scale_sigma=0.0, noise_m=0.0)
    c = aug.sample(8)
    mirrored = c["kp"][:, MIRROR_KEYPOINTS] * torch.tensor([-1.0, 1.0, 1.0])
    # same frames, same random heading: mirror image up to the heading (mirror then rotate vs rotate then mirror)
    d1 = (b["kp"] - b["kp"][:, :1]).norm(dim=-1)
    d2 = (mirrored - mirrored[:, :1]).norm(dim=-1)
    np.testing.assert_allclose(d1.numpy(), d2.numpy(), atol=1e-5)


def test_export_is_small_and_loads_weights_only(tmp_path):
    net = T.IKNet(64, 1)
    p = T.export_weights(net, tmp_path / "w.pt", T.TrainConfig(), {"note": "test"})
    blob = torch.load(p, weights_only=True)
    assert blob["format_version"] == T.FORMAT_VERSION
    assert blob["state"]["inp.weight"].dtype == torch.float16
    assert len(blob["keypoints"]) == 32


def test_position_loss_on_the_given_skeleton():
    """``w_pos_given``: a dense sample's position loss is taken on the skeleton the network is given (the
    solver's fit), a sparse sample's on the true one; at 0 every sample's is on the true one."""
    data = T.synthetic_pose_data(64, seed=5)
    cfg = T.TrainConfig(p_fit_skeleton=1.0, p_variety=1.0, p_sparse=0.5, noise_m=0.0)
    aug = T.Augmenter(data, cfg, torch.device("cpu"), torch.Generator().manual_seed(1))
    b = aug.sample(64)
    dense = ~b["sparse"]
    assert dense.any() and b["sparse"].any()
    assert not torch.allclose(b["offsets_in"][dense], b["offsets"][dense], atol=1e-4)   # a fitted skeleton
    net = T.IKNet(32, 1)
    with torch.no_grad():
        local, root, _ = net.predict(b["kp_in"], b["mask"], b["offsets_in"], b["end_offsets_in"], b["orient"],
                                     b["orient_mask"])
    true = (fk.fk_keypoints(local, root, b["offsets"], b["end_offsets"]) - b["kp"]).norm(dim=-1).mean(1)
    kg = fk.fk_keypoints(local, root, b["offsets_in"], b["end_offsets_in"])
    m = b["mask"].float()
    given = ((kg - b["kp"]).norm(dim=-1) * m).sum(1) / m.sum(1)
    for w, want in ((0.0, true.mean()), (1.0, torch.where(dense, given, true).mean()),
                    (0.5, torch.where(dense, 0.5 * (true + given), true).mean())):
        cfg.w_pos_given = w
        with torch.no_grad():
            _, parts = T.compute_loss(net, b, cfg)
        assert abs(parts["pos_mm"] - 1000.0 * float(want)) < 1e-3, (w, parts["pos_mm"], 1000.0 * float(want))
