"""Bake options, declared once, and the errors of the pipeline (no ``bpy``).

Every setting a front end offers is declared here once (:class:`Setting`): its
option name (a :class:`BakeOptions` field or a reader's keyword), the label of
its field in Blender (the command line's flag is the label's words:
``Smooth Strength`` -> ``--smooth-strength``), its help, default and choices.
The CLI's argparse arguments (``cli/arguments.py``) and the sidebar's property
group (``properties.py``) are built from these declarations, and an error or a
warning names a setting by its option name (:func:`..errors.setting`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UserError
from ..retarget.smoothing import METHODS

__all__ = ["BakeOptions", "BakeError", "BakeCancelled", "check_options", "Setting", "Choice", "BAKE_SETTINGS",
           "SOURCE_SETTINGS", "SETTINGS", "find_setting", "SMOOTH_METHODS", "SMOOTH_TARGETS", "ROTATION_MODES",
           "SOLVE_MODES", "UNIT_CHOICES", "UP_AXIS_CHOICES"]


class BakeError(UserError, ValueError):
    """A user error (bad target, mapping or input); the scene is unchanged."""


class BakeCancelled(Exception):
    """The user cancelled the bake; the scene is unchanged."""


@dataclass(frozen=True)
class Choice:
    """One value of a setting with choices: the value, its label in Blender's menu, and what it means."""

    value: str
    label: str
    help: str


@dataclass(frozen=True)
class Setting:
    """A setting both front ends offer, declared once.

    Attributes
    ----------
    name : str
        Option name: the :class:`BakeOptions` field or the reader's keyword.
    label : str
        The field's label in Blender; the command line's flag is its words
        joined by dashes (:attr:`flag`).
    help : str
        What it does, one sentence without the default: the flag's help (the
        CLI adds the default) and the field's tooltip.
    default : object
        ``None``: detected or automatic (the help says how).
    choices : tuple of Choice
    where : str
        Where the field is in Blender (for messages: "'Units' in the import options").
    minimum, maximum : float, optional
        Range of a number.
    """

    name: str
    label: str
    help: str
    default: object = None
    choices: tuple = ()
    where: str = "the Solve & Bake panel"
    minimum: float | None = None
    maximum: float | None = None

    @property
    def values(self) -> tuple:
        """The choices' values."""
        return tuple(c.value for c in self.choices)

    @property
    def tooltip(self) -> str:
        """The help as the field's tooltip: a sentence."""
        return self.help[:1].upper() + self.help[1:]

    @property
    def flag(self) -> str:
        """The command line's flag: the label's words, lower case, joined by dashes."""
        return "--" + self.label.lower().replace(" ", "-")


_SMOOTH_LABELS = {
    "none": ("None", "No smoothing"),
    "oneeuro": ("One Euro", "Adaptive low-pass: strong on slow motion, follows fast motion"),
    "savgol": ("Savitzky-Golay", "Zero-phase polynomial smoothing"),
    "butter": ("Butterworth", "Zero-phase low-pass filter"),
}

#: The bake's settings, in the order the Solve & Bake panel and ``--help`` show them.
BAKE_SETTINGS = (
    Setting("mode", "Mode", "which solve: dense (most keypoints known), sparse (pelvis, head, hands, feet), or "
            "auto: sparse when the source holds only effectors", "auto", (
                Choice("auto", "Auto", "Dense when most joints are known, sparse when only effectors are"),
                Choice("dense", "Dense", "Full-body keypoints (motion capture, pose estimation)"),
                Choice("sparse", "Sparse", "Only hands, feet, head and pelvis (and optional elbow/knee hints)"))),
    Setting("smooth", "Smooth", "temporal filter against jitter", "none",
            tuple(Choice(m, *_SMOOTH_LABELS[m]) for m in METHODS)),   # (the filters' own list: one list)
    Setting("smooth_strength", "Smooth Strength", "how strongly to smooth, between 0 (not at all) and 1", 0.5,
            minimum=0.0, maximum=1.0),
    Setting("smooth_target", "Smooth Target", "what the smoothing filters: the input keypoints (before solving), "
            "the baked rotations or both", "both", (
                Choice("keypoints", "Keypoints", "Filter the input keypoints before solving"),
                Choice("rotations", "Rotations", "Filter the baked bone rotations"),
                Choice("both", "Both", "Filter keypoints and rotations"))),
    Setting("refine", "Refine", "polish the network's answer with a few optimisation steps (more accurate, "
            "slower)", True),
    Setting("rotation_mode", "Rotation Mode", "which rotation channels the bake keys: quaternions (the baked "
            "bones switched to quaternion mode) or each bone's own rotation mode (the rig's settings untouched)",
            "BONE", (
                Choice("QUATERNION", "Quaternion", "Key quaternions (baked bones are set to quaternion mode)"),
                Choice("BONE", "Bone's Own",
                       "Key each bone's own rotation mode (Euler orders, axis-angle), made continuous"))),
    Setting("in_place", "In Place", "drop the horizontal root motion (the character walks on the spot)", False),
    Setting("ground", "Ground", "move the whole clip up or down at the bake so that its lowest foot point "
            "touches the floor (a file is grounded when it is read: the import's Ground); off, effectors keyed in "
            "the air stay there; the pose is unchanged", False),
    Setting("foot_lock", "Foot Lock", "keep the feet planted where the source's feet are planted, on the rig's "
            "floor: the source's foot contacts are targets of the solve on the rig, so a rig with other "
            "proportions neither slides nor floats", True),
    Setting("scale", "Scale", "armature units per source metre for the root motion", None, minimum=1e-4),
)

