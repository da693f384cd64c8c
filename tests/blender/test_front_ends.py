"""One declaration of each bake option, two front ends (issue 37), with the real ``bpy``.

- The sidebar's property group and the import dialog take their labels, tooltips, choices and defaults
  from ``pipeline/options.py``, as the command line's flags do.
- The UI words the settings a message names as their fields (``'Units' in the import options``),
  where the command line writes the flag.
- The import dialog reads with the one source dispatch: a JSON nested too deeply is a read error.
"""

import argparse
import importlib

import bpy
import pytest


def _mod(ext, name):
    return importlib.import_module(ext.__name__ + "." + name)


def test_scene_properties_are_the_declarations(ext):
    options = _mod(ext, "pipeline.options")
    props = bpy.types.Scene.bl_rna.properties["neural_ik"].fixed_type.properties
    for setting in options.BAKE_SETTINGS:
        p = props[setting.name]
        assert p.name == setting.label, setting.name
        assert p.description.rstrip(". ").startswith(setting.tooltip.rstrip(". ")), setting.name
        if setting.name == "scale":     # (None, automatic: the Auto Scale checkbox)
            assert props["auto_scale"].default is True
            continue
        assert p.default == setting.default, setting.name
        if setting.choices:
            assert [(i.identifier, i.name, i.description) for i in p.enum_items] == \
                [(c.value, c.label, c.help) for c in setting.choices], setting.name


def test_import_dialog_settings_are_the_declarations(ext):
    options = _mod(ext, "pipeline.options")
    props = bpy.ops.neural_ik.import_keypoints.get_rna_type().properties
    for name, prop in (("layout", "layout_name"), ("units", "units"), ("up_axis", "up_axis"),
                       ("source_fps", "fps"), ("ground", "ground")):
        setting = options.find_setting(name)
        assert props[prop].name == setting.label, name
        if setting.choices:
            items = [i.identifier for i in props[prop].enum_items]
            assert items == ["AUTO"] + list(setting.values), name
    assert props["ground"].default is options.find_setting("ground").default is True


def test_the_ui_words_a_setting_as_its_field(ext):
    errors = _mod(ext, "errors")
    wording = _mod(ext, "operators.wording")
    readers = _mod(ext, "readers")
    ex = readers.KeypointReadError("a.npz", f"absurd scale (pass {errors.setting('units', 'mm')})")
    assert str(ex) == "a.npz: absurd scale (pass --units mm)"                       # the command line's
    assert wording.ui_text(ex) == "a.npz: absurd scale (pass 'Units' mm in the import options)"
    warning = errors.message(f"grounded ({errors.setting('ground', False)} keeps the file's heights)")
    assert wording.ui_text(warning) == "grounded ('Ground' off in the import options keeps the file's heights)"
    bake = errors.message(f"check {errors.setting('scale')} and {errors.setting('layout', 'MAPPING.json')}")
    assert wording.ui_text(bake) == "check 'Scale' in the Solve & Bake panel and 'Layout' in the import options"
    assert wording.ui_text("plain text") == "plain text"


def test_import_of_deeply_nested_json_is_a_read_error(ext, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    keypoints = _mod(ext, "operators.keypoints")
    lines = keypoints.preview(str(path), wait=True)
    assert lines[0].startswith("Error: ") and "nested too deeply" in lines[0], lines
    with pytest.raises(RuntimeError, match="cannot import keypoints: .*deep.json: nested too deeply"):
        bpy.ops.neural_ik.import_keypoints(filepath=str(path))


def test_the_dialog_reads_through_the_one_dispatch(ext, tmp_path, monkeypatch):
    """A reader that recurses without end (any file type) is a read error in the dialog as on the command
    line: the dialog reads through ``blender_io.sources``, the CLI's dispatch and its guard."""
    sources = _mod(ext, "blender_io.sources")
    path = tmp_path / "walk.csv"
    path.write_text("x\n")

    def recurse(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sources, "read_keypoints", recurse)
    with pytest.raises(RuntimeError, match="cannot import keypoints: .*walk.csv: nested too deeply to be read"):
        bpy.ops.neural_ik.import_keypoints(filepath=str(path))
    cli_sources = _mod(ext, "cli.sources")
    with pytest.raises(_mod(ext, "readers").KeypointReadError, match="walk.csv: nested too deeply to be read"):
        cli_sources.read_source(str(path), argparse.Namespace())   # (the command line: the same dispatch)
    assert cli_sources.SOURCE_EXTENSIONS == sources.SOURCE_EXTENSIONS
