"""Operators of the Neural IK tab, run through ``bpy.ops`` on armatures built in Blender.

The bake operator runs headless through ``execute`` (synchronous); the
network is replaced by the exact stub solver of ``test_bake`` so these tests
do not need trained weights.
"""

import importlib
import pathlib
import re
import sys

import bpy
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rigs  # noqa: E402
from ui_layout import RecordingLayout  # noqa: E402
from test_bake import ExactSolver, fcurve_arrays, motion, pose_heads  # noqa: E402


def _select(obj):
    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def _counts():
    return (len(bpy.data.objects), len(bpy.data.actions), len(bpy.data.collections))


def _auto_map(obj):
    _select(obj)
    bpy.context.scene.neural_ik.target = obj
    assert bpy.ops.neural_ik.auto_map() == {'FINISHED'}
    return {it.joint: it.bone for it in obj.neural_ik_mapping if it.bone}


def _rigify_metarig():
    import addon_utils
    addon_utils.enable("rigify", default_set=True)
    bpy.ops.object.armature_human_metarig_add()
    return bpy.context.active_object


RIGIFY_EXPECTED = {
    "pelvis": "spine", "spine1": "spine.001", "spine3": "spine.003", "neck": "spine.004", "head": "spine.006",
    "clavicle_l": "shoulder.L", "upperarm_l": "upper_arm.L", "forearm_l": "forearm.L", "hand_l": "hand.L",
    "thigh_r": "thigh.R", "calf_r": "shin.R", "foot_r": "foot.R", "toe_r": "toe.R",
}


def test_auto_map_rigify_metarig(ext, capsys):
    obj = _rigify_metarig()
    m = _auto_map(obj)
    with capsys.disabled():
        print("\nRigify meta-rig mapping:", ", ".join(f"{j}={b}" for j, b in m.items()))
    for j, b in RIGIFY_EXPECTED.items():
        assert m.get(j) == b, (j, m.get(j))
    assert len(m) == 22, sorted(set(sk_joints(ext)) - set(m))


def sk_joints(ext):
    return importlib.import_module(ext.__name__ + ".model.skeleton").JOINTS


@pytest.mark.parametrize("convention,kwargs,expected,count", [
    ("mixamo", {}, {"pelvis": "mixamorig:Hips", "clavicle_l": "mixamorig:LeftShoulder",
                    "upperarm_l": "mixamorig:LeftArm", "calf_r": "mixamorig:RightLeg",
                    "toe_l": "mixamorig:LeftToeBase", "spine2": "mixamorig:Spine1"}, 22),
    ("unreal", {"pose": "A", "axes": "random"},
     {"pelvis": "pelvis", "forearm_l": "lowerarm_l", "hand_r": "hand_r", "spine3": "spine_03",
      "neck": "neck_01", "toe_r": "ball_r"}, 22),
    ("mixamo", {"spine": 2}, {"spine1": "mixamorig:Spine", "spine3": "mixamorig:Spine1"}, 21),
])
def test_auto_map_operator(ext, bake, convention, kwargs, expected, count):
    obj = rigs.build_blender_armature(rigs.humanoid(convention, **kwargs), name=convention)
    m = _auto_map(obj)
    for j, b in expected.items():
        assert m.get(j) == b, (j, m.get(j))
    assert len(m) == count
    stored = bake.stored_mapping(obj)
    assert stored.entries == m
    if convention == "unreal":   # twist bones found and kept out of the entries
        assert any("twist" in b for bones in stored.twist.values() for b in bones)


def test_mapping_presets_round_trip(ext, bake, tmp_path):
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="m")
    m = _auto_map(obj)
    path = tmp_path / "mixamo.json"
    assert bpy.ops.neural_ik.save_mapping_preset(filepath=str(path)) == {'FINISHED'}
    assert bpy.ops.neural_ik.clear_mapping() == {'FINISHED'}
    assert len(obj.neural_ik_mapping) == 0
    assert bpy.ops.neural_ik.load_mapping_preset(filepath=str(path)) == {'FINISHED'}
    assert {it.joint: it.bone for it in obj.neural_ik_mapping if it.bone} == m
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(RuntimeError, match="cannot load preset"):
        bpy.ops.neural_ik.load_mapping_preset(filepath=str(bad))


def _write_npz(path, sk, kp, fps=30.0):
    np.savez(path, positions=kp, joint_names=np.array(sk.KEYPOINTS), fps=fps, units="m", up_axis="Z")


