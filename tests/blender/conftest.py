"""Blender tests: the extension is built, installed and enabled as a user would.

(Where tests go: ``tests/conftest.py``.)

Blender's user folders are pointed at a temporary folder *before* ``bpy`` is
imported, so the real Blender configuration is never read or written.

Fixtures for every test module
------------------------------
repo_root, run_cli
    From ``tests/conftest.py``.
ext_zip
    Path of the extension zip built with Blender's own ``blender_ext.py build``.
ext
    The installed, enabled package module ``bl_ext.user_default.neural_ik``.
    Import submodules relatively to it, e.g. ``importlib.import_module(ext.__name__ + ".device")``.
reset_scene (autouse)
    Factory startup file with an empty scene before each test; the add-on stays
    enabled and its preferences are reset to their defaults.
blender_ext
    ``blender_ext("validate", path)`` runs Blender's extension tool and returns
    the ``CompletedProcess``.
"""

import atexit
import importlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

# --- Isolate Blender's user folders (must happen before `import bpy`). -----
_USER_ROOT = pathlib.Path(tempfile.mkdtemp(prefix="neural_ik_blender_user_"))
os.environ["BLENDER_USER_RESOURCES"] = str(_USER_ROOT)
for _kind in ("CONFIG", "SCRIPTS", "DATAFILES", "EXTENSIONS"):
    os.environ["BLENDER_USER_" + _kind] = str(_USER_ROOT / _kind.lower())
atexit.register(shutil.rmtree, _USER_ROOT, ignore_errors=True)

import bpy  # noqa: E402  (imported after the environment is set on purpose)

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PACKAGE_ID = "neural_ik"
USER_REPO = "user_default"
MODULE_NAME = "bl_ext.{}.{}".format(USER_REPO, PACKAGE_ID)


def blender_ext_script():
    """Return the path of ``blender_ext.py`` shipped inside the ``bpy`` wheel."""
    bpy_dir = pathlib.Path(importlib.util.find_spec("bpy").submodule_search_locations[0])
    matches = sorted(bpy_dir.glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
    assert matches, "blender_ext.py not found under {}".format(bpy_dir)
    return matches[-1]


def _run_blender_ext(*args):
    return subprocess.run(
        [sys.executable, str(blender_ext_script()), *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(scope="session")
def blender_ext():
    """Run Blender's extension tool: ``blender_ext("validate", path)``."""
    return _run_blender_ext


@pytest.fixture(scope="session")
def ext_zip(tmp_path_factory):
    """Build the extension zip from the repository with Blender's extension tool."""
    out_dir = tmp_path_factory.mktemp("ext_build")
    result = _run_blender_ext("build", "--source-dir", REPO_ROOT, "--output-dir", out_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    zips = list(out_dir.glob("*.zip"))
    assert len(zips) == 1, result.stdout
    return zips[0]


@pytest.fixture(scope="session")
def ext(ext_zip):
    """Install the zip like "Install from Disk" into the temporary user repository and enable it."""
    assert bpy.utils.user_resource('EXTENSIONS').startswith(str(_USER_ROOT))
    result = bpy.ops.extensions.package_install_files(
        filepath=str(ext_zip), repo=USER_REPO, enable_on_install=True,
    )
    assert result == {'FINISHED'}, result
    assert MODULE_NAME in bpy.context.preferences.addons, "extension not enabled after install"
    module = sys.modules[MODULE_NAME]
    assert pathlib.Path(module.__file__).resolve().is_relative_to(_USER_ROOT.resolve())
    return module


def _ext_module(ext, name):
    return importlib.import_module(ext.__name__ + "." + name)


@pytest.fixture(scope="session")
def bake(ext):
    """The installed extension's ``blender_io.bake`` module."""
    return _ext_module(ext, "blender_io.bake")


@pytest.fixture(scope="session")
def sk(ext):
    """The installed extension's ``model.skeleton`` module."""
    return _ext_module(ext, "model.skeleton")


@pytest.fixture(scope="session")
def rnp(ext):
    """The installed extension's ``model.rotations_np`` module."""
    return _ext_module(ext, "model.rotations_np")


def _reset_preferences():
    addon = bpy.context.preferences.addons.get(MODULE_NAME)
    if addon is None or addon.preferences is None:
        return
    prefs = addon.preferences
    for prop in prefs.bl_rna.properties:
        if prop.identifier != "rna_type" and not prop.is_readonly:
            prefs.property_unset(prop.identifier)


@pytest.fixture(autouse=True)
def reset_scene():
    """Load the factory startup file (empty scene) before each test.

    ``read_homefile(use_factory_startup=True)`` keeps enabled add-ons, unlike
    ``read_factory_settings`` which would also reset the preferences and
    disable the extension.
    """
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    _reset_preferences()
    yield
