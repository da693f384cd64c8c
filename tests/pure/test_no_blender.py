"""The computing modules import and run without Blender (the codebase's first rule)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Packages whose every module must import with ``bpy`` unimportable.
COMPUTING_PACKAGES = ("model", "retarget", "readers", "pipeline")

_CHECK = r"""
import importlib, pkgutil, sys
for name in ("bpy", "mathutils", "bmesh", "bpy_extras", "gpu"):
    sys.modules[name] = None
sys.path.insert(0, sys.argv[1])
from devpkg import import_package
import_package()
done = []
for package in sys.argv[2:]:
    try:
        module = importlib.import_module("neural_ik." + package)
    except ModuleNotFoundError as ex:
        if ex.name == "neural_ik." + package:
            continue  # package not written yet
        raise
    done.append(module.__name__)
    for info in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
        importlib.import_module(info.name)
        done.append(info.name)
import training.train, training.dataset, training.evaluate, training.augment
loaded = sorted(n for n in sys.modules if n.partition(".")[0] in ("bpy", "mathutils", "bmesh") and sys.modules[n])
print("\n".join(done))
print("BLENDER:", loaded)
"""


def test_computing_modules_import_without_blender():
    """A fresh interpreter that never had ``bpy``: every module of the computing packages imports."""
    result = subprocess.run([sys.executable, "-c", _CHECK, str(REPO_ROOT), *COMPUTING_PACKAGES],
                            capture_output=True, text=True, timeout=300, cwd=str(REPO_ROOT))
    assert result.returncode == 0, result.stderr[-3000:]
    names = result.stdout.split()
    for package in ("model", "retarget", "readers"):
        assert "neural_ik." + package in names
    assert "neural_ik.model.inference" in names and "neural_ik.retarget.solve" in names
    assert result.stdout.strip().endswith("BLENDER: []")


def test_blender_is_unimportable_in_pure_tests():
    for name in ("bpy", "mathutils", "bmesh"):
        with pytest.raises(ImportError):
            __import__(name)


def test_blender_version_read_without_importing_bpy(tmp_path, monkeypatch):
    """The Blender a BVH armature is built for: the installed ``bpy`` package's version, read from its
    ``dist-info`` folder on the path (as ``importlib.metadata`` reads it), the first on the path winning."""
    from importlib.metadata import version

    from _pkg import pkg

    pkg()
    from neural_ik.blender_io.targets import blender_version

    installed = tuple(int(x) for x in version("bpy").split(".")[:2])
    assert blender_version() == installed
    (tmp_path / "bpy-4.2.23.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert blender_version() == (4, 2)
    assert "bpy" not in sys.modules or sys.modules["bpy"] is None
