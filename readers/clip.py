"""What every reader returns: a :class:`KeypointClip`, or a :class:`KeypointReadError` naming the file.

No ``bpy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import UserError, worded
from .layouts import Layout

__all__ = ["KeypointReadError", "KeypointClip"]


class KeypointReadError(UserError, ValueError):
    """A keypoint file that cannot be used; the message names the file and the problem (and may name the
    setting to change: :func:`..errors.setting`)."""

    def __init__(self, path, problem):
        self.path = str(path)
        super().__init__(f"{self.path}: {problem}")
        self.problem = worded(problem)


@dataclass
class KeypointClip:
    """Keypoints read from a file, converted to the canonical frame.

    Attributes
    ----------
    positions : ndarray, shape (T, J, 3), float64
        Metres, Z up, the body facing -Y as in the source; NaN = missing.
    joint_names : list of str
        Source point names, in source order.
    fps : float
        Frames per second.
    confidence : ndarray, shape (T, J), or None
        Per-point confidence in [0, 1] (MediaPipe visibility...).
    source : str
        The file read.
    layout : str or None
        Name of the layout (detected or given); ``None`` when unknown.
    units : str
        Source units (``"m"``, ``"cm"``...) detected, given or guessed.
    up_axis : str
        Source up axis (``"Z"``, ``"Y"``, ``"-Y"``, ``"-Z"``).
    warnings : list of str
        What was assumed, filled or masked, for the user to see.
    mapping : Layout or None
        The layout object itself (a user mapping has no registry name).
    source_rig : SourceRig or None
        For sources with a hierarchy (BVH, FBX/glTF, armatures): the source
        skeleton and its motion in this clip's space (see
        :mod:`.source_rig`); ``None`` for keypoint formats.
    floor_shift : float
        Metres added to every height to put the lowest foot point on the
        floor (0 when not grounded).
    """

    positions: np.ndarray
    joint_names: list
    fps: float
    confidence: np.ndarray | None = None
    source: str = ""
    layout: str | None = None
    units: str = "m"
    up_axis: str = "Z"
    warnings: list = field(default_factory=list)
    mapping: Layout | None = field(default=None, repr=False, compare=False)
    source_rig: object = field(default=None, repr=False, compare=False)
    floor_shift: float = 0.0

    @property
    def num_frames(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_joints(self) -> int:
        return int(self.positions.shape[1])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps if self.fps > 0 else 0.0

    def frames(self, start: int, stop: int) -> "KeypointClip":
        """Source frames ``start:stop`` (end exclusive) as a new clip (the source rig's motion too)."""
        n = self.num_frames
        a, b = max(0, int(start)), min(n, int(stop))
        if not a < b:
            raise ValueError(f"frame range {start}:{stop} is outside the clip (frames 0:{n})")
        return replace(self, positions=self.positions[a:b].copy(),
                       confidence=None if self.confidence is None else self.confidence[a:b].copy(),
                       warnings=list(self.warnings),
                       source_rig=None if self.source_rig is None else self.source_rig.frames(a, b))
