"""A generated Rigify rig as a bake target (no ``bpy``).

``pose.rigify_generate`` makes an armature whose deform bones (``DEF-``)
follow the animator's controls through helper bones (``MCH-``, ``ORG-``) and
constraints: ``upper_arm_fk.L`` hangs from ``MCH-upper_arm_parent.L``, a
child of ``ORG-shoulder.L``, which copies ``shoulder.L``. Read as plain
parents, the controls form no humanoid chain (the upper arm is not below the
clavicle), so the bake sees the rig through :func:`skeleton_for`: each mapped
bone below the nearest mapped bone it follows, where ``ORG-X`` stands for the
bone ``X`` (or ``DEF-X``) it copies. That is exact while the helpers between
them relay their parent unchanged, which :data:`SWITCHES` and
:func:`rest_controls` ensure for the baked range:

- the four limbs in FK (``IK_FK`` 1) following their parents
  (``FK_limb_follow`` 0), the neck and head following the chest and the neck
  (``neck_follow``, ``head_follow`` 1);
- ``hips`` and ``chest``, which spread their turn over two spine segments
  each, and the FK and tweak spine controls between the mapped ones, at rest:
  the solved spine is keyed on the FK spine controls, one turn per segment,
  and the animator offsets on ``hips`` and ``chest``.

The controls mapping (:func:`controls_mapping`) is what Auto-Map gives on a
generated rig; the deform-bone mapping (``DEF-``, a preset) is the
alternative for a rig whose deform bones are exported on their own.
"""

from __future__ import annotations

from .mapping import BoneMapping
from .rig import RigDescription

__all__ = ["CONTROLS", "DEFORM", "SWITCHES", "is_generated_rigify", "controls_mapping", "map_target",
           "skeleton_for", "uses_controls", "rest_controls"]

#: Canonical joint -> Rigify's FK control ({S}: L or R; the preset ``RIGIFY_CONTROLS``).
CONTROLS = {
    "pelvis": "torso", "spine1": "spine_fk.002", "spine3": "spine_fk.003", "neck": "neck", "head": "head",
    "clavicle": "shoulder.{S}", "upperarm": "upper_arm_fk.{S}", "forearm": "forearm_fk.{S}",
    "hand": "hand_fk.{S}", "thigh": "thigh_fk.{S}", "calf": "shin_fk.{S}", "foot": "foot_fk.{S}",
    "toe": "toe_fk.{S}",
}
#: Canonical joint -> Rigify's deform bone (the preset ``RIGIFY_DEFORM``).
DEFORM = {
    "pelvis": "DEF-spine", "spine1": "DEF-spine.001", "spine2": "DEF-spine.002", "spine3": "DEF-spine.003",
    "neck": "DEF-spine.004", "head": "DEF-spine.006", "clavicle": "DEF-shoulder.{S}",
    "upperarm": "DEF-upper_arm.{S}", "forearm": "DEF-forearm.{S}", "hand": "DEF-hand.{S}",
    "thigh": "DEF-thigh.{S}", "calf": "DEF-shin.{S}", "foot": "DEF-foot.{S}", "toe": "DEF-toe.{S}",
}
#: Custom properties of the generated rig set for a bake on its controls (keyed over the baked range).
SWITCHES = {"IK_FK": 1.0, "FK_limb_follow": 0.0, "neck_follow": 1.0, "head_follow": 1.0}
#: Controls that move the mapped ones through helper bones: kept at rest by a bake on the controls.
_MASTERS = ("root", "hips", "chest")
_HELPER_PREFIXES = ("MCH-", "ORG-", "DEF-", "VIS_", "WGT-")


def is_generated_rigify(rig) -> bool:
    """Whether ``rig`` is an armature Rigify generated (its helper bones are there); remembered on the rig."""
    hit = rig.__dict__.get("_generated_rigify")
    if hit is None:    # (a description is read-only: its names do not change)
        names = rig.names
        hit = rig.__dict__["_generated_rigify"] = (any(n.startswith("MCH-") for n in names)
                                                   and any(n.startswith("ORG-") for n in names))
    return hit


