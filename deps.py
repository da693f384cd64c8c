"""Runtime dependencies Blender's Python may lack: what is there, without importing it (no ``bpy``).

Blender bundles numpy but not PyTorch or SciPy. The add-on registers its
operators when torch is *found*; importing it costs seconds, so drawing the
UI never imports it (:func:`torch_state` only looks it up and reads its
version from the installed metadata). The solver imports torch on first use;
:func:`note_torch_import` records the outcome so a torch that is found but
fails to import (a missing shared library) shows as one clear line instead of
a traceback.

The preferences' install job installs :func:`missing` with the pins of
:data:`RUNTIME_REQUIREMENTS` (the same as ``requirements.txt``).
"""

import importlib.metadata
import importlib.util
import platform
import sys

#: Packages the extension needs at run time beyond Blender's own Python, pinned
#: as in ``requirements.txt`` (a test keeps them equal). SciPy is optional: the
#: smoothing filters and the refinement fall back to numpy without it; c3d (pure
#: Python) only reads ``.c3d`` files.
RUNTIME_REQUIREMENTS = {"torch": "2.13.0", "scipy": "1.17.1", "c3d": "0.6.0"}
#: What the Install button calls each package.
PACKAGE_TITLES = {"torch": "PyTorch", "scipy": "SciPy", "c3d": "the C3D reader"}

#: PyTorch's package index of CPU-only builds.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: PyTorch's package index of CUDA builds (Windows; PyPI's Windows wheels are CPU-only).
TORCH_CUDA_INDEX = "https://download.pytorch.org/whl/cu128"

#: The outcome of the last attempt to import torch: ``None`` (not tried), ``""``
#: (imported) or the one-line reason it failed.
_torch_import_error = None


def find(name):
    """Return whether module ``name`` can be found, without importing it."""
    if sys.modules.get(name) is not None:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def installed_version(name):
    """The installed distribution's version from its metadata (no import), or ``None``."""
    try:
        return importlib.metadata.version(name)
    except Exception:  # PackageNotFoundError, or broken metadata
        return None


def missing():
    """Names of :data:`RUNTIME_REQUIREMENTS` that cannot be found, in install order."""
    return [name for name in RUNTIME_REQUIREMENTS if not find(name)]


def error_line(ex):
    """One line for an import failure: ``"ImportError: libcudnn.so.9: cannot open shared object file"``."""
    text = str(ex).strip().splitlines()
    return "{}: {}".format(type(ex).__name__, text[-1] if text else "").rstrip(": ")[:200]


def note_torch_import(error=None):
    """Record the outcome of importing torch (``error``: the exception, ``None`` when it imported)."""
    global _torch_import_error
    _torch_import_error = "" if error is None else error_line(error)


def forget_torch_import():
    """Forget a failed import (after a reinstall), so the next :func:`import_torch` tries again."""
    global _torch_import_error
    _torch_import_error = None


def import_torch():
    """Import torch once and record the outcome; returns the module or ``None`` when it fails."""
    global _torch_import_error
    if _torch_import_error:
        return None
    try:
        import torch
    except Exception as ex:  # ImportError, OSError from a missing library, anything a broken install raises
        note_torch_import(ex)
        return None
    note_torch_import(None)
    return torch


def torch_state():
    """What is known about torch without importing it.

    Returns
    -------
    state : str
        ``"missing"`` (not found), ``"found"`` (found, not imported yet),
        ``"ok"`` (imported) or ``"broken"`` (found, but importing it failed).
    detail : str
        The version (``"2.13.0"``) or, for ``"broken"``, the reason.
    """
    if _torch_import_error:
        return "broken", _torch_import_error
    if sys.modules.get("torch") is not None and hasattr(sys.modules["torch"], "__version__"):
        return "ok", str(sys.modules["torch"].__version__)
    if not find("torch"):
        return "missing", ""
    return "found", installed_version("torch") or "?"


def status_line(choice="auto"):
    """One status line for the UI; never imports torch.

    Parameters
    ----------
    choice : str
        The compute-device setting (``"auto"``, ``"cpu"``, ``"cuda"``).
    """
    state, detail = torch_state()
    if state == "missing":
        return "PyTorch is not installed"
    if state == "broken":
        return "PyTorch is installed but does not load: " + detail
    if state == "found":
        return "torch {} (loads when a solve needs it), device setting: {}".format(detail, choice.lower())
    from . import device  # torch is imported already: resolving the device is cheap
    return device.status_line(choice)


def cuda_wheels_available(system=None, machine=None):
    """Whether PyTorch publishes CUDA builds for this platform.

    Linux x86_64: PyPI's torch wheels are CUDA builds. Windows x86_64: PyPI's
    are CPU-only, CUDA builds come from :data:`TORCH_CUDA_INDEX`. macOS has no
    CUDA; other architectures get CPU builds only.
    """
    system = (system or platform.system()).lower()
    machine = (machine or platform.machine()).lower()
    return system in ("linux", "windows") and machine in ("x86_64", "amd64")


def pip_install_commands(target, variant, names=None, numpy_version=None, system=None):
    """The ``pip install`` command lines for the missing runtime dependencies, run in order.

    torch comes from one index (PyTorch's own, or PyPI), SciPy from PyPI in a
    second command, so no index is mixed with another.

    Parameters
    ----------
    target : str
        Folder passed to ``pip install --target``.
    variant : {"CPU", "CUDA"}
        The torch build. CPU: PyTorch's CPU index on Linux and Windows (PyPI's
        Linux wheels bundle CUDA), PyPI on macOS (CPU only). CUDA: PyPI on
        Linux, :data:`TORCH_CUDA_INDEX` on Windows; refused elsewhere.
    names : list of str, optional
        Packages to install (default: :func:`missing`, else all of
        :data:`RUNTIME_REQUIREMENTS`).
    numpy_version : str, optional
        Pinned in the SciPy command so pip never brings a numpy other than
        Blender's own (default: the running numpy's version).
    system : str, optional
        ``platform.system()`` (for tests).

    Returns
    -------
    list of list of str

    Raises
    ------
    ValueError
        CUDA asked for on a platform without CUDA builds.
    """
    names = list(names if names is not None else (missing() or list(RUNTIME_REQUIREMENTS)))
    system = (system or platform.system()).lower()
    base = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--upgrade",
            "--only-binary=:all:", "--target", target]
    commands = []
    if "torch" in names:
        cmd = base + ["torch=={}".format(RUNTIME_REQUIREMENTS["torch"])]
        if variant == "CUDA":
            if not cuda_wheels_available(system=system):
                raise ValueError("PyTorch has no CUDA builds for this platform; install the CPU build")
            if system == "windows":
                cmd += ["--index-url", TORCH_CUDA_INDEX]
        elif system != "darwin":
            cmd += ["--index-url", TORCH_CPU_INDEX]
        commands.append(cmd)
    if "scipy" in names:
        if numpy_version is None:
            try:
                import numpy
                numpy_version = numpy.__version__
            except ImportError:
                numpy_version = None
        cmd = base + ["scipy=={}".format(RUNTIME_REQUIREMENTS["scipy"])]
        if numpy_version:
            cmd.append("numpy=={}".format(numpy_version))
        commands.append(cmd)
    if "c3d" in names:   # (pure Python; its numpy requirement is met by Blender's)
        commands.append(base + ["--no-deps", "c3d=={}".format(RUNTIME_REQUIREMENTS["c3d"])])
    return commands
