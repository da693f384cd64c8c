"""Compute-device selection, shared by the UI, the CLI and the solver.

This module imports no ``bpy``; ``torch`` is imported lazily so the module
itself always imports.
"""

import os
import sys
import warnings

#: Values accepted for the "compute device" setting (preferences and ``--device``).
DEVICE_CHOICES = ("auto", "cpu", "cuda")
#: Values accepted for the network's precision on the CPU (``Solver(precision=...)``, ``--precision``).
PRECISION_CHOICES = ("auto", "float32", "bfloat16")


def torch_version():
    """Return the installed torch version, or ``None`` when torch does not import.

    Returns
    -------
    str or None
        ``torch.__version__`` or ``None``.
    """
    try:
        import torch
    except Exception:  # ImportError, or a broken install raising anything else
        return None
    return str(torch.__version__)


#: Files one of which a Linux machine has when a GPU driver torch could use is loaded
#: (NVIDIA, WSL's GPU bridge, AMD's ROCm).
_GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def gpu_driver_present():
    """Whether this machine has a GPU driver that torch could use (no torch import; a machine
    without one has no CUDA device, and asking torch would cost its import)."""
    if sys.platform == "darwin":
        return False
    if sys.platform.startswith("linux"):
        return any(os.path.exists(p) for p in _GPU_DRIVER_FILES)
    import ctypes.util

    return any(ctypes.util.find_library(name) for name in ("nvcuda", "amdhip64"))


def cuda_available():
    """Return whether torch imports and reports a usable CUDA device.

    Returns
    -------
    bool
        ``True`` only when ``torch.cuda.is_available()`` is true (torch is not
        imported where no GPU driver is present: :func:`gpu_driver_present`).
    """
    if not gpu_driver_present():
        return False
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def check_device_choice(choice):
    """``choice`` lower-cased when it is one of :data:`DEVICE_CHOICES` (no torch needed); else ``ValueError``."""
    key = str(choice).lower()
    if key not in DEVICE_CHOICES:
        raise ValueError(
            "unknown compute device {!r}, expected one of: {}".format(choice, ", ".join(DEVICE_CHOICES))
        )
    return key


def check_precision_choice(choice):
    """``choice`` when it is one of :data:`PRECISION_CHOICES` (no torch needed); else ``ValueError``."""
    if choice not in PRECISION_CHOICES:
        raise ValueError("unknown precision {!r} (one of {})".format(choice, ", ".join(PRECISION_CHOICES)))
    return choice


def resolve_device(choice="auto"):
    """Turn a compute-device setting into a torch device string.

    Parameters
    ----------
    choice : str
        One of ``"auto"``, ``"cpu"`` or ``"cuda"`` (case-insensitive).

    Returns
    -------
    str
        ``"cuda"`` when CUDA is requested (or ``"auto"``) and available,
        otherwise ``"cpu"``.

    Raises
    ------
    ValueError
        If ``choice`` is not one of :data:`DEVICE_CHOICES`.

    Warns
    -----
    RuntimeWarning
        When ``"cuda"`` is requested but not available; ``"cpu"`` is used.
    """
    key = check_device_choice(choice)
    if key == "cpu":
        return "cpu"
    if cuda_available():
        return "cuda"
    if key == "cuda":
        warnings.warn("CUDA requested but not available; using CPU", RuntimeWarning, stacklevel=2)
    return "cpu"


def status_line(choice="auto"):
    """Describe torch and the device actually in use, in one line.

    Parameters
    ----------
    choice : str
        The compute-device setting, see :func:`resolve_device`.

    Returns
    -------
    str
        For example ``"torch 2.13.0+cpu, device: cpu"`` or
        ``"PyTorch is not installed"``.
    """
    version = torch_version()
    if version is None:
        return "PyTorch is not installed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        device = resolve_device(choice)
    return "torch {}, device: {}".format(version, device)
