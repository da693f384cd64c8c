"""The bake pipeline (blender_io/bake.py) on armatures built in Blender.

Most tests use an *exact* stub solver (it returns known joint rotations), so
they check the pipeline itself: validation, world-correct writing, the
action bookkeeping and undo. The round trip through the real network is in
``test_round_trip_real_solver`` (skipped while ``weights/neural_ik.pt`` is
missing).
"""

import importlib
import pathlib
import sys
from types import SimpleNamespace

import bpy
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rigs  # noqa: E402

import os  # noqa: E402

#: Weights for the real-solver round trip (NEURAL_IK_TEST_WEIGHTS overrides the shipped file).
WEIGHTS = pathlib.Path(os.environ.get("NEURAL_IK_TEST_WEIGHTS")
                       or pathlib.Path(__file__).resolve().parents[2] / "weights" / "neural_ik.pt")


class ExactSolver:
    """Stands in for model.inference.Solver: returns the known motion."""

    def __init__(self, local_rot, root_pos, skeleton):
        self.local_rot, self.root_pos, self.skeleton = local_rot, root_pos, skeleton
        self.calls = []

    def solve(self, keypoints, mask=None, *, mode="auto", refine=True, progress=None, **kw):
        self.calls.append(dict(keypoints=np.array(keypoints), mode=mode, refine=refine))
        T = len(keypoints)
        if progress is not None:
            progress(T, T)
        return SimpleNamespace(local_rot=self.local_rot[:T], root_pos=self.root_pos[:T],
                               keypoints=keypoints, skeleton=self.skeleton,
                               error_mm=np.zeros(T), seconds=0.0)


