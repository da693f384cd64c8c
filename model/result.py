"""What a solve returns and which mode keypoints call for: no torch here.

A bake whose source skeleton gives every rotation (a BVH, an FBX, an
armature) never runs the network, and importing torch would cost such a
batch seconds (docs/benchmarks.md#speed-against-blender), so the
pipeline takes these two names from here, not from :mod:`.inference`
(which re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .skeleton import KEYPOINTS, SPARSE_EFFECTORS, SPARSE_HINTS, Skeleton

__all__ = ["SolveResult", "detect_mode"]

_SPARSE_SET = np.zeros(len(KEYPOINTS), dtype=bool)
_SPARSE_SET[[KEYPOINTS.index(n) for n in SPARSE_EFFECTORS + SPARSE_HINTS]] = True


@dataclass
class SolveResult:
    """Result of :meth:`.inference.Solver.solve`.

    Attributes
    ----------
    local_rot : ndarray, shape (T, 22, 3, 3)
        Local joint rotations; row 0 is the root's world orientation. Of the
        ``dtype`` asked of :meth:`.inference.Solver.solve` (float64 by
        default), as are ``root_pos`` and ``keypoints``.
    root_pos : ndarray, shape (T, 3)
        World position of the root (pelvis) joint, metres.
    keypoints : ndarray, shape (T, 32, 3)
        Forward kinematics of the result with ``skeleton``.
    skeleton : Skeleton
        The skeleton used (given or fitted).
    error_mm : ndarray, shape (T,)
        Mean distance (mm) between the result and the given keypoints (NaN
        for a frame with none given).
    mode : str
        ``"dense"`` or ``"sparse"``.
    seconds : dict
        Wall time of the ``network`` and ``refine`` stages (and ``total``;
        on CUDA the stages are GPU time).
    device : str
        Where the frames were solved (``"cpu"`` or ``"cuda"``).
    """

    local_rot: np.ndarray
    root_pos: np.ndarray
    keypoints: np.ndarray
    skeleton: Skeleton
    error_mm: np.ndarray
    mode: str = "dense"
    seconds: dict = field(default_factory=dict)
    device: str = "cpu"


def detect_mode(mask: np.ndarray) -> str:
    """``"sparse"`` when only effectors/hints are given in any frame, else ``"dense"``."""
    mask = np.asarray(mask, dtype=bool).reshape(-1, len(KEYPOINTS))
    given = mask.any(0)
    return "sparse" if given.any() and not (given & ~_SPARSE_SET).any() else "dense"
