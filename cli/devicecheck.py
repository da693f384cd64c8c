"""``--device cuda`` where CUDA is not available: one line on stderr, the CPU used, the fallback in the report.

The device module's fallback is a ``RuntimeWarning`` (right inside Blender's
console, where it is the only channel); on the command line it printed a
source line and the report did not say that the CPU was used.
"""

from __future__ import annotations

import sys

__all__ = ["check_device", "device_fallback"]


def check_device(args, command="bake"):
    """Resolve an explicit ``cuda`` before any work; returns the note of a fallback (``None``: none).

    Sets ``args.device`` to ``"cpu"`` when CUDA was asked for and is missing,
    so the solver never warns. ``auto`` is left alone (it means "CUDA when
    there is one"), and so is a run that needs no network (torch is imported
    only to answer this).
    """
    from .parser import device_choice

    if device_choice(args) != "cuda":
        return None
    from .. import device as _device

    if _device.cuda_available():
        return None
    why = "PyTorch has no CUDA build here" if _device.torch_version() else "PyTorch is not installed"
    try:
        import torch

        if torch.backends.cuda.is_built():
            why = "no CUDA device is visible"
    except Exception:   # (torch missing or broken: the solver reports it when a clip needs it)
        pass
    note = "--device cuda: CUDA is not available ({}); baking on the CPU".format(why)
    print("neural-ik {}: warning: {}".format(command, note), file=sys.stderr)
    args.device = "cpu"
    return note


def device_fallback(note):
    """The report summary's entry for a fallback (``{}``: none)."""
    return {"device_fallback": note} if note else {}
