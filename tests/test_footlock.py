"""Foot lock (retarget/footlock.py): planted feet stay planted on rigs with other
proportions, without changing the foot's orientation, popping or touching the
swing (plain numpy), and through a real bake in Blender (``ext``)."""

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS, keypoints_from_fk_np  # noqa: E402
from neural_ik.retarget import metrics  # noqa: E402
from neural_ik.retarget.footlock import (contact_weights, foot_lock, soft_extension,  # noqa: E402
                                        source_contacts)
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.metrics import FOOT_POINTS  # noqa: E402
from neural_ik.retarget.solve import plan_retarget, pose_rig, retarget, target_keypoints  # noqa: E402
from rigs import humanoid  # noqa: E402

FPS = 30.0
BLEND = 4
FOOT_IDX = [KEYPOINTS.index(n) for n in FOOT_POINTS]


@pytest.fixture(scope="module")
def walk():
    T = 300
    rot = walk_rotations(T / FPS, FPS)
    kp = walk_keypoints(T / FPS, FPS)
    root = kp[:, 0] - keypoints_from_fk_np(rot, np.zeros((T, 3)))[:, 0]
    return rot, root, kp


RIGS = {
    "long_legs": lambda: humanoid("mixamo", proportions=1.3),
    "short_legs_A_rolls": lambda: humanoid("unreal", proportions=0.8, pose="A", axes="random", seed=5),
}


@pytest.fixture(scope="module", params=sorted(RIGS))
def locked(request, walk):
    rot, root, kp = walk
    rig = RIGS[request.param]()
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, rot, root)
    out = foot_lock(plan, res, kp, FPS, blend_frames=BLEND)
    return SimpleNamespace(rig=rig, plan=plan, res=res, out=out, contacts=source_contacts(kp, FPS), kp=kp)


def _contact_slide(plan, r, contacts):
    """Mean horizontal step (mm of the source's size) of heel/toe points on source-contact steps."""
    tk = target_keypoints(plan, r.quaternions, r.locations) / r.scale
    step = np.linalg.norm(np.diff(tk[:, FOOT_IDX, :2], axis=0), axis=-1) * 1000.0
    return step[contacts[1:] & contacts[:-1]].mean(), tk


def test_contacts_hysteresis_and_min_length():
    T = 60
    p = np.zeros((T, 1, 3))
    p[:, 0, 2] = 0.2
    p[10:30, 0, 2] = 0.045 + 0.01 * (np.arange(20) % 2)     # chatters around the 5 cm threshold
    p[40:42, 0, 2] = 0.0                                      # a 2-frame blip
    plain = metrics.foot_contacts(p, FPS, floor=0.0)
    assert np.abs(np.diff(plain[10:30, 0].astype(int))).sum() > 10
    c = metrics.foot_contacts(p, FPS, floor=0.0, hysteresis=1.5, min_frames=3)[:, 0]
    assert c[10:30].all() and not c[:10].any() and not c[30:].any()
    # the vertical speed counts when asked: a point rising fast near the floor is not planted
    q = np.zeros((T, 1, 3))
    q[:, 0, 2] = np.linspace(0.0, 0.04, T)
    assert metrics.foot_contacts(q, 1000.0, floor=0.0).all()
    assert not metrics.foot_contacts(q, 1000.0, floor=0.0, vertical=True).any()


def test_contact_weights_ramp():
    c = np.zeros(40, dtype=bool)
    c[10:20] = True
    sp, sn, wp, wn = contact_weights(c, 4)
    w = np.minimum(wp + wn, 1.0)
    assert (w[10:20] == 1.0).all() and (sp[10:20] == 0).all()
    assert (w[:5] == 0).all() and (w[25:] == 0).all()
    assert np.all(np.diff(w[4:11]) >= 0) and np.all(np.diff(w[19:26]) <= 0)
    assert 0 < w[8] < 1 and 0 < w[22] < 1


def test_sliding_drops(locked):
    before, _ = _contact_slide(locked.plan, locked.res, locked.contacts)
    after, tk = _contact_slide(locked.plan, locked.out, locked.contacts)
    assert before > 1.0          # the proportions make the feet slide
    assert after < 1.0 and after * 5 < before, (before, after)
    # the bake's figure (its own contact detection on the target) improves too
    m0 = metrics.foot_sliding(target_keypoints(locked.plan, locked.res.quaternions, locked.res.locations)
                              / locked.res.scale, FPS)
    assert metrics.foot_sliding(tk, FPS) < m0
    rep = locked.out.foot_lock
    assert rep.legs == ["l", "r"] and rep.segments > 0 and rep.limited_frames == 0


