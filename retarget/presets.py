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

Built-in presets (:data:`BUILTIN`) are the naming schemes animators meet:
Rigify's generated controls and meta-rig, Mixamo, the UE Mannequin,
Character Creator and VRoid; :func:`builtin_mapping` applies one to a rig.
"""

from __future__ import annotations

import json
import os

from .mapping import REQUIRED_JOINTS, BoneMapping
from .rigify import CONTROLS, DEFORM, LIMB_JOINTS, sided_entries

__all__ = ["FORMAT", "VERSION", "save_preset", "load_preset", "preset_to_dict", "preset_from_dict",
           "preset_fit", "BUILTIN", "builtin_entries", "builtin_mapping"]

FORMAT = "neural_ik.bone_mapping"
VERSION = 1

_BODY = ("pelvis", "spine1", "spine2", "spine3", "neck", "head")
_LIMB = LIMB_JOINTS


def _scheme(body, limb):
    return dict(zip(_BODY, body), **dict(zip(_LIMB, limb)))


#: Built-in presets: id -> (label, description, joint -> bone; in limb bones "{S}" is L/R,
#: "{Side}" Left/Right, "{s}" l/r).
BUILTIN = {
    "RIGIFY_CONTROLS": ("Rigify Controls", "A rig Rigify generated: its FK controls (the bake switches the "
                        "limbs to FK for the baked range)", CONTROLS),
    "RIGIFY_DEFORM": ("Rigify Deform Bones", "A rig Rigify generated: its DEF- bones, as exported without the "
                      "control rig (each parented to the deform bone above it, constraints removed)", DEFORM),
    "RIGIFY_METARIG": ("Rigify Meta-Rig", "Rigify's human meta-rig (spine, spine.001 ... shoulder.L, "
                       "upper_arm.L)", _scheme(
                           ("spine", "spine.001", "spine.002", "spine.003", "spine.004", "spine.006"),
                           ("shoulder.{S}", "upper_arm.{S}", "forearm.{S}", "hand.{S}", "thigh.{S}",
                            "shin.{S}", "foot.{S}", "toe.{S}"))),
    "MIXAMO": ("Mixamo", "Mixamo characters (mixamorig:Hips, mixamorig:LeftArm ...)", _scheme(
        tuple("mixamorig:" + b for b in ("Hips", "Spine", "Spine1", "Spine2", "Neck", "Head")),
        tuple("mixamorig:{Side}" + b for b in ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot",
                                               "ToeBase")))),
    "UE_MANNEQUIN": ("UE Mannequin", "Unreal Engine's Mannequin (pelvis, spine_01, upperarm_l, ball_l ...)",
                     _scheme(("pelvis", "spine_01", "spine_02", "spine_03", "neck_01", "head"),
                             tuple(b + "_{s}" for b in ("clavicle", "upperarm", "lowerarm", "hand", "thigh",
                                                        "calf", "foot", "ball")))),
    "CHARACTER_CREATOR": ("Character Creator", "Reallusion Character Creator (CC_Base_Hip, CC_Base_L_Upperarm ...)",
                          _scheme(tuple("CC_Base_" + b for b in ("Hip", "Waist", "Spine01", "Spine02",
                                                                   "NeckTwist01", "Head")),
                                  tuple("CC_Base_{S}_" + b for b in ("Clavicle", "Upperarm", "Forearm", "Hand",
                                                                      "Thigh", "Calf", "Foot", "ToeBase")))),
    "VROID": ("VRoid / VRM", "VRoid Studio's VRM export (J_Bip_C_Hips, J_Bip_L_UpperArm ...)", _scheme(
        tuple("J_Bip_C_" + b for b in ("Hips", "Spine", "Chest", "UpperChest", "Neck", "Head")),
        tuple("J_Bip_{S}_" + b for b in ("Shoulder", "UpperArm", "LowerArm", "Hand", "UpperLeg", "LowerLeg",
                                         "Foot", "ToeBase")))),
}


def builtin_entries(preset: str) -> dict:
    """Canonical joint -> bone of a built-in preset, both sides filled in."""
    return sided_entries(BUILTIN[preset][2])


def builtin_mapping(preset: str, rig):
    """A built-in preset's mapping on ``rig``: ``(mapping, missing)``.

    Joints whose bone the rig lacks are left out; ``missing`` lists the
    bones of the joints a humanoid needs (empty when the preset fits).
    """
    entries = builtin_entries(preset)
    kept = {j: b for j, b in entries.items() if rig.has(b)}
    missing = [entries[j] for j in REQUIRED_JOINTS if j not in kept]
    why = {j: f"{BUILTIN[preset][0]} preset" for j in kept}
    return BoneMapping(kept, {j: 1.0 for j in kept}, reasons=why), missing


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
        from .rigify import skeleton_for

        warnings += mapping.validate(skeleton_for(rig, mapping))
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
