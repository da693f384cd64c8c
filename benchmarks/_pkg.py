"""Benchmarks run as scripts (``python benchmarks/bench_x.py``): put the repository root
on ``sys.path`` and use the one bootstrap, :func:`devpkg.import_package`."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from devpkg import REPO, import_package  # noqa: E402,F401
