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


def _with_leading_tpose(src, dst):
    """A copy of a BVH with a calibration T-pose (every rotation zero) prepended, as the CMU conversion has."""
    lines = Path(src).read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("Frames:"))
    first = lines[i + 2].split()
    tpose = first[:3] + ["0"] * (len(first) - 3)
    lines[i] = f"Frames: {int(lines[i].split()[1]) + 1}"
    lines.insert(i + 2, " ".join(tpose))
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).write_text("\n".join(lines) + "\n")


def _cmu_database(tmp_path):
    """A tiny CMU database (one folder per subject, 120 fps, CMU units) and a foreign/ folder with a take of
    the same conversion and one of a held-out subject."""
    from training import cmu_full as CF

    db, plain = tmp_path / "cmu_full", tmp_path / "plain"
    plain.mkdir()
    sf.humanoid_bvh(plain / "01_01.bvh", scheme="mixamo", units="cmu", frames=48, fps=120.0)
    _with_leading_tpose(plain / "01_01.bvh", db / "001" / "01_01.bvh")
    for take in ("02_03", "06_01", "16_02"):
        (db / f"{int(take[:2]):03d}").mkdir(parents=True, exist_ok=True)
        sf.humanoid_bvh(db / f"{int(take[:2]):03d}" / f"{take}.bvh", scheme="mixamo", units="cmu", frames=48,
                        fps=120.0)
    sf.humanoid_bvh(db / "notes.bvh", scheme="mixamo", frames=12)
    foreign = tmp_path / "foreign"
    for folder, take in (("cmu_hahne", "01_01"), ("cmu_hahne", "36_01"), ("cmu_hahne", "02_05")):
        (foreign / folder).mkdir(parents=True, exist_ok=True)
        sf.humanoid_bvh(foreign / folder / f"{take}.bvh", scheme="mixamo", units="cmu", frames=48, fps=120.0)
    assert [(s, t) for _, s, t in CF.find_takes(db)] == [(1, 1), (2, 3), (6, 1), (16, 2)]
    return db, plain, foreign


def test_cmu_database_is_packed_with_its_subjects_held_out_everywhere(tmp_path):
    from training import cmu_full as CF

    db, plain, foreign = _cmu_database(tmp_path)
    assert CF.take_of("60_05_scaled") == (60, 5) and CF.take_of("jumping_jacks") is None
    assert CF.is_heldout_subject(6) and CF.is_heldout_subject(136) and not CF.is_heldout_subject(60)
    path = tmp_path / "cache.npz"
    msgs = []
    info = C.build_cache(path, cmu_root=tmp_path / "no_cmu", foreign_root=foreign, foreign_folders=["cmu_hahne"],
                         log=msgs.append, cmu_full=db)
    z = C.load_cache(path)
    # subjects 6 and 16 held out of the database, 36 out of foreign/, 01_01 of cmu_hahne counted once
    assert sorted(z["names"]) == ["cmu_full/01_01", "cmu_full/02_03", "cmu_hahne/02_05"], (z["names"], msgs)
    assert info["sources"].keys() == {"cmu_full", "cmu_hahne"}
    assert {6, 16, 36, 136} <= set(info["heldout"]["cmu_subjects"]) and info["cmu_full"]["subjects"] == [1, 2]
    assert info["fps"] == 30.0 and z["info"]["heldout"]["foreign_folders"] == ["fair1", "sfu"]
    # the leading T-pose is left out: the take reproduces the same walk without it, at 30 fps
    fc = F.read_foreign_file(plain / "01_01.bvh", "plain", 30.0)
    i = z["names"].index("cmu_full/01_01")
    sel = z["clip"] == i
    assert sel.sum() == len(fc) == 12
    sk = Skeleton(z["offsets"][i].astype(np.float64), z["end_offsets"][i].astype(np.float64))
    kp = keypoints_from_fk_np(z["local_rot"][sel].astype(np.float64), z["root"][sel], sk)
    err = np.linalg.norm(kp[:, :22] - fc.keypoints[:, :22], axis=-1)[fc.mask[:, :22]]
    assert err.mean() < 0.003, err.mean()


def test_cmu_database_workers_give_the_same_cache(tmp_path):
    db, _, foreign = _cmu_database(tmp_path)
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    C.build_cache(one, cmu_root=tmp_path / "no_cmu", foreign_root=foreign, foreign_folders=[], log=lambda s: None,
                  cmu_full=db)
    C.build_cache(two, cmu_root=tmp_path / "no_cmu", foreign_root=foreign, foreign_folders=[], log=lambda s: None,
                  cmu_full=db, workers=2)
    a, b = C.load_cache(one), C.load_cache(two)
    assert a["names"] == b["names"] == ["cmu_full/01_01", "cmu_full/02_03"]
    np.testing.assert_array_equal(a["local_rot"], b["local_rot"])


def test_held_out_cmu_subjects_are_evaluated_from_the_database(tmp_path, capsys):
    from training import cmu_full as CF
    from training import evaluate as E

    db, _, _ = _cmu_database(tmp_path)
    clips = CF.load_heldout(db, 30.0, log=lambda s: None)
    assert [c.name for c in clips] == ["cmu_full/06_01", "cmu_full/16_02"] and all(len(c) == 12 for c in clips)
    assert E.main(["--cmu-full", str(db), "--no-bakes", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "Held-out subjects 06, 16 of the CMU database: 2 clips, 24 frames" in out, out
    assert "| network alone, dense, fitted skeleton |" in out


def test_a_database_without_held_out_subjects_is_refused_by_name(tmp_path, capsys):
    import pytest

    from training import evaluate as E

    (tmp_path / "db" / "001").mkdir(parents=True)
    sf.humanoid_bvh(tmp_path / "db" / "001" / "01_01.bvh", scheme="mixamo", frames=12)
    with pytest.raises(SystemExit):
        E.main(["--cmu-full", str(tmp_path / "db"), "--no-bakes"])
    assert "no readable takes of the held-out CMU subjects below" in capsys.readouterr().err