def test_foot_world_orientation_and_consistency(locked):
    plan, res, out, rig = locked.plan, locked.res, locked.out, locked.rig
    W0, _ = pose_rig(rig, res.quaternions, res.locations)
    W1, X1 = pose_rig(rig, out.quaternions, out.locations)
    assert np.allclose(X1, out.heads, atol=1e-9)                       # heads from pose_rig
    assert np.allclose(np.linalg.norm(out.quaternions, axis=-1), 1.0)
    assert (np.sum(out.quaternions[1:] * out.quaternions[:-1], -1) > 0).all()   # sign-continuous
    for side in "lr":
        for j in (f"foot_{side}", f"toe_{side}"):
            b = rig.index(plan.mapping.entries[j])
            rel = np.swapaxes(W0[:, b], -1, -2) @ W1[:, b]
            ang = np.degrees(np.arccos(np.clip((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2, -1, 1)))
            assert ang.max() < 0.5, j
    # the legs really moved, nothing else did (but the pelvis height when lowered)
    legs = {rig.index(plan.mapping.entries[f"{x}_{s}"]) for x in ("thigh", "calf", "foot") for s in "lr"}
    moved = np.flatnonzero(np.abs(out.quaternions - res.quaternions).max(axis=(0, 2)) > 1e-9)
    assert set(moved) <= legs and set(moved) & legs


def test_no_pops(locked):
    plan, rig = locked.plan, locked.rig
    for side in "lr":
        b = rig.index(plan.mapping.entries[f"foot_{side}"])
        acc = [np.linalg.norm(np.diff(r.heads[:, b], 2, axis=0), axis=-1).max() for r in (locked.res, locked.out)]
        assert acc[1] <= 1.2 * acc[0], acc
        # and the knees do not snap either
        k = rig.index(plan.mapping.entries[f"calf_{side}"])
        acck = [np.linalg.norm(np.diff(r.heads[:, k], 2, axis=0), axis=-1).max() for r in (locked.res, locked.out)]
        assert acck[1] <= 1.5 * acck[0] + 0.005 * locked.res.scale, acck


def test_swing_untouched(locked):
    """A leg far from its contacts keeps its rotations (and its positions where the pelvis is not lowered)."""
    c, plan, rig, res, out = locked.contacts, locked.plan, locked.rig, locked.res, locked.out
    T = c.shape[0]
    same_root = np.all(out.locations == res.locations, axis=(1, 2))
    for side, s in enumerate("lr"):
        near = np.zeros(T, dtype=bool)
        for t in np.flatnonzero(c[:, 2 * side] | c[:, 2 * side + 1]):
            near[max(t - BLEND - 1, 0): t + BLEND + 2] = True
        far = ~near
        assert far.sum() > 30
        bones = [rig.index(plan.mapping.entries[f"{x}_{s}"]) for x in ("thigh", "calf", "foot", "toe")]
        np.testing.assert_array_equal(out.quaternions[far][:, bones], res.quaternions[far][:, bones])
        # positions relative to the pelvis (which may be lowered a little for the other leg)
        r = plan.root
        rel = lambda x: x[far][:, bones] - x[far][:, r:r + 1]   # noqa: E731
        np.testing.assert_allclose(rel(out.heads), rel(res.heads), atol=1e-9)
    drop = np.linalg.norm(out.heads[:, plan.root] - res.heads[:, plan.root], axis=-1)
    assert drop.max() <= out.foot_lock.pelvis_drop + 1e-9
    assert np.allclose(drop[same_root], 0.0)


def test_in_place(walk):
    rot, root, kp = walk
    rig = humanoid("mixamo", proportions=1.3)
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, rot, root, in_place=True)
    src = kp.copy()
    src[..., :2] -= (root[:, :2] - root[:1, :2])[:, None]       # the source as baked in place
    out = foot_lock(plan, res, src, FPS)
    r = plan.root
    # the pelvis stays over its rest position horizontally (canonical X, Y)
    h = out.heads[:, r] @ plan.K
    assert np.allclose(h[:, :2], h[:1, :2], atol=1e-9)
    assert np.isfinite(out.quaternions).all()
    W, X = pose_rig(rig, out.quaternions, out.locations)
    assert np.allclose(X, out.heads, atol=1e-9)
    # the feet walk backwards under the pelvis: nothing is planted long enough to lock much
    assert out.foot_lock.frames < len(rot)


