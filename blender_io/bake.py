"""The bake pipeline: canonical keypoints -> solver -> retarget -> a new action.

Shared by the sidebar operators and the CLI. One call does everything::

    result = bake_keypoints(armature, keypoints, mask, 30.0, BakeOptions(), source_name="walk")

Stages
------
1. **Validate** (:meth:`BakeJob.__init__`, nothing in the scene changes):
   the target is an armature, the mapping (given, stored on the armature by
   the mapping operators, or :func:`..retarget.mapping.auto_map`) names
   existing bones and covers a humanoid, the frame slice lies inside the
   input, there are keypoints at all and the required ones
   (:data:`REQUIRED_KEYPOINTS`) are present on every frame, the options are
   known values. Any problem raises :class:`BakeError` with one clear
   message.
2. **Solve** (:meth:`BakeJob.solve`, pure torch/numpy, safe to run in a
   thread): the keypoints are brought into the rig's body frame (armature
   object transform and the rig's facing undone, so the baked character ends
   up where the keypoints are in the world), optionally smoothed, and solved
   by :class:`..model.inference.Solver`.
3. **Retarget** (:meth:`BakeJob.retarget`, numpy): canonical rotations ->
   pose-bone rotations (each bone's ``matrix_basis``) and the root bone's
   location; optional rotation smoothing; foot lock (``foot_lock``: the
   feet planted in the source stay planted, :mod:`..retarget.footlock`);
   quality figures (:mod:`..retarget.metrics`).
4. **Write** (:meth:`BakeJob.write`, main thread): a NEW action named after
   the source (made unique) with a slot of the armature's own (Blender
   4.4+), one ``foreach_set`` per fcurve, assigned to the armature. The
   previous action is kept with a fake user; no existing action, keyframe or
   rest pose is touched.

Root placement: with ``scale`` = target size / source size in armature
units per metre, the pelvis bone's head goes to ``scale * K p`` in armature
space (``p``: the solved pelvis in the body frame, i.e. the armature's frame
with the rig's facing undone; the solver itself gets these keypoints shifted
by the object's world position so that it sees world heights and the floor
at z = 0): with a same-size rig the
motion lands exactly on the keypoints in the world; a smaller rig scales the
trajectory about the armature's origin. ``in_place`` keeps the pelvis over
its rest position horizontally.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..model.skeleton import JOINTS, KEYPOINTS, SPARSE_EFFECTORS, SPARSE_HINTS, Skeleton
from ..retarget.solve import quats_to_euler_continuous
from .rig import NotAnArmatureError, rig_description

__all__ = [
    "BakeOptions",
    "BakeResult",
    "BakeError",
    "BakeCancelled",
    "BakeJob",
    "bake_keypoints",
    "solve_current_frame",
    "get_solver",
    "clear_solver_cache",
    "stored_mapping",
    "store_mapping",
    "resolve_mapping",
    "REQUIRED_KEYPOINTS",
    "SMOOTH_METHODS",
    "SMOOTH_TARGETS",
    "ROTATION_MODES",
    "SOLVE_MODES",
]

#: Keypoints that must be present on every baked frame.
REQUIRED_KEYPOINTS: tuple = SPARSE_EFFECTORS
SMOOTH_METHODS = ("none", "oneeuro", "savgol", "butter")
SMOOTH_TARGETS = ("keypoints", "rotations", "both")
ROTATION_MODES = ("QUATERNION", "BONE")
SOLVE_MODES = ("auto", "dense", "sparse")
#: Name of the Object collection property holding a stored mapping.
MAPPING_PROP = "neural_ik_mapping"

_PELVIS = JOINTS.index("pelvis")


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
    frames : tuple of int or None
        Slice ``(A, B)`` of the source clip (source frames, end exclusive).
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
        Run the solver's optimisation refinement.
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
        Keep the feet planted where the source's are (heel / toe contacts):
        two-bone IK on the legs after rotation smoothing, see
        :mod:`..retarget.footlock`. Fixes the sliding that scaled root motion
        causes on a rig with other proportions; only removes the target
        foot's drift (nothing under 3 mm), with soft IK near full extension
        and a small vertical pelvis move instead of a sharply bent knee.
    scale : float or None
        Armature units per source metre; ``None``: leg-length ratio.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    mode : str
        ``"auto"``, ``"dense"`` or ``"sparse"``.
    action_name : str or None
        Default: the source name; made unique, never overwrites.
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


@dataclass
class BakeResult:
    """What a bake made and how good it is.

    Attributes
    ----------
    action : bpy.types.Action
        The new action (assigned to the armature).
    frames : int
        Number of baked frames.
    fps : float
        Rate of the baked frames.
    frame_start : int
        Scene frame of the first key.
    seconds : dict
        ``{"solve": s, "retarget": s, "write": s}``.
    keypoint_error_mm : tuple of float
        Mean and max distance between the baked joints and the input
        keypoints scaled by the leg-length ratio (mm). Includes the
        proportion differences: a perfect retarget onto a rig with other
        proportions does not score 0 (see ``bone_direction_error_deg``).
    bone_direction_error_deg : float
        Mean angle between the baked bones' directions and the input's
        (degrees): proportion-independent retarget fidelity.
    jitter : float
        Mean acceleration of the baked joints (m/s^2).
    foot_sliding_mm : float
        Mean horizontal heel/toe movement per frame while in contact (mm).
    warnings : list of str
    mapping : BoneMapping
    solve_error_mm : float
        Mean solver fit error (mm, source size).
    retarget : RetargetResult or None
        The retargeted pose-bone values (armature space heads included).
    """

    action: object
    frames: int
    fps: float
    frame_start: int
    seconds: dict
    keypoint_error_mm: tuple
    jitter: float
    foot_sliding_mm: float
    warnings: list
    mapping: object
    solve_error_mm: float = float("nan")
    retarget: object = None
    bone_direction_error_deg: float = float("nan")


# -----------------------------------------------------------------------------
# solver cache

_SOLVERS: dict = {}


def get_solver(device: str = "auto", weights=None):
    """A :class:`..model.inference.Solver`, cached per (device, weights path).

    Raises
    ------
    BakeError
        When the weights are missing or do not load.
    """
    from .. import device as _device

    try:
        from ..model import inference
    except ImportError as ex:  # torch found at registration but broken
        raise BakeError(f"PyTorch does not import ({ex}); reinstall it from the add-on preferences") from None
    try:
        resolved = _device.resolve_device(device)
    except ValueError as ex:
        raise BakeError(str(ex)) from None
    key = (resolved, None if weights is None else str(weights))
    solver = _SOLVERS.get(key)
    if solver is None:
        try:
            solver = inference.Solver(weights=weights, device=resolved)
        except getattr(inference, "WeightsError", OSError) as ex:
            raise BakeError(f"cannot load the network weights: {ex}") from None
        _SOLVERS[key] = solver
    return solver


def clear_solver_cache():
    """Forget cached solvers (frees their memory)."""
    _SOLVERS.clear()


# -----------------------------------------------------------------------------
# mappings stored on the armature object

def stored_mapping(obj):
    """The mapping stored on an armature object, or ``None`` when there is none.

    Entries come from the object's ``neural_ik_mapping`` collection (joint,
    bone, confidence); twist and extra spine bones are recomputed with
    :func:`auto_map` and kept where they do not clash with the entries.
    """
    items = getattr(obj, MAPPING_PROP, None)
    if items is None or len(items) == 0:
        return None
    from ..retarget.mapping import BoneMapping

    entries = {it.joint: it.bone for it in items if it.joint in JOINTS and it.bone}
    confidence = {it.joint: float(it.confidence) for it in items if it.joint in entries}
    mapping = BoneMapping(entries, confidence)
    try:
        from ..retarget.mapping import auto_map
        auto = auto_map(rig_description(obj))
    except Exception:
        return mapping
    used = set(entries.values())
    mapping.twist = {j: [b for b in bones if b not in used] for j, bones in auto.twist.items() if j in entries}
    mapping.extra_spine = [b for b in auto.extra_spine if b not in used]
    return mapping


def store_mapping(obj, mapping):
    """Write ``mapping.entries`` into the armature's ``neural_ik_mapping`` items."""
    items = getattr(obj, MAPPING_PROP)
    items.clear()
    for joint in JOINTS:
        item = items.add()
        item.joint = joint
        item.bone = mapping.entries.get(joint, "")
        item.confidence = float(mapping.confidence.get(joint, 0.0)) if joint in mapping.entries else 0.0