def motion(sk, rnp, T=24, seed=1, amplitude=0.5):
    """Smooth random canonical motion: local rotations, root path, keypoints."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, T)[:, None, None]
    a0 = rng.normal(0, amplitude, (1, 22, 3))
    a1 = rng.normal(0, amplitude, (1, 22, 3))
    aa = a0 * np.sin(2 * np.pi * t) + a1 * t
    aa[:, 0] *= 0.3
    local = rnp.axis_angle_to_matrix(aa)
    root = sk.CANONICAL.offsets[0] + np.concatenate([t[:, 0] * 0.8, t[:, 0] * 0.3, 0.05 * np.sin(6 * t[:, 0])], 1)
    kp = sk.keypoints_from_fk_np(local, root)
    return local, root, kp


def make_rig(convention="mixamo", **kw):
    return rigs.build_blender_armature(rigs.humanoid(convention, **kw), name=convention)


def pose_heads(obj, frames):
    """Evaluated pose-bone heads in world space per frame: dict name -> (T, 3)."""
    scene = bpy.context.scene
    out = {pb.name: [] for pb in obj.pose.bones}
    mw = np.array(obj.matrix_world)
    for f in frames:
        scene.frame_set(int(f))
        for pb in obj.pose.bones:
            out[pb.name].append(mw[:3, :3] @ np.array(pb.head) + mw[:3, 3])
    return {k: np.array(v) for k, v in out.items()}


def fcurve_arrays(ext, action, obj=None):
    actions = importlib.import_module(ext.__name__ + ".blender_io.actions")
    out = {}
    for fc in actions.action_fcurves(action, obj):
        co = np.empty(len(fc.keyframe_points) * 2, np.float32)
        fc.keyframe_points.foreach_get("co", co)
        out[(fc.data_path, fc.array_index)] = co
    return out


def test_bake_plays_back_world_positions(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    obj.location = (1.0, -2.0, 0.0)       # keypoints are world space: the rig must follow them
    bpy.context.view_layer.update()
    kp_world = kp + np.array([1.0, -2.0, 0.0])
    solver = ExactSolver(local, root + [1.0, -2.0, 0.0], sk.CANONICAL)
    res = bake.bake_keypoints(obj, kp_world, None, 24.0,
                              bake.BakeOptions(frame_start=5, fps=24.0), source_name="walk", solver=solver)
    assert res.action.name == "walk" and res.frames == 24 and res.frame_start == 5
    assert obj.animation_data.action == res.action
    # the solver sees world keypoints (only rotations undone: the floor stays at z = 0)
    np.testing.assert_allclose(solver.calls[0]["keypoints"], kp_world, atol=1e-5)
    heads = pose_heads(obj, range(5, 29))
    m = res.mapping.entries
    mw = np.array(obj.matrix_world)
    worst = 0.0
    for j, bone in m.items():
        b = res.retarget.bone_names.index(bone)
        solved = res.retarget.heads[:, b] @ mw[:3, :3].T + mw[:3, 3]
        worst = max(worst, np.abs(heads[bone] - solved).max())
        # same-size rig: the joints land on the input keypoints
        np.testing.assert_allclose(heads[bone], kp_world[:, sk.joint_index(j)], atol=2e-4, err_msg=j)
    assert worst < 1e-4
    assert res.keypoint_error_mm[1] < 0.5
    assert set(res.seconds) >= {"solve", "fit", "write"}


@pytest.mark.parametrize("rotation_mode,bone_mode", [("BONE", "XYZ"), ("BONE", "ZXY"), ("BONE", "AXIS_ANGLE"),
                                                     ("QUATERNION", "YXZ")])
def test_rotation_modes_play_back(ext, bake, sk, rnp, rotation_mode, bone_mode):
    local, root, kp = motion(sk, rnp, amplitude=1.2, seed=3)   # large angles: Euler flips
    obj = make_rig("unreal", pose="A", axes="random")
    for pb in obj.pose.bones:
        pb.rotation_mode = bone_mode
    res = bake.bake_keypoints(obj, kp, None, 30.0, bake.BakeOptions(rotation_mode=rotation_mode, fps=30.0),
                              source_name="m", solver=ExactSolver(local, root, sk.CANONICAL))
    heads = pose_heads(obj, range(res.frame_start, res.frame_start + res.frames))
    for j, bone in res.mapping.entries.items():
        b = res.retarget.bone_names.index(bone)
        np.testing.assert_allclose(heads[bone], res.retarget.heads[:, b], atol=3e-4, err_msg=j)
    arrays = fcurve_arrays(ext, res.action, obj)
    paths = {p.rsplit(".", 1)[1] for p, _ in arrays}
    want = {"QUATERNION": "rotation_quaternion", "XYZ": "rotation_euler", "ZXY": "rotation_euler",
            "YXZ": "rotation_euler", "AXIS_ANGLE": "rotation_axis_angle"}
    assert want[bone_mode if rotation_mode == "BONE" else "QUATERNION"] in paths and "location" in paths
    quats = {}
    for (path, i), co in arrays.items():     # continuity: no 2 pi wraps, no quaternion sign flips
        v = co[1::2]
        if path.endswith("rotation_quaternion"):
            quats.setdefault(path, [None] * 4)[i] = v
        elif "rotation" in path:
            assert np.abs(np.diff(v)).max() < np.pi, (path, i)
    for path, comps in quats.items():
        q = np.stack(comps, -1)
        assert (np.sum(q[1:] * q[:-1], -1) > 0).all(), path


def test_second_bake_and_user_action_untouched(ext, bake, sk, rnp):
    obj = make_rig("mixamo")
    # the user's own action with keys
    user = bpy.data.actions.new("UserAction")
    obj.animation_data_create()
    obj.animation_data.action = user
    pb = obj.pose.bones["mixamorig:LeftArm"]
    pb.rotation_quaternion = (0.9, 0.1, 0.2, 0.0)
    pb.keyframe_insert("rotation_quaternion", frame=1)
    pb.keyframe_insert("rotation_quaternion", frame=7)
    before_user = fcurve_arrays(ext, user, obj)
    rest = [b.matrix_local.copy() for b in obj.data.bones]
    local, root, kp = motion(sk, rnp)
    r1 = bake.bake_keypoints(obj, kp, None, 24.0, bake.BakeOptions(), source_name="clip",
                             solver=ExactSolver(local, root, sk.CANONICAL))
    a1 = fcurve_arrays(ext, r1.action)
    local2, root2, kp2 = motion(sk, rnp, seed=9)
    r2 = bake.bake_keypoints(obj, kp2, None, 24.0, bake.BakeOptions(), source_name="clip",
                             solver=ExactSolver(local2, root2, sk.CANONICAL))
    assert r2.action != r1.action and r2.action.name == "clip.001"
    assert obj.animation_data.action == r2.action
    after1 = fcurve_arrays(ext, r1.action)
    assert after1.keys() == a1.keys() and all(np.array_equal(a1[k], after1[k]) for k in a1)
    assert "UserAction" in bpy.data.actions and user.use_fake_user
    after_user = fcurve_arrays(ext, user)
    assert after_user.keys() == before_user.keys()
    assert all(np.array_equal(before_user[k], after_user[k]) for k in before_user)
    assert all(b.matrix_local == m for b, m in zip(obj.data.bones, rest))   # rest pose unchanged


def _scene_counts():
    return (len(bpy.data.objects), len(bpy.data.actions), len(bpy.data.collections),
            sum(len(a.layers) if hasattr(a, "layers") else 0 for a in bpy.data.actions))


def test_bad_input_changes_nothing(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    empty = bpy.data.objects.new("Empty", None)
    bpy.context.scene.collection.objects.link(empty)
    # a rig that is not a humanoid: one arm only
    partial = rigs.humanoid("mixamo")
    keep = [i for i, n in enumerate(partial.names) if "Right" not in n]
    from neural_ik.retarget.rig import RigDescription
    sub = RigDescription([partial.names[i] for i in keep],
                         [keep.index(partial.parents[i]) if partial.parents[i] >= 0 else -1 for i in keep],
                         partial.matrix_local[keep], partial.head[keep], partial.tail[keep])
    one_armed = rigs.build_blender_armature(sub, "OneArmed")
    mapping_mod = importlib.import_module(ext.__name__ + ".retarget.mapping")
    bad_map = mapping_mod.BoneMapping({"pelvis": "mixamorig:Hips", "head": "NoSuchBone"})
    nan_kp = np.full_like(kp, np.nan)
    hole = kp.copy()
    hole[3, sk.keypoint_index("pelvis")] = np.nan
    solver = ExactSolver(local, root, sk.CANONICAL)
    cases = [
        (dict(obj=empty), "must be an armature"),
        (dict(obj=None), "must be an armature"),
        (dict(obj=one_armed), "not usable as a humanoid"),
        (dict(mapping=bad_map), "NoSuchBone"),
        (dict(options=bake.BakeOptions(frames=(10, 40))), "outside the input"),
        (dict(options=bake.BakeOptions(frames=(5, 5))), "outside the input"),
        (dict(keypoints=nan_kp), "all NaN"),
        (dict(keypoints=hole), "'pelvis' is missing on 1 of 24 frames"),
        (dict(keypoints=kp[:, :20]), "shape"),
        (dict(options=bake.BakeOptions(smooth="gauss")), "smoothing method"),
        (dict(options=bake.BakeOptions(rotation_mode="EULER")), "rotation mode"),
        (dict(source_fps=0.0), "frame rate"),
    ]
    before = _scene_counts()
    # an armature in Edit Mode
    edit_rig = make_rig("mixamo")
    bpy.context.view_layer.objects.active = edit_rig
    bpy.ops.object.mode_set(mode="EDIT")
    with pytest.raises(bake.BakeError, match="Edit Mode"):
        bake.bake_keypoints(edit_rig, kp, None, 24.0, bake.BakeOptions(), source_name="bad", solver=solver)
    bpy.ops.object.mode_set(mode="OBJECT")
    before = _scene_counts()
    for kwargs, msg in cases:
        args = dict(obj=obj, keypoints=kp, mask=None, source_fps=24.0, options=bake.BakeOptions(), mapping=None)
        args.update(kwargs)
        with pytest.raises(bake.BakeError) as info:
            bake.bake_keypoints(args["obj"], args["keypoints"], args["mask"], args["source_fps"], args["options"],
                                source_name="bad", mapping=args["mapping"], solver=solver)
        assert msg in str(info.value), (msg, str(info.value))
        assert _scene_counts() == before, msg
        assert obj.animation_data is None
    assert not solver.calls     # validation happens before solving


def test_cancel_and_progress(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    before = _scene_counts()
    with pytest.raises(bake.BakeCancelled):
        bake.bake_keypoints(obj, kp, None, 24.0, bake.BakeOptions(), source_name="c",
                            solver=ExactSolver(local, root, sk.CANONICAL), cancel=lambda: True)
    assert _scene_counts() == before and obj.animation_data is None
    seen = []
    bake.bake_keypoints(obj, kp, None, 24.0, bake.BakeOptions(), source_name="c",
                        solver=ExactSolver(local, root, sk.CANONICAL), progress=lambda f, s: seen.append((f, s)))
    fr = [f for f, _ in seen]
    assert fr == sorted(fr) and fr[-1] == pytest.approx(1.0) and {s for _, s in seen} >= {"solve", "write"}


def test_frames_slice_resample_in_place_and_metrics(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp, T=61)
    obj = make_rig("mixamo")
    solver = ExactSolver(local[10:], root[10:], sk.CANONICAL)
    res = bake.bake_keypoints(obj, kp, None, 60.0,
                              bake.BakeOptions(frames=(10, 61), fps=30.0, in_place=True, frame_start=100),
                              source_name="sl", solver=solver)
    assert res.frames == 26 and res.fps == 30.0 and res.frame_start == 100     # 51 frames @60 -> 26 @30
    assert len(solver.calls[0]["keypoints"]) == 26
    np.testing.assert_allclose(solver.calls[0]["keypoints"][1], kp[12], atol=1e-6)
    loc = res.retarget.locations[:, res.retarget.bone_names.index(res.retarget.root_bone)]
    heads = res.retarget.heads[:, res.retarget.bone_names.index("mixamorig:Hips")]
    assert np.ptp(heads[:, 0]) < 1e-6 and np.ptp(heads[:, 1]) < 1e-6 and np.ptp(loc[:, 1]) > 0  # z still moves
    assert res.jitter >= 0 and res.foot_sliding_mm >= 0
    assert any("resampled" in w for w in res.warnings)


def test_solve_current_frame_poses_without_keys(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    pose_solve = importlib.import_module(ext.__name__ + ".blender_io.pose_solve")
    out = pose_solve.solve_current_frame(obj, kp[5:6], None, bake.BakeOptions(),
                                         solver=ExactSolver(local[5:6], root[5:6], sk.CANONICAL))
    assert out["keypoint_error_mm"][1] < 0.5
    assert obj.animation_data is None or obj.animation_data.action is None
    bpy.context.view_layer.update()
    hand = np.array(obj.pose.bones["mixamorig:LeftHand"].head)
    np.testing.assert_allclose(hand, kp[5, sk.joint_index("hand_l")], atol=2e-4)


@pytest.mark.parametrize("rotation_mode", ["BONE", "QUATERNION"])
def test_solve_current_frame_poses_bones_in_their_modes(ext, bake, sk, rnp, rotation_mode):
    """Solve Frame writes Euler, axis-angle and quaternion bones alike (the hand lands on its keypoint);
    ``rotation_mode="QUATERNION"`` turns every solved bone to quaternions."""
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    modes = {"mixamorig:LeftArm": "XYZ", "mixamorig:LeftForeArm": "AXIS_ANGLE", "mixamorig:Spine": "ZXY"}
    for name, mode in modes.items():
        obj.pose.bones[name].rotation_mode = mode
    pose_solve = importlib.import_module(ext.__name__ + ".blender_io.pose_solve")
    out = pose_solve.solve_current_frame(obj, kp[5:6], None, bake.BakeOptions(rotation_mode=rotation_mode),
                                         solver=ExactSolver(local[5:6], root[5:6], sk.CANONICAL))
    assert out["keypoint_error_mm"][1] < 0.5
    bpy.context.view_layer.update()
    for name, mode in modes.items():
        assert obj.pose.bones[name].rotation_mode == ("QUATERNION" if rotation_mode == "QUATERNION" else mode)
    hand = np.array(obj.pose.bones["mixamorig:LeftHand"].head)
    np.testing.assert_allclose(hand, kp[5, sk.joint_index("hand_l")], atol=2e-4)


def test_stored_mapping_is_used(ext, bake, sk, rnp):
    local, root, kp = motion(sk, rnp)
    obj = make_rig("mixamo")
    mapping_mod = importlib.import_module(ext.__name__ + ".retarget.mapping")
    rig_mod = importlib.import_module(ext.__name__ + ".blender_io.rig")
    m = mapping_mod.auto_map(rig_mod.rig_description(obj))
    bake.store_mapping(obj, m)
    assert len(obj.neural_ik_mapping) == 22
    back = bake.stored_mapping(obj)
    assert back.entries == m.entries
    obj.neural_ik_mapping[sk.joint_index("hand_l")].bone = "NoSuchBone"
    with pytest.raises(bake.BakeError, match="NoSuchBone"):
        bake.bake_keypoints(obj, kp, None, 24.0, bake.BakeOptions(), source_name="s",
                            solver=ExactSolver(local, root, sk.CANONICAL))


@pytest.mark.skipif(not WEIGHTS.exists(), reason="weights/neural_ik.pt not trained yet")
def test_round_trip_real_solver(ext, bake, sk, rnp, capsys):
    """Pose a rig with known rotations, read its joints, bake them back with the network."""
    solve_mod = importlib.import_module(ext.__name__ + ".retarget.solve")
    rig_mod = importlib.import_module(ext.__name__ + ".blender_io.rig")
    mapping_mod = importlib.import_module(ext.__name__ + ".retarget.mapping")
    demo = importlib.import_module(ext.__name__ + ".cli.demo_motion")
    local = demo.walk_rotations(2.0, 30.0)                 # a natural motion (walk with a turn)
    root = demo.walk_keypoints(2.0, 30.0)[:, sk.joint_index("pelvis")]
    obj = make_rig("mixamo", pose="A", axes="random")
    rig = rig_mod.rig_description(obj)
    mapping = mapping_mod.auto_map(rig)
    plan = solve_mod.plan_retarget(rig, mapping)
    truth = solve_mod.retarget(plan, local, root, scale=1.0)
    # the truth stands on the rig's floor: its planted ankles at the rig's rest ankle height (the rig
    # stands on its object's floor at rest, its lowest foot point 3 cm above it: foot_points' heights
    # are above that point)
    targets_mod = importlib.import_module(ext.__name__ + ".pipeline.targets")
    up = np.array([0.0, 0.0, 1.0])
    kp0 = solve_mod.target_keypoints(plan, truth.quaternions, truth.locations) @ plan.K.T
    fp = targets_mod.foot_points(plan, up)
    gap = targets_mod.rest_floor_gap(plan, np.asarray(obj.matrix_world))
    assert 0.0 < gap < 0.05
    shift = np.mean([gap + fp[s][0][3] - targets_mod.planted_height(kp0, np.isfinite(kp0).all(-1), s, up, 30.0,
                                                                    sk.keypoint_index(f"foot_{s}")) for s in "lr"])
    truth.locations[:, plan.root] += np.linalg.inv(rig.rest_rotation()[plan.root]) @ (up * shift)
    _, truth.heads = solve_mod.pose_rig(rig, truth.quaternions, truth.locations)
    kp_rig = solve_mod.target_keypoints(plan, truth.quaternions, truth.locations)
    # contacts on (the default): a same-proportion bake whose feet stand on the
    # floor and stay planted must come back unchanged
    res = bake.bake_keypoints(obj, kp_rig, None, 30.0, bake.BakeOptions(fps=30.0, refine=True),
                              source_name="rt", solver=bake.get_solver("cpu", weights=str(WEIGHTS)))
    heads = pose_heads(obj, range(res.frame_start, res.frame_start + res.frames))
    rows = []
    worst = 0.0
    q_true = truth.quaternions
    got = res.retarget.on_rig(rig)    # (the bake holds its posed bones' columns)
    q_got = got.quaternions
    w_true, _ = solve_mod.pose_rig(rig, q_true, truth.locations)
    w_got, _ = solve_mod.pose_rig(rig, q_got, got.locations)
    for j, bone in mapping.entries.items():
        b = rig.index(bone)
        err = np.linalg.norm(heads[bone] - truth.heads[:, b], axis=-1) * 1000
        dot = np.abs(np.sum(q_true[:, b] * q_got[:, b], -1)).clip(0, 1)
        ang = np.degrees(2 * np.arccos(dot))
        rel = np.swapaxes(w_true[:, b], -1, -2) @ w_got[:, b]
        wang = np.degrees(np.arccos(((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2).clip(-1, 1)))
        rows.append((j, bone, err.mean(), err.max(), ang.mean(), ang.max(), wang.mean(), wang.max()))
        worst = max(worst, err.max())
    with capsys.disabled():
        print(f"\nround trip ({res.frames} frames, refine on): solve error {res.solve_error_mm:.2f} mm; "
              "rotation errors: local = pose-bone rotation, world = armature space")
        print(f"{'joint':12s} {'bone':26s} {'pos mean':>9s} {'pos max':>8s} {'local mean':>10s} {'max':>6s} "
              f"{'world mean':>10s} {'max':>6s}")
        for r in rows:
            print(f"{r[0]:12s} {r[1]:26s} {r[2]:7.2f}mm {r[3]:6.2f}mm {r[4]:8.2f}deg {r[5]:6.1f} "
                  f"{r[6]:8.2f}deg {r[7]:6.1f}")
    assert worst < 2.0


@pytest.mark.parametrize("rig_kind", ["rigify", "two_spine", "cm_scaled"])
def test_playback_matches_solve_on_other_rigs(ext, bake, sk, rnp, rig_kind):
    """Rigify's meta-rig (connected bones), a 2-spine rig, a centimetre rig scaled 0.01 and turned."""
    local, root, kp = motion(sk, rnp, T=12, seed=4)
    if rig_kind == "rigify":
        import addon_utils
        addon_utils.enable("rigify", default_set=True)
        bpy.ops.object.armature_human_metarig_add()
        obj = bpy.context.active_object
    elif rig_kind == "two_spine":
        obj = make_rig("mixamo", spine=2)
    else:
        obj = rigs.build_blender_armature(rigs.humanoid("unreal", scale=100.0, face="+Y"), name="cm")
        obj.scale = (0.01, 0.01, 0.01)
        obj.rotation_euler = (0.0, 0.0, np.pi)      # the +Y-facing rig turned to face -Y in the world
        bpy.context.view_layer.update()
    res = bake.bake_keypoints(obj, kp, None, 24.0, bake.BakeOptions(fps=24.0), source_name=rig_kind,
                              solver=ExactSolver(local, root, sk.CANONICAL))
    heads = pose_heads(obj, range(res.frame_start, res.frame_start + res.frames))
    mw = np.array(obj.matrix_world)
    for j, bone in res.mapping.entries.items():
        b = res.retarget.bone_names.index(bone)
        solved = res.retarget.heads[:, b] @ mw[:3, :3].T + mw[:3, 3]
        np.testing.assert_allclose(heads[bone], solved, atol=3e-4, err_msg=j)
    if rig_kind == "cm_scaled":     # same proportions as the source: lands on the keypoints in the world
        hand = res.mapping.entries["hand_l"]
        np.testing.assert_allclose(heads[hand], kp[:, sk.joint_index("hand_l")], atol=1e-3)
        assert res.keypoint_error_mm[1] < 1.0