def test_no_contacts_is_identity(walk):
    rot, root, kp = walk
    rig = humanoid("mixamo", proportions=1.3)
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, rot, root)
    out = foot_lock(plan, res, kp, FPS, contacts=np.zeros((len(rot), 4), dtype=bool))
    assert out.foot_lock.frames == 0
    np.testing.assert_array_equal(out.quaternions, res.quaternions)
    np.testing.assert_array_equal(out.heads, res.heads)


@pytest.mark.parametrize("kind", ["mixamo_T", "unreal_A_rolls"])
def test_same_proportions_nearly_no_op(walk, kind):
    """A same-proportion retarget of a clean walk already keeps its feet planted: the lock moves no joint
    by 5 mm or more (it used to bend the nearly straight stance knees by a centimetre for 1-3 mm of drift)."""
    rot, root, kp = walk
    rig = humanoid("mixamo") if kind == "mixamo_T" else humanoid("unreal", pose="A", axes="random", seed=5)
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, rot, root)
    assert res.scale == pytest.approx(1.0, abs=1e-6)
    out = foot_lock(plan, res, kp, FPS)
    assert out.foot_lock.segments > 0
    moved = np.linalg.norm(out.heads - res.heads, axis=-1) / res.scale
    assert moved.max() < 0.005, moved.max()
    # and with the drift tolerance off, soft IK still keeps the knees from popping
    strict = foot_lock(plan, res, kp, FPS, drift_tol=0.0)
    assert np.linalg.norm(strict.heads - res.heads, axis=-1).max() / res.scale < 0.005


def test_soft_extension_bounds_the_knee():
    """Wilson's falloff on the extension change: identity for no change, never straight, and on a nearly
    straight leg the knee moves about 2x the asked change instead of ~20x with hard IK."""
    a = b = 0.45
    L, soft = a + b, 0.03 * (a + b)

    def knee(d):        # knee distance from the hip-ankle line
        return np.sqrt(np.maximum(a * a - (d / 2) ** 2, 0.0))

    d0 = np.array([0.6, 0.85, L - 0.002, L - 0.0005])
    np.testing.assert_allclose(soft_extension(d0, 0.0, L, soft), d0, atol=1e-12)
    assert soft_extension(0.6, 0.01, L, soft) == pytest.approx(0.61)             # bent leg: exact
    assert (soft_extension(d0, 0.5, L, soft) < L).all()                            # never full extension
    delta = np.linspace(-0.002, 0.002, 41)
    assert np.all(np.diff(soft_extension(L - 0.002, delta, L, soft)) > 0)
    for start in d0[2:]:
        for dd in (-0.002, 0.002):                 # 2 mm of ankle target
            gain = abs(knee(soft_extension(start, dd, L, soft)) - knee(start)) / 0.002
            hard = abs(knee(min(start + dd, L)) - knee(start)) / 0.002
            assert gain < 2.5, (start, dd, gain)
            assert hard > 5.0, (start, dd, hard)


def test_knee_moves_are_bounded(locked):
    rep = locked.out.foot_lock
    assert 0 < rep.locked_segments <= rep.segments
    assert rep.max_knee_move <= 3.0 * rep.max_correction, (rep.max_knee_move, rep.max_correction)


def test_lock_contacts_are_strict():
    """A foot gliding at 0.2 m/s on the floor is sliding (the metric counts it) but not planted (not locked);
    one below 0.1 m/s is; the thresholds have hysteresis."""
    T = 60
    kp = np.zeros((T, len(KEYPOINTS), 3))
    kp[..., 2] = 0.5
    t = np.arange(T) / FPS
    for j, v in ((FOOT_IDX[0], 0.2), (FOOT_IDX[1], 0.05)):
        kp[:, j, 0] = v * t
        kp[:, j, 2] = 0.0
    c = source_contacts(kp, FPS)
    assert not c[:, 0].any() and c[:, 1].all()
    assert metrics.foot_contacts(kp[:, FOOT_IDX[:2]], FPS, floor=0.0)[:, 0].all()
    # released only past 1.5x the speed
    kp[:, FOOT_IDX[1], 0] = np.cumsum(np.where(np.arange(T) < 30, 0.05, 0.14)) / FPS
    assert source_contacts(kp, FPS)[:, 1].all()
    kp[:, FOOT_IDX[1], 0] = np.cumsum(np.where(np.arange(T) < 30, 0.05, 0.16)) / FPS
    assert not source_contacts(kp, FPS)[35:, 1].any()


