"""UI papercuts (issue 13, item 11), with the real ``bpy``: what the sidebar and the preferences draw,
what they import, and what happens without (or with a broken) PyTorch.

The import checks run in a fresh Blender Python (``ui_probe`` below): the test
process imported torch long ago.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

TESTS = pathlib.Path(__file__).resolve().parent.parent

_PROBE = textwrap.dedent(r"""
    import json, os, sys, tempfile
    from types import SimpleNamespace
    zip_path, tests_dir, broken_torch = sys.argv[1], sys.argv[2], sys.argv[3]
    user = tempfile.mkdtemp(prefix="neural_ik_probe_")
    os.environ["BLENDER_USER_RESOURCES"] = user
    for kind in ("CONFIG", "SCRIPTS", "DATAFILES", "EXTENSIONS"):
        os.environ["BLENDER_USER_" + kind] = os.path.join(user, kind.lower())
    if broken_torch:
        sys.path.insert(0, broken_torch)
    import bpy
    sys.path.insert(0, tests_dir)
    from ui_layout import RecordingLayout

    out = {}
    assert bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                    enable_on_install=True) == {'FINISHED'}
    name = "bl_ext.user_default.neural_ik"
    package = sys.modules[name]
    out["missing_reason"] = package.missing_reason
    out["torch_after_enable"] = "torch" in sys.modules

    def draw_everything():
        log = []
        ctx = bpy.context
        for cls in bpy.types.Panel.__subclasses__():
            if cls.__module__.startswith(name) and getattr(cls, "is_registered", False):
                if not hasattr(cls, "poll") or cls.poll(ctx):
                    cls.draw(SimpleNamespace(layout=RecordingLayout(log)), ctx)
        prefs = ctx.preferences.addons[name].preferences
        class Prefs:  # the preferences with a recording layout
            layout = RecordingLayout(log)
            def __getattr__(self, attr):
                return getattr(prefs, attr)
        type(prefs).draw(Prefs(), ctx)
        for op in dir(bpy.ops.neural_ik):
            getattr(bpy.ops.neural_ik, op).poll()
        return log

    log = draw_everything()
    out["labels"] = [e[1] for e in log if e[0] == "label"]
    out["buttons"] = [e[1] for e in log if e[0] == "operator_text"]
    out["panels"] = sorted(c.__name__ for c in bpy.types.Panel.__subclasses__()
                           if c.__module__.startswith(name) and getattr(c, "is_registered", False))
    out["torch_after_draw"] = "torch" in sys.modules
    out["scipy_after_draw"] = "scipy" in sys.modules

    cache = sys.modules.get(name + ".pipeline.cache") or __import__(name + ".pipeline.cache", fromlist=["x"])
    skeleton = sys.modules.get(name + ".model.skeleton") or __import__(name + ".model.skeleton", fromlist=["x"])
    try:
        # (two frames with bfloat16 layers: a solve that runs in torch)
        cache.solve(cache.get_solver("cpu", precision="bfloat16"), [skeleton.CANONICAL.rest_keypoints()] * 2)
        out["solver_error"] = ""
    except Exception as ex:
        out["solver_error"] = "{}: {}".format(type(ex).__name__, ex)
    log = draw_everything()
    out["labels_after_solve"] = [e[1] for e in log if e[0] == "label"]
    out["buttons_after_solve"] = [e[1] for e in log if e[0] == "operator_text"]

    command = sys.modules[name + ".cli.blender_command"]
    out["cli_registered"] = command.is_registered()
    out["cli_info"] = command.execute(["info"])
    out["cli_bake"] = command.execute(["bake", "walk.npz", "--target", "rigify"])
    print("PROBE " + json.dumps(out))
