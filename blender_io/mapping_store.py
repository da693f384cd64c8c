"""An armature object's bone mapping: stored on the object by the mapping operators, else automatic;
checked before a bake (:func:`resolve_mapping`).
"""

from __future__ import annotations

from ..model.skeleton import JOINTS
from ..pipeline import BakeError
from ..retarget.rigify import skeleton_for
from .rig import rig_description

__all__ = ["MAPPING_PROP", "auto_mapping", "stored_mapping", "store_mapping", "resolve_mapping"]


#: Name of the Object collection property holding a stored mapping.
MAPPING_PROP = "neural_ik_mapping"


def auto_mapping(rig):
    """:func:`..retarget.rigify.map_target` of a rig description (Auto-Map), computed once per description.

    Live Solve reads the rig on every tick and gets the same description
    back (:func:`.rig.rig_description`); the mapping is shared: read-only.
    """
    from ..retarget.rigify import map_target

    auto = rig.__dict__.get("_auto_mapping")
    if auto is None:
        auto = rig.__dict__["_auto_mapping"] = map_target(rig)
    return auto


def stored_mapping(obj):
    """The mapping stored on an armature object, or ``None`` when there is none.

    Entries come from the object's ``neural_ik_mapping`` collection (joint,
    bone, confidence); twist and extra spine bones are recomputed with
    :func:`auto_map` and kept where they do not clash with the entries.
    """
    items = getattr(obj, MAPPING_PROP, None)
    if items is None or len(items) == 0:
        return None
    from ..retarget.mapping import BoneMapping

    entries = {it.joint: it.bone for it in items if it.joint in JOINTS and it.bone}
    confidence = {it.joint: float(it.confidence) for it in items if it.joint in entries}
    mapping = BoneMapping(entries, confidence)
    try:
        auto = auto_mapping(rig_description(obj))
    except Exception:
        return mapping
    used = set(entries.values())
    mapping.twist = {j: [b for b in bones if b not in used] for j, bones in auto.twist.items() if j in entries}
    mapping.extra_spine = [b for b in auto.extra_spine if b not in used]
    return mapping


def store_mapping(obj, mapping):
    """Write ``mapping.entries`` into the armature's ``neural_ik_mapping`` items."""
    items = getattr(obj, MAPPING_PROP)
    items.clear()
    for joint in JOINTS:
        item = items.add()
        item.joint = joint
        item.bone = mapping.entries.get(joint, "")
        item.confidence = float(mapping.confidence.get(joint, 0.0)) if joint in mapping.entries else 0.0


def resolve_mapping(obj, rig, mapping=None):
    """The mapping to use (given, stored or automatic), validated.

    Raises
    ------
    BakeError
        When the mapping names missing bones or is not a usable humanoid.
    """
    from ..retarget.mapping import humanoid_check

    origin = "given"
    if mapping is None:
        mapping = stored_mapping(obj)
        origin = "stored"
    if mapping is None:
        mapping = auto_mapping(rig)
        origin = "automatic"
    errors = mapping.validate(skeleton_for(rig, mapping))
    if errors:
        raise BakeError(f"the {origin} bone mapping of {obj.name!r} does not fit the armature: "
                        + "; ".join(errors[:4]) + (" ..." if len(errors) > 4 else ""))
    missing = humanoid_check(mapping)
    if missing:
        n = sum(1 for j in JOINTS if j in mapping.entries)
        raise BakeError(f"{obj.name!r} is not usable as a humanoid rig ({n} of {len(JOINTS)} joints mapped, "
                        f"{origin} mapping): " + ", ".join(missing))
    return mapping