@pytest.mark.parametrize("method", ["oneeuro", "savgol", "butter"])
def test_smoothing_lowers_jitter(ext, bake, sk, rnp, method):
    """Keypoint noise (what video estimators give) is smoothed before the solve and after it."""
    local, root, kp = motion(sk, rnp, T=60, amplitude=0.3)
    rng = np.random.default_rng(2)
    noisy_kp = kp + rng.normal(0, 0.01, kp.shape)
    noisy = local @ rnp.axis_angle_to_matrix(rng.normal(0, 0.03, local.shape[:2] + (3,)))
    obj = make_rig("mixamo")
    raw = bake.bake_keypoints(obj, noisy_kp, None, 30.0, bake.BakeOptions(fps=30.0), source_name="raw",
                              solver=ExactSolver(noisy, root, sk.CANONICAL))
    smooth = bake.bake_keypoints(obj, noisy_kp, None, 30.0,
                                 bake.BakeOptions(fps=30.0, smooth=method, smooth_strength=0.6),
                                 source_name="smooth", solver=ExactSolver(noisy, root, sk.CANONICAL))
    assert smooth.jitter < 0.7 * raw.jitter, (raw.jitter, smooth.jitter)
    q = smooth.retarget.quaternions
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-6)


def test_ground_puts_the_feet_on_the_floor(ext, bake, sk, rnp):
    """A clip 1 m below the floor bakes onto the floor with ``ground``; the pose is unchanged."""
    local, root, kp = motion(sk, rnp)
    low = kp - np.array([0.0, 0.0, 1.0])
    obj = make_rig("mixamo")
    solver = ExactSolver(local, root, sk.CANONICAL)
    res = bake.bake_keypoints(obj, low, None, 24.0, bake.BakeOptions(fps=24.0, ground=True),
                              source_name="low", solver=solver)
    seen = solver.calls[0]["keypoints"]
    heel_toe = [sk.keypoint_index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    floor = np.percentile(kp[:, heel_toe, 2], 1.0)
    np.testing.assert_allclose(seen, kp - [0.0, 0.0, floor], atol=1e-9)
    assert any("grounded" in w and "+" in w for w in res.warnings)
    # without it the clip stays where the source put it, and nothing is said
    solver = ExactSolver(local, root, sk.CANONICAL)
    res = bake.bake_keypoints(obj, low, None, 24.0, bake.BakeOptions(fps=24.0), source_name="low", solver=solver)
    np.testing.assert_allclose(solver.calls[0]["keypoints"], low, atol=1e-9)
    assert not any("grounded" in w for w in res.warnings)
