"""The extension as it ships: build, validate, install, register/unregister."""

import importlib
import re
import sys
import warnings
import zipfile
from types import SimpleNamespace

import addon_utils
import bpy
import pytest
from ui_layout import RecordingLayout

MODULE_NAME = "bl_ext.user_default.neural_ik"  # where tests/blender/conftest.py installs it

PANEL_IDNAMES = ["VIEW3D_PT_neural_ik"]
OPERATOR_IDNAMES = ["neural_ik.install_pytorch"]
PREFERENCES_IDNAME = "NeuralIKPreferences"


def _operator_registered(idname):
    category, name = idname.split(".")
    return hasattr(getattr(bpy.ops, category), name) and hasattr(bpy.types, "{}_OT_{}".format(category.upper(), name))


def _handler_lengths():
    return {
        name: len(getattr(bpy.app.handlers, name))
        for name in dir(bpy.app.handlers)
        if isinstance(getattr(bpy.app.handlers, name, None), list)
    }


def _all_classes(module):
    """Every class the add-on registers."""
    prefs = importlib.import_module(module.__name__ + ".preferences")
    classes = list(prefs.classes)
    for name in module._DEPENDENT_PACKAGES:
        classes += importlib.import_module(module.__name__ + "." + name).classes
    return classes


def _registered(classes):
    return {cls.__name__: cls.is_registered for cls in classes}


def _cli_name_taken(capfd):
    """Register a probe ``neural_ik`` command: Blender warns when the name is taken."""
    capfd.readouterr()
    probe = bpy.utils.register_cli_command("neural_ik", lambda argv: 0)
    bpy.utils.unregister_cli_command(probe)
    captured = capfd.readouterr()
    return "duplicate command" in captured.out + captured.err


def test_validate_repository(blender_ext, repo_root):
    result = blender_ext("validate", repo_root)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_zip(blender_ext, ext_zip):
    result = blender_ext("validate", ext_zip)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zip_contents(ext_zip):
    """The zip holds what runs in Blender: no tests, training, benchmarks or development files."""
    archive = zipfile.ZipFile(ext_zip)
    names = archive.namelist()
    assert "blender_manifest.toml" in names
    assert "__init__.py" in names
    assert any(name.startswith("weights/") for name in names), "weights/ must ship"
    for excluded in ("tests/", "training/", "benchmarks/", ".ci/", ".venv/", ".git/", "bench_out/", "out/",
                     "docs/", "tools/"):
        assert not any(name.startswith(excluded) for name in names), excluded
    for excluded in ("neural-ik", "setup.sh", "pytest.ini", "devpkg.py", "conftest.py"):
        assert excluded not in names, excluded
    base = [name.rsplit("/", 1)[-1] for name in names]
    assert not [n for n in base if n.startswith("test_") or n.startswith("bench_")], names
    assert not any(n in ("train.py", "dataset.py", "evaluate.py", "augment.py") for n in base), names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    # Dask is a batch-side extra (requirements.txt): no wheel of it, and only the --scheduler path imports it
    assert not [n for n in names if n.split("/")[-1].lower().startswith(("dask", "distributed"))], names
    imports_dask = re.compile(r"^(from|import)\s+(dask|distributed)\b", re.M)
    assert [n for n in names if n.endswith(".py") and imports_dask.search(archive.read(n).decode("utf-8"))] \
        == ["cli/cluster_task.py"]
    # what ships never imports what does not
    imports_dev = re.compile(r"^\s*(from|import)\s+(devpkg|training|benchmarks|tests|_pkg)\b", re.M)
    for name in names:
        if name.endswith(".py"):
            match = imports_dev.search(archive.read(name).decode("utf-8"))
            assert match is None, (name, match and match.group(0))


def test_installed_as_extension(ext):
    assert ext.__name__ == MODULE_NAME
    assert MODULE_NAME in bpy.context.preferences.addons
    assert addon_utils.check(MODULE_NAME)[1], "add-on not loaded"
    # Relative imports resolve inside the installed package.
    assert sys.modules[MODULE_NAME + ".device"].__file__.startswith(ext.__path__[0])