def resolve_mapping(obj, rig, mapping=None):
    """The mapping to use (given, stored or automatic), validated.

    Raises
    ------
    BakeError
        When the mapping names missing bones or is not a usable humanoid.
    """
    from ..retarget.mapping import auto_map, humanoid_check

    origin = "given"
    if mapping is None:
        mapping = stored_mapping(obj)
        origin = "stored"
    if mapping is None:
        mapping = auto_map(rig)
        origin = "automatic"
    errors = mapping.validate(rig)
    if errors:
        raise BakeError(f"the {origin} bone mapping of {obj.name!r} does not fit the armature: "
                        + "; ".join(errors[:4]) + (" ..." if len(errors) > 4 else ""))
    missing = humanoid_check(mapping)
    if missing:
        n = sum(1 for j in JOINTS if j in mapping.entries)
        raise BakeError(f"{obj.name!r} is not usable as a humanoid rig ({n} of {len(JOINTS)} joints mapped, "
                        f"{origin} mapping): " + ", ".join(missing))
    return mapping


# -----------------------------------------------------------------------------
# helpers

def _check_options(options: BakeOptions):
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


#: Foot keypoints and their height above the floor in the canonical rest pose.
_GROUND_POINTS = (("heel_l", 0.0), ("heel_r", 0.0), ("toe_tip_l", 0.0), ("toe_tip_r", 0.0),
                  ("toe_l", 0.03), ("toe_r", 0.03), ("foot_l", 0.08), ("foot_r", 0.08))


