"""Bootstrap for the training/evaluation scripts run directly (``python model/train.py``).

Then ``model/`` is first on ``sys.path`` and the module has no package, so its
relative imports would fail; :func:`as_package` imports the repository root as
the package ``neural_ik`` and returns the package name the script should set
as its ``__package__``.
"""

import importlib
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def as_package() -> str:
    """Import (once) the repository as ``neural_ik`` plus ``neural_ik.model``; return ``"neural_ik.model"``."""
    if "neural_ik" not in sys.modules:
        spec = importlib.util.spec_from_file_location("neural_ik", REPO / "__init__.py",
                                                      submodule_search_locations=[str(REPO)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["neural_ik"] = mod
        spec.loader.exec_module(mod)
    importlib.import_module("neural_ik.model")
    return "neural_ik.model"
