"""Units and up axes of source data: their names, spellings and the rotation to Z up (no ``bpy``)."""

from __future__ import annotations

import numpy as np

__all__ = ["UNITS", "UNIT_NAMES", "UP_AXES", "normalize_units", "normalize_up_axis", "convert_up_axis"]

#: Metres per unit.
#: ``cmu``: the CMU database's ASF length unit (1/0.45 inch).
UNITS = {"m": 1.0, "dm": 0.1, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048, "cmu": 0.0254 / 0.45}
_UNIT_ALIASES = {
    "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "decimeter": "dm", "decimeters": "dm", "centimeter": "cm", "centimeters": "cm",
    "centimetre": "cm", "centimetres": "cm", "millimeter": "mm", "millimeters": "mm",
    "millimetre": "mm", "millimetres": "mm", "inch": "in", "inches": "in", "foot": "ft", "feet": "ft",
}
#: Supported up axes of source data (all right-handed).
UP_AXES = ("Z", "-Z", "Y", "-Y")
#: Long names of units for messages.
UNIT_NAMES = {"m": "metres", "cm": "centimetres", "mm": "millimetres", "in": "inches", "cmu": "CMU units",
               "dm": "decimetres", "ft": "feet"}


def normalize_units(units) -> str:
    """Canonical spelling of a unit (``"millimeters"`` -> ``"mm"``); ``ValueError`` if unknown."""
    u = str(units).strip().lower()
    u = _UNIT_ALIASES.get(u, u)
    if u not in UNITS:
        raise ValueError(f"unknown units {units!r}; use one of {', '.join(UNITS)}")
    return u


def normalize_up_axis(axis) -> str:
    """Canonical spelling of an up axis (``"y"`` -> ``"Y"``, ``"+z"`` -> ``"Z"``)."""
    a = str(axis).strip().upper().lstrip("+")
    if a not in UP_AXES:
        raise ValueError(f"unknown up axis {axis!r}; use one of {', '.join(UP_AXES)}")
    return a


def convert_up_axis(points: np.ndarray, up_axis: str) -> np.ndarray:
    """Rotate right-handed source coordinates to Z up.

    ``Y`` up (x, y, z) -> (x, -z, y), as Blender's BVH/FBX importers do, so
    a body facing +Z faces -Y; ``-Y`` (y down, image-like: MediaPipe) ->
    (x, z, -y); ``-Z`` -> (x, -y, -z). Handedness is kept: these are
    rotations, never mirrors.
    """
    p = np.asarray(points, dtype=np.float64)
    a = normalize_up_axis(up_axis)
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    if a == "Z":
        return p.copy()
    if a == "Y":
        return np.stack([x, -z, y], axis=-1)
    if a == "-Y":
        return np.stack([x, z, -y], axis=-1)
    return np.stack([x, -y, -z], axis=-1)