def _ground(kp, valid):
    """Shift ``kp`` vertically so its lowest foot point is on the floor.

    Uses heels and toe tips where the source has them, else toes and ankles
    less their rest height. The 1st percentile, not the minimum, so a single
    bad sample does not decide the floor.

    Returns
    -------
    kp : ndarray (T, 32, 3)
    shift : float or None
        Metres added to every z (``None`` when the source has no foot points).
    """
    for names in (_GROUND_POINTS[:4], _GROUND_POINTS[4:]):
        idx = [KEYPOINTS.index(n) for n, _ in names]
        rest = np.array([h for _, h in names])
        z = kp[:, idx, 2] - rest
        z = z[valid[:, idx] & np.isfinite(z)]
        if z.size:
            shift = -float(np.percentile(z, 1.0))
            out = kp.copy()
            out[..., 2] += shift
            return out, shift
    return kp, None


def _scene_fps(scene) -> float:
    return float(scene.render.fps) / float(scene.render.fps_base or 1.0)


def _prepare_keypoints(keypoints, mask):
    kp = np.asarray(keypoints, dtype=np.float64)
    if kp.ndim != 3 or kp.shape[1:] != (len(KEYPOINTS), 3):
        raise BakeError(f"keypoints must have shape (frames, {len(KEYPOINTS)}, 3), got {kp.shape}")
    if kp.shape[0] == 0:
        raise BakeError("the keypoint clip has no frames")
    kp = kp.copy()
    valid = np.isfinite(kp).all(-1)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != valid.shape:
            raise BakeError(f"mask must have shape {valid.shape}, got {m.shape}")
        valid &= m
    kp[~valid] = np.nan
    return kp, valid


