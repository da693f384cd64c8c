"""Where and in what the solver computes: the device and the CPU batches' precision.

No ``bpy`` here; torch is imported only to ask it (a CUDA device where a GPU
driver is present, the CPU's bfloat16 support).
"""

from __future__ import annotations

from ..device import PRECISION_CHOICES as PRECISIONS  # (the solver's and --precision's one list)
from ..device import check_precision_choice, cuda_available

__all__ = ["PRECISIONS", "DeviceName", "cpu_has_bfloat16", "resolve_precision", "resolve_device_name"]


class DeviceName(str):
    """A device as torch spells it (``"cpu"``, ``"cuda"``, ``"cuda:1"``), known without importing torch."""

    @property
    def type(self) -> str:
        return self.split(":")[0]


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; torch's own checks).

    Elsewhere bfloat16 is emulated and slower than float32.
    """
    import torch

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


def resolve_device_name(device) -> DeviceName:
    """The device a solver runs on for ``device`` ("auto", "cpu", "cuda", "cuda:N").

    Raises
    ------
    ValueError
        CUDA asked for and not available, or an unknown device.
    """
    name = "auto" if device is None else str(device)
    if name == "auto":
        return DeviceName("cuda" if cuda_available() else "cpu")
    kind = name.split(":")[0]
    if kind not in ("cpu", "cuda") or (kind == "cpu" and name != "cpu"):
        raise ValueError(f"unsupported device {device!r}; use 'auto', 'cpu' or 'cuda'")
    if kind == "cuda" and not cuda_available():
        raise ValueError("device 'cuda' requested but CUDA is not available (use 'auto' or 'cpu')")
    return DeviceName(name)
