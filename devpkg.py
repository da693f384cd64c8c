"""Import the repository root as the package ``neural_ik`` outside Blender (development only).

The one bootstrap for code that lives next to the extension but does not ship
with it: the tests, ``training/`` and ``benchmarks/``. Blender imports the
extension as ``bl_ext.<repo>.neural_ik`` and the launcher has its own loader
(``cli/standalone.py``); everything else calls :func:`import_package` and then
imports ``neural_ik.<module>``::

    from devpkg import import_package
    import_package()
    from neural_ik.model import fk

The repository root must be on ``sys.path`` (it is when Python runs from the
root: ``python -m training.train``, ``python -m pytest``; ``tests/conftest.py``
and ``benchmarks/_pkg.py`` add it). The manifest keeps this file out of the zip.
"""

import importlib.util
import sys
from pathlib import Path

#: The repository root (the extension's source folder).
REPO = Path(__file__).resolve().parent

#: The package name the repository is imported as.
PACKAGE = "neural_ik"


def import_package():
    """Import (once) and return the package ``neural_ik`` rooted at :data:`REPO`.

    The root ``__init__.py`` only defines registration functions (not called
    here), so this needs no ``bpy``.

    Returns
    -------
    types.ModuleType
        The package module.
    """
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    spec = importlib.util.spec_from_file_location(PACKAGE, REPO / "__init__.py",
                                                  submodule_search_locations=[str(REPO)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    return module
