"""Thread counts of numpy's bundled OpenBLAS and of torch, set for the length of a block.

No ``bpy`` here.
"""

from __future__ import annotations

import os
import sys

import numpy as np

__all__ = ["openblas", "blas_threads", "torch_threads"]


_OPENBLAS = None


def openblas():
    """``(get, set)`` thread-count functions of numpy's bundled OpenBLAS, or None (another BLAS)."""
    global _OPENBLAS
    if _OPENBLAS is None:
        found = ()
        try:
            import ctypes
            import glob

            libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
            for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
                lib = ctypes.CDLL(path)
                for name in ("openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads64_",
                             "openblas_{}_num_threads"):
                    get, put = (getattr(lib, name.format(x), None) for x in ("get", "set"))
                    if get is not None and put is not None:
                        found = (get, put)
                        break
                if found:
                    break
        except (OSError, AttributeError):
            pass
        _OPENBLAS = found
    return _OPENBLAS or None


class blas_threads:
    """Context: numpy's OpenBLAS runs on ``n`` threads inside (where it can be told), as before outside."""

    def __init__(self, n):
        self.n = int(n)
        self.lib = openblas()

    def __enter__(self):
        if self.lib is not None:
            self.old = int(self.lib[0]())
            self.lib[1](self.n)

    def __exit__(self, *exc):
        if self.lib is not None:
            self.lib[1](self.old)


class torch_threads:
    """Context: torch (where it is loaded) runs on ``n`` threads inside, as before outside."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        self.torch = sys.modules.get("torch")
        if self.torch is not None:
            self.old = self.torch.get_num_threads()
            if self.n != self.old:
                self.torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.torch is not None and self.n != self.old:
            self.torch.set_num_threads(self.old)
