"""The Blender side of a bake: read the rig, run the pipeline, write a new action.

Shared by the sidebar operators and the CLI. One call does everything::

    result = bake_keypoints(armature, keypoints, mask, 30.0, BakeOptions(), source_name="walk")

Everything that computes is in :mod:`..pipeline` (no ``bpy``): this module
only reads the armature (:func:`.rig.rig_description`, the mapping, locked
rotation axes, the object's transform and the scene's rate), hands them to
:class:`..pipeline.RigBake`, and writes its result:

1. **Validate** (:class:`BakeJob` constructor, nothing in the scene changes):
   the target is an armature in Object or Pose Mode, the mapping (given,
   stored on the armature by the mapping operators, or
   :func:`..retarget.rigify.map_target`) covers a humanoid, and everything the
   pipeline checks (:mod:`..pipeline.prepare`). Any problem raises
   :class:`BakeError` with one clear message.
2. **Solve** and **fit** (:meth:`BakeJob.solve`, :meth:`BakeJob.retarget`,
   pure, safe in a worker thread): the start pose, then the rig-space solve
   on the rig's own bones, then the figures.
3. **Write** (:meth:`BakeJob.write`, main thread): a NEW action named after
   the source (made unique) with a slot of the armature's own (Blender
   4.4+), one ``foreach_set`` per fcurve, assigned to the armature (or, with
   ``BakeJob.into = "NLA"``, played from a strip on a new NLA track:
   :func:`.actions.push_to_nla`). The previous action is kept with a fake
   user; no existing action, keyframe or rest pose is touched. On a
   generated Rigify rig's controls the rig's switches and the controls kept
   at rest are keyed too (:mod:`.rigify`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..errors import template_of
from ..pipeline import BakeCancelled, BakeError, BakeOptions, RigBake, clear_solver_cache, get_solver
from ..pipeline.keys import key_channels
from ..pipeline.options import ROTATION_MODES, SMOOTH_METHODS, SMOOTH_TARGETS, SOLVE_MODES
from ..pipeline.prepare import REQUIRED_KEYPOINTS
from ..pipeline.preview import preview_pose
from ..readers.bvh_armature import FileArmature
from ..retarget.rigify import skeleton_for
from .bake_keys import finite_keys, write_action
from .mapping_store import auto_mapping, resolve_mapping, store_mapping, stored_mapping
from .rig import NotAnArmatureError, rig_description
from .rigify import rigify_keys

__all__ = [
    "BakeOptions",
    "BakeResult",
    "BakeError",
    "BakeCancelled",
    "BakeJob",
    "bake_keypoints",
    "get_solver",
    "clear_solver_cache",
    "auto_mapping",
    "stored_mapping",
    "store_mapping",
    "resolve_mapping",
    "REQUIRED_KEYPOINTS",
    "SMOOTH_METHODS",
    "SMOOTH_TARGETS",
    "ROTATION_MODES",
    "SOLVE_MODES",
]


@dataclass
class BakeResult:
    """What a bake made and how good it is.

    Attributes
    ----------
    action : bpy.types.Action or None
        The new action (assigned to the armature); ``None`` on a file's
        armature (see ``keys``).
    frames : int
        Number of baked frames.
    fps : float
        Rate of the baked frames.
    frame_start : int
        Scene frame of the first key.
    seconds : dict
        ``{"solve": s, "fit": s, "write": s}``.
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
        The baked pose-bone values (armature space heads included).
    figures : pipeline.BakeFigures
        What a user sees on the rig: effector reach, floor error, joint
        error at the rig's scale, upright share, knees bent backwards.
    mode : str
        ``"dense"`` or ``"sparse"``.
    start : str
        Which path gave the start pose: ``"network"`` (the keypoints through the network) or
        ``"source"`` (a source skeleton's own rotations, copied; the network did not run).
    devices : dict or None
        Where the stages ran: ``{"network": "cpu" or "cuda" (None where it did not run),
        "rig_solve": "cpu" or "cuda"}``.
    keys : dict or None
        A bake onto a file's armature (no action): ``(property, bone index,
        array index) -> (T,) float32`` per keyed channel.
    rotation_modes : list of str or None
        A bake onto a file's armature: each bone's rotation mode after it.
    preview : pipeline.preview.PreviewPose or None
        A few frames of the bake as arrays, where asked for (a contact sheet).
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
    figures: object = None
    mode: str = ""
    start: str = ""
    devices: dict | None = None
    keys: dict | None = None
    rotation_modes: list | None = None
    preview: object = None


# -----------------------------------------------------------------------------
# helpers

def _scene_fps(scene) -> float:
    return float(scene.render.fps) / float(scene.render.fps_base or 1.0)


