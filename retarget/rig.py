"""Plain-data description of a target armature (no ``bpy``).

The Blender layer extracts the arrays with ``foreach_get`` and builds a
:class:`RigDescription`; everything in :mod:`.mapping` and :mod:`.solve` works
on this description only.

Frames
------
*Armature space* is the space of ``Bone.matrix_local`` / ``Bone.head_local``
(the armature object's local space, before ``Object.matrix_world``). All
positions and rotations here are in armature space. ``world_matrix`` is kept
for the Blender layer's convenience; the retarget maths never applies it.

Extraction sketch for the Blender layer::

    bones = arm_obj.data.bones
    n = len(bones)
    ml = np.empty(n * 16, np.float32); bones.foreach_get("matrix_local", ml)
    hd = np.empty(n * 3, np.float32);  bones.foreach_get("head_local", hd)
    tl = np.empty(n * 3, np.float32);  bones.foreach_get("tail_local", tl)
    names = [b.name for b in bones]
    parents = [b.parent.name if b.parent else None for b in bones]
    rig = RigDescription.from_foreach(names, parents, ml, hd, tl,
                                      world_matrix=np.array(arm_obj.matrix_world))

``foreach_get`` returns matrices column-major (Blender's memory order);
:meth:`RigDescription.from_foreach` transposes them.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

import numpy as np

__all__ = ["RigDescription"]


@dataclass
class RigDescription:
    """Rest pose and hierarchy of a target armature.

    Parameters
    ----------
    names : list of str
        Bone names, in the armature's bone order.
    parents : ndarray of int, shape (B,)
        Parent index of each bone, ``-1`` for root bones.
    matrix_local : ndarray, shape (B, 4, 4)
        ``Bone.matrix_local``: rest matrix of each bone in armature space
        (rotation columns = bone X, Y (along the bone), Z axes; translation =
        head position). Row-major (``M @ v``).
    head, tail : ndarray, shape (B, 3)
        ``Bone.head_local`` / ``Bone.tail_local`` in armature space.
    world_matrix : ndarray, shape (4, 4)
        The armature object's ``matrix_world`` (informative only).
    reference_matrix : ndarray, shape (B, 4, 4), optional
        Armature-space bone matrices of a *reference pose* in which the
        character stands in a human pose (T-pose, A-pose...), e.g.
        ``PoseBone.matrix`` at a frame of an imported BVH whose rest is not a
        human pose. When given it replaces the rest pose for *aligning* the
        rig with the canonical T-pose; the outputs stay relative to the rest.
    name : str
        Armature name (informative).
    matrix_world : ndarray (4, 4), optional
        Alias of ``world_matrix`` (Blender's attribute name), init only.
    """

    names: list
    parents: np.ndarray
    matrix_local: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    world_matrix: np.ndarray = field(default_factory=lambda: np.eye(4))
    reference_matrix: np.ndarray | None = None
    name: str = ""
    matrix_world: InitVar[np.ndarray | None] = None

    def __post_init__(self, matrix_world=None):
        if matrix_world is not None:
            self.world_matrix = matrix_world
        self.names = [str(n) for n in self.names]
        self.parents = np.asarray(self.parents, dtype=np.int64).reshape(-1)
        n = len(self.names)
        self.matrix_local = np.asarray(self.matrix_local, dtype=np.float64).reshape(n, 4, 4)
        self.head = np.asarray(self.head, dtype=np.float64).reshape(n, 3)
        self.tail = np.asarray(self.tail, dtype=np.float64).reshape(n, 3)
        self.world_matrix = np.asarray(self.world_matrix, dtype=np.float64).reshape(4, 4)
        if self.reference_matrix is not None:
            self.reference_matrix = np.asarray(self.reference_matrix, dtype=np.float64).reshape(n, 4, 4)
        if len(self.parents) != n:
            raise ValueError(f"{len(self.parents)} parents for {n} bones")
        if len(set(self.names)) != n:
            raise ValueError("bone names must be unique")
        if np.any(self.parents >= n) or np.any(self.parents < -1):
            raise ValueError("parent index out of range")
        self._index = {nm: i for i, nm in enumerate(self.names)}
        self._order = self._topological_order()
        self._children = [[] for _ in range(n)]
        for i, p in enumerate(self.parents):
            if p >= 0:
                self._children[p].append(i)
        depth = np.zeros(n, dtype=np.int64)
        for i in self._order:
            p = self.parents[i]
            depth[i] = 0 if p < 0 else depth[p] + 1
        self.depth = depth
        self._ancestors = None   # (bone -> its ancestors, nearest first; a set of them: built when first asked)

    # -- construction --------------------------------------------------------
    @classmethod
    def from_parent_names(cls, names, parent_names, matrix_local, head, tail, **kwargs) -> "RigDescription":
        """Build from parent *names* (``None`` or ``""`` for roots)."""
        names = [str(n) for n in names]
        index = {nm: i for i, nm in enumerate(names)}
        parents = [-1 if not p else index[p] for p in parent_names]
        return cls(names, parents, matrix_local, head, tail, **kwargs)

    @classmethod
    def from_foreach(cls, names, parent_names, matrix_local_flat, head_flat, tail_flat,
                     world_matrix=None, reference_matrix_flat=None, name="") -> "RigDescription":
        """Build from the flat buffers ``foreach_get`` fills.

        Parameters
        ----------
        matrix_local_flat : array, shape (B*16,)
            ``bones.foreach_get("matrix_local", buf)``: column-major per bone.
        head_flat, tail_flat : array, shape (B*3,)
            ``head_local`` / ``tail_local``.
        world_matrix : array (4, 4), optional
            ``np.array(obj.matrix_world)`` (row-major, as mathutils converts).
        reference_matrix_flat : array, shape (B*16,), optional
            ``pose.bones.foreach_get("matrix", buf)`` of a reference pose
            (column-major too), in the same bone order.
        """
        n = len(names)
        ml = np.asarray(matrix_local_flat, dtype=np.float64).reshape(n, 4, 4).transpose(0, 2, 1)
        ref = None
        if reference_matrix_flat is not None:
            ref = np.asarray(reference_matrix_flat, dtype=np.float64).reshape(n, 4, 4).transpose(0, 2, 1)
        return cls.from_parent_names(
            names, parent_names, ml, head_flat, tail_flat,
            world_matrix=np.eye(4) if world_matrix is None else world_matrix,
            reference_matrix=ref, name=name,
        )

    def to_dict(self) -> dict:
        """JSON-friendly dict (lists)."""
        d = {
            "name": self.name,
            "names": list(self.names),
            "parents": self.parents.tolist(),
            "matrix_local": self.matrix_local.tolist(),
            "head": self.head.tolist(),
            "tail": self.tail.tolist(),
            "world_matrix": self.world_matrix.tolist(),
        }
        if self.reference_matrix is not None:
            d["reference_matrix"] = self.reference_matrix.tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RigDescription":
        """Inverse of :meth:`to_dict`."""
        return cls(d["names"], d["parents"], d["matrix_local"], d["head"], d["tail"],
                   world_matrix=d.get("world_matrix", np.eye(4)),
                   reference_matrix=d.get("reference_matrix"), name=d.get("name", ""))

    # -- queries -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Bone index by name (``KeyError`` if missing)."""
        return self._index[name]

    def has(self, name: str) -> bool:
        """Whether a bone of that name exists."""
        return name in self._index

    def children(self, i: int) -> list:
        """Indices of the direct children of bone ``i``."""
        return list(self._children[i])

    @property
    def order(self) -> list:
        """Bone indices with every parent before its children."""
        return list(self._order)

    def ancestors(self, i: int) -> list:
        """Indices of the ancestors of ``i``, nearest first."""
        return list(self._ancestor_table()[i][0])

    def is_ancestor(self, a: int, b: int) -> bool:
        """Whether bone ``a`` is a strict ancestor of bone ``b``."""
        return a in self._ancestor_table()[b][1]

    def _ancestor_table(self) -> list:
        """Per bone: its ancestors (a tuple, nearest first) and their set; once per rig (a live
        solve asks a hundred times a tick)."""
        if self._ancestors is None:
            table = []
            for i in range(len(self.names)):
                out = []
                p = self.parents[i]
                while p >= 0:
                    out.append(int(p))
                    p = self.parents[p]
                table.append((tuple(out), frozenset(out)))
            self._ancestors = table
        return self._ancestors

    def descendants(self, i: int) -> list:
        """All descendants of ``i`` (depth first)."""
        out, stack = [], list(self._children[i])
        while stack:
            c = stack.pop()
            out.append(c)
            stack.extend(self._children[c])
        return out

    def lca(self, *bones: int) -> int:
        """Lowest common ancestor (a bone counts as its own ancestor); -1 if none."""
        bones = [b for b in bones if b is not None and b >= 0]
        if not bones:
            return -1
        common = None
        for b in bones:
            chain = [b] + self.ancestors(b)
            common = chain if common is None else [c for c in chain if c in set(common)]
        return common[0] if common else -1

    def path(self, a: int, b: int) -> list:
        """Bones strictly between ancestor ``a`` and descendant ``b`` (top-down)."""
        anc = self.ancestors(b)
        if a not in anc:
            return []
        return list(reversed(anc[:anc.index(a)]))

    def rest_rotation(self) -> np.ndarray:
        """Rest rotations (B, 3, 3), orthonormalised (``matrix_local`` has no scale); read-only.

        Computed once per ``matrix_local`` array (Solve Frame and Live Solve
        ask for it several times per solve).
        """
        cached = self.__dict__.get("_rest_rotation")
        if cached is not None and cached[0] is self.matrix_local:
            return cached[1]
        u, _, vt = np.linalg.svd(self.matrix_local[:, :3, :3])
        q = u @ vt
        q.setflags(write=False)
        self.__dict__["_rest_rotation"] = (self.matrix_local, q)
        return q

    def relative_rest(self) -> tuple:
        """``(rel_rot (B, 3, 3), rel_pos (B, 3))``: every bone's rest rotation and head in its parent's
        rest frame (armature space for roots), the rig's forward kinematics constants
        (:func:`..model.kinematics.level_fk`); read-only, computed once per ``matrix_local`` and ``head``.
        """
        cached = self.__dict__.get("_relative_rest")
        if cached is not None and cached[0] is self.matrix_local and cached[1] is self.head:
            return cached[2]
        Q, h = self.rest_rotation(), self.head
        n = len(self.parents)
        rel_rot = np.empty((n, 3, 3))
        rel_pos = np.empty((n, 3))
        for b, p in enumerate(self.parents):
            if p < 0:
                rel_rot[b], rel_pos[b] = Q[b], h[b]
            else:
                rel_rot[b] = Q[p].T @ Q[b]
                rel_pos[b] = Q[p].T @ (h[b] - h[p])
        for a in (rel_rot, rel_pos):
            a.setflags(write=False)
        self.__dict__["_relative_rest"] = (self.matrix_local, self.head, (rel_rot, rel_pos))
        return rel_rot, rel_pos

    def align_matrices(self) -> np.ndarray:
        """Matrices used to align with the canonical T-pose: reference pose or rest."""
        return self.matrix_local if self.reference_matrix is None else self.reference_matrix

    def _topological_order(self) -> list:
        n = len(self.names)
        state = np.zeros(n, dtype=np.int8)
        order = []
        for start in range(n):
            if state[start]:
                continue
            chain = []
            i = start
            while i >= 0 and state[i] == 0:
                state[i] = 1
                chain.append(i)
                i = int(self.parents[i])
            if i >= 0 and state[i] == 1 and i in chain:
                raise ValueError("cycle in bone hierarchy")
            for c in reversed(chain):
                state[c] = 2
                order.append(c)
        return order
