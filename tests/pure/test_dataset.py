"""Dataset mapping tests on a synthetic CC_Base-like rig (plus one real-data test)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from training import dataset as ds  # noqa: E402
from neural_ik.model import skeleton as sk  # noqa: E402
from neural_ik.model.bvh import frames_from_rotations, write_bvh  # noqa: E402

# Fake CC rig: name, parent, T-pose world position (Y up, cm, facing +Z, left +X)
_SIDE = [
    ("Clavicle", "CC_Base_Spine02", (3, 147, 0)),
    ("Upperarm", "Clavicle", (16, 147, -1)),
    ("UpperarmTwist01", "Upperarm", (16, 147, -1)),
    ("UpperarmTwist02", "UpperarmTwist01", (30, 147, -1)),
    ("Forearm", "Upperarm", (44, 147, -2)),
    ("ForearmTwist01", "Forearm", (44, 147, -2)),
    ("ForearmTwist02", "ForearmTwist01", (57, 147, -2)),
    ("ElbowShareBone", "Forearm", (44, 147, -2)),
    ("Hand", "Forearm", (69, 147, -2)),
    ("Mid1", "Hand", (78, 147, -1)),
    ("Mid2", "Mid1", (82, 147, -1)),
    ("Mid3", "Mid2", (85, 147, -1)),
    ("Thumb1", "Hand", (72, 146, 4)),
    ("Thumb2", "Thumb1", (75, 145, 6)),
    ("Thigh", "CC_Base_Pelvis", (9, 95, 0)),
    ("ThighTwist01", "Thigh", (9, 95, 0)),
    ("ThighTwist02", "ThighTwist01", (9, 73, 0)),
    ("Calf", "Thigh", (9, 52, 1)),
    ("CalfTwist01", "Calf", (9, 52, 1)),
    ("CalfTwist02", "CalfTwist01", (9, 30, 0)),
    ("KneeShareBone", "Calf", (9, 52, 1)),
    ("Foot", "Calf", (9, 9, -1)),
    ("ToeBase", "Foot", (9, 3, 12)),
    ("ToeBaseShareBone", "Foot", (9, 3, 12)),
    ("MidToe1", "ToeBase", (9, 2.5, 15)),
]
_CENTRE = [
    ("CC_Base_Hip", None, (0, 100, 0)),
    ("CC_Base_Pelvis", "CC_Base_Hip", (0, 100, 0)),
    ("CC_Base_Waist", "CC_Base_Hip", (0, 108, 1)),
    ("CC_Base_Spine01", "CC_Base_Waist", (0, 113, 2)),
    ("CC_Base_Spine02", "CC_Base_Spine01", (0, 128, 0)),
    ("CC_Base_NeckTwist01", "CC_Base_Spine02", (0, 150, 0)),
    ("CC_Base_NeckTwist02", "CC_Base_NeckTwist01", (0, 154, 0.3)),
    ("CC_Base_Head", "CC_Base_NeckTwist02", (0, 158, 0.5)),
    ("CC_Base_FacialBone", "CC_Base_Head", (0, 158, 0.5)),
    ("CC_Base_L_Eye", "CC_Base_FacialBone", (3.3, 166, 8)),
    ("CC_Base_R_Eye", "CC_Base_FacialBone", (-3.3, 166, 8)),
]


def _rig():
    rows = list(_CENTRE)
    for side, sx in (("L", 1.0), ("R", -1.0)):
        for name, parent, (x, y, z) in _SIDE:
            par = parent if parent.startswith("CC_") else f"CC_Base_{side}_{parent}"
            rows.append((f"CC_Base_{side}_{name}", par, (sx * x, y, z)))
    # depth-first order
    names = [r[0] for r in rows]
    kids = {n: [r[0] for r in rows if r[1] == n] for n in names}
    order = []

    def visit(n):
        order.append(n)
        for c in kids[n]:
            visit(c)

    visit("CC_Base_Hip")
    info = {r[0]: r for r in rows}
    parents = [-1 if info[n][1] is None else order.index(info[n][1]) for n in order]
    pos = np.array([info[n][2] for n in order], dtype=np.float64)
    return order, parents, pos


def _bind_frames(names, parents, pos, rng):
    """CC-like joint orients: local +Y along the bone (towards the first child), random twist."""
    J = len(names)
    B = np.empty((J, 3, 3))
    for j in range(J):
        kids = [c for c in range(J) if parents[c] == j]
        d = (pos[kids[0]] - pos[j]) if kids else (pos[j] - pos[parents[j]])
        if names[j] == "CC_Base_Head" or np.linalg.norm(d) < 1e-6:
            d = np.array([0.0, 1.0, 0.0]) if names[j] == "CC_Base_Head" else pos[j] - pos[parents[j]]
        if np.linalg.norm(d) < 1e-6:
            d = np.array([0.0, 1.0, 0.0])
        d = d / np.linalg.norm(d)
        y = np.array([0.0, 1.0, 0.0])
        swing = Rotation.align_vectors([d], [y])[0]
        twist = Rotation.from_rotvec(y * rng.uniform(-np.pi, np.pi))
        B[j] = (swing * twist).as_matrix()
    return B


def write_fake_cc(path, rng, frames=40, tpose=True):
    """A small CC_Base-named BVH: Y up, cm, CC_Base_Hip root with additive root channels.

    Returns the expected world positions (T, J, 3) in BVH units and the names.
    """
    names, parents, pos = _rig()
    J = len(names)
    B = _bind_frames(names, parents, pos, rng)
    offsets = np.zeros((J, 3))
    for j in range(J):
        if parents[j] >= 0:
            offsets[j] = B[parents[j]].T @ (pos[j] - pos[parents[j]])
        else:
            offsets[j] = pos[j]
    # canonical-ish motion: smooth random local rotations (world aligned frames), arms lowered
    t = np.linspace(0, 1, frames)[:, None]
    Q = np.broadcast_to(np.eye(3), (frames, J, 3, 3)).copy()
    phase = rng.uniform(0, 2 * np.pi, (J, 3))
    amp = np.deg2rad(12.0)
    for j in range(1, J):
        rv = amp * np.sin(2 * np.pi * t + phase[j])
        Q[:, j] = Rotation.from_rotvec(rv).as_matrix()
    for n in ("CC_Base_Pelvis", "CC_Base_FacialBone"):  # static in the real data too
        Q[:, names.index(n)] = np.eye(3)
    for side, s in (("L", 1.0), ("R", -1.0)):
        j = names.index(f"CC_Base_{side}_Upperarm")
        Q[:, j] = Rotation.from_rotvec([0, 0, -s * np.deg2rad(70)]).as_matrix() @ Q[:, j]
    Q[:, 0] = Rotation.from_rotvec(np.c_[0 * t, 0.8 * t, 0 * t]).as_matrix()  # turn about up (Y)
    root = np.c_[200 + 50 * t[:, 0], 100 + 2 * np.sin(6 * t[:, 0]), -40 * t[:, 0]]
    # canonical world G, CC world W = G B, CC local = W_p^T W
    G = np.empty_like(Q)
    W = np.empty_like(Q)
    for j in range(J):
        G[:, j] = Q[:, j] if parents[j] < 0 else G[:, parents[j]] @ Q[:, j]
        W[:, j] = G[:, j] @ B[j]
    if tpose:  # leading T-pose frame at the origin
        W = np.concatenate([np.broadcast_to(B, (1, J, 3, 3)), W])
        root = np.concatenate([[pos[0]], root])
    T = W.shape[0]
    L = np.empty_like(W)
    for j in range(J):
        L[:, j] = W[:, j] if parents[j] < 0 else np.swapaxes(W[:, parents[j]], -1, -2) @ W[:, j]
    world = np.empty((T, J, 3))
    for j in range(J):
        world[:, j] = root if parents[j] < 0 else world[:, parents[j]] + np.einsum("tij,j->ti", W[:, parents[j]], offsets[j])
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Yrotation", "Xrotation")] + [("Zrotation", "Yrotation", "Xrotation")] * (J - 1)
    trans = np.broadcast_to(offsets, (T, J, 3)).copy()
    trans[:, 0] = root
    motion = frames_from_rotations(channels, L, trans, offsets, position_mode="add")  # the CC_Base_Hip quirk
    write_bvh(path, names, parents, offsets, channels, motion, frame_time=1 / 60)
    return world, names


def _to_canonical(p):
    """Y-up cm -> Z-up m facing -Y."""
    return 0.01 * np.stack([p[..., 0], -p[..., 2], p[..., 1]], axis=-1)


@pytest.fixture()
def fake_folder(tmp_path):
    rng = np.random.default_rng(7)
    world, names = write_fake_cc(tmp_path / "009_01.bvh", rng)
    return tmp_path, world, names


def test_fake_cc_clip_reproduces_world_positions(fake_folder):
    folder, world, names = fake_folder
    clips = ds.load_clips(folder, fps=None, progress=False, cache=False)
    assert len(clips) == 1
    c = clips[0]
    assert c.name == "009_01" and c.subject == 9
    assert c.meta["dropped_tpose"] == 1 and c.meta["root_mode"] == "add"
    assert len(c) == world.shape[0] - 1 and abs(c.fps - 60) < 1e-3
    assert c.local_rot.shape == (len(c), 22, 3, 3) and c.local_rot.dtype == np.float32
    assert c.root_pos.shape == (len(c), 3) and c.root_pos.dtype == np.float32
    jmap = ds.load_joint_map()
    idx = [names.index(jmap["joints"][n]["joint"]) for n in sk.JOINTS]
    expected = _to_canonical(world[1:, idx])
    kp = c.keypoints()
    assert kp.shape == (len(c), 32, 3)
    err = np.linalg.norm(kp[:, :22] - expected, axis=-1)
    assert err.max() < 1e-3, err.max()
    assert c.meta["recon_mm_max"] < 1.0
    # floor near 0 (feet joints a few cm above it), facing -Y, left = +X in the rest pose
    assert -0.05 < c.meta["floor_m"] < 0.1
    rest = c.skeleton.rest_keypoints()
    assert rest[sk.keypoint_index("hand_l"), 0] > 0.5 and rest[sk.keypoint_index("hand_r"), 0] < -0.5
    assert rest[sk.keypoint_index("nose"), 1] < rest[sk.keypoint_index("head"), 1]
    assert rest[sk.keypoint_index("toe_tip_l"), 1] < rest[sk.keypoint_index("heel_l"), 1]
    assert abs(min(rest[sk.keypoint_index(n), 2] for n in ("heel_l", "toe_tip_l", "heel_r", "toe_tip_r"))) < 1e-6
    # rotations orthonormal
    R = c.local_rot.astype(np.float64)
    np.testing.assert_allclose(R @ np.swapaxes(R, -1, -2), np.broadcast_to(np.eye(3), R.shape), atol=1e-5)


def test_resample_and_cache(fake_folder, monkeypatch, tmp_path_factory):
    folder, world, names = fake_folder
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setattr(ds, "_cache_dir", lambda: cache)
    a = ds.load_clips(folder, fps=30.0, progress=False, cache=True)[0]
    assert abs(a.fps - 30) < 1e-9
    n60 = world.shape[0] - 1
    assert len(a) == (n60 - 1) // 2 + 1
    full = ds.load_clips(folder, fps=None, progress=False, cache=False)[0]
    # 60 -> 30 fps: every other frame (up to slerp round-off)
    np.testing.assert_allclose(a.keypoints(), full.keypoints()[::2][: len(a)], atol=1e-4)
    assert list(cache.glob("*.npz"))
    b = ds.load_clips(folder, fps=30.0, progress=False, cache=True)[0]
    np.testing.assert_array_equal(a.local_rot, b.local_rot)
    np.testing.assert_array_equal(a.skeleton.offsets, b.skeleton.offsets)
    assert b.meta == a.meta


def test_floor_check_raises(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "001_01.bvh"
    write_fake_cc(path, rng)
    # move the root OFFSET far up: neither interpretation puts the feet on the floor
    text = path.read_text().replace("OFFSET 0.000000 100.000000 0.000000", "OFFSET 0.000000 400.000000 0.000000", 1)
    path.write_text(text)
    with pytest.raises(ds.DatasetError, match="floor"):
        ds.load_clips(tmp_path, progress=False, cache=False)


def test_split_by_subject(fake_folder):
    folder, _, _ = fake_folder
    clips = ds.load_clips(folder, progress=False, cache=False)
    tr, te = ds.split_by_subject(clips, holdout=(9,))
    assert not tr and len(te) == 1
    tr, te = ds.split_by_subject(clips)
    assert len(tr) == 1 and not te


REAL = ds.default_root()


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real CMU data not present at {REAL} (../shared/mocap/cmu)")
def test_real_cmu_subject7():
    clips = ds.load_clips(subjects=[7], progress=False, cache=False)
    assert len(clips) >= 1
    for c in clips:
        assert c.meta["recon_mm_max"] < 10.0, (c.name, c.meta)
        assert -0.05 < c.meta["floor_m"] < 0.25
        kp = c.keypoints()
        hands = np.linalg.norm(kp[0, sk.keypoint_index("hand_l")] - kp[0, sk.keypoint_index("hand_r")])
        jump = np.abs(kp[1] - kp[0]).max()
        assert not (hands > 1.2 and jump > 0.2)  # leading T-pose dropped


WEIGHTS = Path(__file__).resolve().parents[2] / "weights" / "neural_ik.pt"


@pytest.mark.skipif(not WEIGHTS.is_file(), reason="weights/neural_ik.pt missing")
def test_evaluate_prints_the_table(tmp_path, monkeypatch, capsys):
    """training/evaluate.py on a held-out subject 6 clip: every configuration, one table."""
    from training import evaluate

    rng = np.random.default_rng(3)
    write_fake_cc(tmp_path / "006_01.bvh", rng, frames=30)
    write_fake_cc(tmp_path / "009_01.bvh", rng, frames=30)      # other subjects are not evaluated
    monkeypatch.setattr(ds, "_cache_dir", lambda: tmp_path / "cache")
    assert evaluate.main(["--data", str(tmp_path), "--steps", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Held-out subject(s) 6:")
    assert "| configuration | rot err (deg, all 22) | rot err (deg, leaf) | MPJPE (mm)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "configuration" not in line]
    names = [r.split("|")[1].strip() for r in rows]
    assert "dense, network alone" in names and "sparse 6 effectors, network + refinement" in names
    assert any("optimisation only" in n for n in names) and len(rows) == 10
    for r in rows:
        assert all(np.isfinite(float(v)) for v in r.split("|")[2:-1])


def test_offset_free_angle_takes_out_a_constant_offset_only():
    from training.evaluate import _angle_deg, offset_free_angle_deg

    rng = np.random.default_rng(5)
    Rt = Rotation.random(200, random_state=6).as_matrix()
    C = Rotation.from_rotvec([0.0, 0.0, np.deg2rad(30.0)]).as_matrix()      # a bone frame placed otherwise
    np.testing.assert_allclose(_angle_deg(Rt @ C, Rt), 30.0, atol=1e-6)
    assert offset_free_angle_deg(Rt @ C, Rt).max() < 1e-5
    noise = Rotation.from_rotvec(rng.normal(0.0, np.deg2rad(5.0), (200, 3))).as_matrix()
    plain = _angle_deg(Rt @ noise, Rt)                                        # no offset: the error stays
    free = offset_free_angle_deg(Rt @ noise, Rt)
    assert abs(free.mean() - plain.mean()) < 0.5 and plain.mean() > 5.0
    both = offset_free_angle_deg(Rt @ C @ noise, Rt)                          # the offset goes, the noise stays
    assert abs(both.mean() - plain.mean()) < 0.5


@pytest.mark.skipif(not WEIGHTS.is_file(), reason="weights/neural_ik.pt missing")
def test_evaluate_foreign_prints_the_figures_and_targets(tmp_path, capsys):
    """training/evaluate.py --foreign on a folder of one convention: every row, the targets table."""
    from training import evaluate

    (tmp_path / "studio").mkdir()
    write_fake_cc(tmp_path / "studio" / "clip.bvh", np.random.default_rng(4), frames=40)
    assert evaluate.main(["--foreign", "studio", "--data", str(tmp_path), "--max-frames", "40", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "rotation less each clip's constant offset (deg)" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines()
            if (line.startswith("| network alone") or line.startswith("| rig-space solve")) and ":" not in line}
    assert {"network alone, dense, fitted skeleton", "rig-space solve, dense", "rig-space solve, six effectors"} <= set(rows)
    for name, cells in rows.items():
        mm, rot, free = float(cells[0]), float(cells[1]), float(cells[3])
        assert np.isfinite(mm) and 0.0 <= free <= rot + 1e-6, (name, cells)
    assert "| network alone, dense, fitted skeleton: mpjpe_mm <= 25 mm |" in out
    # the diagnostic row: the same rotations on the skeleton measured in the network's frames, no target
    diag = rows[evaluate.NETWORK_FRAMES_ROW]
    assert float(diag[0]) < float(rows["network alone, dense, fitted skeleton"][0])
    assert not any(line.startswith("| " + evaluate.NETWORK_FRAMES_ROW + ":") for line in out.splitlines())