def test_operators_and_panels_found_by_idname(ext):
    assert ext.missing_reason == ""
    for idname in OPERATOR_IDNAMES:
        assert _operator_registered(idname), idname
    for idname in PANEL_IDNAMES:
        panel = getattr(bpy.types, idname)
        assert panel.bl_category == "Neural IK"
    assert bpy.context.preferences.addons[MODULE_NAME].preferences.bl_rna.identifier == PREFERENCES_IDNAME


def test_preferences_device_and_status(ext):
    prefs = bpy.context.preferences.addons[MODULE_NAME].preferences
    assert prefs.device == 'AUTO'
    preferences = sys.modules[MODULE_NAME + ".preferences"]
    assert preferences.device_choice() == "auto"
    prefs.device = 'CPU'
    assert preferences.device_choice() == "cpu"
    import torch
    device = sys.modules[MODULE_NAME + ".device"]
    assert device.status_line("cpu") == "torch {}, device: cpu".format(torch.__version__)


def test_preferences_reset_between_tests(ext):
    # The previous test set CPU; reset_scene restores the default.
    assert bpy.context.preferences.addons[MODULE_NAME].preferences.device == 'AUTO'


def test_site_packages_folder_is_per_extension(ext):
    preferences = sys.modules[MODULE_NAME + ".preferences"]
    path = preferences.site_packages_dir()
    assert path.endswith("site-packages")
    assert path.startswith(bpy.utils.user_resource('EXTENSIONS'))


def test_install_pytorch_respects_online_access(ext):
    assert bpy.app.online_access is False  # background mode, no --online-mode
    with pytest.raises(RuntimeError, match="Online access is disabled"):
        bpy.ops.neural_ik.install_pytorch(variant='CPU')


def test_pip_commands_target_extension_folder(ext):
    deps = sys.modules[MODULE_NAME + ".deps"]
    commands = deps.pip_install_commands("/some/target", "CPU", names=["torch", "scipy"])
    for cmd in commands:
        assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
        assert cmd[cmd.index("--target") + 1] == "/some/target"


def test_cli_command_registered_and_runs(ext, capfd):
    blender_command = sys.modules[MODULE_NAME + ".cli.blender_command"]
    assert blender_command.is_registered()
    assert _cli_name_taken(capfd)
    assert blender_command.execute(["--help"]) == 0
    assert "blender --command neural_ik" in capfd.readouterr().out
    assert blender_command.execute(["info"]) == 0
    out = capfd.readouterr().out
    assert bpy.app.version_string in out and "device in use" in out
    assert blender_command.execute(["bogus"]) == 2
    assert "usage:" in capfd.readouterr().err


def test_register_unregister_register(ext, capfd):
    classes = _all_classes(ext)
    handlers = _handler_lengths()
    path_before = list(sys.path)
    assert all(_registered(classes).values())

    props = ((bpy.types.Scene, "neural_ik"), (bpy.types.Object, "neural_ik_mapping"))
    import_menu = len(bpy.types.TOPBAR_MT_file_import._dyn_ui_initialize())
    for _ in range(2):
        addon_utils.disable(MODULE_NAME, default_set=True)
        assert not any(_registered(classes).values()), _registered(classes)
        for owner, prop in props:
            assert not hasattr(owner, prop), "leftover property " + prop
        assert len(bpy.types.TOPBAR_MT_file_import._dyn_ui_initialize()) == import_menu - 1, "import menu entry left"
        for idname in PANEL_IDNAMES:
            assert not hasattr(bpy.types, idname), "leftover panel " + idname
        for idname in OPERATOR_IDNAMES:
            assert not _operator_registered(idname), "leftover operator " + idname
        assert _handler_lengths() == handlers
        assert not _cli_name_taken(capfd), "CLI command left registered"

        module = addon_utils.enable(MODULE_NAME, default_set=True)
        assert module is not None
        classes = _all_classes(module)
        assert all(_registered(classes).values()), _registered(classes)
        for idname in PANEL_IDNAMES:
            assert hasattr(bpy.types, idname)
        for idname in OPERATOR_IDNAMES:
            assert _operator_registered(idname)
        assert _handler_lengths() == handlers
        assert _cli_name_taken(capfd)
        assert sys.path == path_before
        assert all(hasattr(owner, prop) for owner, prop in props)
        assert len(bpy.types.TOPBAR_MT_file_import._dyn_ui_initialize()) == import_menu