def _check_required(kp, valid, offset, mode):
    if not valid.any():
        raise BakeError("every keypoint is missing (all NaN) in the chosen frames")
    for name in REQUIRED_KEYPOINTS:
        k = KEYPOINTS.index(name)
        bad = np.flatnonzero(~valid[:, k])
        if bad.size:
            raise BakeError(f"required keypoint {name!r} is missing on {bad.size} of {len(kp)} frames "
                            f"(first: source frame {int(bad[0]) + offset}); fill the gaps or bake another range")
    if mode == "dense":
        n_joints = valid[:, : len(JOINTS)].sum(1)
        if (n_joints < len(JOINTS) // 2).any():
            raise BakeError("dense mode needs most joints on every frame; use mode 'auto' or 'sparse'")


def _resample(kp, src_fps, fps):
    if abs(fps - src_fps) < 1e-6 or kp.shape[0] < 2:
        return kp
    from ..readers import KeypointClip, resample

    clip = KeypointClip(kp, list(KEYPOINTS), float(src_fps))
    return resample(clip, float(fps)).positions


def _leg_length(skel) -> float:
    o = np.asarray(skel.offsets)
    return float(np.mean([np.linalg.norm(o[JOINTS.index(f"calf_{s}")]) + np.linalg.norm(o[JOINTS.index(f"foot_{s}")])
                          for s in "lr"]))


def _object_frame(obj):
    """(Minv (4,4), unit scale s): world -> armature space, armature units -> metres."""
    m = np.array(obj.matrix_world, dtype=np.float64)
    s = abs(np.linalg.det(m[:3, :3])) ** (1.0 / 3.0)
    if not s > 1e-12:
        raise BakeError(f"the armature {obj.name!r} has a zero scale")
    return np.linalg.inv(m), float(s)


def _axis_angle_continuous(q):
    """Continuous quaternions (T, B, 4) -> axis-angle (angle, x, y, z) (T, B, 4)."""
    w = np.clip(q[..., 0], -1.0, 1.0)
    v = q[..., 1:]
    sin_half = np.linalg.norm(v, axis=-1)
    angle = 2.0 * np.arctan2(sin_half, w)
    axis = np.zeros_like(v)
    ok = sin_half > 1e-9
    axis[ok] = v[ok] / sin_half[ok][:, None]
    axis[~ok] = (0.0, 1.0, 0.0)
    out = np.concatenate([angle[..., None], axis], axis=-1)
    # keep the axis from flipping between frames: (a, n) == (-a, -n)
    for t in range(1, out.shape[0]):
        flip = np.einsum("bi,bi->b", out[t, :, 1:], out[t - 1, :, 1:]) < 0
        out[t, flip] *= -1.0
    return out


def _smooth_call(name, *args):
    try:
        from ..retarget import smoothing
    except ImportError as ex:
        raise BakeError(f"smoothing is not available ({ex})") from None
    return getattr(smoothing, name)(*args)


# -----------------------------------------------------------------------------
# the job

class BakeJob:
    """One bake, split into stages so a modal operator can run the solve in a thread.

    Construct (validates; raises :class:`BakeError`), then call :meth:`solve`
    (no ``bpy``), :meth:`retarget` (no ``bpy``) and :meth:`write` (main
    thread) in order, or :meth:`run` for all three.
    """

    def __init__(self, obj, keypoints, mask, source_fps, options: BakeOptions | None = None, *,
                 source_name: str, mapping=None, solver=None, scene=None):
        import bpy

        from ..retarget.solve import plan_retarget

        options = options or BakeOptions()
        self.options = options
        self.warnings: list = []
        self.seconds: dict = {}
        _check_options(options)
        if obj is None or getattr(obj, "type", None) != "ARMATURE":
            kind = "nothing" if obj is None else f"{obj.name!r} ({obj.type.lower()})"
            raise BakeError(f"the target must be an armature, got {kind}")
        if obj.library is not None:
            raise BakeError(f"{obj.name!r} is linked from a library and cannot be keyed")
        if obj.mode == "EDIT":
            raise BakeError(f"{obj.name!r} is in Edit Mode: leave it so the bones are up to date")
        ad = obj.animation_data
        if ad is not None and getattr(ad, "use_tweak_mode", False):
            raise BakeError(f"{obj.name!r} is in NLA tweak mode: exit it before baking")
        scene = scene or bpy.context.scene
        if not (source_fps and source_fps > 0 and math.isfinite(source_fps)):
            raise BakeError(f"the source frame rate must be positive, got {source_fps}")
        kp, valid = _prepare_keypoints(keypoints, mask)
        total = kp.shape[0]
        a, b = 0, total
        if options.frames is not None:
            a, b = (int(x) for x in options.frames)
            if not (0 <= a < b <= total):
                raise BakeError(f"frame range {a}:{b} is outside the input (source frames 0:{total})")
        kp, valid = kp[a:b], valid[a:b]
        _check_required(kp, valid, a, options.mode)
        if options.ground:
            kp, shift = _ground(kp, valid)
            if shift is not None:
                self.warnings.append(f"grounded: the motion was moved {shift * 100.0:+.1f} cm vertically "
                                     "so that the feet touch the floor")
        self.fps = float(options.fps) if options.fps is not None else _scene_fps(scene)
        self.frame_start = int(options.frame_start if options.frame_start is not None else scene.frame_start)
        self.source_fps = float(source_fps)
        try:
            rig = rig_description(obj)
        except NotAnArmatureError as ex:
            raise BakeError(str(ex)) from None
        if len(rig) == 0:
            raise BakeError(f"the armature {obj.name!r} has no bones")
        self.mapping = resolve_mapping(obj, rig, mapping)
        unsure = [f"{j}->{b}" for j, b in self.mapping.entries.items()
                  if self.mapping.confidence.get(j, 1.0) < 0.6]
        if unsure:
            self.warnings.append("check the mapping, low confidence: " + ", ".join(unsure))
        try:
            self.plan = plan_retarget(rig, self.mapping)
        except ValueError as ex:
            raise BakeError(f"cannot retarget onto {obj.name!r}: {ex}") from None
        if self.plan.root < 0:
            raise BakeError(f"no pelvis bone mapped on {obj.name!r}")
        self.minv, self.unit = _object_frame(obj)
        if self.unit < 0.999 or self.unit > 1.001:
            self.warnings.append(f"armature object scale {self.unit:g}: keypoints converted to its units")

        kp = _resample(kp, self.source_fps, self.fps)
        if kp.shape[0] != b - a:
            self.warnings.append(f"resampled {b - a} frames at {self.source_fps:g} fps to "
                                 f"{kp.shape[0]} frames at {self.fps:g} fps")
        if abs(self.fps - _scene_fps(scene)) > 1e-4 * self.fps:  # fps_base is single precision
            self.warnings.append(f"baked at {self.fps:g} fps but the scene plays at {_scene_fps(scene):g} fps")
        # world -> armature space -> body frame (canonical axes), metres
        K = self.plan.K
        arm = kp @ self.minv[:3, :3].T + self.minv[:3, 3]
        self.kp_body = (arm @ K) * self.unit
        # the solver sees world heights (its floor is z = 0): only the object's
        # rotation and the rig's facing are undone, its translation is added
        # back as a constant offset and removed again when placing the root
        self.offset = -(self.minv[:3, 3] @ K) * self.unit
        self.mask = np.isfinite(self.kp_body).all(-1)
        self.obj = obj
        self.scene = scene
        self.rig = rig
        self.solver = solver
        self.source_name = str(source_name or "Neural IK")
        self.action_name = str(options.action_name).strip() if options.action_name else self.source_name
        self.n_frames = int(self.kp_body.shape[0])
        end = self.frame_start + self.n_frames - 1
        if end > scene.frame_end or self.frame_start < scene.frame_start:
            self.warnings.append(f"keys frames {self.frame_start}-{end}, outside the scene range "
                                 f"{scene.frame_start}-{scene.frame_end}")
        self.solved = None
        self.result = None
        #: Source skeleton given to the solver (None: fitted from the keypoints).
        self.skeleton = None

    # -- stage 2 ---------------------------------------------------------------
    def solve(self, progress=None, cancel=None, batch_size: int = 4096):
        """Run the network (and refinement). No ``bpy``; may run in a thread.

        Parameters
        ----------
        progress : callable, optional
            ``progress(fraction, stage)`` with ``fraction`` in 0..1 of this stage.
        cancel : callable, optional
            Returns true to abort; raises :class:`BakeCancelled` (checked
            after every batch of frames).
        batch_size : int
            Frames per solver batch (smaller: finer progress and cancelling).
        """
        o = self.options
        t0 = time.perf_counter()
        kp = self.kp_body + self.offset
        if o.smooth != "none" and o.smooth_target in ("keypoints", "both"):
            kp = np.asarray(_smooth_call("smooth_keypoints", kp, o.smooth, float(o.smooth_strength), self.fps))
            kp = np.where(self.mask[..., None], kp, np.nan)
        self.kp_solve = kp
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        solver = self.solver or get_solver(o.device)

        def _progress(done, total):
            if cancel is not None and cancel():
                raise BakeCancelled("bake cancelled")
            if progress is not None and total:
                progress(min(done / total, 1.0), "solve")

        try:
            kwargs = {"batch_size": int(batch_size)}
            if self.skeleton is not None:
                kwargs["skeleton"] = self.skeleton
            self.solved = solver.solve(kp, self.mask, mode=o.mode, refine=bool(o.refine), progress=_progress,
                                       **kwargs)
        except BakeCancelled:
            raise
        except ValueError as ex:
            raise BakeError(f"the solver rejected the keypoints: {ex}") from None
        self.seconds["solve"] = time.perf_counter() - t0
        return self.solved

    # -- stage 3 ---------------------------------------------------------------
    def retarget(self):
        """Retarget the solve onto the rig and compute the quality figures (no ``bpy``)."""
        from ..retarget import metrics
        from ..retarget.solve import pose_rig, quat_continuity, retarget, target_keypoints

        if self.solved is None:
            raise RuntimeError("solve() first")
        o = self.options
        t0 = time.perf_counter()
        sol = self.solved
        skel = getattr(sol, "skeleton", None) or Skeleton()
        plan = self.plan
        if o.scale is not None:
            scale = float(o.scale)
        else:
            src_leg = _leg_length(skel)
            scale = plan.leg_length / src_leg if plan.leg_length > 0 and src_leg > 0 else 1.0 / self.unit
        # a source skeleton whose rest root maps onto the rig's rest pelvis:
        # pelvis head = scale * K p (see the module docstring)
        offsets = np.array(skel.offsets, dtype=np.float64)
        offsets[0] = (plan.K.T @ plan.rest_head[plan.root]) / scale + self.offset
        src = Skeleton(offsets, np.array(skel.end_offsets, dtype=np.float64))
        res = retarget(plan, sol.local_rot, sol.root_pos, src, scale=scale, in_place=bool(o.in_place))
        if o.smooth != "none" and o.smooth_target in ("rotations", "both"):
            q = np.asarray(_smooth_call("smooth_rotations", res.quaternions, o.smooth,
                                        float(o.smooth_strength), self.fps))
            q = q / np.linalg.norm(q, axis=-1, keepdims=True)
            res.quaternions = quat_continuity(np.where(res.driven[None, :, None], q, res.quaternions))
            r = plan.root
            loc = _smooth_call("smooth_keypoints", res.locations[:, r:r + 1], o.smooth,
                               float(o.smooth_strength), self.fps)
            res.locations[:, r] = np.asarray(loc)[:, 0]
            _, res.heads = pose_rig(plan.rig, res.quaternions, res.locations)
        if o.foot_lock and self.n_frames >= 3:
            res = self._foot_lock(res, sol, skel)
        self.scale = scale
        tk = target_keypoints(plan, res.quaternions, res.locations) * self.unit   # metres, body axes
        expected = self.kp_body * (scale * self.unit)
        J = len(JOINTS)
        self.keypoint_error_mm = metrics.keypoint_error(tk[:, :J], expected[:, :J], self.mask[:, :J])
        self.bone_direction_error_deg = metrics.bone_direction_error(tk, self.kp_body, self.mask)
        self.jitter = metrics.jitter(tk[:, :J], self.fps)
        self.foot_sliding_mm = metrics.foot_sliding(tk, self.fps)
        self.target_keypoints = tk
        err = np.asarray(getattr(sol, "error_mm", np.array([np.nan])), dtype=np.float64)
        self.solve_error_mm = float(np.nanmean(err)) if np.isfinite(err).any() else float("nan")
        self.result = res
        self.seconds["retarget"] = time.perf_counter() - t0
        return res

    def _foot_lock(self, res, sol, skel):
        """Apply :func:`..retarget.footlock.foot_lock` with contacts from the solved motion."""
        from ..model.skeleton import keypoints_from_fk_np
        from ..retarget.footlock import foot_lock

        root = np.asarray(sol.root_pos, dtype=np.float64)
        src = keypoints_from_fk_np(np.asarray(sol.local_rot, dtype=np.float64), root, skel)
        if self.options.in_place:   # as baked: feet walking under a fixed pelvis are not planted
            src[..., :2] -= (root[:, :2] - root[:1, :2])[:, None]
        out = foot_lock(self.plan, res, src, self.fps)
        rep = out.foot_lock
        if rep.limited_frames:
            self.warnings.append(f"foot lock: {rep.limited_frames} leg-frames more than 3 mm short of their lock "
                                 "(nearly straight legs; feet may slide there)")
        return out

    # -- stage 4 ---------------------------------------------------------------
    def _channels(self):
        """(bone name, data path suffix, values (T, N)) to key, per bone."""
        res = self.result
        pose_bones = self.obj.pose.bones
        rig = self.rig
        keyed = np.array(res.driven, dtype=bool)
        for b in np.flatnonzero(res.driven):   # ancestors keep rest so playback is exact
            for a in rig.ancestors(int(b)):
                keyed[a] = True
        keyed[self.plan.root] = True
        out = []
        mode_changes = []
        eulers = {}
        for b in np.flatnonzero(keyed):
            name = res.bone_names[b]
            pb = pose_bones[name]
            q = res.quaternions[:, b]
            mode = pb.rotation_mode if self.options.rotation_mode == "BONE" else "QUATERNION"
            if mode == "QUATERNION":
                if pb.rotation_mode != "QUATERNION":
                    mode_changes.append(name)
                out.append((name, "rotation_quaternion", q))
            elif mode == "AXIS_ANGLE":
                out.append((name, "rotation_axis_angle", _axis_angle_continuous(q[:, None])[:, 0]))
            else:
                if mode not in eulers:
                    eulers[mode] = []
                eulers[mode].append((b, name))
            if b == self.plan.root:
                out.append((name, "location", res.locations[:, b]))
        for order, bones in eulers.items():
            idx = [b for b, _ in bones]
            e = quats_to_euler_continuous(res.quaternions[:, idx], order)
            for k, (_, name) in enumerate(bones):
                out.append((name, "rotation_euler", e[:, k]))
        return out, mode_changes

    def write(self, progress=None):
        """Create the new action and assign it (main thread).

        Returns
        -------
        BakeResult
        """
        import bpy

        from .actions import ActionWriter

        if self.result is None:
            raise RuntimeError("retarget() first")
        t0 = time.perf_counter()
        obj = self.obj
        channels, mode_changes = self._channels()
        frames = self.frame_start + np.arange(self.n_frames, dtype=np.float64)
        ad = obj.animation_data
        previous = ad.action if ad is not None else None
        previous_slot = getattr(ad, "action_slot", None) if ad is not None else None
        previous_fake = previous.use_fake_user if previous is not None else None
        had_ad = ad is not None
        old_modes = {name: obj.pose.bones[name].rotation_mode for name in mode_changes}
        writer = None
        try:
            writer = ActionWriter(obj, self.action_name)
            for i, (name, prop, values) in enumerate(channels):
                path = f'pose.bones["{bpy.utils.escape_identifier(name)}"].{prop}'
                writer.add_vector(path, frames, np.asarray(values, dtype=np.float64), group=name)
                if progress is not None:
                    progress((i + 1) / len(channels), "write")
            for name in mode_changes:
                obj.pose.bones[name].rotation_mode = "QUATERNION"
            writer.finish(assign=True)
        except Exception:
            # leave nothing half-made behind
            for name, mode in old_modes.items():
                obj.pose.bones[name].rotation_mode = mode
            if writer is not None:
                if had_ad:
                    obj.animation_data.action = previous
                    if previous_slot is not None and hasattr(obj.animation_data, "action_slot"):
                        try:
                            obj.animation_data.action_slot = previous_slot
                        except Exception:
                            pass
                elif obj.animation_data is not None:
                    obj.animation_data_clear()
                if previous is not None:
                    previous.use_fake_user = previous_fake
                bpy.data.actions.remove(writer.action)
            raise
        if mode_changes:
            self.warnings.append(f"rotation mode set to quaternion on {len(mode_changes)} bones")
        if previous is not None:
            self.warnings.append(f"previous action {previous.name!r} kept (fake user)")
        self.seconds["write"] = time.perf_counter() - t0
        return BakeResult(
            action=writer.action,
            frames=self.n_frames,
            fps=self.fps,
            frame_start=self.frame_start,
            seconds=dict(self.seconds),
            keypoint_error_mm=tuple(float(x) for x in self.keypoint_error_mm),
            jitter=float(self.jitter),
            foot_sliding_mm=float(self.foot_sliding_mm),
            bone_direction_error_deg=float(self.bone_direction_error_deg),
            warnings=list(self.warnings),
            mapping=self.mapping,
            solve_error_mm=self.solve_error_mm,
            retarget=self.result,
        )

    def run(self, progress=None, cancel=None):
        """All stages: solve (0-85 %), retarget (85-90 %), write (90-100 %)."""
        def stage(lo, hi):
            if progress is None:
                return None
            return lambda f, name: progress(lo + (hi - lo) * f, name)

        self.solve(stage(0.0, 0.85), cancel)
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        self.retarget()
        if progress is not None:
            progress(0.9, "retarget")
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        return self.write(stage(0.9, 1.0))


def bake_keypoints(obj, keypoints, mask, source_fps, options: BakeOptions | None = None, *, source_name: str,
                   mapping=None, solver=None, progress=None, cancel=None) -> BakeResult:
    """Solve canonical keypoints and bake them onto an armature as a new action.

    Parameters
    ----------
    obj : bpy.types.Object
        Target armature object.
    keypoints : ndarray, shape (T, 32, 3)
        Canonical keypoints, world space, metres, Z up; NaN = missing.
    mask : ndarray of bool, shape (T, 32), or None
        Known keypoints (``None``: the finite ones).
    source_fps : float
        Rate of ``keypoints``.
    options : BakeOptions, optional
    source_name : str
        Names the new action (unless ``options.action_name``).
    mapping : BoneMapping, optional
        Default: the mapping stored on the armature, else :func:`auto_map`.
    solver : Solver, optional
        Default: :func:`get_solver` for ``options.device``.
    progress : callable, optional
        ``progress(fraction, stage)``, fraction 0..1, stage ``"solve"``,
        ``"retarget"`` or ``"write"``.
    cancel : callable, optional
        Polled during the bake; returning true raises :class:`BakeCancelled`
        before anything is written.

    Returns
    -------
    BakeResult

    Raises
    ------
    BakeError
        Bad target, mapping, input or options; nothing in the scene changed.
    BakeCancelled
        ``cancel()`` returned true; nothing in the scene changed.
    """
    job = BakeJob(obj, keypoints, mask, source_fps, options, source_name=source_name,
                  mapping=mapping, solver=solver)
    return job.run(progress, cancel)


def _set_pose(obj, names, quats, locations, root, rotation_mode="BONE"):
    """Set pose-bone rotations (in each bone's mode) and the root location."""
    for b, name in enumerate(names):
        if name is None:
            continue
        pb = obj.pose.bones[name]
        q = quats[b]
        if rotation_mode == "QUATERNION" and pb.rotation_mode != "QUATERNION":
            pb.rotation_mode = "QUATERNION"
        mode = pb.rotation_mode
        if mode == "QUATERNION":
            pb.rotation_quaternion = q
        elif mode == "AXIS_ANGLE":
            pb.rotation_axis_angle = _axis_angle_continuous(q[None, None])[0, 0]
        else:
            pb.rotation_euler = quats_to_euler_continuous(q[None, None], mode)[0, 0]
        if b == root:
            pb.location = locations[b]


def solve_current_frame(obj, keypoints, mask, options: BakeOptions | None = None, *, mapping=None,
                        solver=None) -> dict:
    """Pose the armature's pose bones from one frame of keypoints (no keys).

    Parameters
    ----------
    obj : bpy.types.Object
        Target armature.
    keypoints : ndarray, shape (1, 32, 3)
        World positions (metres, Z up), NaN = missing (sparse effectors are
        enough in ``"auto"``/``"sparse"`` mode).
    mask : ndarray of bool (1, 32) or None
    options : BakeOptions, optional
        ``mode``, ``refine``, ``scale``, ``in_place``, ``device`` and
        ``rotation_mode`` apply (smoothing and frames do not).

    Returns
    -------
    dict
        ``keypoint_error_mm`` (mean, max at the target's size),
        ``bone_direction_error_deg``,
        ``solve_error_mm`` and ``seconds``.
    """
    options = options or BakeOptions()
    kp = np.asarray(keypoints, dtype=np.float64)
    if kp.ndim == 2:
        kp = kp[None]
    single = BakeOptions(**{**options.__dict__, "frames": None, "smooth": "none", "fps": None,
                            "frame_start": None})
    t0 = time.perf_counter()
    job = BakeJob(obj, kp[:1], None if mask is None else np.asarray(mask).reshape(1, -1), 1.0, single,
                  source_name="pose", mapping=mapping, solver=solver)
    job.fps = 1.0
    known = job.mask[0]
    sparse_only = not known[[i for i, n in enumerate(KEYPOINTS) if n not in SPARSE_EFFECTORS + SPARSE_HINTS]].any()
    if single.mode == "sparse" or sparse_only:
        # a few effectors say little about bone lengths: use the rig's own size
        from ..model.skeleton import CANONICAL

        size = job.plan.leg_length * job.unit / _leg_length(CANONICAL) if job.plan.leg_length > 0 else 1.0
        job.skeleton = CANONICAL.scaled(size)
    job.solve()
    res = job.retarget()
    names = [n if (res.driven[b] or b == job.plan.root) else None for b, n in enumerate(res.bone_names)]
    _set_pose(obj, names, res.quaternions[0], res.locations[0], job.plan.root, single.rotation_mode)
    return {
        "keypoint_error_mm": tuple(float(x) for x in job.keypoint_error_mm),
        "bone_direction_error_deg": float(job.bone_direction_error_deg),
        "solve_error_mm": job.solve_error_mm,
        "seconds": time.perf_counter() - t0,
        "warnings": job.warnings,
    }
