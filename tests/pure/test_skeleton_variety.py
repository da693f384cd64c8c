"""Skeleton variety in training (issue 11): proportions, placements, missing points, noise, fitted lengths."""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import fk  # noqa: E402
from neural_ik.model.inference import fit_skeleton  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS, Skeleton  # noqa: E402
from training import train as T  # noqa: E402

torch.set_num_threads(2)
_K = {n: i for i, n in enumerate(KEYPOINTS)}


def _aug(**kw):
    data = T.synthetic_pose_data(128, seed=4)
    cfg = T.TrainConfig(p_mirror=0.0, p_swap=0.0, p_synth=0.0, bone_sigma=0.0, scale_sigma=0.0, **kw)
    return T.Augmenter(data, cfg, torch.device("cpu"), torch.Generator().manual_seed(1)), data


def test_proportions_and_placements_vary_and_stay_consistent():
    aug, data = _aug(p_variety=1.0, segment_range=0.2, placement_deg=1.0)
    b = aug.sample(512)
    kp = fk.fk_keypoints(b["local"], b["root"], b["offsets"], b["end_offsets"])
    np.testing.assert_allclose(kp.numpy(), b["kp"].numpy(), atol=1e-5)
    ratio = b["offsets"].norm(dim=-1) / data.offsets[0].norm(dim=-1).clamp_min(1e-9)
    shin = ratio[:, _K["foot_l"]]
    assert shin.min() >= 0.8 - 1e-4 and shin.max() <= 1.2 + 1e-4 and shin.max() - shin.min() > 0.3
    np.testing.assert_allclose(ratio[:, _K["foot_l"]], ratio[:, _K["foot_r"]], atol=1e-5)   # both legs alike
    d0 = data.offsets[0, _K["clavicle_l"]] / data.offsets[0, _K["clavicle_l"]].norm()
    d = b["offsets"][:, _K["clavicle_l"]] / b["offsets"][:, _K["clavicle_l"]].norm(dim=-1, keepdim=True)
    ang = torch.rad2deg(torch.acos((d @ d0).clamp(-1, 1)))
    assert ang.max() > 10.0        # clavicles sit elsewhere
    aug0, _ = _aug()
    b0 = aug0.sample(64)
    torch.testing.assert_close(b0["offsets"], data.offsets[:64] * 0 + b0["offsets"])  # off by default: no error
    assert torch.allclose(b0["offsets"].norm(dim=-1), data.offsets[0].norm(dim=-1).expand(64, -1), atol=1e-5)


def test_missing_groups_hide_whole_groups_in_dense_samples():
    aug, _ = _aug(p_missing=0.5, p_sparse=0.0, max_drop=0.0)
    m = aug.sample(2000)["mask"]
    for a, b in (("hand_tip_l", "hand_tip_r"), ("heel_l", "heel_r"), ("clavicle_l", "clavicle_r")):
        assert torch.equal(m[:, _K[a]], m[:, _K[b]])
    share = 1 - m.float().mean(0)
    assert 0.4 < share[_K["nose"]] < 0.6 and 0.05 < share[_K["neck"]] < 0.15 and share[_K["pelvis"]] == 0


def test_video_noise_only_on_the_input():
    aug, _ = _aug(p_video=1.0, noise_m=0.0, p_sparse=0.0)
    b = aug.sample(256)
    err = (b["kp_in"] - b["kp"]).norm(dim=-1)
    assert err.mean() > 0.005 and err.max() < 0.5


def test_exact_pelvis_keeps_the_pelvis_and_the_noise_between_points():
    """``exact_pelvis``: the noisy keypoints shifted so the pelvis is exact; how they lie relative to
    one another is the same noise."""
    noisy, _ = _aug(p_video=1.0, noise_m=0.004, p_sparse=0.0)
    exact, _ = _aug(p_video=1.0, noise_m=0.004, p_sparse=0.0, exact_pelvis=1)
    a, b = noisy.sample(256), exact.sample(256)
    p = _K["pelvis"]
    assert (a["kp_in"][:, p] - a["kp"][:, p]).norm(dim=-1).mean() > 0.005
    assert (b["kp_in"][:, p] - b["kp"][:, p]).norm(dim=-1).max() < 1e-6
    rel_a = a["kp_in"] - a["kp_in"][:, p:p + 1]
    rel_b = b["kp_in"] - b["kp_in"][:, p:p + 1]
    torch.testing.assert_close(rel_a, rel_b)


