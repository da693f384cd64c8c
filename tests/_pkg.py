"""Alias kept for tests written before the split: ``from _pkg import pkg; pkg()``.

The bootstrap itself is :func:`devpkg.import_package` (repository root); new
tests need neither: ``tests/conftest.py`` has already imported the package, so
``from neural_ik.model import fk`` just works.
"""

from devpkg import import_package as pkg  # noqa: F401
