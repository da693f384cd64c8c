"""What a keypoint layout is (:class:`Layout`), how point names are matched, and the matrix it makes.

See :mod:`.layouts` for the conventions and the lookup of a layout by name.

No ``bpy`` here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from ..model.skeleton import KEYPOINTS

__all__ = ["Layout", "normalize_name", "canonical_weights"]


def normalize_name(name: str) -> str:
    """Normalised form of a point name used for matching.

    Lower case, without a namespace prefix (anything up to the last ``:`` or
    ``|``, or a leading ``mixamorigN_``), with ``.``, ``-`` and spaces turned
    into ``_``.
    """
    s = str(name).strip()
    s = re.split(r"[:|]", s)[-1]
    s = s.lower()
    s = re.sub(r"^mixamorig\d*_", "", s)
    s = re.sub(r"[\s.\-]+", "_", s)
    return s


@dataclass
class Layout:
    """A keypoint layout.

    Attributes
    ----------
    name : str
        Registry key (``"coco17"``...).
    description : str
        One line for listings.
    joint_names : tuple of str
        Source point names in the source's own order.
    to_canonical : dict
        Source name -> canonical keypoint name (direct correspondences).
    derived : dict
        Canonical keypoint -> tuple of ``(source name, weight)``; weights sum
        to 1. Used when the canonical keypoint has no direct source present.
    notes : str
        The approximations made (joint centres that differ, derived points).
    up_axis : str or None
        The source's usual up axis (``"Z"``, ``"Y"``, ``"-Y"``), a hint used
        when neither the file nor the user says.
    """

    name: str
    description: str
    joint_names: tuple
    to_canonical: dict
    derived: dict = field(default_factory=dict)
    notes: str = ""
    up_axis: str | None = None

    def __post_init__(self):
        self.joint_names = tuple(self.joint_names)
        bad = [c for c in list(self.to_canonical.values()) + list(self.derived) if c not in KEYPOINTS]
        if bad:
            raise ValueError(f"layout {self.name!r}: unknown canonical keypoints {bad}; known: {', '.join(KEYPOINTS)}")
        for c, terms in self.derived.items():
            total = sum(w for _, w in terms)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"layout {self.name!r}: weights of derived {c!r} sum to {total}, not 1")

    def normalized_names(self) -> set:
        """Normalised source names this layout knows."""
        names = set(normalize_name(n) for n in self.joint_names)
        names |= set(normalize_name(n) for n in self.to_canonical)
        for terms in self.derived.values():
            names |= set(normalize_name(s) for s, _ in terms)
        return names

    def to_json(self) -> str:
        """The layout as one JSON string that :func:`get_layout` reads back (for a layout with no
        registry name, e.g. stored on a keypoint object)."""
        return json.dumps({"name": self.name, "description": self.description,
                           "to_canonical": dict(self.to_canonical),
                           "derived": {k: [[s, w] for s, w in v] for k, v in self.derived.items()},
                           "up_axis": self.up_axis}, sort_keys=True)

    def canonical_coverage(self) -> list:
        """Canonical keypoints this layout can give (with all its points present)."""
        return [k for k in KEYPOINTS if k in self.to_canonical.values() or k in self.derived]


def canonical_weights(layout: Layout, source_names) -> tuple[np.ndarray, np.ndarray]:
    """Matrix that maps source points onto canonical keypoints.

    Parameters
    ----------
    layout : Layout
    source_names : sequence of str
        The names in the clip, in its order.

    Returns
    -------
    weights : ndarray, shape (32, J)
        ``canonical = weights @ source`` (per frame and coordinate).
    defined : ndarray of bool, shape (32,)
        Canonical keypoints the layout gives with these source names.
    """
    index = {}
    for j, n in enumerate(source_names):
        index.setdefault(normalize_name(n), j)
    W = np.zeros((len(KEYPOINTS), len(source_names)))
    defined = np.zeros(len(KEYPOINTS), bool)
    for src, kp in layout.to_canonical.items():
        j = index.get(normalize_name(src))
        k = KEYPOINTS.index(kp)
        if j is not None and not defined[k]:
            W[k, j] = 1.0
            defined[k] = True
    for kp, terms in layout.derived.items():
        k = KEYPOINTS.index(kp)
        if defined[k]:
            continue
        js = [index.get(normalize_name(s)) for s, _ in terms]
        if any(j is None for j in js):
            continue
        for j, (_, w) in zip(js, terms):
            W[k, j] += w
        defined[k] = True
    return W, defined
