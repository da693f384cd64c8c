"""The posed part of a rig: the bones a bake can turn and their ancestors (no ``bpy``).

A production rig carries many bones no keypoint drives (Rigify's meta-rig:
face, fingers, heels; 159 bones of which about thirty move). A bake's
whole-clip arrays hold a column per bone, so :func:`posed_plan` gives the
:class:`.plan.RetargetPlan` of the posed bones only: the same plan, its
rig the posed bones and their ancestors (so forward kinematics is exact for
every kept bone), its indices renumbered. Bones left out stay at rest, as
they would in the whole rig's result, and are not keyed either way.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .rig import RigDescription

__all__ = ["posed_bones", "sub_rig", "posed_plan"]


def posed_bones(plan, free=(), names=()) -> np.ndarray:
    """Sorted indices of the bones of ``plan.rig`` a bake may turn or read, with their ancestors.

    Parameters
    ----------
    plan : RetargetPlan
    free : iterable of int
        Bones the rig-space solve poses (:func:`..pipeline.plans.free_bones_of`).
    names : iterable of str
        More bones by name (a source skeleton's bones: its rotations are copied by name).
    """
    rig = plan.rig
    seeds = set(int(b) for b in free) | set(plan.drivers) | set(plan.twist) | set(plan.path)
    if plan.root >= 0:
        seeds.add(plan.root)
    mapping = plan.mapping
    named = list(mapping.entries.values()) + [b for bones in getattr(mapping, "twist", {}).values() for b in bones]
    named += list(getattr(mapping, "extra_spine", []) or []) + list(names)
    mapped = {rig.index(n) for n in named if rig.has(n)}
    seeds |= mapped
    # a mapped bone's children: the end points (head top, hand and toe ends) are read at their heads
    seeds |= {c for b in mapped for c in rig.children(b)}
    keep = set(seeds)
    for b in seeds:
        keep.update(rig.ancestors(b))
    return np.array(sorted(keep), dtype=np.int64)


def sub_rig(rig: RigDescription, bones) -> RigDescription:
    """``rig`` restricted to ``bones`` (sorted indices, closed under parents), renumbered in the same order."""
    bones = np.asarray(bones, dtype=np.int64)
    new = np.full(len(rig), -1, dtype=np.int64)
    new[bones] = np.arange(len(bones))
    parents = np.where(rig.parents[bones] >= 0, new[np.maximum(rig.parents[bones], 0)], -1)
    if np.any((rig.parents[bones] >= 0) & (parents < 0)):
        raise ValueError("a kept bone's parent is not kept")
    ref = None if rig.reference_matrix is None else rig.reference_matrix[bones]
    return RigDescription([rig.names[b] for b in bones], parents, rig.matrix_local[bones], rig.head[bones],
                          rig.tail[bones], world_matrix=rig.world_matrix, reference_matrix=ref, name=rig.name)


def posed_plan(plan, free=(), names=()):
    """``(plan of the posed bones, old index -> new index (B,), -1 where left out)``.

    The whole rig's ``plan`` itself where every bone is posed. Remembered on
    ``plan`` for the last set asked (Live Solve asks once per drag step).
    """
    keep = posed_bones(plan, free, names)
    n = len(plan.rig)
    if len(keep) == n:
        return plan, np.arange(n)
    key = ("posed_plan", keep.tobytes())
    cached = plan.__dict__.get("_posed")
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    new = np.full(n, -1, dtype=np.int64)
    new[keep] = np.arange(len(keep))

    def renumber(d):
        return {int(new[b]): v for b, v in d.items()}

    rig = sub_rig(plan.rig, keep)
    sub = dataclasses.replace(
        plan, rig=rig, bone_names=list(rig.names), rest_rot=plan.rest_rot[keep], rest_head=plan.rest_head[keep],
        rel_rot=plan.rel_rot[keep], rel_pos=plan.rel_pos[keep], align=renumber(plan.align),
        offset=renumber(plan.offset), drivers=renumber(plan.drivers), twist=renumber(plan.twist),
        root=int(new[plan.root]) if plan.root >= 0 else -1, path=[int(new[b]) for b in plan.path])
    plan.__dict__["_posed"] = (key, sub, new)
    return sub, new