#: Joints with a bone on each side: a template's ``"{S}"`` is L/R, ``"{Side}"`` Left/Right, ``"{s}"`` l/r.
LIMB_JOINTS = ("clavicle", "upperarm", "forearm", "hand", "thigh", "calf", "foot", "toe")


def sided_entries(template: dict) -> dict:
    """Canonical joint -> bone of a mapping template (:data:`CONTROLS`, a preset's), both sides filled in."""
    out = {}
    for joint, bone in template.items():
        if joint in LIMB_JOINTS:
            for s, side in (("l", "Left"), ("r", "Right")):
                out[f"{joint}_{s}"] = bone.format(S=s.upper(), Side=side, s=s)
        else:
            out[joint] = bone
    return out


def controls_mapping(rig):
    """The mapping onto a generated rig's FK controls, or ``None`` when it lacks one of them."""
    entries = sided_entries(CONTROLS)
    if not is_generated_rigify(rig) or not all(rig.has(b) for b in entries.values()):
        return None
    why = {j: "Rigify's FK control" for j in entries}
    return BoneMapping(entries, {j: 1.0 for j in entries}, reasons=why)


def map_target(rig):
    """Auto-Map of a bake target: a generated rig onto its FK controls, any other rig by
    :func:`.mapping.auto_map` (names and parents of a generated rig mix controls with the helper
    bones that move them; a source skeleton is read by ``auto_map`` alone)."""
    from .mapping import auto_map

    return controls_mapping(rig) or auto_map(rig)


def uses_controls(rig, mapping) -> bool:
    """Whether a mapping on a generated rig keys its controls (not its helper or deform bones)."""
    bones = list(mapping.entries.values())
    return is_generated_rigify(rig) and bool(bones) and not any(b.startswith(_HELPER_PREFIXES) for b in bones)


def _followed(rig, b, keep):
    """The nearest of ``keep`` that bone ``b`` follows, or -1: up its parents, ``ORG-X`` read as ``X``/``DEF-X``."""
    a = int(rig.parents[b])
    while a >= 0:
        if a in keep:
            return a
        name = rig.names[a]
        if name.startswith("ORG-"):
            for other in (name[4:], "DEF-" + name[4:]):
                k = rig.index(other) if rig.has(other) else -1
                if k in keep and k != b and not rig.is_ancestor(b, k):
                    return k
        a = int(rig.parents[a])
    return -1


def skeleton_for(rig, mapping):
    """The rig as a bake on ``mapping`` sees it: each mapped bone below the nearest mapped bone it follows.

    ``rig`` itself where it is no generated Rigify rig. Other bones keep
    their parents; rest matrices are the rig's own, so a pose of the mapped
    bones is the one Blender shows while the helpers between them rest.
    Computed once per rig and set of mapped bones.
    """
    if not is_generated_rigify(rig):
        return rig
    keep = frozenset(rig.index(b) for b in mapping.entries.values() if rig.has(b))
    cache = rig.__dict__.setdefault("_rigify_skeletons", {})
    found = cache.get(keep)
    if found is None:
        parents = rig.parents.copy()
        for b in keep:
            parents[b] = _followed(rig, b, keep)
        try:
            found = RigDescription(list(rig.names), parents, rig.matrix_local, rig.head, rig.tail,
                                   world_matrix=rig.world_matrix, reference_matrix=rig.reference_matrix,
                                   name=rig.name)
        except ValueError:   # the mapped bones follow each other round in a loop: read plainly
            found = rig
        cache[keep] = found
    return found


def rest_controls(rig, mapping) -> list:
    """Controls a bake on the controls keys at rest: ``root``, ``hips``, ``chest`` and the unmapped controls
    among the mapped ones' parents (FK and tweak spine bones), so the helpers relay their parent unchanged."""
    if not uses_controls(rig, mapping):
        return []
    mapped = {rig.index(b) for b in mapping.entries.values() if rig.has(b)}
    out = [rig.index(n) for n in _MASTERS if rig.has(n) and rig.index(n) not in mapped]
    for b in sorted(mapped):
        for a in rig.ancestors(b):
            if a not in mapped and a not in out and not rig.names[a].startswith(_HELPER_PREFIXES):
                out.append(a)
    return [rig.names[i] for i in out]
