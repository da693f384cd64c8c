"""Import the repository root as the package ``neural_ik`` without Blender.

Usage in tests::

    from _pkg import pkg
    pkg()
    from neural_ik.model import fk
"""

import importlib.util
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pkg():
    """Import (once) and return the ``neural_ik`` package.

    The root ``__init__.py`` only defines registration functions, which are
    not called here, so no ``bpy`` is needed.
    """
    if "neural_ik" in sys.modules:
        return sys.modules["neural_ik"]
    init = REPO / "__init__.py"
    if init.exists():
        spec = importlib.util.spec_from_file_location(
            "neural_ik", init, submodule_search_locations=[str(REPO)]
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules["neural_ik"] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception:
            del sys.modules["neural_ik"]
            raise
    else:  # root package not written yet: an empty namespace package
        mod = types.ModuleType("neural_ik")
        mod.__path__ = [str(REPO)]
        sys.modules["neural_ik"] = mod
    return mod