def test_input_skeleton_is_what_fit_skeleton_measures():
    aug, _ = _aug(p_fit_skeleton=1.0, p_variety=1.0, p_sparse=0.0, max_drop=0.0, p_missing=1.0)
    b = aug.sample(64)
    for i in range(8):
        m = b["mask"][i].numpy()
        kp = np.where(m[:, None], b["kp"][i].numpy(), np.nan)
        sk = fit_skeleton(kp, m)
        want = np.concatenate([np.linalg.norm(sk.offsets[1:], axis=-1), np.linalg.norm(sk.end_offsets, axis=-1)])
        got = torch.cat([b["offsets_in"][i, 1:], b["end_offsets_in"][i]]).norm(dim=-1).numpy()
        seen = m[1:] & m[T._CARRIER[1:]]
        np.testing.assert_allclose(got[seen], want[seen], rtol=1e-4, atol=1e-5)   # measured: the same
        np.testing.assert_allclose(got, want, rtol=0.02)   # the others: torch's median of an even count differs
    assert isinstance(Skeleton(b["offsets_in"][0].numpy(), b["end_offsets_in"][0].numpy()), Skeleton)


def test_input_skeleton_with_offsets_has_the_measured_directions():
    """A network reading offsets gets, for a fitted skeleton, the directions the solver's re-fit
    measures: the true ones (turned a little at random) where both ends are given, canonical elsewhere."""
    exact, _ = _aug(p_fit_skeleton=1.0, p_variety=1.0, p_sparse=0.0, max_drop=0.0, p_missing=1.0,
                    skeleton_input="offsets", fit_direction_deg=0.0)
    b = exact.sample(64)
    allo_in = torch.cat([b["offsets_in"][:, 1:], b["end_offsets_in"]], 1)
    allo = torch.cat([b["offsets"][:, 1:], b["end_offsets"]], 1)
    canon = torch.cat([exact.canon_off[1:], exact.canon_end])
    unit = lambda v: v / v.norm(dim=-1, keepdim=True).clamp_min(1e-9)  # noqa: E731
    seen = b["mask"][:, 1:] & b["mask"][:, T._CARRIER[1:]] & (allo.norm(dim=-1) > 1e-4)
    cos_true = (unit(allo_in) * unit(allo)).sum(-1)
    cos_canon = (unit(allo_in) * unit(canon)[None]).sum(-1)
    assert seen.any() and (~seen).any()
    assert (cos_true[seen] > 1 - 1e-5).all()
    assert (cos_canon[~seen] > 1 - 1e-5).all()
    assert (cos_true[~seen] < 1 - 1e-3).any()      # (the variety turned them: canonical is not the truth)
    turned, _ = _aug(p_fit_skeleton=1.0, p_variety=1.0, p_sparse=0.0, max_drop=0.0, p_missing=1.0,
                     skeleton_input="offsets", fit_direction_deg=3.0)
    b = turned.sample(64)
    allo_in = torch.cat([b["offsets_in"][:, 1:], b["end_offsets_in"]], 1)
    allo = torch.cat([b["offsets"][:, 1:], b["end_offsets"]], 1)
    seen = b["mask"][:, 1:] & b["mask"][:, T._CARRIER[1:]] & (allo.norm(dim=-1) > 1e-4)
    ang = torch.rad2deg(torch.acos((unit(allo_in) * unit(allo)).sum(-1).clamp(-1, 1)))[seen]
    assert 2.0 < float(ang.mean()) < 8.0
    lengths, _ = _aug(p_fit_skeleton=1.0, p_variety=1.0, p_sparse=0.0, max_drop=0.0, p_missing=1.0)
    b = lengths.sample(64)      # (a network reading lengths: canonical directions throughout)
    allo_in = torch.cat([b["offsets_in"][:, 1:], b["end_offsets_in"]], 1)
    ok = allo_in.norm(dim=-1) > 1e-6
    assert ((unit(allo_in) * unit(canon)[None]).sum(-1)[ok] > 1 - 1e-5).all()
