"""The measuring instruments of benchmarks/bench_foreign.py on generated clips (no shared data, no bpy).

Each figure is checked both ways: zero (or the source's value) for a rig that
matches its reference, and the planted fault's size for one that does not
(a floating rig, a sliding foot, a knee bent backwards, a twisted bone).
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from _pkg import pkg

pkg()  # bench_foreign reuses retarget.metrics.foot_contacts through the package

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


bf = _load("bench_foreign")
bb = _load("blender_baseline")

# a small humanoid: name, parent, rest head (metres, Z up, facing -Y)
SKELETON = [
    ("Hips", None, (0.0, 0.0, 0.95)),
    ("Spine", "Hips", (0.0, 0.0, 1.05)),
    ("Chest", "Spine", (0.0, 0.0, 1.25)),
    ("Neck", "Chest", (0.0, 0.0, 1.45)),
    ("Head", "Neck", (0.0, 0.0, 1.55)),
    ("LeftShoulder", "Chest", (0.05, 0.0, 1.42)),
    ("LeftArm", "LeftShoulder", (0.18, 0.0, 1.42)),
    ("LeftForeArm", "LeftArm", (0.45, 0.0, 1.42)),
    ("LeftHand", "LeftForeArm", (0.70, 0.0, 1.42)),
    ("LeftFinger", "LeftHand", (0.78, 0.0, 1.42)),
    ("RightShoulder", "Chest", (-0.05, 0.0, 1.42)),
    ("RightArm", "RightShoulder", (-0.18, 0.0, 1.42)),
    ("RightForeArm", "RightArm", (-0.45, 0.0, 1.42)),
    ("RightHand", "RightForeArm", (-0.70, 0.0, 1.42)),
    ("LeftUpLeg", "Hips", (0.1, 0.0, 0.92)),
    ("LeftLeg", "LeftUpLeg", (0.1, 0.0, 0.50)),
    ("LeftFoot", "LeftLeg", (0.1, 0.0, 0.08)),
    ("LeftToeBase", "LeftFoot", (0.1, -0.12, 0.02)),
    ("RightUpLeg", "Hips", (-0.1, 0.0, 0.92)),
    ("RightLeg", "RightUpLeg", (-0.1, 0.0, 0.50)),
    ("RightFoot", "RightLeg", (-0.1, 0.0, 0.08)),
    ("RightToeBase", "RightFoot", (-0.1, -0.12, 0.02)),
]
NAMES = [s[0] for s in SKELETON]
PARENTS = [NAMES.index(s[1]) if s[1] else -1 for s in SKELETON]
HEADS = np.array([s[2] for s in SKELETON])


def _rot(axis, deg):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    a = np.radians(deg)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def _rest(rolls=None):
    """Rest world matrices; ``rolls`` (B, 3, 3) gives each bone another rest frame (joint orients)."""
    R = np.repeat(np.eye(4)[None], len(NAMES), 0)
    R[:, :3, 3] = HEADS
    if rolls is not None:
        R[:, :3, :3] = rolls
    return R


def _pose(local, root, rest):
    """FK: local rotations (T, B, 3, 3) in the world-aligned convention, root translation (T, 3)."""
    T = local.shape[0]
    D = np.zeros_like(local)
    P = np.zeros((T, len(NAMES), 3))
    for j, p in enumerate(PARENTS):
        if p < 0:
            D[:, j] = local[:, j]
            P[:, j] = HEADS[j] + root
        else:
            D[:, j] = D[:, p] @ local[:, j]
            P[:, j] = P[:, p] + np.einsum("tij,j->ti", D[:, p], HEADS[j] - HEADS[p])
    W = np.repeat(np.eye(4)[None, None], T, 0).repeat(len(NAMES), 1)
    W[:, :, :3, :3] = D @ rest[None, :, :3, :3]
    W[:, :, :3, 3] = P
    return W


def _walk(T=60, rng=None, rolls=None):
    """A generated clip: the body drifts forward, the knees swing; feet planted on alternate halves."""
    rng = rng or np.random.default_rng(0)
    local = np.repeat(np.eye(3)[None, None], T, 0).repeat(len(NAMES), 1)
    t = np.arange(T)
    for s, sign in (("Left", 1.0), ("Right", -1.0)):
        bend = 20.0 + 15.0 * np.sin(t / 6.0 + (0 if sign > 0 else np.pi))
        for k in range(T):
            local[k, NAMES.index(s + "Leg")] = _rot((1, 0, 0), bend[k])      # the knee bends forwards (-Y)
            local[k, NAMES.index(s + "UpLeg")] = _rot((1, 0, 0), -bend[k] / 2)
            local[k, NAMES.index(s + "Foot")] = _rot((1, 0, 0), -bend[k] / 2)
            local[k, NAMES.index(s + "ForeArm")] = _rot((0, 0, 1), 10 + 5 * np.sin(t[k] / 5))
    root = np.zeros((T, 3))
    rest = _rest(rolls)
    return bf.Posed(NAMES, PARENTS, _roles(), _pose(local, root, rest), rest, np.full(len(NAMES), 0.1)), local


def _roles():
    roles = bb.skeleton_roles(NAMES, PARENTS)
    roles["_body"] = bb.body_joints(roles, PARENTS)
    return roles


def test_roles_and_body_joints_leave_fingers_out():
    roles = _roles()
    assert NAMES[roles["pelvis"]] == "Hips" and NAMES[roles["forearm_l"]] == "LeftForeArm"
    assert NAMES[roles["clavicle_r"]] == "RightShoulder" and NAMES[roles["toe_l"]] == "LeftToeBase"
    assert [NAMES[i] for i in roles["spine"]] == ["Spine", "Chest"] and [NAMES[i] for i in roles["neck"]] == ["Neck"]
    body = {NAMES[i] for i in roles["_body"]}
    assert "LeftFinger" not in body and {"LeftHand", "Neck", "RightToeBase"} <= body
    with pytest.raises(ValueError):
        bb.skeleton_roles(["Hips", "Spine"], [-1, 0])


def test_same_clip_measures_zero_and_a_floating_rig_does_not():
    ref, _ = _walk()
    contact = np.zeros((ref.world.shape[0], 4), bool)
    contact[:, :] = True
    floor = float(np.nanmin(ref.foot()[..., 2]))
    same = bf.measure(ref, ref, 30.0, own=True, sparse=True, contact=contact, floor=floor, stand=contact)
    assert same["joint"] == pytest.approx(0.0, abs=1e-9) and same["reach"] == pytest.approx(0.0, abs=1e-9)
    assert same["rot_all"] == pytest.approx(0.0, abs=1e-4) and same["rot_child"] == pytest.approx(0.0, abs=1e-4)
    assert same["knees"] == 0 and same["upright"] == 100.0

    lifted = bf.transformed(ref, 1.0, np.array([0.0, 0.0, 0.05]))   # the whole rig 5 cm up
    fl = bf.measure(lifted, ref, 30.0, own=True, sparse=True, contact=contact, floor=floor, stand=contact)
    assert fl["floor"] - same["floor"] == pytest.approx(5.0, abs=1e-6)
    assert fl["joint"] == pytest.approx(50.0, abs=1e-6) and fl["reach"] == pytest.approx(50.0, abs=1e-6)
    assert fl["rot_all"] == pytest.approx(0.0, abs=1e-4)


def test_reach_onto_another_rig_ignores_its_size_and_sees_a_missed_effector():
    """Onto another rig the reach is taken after the clip's best scale and shift: a bake sizing the body its own
    way reads 0, a hand 5 cm off on ten frames reads so in the max."""
    ref, _ = _walk()
    eff = ref.role_heads(bf.EFFECTOR_KEYS)
    sized = 1.07 * eff + np.array([0.3, -0.2, 0.01])
    assert bf.reach_error(sized, eff, similar=True) == pytest.approx((0.0, 0.0), abs=1e-9)
    assert bf.reach_error(sized, eff, similar=False)[0] > 10.0
    missed = sized.copy()
    missed[:10, bf.EFFECTOR_KEYS.index("hand_l"), 0] += 0.05
    mean, worst = bf.reach_error(missed, eff, similar=True)
    assert worst > 45.0 and 0.0 < mean < 5.0


def test_rotation_error_ignores_rest_frames_and_sees_a_twist():
    rng = np.random.default_rng(1)
    rolls = np.stack([_rot(rng.normal(size=3), rng.uniform(0, 180)) for _ in NAMES])
    a, local = _walk()
    b, _ = _walk(rolls=rolls)   # the same motion on bones with other rest frames (joint orients)
    La = bf.local_rotations(a.world, a.rest, a.parents)
    Lb = bf.local_rotations(b.world, b.rest, b.parents)
    assert bf.rotation_error(La, Lb) == pytest.approx(0.0, abs=1e-4)
    assert np.allclose(La, local, atol=1e-9)
    twisted = local.copy()
    j = NAMES.index("LeftArm")
    twisted[:, j] = twisted[:, j] @ _rot((1, 0, 0), 30.0)   # the upper arm twisted about its own axis
    c = bf.Posed(NAMES, PARENTS, _roles(), _pose(twisted, np.zeros((len(local), 3)), _rest()), _rest(),
                 np.full(len(NAMES), 0.1))
    Lc = bf.local_rotations(c.world, c.rest, c.parents)
    assert bf.rotation_error(Lc[:, [j]], La[:, [j]]) == pytest.approx(30.0, abs=1e-6)


def test_knee_backwards_upright_skate_jitter_can_fail():
    ref, _ = _walk()
    r = ref.roles
    hip, knee, ankle = (ref.heads(r[k]) for k in ("thigh_l", "calf_l", "foot_l"))
    toe = ref.toe_point("l")
    assert bf.knees_backwards(hip, knee, ankle, toe) == 0
    line = hip + (ankle - hip) * (np.einsum("ti,ti->t", knee - hip, ankle - hip)
                                  / np.einsum("ti,ti->t", ankle - hip, ankle - hip))[:, None]
    back = 2.0 * line - knee   # the knee mirrored through the hip-ankle line
    assert bf.knees_backwards(hip, back, ankle, toe) == len(hip)
    # a foot pointed along the shin (4 degrees off the hip-ankle line) gives no front: never counted
    u = (ankle - hip) / np.linalg.norm(ankle - hip, axis=-1, keepdims=True)
    across = (toe - ankle) - np.einsum("ti,ti->t", toe - ankle, u)[:, None] * u
    across /= np.linalg.norm(across, axis=-1, keepdims=True)
    pointed = ankle + 0.15 * (np.cos(np.radians(4.0)) * u + np.sin(np.radians(4.0)) * across)
    assert bf.knees_backwards(hip, back, ankle, pointed) == 0

    pelvis, head = ref.heads(r["pelvis"]), ref.heads(r["head"])
    assert bf.upright_share(pelvis, head) == 100.0
    lying = pelvis + (head - pelvis)[:, [2, 1, 0]]   # head along +X
    assert bf.upright_share(pelvis, lying) == 0.0

    T = 40
    planted = np.zeros((T, 1, 3))
    sliding = planted.copy()
    sliding[:, 0, 0] = np.arange(T) * 0.004   # 4 mm per frame
    on = np.ones((T, 1), bool)
    assert bf.foot_skate(planted, on) == 0.0
    assert bf.foot_skate(sliding, on) == pytest.approx(4.0)
    assert bf.jitter(sliding) == pytest.approx(0.0, abs=1e-9)
    noisy = sliding + np.random.default_rng(2).normal(scale=0.002, size=sliding.shape)
    assert bf.jitter(noisy) > 1.0


def test_knees_against_the_source_feet_and_the_rig_own():
    """A rig turned half round about the vertical (its legs turned with their feet): its knees bend
    backwards against the source's feet on every judged frame, never against its own."""
    import dataclasses

    ref, _ = _walk()
    contact = np.ones((ref.world.shape[0], 4), bool)
    floor = float(np.nanmin(ref.foot()[..., 2]))
    turned = ref.world.copy()
    turned[:, :, :3, :] = _rot((0, 0, 1), 180.0)[None, None] @ ref.world[:, :, :3, :]
    pred = dataclasses.replace(ref, world=turned)
    same = bf.measure(ref, ref, 30.0, own=True, sparse=False, contact=contact, floor=floor, stand=contact)
    row = bf.measure(pred, ref, 30.0, own=True, sparse=False, contact=contact, floor=floor, stand=contact)
    assert same["knees"] == same["knees_own"] == 0
    assert row["knees_own"] == 0 and row["knees"] > 0.5 * 2 * len(turned), row
    agg = bf.aggregate([dict(row, frames=10), dict(row, frames=20)])
    assert agg["knees_own"] == 0 and agg["knees"] == 2 * row["knees"]


def test_contacts_find_the_planted_foot_only():
    T, fps = 60, 30.0
    planted = np.zeros((T, 3))
    swinging = np.stack([np.arange(T) * 0.05, np.zeros(T), 0.1 + 0.1 * np.sin(np.arange(T) / 3.0)], 1)
    c = bf.contacts(np.stack([planted, swinging], 1), fps)
    assert c[:, 0].all() and not c[:, 1].any()


def test_aggregate_weights_by_frames_and_floor_error_needs_contacts():
    rows = [{"frames": 100, "joint": 1.0, "knees": 2}, {"frames": 300, "joint": 5.0, "knees": 1},
            {"refused": "bad clip"}]
    agg = bf.aggregate(rows)
    assert agg["joint"] == pytest.approx(4.0) and agg["knees"] == 3 and agg["clips"] == 2
    pts = np.zeros((10, 2, 3))
    assert np.isnan(bf.floor_error(pts, 0.0, np.zeros(10, bool)))