""")


def _probe(ext_zip, tmp_path, broken_torch=False):
    fake = ""
    if broken_torch:  # found by find_spec, fails on import like a wheel missing its CUDA libraries
        pkg = tmp_path / "broken" / "torch"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(
            'raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or directory")\n')
        fake = str(tmp_path / "broken")
    result = subprocess.run([sys.executable, "-c", _PROBE, str(ext_zip), str(TESTS), fake],
                            capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(lines[-1][len("PROBE "):]), result


def test_drawing_the_tab_and_preferences_imports_no_torch(ext_zip, tmp_path):
    out, _ = _probe(ext_zip, tmp_path)
    assert out["missing_reason"] == ""
    assert "VIEW3D_PT_neural_ik" in out["panels"] and "VIEW3D_PT_neural_ik_bake" in out["panels"]
    assert not out["torch_after_enable"]
    assert not out["torch_after_draw"], "a draw or poll imported torch"
    assert not out["scipy_after_draw"], "a draw or poll imported scipy"
    assert any("loads when a solve needs it" in text for text in out["labels"]), out["labels"]
    # the first solve imports it; then the status names the device
    assert out["solver_error"] == ""
    assert any(text.startswith("torch ") and "device: cpu" in text for text in out["labels_after_solve"])


def test_broken_torch_gives_a_status_line_not_a_traceback(ext_zip, tmp_path):
    out, result = _probe(ext_zip, tmp_path, broken_torch=True)
    assert "Traceback" not in result.stdout + result.stderr
    assert out["solver_error"].startswith("BakeError: PyTorch is installed but does not load: ImportError: "
                                          "libcudnn.so.9"), out["solver_error"]
    status = [t for t in out["labels_after_solve"] if "does not load" in t]
    assert status and "libcudnn.so.9: cannot open shared object file" in status[0], out["labels_after_solve"]
    # the preferences offer the reinstall
    assert any(text.startswith("Install PyTorch") for text in out["buttons_after_solve"]), out["buttons_after_solve"]
    assert out["cli_info"] == 0 and out["cli_bake"] == 1
    assert "does not load" in result.stderr and "Install PyTorch" in result.stderr


# --------------------------------------------------------------------------
# in this process: the installed extension, the real bpy

import importlib  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import bpy  # noqa: E402

import rigs  # noqa: E402
from ui_layout import RecordingLayout  # noqa: E402


def _draw(ext, panel_name):
    panels = importlib.import_module(ext.__name__ + ".panels.main")
    log = []
    getattr(panels, panel_name).draw(SimpleNamespace(layout=RecordingLayout(log)), bpy.context)
    return log


def _mapped_rig(ext, name="Hero", **kwargs):
    obj = rigs.build_blender_armature(rigs.humanoid("mixamo", **kwargs), name=name)
    bpy.context.scene.neural_ik.target = obj
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.neural_ik.auto_map() == {'FINISHED'}
    return obj


def test_target_tick_means_a_bake_can_run(ext):
    bake = importlib.import_module(ext.__name__ + ".blender_io.bake")
    rig = importlib.import_module(ext.__name__ + ".blender_io.rig")
    obj = _mapped_rig(ext, spine=2)                       # 21 of 22: spine2 folds into the chest
    icons = [e[1] for e in _draw(ext, "VIEW3D_PT_neural_ik_target") if e[0] == "label_icon"]
    assert ("21 of 22 joints mapped", 'CHECKMARK') in icons
    for item in obj.neural_ik_mapping:                    # still 20 joints, but no left hand
        if item.joint == "hand_l":
            item.bone = ""
    log = _draw(ext, "VIEW3D_PT_neural_ik_target")
    assert ("20 of 22 joints mapped", "ERROR") in [e[1] for e in log if e[0] == "label_icon"]
    shown = " ".join(e[1] for e in log if e[0] == "label")
    with pytest.raises(bake.BakeError) as caught:         # the very check the bake makes
        bake.resolve_mapping(obj, rig.rig_description(obj))
    assert "Cannot bake: " in shown and "hand_l" in str(caught.value) and "hand_l" in shown


def test_status_wraps_at_words(ext):
    s = bpy.context.scene.neural_ik
    s.status = ("Baked 120 frames into 'walk_with_a_long_name': feet +0.3 cm from the floor, effectors within "
                "0.4 mm, bone directions 2.1°, knees backwards on 3 frames")
    labels = [e[1] for e in _draw(ext, "VIEW3D_PT_neural_ik_bake") if e[0] == "label"]
    shown = [t for t in labels if t and t in s.status]
    assert len(shown) > 1 and " ".join(shown) == s.status   # every word whole, nothing dropped
    assert all(not t.startswith(" ") and not t.endswith(" ") for t in shown)


def test_rigify_missing_is_reported(ext, monkeypatch):
    import addon_utils

    targets = importlib.import_module(ext.__name__ + ".blender_io.targets")
    errors = importlib.import_module(ext.__name__ + ".errors")
    assert targets.enable_rigify() == ""
    addon_utils.disable("rigify", default_set=True)
    try:
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, "rigify", None)      # a Blender without Rigify
            assert "Rigify add-on is not available" in targets.enable_rigify()
            with pytest.raises(errors.UserError, match="--target rigify: Blender's Rigify add-on is not available"):
                targets.load_target("rigify")
    finally:
        addon_utils.enable("rigify", default_set=True)
    assert targets.enable_rigify() == ""


def _hand_matrix(obj):
    bpy.context.view_layer.update()
    import numpy as np
    return np.array(obj.pose.bones["mixamorig:LeftHand"].matrix)


def test_solve_frame_pose_survives_an_active_action(ext):
    """Auto Keying on: Solve Frame keys the pose; off: a warning, and Key Pose keeps it."""
    import numpy as np

    pose_keys = importlib.import_module(ext.__name__ + ".operators.pose_keys")
    scene = bpy.context.scene
    obj = _mapped_rig(ext)
    pose_keys.key_pose(obj, 1, bones=[pb.name for pb in obj.pose.bones])   # an action keying every bone at rest
    action = obj.animation_data.action
    scene.frame_set(1)
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    hand = next(c for c in scene.neural_ik.effector_root.children if c["neural_ik_effector"] == "hand_l")
    hand.location.z += 0.25                                                 # raise the left hand
    rest = _hand_matrix(obj)

    scene.tool_settings.use_keyframe_insert_auto = True
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    solved = _hand_matrix(obj)
    assert not np.allclose(solved, rest, atol=1e-3)
    scene.frame_set(2)
    scene.frame_set(1)
    np.testing.assert_allclose(_hand_matrix(obj), solved, atol=1e-5)        # keyed: survives a frame change
    assert obj.animation_data.action == action                              # into the user's action

    scene.tool_settings.use_keyframe_insert_auto = False
    hand.location.z += 0.1
    assert bpy.ops.neural_ik.solve_frame() == {'FINISHED'}
    level, message = pose_keys.keep_solved_pose(bpy.context, obj)
    assert level == 'WARNING' and "will replace this pose" in message and "Key Pose" in message
    solved = _hand_matrix(obj)
    assert bpy.ops.neural_ik.key_pose() == {'FINISHED'}
    scene.frame_set(2)
    scene.frame_set(1)
    np.testing.assert_allclose(_hand_matrix(obj), solved, atol=1e-5)
    # the Solve & Bake panel offers Key Pose while an action is active
    assert ("operator", "neural_ik.key_pose") in _draw(ext, "VIEW3D_PT_neural_ik_bake")


def _clip30(ext, tmp_path, T=60):
    import numpy as np

    from test_bake import motion

    sk = importlib.import_module(ext.__name__ + ".model.skeleton")
    rnp = importlib.import_module(ext.__name__ + ".model.rotations_np")
    _local, _root, kp = motion(sk, rnp, T=T)
    path = tmp_path / "walk30.npz"
    np.savez(path, positions=kp, joint_names=np.array(sk.KEYPOINTS), fps=30.0, units="m", up_axis="Z")
    return path


def _key_frames(root):
    """(first, last, count) of the keyed frames of a keypoint object's first empty."""
    return _baked_frames(root.children[0])


