"""Retargeting maths: rest compensation, bone directions, spine distribution,
root motion, round trip, Euler and quaternion continuity (plain numpy; the
Rigify meta-rig from stored data; against Blender: ``tests/blender/test_retarget_blender.py``)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model.rotations_np import axis_angle_to_matrix, quat_to_matrix  # noqa: E402
from neural_ik.model.skeleton import BONE_CHILD, CANONICAL, JOINTS, KEYPOINTS, \
    keypoints_from_fk_np, forward_kinematics_np  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import euler_to_matrix_blender, matrix_to_euler_blender, plan_retarget, \
    pose_rig, quat_continuity, quats_to_euler_continuous, retarget, target_keypoints  # noqa: E402
from rigs import humanoid, random_motion, rigify_metarig_description, straight_line_with_reference  # noqa: E402

J = {n: i for i, n in enumerate(JOINTS)}
LIMBS = ("clavicle_l", "upperarm_l", "forearm_l", "clavicle_r", "upperarm_r", "forearm_r",
         "thigh_l", "calf_l", "foot_l", "thigh_r", "calf_r", "foot_r")


def _rigs():
    return {
        "mixamo": lambda: humanoid("mixamo"),
        "unreal_A_rolls": lambda: humanoid("unreal", pose="A", axes="random", spine=5, neck=2, seed=3),
        "two_spine_no_clavicle": lambda: humanoid("vrm_spec", spine=2, neck=1, clavicles=False, axes="random"),
        "bvh_orients": lambda: humanoid("cmu", axes="world"),
        "smpl_plusY_cm": lambda: humanoid("smpl", pose="A", face="+Y", scale=100.0, axes="random"),
        "rigify_metarig": rigify_metarig_description,
        "straight_line_reference": lambda: straight_line_with_reference("mixamo"),
        "rigify_deform_long_limbs": lambda: humanoid("rigify_deform", proportions=1.3, pose="A"),
    }


RIGS = _rigs()


@pytest.fixture(scope="module")
def plans():
    out = {}
    for name, make in RIGS.items():
        rig = make()
        out[name] = plan_retarget(rig, auto_map(rig))
    return out


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def bone_dirs(plan, res):
    """Direction of each mapped limb bone (head -> mapped child head), canonical axes."""
    m, rig = plan.mapping.entries, plan.rig
    out = {}
    for j in LIMBS + ("spine3", "pelvis"):
        c = KEYPOINTS[BONE_CHILD[J[j]]]
        if j in m and c in m:
            out[j] = unit(res.heads[:, rig.index(m[c])] - res.heads[:, rig.index(m[j])]) @ plan.K
    return out


def canonical_dirs(R, root):
    kp = keypoints_from_fk_np(R, root)
    return {j: unit(kp[:, BONE_CHILD[J[j]]] - kp[:, J[j]]) for j in JOINTS}


def angle_deg(a, b):
    return np.degrees(np.arccos(np.clip(np.sum(a * b, axis=-1), -1.0, 1.0)))


@pytest.mark.parametrize("name", list(RIGS))
def test_rest_gives_t_pose(plans, name):
    plan = plans[name]
    R = np.tile(np.eye(3), (1, len(JOINTS), 1, 1))
    res = retarget(plan, R, CANONICAL.offsets[0][None])
    d = bone_dirs(plan, res)
    for s, sx in (("l", 1.0), ("r", -1.0)):
        for j in ("upperarm", "forearm"):  # arms horizontal
            assert angle_deg(d[f"{j}_{s}"][0], np.array([sx, 0, 0])) < 1e-3, (j, s)
        for j in ("thigh", "calf"):  # legs straight down
            assert angle_deg(d[f"{j}_{s}"][0], np.array([0, 0, -1.0])) < 1e-3
    # end bones: hand tips along the arm, head top up (keypoints read back)
    kp = target_keypoints(plan, res.quaternions, res.locations)[0]
    assert angle_deg(unit(kp[KEYPOINTS.index("hand_tip_l")] - kp[J["hand_l"]]), np.array([1.0, 0, 0])) < 1e-3
    assert angle_deg(unit(kp[KEYPOINTS.index("head_top")] - kp[J["head"]]), np.array([0, 0, 1.0])) < 1e-3
    # nothing about the rest pose was changed
    assert res.locations[0, plan.root] == pytest.approx(np.zeros(3), abs=1e-9)


@pytest.mark.parametrize("name", list(RIGS))
def test_random_poses_same_bone_directions(plans, name):
    R, root = random_motion()
    plan = plans[name]
    res = retarget(plan, R, root)
    cd = canonical_dirs(R, root)
    for j, d in bone_dirs(plan, res).items():
        assert angle_deg(d, cd[j]).max() < 1e-3, j
    # twist and end bones: thumb, nose and toe tips read back in the same directions
    kp = target_keypoints(plan, res.quaternions, res.locations)
    ckp = keypoints_from_fk_np(R, root)
    for e, j in (("thumb_l", "hand_l"), ("nose", "head"), ("heel_r", "foot_r"), ("hand_tip_r", "hand_r")):
        a = unit(kp[:, KEYPOINTS.index(e)] - kp[:, J[j]])
        b = unit(ckp[:, KEYPOINTS.index(e)] - ckp[:, J[j]])
        assert angle_deg(a, b).max() < 1e-3, e


def test_two_rigs_same_directions_different_rest():
    R, root = random_motion(seed=5)
    a = humanoid("mixamo")
    b = humanoid("unreal", pose="A", axes="random", seed=9)
    pa, pb = plan_retarget(a, auto_map(a)), plan_retarget(b, auto_map(b))
    da, db = bone_dirs(pa, retarget(pa, R, root)), bone_dirs(pb, retarget(pb, R, root))
    for j in LIMBS:
        assert angle_deg(da[j], db[j]).max() < 1e-3


def test_rolls_do_not_matter_and_t_pose_rig_reproduces_rotations():
    R, root = random_motion(seed=2)
    rigs = [humanoid("unreal", axes=ax, seed=s) for ax, s in (("default", 0), ("random", 1), ("world", 0))]
    worlds = []
    for rig in rigs:
        plan = plan_retarget(rig, auto_map(rig))
        res = retarget(plan, R, root, scale=1.0)
        W, X = pose_rig(rig, res.quaternions, res.locations)
        Q = rig.rest_rotation()
        Rw, P = forward_kinematics_np(R, root)
        z = {}
        for j, b in plan.mapping.entries.items():
            i = rig.index(b)
            z[j] = W[:, i] @ Q[i].T  # rotation away from the rest
            # canonical geometry, T-pose rest: exactly the canonical world rotation and position
            assert np.allclose(z[j], Rw[:, J[j]], atol=1e-9), j
            assert np.allclose(X[:, i], P[:, J[j]], atol=1e-9), j
        assert np.allclose(X, res.heads)
        worlds.append(z)


@pytest.mark.parametrize("spine", [2, 4])
def test_spine_distribution_keeps_chest(spine):
    R, root = random_motion(seed=4, amount=0.3)
    rig = humanoid("generic_prefix", spine=spine, neck=2, axes="random")
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, R, root)
    W, _ = pose_rig(rig, res.quaternions, res.locations)
    Q = rig.rest_rotation()
    Rw, _ = forward_kinematics_np(R, root)
    m = plan.mapping.entries
    for j in ("pelvis", "spine1", "spine3", "neck", "head"):
        i = rig.index(m[j])
        assert np.allclose(W[:, i] @ Q[i].T, Rw[:, J[j]], atol=1e-9), j
    # the in-between bones carry part of the bend: their rotation lies between their neighbours'
    for b in plan.mapping.extra_spine:
        i = rig.index(b)
        assert res.driven[i]
        assert not np.allclose(res.quaternions[:, i, 0], 1.0)
    # the chest (arms' attachment) stays where the canonical chest is, relative to the pelvis
    ch = rig.index(m["upperarm_l"])
    canon = keypoints_from_fk_np(R, root)
    d_t = unit(res.heads[:, ch] - res.heads[:, rig.index(m["pelvis"])])
    d_c = unit(canon[:, J["upperarm_l"]] - canon[:, J["pelvis"]])
    # positions differ only by where the bend happens (2 bones: spine2 bends at the chest bone)
    assert angle_deg(d_t, d_c).max() < (15.0 if spine == 2 else 6.0)


def test_missing_clavicle_folds_into_upper_arm():
    R, root = random_motion(seed=6)
    rig = humanoid("mixamo", clavicles=False, axes="random")
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, R, root)
    W, _ = pose_rig(rig, res.quaternions)
    Rw, _ = forward_kinematics_np(R, root)
    Q = rig.rest_rotation()
    i = rig.index(plan.mapping.entries["upperarm_l"])
    assert np.allclose(W[:, i] @ Q[i].T, Rw[:, J["upperarm_l"]], atol=1e-9)


def test_root_motion_scale_and_in_place():
    R, root = random_motion(seed=7)
    root = root + np.linspace(0, 1, len(root))[:, None] * [0.5, -2.0, 0.0]
    rig = humanoid("smpl", scale=100.0, face="+Y")
    plan = plan_retarget(rig, auto_map(rig))
    res = retarget(plan, R, root)
    assert res.scale == pytest.approx(100.0)
    p = rig.index(plan.mapping.entries["pelvis"])
    delta = res.heads[:, p] - rig.head[p]
    src = (root - CANONICAL.offsets[0]) * 100.0
    # facing +Y: canonical x, y are flipped in armature space
    assert np.allclose(delta, src * [-1, -1, 1], atol=1e-6)
    res2 = retarget(plan, R, root, in_place=True)
    d2 = res2.heads[:, p] - rig.head[p]
    assert np.allclose(d2[:, :2], 0.0, atol=1e-9)
    assert np.allclose(d2[:, 2], src[:, 2], atol=1e-6)
    res3 = retarget(plan, R, root, scale=2.0)
    assert res3.scale == 2.0
    # only the root bone has a location
    others = np.delete(res.locations, p, axis=1)
    assert np.all(others == 0.0)
    # auto scale follows the legs: a rig with longer legs walks further
    big = humanoid("smpl", proportions=1.5)
    pb = plan_retarget(big, auto_map(big))
    assert retarget(pb, R, root).scale == pytest.approx(1.5)


@pytest.mark.parametrize("name", ["mixamo", "unreal_A_rolls", "rigify_metarig", "bvh_orients"])
def test_round_trip_keypoints(plans, name):
    """Pose a rig, read canonical keypoints back, compare with canonical FK (scaled)."""
    plan = plans[name]
    R, root = random_motion(seed=8)
    res = retarget(plan, R, root, scale=1.0)
    kp = target_keypoints(plan, res.quaternions, res.locations)
    assert kp.shape == (len(R), len(KEYPOINTS), 3)
    canon = keypoints_from_fk_np(R, root)
    # the pelvis moves like the canonical root
    p = J["pelvis"]
    assert np.allclose(kp[:, p] - kp[:1, p], canon[:, p] - canon[:1, p], atol=1e-6)
    if name == "mixamo":  # canonical proportions: identical keypoints
        assert np.allclose(kp, canon, atol=1e-6)


def test_twist_share():
    rig = humanoid("unreal", twist=True)
    m = auto_map(rig)
    R = np.tile(np.eye(3), (3, len(JOINTS), 1, 1))
    angles = np.array([0.0, 0.5, -1.0])
    R[:, J["hand_l"]] = axis_angle_to_matrix(angles[:, None] * np.array([1.0, 0, 0]))  # twist about the arm
    root = np.tile(CANONICAL.offsets[0], (3, 1))
    tw = rig.index("lowerarm_twist_01_l")
    res0 = retarget(plan_retarget(rig, m), R, root)
    assert np.allclose(res0.quaternions[:, tw], [1, 0, 0, 0])
    res = retarget(plan_retarget(rig, m, twist_share=0.5), R, root)
    W, _ = pose_rig(rig, res.quaternions)
    Q = rig.rest_rotation()
    rel = W[:, tw] @ Q[tw].T
    exp = axis_angle_to_matrix(0.5 * angles[:, None] * np.array([1.0, 0, 0]))
    assert np.allclose(rel, exp, atol=1e-9)
    # the hand itself is unaffected by the twist bone
    h = rig.index("hand_l")
    assert np.allclose(W[:, h] @ Q[h].T, R[:, J["hand_l"]], atol=1e-9)


def test_quaternion_continuity():
    plan_rig = humanoid("mixamo", axes="random")
    plan = plan_retarget(plan_rig, auto_map(plan_rig))
    T = 200
    t = np.linspace(0, 4 * np.pi, T)
    R = np.tile(np.eye(3), (T, len(JOINTS), 1, 1))
    R[:, 0] = axis_angle_to_matrix(t[:, None] * np.array([0, 0, 1.0]))  # pelvis spins twice
    R[:, J["forearm_l"]] = axis_angle_to_matrix(t[:, None] * np.array([0, 1.0, 0]))
    root = np.tile(CANONICAL.offsets[0], (T, 1))
    res = retarget(plan, R, root)
    dots = np.sum(res.quaternions[1:] * res.quaternions[:-1], axis=-1)
    assert dots.min() > 0.9
    rng = np.random.default_rng(0)
    q = res.quaternions * rng.choice([-1.0, 1.0], size=(T, len(plan.bone_names), 1))
    q2 = quat_continuity(q)
    assert np.sum(q2[1:] * q2[:-1], axis=-1).min() > 0.9
    assert np.allclose(quat_to_matrix(q2), quat_to_matrix(q))


@pytest.mark.parametrize("order", ["XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"])
def test_euler_roundtrip(order):
    rng = np.random.default_rng(1)
    e = rng.uniform(-1.4, 1.4, size=(50, 3))
    m = euler_to_matrix_blender(e, order)
    assert np.allclose(matrix_to_euler_blender(m, order), e, atol=1e-9)
    # Blender's XYZ means X applied first
    if order == "XYZ":
        rz = euler_to_matrix_blender(np.array([0, 0, e[0, 2]]), "XYZ")
        ry = euler_to_matrix_blender(np.array([0, e[0, 1], 0]), "XYZ")
        rx = euler_to_matrix_blender(np.array([e[0, 0], 0, 0]), "XYZ")
        assert np.allclose(m[0], rz @ ry @ rx)


@pytest.mark.parametrize("order", ["XYZ", "ZXY", "YZX"])
def test_euler_continuity(order):
    T = 400
    t = np.linspace(0, 1, T)
    # spins past 2 pi about every axis and passes close to gimbal lock
    e = np.stack([6 * np.pi * t, 1.45 * np.sin(9 * t) + 0.3 * t, -5 * np.pi * t], -1)
    m = euler_to_matrix_blender(e, order)
    from neural_ik.model.rotations_np import matrix_to_quat
    q = matrix_to_quat(m)[:, None]
    q[::3] *= -1
    out = quats_to_euler_continuous(q, order)
    assert out.shape == (T, 1, 3)
    jumps = np.abs(np.diff(out, axis=0)).max()
    assert jumps < 0.5  # small per-frame steps: no 2 pi jumps, no branch flips
    assert np.allclose(euler_to_matrix_blender(out[:, 0], order), m, atol=1e-8)


@pytest.mark.parametrize("roll", [0.0, 90.0, -60.0])
def test_hand_roll_from_knuckles(roll):
    """A rest hand rolled about its axis (palms forward...) is turned palm-down in the T-pose."""
    rig = humanoid("cmu", knuckles=True, hand_roll=roll, pose="A", axes="random")
    plan = plan_retarget(rig, auto_map(rig))
    R = np.tile(np.eye(3), (1, len(JOINTS), 1, 1))
    res = retarget(plan, R, CANONICAL.offsets[0][None])
    for S in ("Left", "Right"):
        k = res.heads[0, rig.index(f"{S}HandIndex0")] - res.heads[0, rig.index(f"{S}HandPinky0")]
        assert angle_deg(unit(k @ plan.K), np.array([0, -1.0, 0])) < 1e-3
    # and a random pose still gives the canonical hand (thumb read back)
    R, root = random_motion(seed=13)
    res = retarget(plan, R, root)
    kp = target_keypoints(plan, res.quaternions, res.locations)
    ckp = keypoints_from_fk_np(R, root)
    for e, j in (("thumb_l", "hand_l"), ("thumb_r", "hand_r")):
        a = unit(kp[:, KEYPOINTS.index(e)] - kp[:, J[j]])
        b = unit(ckp[:, KEYPOINTS.index(e)] - ckp[:, J[j]])
        assert angle_deg(a, b).max() < 1e-3


def _path_heads(plan, res):
    """Posed heads (T, P, 3) of the pelvis -> head path bones, in the rig's body axes (left, back, up)."""
    return res.heads[:, plan.path] @ plan.K