def test_import_keypoints_and_undo(ext, sk, rnp, tmp_path):
    _local, _root, kp = motion(sk, rnp, T=10)
    path = tmp_path / "clip10.npz"
    _write_npz(path, sk, kp)
    bpy.ops.ed.undo_push(message="before import")
    before = _counts()
    # undo=True: push an undo step like the UI does after an operator with 'UNDO'
    assert bpy.ops.neural_ik.import_keypoints('EXEC_DEFAULT', True, filepath=str(path),
                                              ground=False) == {'FINISHED'}
    s = bpy.context.scene.neural_ik
    root = s.keypoint_object
    assert root is not None and root.name == "clip10" and s.source == 'KEYPOINTS'
    kpo = importlib.import_module(ext.__name__ + ".blender_io.keypoint_objects")
    pos, names, fps, layout = kpo.read_keypoint_object(root)
    assert pos.shape == (10, 32, 3) and fps == 30.0
    np.testing.assert_allclose(pos, kp, atol=1e-5)
    assert len(bpy.data.objects) == before[0] + 33
    assert all(c.animation_data and c.animation_data.action for c in root.children)
    bpy.ops.ed.undo()
    assert _counts()[0] == before[0] and "clip10" not in bpy.data.objects


def test_import_corrupt_file_creates_nothing(ext, tmp_path):
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"PK\x03\x04 this is no zip archive")
    before = _counts()
    with pytest.raises(RuntimeError, match="cannot import keypoints"):
        bpy.ops.neural_ik.import_keypoints(filepath=str(bad))
    assert _counts() == before
    ops = importlib.import_module(ext.__name__ + ".operators.keypoints")
    assert ops.preview(str(bad), wait=True)[0].startswith("Error")


def test_import_npy_with_overrides_and_draw(ext, sk, rnp, tmp_path):
    from types import SimpleNamespace
    _local, _root, kp = motion(sk, rnp, T=10)
    path = tmp_path / "raw.npy"
    np.save(path, kp[..., [0, 2, 1]] * [1, 1, -1] * 100.0)        # Y up, centimetres
    odd = tmp_path / "odd.npy"
    np.save(odd, kp[:, :12])
    with pytest.raises(RuntimeError, match="12 points per frame"):  # a nameless .npy of no known layout
        bpy.ops.neural_ik.import_keypoints(filepath=str(odd))
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(path), layout_name="canonical", units="cm",
                                              up_axis="Y", fps=50.0, frame_start=11,
                                              ground=False) == {'FINISHED'}
    root = bpy.context.scene.neural_ik.keypoint_object
    kpo = importlib.import_module(ext.__name__ + ".blender_io.keypoint_objects")
    pos, _names, fps, layout = kpo.read_keypoint_object(root)
    assert fps == 50.0 and layout == "canonical" and root["frame_start"] == 11
    np.testing.assert_allclose(pos, kp, atol=1e-5)
    ops = importlib.import_module(ext.__name__ + ".operators.keypoints")
    log = []
    fake = SimpleNamespace(layout=_Layout(log), filepath=str(path), layout_name="canonical", units="cm",
                           up_axis="Y", fps=50.0, ground=False,
                           set_scene_frames=True,
                           bl_rna=SimpleNamespace(properties={"layout_name", "units", "up_axis", "fps", "ground",
                                                              "frame_start", "set_scene_frames"}))
    ops.NEURAL_IK_OT_import_keypoints.draw(fake, bpy.context)   # the first draw starts reading it
    for job in list(ops._preview_jobs.values()):
        job.join(60)
    log.clear()
    ops.NEURAL_IK_OT_import_keypoints.draw(fake, bpy.context)
    labels = [t for kind, t in log if kind == "label"]
    assert "Layout: canonical" in labels and any("10 frames at 50 fps" in t for t in labels), labels


def test_import_preview(ext, sk, rnp, tmp_path):
    _local, _root, kp = motion(sk, rnp, T=10)
    path = tmp_path / "p.npz"
    _write_npz(path, sk, kp, fps=25.0)
    ops = importlib.import_module(ext.__name__ + ".operators.keypoints")
    first = ops.preview(str(path))                 # what the dialog's draw gets: it never waits for the file
    assert first[0].startswith("Reading p.npz")
    for job in list(ops._preview_jobs.values()):
        job.join(60)
    lines = ops.preview(str(path))
    assert any("canonical" in line for line in lines) and any("10 frames at 25 fps" in line for line in lines)
    assert ops.preview(str(path), units="cm", wait=True) != lines      # an override: read again