class _ExactSolver:
    def __init__(self, local_rot, root_pos, skeleton):
        self.local_rot, self.root_pos, self.skeleton = local_rot, root_pos, skeleton

    def solve(self, keypoints, mask=None, *, mode="auto", refine=True, progress=None, **kw):
        T = len(keypoints)
        return SimpleNamespace(local_rot=self.local_rot[:T], root_pos=self.root_pos[:T], keypoints=keypoints,
                               skeleton=self.skeleton, error_mm=np.zeros(T), seconds=0.0)


def test_bake_foot_lock_in_blender(ext, walk):
    """A bake onto a long-legged armature: less sliding with the lock, and Blender plays it back."""
    import bpy
    import rigs

    bake = importlib.import_module(ext.__name__ + ".blender_io.bake")
    sk = importlib.import_module(ext.__name__ + ".model.skeleton")
    rot, root, kp = walk
    rot, root, kp = rot[:120], root[:120], kp[:120]
    obj = rigs.build_blender_armature(humanoid("mixamo", proportions=1.3), name="LongLegs")
    results = {}
    for lock in (False, True):
        results[lock] = bake.bake_keypoints(obj, kp, None, FPS, bake.BakeOptions(fps=FPS, foot_lock=lock),
                                            source_name=f"walk_{lock}",
                                            solver=_ExactSolver(rot, root, sk.CANONICAL))
    off, on = results[False], results[True]
    assert on.foot_sliding_mm < off.foot_sliding_mm
    assert on.retarget.foot_lock is not None and off.retarget.foot_lock is None
    # proportions: the keypoint error is large, the bone directions still match
    assert off.keypoint_error_mm[0] > 10.0 and off.bone_direction_error_deg < 0.5
    assert on.bone_direction_error_deg < 3.0
    # the baked action plays back the locked pose
    scene = bpy.context.scene
    mw = np.array(obj.matrix_world)
    for f in (0, 40, 80, 119):
        scene.frame_set(on.frame_start + f)
        for j in ("foot_l", "foot_r", "calf_l"):
            name = on.mapping.entries[j]
            b = on.retarget.bone_names.index(name)
            got = mw[:3, :3] @ np.array(obj.pose.bones[name].head) + mw[:3, 3]
            np.testing.assert_allclose(got, mw[:3, :3] @ on.retarget.heads[f, b] + mw[:3, 3], atol=2e-4)


def test_cli_flag_pair():
    import argparse

    from neural_ik.cli import common

    parser = argparse.ArgumentParser()
    common.add_bake_arguments(parser)
    for argv, want in (([], True), (["--foot-lock"], True), (["--no-foot-lock"], False)):
        args = parser.parse_args(["--target", "rigify"] + argv)
        assert args.foot_lock is want
        assert common.bake_options(args).foot_lock is want


def test_cli_options_match_the_sidebar():
    """Every bake setting of the sidebar has its flag: smoothing target, solve mode, scale."""
    import argparse

    from neural_ik.cli import common

    parser = argparse.ArgumentParser()
    common.add_bake_arguments(parser)
    opts = common.bake_options(parser.parse_args(["--target", "rigify"]))
    assert (opts.smooth_target, opts.mode, opts.scale) == ("both", "auto", None)
    args = parser.parse_args(["--target", "rigify", "--smooth", "savgol", "--smooth-target", "rotations",
                              "--mode", "sparse", "--scale", "0.5"])
    opts = common.bake_options(args)
    assert (opts.smooth, opts.smooth_target, opts.mode, opts.scale) == ("savgol", "rotations", "sparse", 0.5)
    for bad in (["--smooth-target", "filter"], ["--mode", "x"], ["--scale", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["--target", "rigify"] + bad)