#: Units a source (or a BVH target) may be in; the readers know their lengths (``readers/units.py``).
UNIT_CHOICES = (
    Choice("m", "Metres", "The file's lengths are in metres"),
    Choice("cm", "Centimetres", "The file's lengths are in centimetres (Mixamo, Rokoko, many FBX)"),
    Choice("mm", "Millimetres", "The file's lengths are in millimetres (Vicon, C3D, TRC)"),
    Choice("dm", "Decimetres", "The file's lengths are in decimetres"),
    Choice("in", "Inches", "The file's lengths are in inches"),
    Choice("ft", "Feet", "The file's lengths are in feet"),
    Choice("cmu", "CMU Units", "The CMU database's length unit, 1/0.45 inch"),
)
#: Up axes of a source (or a BVH target).
UP_AXIS_CHOICES = (
    Choice("Z", "Z Up", "Up is +Z (Blender)"),
    Choice("Y", "Y Up", "Up is +Y (BVH, glTF, Maya, most mocap and pose estimators' world frames)"),
    Choice("-Y", "-Y Up", "Up is -Y (image-like frames: y grows downwards)"),
    Choice("-Z", "-Z Up", "Up is -Z"),
)

_IMPORT = "the import options"
_COMMAND_LINE = "the command line"
#: How a source file is read: the import dialog's settings and the command line's source flags.
SOURCE_SETTINGS = (
    Setting("layout", "Layout", "keypoint layout of the file (which point is which joint)", where=_IMPORT),
    Setting("units", "Units", "length unit of the file", choices=UNIT_CHOICES, where=_IMPORT),
    Setting("up_axis", "Up Axis", "up axis of the file", choices=UP_AXIS_CHOICES, where=_IMPORT),
    Setting("source_fps", "Source FPS", "frames per second of the file", where=_IMPORT),
    Setting("ground", "Ground", "put a clip whose feet do not stand on its own floor (a floating or "
            "hips-origin file) on the floor, z = 0, and report the shift; a clip that stands keeps its "
            "heights; off: keep any file's heights", True, where=_IMPORT),
    Setting("image_size", "Image Size", "width and height in pixels of the video that MediaPipe image landmarks "
            "(.json, x and y between 0 and 1) were taken from: lifts them to 3D", where=_COMMAND_LINE),
)

#: Settings a message may name that only the command line has (the target rig, the outputs).
OTHER_SETTINGS = tuple(Setting(name, label, "", where=_COMMAND_LINE) for name, label in (
    ("target", "Target"), ("armature", "Armature"), ("target_units", "Target Units"),
    ("target_up_axis", "Target Up Axis"), ("mapping", "Mapping"), ("frames", "Frames"), ("fps", "FPS"),
    ("frame_start", "Frame Start"), ("max_frames", "Max Frames"), ("export", "Export"), ("out", "Out"),
    ("preview", "Preview")))

#: Every declared setting by option name; where a source and a bake setting share a name (``ground``), the
#: source's: the readers' messages name it.
SETTINGS = {s.name: s for s in OTHER_SETTINGS + BAKE_SETTINGS + SOURCE_SETTINGS}
_BAKE = {s.name: s for s in BAKE_SETTINGS}

SMOOTH_METHODS = _BAKE["smooth"].values
SMOOTH_TARGETS = _BAKE["smooth_target"].values
ROTATION_MODES = _BAKE["rotation_mode"].values
SOLVE_MODES = _BAKE["mode"].values


def find_setting(name: str, bake: bool = False) -> Setting | None:
    """The declaration of the setting ``name`` (``bake``: the bake's own where a source setting shares the
    name), ``None`` when none is declared."""
    return (_BAKE.get(name) if bake else None) or SETTINGS.get(name)


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
