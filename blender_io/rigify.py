"""The Blender side of a bake onto a generated Rigify rig's controls (see :mod:`..retarget.rigify`).

:func:`rigify_keys` lists the constant channels such a bake keys beside the
solved ones: the rig's switches (:data:`..retarget.rigify.SWITCHES`, custom
properties of its pose bones) and the controls kept at rest. A Solve Frame
sets the same values without keys (:func:`apply_constants`).
"""

from __future__ import annotations

from ..retarget.rigify import SWITCHES, rest_controls, uses_controls

__all__ = ["rigify_keys", "apply_constants", "channel_path"]

_IDENTITY = {"QUATERNION": ("rotation_quaternion", (1.0, 0.0, 0.0, 0.0)),
             "AXIS_ANGLE": ("rotation_axis_angle", (0.0, 0.0, 1.0, 0.0))}


def rigify_keys(obj, rig, mapping) -> list:
    """``(bone, property, values)`` to key over a bake on a generated rig's controls (empty otherwise).

    ``property`` is a pose-bone property (``location``, a rotation) or a
    custom property as ``'["IK_FK"]'``; ``values`` a tuple.
    """
    if not uses_controls(rig, mapping):
        return []
    out = []
    for pb in obj.pose.bones:
        for key in pb.keys():
            if key in SWITCHES and isinstance(pb[key], (int, float)):
                out.append((pb.name, f'["{key}"]', (float(SWITCHES[key]),)))
    for name in rest_controls(rig, mapping):
        pb = obj.pose.bones[name]
        prop, identity = _IDENTITY.get(pb.rotation_mode, ("rotation_euler", (0.0, 0.0, 0.0)))
        out.append((name, prop, identity))
        out.append((name, "location", (0.0, 0.0, 0.0)))
    return out


def channel_path(bone: str, prop: str) -> str:
    """The fcurve data path of a pose bone's property (``prop`` a name or ``'["custom"]'``)."""
    import bpy

    head = f'pose.bones["{bpy.utils.escape_identifier(bone)}"]'
    return head + prop if prop.startswith("[") else f"{head}.{prop}"


def apply_constants(obj, keys) -> None:
    """Set the values of :func:`rigify_keys` on the pose (a Solve Frame keys nothing)."""
    for bone, prop, values in keys:
        pb = obj.pose.bones[bone]
        if prop.startswith("["):
            pb[prop[2:-2]] = values[0]
        else:
            setattr(pb, prop, values)
