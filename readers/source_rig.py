"""The source skeleton and its motion, for sources that have a hierarchy.

A BVH file, an FBX/glTF armature, a ``.blend`` armature or an armature in
the scene carries more than joint positions: its bones' rest offsets and
orientations and each bone's rotation per frame. :class:`SourceRig` keeps
them next to the keypoints (``KeypointClip.source_rig``) in the clip's output
space (metres, Z up, Blender's axes; the source rig's armature space is the
clip's world space), with the same semantics as Blender's pose bones, so
that :func:`..retarget.rigpose.pose_rig` reproduces the source's joint world
positions::

    rot, heads = pose_rig(src.rig, src.quaternions, src.locations)
    # heads[t, b] == clip.positions[t, clip.joint_names.index(src.rig.names[b])]

For a BVH file (:func:`source_rig_from_bvh`) every joint is a bone: its head
is the joint's rest position (the OFFSETs summed, converted to the output
axes and metres), its tail the first child joint away from the head (or the
End Site), and its rest rotation the file's axis conversion (a BVH joint's
frame at rest is the file's axes, whatever the rest pose: T-pose, A-pose or
joint orients baked into the OFFSETs). Each frame's pose rotation is then
exactly the BVH channel rotation, and ``location`` is the position channel
minus the OFFSET (metres, in the bone's rest frame).

No ``bpy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import setting
from ..model.rotations_np import matrix_to_quat, quat_slerp
from ..retarget.mapping import BoneMapping
from ..retarget.rig import RigDescription
from .units import convert_up_axis

__all__ = ["SourceRig", "source_rig_from_bvh", "bvh_motion", "source_rig_from_pose", "axis_matrix", "bone_tails", "end_point_names",
           "layout_from_mapping", "describe_mapping_problem"]


def axis_matrix(up_axis: str) -> np.ndarray:
    """The rotation (3, 3) that :func:`.units.convert_up_axis` applies: ``out = M @ p``."""
    return convert_up_axis(np.eye(3), up_axis).T


@dataclass
class SourceRig:
    """A source skeleton (rest pose and hierarchy) and its motion.

    Attributes
    ----------
    rig : RigDescription
        The source skeleton in the clip's output space (metres, Z up): bone
        names, parents, ``matrix_local`` (rest rotation + head), head, tail.
    mapping : BoneMapping
        That rig's bones mapped onto the canonical joints by
        :func:`..retarget.mapping.auto_map`.
    quaternions : ndarray, shape (T, B, 4), float32
        ``PoseBone.rotation_quaternion`` (w, x, y, z) per frame and bone:
        the rotation relative to the bone's rest, in its parent's posed frame.
    locations : ndarray, shape (T, B, 3), float32
        ``PoseBone.location`` per frame and bone (metres, in the bone's rest
        frame): the root's translation and any other bone's translation
        channels; zero elsewhere.
    """

    rig: RigDescription
    mapping: BoneMapping
    quaternions: np.ndarray
    locations: np.ndarray
    notes: list = field(default_factory=list)

    def __post_init__(self):
        q = np.asarray(self.quaternions, dtype=np.float32)
        loc = np.asarray(self.locations, dtype=np.float32)
        B = len(self.rig)
        if q.ndim != 3 or q.shape[1:] != (B, 4):
            raise ValueError(f"quaternions must have shape (T, {B}, 4), got {q.shape}")
        if loc.shape != q.shape[:2] + (3,):
            raise ValueError(f"locations must have shape {q.shape[:2] + (3,)}, got {loc.shape}")
        self.quaternions, self.locations = q, loc

    @property
    def num_frames(self) -> int:
        return int(self.quaternions.shape[0])

    def frames(self, start: int, stop: int) -> "SourceRig":
        """Frames ``start:stop`` (end exclusive), as a new :class:`SourceRig`."""
        return SourceRig(self.rig, self.mapping, self.quaternions[start:stop].copy(),
                         self.locations[start:stop].copy(), list(self.notes))

    def resampled(self, src_t) -> "SourceRig":
        """The motion at fractional source frames ``src_t`` (slerp / linear).

        Parameters
        ----------
        src_t : array_like, shape (N,)
            Frame positions in ``[0, T - 1]``.
        """
        t = np.clip(np.asarray(src_t, dtype=np.float64), 0, self.num_frames - 1)
        i0 = np.floor(t).astype(np.int64)
        i1 = np.minimum(i0 + 1, self.num_frames - 1)
        f = t - i0
        q0 = self.quaternions[i0].astype(np.float64)
        q1 = self.quaternions[i1].astype(np.float64)
        q = quat_slerp(q0, q1, np.broadcast_to(f[:, None], q0.shape[:2]))
        loc = self.locations[i0] * (1 - f)[:, None, None] + self.locations[i1] * f[:, None, None]
        return SourceRig(self.rig, self.mapping, q, loc, list(self.notes))

    def translated(self, shift) -> "SourceRig":
        """The motion moved by ``shift`` (3,) in output space (the root bones' locations change)."""
        shift = np.asarray(shift, dtype=np.float64).reshape(3)
        loc = self.locations.astype(np.float64).copy()
        Q = self.rig.rest_rotation()
        for b in np.flatnonzero(self.rig.parents < 0):
            loc[:, b] += Q[b].T @ shift
        return SourceRig(self.rig, self.mapping, self.quaternions.copy(), loc, list(self.notes))


def bone_tails(heads: np.ndarray, parents, end_sites=(), min_length: float = 1e-4) -> np.ndarray:
    """Tails of bones from joint heads: the first child away from the head, else an End Site.

    Parameters
    ----------
    heads : ndarray (B, 3)
    parents : sequence of int
    end_sites : sequence of (int, ndarray (3,))
        ``(bone, tail position)`` candidates for bones without a usable child.
    min_length : float
        A child closer than this to the head is skipped. A bone with neither
        gets a tail along its parent's direction (or +Z), 10% of its parent's
        length (at least ``10 * min_length``).
    """
    heads = np.asarray(heads, dtype=np.float64)
    B = len(heads)
    kids = [[] for _ in range(B)]
    for i, p in enumerate(parents):
        if p >= 0:
            kids[p].append(i)
    ends = [[] for _ in range(B)]
    for b, pos in end_sites:
        ends[b].append(np.asarray(pos, dtype=np.float64))
    tails = np.empty_like(heads)
    done = np.zeros(B, bool)
    order = list(range(B))  # parents come first in BVH / topological order
    for i in order:
        for cand in [heads[c] for c in kids[i]] + ends[i]:
            if np.linalg.norm(cand - heads[i]) > min_length:
                tails[i] = cand
                done[i] = True
                break
    for i in order:
        if done[i]:
            continue
        p = parents[i]
        d, length = np.array([0.0, 0.0, 1.0]), 10 * min_length
        if p >= 0:
            v = tails[p] - heads[p]
            n = np.linalg.norm(v)
            if n > 0:
                d, length = v / n, max(0.1 * n, length)
        tails[i] = heads[i] + d * length
        done[i] = True
    return tails


def source_rig_from_bvh(bvh, up_axis: str, scale: float, mapping: BoneMapping | None = None,
                        name: str = "", motion=True) -> SourceRig:
    """The :class:`SourceRig` of a parsed BVH file.

    Parameters
    ----------
    bvh : model.bvh.BVHData
    up_axis : str
        The file's up axis (see :func:`.units.convert_up_axis`).
    scale : float
        Metres per file unit.
    mapping : BoneMapping, optional
        Default: :func:`..retarget.mapping.auto_map` on the rig.
    name : str
        Rig name (informative).
    motion : bool or tuple
        ``False``: the skeleton and its mapping only (the motion is one
        frame of the rest pose). ``(quaternions, moved)`` from
        :func:`bvh_motion`: the motion taken from the file before (the
        caller may drop the BVH's per-frame arrays in between).

    Returns
    -------
    SourceRig
        One bone per BVH joint, in file order.
    """
    C = axis_matrix(up_axis)
    J = bvh.num_joints
    parents = np.asarray(bvh.parents, dtype=np.int64)
    rest = np.zeros((J, 3))
    for j in range(J):
        p = parents[j]
        rest[j] = bvh.offsets[j] + (rest[p] if p >= 0 else 0.0)
    heads = scale * rest @ C.T
    ends = [(p, scale * (rest[p] + np.asarray(o)) @ C.T) for p, o in bvh.end_sites]
    tails = bone_tails(heads, parents, ends, min_length=1e-6)
    ml = np.broadcast_to(np.eye(4), (J, 4, 4)).copy()
    ml[:, :3, :3] = C
    ml[:, :3, 3] = heads
    rig = RigDescription(list(bvh.names), parents, ml, heads, tails, name=name)
    if isinstance(motion, tuple):
        quats, moved = motion
        locs = scale * moved
    elif motion:
        quats, moved = bvh_motion(bvh)
        locs = scale * moved
    else:
        quats = np.tile(np.array([1.0, 0.0, 0.0, 0.0]), (1, J, 1))
        locs = np.zeros((1, J, 3))
    if mapping is None:
        from ..retarget.mapping import auto_map

        mapping = auto_map(rig)
    return SourceRig(rig, mapping, quats, locs)


def bvh_motion(bvh):
    """A parsed BVH's motion as a :class:`SourceRig` keeps it: ``(quaternions, moved)``.

    ``quaternions`` (T, J, 4) float32: each joint's local rotation;
    ``moved`` (T, J, 3) float64: its local translation less its OFFSET (file
    units, file axes). Compact: a caller may drop ``bvh.rotations`` (T, J,
    3, 3) once it has these.
    """
    return matrix_to_quat(bvh.rotations).astype(np.float32), bvh.translations - bvh.offsets[None]


#: Canonical end points read from a mapped bone's end (End Site, end-named child or leaf tail).
_END_POINTS = (("head", "head_top"), ("toe_l", "toe_tip_l"), ("toe_r", "toe_tip_r"),
               ("hand_l", "hand_tip_l"), ("hand_r", "hand_tip_r"))
_END_TOKENS = frozenset({"end", "top", "nub", "tip", "site"})


def end_point_names(rig: RigDescription, mapping: BoneMapping, end_of: dict) -> dict:
    """Point names of the canonical end points a skeleton gives.

    Parameters
    ----------
    rig : RigDescription
    mapping : BoneMapping
    end_of : dict
        Bone name -> name of the point at its End Site / leaf tail (for
        bones that have one).

    Returns
    -------
    dict
        Point name -> canonical end point (``head_top``, ``toe_tip_l``...):
        the mapped head's, toes' (a foot's, when the skeleton has no toe
        bone) or hands' End Site, or a child joint whose
        name says it is an end (``HeadTop_End``, ``LeftHandEnd``) and that
        has no children of its own but an End Site. A hand with finger
        joints gives no hand tip. A hand's one thumb chain (a child whose
        name says ``thumb``, one joint after another) gives the thumb: its
        End Site, else its last joint.
    """
    from ..retarget.bone_names import parse_name
    from ..retarget.mapping import thumb_end

    out = {}
    pairs = list(_END_POINTS)
    for s in "lr":  # a foot without a toe bone: its End Site is at the toes
        if f"toe_{s}" not in mapping.entries:
            pairs.append((f"foot_{s}", f"toe_tip_{s}"))
    for joint, end in pairs:
        bone = mapping.entries.get(joint)
        if bone is None or not rig.has(bone):
            continue
        b = rig.index(bone)
        kids = rig.children(b)
        if not kids and bone in end_of:
            out[end_of[bone]] = end
            continue
        ends = [c for c in kids if _END_TOKENS & set(parse_name(rig.names[c]).tokens)]
        if len(ends) == 1 and not rig.children(ends[0]) and (len(kids) == 1 or joint.startswith("hand")):
            out[rig.names[ends[0]]] = end
    for s in "lr":   # a hand's thumb: the tip of its one thumb chain (its End Site, else its last joint)
        bone = mapping.entries.get(f"hand_{s}")
        c = thumb_end(rig, rig.index(bone)) if bone is not None and rig.has(bone) else None
        if c is not None:
            out[end_of.get(rig.names[c], rig.names[c])] = f"thumb_{s}"
    return out


def layout_from_mapping(rig: RigDescription, mapping: BoneMapping, end_of: dict, name: str = "skeleton"):
    """A :class:`.layouts.Layout` taking the mapped bones' heads (and end points) as canonical keypoints."""
    from .layouts import Layout

    table = {bone: joint for joint, bone in mapping.entries.items()}
    table.update(end_point_names(rig, mapping, end_of))
    return Layout(name, "bones mapped from the skeleton's hierarchy (retarget.mapping.auto_map)",
                  tuple(table), table, notes="joint origins of the mapped bones; end points from End Sites")


def describe_mapping_problem(rig: RigDescription, mapping: BoneMapping, errors) -> str:
    """One message for a skeleton that is not a usable humanoid: what was found, what is missing."""
    found = ", ".join(f"{j}={b}" for j, b in mapping.entries.items()) or "nothing"
    roots = [rig.names[i] for i in np.flatnonzero(rig.parents < 0)]
    missing = [e[len("no bone for "):] for e in errors if e.startswith("no bone for ")]
    other = [e for e in errors if not e.startswith("no bone for ")]
    problems = ([f"no bone for {', '.join(missing)}"] if missing else []) + other
    return (f"not a humanoid skeleton the automatic mapping can use ({len(rig)} joints, root "
            f"{', '.join(roots)}): {'; '.join(problems)}. Mapped: {found}. Pass a mapping of joint names to "
            f"canonical keypoints with {setting('layout', 'MAPPING.json')} (`neural-ik layouts canonical` lists "
            "the keypoints)")


def _ortho(m):
    u, _, vt = np.linalg.svd(m)
    r = u @ vt
    return r


def source_rig_from_pose(names, parents, rest_matrices, tails, pose_matrices, mapping=None, name=""):
    """A :class:`SourceRig` from world-space rest and posed bone matrices (an armature's bones).

    Parameters
    ----------
    names : list of str
    parents : sequence of int
        -1 for roots; parents before children.
    rest_matrices : ndarray (B, 4, 4)
        Each bone's rest matrix in the output space (``matrix_world @
        Bone.matrix_local``, metres); a uniform scale in the rotation part is
        removed.
    tails : ndarray (B, 3)
        Rest tails in the output space.
    pose_matrices : ndarray (T, B, 4, 4)
        Each bone's posed matrix in the output space per frame
        (``matrix_world @ PoseBone.matrix``).
    mapping : BoneMapping, optional
        Default: :func:`..retarget.mapping.auto_map`.

    Returns
    -------
    SourceRig
        ``quaternions`` and ``locations`` such that ``pose_rig`` gives back
        the posed heads (and rotations, without scale).
    """
    rest = np.asarray(rest_matrices, dtype=np.float64)
    pose = np.asarray(pose_matrices, dtype=np.float64)
    parents = np.asarray(parents, dtype=np.int64)
    B = len(names)
    Q = _ortho(rest[:, :3, :3])
    h = rest[:, :3, 3]
    ml = np.broadcast_to(np.eye(4), (B, 4, 4)).copy()
    ml[:, :3, :3] = Q
    ml[:, :3, 3] = h
    rig = RigDescription(list(names), parents, ml, h, np.asarray(tails, dtype=np.float64), name=name)
    W = _ortho(pose[..., :3, :3])          # (T, B, 3, 3)
    X = pose[..., :3, 3]                   # (T, B, 3)
    T = pose.shape[0]
    basis = np.empty((T, B, 3, 3))
    loc = np.empty((T, B, 3))
    for b in range(B):
        p = parents[b]
        if p < 0:
            basis[:, b] = Q[b].T @ W[:, b]
            loc[:, b] = (X[:, b] - h[b]) @ Q[b]
        else:
            rel = Q[p].T @ Q[b]
            base = W[:, p] @ rel                                   # (T, 3, 3)
            basis[:, b] = np.swapaxes(base, -1, -2) @ W[:, b]
            expect = X[:, p] + np.einsum("tij,j->ti", W[:, p], Q[p].T @ (h[b] - h[p]))
            loc[:, b] = np.einsum("tji,tj->ti", base, X[:, b] - expect)
    if mapping is None:
        from ..retarget.mapping import auto_map

        mapping = auto_map(rig)
    return SourceRig(rig, mapping, matrix_to_quat(basis), loc)
