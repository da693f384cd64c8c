"""The ``./neural-ik`` process: numpy's BLAS on one thread, and glibc's malloc keeping freed memory.

Both are set up by ``cli/standalone.py`` before numpy loads (its OpenBLAS
reads the thread count once) and so are checked in fresh interpreters.
"""

import os
import pathlib
import platform
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

_BLAS_THREADS = """
import sys
sys.path.insert(0, {cli!r}); sys.path.insert(0, {tests!r})
import standalone                    # (sets the default before numpy loads)
from _pkg import pkg
pkg()
import numpy
from neural_ik.retarget.threads import openblas
lib = openblas()
print(-1 if lib is None else lib[0]())
"""


def _run(code, env_extra=None, drop=()):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _blas_threads(env_extra=None):
    code = _BLAS_THREADS.format(cli=str(REPO / "cli"), tests=str(REPO / "tests"))
    n = int(_run(code, env_extra, drop=("OPENBLAS_NUM_THREADS",))[-1])
    if n < 0:
        pytest.skip("numpy is not built on OpenBLAS here")
    return n


def test_numpy_blas_runs_on_one_thread_unless_the_user_says_otherwise():
    assert _blas_threads() == 1
    if (os.cpu_count() or 1) >= 2:   # (OpenBLAS caps the count at the cores)
        assert _blas_threads({"OPENBLAS_NUM_THREADS": "2"}) == 2


_HEAP = """
import ctypes, sys
sys.path.insert(0, {cli!r})
import standalone
tuned = standalone.tune_malloc() if {tune} else False
import numpy as np


class Info(ctypes.Structure):   # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                  "fsmblks", "uordblks", "fordblks", "keepcost")]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
m0 = mallinfo2().hblkhd
a = np.ones(1_000_000)                 # 8 MB
mapped = mallinfo2().hblkhd - m0       # in a mapping of its own, or from the heap
del a
print(int(tuned), mapped, mallinfo2().fordblks)   # (what the heap kept free once it was dropped)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                    or tuple(map(int, platform.libc_ver()[1].split(".")[:2])) < (2, 33),
                    reason="glibc's malloc (mallinfo2: 2.33 or later) only")
def test_tuned_malloc_serves_arrays_from_a_heap_that_keeps_what_they_free():
    cli = str(REPO / "cli")
    tuned, mapped, kept = map(int, _run(_HEAP.format(cli=cli, tune=True)))
    plain, plain_mapped, plain_kept = map(int, _run(_HEAP.format(cli=cli, tune=False)))
    assert tuned == 1 and plain == 0
    # by default an 8 MB array is mapped afresh (its pages faulted in again next time) and
    # returned when dropped; tuned, it comes from the heap, which keeps the memory
    assert plain_mapped >= 8_000_000 and plain_kept < 8_000_000
    assert mapped == 0 and kept >= 8_000_000