def _locked_axes(obj, rig, mapping) -> dict:
    """Bone index -> (3,) bool of ``PoseBone.lock_rotation`` where any axis is locked, for the bones the
    solve turns (the mapped ones and those between them: a locked helper bone elsewhere is no news)."""
    from ..retarget.rigsolve import free_bones

    mapped = [rig.index(b) for b in mapping.entries.values()]
    free = set(free_bones(rig, mapped, rig.index(mapping.entries["pelvis"])))
    pbs = obj.pose.bones
    buf = np.zeros(len(pbs) * 3, dtype=bool)
    pbs.foreach_get("lock_rotation", buf)
    buf = buf.reshape(-1, 3)
    out = {}
    for i in np.flatnonzero(buf.any(axis=1)):
        name = pbs[int(i)].name
        if rig.has(name) and rig.index(name) in free:
            out[rig.index(name)] = buf[i].copy()
    return out


# -----------------------------------------------------------------------------
# the job

#: A file's armature whose clip is at most this long is measured while its keys are written
#: and exported (:meth:`BakeJob.run`): longer clips release the result's arrays as they write
#: (their memory), which the figures read.
OVERLAP_MAX_FRAMES = 20_000


class BakeJob:
    """One bake onto an armature object: the Blender side of :class:`..pipeline.RigBake`.

    Construct (validates; raises :class:`BakeError`), then call :meth:`solve`
    and :meth:`retarget` (no ``bpy``; a worker thread may run them) and
    :meth:`write` (main thread) in order, or :meth:`run` for all three.
    """

    def __init__(self, obj, keypoints, mask, source_fps, options: BakeOptions | None = None, *,
                 source_name: str, mapping=None, solver=None, scene=None, source_rig=None):
        options = options or BakeOptions()
        file_armature = isinstance(obj, FileArmature)   # no Blender scene (see write())
        rig, scene = (obj.rig, None) if file_armature else self._read_object(obj, scene)
        if len(rig) == 0:
            raise BakeError(f"the armature {obj.name!r} has no bones")
        mapping = resolve_mapping(obj, rig, mapping)
        self.constant_keys = [] if file_armature else rigify_keys(obj, rig, mapping)
        rig = skeleton_for(rig, mapping)
        warnings = []
        unsure = [f"{j}->{b}" for j, b in mapping.entries.items() if mapping.confidence.get(j, 1.0) < 0.6]
        if unsure:
            warnings.append("check the mapping, low confidence: " + ", ".join(unsure))
        if not file_armature:
            pose_bones = obj.pose.bones
            constrained = [name for name in dict.fromkeys(mapping.entries.values())
                           if (pb := pose_bones.get(name)) is not None
                           and any(c.enabled and c.influence > 0 for c in pb.constraints)]
            if constrained:
                warnings.append("constraints on " + ", ".join(constrained[:6])
                                + (" ..." if len(constrained) > 6 else "")
                                + " override the baked keys: mute them to see the bake")
        locked = {} if file_armature else _locked_axes(obj, rig, mapping)
        if options.fps is not None:
            fps = float(options.fps)
        else:
            fps = _scene_fps(scene) if scene is not None else float(source_fps)
        try:
            self.core = RigBake(rig, mapping, keypoints, mask, source_fps, options,
                                object_matrix=np.array(rig.world_matrix, dtype=np.float64), fps=fps,
                                source_rig=source_rig, locked=locked, solver=solver, source_name=source_name)
        except BakeError as ex:
            raise BakeError(f"{obj.name!r}: {template_of(ex)}") from None
        core = self.core
        core.warnings[:0] = warnings
        if locked:
            names = [rig.names[b] for b in locked]
            core.warnings.append("locked rotation axes kept on " + ", ".join(names[:6])
                                 + (" ..." if len(names) > 6 else ""))
        self.options = options
        self.obj = obj
        self.scene = scene
        self.rig = rig
        self.mapping = mapping
        self.plan = core.plan
        self.fps = core.fps
        if options.frame_start is not None:
            self.frame_start = int(options.frame_start)
        else:
            self.frame_start = int(scene.frame_start) if scene is not None else 1
        self.source_name = core.source_name
        self.action_name = str(options.action_name).strip() if options.action_name else self.source_name
        self.n_frames = core.n_frames
        if scene is not None:
            if abs(self.fps - _scene_fps(scene)) > 1e-4 * self.fps:  # fps_base is single precision
                core.warnings.append(f"baked at {self.fps:g} fps but the scene plays at {_scene_fps(scene):g} fps")
            end = self.frame_start + self.n_frames - 1
            if end > scene.frame_end or self.frame_start < scene.frame_start:
                core.warnings.append(f"keys frames {self.frame_start}-{end}, outside the scene range "
                                     f"{scene.frame_start}-{scene.frame_end}")
        self.seconds = core.seconds
        #: Where :meth:`write` puts the keys: ``"ACTION"`` (a new active action) or ``"NLA"`` (a new
        #: action played from a strip on a new NLA track, see :func:`.actions.push_to_nla`).
        self.into = "ACTION"

    @staticmethod
    def _read_object(obj, scene):
        """Check an armature object and read its rest: ``(rig, scene)``."""
        import bpy

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
        try:
            return rig_description(obj), scene or bpy.context.scene
        except NotAnArmatureError as ex:
            raise BakeError(template_of(ex)) from None

    @property
    def warnings(self) -> list:
        return self.core.warnings

    @property
    def solver(self):
        return self.core.solver

    @solver.setter
    def solver(self, value):
        self.core.solver = value

    @property
    def result(self):
        return self.core.result

    # -- stages 2 and 3 (no bpy) ------------------------------------------------
    def solve(self, progress=None, cancel=None, batch_size: int = 4096):
        """The start pose (see :meth:`..pipeline.RigBake.solve`)."""
        return self.core.solve(progress, cancel, batch_size=batch_size)

    def retarget(self, progress=None, cancel=None):
        """The rig-space solve and the figures (see :meth:`..pipeline.RigBake.fit`)."""
        res = self.core.fit(progress, cancel)
        self.core.measure()
        return res

    # -- stage 4 ---------------------------------------------------------------
    def _bone_mode(self, name):
        """A bone's current rotation mode (the pose bone's, or the file armature's)."""
        if isinstance(self.obj, FileArmature):
            return self.obj.rotation_modes[self.rig.index(name)]
        return self.obj.pose.bones[name].rotation_mode

    def _channels(self, release=False):
        """:func:`..pipeline.keys.key_channels` of the result on this armature."""
        return key_channels(self.result, self.plan.rig, self.plan.root, self._bone_mode, self.options.rotation_mode,
                            release=release)

    def write(self, progress=None, *, keep_pose: bool = True):
        """Create the new action and assign it (main thread); on a file's armature, the keys as arrays.

        Parameters
        ----------
        progress : callable, optional
        keep_pose : bool
            ``False``: what the keys do not need of the result is released
            before they are written (a long clip's keys need the memory;
            the CLI reads the action, not ``retarget``): the posed heads
            and the locations of every bone but the root at once, each
            bone's rotations once its channel is written
            (``retarget.quaternions`` is then ``None``).

        Returns
        -------
        BakeResult
            On a :class:`..readers.bvh_armature.FileArmature` no action
            (``None``): ``keys`` holds what the fcurves would (one float32
            array per channel, as Blender stores keys) and ``rotation_modes``
            the bones' modes after the bake.
        """
        if self.result is None:
            raise RuntimeError("retarget() first")
        t0 = time.perf_counter()
        self.core.release()    # the keys take memory of their own: the solve's and fit's arrays go first
        if not keep_pose:
            res, r = self.result, self.plan.root
            res.heads = None
            root_loc = np.zeros_like(res.locations[:, :r + 1])    # (T, root + 1, 3): indices stay valid
            root_loc[:, r] = res.locations[:, r]
            res.locations = root_loc
        obj = self.obj
        if isinstance(obj, FileArmature):
            keys, modes = self._file_keys(progress, release=not keep_pose)
            self.seconds["write"] = time.perf_counter() - t0
            return self._result(None, keys=keys, rotation_modes=modes)
        channels, mode_changes = self._channels(release=not keep_pose)
        frames = self.frame_start + np.arange(self.n_frames, dtype=np.float64)
        action, previous = write_action(obj, self.action_name, frames, channels, self.constant_keys, mode_changes,
                                        self.into, self.frame_start, progress)
        if mode_changes:
            self.warnings.append(f"rotation mode set to quaternion on {len(mode_changes)} bones")
        if previous is not None and self.into == "NLA":
            self.warnings.append(f"the active action {previous.name!r} was pushed down onto an NLA track below")
        elif previous is not None:
            self.warnings.append(f"previous action {previous.name!r} kept (fake user)")
        self.seconds["write"] = time.perf_counter() - t0
        return self._result(action)

    def _file_keys(self, progress=None, release=False):
        """The keys of the result on a file's armature: ``(keys, rotation_modes)`` (see :meth:`write`)."""
        channels, mode_changes = self._channels(release=release)
        keys = {}
        for i, (name, prop, values) in enumerate(channels):
            b = self.rig.index(name)
            v = finite_keys(np.asarray(values(), dtype=np.float32), name, prop)
            for k in range(v.shape[1]):
                keys[(prop, b, k)] = np.ascontiguousarray(v[:, k])
            if progress is not None:
                progress((i + 1) / len(channels), "write")
        modes = list(self.obj.rotation_modes)
        for name in mode_changes:
            modes[self.rig.index(name)] = "QUATERNION"
        if mode_changes:
            self.warnings.append(f"rotation mode set to quaternion on {len(mode_changes)} bones")
        return keys, modes

    def _result(self, action, **extra):
        f = self.core.figures
        return BakeResult(
            action=action,
            frames=self.n_frames,
            fps=self.fps,
            frame_start=self.frame_start,
            seconds=dict(self.seconds),
            keypoint_error_mm=tuple(float(x) for x in f.joint_error_mm),
            jitter=float(f.jitter),
            foot_sliding_mm=float(f.foot_sliding_mm),
            bone_direction_error_deg=float(f.bone_direction_error_deg),
            warnings=list(self.warnings),
            mapping=self.mapping,
            solve_error_mm=float(np.nanmean(getattr(self.core.solved, "error_mm", [np.nan]))),
            retarget=self.result,
            figures=f,
            mode=self.core.mode,
            start=self.core.start,
            devices={"rig_solve": str(self.core.rig_device),
                     "network": (str(getattr(self.core.solved, "device", "cpu"))
                                 if self.core.start == "network" else None)},
            **extra,
        )

    def run(self, progress=None, cancel=None, *, keep_pose: bool = True, after_keys=None, preview: int = 0):
        """All stages: solve (0-50 %), fit on the rig (50-90 %), write (90-100 %) (see :meth:`write`).

        ``preview``: that many frames of the bake kept as arrays for a
        contact sheet (the result's ``preview``, a
        :class:`..pipeline.preview.PreviewPose`), taken before the fit's
        arrays are let go.

        ``after_keys(partial)``, on a file's armature: called with the keys
        as soon as they are written (``keys``, ``rotation_modes``,
        ``frames``, ``fps``, ``frame_start`` of the result to come; the CLI
        writes the clip's BVH files there). A clip of up to :data:`OVERLAP_MAX_FRAMES`
        frames is measured (:meth:`..pipeline.RigBake.measure`) on a second
        thread meanwhile: both only read the result, and the figures take
        about as long as the exports, so they come for free.
        """
        def stage(lo, hi):
            if progress is None:
                return None
            return lambda f, name: progress(lo + (hi - lo) * f, name)

        self.solve(stage(0.0, 0.5), cancel)
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        overlap = (after_keys is not None and isinstance(self.obj, FileArmature)
                   and self.n_frames <= OVERLAP_MAX_FRAMES)
        if not overlap:
            self.retarget(stage(0.5, 0.9), cancel)
            if cancel is not None and cancel():
                raise BakeCancelled("bake cancelled")
            shown = preview_pose(self.core, preview) if preview else None
            result = self.write(stage(0.9, 1.0), keep_pose=keep_pose)
            result.preview = shown
            if after_keys is not None:
                after_keys(result)
            return result
        from concurrent.futures import ThreadPoolExecutor

        self.core.fit(stage(0.5, 0.9), cancel)
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        shown = preview_pose(self.core, preview) if preview else None
        t0 = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=1)
        figures = pool.submit(self.core.measure)
        try:
            # (nothing released while the figures read the result)
            keys, modes = self._file_keys(stage(0.9, 1.0))
            self.seconds["write"] = time.perf_counter() - t0
            after_keys(SimpleNamespace(keys=keys, rotation_modes=modes, frames=self.n_frames, fps=self.fps,
                                       frame_start=self.frame_start))
        finally:
            pool.shutdown(wait=True)
        figures.result()   # (its error, if any, once the keys' is not pending)
        self.core.release()
        return self._result(None, keys=keys, rotation_modes=modes, preview=shown)


def bake_keypoints(obj, keypoints, mask, source_fps, options: BakeOptions | None = None, *, source_name: str,
                   mapping=None, solver=None, progress=None, cancel=None, source_rig=None) -> BakeResult:
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
        ``"fit"`` or ``"write"``.
    cancel : callable, optional
        Polled during the bake; returning true raises :class:`BakeCancelled`
        before anything is written.
    source_rig : readers.source_rig.SourceRig, optional
        The source skeleton's motion (BVH, FBX, armature sources): its joint
        rotations start the solve instead of the network's.

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
                  mapping=mapping, solver=solver, source_rig=source_rig)
    return job.run(progress, cancel)