def _baked_frames(obj):
    """(first, last, count) of the frames keyed in ``obj``'s action."""
    import numpy as np
    frames = set()
    for fc in _fcurves(obj):
        co = np.empty(len(fc.keyframe_points) * 2)
        fc.keyframe_points.foreach_get("co", co)
        frames |= set(np.round(co[0::2], 4).tolist())
    return min(frames), max(frames), len(frames)


def _fcurves(obj):
    action = obj.animation_data.action
    if not hasattr(action, "layers"):
        return list(action.fcurves)
    slot = obj.animation_data.action_slot
    return [fc for layer in action.layers for strip in layer.strips for bag in strip.channelbags
            if bag.slot == slot for fc in bag.fcurves]


def test_30fps_clip_into_untouched_24fps_scene_sets_the_scene(ext, tmp_path):
    scene = bpy.context.scene
    assert scene.render.fps == 24 and (scene.frame_start, scene.frame_end) == (1, 250)
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(_clip30(ext, tmp_path)), ground=False) == {'FINISHED'}
    assert (scene.render.fps, scene.render.fps_base) == (30, 1.0)
    assert (scene.frame_start, scene.frame_end) == (1, 60)
    root = scene.neural_ik.keypoint_object
    assert _key_frames(root) == (1, 60, 60)
    obj = _mapped_rig(ext)
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    assert _baked_frames(obj) == (1, 60, 60)          # the bake covers the empties' frames


