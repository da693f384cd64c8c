"""A BVH skeleton as Blender's BVH importer builds its armature, without ``bpy``.

``neural-ik batch --target SKELETON.bvh --export bvh --no-blend`` needs no
Blender scene: the target's bones, the bake and the BVH written from the
baked keys are all plain arrays. This module gives the armature that
``bpy.ops.import_anim.bvh`` (rotation mode ``NATIVE``, scale 1, the file's
up axis turned to Blender's Z up) followed by :func:`..blender_io.targets.load_target`
makes of the file, so that a bake on it is the bake on the imported one
(``tests/blender/test_direct_bvh.py`` compares both, bone by bone, and the
files they write):

- **bones**: one per joint, in file order, named as in the file; the head is
  the OFFSETs summed, the tail the End Site, else the one child's head, else
  the mean of the children's heads, else the head (a tail closer than 0.001
  to its head moves 0.1 along the file's Y, as the importer does); roll 0
  (the bone's X axis is Blender's ``vec_roll_to_mat3`` of its direction),
  then the file's axes turned to Z up as one rigid rotation (the importer's
  ``transform_apply``);
- **connected**: a bone without position channels whose head is, exactly in
  single precision, its parent's tail as the importer computes it in the
  parent's local frame (head + child offset, which only an OFFSET of zero
  meets);
- **rotation modes**: the Euler order of each joint's rotation channels;
- **object**: scaled from the file's units to metres.

Blender 4.2's importer computes a joint's local tail differently when the
joint has several children (4.5 fixed it); where that changes the armature
(a zero-length or connected bone), the Blender version decides. Anything the
importer would make otherwise (several roots, names it renames or shortens,
joints with one or two rotation channels, a version in between whose
importer is not known here) returns the reason instead, and the caller
imports the file with Blender.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..retarget.rig import RigDescription
from .source_rig import axis_matrix

__all__ = ["FileArmature", "bvh_armature", "bone_rest_matrices", "BONE_NAME_BYTES"]

#: Longest bone name Blender keeps (bytes of UTF-8; ``MAXBONENAME`` - 1).
BONE_NAME_BYTES = 63

_EULER_ORDERS = {(0, 1, 2): "XYZ", (0, 2, 1): "XZY", (1, 0, 2): "YXZ", (1, 2, 0): "YZX", (2, 0, 1): "ZXY",
                 (2, 1, 0): "ZYX"}


@dataclass
class FileArmature:
    """An armature built from a file, as Blender would hold it after the import.

    Attributes
    ----------
    rig : RigDescription
        Bones in Blender's order, rest in armature space (the file's units,
        Z up), ``world_matrix`` the object's (the units' scale).
    connected : ndarray of bool, shape (B,)
        ``Bone.use_connect``.
    rotation_modes : list of str
        ``PoseBone.rotation_mode`` per bone.
    path : str
        The file.
    """

    rig: RigDescription
    connected: np.ndarray
    rotation_modes: list
    path: str = ""

    @property
    def name(self) -> str:
        """The armature's name (the file's, as the importer names it)."""
        return self.rig.name


def bone_rest_matrices(head, tail) -> np.ndarray:
    """Rest rotations ``(B, 3, 3)`` of bones with roll 0: Blender's ``vec_roll_to_mat3_normalized``.

    Column 1 (the bone's Y) is the unit direction head -> tail; columns 0 and
    2 are the smallest rotation taking +Y there applied to X and Z, with
    Blender's series expansion near -Y and its flip about Z at -Y itself.
    """
    d = np.asarray(tail, dtype=np.float64) - np.asarray(head, dtype=np.float64)
    d = d / np.linalg.norm(d, axis=-1, keepdims=True)
    x, y, z = d[..., 0], d[..., 1], d[..., 2]
    theta = 1.0 + y
    theta_alt = x * x + z * z
    regular = (theta > 6.1e-3) | (theta_alt > 2.5e-4 ** 2)
    theta = np.where(theta <= 6.1e-3, theta_alt * 0.5 + theta_alt * theta_alt * 0.125, theta)
    theta = np.where(regular, theta, 1.0)
    m = np.empty(d.shape[:-1] + (3, 3))
    m[..., :, 1] = d
    m[..., 0, 0] = 1.0 - x * x / theta
    m[..., 1, 0] = -x
    m[..., 2, 0] = -x * z / theta
    m[..., 0, 2] = -x * z / theta
    m[..., 1, 2] = -z
    m[..., 2, 2] = 1.0 - z * z / theta
    flip = ~regular
    if flip.any():   # along -Y: X and Y mirrored, Z kept
        m[flip] = np.diag([-1.0, -1.0, 1.0])
    return m


def _euler_order(channels):
    """The importer's ``NATIVE`` rotation mode of a joint: its rotation channels' order (``XYZ`` without
    any), ``None`` for one or two rotation channels (the importer fails on them)."""
    rot = tuple("XYZ".index(c[0]) for c in channels if c.endswith("rotation"))
    return _EULER_ORDERS.get(rot) if rot else "XYZ"


def _tails(bvh, parents, has_loc, legacy):
    """Heads, tails (the file's axes) and connections as one version of the importer makes them.

    ``legacy``: Blender 4.2's importer, whose local tail of a joint with
    several children leaves out the joint's own OFFSET (fixed by 4.5); it
    changes which bones count as zero length or connected.
    """
    n = len(parents)
    f32 = np.float32
    head_local = np.asarray(bvh.offsets, dtype=np.float64).astype(f32)      # mathutils: single precision
    head_world = np.empty_like(head_local)
    for j in range(n):
        p = parents[j]
        head_world[j] = head_local[j] if p < 0 else head_world[p] + head_local[j]
    tail_world = np.full_like(head_local, np.nan)
    tail_local = np.full_like(head_local, np.nan)
    for j, off in bvh.end_sites:   # the last End Site of a joint wins
        off = np.asarray(off, dtype=np.float64).astype(f32)
        tail_world[j] = head_world[j] + off
        tail_local[j] = head_local[j] + off
    children = [[] for _ in range(n)]
    for j in range(n):
        if parents[j] >= 0:
            children[parents[j]].append(j)
    for j in range(n):
        kids = children[j]
        if np.isfinite(tail_world[j]).all():   # an End Site
            pass
        elif not kids:
            tail_world[j], tail_local[j] = head_world[j], head_local[j]
        elif len(kids) == 1:
            tail_world[j], tail_local[j] = head_world[kids[0]], head_local[j] + head_local[kids[0]]
        else:   # the children's mean, summed in single precision in the importer's order
            k = f32(1.0 / len(kids))
            sw, sl = np.zeros(3, f32), np.zeros(3, f32)
            for c in kids:
                sw, sl = sw + head_world[c], sl + head_local[c]
            tail_world[j] = sw * k
            tail_local[j] = sl * k if legacy else head_local[j] + sl * k
        if np.linalg.norm((tail_local[j] - head_local[j]).astype(np.float64)) <= 0.001:
            tail_local[j, 1] += f32(0.1)
            tail_world[j, 1] += f32(0.1)
    # the armature: a bone still shorter than 0.001 (the importer's second guard)
    head, tail = head_world.astype(np.float64), tail_world.astype(np.float64)
    lengths = np.linalg.norm((head_local - tail_local).astype(np.float64), axis=1)
    average = float(lengths[lengths > 0].mean()) if (lengths > 0).any() else 0.1
    zero_area = np.zeros(n, dtype=bool)
    for j in range(n):
        if np.linalg.norm(head[j] - tail[j]) < 0.001:
            p = parents[j]
            ofs = (head_local[p] - tail_local[p]).astype(np.float64) if p >= 0 else np.zeros(3)
            if p >= 0 and np.linalg.norm(ofs) > 0:
                tail[j] = tail[j] - ofs
            else:
                tail[j, 1] += average
            zero_area[j] = True
    connected = np.zeros(n, dtype=bool)
    for j in range(n):
        p = parents[j]
        if p >= 0 and not has_loc[j] and not zero_area[p] and (tail_local[p] == head_local[j]).all():
            connected[j] = True
    return head, tail, connected


def bvh_armature(bvh, up_axis: str, unit_scale: float, name: str = "",
                 blender_version: tuple | None = None) -> FileArmature | str:
    """The armature Blender's BVH importer makes of ``bvh`` (see the module docstring).

    Parameters
    ----------
    bvh : model.bvh.BVHData
        The parsed file.
    up_axis : str
        The file's up axis (``Y``, ``Z``, ``-Y``, ``-Z``), as the importer is told.
    unit_scale : float
        Metres per file unit (the object's scale).
    name : str
        The armature's name.
    blender_version : tuple of int, optional
        The Blender whose importer is emulated (``(major, minor)``). Its
        importer changed between 4.2 and 4.5 for joints with several
        children; where that changes the armature, the version decides
        (4.2 and older, 4.5 and newer; others: the reason is returned).

    Returns
    -------
    FileArmature or str
        The armature, or why the importer would build another one.
    """
    names = list(bvh.names)
    parents = np.asarray(bvh.parents, dtype=np.int64)
    n = len(names)
    if n == 0:
        return "no joints"
    if int((parents < 0).sum()) != 1:
        return "several root joints"
    for nm in names:
        if len(nm.encode("utf-8")) > BONE_NAME_BYTES:
            return "joint name {!r} is longer than Blender's bone names".format(nm)
        if nm != "_".join(nm.split()):
            return "joint name {!r} holds white space".format(nm)
    modes = []
    has_loc = np.zeros(n, dtype=bool)
    for j in range(n):
        ch = bvh.channels[j]
        mode = _euler_order(ch)
        if mode is None:
            return "joint {!r} has {} rotation channels".format(names[j], sum(c.endswith("rotation") for c in ch))
        modes.append(mode)
        has_loc[j] = any(c.endswith("position") for c in ch)
    made = {legacy: _tails(bvh, parents, has_loc, legacy) for legacy in (False, True)}
    same = all(np.array_equal(a, b) for a, b in zip(made[False], made[True]))
    if same:
        legacy = False
    elif blender_version is None:
        return "the armature Blender's importer makes of it depends on Blender's version, which is unknown"
    elif tuple(blender_version[:2]) <= (4, 2):
        legacy = True
    elif tuple(blender_version[:2]) >= (4, 5):
        legacy = False
    else:
        return "the armature Blender {}.{}'s importer makes of it is not known here".format(*blender_version[:2])
    head, tail, connected = made[legacy]
    # transform_apply(rotation=True): the file's axes turned to Blender's, bones rigidly
    R = axis_matrix(up_axis)
    rest = R @ bone_rest_matrices(head, tail)
    ml = np.zeros((n, 4, 4))
    ml[:, :3, :3] = rest
    ml[:, :3, 3] = head @ R.T
    ml[:, 3, 3] = 1.0
    world = np.diag([unit_scale, unit_scale, unit_scale, 1.0])
    rig = RigDescription(names=names, parents=parents, matrix_local=ml, head=head @ R.T, tail=tail @ R.T,
                         matrix_world=world, name=name)
    return FileArmature(rig=rig, connected=connected, rotation_modes=modes, path=str(bvh.path))