def test_spine_rest_keeps_the_rigs_posture():
    """``spine="rest"``: the T-pose gives the meta-rig its own S-curve, the pelvis -> head line upright;
    ``"segments"`` straightens it. Limbs point the same way under both."""
    rig = rigify_metarig_description()
    mapping = auto_map(rig)
    seg, rest = plan_retarget(rig, mapping), plan_retarget(rig, mapping, spine="rest")
    assert (seg.spine, rest.spine) == ("segments", "rest")
    assert seg.path == rest.path and len(rest.path) >= 5
    R = np.tile(np.eye(3), (1, len(JOINTS), 1, 1))
    root = CANONICAL.offsets[0][None]
    h_rest = rig.head[rest.path] @ rest.K

    def bends(h):   # angles (deg) between successive path segments: the spine's shape
        d = unit(np.diff(h, axis=-2))
        return angle_deg(d[..., 1:, :], d[..., :-1, :])

    def off_line(h):   # each path head's distance (mm) from the pelvis -> head line
        d = h - h[..., :1, :]
        u = unit(d[..., -1:, :])
        return np.linalg.norm(d - np.sum(d * u, axis=-1, keepdims=True) * u, axis=-1) * 1000.0

    assert off_line(h_rest).max() > 20.0          # the meta-rig's rest spine is curved ...
    h = _path_heads(rest, retarget(rest, R, root))[0]
    assert np.allclose(bends(h), bends(h_rest), atol=1e-6)       # ... and keeps its curve
    assert np.allclose(off_line(h), off_line(h_rest), atol=1e-6)
    assert angle_deg(unit(h[-1] - h[0]), np.array([0.0, 0.0, 1.0])) < 1e-6   # its line upright
    h = _path_heads(seg, retarget(seg, R, root))[0]
    assert off_line(h).max() < 1e-6               # every segment up: straightened
    # only the path's bones differ
    others = [b for b in seg.align if b not in seg.path[:-1]]
    assert len(others) > 15
    for b in others:
        assert np.allclose(seg.align[b], rest.align[b], atol=1e-9), rig.names[b]
    R, root = random_motion(seed=7)
    cd = canonical_dirs(R, root)
    for j, d in bone_dirs(rest, retarget(rest, R, root)).items():
        if j not in ("spine3", "pelvis"):
            assert angle_deg(d, cd[j]).max() < 1e-3, j