def test_30fps_clip_into_a_24fps_scene_in_use_is_resampled(ext, tmp_path):
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 10, 200
    s = scene.neural_ik
    # an explicit "no" (the scene keeps its rate); the clip lands from frame 10 at 24 fps
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(_clip30(ext, tmp_path)), ground=False,
                                              set_scene_frames=False, frame_start=10) == {'FINISHED'}
    assert scene.render.fps == 24 and (scene.frame_start, scene.frame_end) == (10, 200)
    root = s.keypoint_object
    assert root["fps"] == 24.0 and root["frame_count"] == 48   # 59 frames at 30 fps = 47 frame steps at 24
    assert _key_frames(root) == (10, 57, 48)
    obj = _mapped_rig(ext)
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    assert _baked_frames(obj) == (10, 57, 48)         # same frames as the empties
    # one Start Frame: a custom range in scene frames keys exactly those frames
    s.use_clip_range = False
    assert (s.frame_from, s.frame_to) == (10, 57)     # unticking keeps the whole clip
    s.frame_from, s.frame_to = 20, 29
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    assert _baked_frames(obj) == (20, 29, 10)
    s.frame_to = 58                                   # one past the clip: said in the panel and by the bake
    assert ("label_icon", ("Outside the input's frames 10-57", "ERROR")) in _draw(ext, "VIEW3D_PT_neural_ik_bake")
    with pytest.raises(RuntimeError, match="custom range 20-58 is outside the input's frames 10-57"):
        bpy.ops.neural_ik.bake()


def test_import_into_an_animated_scene_leaves_its_frames(ext, tmp_path):
    scene = bpy.context.scene
    cube = bpy.data.objects.new("Animated", None)
    scene.collection.objects.link(cube)
    cube.keyframe_insert("location", frame=1)
    assert bpy.ops.neural_ik.import_keypoints(filepath=str(_clip30(ext, tmp_path)), ground=False) == {'FINISHED'}
    assert scene.render.fps == 24 and (scene.frame_start, scene.frame_end) == (1, 250)
    assert scene.neural_ik.keypoint_object["fps"] == 24.0