def test_direct_register_cycle(ext):
    """register/unregister/register on the module itself, without addon_utils."""
    module = sys.modules[MODULE_NAME]
    classes = _all_classes(module)
    module.unregister()
    assert not any(_registered(classes).values())
    module.register()
    assert all(_registered(classes).values())


def test_resolve_device():
    device = sys.modules.get(MODULE_NAME + ".device")
    if device is None:
        pytest.skip("extension not installed")
    assert device.resolve_device("cpu") == "cpu"
    assert device.resolve_device("AUTO") in ("cpu", "cuda")
    import torch
    if not torch.cuda.is_available():
        with pytest.warns(RuntimeWarning):
            assert device.resolve_device("cuda") == "cpu"
    with pytest.raises(ValueError):
        device.resolve_device("tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        device.resolve_device("cpu")


def test_scene_reset_per_test_part1(ext):
    bpy.data.objects.new("leak_probe", None)


def test_scene_reset_per_test_part2(ext):
    assert "leak_probe" not in bpy.data.objects
    assert MODULE_NAME in bpy.context.preferences.addons


def test_without_torch_only_preferences_register(ext, monkeypatch, capfd):
    """Phase 1 only: preferences and "Install PyTorch" stay, the rest waits for torch."""
    addon_utils.disable(MODULE_NAME, default_set=True)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
        module = addon_utils.enable(MODULE_NAME, default_set=True)
        try:
            assert module is not None
            assert "torch does not import" in module.missing_reason
            assert _operator_registered("neural_ik.install_pytorch")
            assert bpy.context.preferences.addons[MODULE_NAME].preferences is not None
            assert not hasattr(bpy.types, "VIEW3D_PT_neural_ik")
            # the sidebar tab is there with what is missing and the Install button
            setup = bpy.types.VIEW3D_PT_neural_ik_setup
            assert setup.bl_category == "Neural IK" and setup.poll(bpy.context)
            log = []
            setup.draw(SimpleNamespace(layout=RecordingLayout(log)), bpy.context)
            assert ("label", "PyTorch is not installed") in log
            assert any(kind == "operator" and "install_pytorch" in str(what) for kind, what in log), log
            device = sys.modules[MODULE_NAME + ".device"]
            assert device.status_line() == "PyTorch is not installed"
            # the command is there: `info` says what is missing, the others give the install hint
            assert _cli_name_taken(capfd)
            blender_command = sys.modules[MODULE_NAME + ".cli.blender_command"]
            assert blender_command.execute(["info"]) == 0
            assert "PyTorch is not installed" in capfd.readouterr().out
            assert blender_command.execute(["bake", "walk.npz", "--target", "rigify"]) == 1
            err = capfd.readouterr().err
            assert "PyTorch is not installed" in err and "Install PyTorch" in err and "Traceback" not in err
        finally:
            addon_utils.disable(MODULE_NAME, default_set=True)
    module = addon_utils.enable(MODULE_NAME, default_set=True)
    assert module.missing_reason == ""
    assert hasattr(bpy.types, "VIEW3D_PT_neural_ik")
    assert not bpy.types.VIEW3D_PT_neural_ik_setup.poll(bpy.context)   # the full tab replaces it


def test_install_job_reports_pip_output_and_failure(ext):
    """The background process runner used by "Install PyTorch" (no network needed)."""
    preferences = sys.modules[MODULE_NAME + ".preferences"]
    job = preferences._InstallJob()
    job.start([[sys.executable, "-c", "print('Collecting torch'); print('ERROR: no matching distribution'); "
                                      "raise SystemExit(1)"],
               [sys.executable, "-c", "print('never runs')"]])
    job.reader.join(timeout=30)
    assert not job.running
    assert job.returncode == 1
    assert job.lines == ["Collecting torch", "ERROR: no matching distribution"]
    # commands run in order (torch, then scipy) until one fails
    job.start([[sys.executable, "-c", "print('torch done')"], [sys.executable, "-c", "print('scipy done')"]])
    job.reader.join(timeout=30)
    assert job.returncode == 0 and job.lines == ["torch done", "scipy done"]
