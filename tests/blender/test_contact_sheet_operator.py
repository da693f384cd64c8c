"""Render Contact Sheet (``neural_ik.render_contact_sheet``): the CLI's ``--preview`` sheet from the sidebar.

A clip baked with the operators onto Rigify's meta-rig (built from ``tests/data``, the stub solver of
``test_bake``), then the sheet rendered through ``bpy.ops``: a PNG of six tiles, the recorded input in
orange on each tile's left, the rig in blue on its right, and the open file exactly as it was.
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
from ui_layout import RecordingLayout  # noqa: E402
from test_operators import _import_clip, exact_solver  # noqa: E402,F401  (a fixture)

TILE_W, TILE_H = 320, 240
DATA = ("objects", "meshes", "curves", "cameras", "worlds", "materials", "images", "fonts", "scenes",
        "collections", "actions", "armatures", "lights", "texts")


def _mod(ext, name):
    return importlib.import_module(ext.__name__ + "." + name)


def _state():
    """What the operator must leave as it was: data-block counts, frame, active, selection, render settings."""
    scene = bpy.context.scene
    r = scene.render
    return {
        "counts": {kind: len(getattr(bpy.data, kind)) for kind in DATA},
        "names": sorted(o.name for o in bpy.data.objects),
        "frame": (scene.frame_current, scene.frame_subframe),
        "active": getattr(bpy.context.view_layer.objects.active, "name", None),
        "selected": sorted(o.name for o in scene.objects if o.select_get()),
        "render": (r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage, r.filepath,
                   r.image_settings.file_format, r.film_transparent, getattr(scene.camera, "name", None)),
        "window_scene": bpy.context.window.scene.name if bpy.context.window else scene.name,
    }


def _baked_metarig(sk, kp, tmp_path):
    _import_clip(sk, kp, tmp_path)
    obj = rigs.build_blender_armature(rigs.rigify_metarig_description(), name="metarig")
    scene = bpy.context.scene
    scene.neural_ik.target = obj
    scene.frame_start = 1
    assert bpy.ops.neural_ik.bake() == {'FINISHED'}, scene.neural_ik.status
    return obj


def _figures(img):
    """Per tile: (orange pixels on its left half, blue pixels on its right half)."""
    out = []
    for r in range(img.shape[0] // TILE_H):
        for c in range(img.shape[1] // TILE_W):
            tile = img[r * TILE_H:(r + 1) * TILE_H, c * TILE_W:(c + 1) * TILE_W].astype(int)
            orange = (tile[..., 0] > 150) & (tile[..., 2] < 100)
            blue = (tile[..., 2] > 150) & (tile[..., 0] < 100)
            out.append((int(orange[:, :TILE_W // 2].sum()), int(blue[:, TILE_W // 2:].sum()),
                        int(orange.sum()), int(blue.sum())))
    return out


def test_sheet_of_a_bake_leaves_the_file_as_it_was(ext, sk, exact_solver, tmp_path):  # noqa: F811
    _solver, kp = exact_solver
    obj = _baked_metarig(sk, kp, tmp_path)
    action = obj.animation_data.action
    assert action["neural_ik_source"] == "walk"            # the bake recorded its input
    scene = bpy.context.scene
    scene.frame_set(7)
    for o in scene.objects:
        o.select_set(o.name == "walk")
    bpy.context.view_layer.objects.active = scene.objects["walk"]
    before = _state()
    path = tmp_path / "sheet.png"
    assert bpy.ops.neural_ik.render_contact_sheet(filepath=str(path)) == {'FINISHED'}
    assert _state() == before
    sheet = _mod(ext, "blender_io.contact_sheet")
    img = sheet.read_png(str(path))
    assert img.shape == (2 * TILE_H, 3 * TILE_W, 3)
    assert img.std() > 10 and len(np.unique(img.reshape(-1, 3), axis=0)) > 50     # not blank
    for i, (orange_left, blue_right, _o, _b) in enumerate(_figures(img)):
        assert orange_left > 100 and blue_right > 100, (i, orange_left, blue_right)


def test_sheet_without_a_recorded_input_shows_the_rig(ext, sk, exact_solver, tmp_path):  # noqa: F811
    _solver, kp = exact_solver
    obj = _baked_metarig(sk, kp, tmp_path)
    del obj.animation_data.action["neural_ik_source"]      # (an action keyed by hand, or an older bake)
    path = tmp_path / "rig.png"
    assert bpy.ops.neural_ik.render_contact_sheet(filepath=str(path), frames=2) == {'FINISHED'}
    img = _mod(ext, "blender_io.contact_sheet").read_png(str(path))
    assert img.shape == (TILE_H, 2 * TILE_W, 3)
    for _ol, _br, orange, blue in _figures(img):
        assert orange == 0 and blue > 100


def test_sheet_errors_write_nothing(ext, tmp_path):
    path = tmp_path / "sheet.png"
    with pytest.raises(RuntimeError, match="no armature"):
        bpy.ops.neural_ik.render_contact_sheet(filepath=str(path))
    obj = rigs.build_blender_armature(rigs.rigify_metarig_description(), name="metarig")
    bpy.context.scene.neural_ik.target = obj
    before = _state()
    with pytest.raises(RuntimeError, match="'metarig' has no baked action: Bake first"):
        bpy.ops.neural_ik.render_contact_sheet(filepath=str(path))
    obj.animation_data_create().action = bpy.data.actions.new("empty")
    obj.animation_data.action = None
    with pytest.raises(RuntimeError, match="no baked action"):
        bpy.ops.neural_ik.render_contact_sheet(filepath=str(path))
    obj.animation_data.action = bpy.data.actions["empty"]
    with pytest.raises(RuntimeError, match="does not exist"):
        bpy.ops.neural_ik.render_contact_sheet(filepath=str(tmp_path / "gone" / "sheet.png"))
    with pytest.raises(RuntimeError, match="is a PNG"):
        bpy.ops.neural_ik.render_contact_sheet(filepath=str(tmp_path / "sheet.jpg"))
    assert not list(tmp_path.iterdir())
    assert _state()["counts"]["objects"] == before["counts"]["objects"]


def test_button_after_a_bake_and_default_path(ext, sk, exact_solver, tmp_path):  # noqa: F811
    _solver, kp = exact_solver
    panels = _mod(ext, "panels.main")
    ops = _mod(ext, "operators.contact_sheet")

    def bake_panel():
        log = []
        panels.VIEW3D_PT_neural_ik_bake.draw(SimpleNamespace(layout=RecordingLayout(log)), bpy.context)
        return log

    obj = rigs.build_blender_armature(rigs.rigify_metarig_description(), name="metarig")
    bpy.context.scene.neural_ik.target = obj
    assert ("operator", "neural_ik.render_contact_sheet") not in bake_panel()     # nothing baked yet
    obj = _baked_metarig(sk, kp, tmp_path)
    assert ("operator", "neural_ik.render_contact_sheet") in bake_panel()
    import tempfile
    assert ops.default_path(obj.animation_data.action) == str(pathlib.Path(tempfile.gettempdir())
                                                              / "walk_contact_sheet.png")  # (unsaved file)
    table = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "ui-and-cli.md").read_text()
    label = bpy.ops.neural_ik.render_contact_sheet.get_rna_type().name
    assert f"| {label}... | `--preview OUT.png` |" in table        # one name with the command line's flag


def test_sheet_of_a_bake_into_an_nla_strip(ext, sk, exact_solver, tmp_path):  # noqa: F811
    """Bake Into: NLA Strip leaves no active action: the sheet draws the strip's frames."""
    _solver, kp = exact_solver
    bpy.context.scene.neural_ik.bake_into = 'NLA'
    obj = _baked_metarig(sk, kp, tmp_path)
    assert obj.animation_data.action is None
    ops = _mod(ext, "operators.contact_sheet")
    action, first, last = ops.baked_clip(obj)
    assert (action.name, first, last) == ("walk", 1, 20)
    path = tmp_path / "strip.png"
    assert bpy.ops.neural_ik.render_contact_sheet(filepath=str(path), frames=2) == {'FINISHED'}
    (_ol, _br, orange, blue), (_ol2, _br2, orange2, blue2) = _figures(
        _mod(ext, "blender_io.contact_sheet").read_png(str(path)))
    assert min(orange, blue, orange2, blue2) > 100
    obj.animation_data.nla_tracks[-1].mute = True        # (the strip muted: nothing baked plays)
    assert ops.baked_clip(obj) is None
