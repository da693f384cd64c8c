"""Import the repository root as the package ``neural_ik`` (benchmarks run as scripts).

The benchmarks' own folder is first on ``sys.path`` when they run as
``python benchmarks/bench_x.py``, so they can ``from _pkg import import_package``.
"""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def import_package():
    """Import (once) and return the ``neural_ik`` package rooted at :data:`REPO`."""
    if "neural_ik" not in sys.modules:
        spec = importlib.util.spec_from_file_location("neural_ik", REPO / "__init__.py",
                                                      submodule_search_locations=[str(REPO)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["neural_ik"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["neural_ik"]