@pytest.fixture
def exact_solver(bake, sk, rnp, monkeypatch):
    local, root, kp = motion(sk, rnp, T=20)
    solver = ExactSolver(local, root, sk.CANONICAL)
    monkeypatch.setattr(bake, "get_solver", lambda *a, **k: solver)
    cache = importlib.import_module(bake.__name__.rsplit(".", 2)[0] + ".pipeline.cache")
    monkeypatch.setattr(cache, "get_solver", lambda *a, **k: solver)
    bpy.context.scene.render.fps = 30          # the clip's rate: no resampling
    return solver, kp


def _import_clip(sk, kp, tmp_path, name="walk"):
    path = tmp_path / f"{name}.npz"
    _write_npz(path, sk, kp)
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(path), ground=False) == {"FINISHED"}


def test_bake_operator_and_undo(ext, bake, sk, exact_solver, tmp_path):
    solver, kp = exact_solver
    _import_clip(sk, kp, tmp_path)
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    bpy.context.scene.neural_ik.target = obj
    bpy.context.scene.frame_start = 1
    bpy.ops.ed.undo_push(message="before bake")
    n_actions = len(bpy.data.actions)
    assert bpy.ops.neural_ik.bake('EXEC_DEFAULT', True) == {'FINISHED'}
    obj = bpy.data.objects["Hero"]
    assert obj.animation_data.action.name == "walk"
    assert len(bpy.data.actions) == n_actions + 1
    status = bpy.context.scene.neural_ik.status
    assert "bone directions" in status and "effectors within" not in status     # keypoints: no effectors
    assert re.search(r"motion scaled 1\.0\dx", status), status                  # the scale in use, shown
    heads = pose_heads(obj, range(1, 21))
    np.testing.assert_allclose(heads["mixamorig:LeftHand"], kp[:, sk.joint_index("hand_l")], atol=2e-4)
    bpy.ops.ed.undo()
    obj = bpy.data.objects["Hero"]
    assert len(bpy.data.actions) == n_actions and "walk" not in bpy.data.actions
    assert obj.animation_data is None or obj.animation_data.action is None


def test_bake_operator_errors(ext, bake, sk, exact_solver, tmp_path):
    solver, kp = exact_solver
    s = bpy.context.scene.neural_ik
    before = _counts()
    with pytest.raises(RuntimeError, match="no keypoint object"):
        bpy.ops.neural_ik.bake()
    _import_clip(sk, kp, tmp_path)
    before = _counts()
    with pytest.raises(RuntimeError, match="must be an armature"):
        bpy.ops.neural_ik.bake()
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    s.target = obj
    s.use_clip_range = False                          # the custom range starts as the whole clip
    assert (s.frame_from, s.frame_to) == (1, 20)
    s.frame_from, s.frame_to = 5, 50                  # scene frames, both included
    before = _counts()
    with pytest.raises(RuntimeError, match="outside the input"):
        bpy.ops.neural_ik.bake()
    assert _counts() == before and obj.animation_data is None
    s.frame_from, s.frame_to = 5, 14
    assert bpy.ops.neural_ik.bake(action_name="Part") == {'FINISHED'}
    assert obj.animation_data.action.name == "Part"
    fc = fcurve_arrays(ext, obj.animation_data.action, obj)
    assert all(len(v) == 20 for v in fc.values())     # 10 frames, (frame, value) pairs
    assert all(list(v[0::2]) == list(range(5, 15)) for v in fc.values())  # keyed on those very frames


