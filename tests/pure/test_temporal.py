"""Temporal context (issue 11): the temporal block, windows in training, seamless batches, weights formats."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import inference as I  # noqa: E402
from neural_ik.model.network import IKNet  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, keypoints_from_fk_np  # noqa: E402
from training import train as T  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def temporal_weights(tmp_path_factory):
    torch.manual_seed(0)
    net = IKNet(32, 2, temporal=5, temporal_channels=8)
    with torch.no_grad():  # an untrained temporal block is the identity: make it read its neighbours
        net.temporal.up.weight.normal_(0.0, 0.3)
    path = tmp_path_factory.mktemp("w") / "temporal.pt"
    T.export_weights(net, path, T.TrainConfig(temporal=5, temporal_channels=8), {})
    return path


@pytest.fixture(scope="module")
def clip():
    d = T.synthetic_pose_data(40, seed=2, sigma_deg=15.0)
    return keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), CANONICAL)


def test_batches_join_without_a_seam(temporal_weights, clip):
    s = I.Solver(temporal_weights, device="cpu")
    for mode in ("centred", "causal"):
        whole = s.solve(clip, skeleton=CANONICAL, refine=False, temporal=mode, batch_size=4096)
        cut = s.solve(clip, skeleton=CANONICAL, refine=False, temporal=mode, batch_size=7)
        np.testing.assert_allclose(cut.local_rot, whole.local_rot, atol=1e-5)
        off = s.solve(clip, skeleton=CANONICAL, refine=False, temporal="off")
        assert np.abs(off.local_rot - whole.local_rot).max() > 1e-3  # the context changes the answer


def test_causal_reads_no_future_frame(temporal_weights, clip):
    s = I.Solver(temporal_weights, device="cpu")
    later = clip.copy()
    later[25:] = clip[::-1][25:]  # other poses from frame 25 on
    a = s.solve(clip, skeleton=CANONICAL, refine=False, temporal="causal")
    b = s.solve(later, skeleton=CANONICAL, refine=False, temporal="causal")
    np.testing.assert_array_equal(a.local_rot[:25], b.local_rot[:25])
    c = s.solve(clip, skeleton=CANONICAL, refine=False, temporal="centred")
    d = s.solve(later, skeleton=CANONICAL, refine=False, temporal="centred")
    assert np.abs(c.local_rot[23:25] - d.local_rot[23:25]).max() > 1e-4  # centred reads ahead


def test_single_pose_is_the_per_frame_network_and_its_numpy_twin(temporal_weights, clip):
    s = I.Solver(temporal_weights, device="cpu", precision="float32")   # (as the numpy twin computes)
    off = s.solve(clip[:3], skeleton=CANONICAL, refine=False, temporal="off")
    one = s.solve(clip[1], skeleton=CANONICAL, refine=False)  # the numpy twin, temporal block skipped
    np.testing.assert_allclose(one.local_rot[0], off.local_rot[1], atol=2e-5)
    np.testing.assert_allclose(one.root_pos[0], off.root_pos[1], atol=2e-5)
    with pytest.raises(ValueError, match="temporal"):
        s.solve(clip, temporal="sideways")


def test_old_format_is_refused_with_a_clear_message(tmp_path, temporal_weights):
    blob = torch.load(temporal_weights, weights_only=True)
    hp = {k: v for k, v in blob["hparams"].items() if not k.startswith("temporal")}
    state = {k: v for k, v in blob["state"].items() if not k.startswith("temporal.")}
    torch.save(dict(blob, format_version=1, hparams=hp, state=state), tmp_path / "v1.pt")
    with pytest.raises(I.WeightsError, match="re-train .* or download") as ex:
        I.Solver(tmp_path / "v1.pt")
    assert "version 1" in str(ex.value) and "v1.pt" in str(ex.value)


def test_training_windows_are_consecutive_frames_of_one_clip():
    n = 60
    d = T.synthetic_pose_data(n, seed=1)
    d.root_pos = torch.stack([torch.arange(n, dtype=torch.float32), torch.zeros(n), torch.ones(n)], 1)
    d.clip = torch.tensor([0] * 25 + [1] * 35)
    aug = T.Augmenter(d, T.TrainConfig(), torch.device("cpu"), torch.Generator().manual_seed(0))
    b = aug.sample(16, augment=False, window=8)
    frame = b["root"][:, 0].reshape(16, 8)
    assert torch.all(frame[:, 1:] - frame[:, :-1] == 1)
    first, last = frame[:, 0].long(), frame[:, -1].long()
    assert torch.all(d.clip[first] == d.clip[last])
    # per-window draws: one mode, one skeleton per window
    assert torch.all(b["sparse"].reshape(16, 8) == b["sparse"].reshape(16, 8)[:, :1])
    b = aug.sample(16, augment=True, window=8)
    off = b["offsets"].reshape(16, 8, -1, 3)
    assert torch.allclose(off, off[:, :1].expand_as(off))


def test_temporal_training_runs(tmp_path):
    data = T.synthetic_pose_data(200, seed=0)
    cfg = T.TrainConfig(steps=6, batch=32, width=32, blocks=2, temporal=3, temporal_channels=8, window=4,
                        log_every=3, ckpt_every=6, eval_every=6)
    net, hist = T.train(cfg, data, tmp_path / "run", progress=False)
    assert np.isfinite(hist[-1]["loss"]) and net.temporal is not None
    path = T.export_weights(net, tmp_path / "w.pt", cfg, {})
    assert I.Solver(path, device="cpu").net.temporal.kernel == 3
