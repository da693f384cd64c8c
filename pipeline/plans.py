"""The rig's plan, remembered, and the sizes read off a plan or a skeleton (no ``bpy``)."""

from __future__ import annotations

import hashlib

import numpy as np

from ..model.skeleton import JOINTS
from .options import BakeError

__all__ = ["cached_plan", "leg_length", "hip_height", "object_frame"]

_J = {n: i for i, n in enumerate(JOINTS)}
_PLANS: dict = {}
#: Plans remembered (Solve Frame and Live Solve plan the same rig many times a second).
PLANS_KEPT = 8


def leg_length(skel) -> float:
    """Mean thigh + calf length of a canonical :class:`Skeleton` (metres)."""
    o = np.asarray(skel.offsets)
    return float(np.mean([np.linalg.norm(o[_J[f"calf_{s}"]]) + np.linalg.norm(o[_J[f"foot_{s}"]]) for s in "lr"]))


def hip_height(plan, n=(0.0, 0.0, 1.0), feet=("foot_l", "foot_r", "toe_l", "toe_r")) -> float:
    """Rest height along ``n`` of the pelvis bone's head over the lowest of ``feet`` (ankles and balls: foot and toe
    heads); 0 without.

    Joints only, no bone tails: two conventions of one skeleton (joint
    orients or none, tails along the bone or along an axis) have the same
    hip height.
    """
    rig, ent = plan.rig, plan.mapping.entries
    n = np.asarray(n, dtype=np.float64)
    feet = [rig.head[rig.index(ent[j])] @ n for j in feet if j in ent and rig.has(ent[j])]
    if not feet or "pelvis" not in ent or not rig.has(ent["pelvis"]):
        return 0.0
    return max(float(rig.head[rig.index(ent["pelvis"])] @ n) - min(feet), 0.0)


def object_frame(matrix_world):
    """``(Minv (4, 4), unit)``: world -> armature space, and metres per armature unit."""
    m = np.asarray(matrix_world, dtype=np.float64).reshape(4, 4)
    s = abs(np.linalg.det(m[:3, :3])) ** (1.0 / 3.0)
    if not (s > 1e-12 and np.isfinite(s)):
        raise BakeError("the armature object has a zero scale")
    sv = np.linalg.svd(m[:3, :3], compute_uv=False)
    if sv.max() / sv.min() > 1.001:
        raise BakeError(f"the armature object is scaled non-uniformly (scale factors {', '.join(f'{x:.3g}' for x in sv)}"
                        "): apply the scale (Ctrl+A > Scale) or make it uniform")
    return np.linalg.inv(m), float(s)


def _plan_key(rig, mapping, spine) -> str:
    """The rig's content (names, parents, rest) and the mapping: an edited rig or mapping is planned anew."""
    h = hashlib.sha1()
    h.update("\0".join(rig.names).encode())
    for a in (rig.parents, rig.matrix_local, rig.head, rig.tail):
        h.update(np.ascontiguousarray(a).tobytes())
    if rig.reference_matrix is not None:
        h.update(np.ascontiguousarray(rig.reference_matrix).tobytes())
    h.update(repr(sorted(mapping.entries.items())).encode())
    h.update(repr(sorted((k, tuple(v)) for k, v in getattr(mapping, "twist", {}).items())).encode())
    h.update(repr(list(getattr(mapping, "extra_spine", []))).encode())
    h.update(spine.encode())
    return h.hexdigest()


def cached_plan(rig, mapping, spine="segments"):
    """:func:`..retarget.plan.plan_retarget`, remembered for the last few (rig, mapping) pairs.

    ``spine``: as :func:`..retarget.plan.plan_retarget`'s (``"rest"`` for
    solves from a few effectors).
    """
    from ..retarget.plan import plan_retarget

    key = _plan_key(rig, mapping, spine)
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_retarget(rig, mapping, spine=spine)
        if len(_PLANS) >= PLANS_KEPT:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
    return plan


def free_bones_of(plan):
    """The bones the rig-space solve poses: the mapped joints' bones and every bone of their chains (cached on the plan)."""
    from ..retarget.rigsolve import free_bones

    mapped = [plan.rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and plan.rig.has(b)]
    key = ("free_bones", tuple(mapped), plan.root)
    free = plan.__dict__.get(key)
    if free is None:
        free = plan.__dict__[key] = free_bones(plan.rig, mapped, plan.root)
    return free