def test_solve_frame_and_effectors(ext, bake, sk, exact_solver, tmp_path):
    solver, kp = exact_solver
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    s = bpy.context.scene.neural_ik
    s.target = obj
    _select(obj)
    before = _counts()
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    assert len(bpy.data.objects) == before[0] + 7 and s.source == 'EFFECTORS'
    eff = {c["neural_ik_effector"]: c for c in s.effector_root.children}
    np.testing.assert_allclose(np.array(eff["hand_l"].location),
                               np.array(obj.pose.bones["mixamorig:LeftHand"].head), atol=1e-6)
    # untouched effectors: nothing to solve, the pose stays
    calls = len(solver.calls)
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'} and len(solver.calls) == calls
    # moved onto frame 0 of the stub's motion: the solver receives the effector positions and
    # the exact stub answers that frame
    shift = np.array([0.0, 0.05, 0.0])         # (frame 0 shifted: the rest pose is frame 0 itself)
    for name, e in eff.items():
        e.location = kp[0, sk.keypoint_index(name)] + shift
    bpy.context.view_layer.update()
    solver.local_rot, solver.root_pos = solver.local_rot[:1], solver.root_pos[:1]
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    got = solver.calls[-1]["keypoints"][0]
    np.testing.assert_allclose(got[sk.keypoint_index("hand_l")], np.array(eff["hand_l"].matrix_world.translation),
                               atol=1e-5)
    assert np.isnan(got[sk.keypoint_index("forearm_l")]).all()
    bpy.context.view_layer.update()
    np.testing.assert_allclose(np.array(obj.pose.bones["mixamorig:LeftHand"].head),
                               kp[0, sk.joint_index("hand_l")] + shift, atol=2e-4)
    assert obj.animation_data is None            # no keys
    assert bpy.ops.neural_ik.live_solve('EXEC_DEFAULT') == {'FINISHED'}


def test_add_effectors_loads_the_network_in_the_background(ext):
    import threading
    from types import SimpleNamespace
    cache = importlib.import_module(ext.__name__ + ".pipeline.cache")
    panels = importlib.import_module(ext.__name__ + ".panels.main")
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    bpy.context.scene.neural_ik.target = obj
    _select(obj)
    release = threading.Event()
    held = threading.Thread(target=release.wait, daemon=True)   # a load that is still under way
    held.start()
    cache._PRELOAD["thread"] = held
    try:
        assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}   # no second load while one runs
        assert cache._PRELOAD["thread"] is held
        log = []
        panels.VIEW3D_PT_neural_ik_bake.draw(SimpleNamespace(layout=_Layout(log)), bpy.context)
        assert ("label", "Loading network...") in log
    finally:
        release.set()
        held.join()
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}      # now it starts one
    thread = cache._PRELOAD["thread"]
    assert thread is not held and thread.name == "neural_ik_preload"
    thread.join(120)
    log = []
    panels.VIEW3D_PT_neural_ik_bake.draw(SimpleNamespace(layout=_Layout(log)), bpy.context)
    assert ("label", "Loading network...") not in log
    assert cache.get_solver("auto") is not None


def test_effectors_sized_in_world_units_one_set_and_their_owner(ext, capfd):
    from mathutils import Matrix
    cm = rigs.build_blender_armature(rigs.humanoid("mixamo", scale=100.0), name="Centi")
    cm.matrix_world = Matrix.Diagonal((0.01, 0.01, 0.01, 1.0))       # a Mixamo-style FBX: cm bones, 0.01
    m = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Metres")
    bpy.context.view_layer.update()
    s = bpy.context.scene.neural_ik
    sizes = {}
    for obj in (cm, m):
        s.target = obj
        _select(obj)
        assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
        sizes[obj.name] = {c["neural_ik_effector"]: c.empty_display_size for c in s.effector_root.children}
    assert sizes["Centi"] == pytest.approx(sizes["Metres"], rel=1e-3)      # the same body in the world
    assert 0.05 < sizes["Metres"]["hand_l"] < 0.2                          # a few centimetres: clickable
    before = len(bpy.data.objects)
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}             # again: the set is replaced
    assert len(bpy.data.objects) == before
    assert sum(o.get("neural_ik_effectors") == "Metres" for o in bpy.data.objects) == 1
    root = s.effector_root
    hand = [c for c in root.children if c["neural_ik_effector"] == "hand_l"][0]
    hand.keyframe_insert("location", frame=1)                            # keyed: the animator's work
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    assert s.effector_root == root and hand.name in bpy.data.objects and len(bpy.data.objects) == before
    capfd.readouterr()
    s.target = cm                                                         # Metres' effectors on Centi
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    out = capfd.readouterr()
    assert "were added for 'Metres', not for the target 'Centi'" in out.out + out.err


def test_solve_frame_outside_the_clip_says_so(ext, bake, sk, exact_solver, tmp_path, capfd):
    solver, kp = exact_solver
    _import_clip(sk, kp, tmp_path)
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    bpy.context.scene.neural_ik.target = obj
    solver.local_rot, solver.root_pos = solver.local_rot[:1], solver.root_pos[:1]
    start = bpy.context.scene.neural_ik.keypoint_object["frame_start"]
    bpy.context.scene.frame_set(start)
    capfd.readouterr()
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    assert "outside the keypoints' frames" not in capfd.readouterr().out
    bpy.context.scene.frame_set(start + 500)
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    assert f"frame {start + 500} is outside the keypoints' frames" in capfd.readouterr().out


