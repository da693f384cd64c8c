"""Entry point of ``./neural-ik``: the same parser, run through the PyPI ``bpy`` module.

The repository root is loaded as the package ``neural_ik`` (the clone's folder
name is arbitrary), so relative imports work as they do inside Blender.
"""

import importlib
import importlib.util
import os
import sys

# numpy's OpenBLAS on one thread unless the user asks for more (read when numpy loads, so
# before any import of it). Nothing here gains from its threads: its products are small and
# the long solves run chunks on threads of their own; its idle threads spin for the next
# call instead, on the cores the work needs (docs/tuning.md#openblas-threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PACKAGE_NAME = "neural_ik"


def tune_malloc():
    """Let glibc's malloc keep the memory a bake frees for its next arrays; ``False`` where there is no such malloc.

    A bake makes and drops arrays of a few hundred kB to tens of MB many times
    over (a chunk's Jacobian, a clip's rotations). By default glibc maps each
    of over a small threshold afresh and returns the top of its heap as soon as
    a little is free, so the next array of that size faults in every page
    again. Here mid-sized arrays come from the heap, and more may stay free at
    its top before it is returned (docs/tuning.md#malloc). Only this process's allocator is tuned (its own
    command line, not a Blender that loads the add-on).
    """
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt   # (glibc: Linux; elsewhere no such symbol)
    except Exception:   # noqa: BLE001 (no C library by that name, or no mallopt in it)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1
    ok &= mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1
    ok &= mallopt(M_TOP_PAD, 64 << 20) == 1
    return bool(ok)


def load_package(root=None):
    """Import the repository root as the package ``neural_ik``.

    Parameters
    ----------
    root : str, optional
        Folder holding ``__init__.py`` and ``blender_manifest.toml``;
        defaults to the parent of this ``cli`` folder.

    Returns
    -------
    module
    """
    if PACKAGE_NAME in sys.modules:
        return sys.modules[PACKAGE_NAME]
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        PACKAGE_NAME, os.path.join(root, "__init__.py"), submodule_search_locations=[root],
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE_NAME]
        raise
    return module


def main(argv=None):
    """Run the CLI; returns the exit code."""
    load_package()
    parser = importlib.import_module(PACKAGE_NAME + ".cli.parser")
    return parser.main(sys.argv[1:] if argv is None else argv, prog=parser.PROG_STANDALONE)


def leave(code):
    """Flush stdout and stderr and end the process with ``code`` at once.

    The PyPI ``bpy`` module does not always exit cleanly once Rigify was
    enabled: bpy 4.2.23 segfaults at interpreter exit (exit code 139 after
    correct outputs) and bpy 4.5.15 hangs there once torch was imported.
    Everything the CLI writes is complete and renamed before ``main``
    returns, so the interpreter's own teardown is skipped.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    tune_malloc()
    try:
        exit_code = main()
    except SystemExit as ex:
        exit_code = ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
    except KeyboardInterrupt:
        exit_code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        exit_code = 1
    leave(exit_code if isinstance(exit_code, int) else 1)
