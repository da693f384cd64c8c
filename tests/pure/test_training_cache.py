"""The foreign training/held-out folders and the compact training cache (issue 11), on generated BVH files."""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _pkg import pkg  # noqa: E402

pkg()
import source_fixtures as sf  # noqa: E402
from neural_ik.model.skeleton import Skeleton, keypoints_from_fk_np  # noqa: E402
from training import cache as C  # noqa: E402
from training import foreign as F  # noqa: E402
from training import train as T  # noqa: E402


def _folder(tmp_path):
    root = tmp_path / "foreign"
    (root / "studio").mkdir(parents=True)
    sf.humanoid_bvh(root / "studio" / "walk.bvh", scheme="mixamo", frames=30)
    sf.humanoid_bvh(root / "studio" / "walk_z.bvh", scheme="studio", up="Z", units="m", frames=30)
    (root / "studio" / "broken.bvh").write_text("HIERARCHY\nROOT Hips\n{\n  OFFSET 0 0\n")
    return root


def test_a_broken_clip_is_skipped_with_a_message_naming_it(tmp_path):
    root = _folder(tmp_path)
    msgs = []
    clips = F.load_foreign(["studio"], root, fps=30.0, log=msgs.append)
    assert sorted(c.name for c in clips) == ["studio/walk", "studio/walk_z"]
    assert len(msgs) == 1 and "broken.bvh" in msgs[0]
    c = clips[0]
    assert c.keypoints.shape == (len(c), 32, 3) and c.world_rot.shape == (len(c), 22, 3, 3) and c.given.all()


def test_cache_round_trip_reproduces_the_source_joints(tmp_path):
    root = _folder(tmp_path)
    msgs = []
    path = tmp_path / "cache.npz"
    info = C.build_cache(path, cmu_root=tmp_path / "no_cmu", foreign_root=root, foreign_folders=["studio"],
                         log=msgs.append)
    assert any("CMU" in m for m in msgs) and any("broken.bvh" in m for m in msgs)
    assert info["clips"] == 2 and path.stat().st_size < 60 * 2**20
    z = C.load_cache(path)
    L = z["local_rot"]
    np.testing.assert_allclose(np.swapaxes(L, -1, -2) @ L, np.broadcast_to(np.eye(3), L.shape), atol=2e-3)
    fc = F.load_foreign(["studio"], root, fps=30.0, log=lambda s: None)[0]
    i = z["names"].index(fc.name)
    sel = z["clip"] == i
    sk = Skeleton(z["offsets"][i].astype(np.float64), z["end_offsets"][i].astype(np.float64))
    kp = keypoints_from_fk_np(L[sel].astype(np.float64), z["root"][sel], sk)
    err = np.linalg.norm(kp[:, :22] - fc.keypoints[:, :22], axis=-1)[fc.mask[:, :22]]
    assert err.mean() < 0.003, err.mean()     # float16 rotations: a few tenths of a millimetre
    data, info2 = T.pose_data_from_cache(path)
    assert len(data) == len(L) and data.clip is not None and data.has_kp.shape == (len(L), 32)
    assert not data.has_kp[:, 23].any()       # no nose in a BVH
    assert torch.isfinite(data.local_rot).all()