def test_panels_registered(ext):
    for name in ("VIEW3D_PT_neural_ik_target", "VIEW3D_PT_neural_ik_mapping", "VIEW3D_PT_neural_ik_input",
                 "VIEW3D_PT_neural_ik_bake", "VIEW3D_PT_neural_ik_device"):
        assert hasattr(bpy.types, name), name
    assert hasattr(bpy.types.Scene, "neural_ik") and hasattr(bpy.types.Object, "neural_ik_mapping")


class SlowSolver(ExactSolver):
    """Reports progress batch by batch, slowly, like the real solver on a long clip."""

    def solve(self, keypoints, mask=None, *, batch_size=4096, progress=None, **kw):
        import time
        T = len(keypoints)
        for done in range(0, T, batch_size):
            time.sleep(0.02)
            if progress is not None:
                progress(min(done + batch_size, T), T)
        return super().solve(keypoints, mask, **kw)


def test_modal_runner_threads_and_cancel(ext, bake, sk, rnp):
    """The modal bake's worker: solve in a thread, write on the main thread; cancel writes nothing."""
    import time
    ops = importlib.import_module(ext.__name__ + ".operators.solve")
    local, root, kp = motion(sk, rnp, T=40)
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    before = _counts()
    job = bake.BakeJob(obj, kp, None, 24.0, bake.BakeOptions(fps=24.0), source_name="threaded",
                       solver=SlowSolver(local, root, sk.CANONICAL))
    runner = ops.BakeRunner(job, batch_size=4)
    runner.start()
    seen = []
    while not runner.done:
        seen.append(runner.progress)
        time.sleep(0.005)
    assert _counts() == before                    # nothing written by the worker
    assert len(set(seen)) > 3 and max(seen) <= 0.9
    result = runner.finish()
    assert result.action.name == "threaded" and obj.animation_data.action == result.action
    # cancelled: BakeCancelled from finish(), nothing written
    before = _counts()
    job = bake.BakeJob(obj, kp, None, 24.0, bake.BakeOptions(fps=24.0), source_name="cancelled",
                       solver=SlowSolver(local, root, sk.CANONICAL))
    runner = ops.BakeRunner(job, batch_size=2)
    runner.start()
    time.sleep(0.05)
    runner.cancel()
    with pytest.raises(bake.BakeCancelled):
        runner.finish()
    assert _counts() == before and obj.animation_data.action == result.action


def test_bake_from_effectors(ext, bake, sk, exact_solver):
    solver, kp = exact_solver
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    scene = bpy.context.scene
    scene.neural_ik.target = obj
    _select(obj)
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    hand = next(c for c in scene.neural_ik.effector_root.children if c["neural_ik_effector"] == "hand_l")
    hand.keyframe_insert("location", frame=1)
    hand.location.x += 0.2
    hand.keyframe_insert("location", frame=5)
    scene.frame_start, scene.frame_end = 1, 5
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    got = solver.calls[-1]["keypoints"]
    assert got.shape == (5, 32, 3)
    x = got[:, sk.keypoint_index("hand_l"), 0]
    assert x[-1] - x[0] == pytest.approx(0.2, abs=1e-5) and np.isnan(got[:, sk.keypoint_index("thumb_l")]).all()
    assert obj.animation_data.action.name == scene.neural_ik.effector_root.name


_Layout = RecordingLayout


def test_panels_draw(ext, bake, sk, rnp, tmp_path):
    from types import SimpleNamespace
    panels = importlib.import_module(ext.__name__ + ".panels.main")
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo", spine=2), name="Hero")
    _local, _root, kp = motion(sk, rnp, T=5)
    logs = {}

    def draw_all():
        for cls in panels.classes:
            log = []
            cls.draw(SimpleNamespace(layout=_Layout(log)), bpy.context)
            logs[cls.__name__] = log

    draw_all()                                   # nothing chosen yet
    bpy.context.scene.neural_ik.target = obj
    _auto_map(obj)
    _import_clip(sk, kp, tmp_path, "clip")
    draw_all()
    labels = [t for kind, t in logs["VIEW3D_PT_neural_ik_target"] if kind == "label"]
    assert "21 of 22 joints mapped" in labels and any("spine2" in t for t in labels)
    assert sum(k == "prop_search" for k, _ in logs["VIEW3D_PT_neural_ik_mapping"]) == 22
    assert ("operator", "neural_ik.bake") in logs["VIEW3D_PT_neural_ik_bake"]
    assert ("operator", "neural_ik.import_keypoints") in logs["VIEW3D_PT_neural_ik_input"]
    bpy.context.scene.neural_ik.source = 'EFFECTORS'
    draw_all()
    assert ("operator", "neural_ik.live_solve") in logs["VIEW3D_PT_neural_ik_input"]