def test_spine_rest_falls_back_for_a_spine_that_is_no_posture():
    """A path bone pointing over 45 degrees off the pelvis -> head line (a rest lying along an axis,
    Rokoko's hips below a horizontal spine): the segments, as without asking."""
    from neural_ik.retarget.solve import SPINE_REST_MAX_DEGREES

    rig = humanoid("mixamo")
    mapping = auto_map(rig)
    i = rig.index(mapping.entries["spine2"])
    for back in (0.05, 0.30):     # 12 and 52 degrees off the line
        bent = humanoid("mixamo")
        bent.head[i] += [0.0, back, 0.0]
        bent.matrix_local[i, :3, 3] = bent.head[i]
        plan = plan_retarget(bent, mapping, spine="rest")
        seg = plan_retarget(bent, mapping)
        d = unit(np.diff(bent.head[plan.path], axis=0))
        line = unit(bent.head[plan.path[-1]] - bent.head[plan.path[0]])
        worst = angle_deg(d, line).max()
        assert (worst > SPINE_REST_MAX_DEGREES) == (back > 0.1), worst
        if back > 0.1:
            assert plan.spine == "segments"
            for b in seg.align:
                assert np.allclose(seg.align[b], plan.align[b], atol=1e-12)
        else:
            assert plan.spine == "rest"
            assert not np.allclose(seg.align[i], plan.align[i], atol=1e-3)
    with pytest.raises(ValueError, match="unknown spine shape 'curved'"):
        plan_retarget(rig, mapping, spine="curved")
