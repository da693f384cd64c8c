"""Bake options and the errors of the pipeline (no ``bpy``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BakeOptions", "BakeError", "BakeCancelled", "check_options", "SMOOTH_METHODS", "SMOOTH_TARGETS",
           "ROTATION_MODES", "SOLVE_MODES"]

SMOOTH_METHODS = ("none", "oneeuro", "savgol", "butter")
SMOOTH_TARGETS = ("keypoints", "rotations", "both")
ROTATION_MODES = ("QUATERNION", "BONE")
SOLVE_MODES = ("auto", "dense", "sparse")


class BakeError(ValueError):
    """A user error (bad target, mapping or input); the scene is unchanged."""


class BakeCancelled(Exception):
    """The user cancelled the bake; the scene is unchanged."""


@dataclass
class BakeOptions:
    """How to bake; every field has a usable default.

    Attributes
    ----------
    frame_start : int or None
        Scene frame of the first baked frame (default ``scene.frame_start``).
    frames : tuple or None
        Slice ``(A, B)`` of the source clip (source frames, end exclusive);
        ``None`` for either end means the clip's start or end.
    fps : float or None
        Target rate (default: the scene's); the source is resampled to it.
    smooth : str
        ``"none"``, ``"oneeuro"``, ``"savgol"`` or ``"butter"``.
    smooth_strength : float
        0 (none) .. 1 (strong).
    smooth_target : str
        ``"keypoints"`` (before solving), ``"rotations"`` (after
        retargeting) or ``"both"``.
    refine : bool
        Run the network solver's refinement on the canonical skeleton (the
        rig-space solve always runs).
    rotation_mode : str
        ``"BONE"`` (default: each bone's own mode, Eulers and axis-angle
        made continuous, nothing about the rig changes) or ``"QUATERNION"``
        (keys ``rotation_quaternion`` and switches the baked bones to
        quaternion mode, which the user's Euler actions then no longer drive).
    in_place : bool
        Drop the horizontal root motion.
    ground : bool
        Shift the whole clip vertically so that its lowest foot point
        touches the floor (z = 0): for sources whose floor is elsewhere
        (a BVH whose root channels replace the OFFSET, a camera-space
        capture). The pose is unchanged; the shift is reported.
    foot_lock : bool
        Keep the feet planted where the source's are planted: the source's
        ankle and toe contacts become targets of the rig-space solve
        (:mod:`.targets`), at the rig's scale and with the rig's own foot
        height, so the rig's feet touch the rig's floor where the source's
        touch the source's.
    scale : float or None
        Armature units per source metre; ``None``: leg-length ratio.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    mode : str
        ``"auto"``, ``"dense"`` or ``"sparse"``.
    action_name : str or None
        Default: the source name; made unique, never overwrites.
    rig_iterations : int or None
        Levenberg-Marquardt iterations of the rig-space solve
        (:func:`..retarget.rigsolve.solve_rig`); ``None``: as the start pose
        needs (``pipeline.tuning.RIG_ITERATIONS``).
    """

    frame_start: int | None = None
    frames: tuple | None = None
    fps: float | None = None
    smooth: str = "none"
    smooth_strength: float = 0.5
    smooth_target: str = "both"
    refine: bool = True
    rotation_mode: str = "BONE"
    in_place: bool = False
    ground: bool = False
    foot_lock: bool = True
    scale: float | None = None
    device: str = "auto"
    mode: str = "auto"
    action_name: str | None = None
    rig_iterations: int | None = None


def check_options(options: BakeOptions):
    """Raise :class:`BakeError` for an unknown or out-of-range option."""
    if options.smooth not in SMOOTH_METHODS:
        raise BakeError(f"unknown smoothing method {options.smooth!r}; use one of {', '.join(SMOOTH_METHODS)}")
    if options.smooth_target not in SMOOTH_TARGETS:
        raise BakeError(f"unknown smoothing target {options.smooth_target!r}; use one of {', '.join(SMOOTH_TARGETS)}")
    if options.rotation_mode not in ROTATION_MODES:
        raise BakeError(f"unknown rotation mode {options.rotation_mode!r}; use one of {', '.join(ROTATION_MODES)}")
    if options.mode not in SOLVE_MODES:
        raise BakeError(f"unknown solve mode {options.mode!r}; use one of {', '.join(SOLVE_MODES)}")
    if not 0.0 <= float(options.smooth_strength) <= 1.0:
        raise BakeError(f"smoothing strength must be in 0..1, got {options.smooth_strength}")
    if options.fps is not None and not (options.fps > 0 and math.isfinite(options.fps)):
        raise BakeError(f"fps must be a positive number, got {options.fps}")
    if options.scale is not None and not (options.scale > 0 and math.isfinite(options.scale)):
        raise BakeError(f"scale must be a positive number, got {options.scale}")
    if options.action_name is not None and not str(options.action_name).strip():
        raise BakeError("the action name is empty")
    if options.rig_iterations is not None and not 0 <= int(options.rig_iterations) <= 100:
        raise BakeError(f"rig iterations must be in 0..100, got {options.rig_iterations}")
