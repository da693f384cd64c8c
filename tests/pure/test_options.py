"""Options declared once (``pipeline/options.py``) and messages worded by each front end (``errors.py``).

- The command line's flags take their choices, defaults and help from the declarations; ``BakeOptions``
  has the declared defaults; the smoothing methods are listed once (the filters' own list).
- A message names a setting by its option name; the command line words it as the flag.
"""

import dataclasses
import pickle
from pathlib import Path

import pytest
from _pkg import pkg

pkg()
from neural_ik import errors  # noqa: E402
from neural_ik.cli import parser as cli_parser  # noqa: E402
from neural_ik.cli.errors import CliError, UsageError, exit_code, say  # noqa: E402
from neural_ik.pipeline import options  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _bake_actions():
    bake = cli_parser.build_parser()._subparsers._group_actions[0].choices["bake"]
    return {a.option_strings[0]: a for a in bake._actions if a.option_strings}


@pytest.mark.parametrize("setting", options.BAKE_SETTINGS, ids=lambda s: s.name)
def test_cli_bake_flags_are_the_declarations(setting):
    actions = _bake_actions()
    if setting.name == "ground":   # (the command line grounds as it reads: the source's Ground)
        setting = options.find_setting("ground")
        assert setting.default is True
    action = actions[setting.flag]
    assert action.default == setting.default
    assert action.help.startswith(setting.help)
    if setting.choices:
        assert tuple(action.choices) == setting.values


@pytest.mark.parametrize("name", ["units", "up_axis", "layout", "source_fps", "image_size"])
def test_cli_source_flags_are_the_declarations(name):
    setting = options.find_setting(name)
    action = _bake_actions()[setting.flag]
    assert action.default == setting.default is None and action.help.startswith(setting.help)
    if setting.choices:
        assert tuple(action.choices) == setting.values


def test_target_flags_take_the_declared_units_and_axes():
    actions = _bake_actions()
    assert tuple(actions["--target-units"].choices) == tuple(c.value for c in options.UNIT_CHOICES)
    assert tuple(actions["--target-up-axis"].choices) == tuple(c.value for c in options.UP_AXIS_CHOICES)


def test_bake_options_defaults_are_the_declarations():
    fields = {f.name: f.default for f in dataclasses.fields(options.BakeOptions)}
    for setting in options.BAKE_SETTINGS:
        assert fields[setting.name] == setting.default, setting.name


def test_declared_units_are_the_readers():
    from neural_ik.readers.units import UNITS, UP_AXES

    assert {c.value for c in options.UNIT_CHOICES} == set(UNITS)
    assert {c.value for c in options.UP_AXIS_CHOICES} == set(UP_AXES)


def test_smoothing_methods_are_listed_once():
    from neural_ik.retarget.smoothing import METHODS

    assert options.SMOOTH_METHODS == METHODS
    listed = [str(p.relative_to(REPO)) for p in REPO.rglob("*.py")
              if ".venv" not in str(p) and "tests" not in p.parts
              and '"oneeuro", "savgol"' in p.read_text(encoding="utf-8")]
    assert listed == ["retarget/smoothing.py"]


@pytest.mark.parametrize("setting", list(options.SETTINGS.values()), ids=lambda s: s.name)
def test_the_command_lines_wording_is_the_declared_flag(setting):
    assert errors.flag_word(setting.name) == setting.flag
    assert setting.label and (setting.help or setting.where == "the command line")


def test_a_message_names_a_setting_and_each_front_end_words_it():
    text = errors.message(f"the body is 0.1 m tall: pass {errors.setting('units', 'cm')}")
    assert isinstance(text, errors.Message)
    assert text == "the body is 0.1 m tall: pass --units cm" == say(text)
    assert errors.worded(text, lambda name, value: f"<{name}:{value}>") == "the body is 0.1 m tall: pass <units:cm>"
    assert errors.settings_named(text) == ["units"]
    assert errors.message("no setting named") == "no setting named"
    assert say(errors.message(f"({errors.setting('ground', False)} keeps the heights)")) == \
        "(--no-ground keeps the heights)"
    copy = pickle.loads(pickle.dumps(text))   # (a worker's report row goes down a pipe)
    assert copy == text and errors.worded(copy, lambda n, v: n) == "the body is 0.1 m tall: pass units"


def test_errors_keep_their_setting_and_their_classes():
    from neural_ik.readers import KeypointReadError

    ex = KeypointReadError("a.npz", f"implausible body size; pass {errors.setting('units')}")
    assert str(ex) == "a.npz: implausible body size; pass --units"
    assert ex.setting == "units" and ex.problem == "implausible body size; pass --units"
    assert isinstance(ex, errors.UserError) and isinstance(ex, ValueError)
    assert isinstance(options.BakeError("x"), (errors.UserError, ValueError))
    assert exit_code(errors.UserError("x")) == 1 and exit_code(errors.SettingError("x")) == 2
    assert exit_code(UsageError("x")) == 2 and exit_code(CliError("x", 2)) == 2 and exit_code(CliError("x")) == 1
    assert isinstance(UsageError("x"), errors.SettingError)
    wrapped = errors.UserError(f"rig.bvh: {errors.template_of(ex)}")   # (a message built around another)
    assert wrapped.setting == "units" and str(wrapped) == "rig.bvh: a.npz: implausible body size; pass --units"


def test_a_reader_warning_names_its_setting():
    import numpy as np

    from neural_ik.readers.base import finish_clip
    from neural_ik.readers.layouts import get_layout

    from neural_ik.model.skeleton import JOINTS, keypoints_from_fk_np

    lay = get_layout("canonical")
    rot = np.broadcast_to(np.eye(3), (5, len(JOINTS), 3, 3)).copy()   # (the rest pose, five frames)
    pts = keypoints_from_fk_np(rot, np.tile([0.0, 0.0, 0.95], (5, 1)))
    clip = finish_clip("walk.npz", pts, list(lay.joint_names), layout=lay, units="m", up_axis="Z")
    named = [w for w in clip.warnings if errors.settings_named(w)]
    assert any(errors.settings_named(w) == ["source_fps"] and "--source-fps" in w for w in named), clip.warnings
