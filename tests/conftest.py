"""Test layout (read this before adding a test).

``.venv/bin/python -m pytest`` runs everything below ``tests/`` in one run (one
closing line, one exit code); ``.ci/run`` runs the same command.

tests/pure/
    Tests of code that computes (``model/``, ``retarget/``, ``readers/``,
    ``pipeline/``, ``cli`` helpers, ``training/``): **Blender is unimportable**
    while these modules are collected and while their tests run (``bpy``,
    ``mathutils``, ``bmesh``... are ``None`` in ``sys.modules``), so an
    accidental ``import bpy`` fails the test. No scene reset, no extension
    install: they are fast. Import the package as ``neural_ik`` (already
    imported here through :func:`devpkg.import_package`)::

        from neural_ik.retarget.rigsolve import solve_rig
        from training import train       # training code, not shipped
        from rigs import humanoid        # test armatures as plain data

    ``rigs.rigify_metarig_description()`` is Rigify's meta-rig as stored data.
    Run them alone with ``.venv/bin/python -m pytest tests/pure -q``.

tests/blender/
    Tests that need Blender: the real ``bpy`` and the extension as it ships
    (``tests/blender/conftest.py`` builds the zip with Blender's tool, installs
    and enables it in temporary user folders, and reloads the factory scene
    before every test). Fixtures: ``ext``, ``ext_zip``, ``bake``, ``sk``,
    ``rnp``, ``blender_ext``, the autouse ``reset_scene``. Operators, panels,
    properties, ``blender_io/`` and the command line (``run_cli``) go here.

Shared helpers live in ``tests/`` (``rigs.py``; ``data/``; ``ui_layout.py``:
``RecordingLayout`` runs a panel's or an operator's ``draw`` headless and
checks the props and operators it names); fixtures for both
kinds here: ``repo_root``, ``run_cli``. Test file names must be unique across
both folders (pytest imports them by their base name).
"""

import contextlib
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
PURE_DIR = TESTS_DIR / "pure"

# devpkg and training/ (repository root) and the shared helpers (tests/) import by name.
for _path in (str(TESTS_DIR), str(REPO_ROOT)):
    if _path not in sys.path:
        sys.path.append(_path)

from devpkg import import_package  # noqa: E402

import_package()

#: Top-level modules that only exist inside Blender (or the ``bpy`` module).
BLENDER_MODULES = frozenset({
    "bpy", "_bpy", "bpy_types", "bpy_extras", "mathutils", "bmesh", "gpu", "gpu_extras",
    "bl_math", "idprop", "imbuf", "aud", "freestyle", "addon_utils", "bl_ui", "bl_operators",
    "bl_ext", "bl_pkg",
})


@contextlib.contextmanager
def blender_unimportable():
    """Make every Blender module unimportable (``None`` in ``sys.modules``) inside the block.

    Modules Blender tests imported before are put back afterwards.
    """
    saved = {name: mod for name, mod in sys.modules.items()
             if name.partition(".")[0] in BLENDER_MODULES}
    blocked = set(BLENDER_MODULES) | set(saved)
    for name in blocked:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, None) is None:
                sys.modules.pop(name, None)
        sys.modules.update(saved)


def _is_pure(path):
    path = pathlib.Path(path)
    return path == PURE_DIR or PURE_DIR in path.parents


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """Pure test modules are imported with Blender unimportable."""
    if not _is_pure(collector.path):
        return (yield)
    with blender_unimportable():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Pure tests (setup, call, teardown) run with Blender unimportable."""
    if not _is_pure(item.path):
        return (yield)
    with blender_unimportable():
        return (yield)


class MisplacedTest(pytest.File):
    """A test file directly in ``tests/``: a collection error that says where it goes."""

    def collect(self):
        raise self.CollectError(
            "{} is directly in tests/: move it to tests/pure/ (no Blender) or tests/blender/ "
            "(bpy and the installed extension); see tests/conftest.py".format(self.path.name))


def pytest_pycollect_makemodule(module_path, parent):
    if pathlib.Path(module_path).parent == TESTS_DIR:
        return MisplacedTest.from_parent(parent, path=module_path)
    return None


@pytest.fixture(scope="session")
def repo_root():
    """The repository root (extension source folder)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def run_cli():
    """Run ``./neural-ik`` with arguments; returns the ``CompletedProcess`` (text, captured)."""

    def _run(*args, timeout=600, **kwargs):
        return subprocess.run(
            [str(REPO_ROOT / "neural-ik"), *map(str, args)],
            capture_output=True, text=True, timeout=timeout, cwd=str(REPO_ROOT), **kwargs,
        )

    return _run
