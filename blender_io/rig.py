"""Reading an armature's rest skeleton into plain arrays.

Everything is read with ``foreach_get``: bone names, parent indices, rest
``matrix_local`` (armature space), head and tail positions, plus the
object's world matrix. The retarget maths (:mod:`..retarget`) takes these
arrays and never sees ``bpy``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["armature_arrays", "rig_description", "NotAnArmatureError"]


class NotAnArmatureError(ValueError):
    """The chosen object is not an armature."""


def armature_arrays(obj) -> dict:
    """Rest skeleton of an armature object as numpy arrays.

    Returns
    -------
    dict
        ``names`` (list of str), ``parents`` (B,) int (-1 for roots),
        ``matrix_local`` (B, 4, 4) rest matrices in armature space,
        ``head`` and ``tail`` (B, 3) armature space, ``matrix_world`` (4, 4).
    """
    if obj is None or obj.type != "ARMATURE":
        kind = "nothing" if obj is None else f"{obj.name!r} ({obj.type.lower()})"
        raise NotAnArmatureError(f"the target must be an armature, got {kind}")
    bones = obj.data.bones
    n = len(bones)
    names = bones.keys()   # (one call: a list comprehension over the bones takes three times as long)
    index = {name: i for i, name in enumerate(names)}
    parents = np.array([index[p.name] if (p := b.parent) is not None else -1 for b in bones], dtype=np.int64)
    mats = np.empty(n * 16, dtype=np.float32)
    bones.foreach_get("matrix_local", mats)
    # foreach_get flattens matrices column-major (Blender's memory layout)
    mats = mats.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)
    head = np.empty(n * 3, dtype=np.float32)
    tail = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("head_local", head)
    bones.foreach_get("tail_local", tail)
    return {
        "names": names,
        "parents": parents,
        "matrix_local": mats,
        "head": head.reshape(n, 3).astype(np.float64),
        "tail": tail.reshape(n, 3).astype(np.float64),
        "matrix_world": np.array(obj.matrix_world, dtype=np.float64),
    }


_DESCRIPTIONS: dict = {}


def rig_description(obj):
    """The armature as a :class:`..retarget.rig.RigDescription`.

    The same content (bone names, parents, rest, object matrix and name)
    gives the same object back: Live Solve reads the rig on every tick, and
    what is derived from a description (rest rotations, the retarget plan)
    is then computed once. Treat the result as read-only.
    """
    import hashlib

    from ..retarget.rig import RigDescription

    a = armature_arrays(obj)
    h = hashlib.sha1("\0".join([obj.name, *a["names"]]).encode())
    for k in ("parents", "matrix_local", "head", "tail", "matrix_world"):
        h.update(np.ascontiguousarray(a[k]).tobytes())
    key = h.hexdigest()
    rig = _DESCRIPTIONS.get(key)
    if rig is None:
        rig = RigDescription(
            names=a["names"],
            parents=a["parents"],
            matrix_local=a["matrix_local"],
            head=a["head"],
            tail=a["tail"],
            matrix_world=a["matrix_world"],
            name=obj.name,
        )
        if len(_DESCRIPTIONS) >= 8:
            _DESCRIPTIONS.pop(next(iter(_DESCRIPTIONS)))
        _DESCRIPTIONS[key] = rig
    return rig


def _pose_at_rest(obj) -> bool:
    """Whether every pose bone holds its rest (no location, rotation or scale in any mode) and no locked axis."""
    pbs = obj.pose.bones
    n = len(pbs)
    arrays = {}
    for prop, size in (("location", 3), ("rotation_quaternion", 4), ("rotation_euler", 3),
                       ("rotation_axis_angle", 4), ("scale", 3), ("lock_rotation", 3)):
        buf = np.empty(n * size, dtype=np.float64)
        pbs.foreach_get(prop, buf)
        arrays[prop] = buf.reshape(n, size)
    angle = arrays["rotation_axis_angle"][:, 0]
    return bool(np.allclose(arrays["location"], 0.0) and np.allclose(arrays["rotation_euler"], 0.0)
                and np.allclose(arrays["rotation_quaternion"], [1.0, 0.0, 0.0, 0.0]) and np.allclose(angle, 0.0)
                and np.allclose(arrays["scale"], 1.0) and not arrays["lock_rotation"].any())


def file_armature(obj, path="", unsupported=None):
    """``obj`` as a :class:`..readers.bvh_armature.FileArmature` (a bake keeps its keys as arrays, no action).

    For a bake whose only outputs are BVH files, written by the numpy BVH
    writer from the keys: a long clip's keys then take float32 arrays, not
    Blender's fcurves (a key point is about 70 bytes). ``None`` where the
    armature's pose is not at rest (the BVH would hold it on the bones the
    bake leaves alone), a rotation axis is locked, or ``unsupported(obj)``
    (why the numpy writer would differ from Blender's evaluation) says why.
    """
    from ..readers.bvh_armature import FileArmature

    if (unsupported is not None and unsupported(obj) is not None) or not _pose_at_rest(obj):
        return None
    bones = obj.data.bones
    connected = np.array([b.use_connect for b in bones], dtype=bool)
    modes = [obj.pose.bones[b.name].rotation_mode for b in bones]
    return FileArmature(rig_description(obj), connected, modes, path)