def test_effector_bake_status_has_no_nan(ext):
    """Figures that do not apply to an effector bake are left out, never shown as "nan"."""
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 6
    obj = _mapped_rig(ext)
    assert bpy.ops.neural_ik.add_effectors() == {'FINISHED'}
    hand = next(c for c in scene.neural_ik.effector_root.children if c["neural_ik_effector"] == "hand_l")
    hand.keyframe_insert("location", frame=1)
    hand.location.z += 0.2
    hand.keyframe_insert("location", frame=6)
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}
    status = scene.neural_ik.status
    assert status.startswith("Baked 6 frames") and "nan" not in status.lower(), status
    assert obj.animation_data.action is not None


def test_every_menu_item_says_what_it_is(ext):
    """Enum settings of the tab and the import dialog: a readable name and a description each."""
    import bpy
    import importlib

    keypoints = importlib.import_module(ext.__name__ + ".operators.keypoints")
    owners = [(bpy.types.Scene.bl_rna.properties["neural_ik"].fixed_type, None),
              (bpy.ops.neural_ik.import_keypoints.get_rna_type(), {"units", "up_axis"})]      # (the dialog's own settings, not Blender's)
    checked = set()
    for rna, own in owners:
        for prop in rna.properties:
            if prop.type != 'ENUM' or prop.is_enum_flag or (own is not None and prop.identifier not in own):
                continue
            for item in prop.enum_items:
                assert item.description.strip(), (rna.identifier, prop.identifier, item.identifier)
                checked.add(prop.identifier)
    assert {"units", "up_axis", "mode", "smooth"} <= checked, checked
    items = keypoints._layout_items(None, bpy.context)
    assert all(label != ident for ident, label, _ in items[1:]), items   # names, not registry ids
    assert all(desc for _i, _l, desc in items)


#: (owner, property, CLI flag) of every setting both front ends have (docs/ui-and-cli.md).
UI_CLI = [("scene", p, f) for p, f in (("mode", "--mode"), ("refine", "--refine"), ("smooth", "--smooth"),
                                       ("smooth_strength", "--smooth-strength"),
                                       ("smooth_target", "--smooth-target"), ("rotation_mode", "--rotation-mode"),
                                       ("in_place", "--in-place"), ("ground", "--ground"),
                                       ("foot_lock", "--foot-lock"), ("scale", "--scale"))] + \
         [("import", p, f) for p, f in (("layout_name", "--layout"), ("units", "--units"), ("up_axis", "--up-axis"),
                                        ("fps", "--source-fps"), ("frame_start", "--frame-start"),
                                        ("ground", "--ground"))]


def test_ui_labels_are_the_cli_flags(ext):
    """The same name and the same default for a setting in the panels, the dialog and the CLI."""
    import bpy
    import importlib
    import pathlib

    parser = importlib.import_module(ext.__name__ + ".cli.parser").build_parser()
    bake = parser._subparsers._group_actions[0].choices["bake"]
    actions = {a.option_strings[0]: a for a in bake._actions if a.option_strings}
    owners = {"scene": bpy.types.Scene.bl_rna.properties["neural_ik"].fixed_type,
              "import": bpy.ops.neural_ik.import_keypoints.get_rna_type()}
    table = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "ui-and-cli.md").read_text()
    for owner, prop, flag in UI_CLI:
        p = owners[owner].properties[prop]
        assert p.name.lower().replace(" ", "-") == flag[2:], (prop, p.name, flag)
        assert f"| {p.name} |" in table and f"`{flag}`" in table, (prop, flag)
        default = actions[flag].default
        if (owner, prop) == ("scene", "ground"):   # (the documented exception: docs/ui-and-cli.md (a))
            assert p.default is False and owners["import"].properties["ground"].default is True
            continue
        if default is not None and flag not in ("--frame-start", "--units", "--up-axis", "--layout"):
            ui = p.default if p.type != 'ENUM' else p.default
            assert ui == default or str(ui).lower() == str(default).lower(), (prop, ui, default)