def test_bake_respects_edited_empties_and_keeps_gaps_masked(ext, bake, sk, exact_solver, tmp_path):
    """Solve/bake read the keypoint object: a moved key reaches the solver; a long gap
    of the source stays missing (the fcurves would otherwise invent points across it)."""
    solver, kp = exact_solver
    kp = kp.copy()
    tip = sk.KEYPOINTS.index("hand_tip_l")
    kp[4:12, tip] = np.nan                        # 8 frames: longer than the readers fill
    _import_clip(sk, kp, tmp_path)
    root = bpy.context.scene.neural_ik.keypoint_object
    kpo = importlib.import_module(ext.__name__ + ".blender_io.keypoint_objects")
    pos, names, _fps, _layout = kpo.read_keypoint_object(root)
    assert np.isnan(pos[4:12, tip]).all() and np.isfinite(pos[:4, tip]).all() and np.isfinite(pos[12:, tip]).all()
    # the animator keys the missing tip on one frame and drags the left hand on another
    start = int(root["frame_start"])
    tip_empty = next(c for c in root.children if c.get("neural_ik_joint") == "hand_tip_l")
    tip_empty.location = (0.5, 0.0, 1.2)
    tip_empty.keyframe_insert("location", frame=start + 6)
    hand = next(c for c in root.children if c.get("neural_ik_joint") == "hand_l")
    hand.location = (0.7, -0.1, 1.0)
    hand.keyframe_insert("location", frame=start + 2)
    pos, _n, _f, _l = kpo.read_keypoint_object(root)
    np.testing.assert_allclose(pos[6, tip], (0.5, 0.0, 1.2), atol=1e-6)
    assert np.isnan(pos[[4, 5, 7, 8, 9, 10, 11], tip]).all()
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo"), name="Hero")
    bpy.context.scene.neural_ik.target = obj
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    seen = solver.calls[-1]["keypoints"]
    np.testing.assert_allclose(seen[2, sk.KEYPOINTS.index("hand_l")], (0.7, -0.1, 1.0), atol=1e-5)
    np.testing.assert_allclose(seen[6, tip], (0.5, 0.0, 1.2), atol=1e-5)
    assert np.isnan(seen[8, tip]).all()


def test_thinned_keys_read_as_keys_and_curve_in_between(ext, sk, exact_solver, tmp_path):
    """Frames with a key read the key; frames whose key was deleted read the fcurve there."""
    _solver, kp = exact_solver
    _import_clip(sk, kp, tmp_path)
    root = bpy.context.scene.neural_ik.keypoint_object
    kpo = importlib.import_module(ext.__name__ + ".blender_io.keypoint_objects")
    actions = importlib.import_module(ext.__name__ + ".blender_io.actions")
    before, names, _fps, _layout = kpo.read_keypoint_object(root)
    hand = next(c for c in root.children if c.get("neural_ik_joint") == "hand_l")
    start = int(root["frame_start"])
    curves = sorted((fc for fc in actions.action_fcurves(hand.animation_data.action, hand)
                     if fc.data_path == "location"), key=lambda fc: fc.array_index)
    for fc in curves:
        for k in [k for k in fc.keyframe_points if start + 3 <= k.co[0] <= start + 5][::-1]:
            fc.keyframe_points.remove(k)
        fc.update()
    after, _n, _f, _l = kpo.read_keypoint_object(root)
    j = names.index("hand_l")
    m = np.array(root.matrix_world)
    local = np.array([[fc.evaluate(start + t) for fc in curves] for t in (3, 4, 5)])
    np.testing.assert_allclose(after[3:6, j], local @ m[:3, :3].T + m[:3, 3], atol=1e-6)
    keep = [t for t in range(len(after)) if t not in (3, 4, 5)]
    np.testing.assert_array_equal(after[keep], before[keep])
    assert not np.allclose(after[3:6, j], before[3:6, j])
