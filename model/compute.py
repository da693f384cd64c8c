"""Where and in what the solver computes: the torch device and the CPU batches' precision.

No ``bpy`` here.
"""

from __future__ import annotations

import torch

from ..device import PRECISION_CHOICES as PRECISIONS  # (the solver's and --precision's one list)
from ..device import check_precision_choice

__all__ = ["PRECISIONS", "cpu_has_bfloat16", "resolve_precision", "resolve_torch_device"]


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; torch's own checks).

    Elsewhere bfloat16 is emulated and slower than float32.
    """
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)
        try:
            if check is not None and check():
                return True
        except Exception:  # (a private check that a torch build lacks or that fails: no bfloat16)
            pass
    return False


def resolve_precision(choice="auto") -> str:
    """What the network's CPU batches compute in for a ``precision`` setting: "float32" or "bfloat16".

    Raises
    ------
    ValueError
        When ``choice`` is not one of :data:`PRECISIONS`.
    """
    check_precision_choice(choice)
    return "bfloat16" if choice == "bfloat16" or (choice == "auto" and cpu_has_bfloat16()) else "float32"


def resolve_torch_device(device) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available (use 'auto' or 'cpu')")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}; use 'auto', 'cpu' or 'cuda'")
    return dev
