"""Bone-mapping presets as JSON files.

File format (``format`` = ``"neural_ik.bone_mapping"``, ``version`` = 1)::

    {
      "format": "neural_ik.bone_mapping", "version": 1,
      "name": "My rig",
      "mapping": {...BoneMapping.to_dict()...},
      "rig_bones": ["bone", ...]          # bone names of the rig it was made for
    }

``rig_bones`` lets :func:`load_preset` warn when a preset does not fit the
rig it is applied to (bones missing).
"""

from __future__ import annotations

import json
import os

from .mapping import BoneMapping

__all__ = ["FORMAT", "VERSION", "save_preset", "load_preset", "preset_to_dict", "preset_from_dict",
           "preset_fit"]

FORMAT = "neural_ik.bone_mapping"
VERSION = 1


def preset_to_dict(mapping: BoneMapping, rig=None, name: str = "") -> dict:
    """The JSON-friendly preset dict."""
    return {"format": FORMAT, "version": VERSION, "name": name, "mapping": mapping.to_dict(),
            "rig_bones": list(rig.names) if rig is not None else []}


def preset_from_dict(data: dict, rig=None):
    """Mapping and warnings from a preset dict (see :func:`load_preset`)."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a bone-mapping preset (format {data.get('format')!r})")
    if int(data.get("version", 0)) > VERSION:
        raise ValueError(f"preset version {data.get('version')} is newer than supported ({VERSION})")
    mapping = BoneMapping.from_dict(data.get("mapping", {}))
    warnings = []
    if rig is not None:
        warnings += mapping.validate(rig)
        saved = set(data.get("rig_bones") or [])
        if saved:
            missing = sorted(saved - set(rig.names))
            if missing:
                warnings.append(f"{len(missing)} of the preset rig's bones are not in this rig "
                                f"(e.g. {', '.join(missing[:5])})")
    return mapping, warnings


def preset_fit(data: dict, rig) -> float:
    """Fraction (0-1) of the preset's mapped bones present in ``rig``."""
    bones = list(data.get("mapping", {}).get("entries", {}).values())
    return sum(rig.has(b) for b in bones) / len(bones) if bones else 0.0


def save_preset(path, mapping: BoneMapping, rig=None, name: str = "") -> str:
    """Write a mapping preset to ``path`` (directories created); returns the path."""
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(preset_to_dict(mapping, rig, name), f, indent=1, sort_keys=True)
    return path


def load_preset(path, rig=None):
    """Read a mapping preset.

    Parameters
    ----------
    path : str or PathLike
    rig : RigDescription, optional
        When given, the mapping is validated against it.

    Returns
    -------
    mapping : BoneMapping
    warnings : list of str
        Validation errors against ``rig`` and bones of the preset's rig that
        this rig lacks (empty without ``rig``).
    """
    with open(os.fspath(path), encoding="utf-8") as f:
        try:
            data = json.load(f)
        except RecursionError:
            raise ValueError(f"{os.fspath(path)}: JSON nested too deeply to be a mapping preset") from None
    return preset_from_dict(data, rig)
