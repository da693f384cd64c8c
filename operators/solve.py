"""Solve the current frame and bake a frame range onto the target armature.

- ``neural_ik.solve_frame``: poses the armature from the keypoints (or
  effectors) at the current frame; no keys.
- ``neural_ik.bake``: bakes the input into a new action. From the UI
  (``invoke``) it is modal: the network runs in a worker thread while a timer
  updates the window manager's progress bar, Esc cancels (nothing is
  written), and the keys are written on the main thread at the end. From
  scripts and tests (``execute``) it bakes synchronously.

Both read the scene's :class:`..properties.NeuralIKSettings` and register
the properties (:mod:`..properties`) in :func:`register`.
"""

import threading

import bpy
import numpy as np

from .. import preferences, properties
from ..errors import UserError, template_of
from ..blender_io import bake as bake_mod
from ..blender_io import pose_solve
from ..blender_io.keypoint_objects import is_keypoint_root, read_keypoint_object, read_keypoint_pose
from ..model.skeleton import KEYPOINTS
from .pose_keys import keep_solved_pose
from .wording import ui_text

#: Frames per solver batch in the modal bake: the CLI's, so the UI bake is as fast (a batch
#: takes a fraction of a second, so progress and Esc still answer several times a second).
MODAL_BATCH = 4096
#: Custom property on an effector empty: the canonical keypoint it drives.
EFFECTOR_TAG = "neural_ik_effector"
#: Custom property on the parent empty of the effectors.
EFFECTOR_ROOT_TAG = "neural_ik_effectors"
#: Custom property on a baked action: the name of the keypoint object or effectors' parent it was baked from.
SOURCE_PROP = "neural_ik_source"


class InputError(UserError, ValueError):
    """The chosen input cannot be read."""


def _canonical_from(positions, names, fps, layout, source):
    from ..readers import KeypointClip, KeypointReadError, detect_layout, to_canonical

    lay = layout or None
    if lay is None:
        lay, _score = detect_layout(names)
    if lay is None:
        raise InputError(f"{source}: unknown keypoint layout (joint names {', '.join(names[:4])} ...)")
    clip = KeypointClip(np.asarray(positions, dtype=np.float64), list(names), float(fps), source=source, layout=lay)
    try:
        return to_canonical(clip, lay)
    except KeypointReadError as ex:
        raise InputError(template_of(ex)) from None


def effector_objects(root):
    """Effector empties under ``root``: dict keypoint name -> object."""
    if root is None:
        return {}
    return {c[EFFECTOR_TAG]: c for c in root.children if EFFECTOR_TAG in c and c[EFFECTOR_TAG] in KEYPOINTS}


def effector_rotations(root) -> dict:
    """Current world rotations (3, 3) of the effector empties (scale taken out): name -> rotation."""
    objs = effector_objects(root)
    if not objs:
        return {}
    u, _, vt = np.linalg.svd(np.array([np.array(o.matrix_world)[:3, :3] for o in objs.values()]))
    return dict(zip(objs, u @ vt))     # (one decomposition for all of them: Live Solve asks every tick)


def effector_rotation_targets(context):
    """The empties' rotations when the settings use them (Solve Frame, Live Solve), else None."""
    s = context.scene.neural_ik
    if s.source != 'EFFECTORS' or not s.effector_rotations:
        return None
    return effector_rotations(s.effector_root)


def effector_keypoints(root):
    """Current world positions of the effectors as canonical keypoints (1, 32, 3)."""
    kp = np.full((1, len(KEYPOINTS), 3), np.nan)
    for name, obj in effector_objects(root).items():
        kp[0, KEYPOINTS.index(name)] = np.array(obj.matrix_world.translation)
    return kp


def effector_owner_warning(context, obj) -> str:
    """A warning when the effectors in use were added for another armature than ``obj`` ("" otherwise)."""
    root = context.scene.neural_ik.effector_root
    owner = root.get(EFFECTOR_ROOT_TAG) if root is not None else None
    if obj is None or owner is None or owner == obj.name:
        return ""
    return (f"the effectors {root.name!r} were added for {owner!r}, not for the target {obj.name!r}: "
            f"its pelvis goes where {owner!r}'s was (Add Effectors on {obj.name!r} for its own)")


def scene_input(context, current_frame=False):
    """Read the input chosen in the settings.

    Returns
    -------
    keypoints : ndarray (T, 32, 3)
    mask : ndarray (T, 32)
    fps : float
    name : str
        Source name (names the baked action).

    Raises
    ------
    InputError
    """
    s = context.scene.neural_ik
    if s.source == 'EFFECTORS':
        root = s.effector_root
        if root is None or not effector_objects(root):
            raise InputError("no effectors: use Add Effectors first")
        scene = context.scene
        fps = scene.render.fps / (scene.render.fps_base or 1.0)
        if current_frame:
            kp = effector_keypoints(root)
        else:
            frame = scene.frame_current
            frames = range(scene.frame_start, scene.frame_end + 1)
            kp = np.empty((len(frames), len(KEYPOINTS), 3))
            try:
                for i, f in enumerate(frames):
                    scene.frame_set(f)
                    kp[i] = effector_keypoints(root)[0]
            finally:
                scene.frame_set(frame)
        return kp, np.isfinite(kp).all(-1), float(fps), root.name
    root = s.keypoint_object
    if root is None or not is_keypoint_root(root):
        raise InputError("no keypoint object: import keypoints or pick one in the Input panel")
    if current_frame:
        pos, names = read_keypoint_pose(root)
        fps = float(root.get("fps", 30.0))
        layout = str(root.get("layout", ""))
    else:
        pos, names, fps, layout = read_keypoint_object(root)
    kp, mask = _canonical_from(pos, names, fps, layout, root.name)
    return kp, mask, float(fps), root.name


#: Keypoint object name -> (its source skeleton, the canonical keypoints it was made with),
#: in memory only (not saved in the file).
_SOURCE_RIGS: dict = {}


def remember_source_rig(root, source_rig):
    """Keep the source skeleton of a keypoint object made from a BVH, FBX, glTF or armature.

    A bake of that object then starts from the skeleton's own rotations, as
    the CLI's bake of the file does, while the keypoints are as they were
    made (checked at bake time; edited keypoints are baked from themselves).
    Kept in memory only, not in the file.
    """
    pos, names, fps, layout = read_keypoint_object(root)
    kp, _mask = _canonical_from(pos, names, fps, layout, root.name)
    _SOURCE_RIGS[root.name] = (source_rig, kp)
    while len(_SOURCE_RIGS) > 8:
        _SOURCE_RIGS.pop(next(iter(_SOURCE_RIGS)))


def source_rig_of(root, kp):
    """The remembered source skeleton of ``root`` if its keypoints ``kp`` are still the ones it was made with."""
    entry = _SOURCE_RIGS.get(getattr(root, "name", None))
    if entry is None:
        return None
    src, made = entry
    if made.shape != kp.shape or src.num_frames != kp.shape[0]:
        return None
    both = np.isfinite(made) & np.isfinite(kp)
    if not np.array_equal(np.isfinite(made), np.isfinite(kp)) or not np.allclose(made[both], kp[both], atol=1e-4):
        return None
    return src


def _options(context):
    return properties.bake_options(context.scene.neural_ik, device=preferences.device_choice(context))


def _summary(result, obj=None):
    """One status line leading with what a user sees: floor, effectors, bone directions, the scale used."""
    import math

    f = result.figures
    parts = []
    if f is not None and math.isfinite(f.floor_error_cm):
        parts.append(f"feet {f.floor_error_cm:+.1f} cm from the floor")
    if f is not None and result.mode == "sparse" and math.isfinite(f.effector_reach_mm[1]):
        parts.append(f"effectors within {f.effector_reach_mm[1]:.1f} mm")
    scale = _world_scale(result, obj)
    if scale is not None:   # (Auto Scale's factor is shown nowhere else)
        parts.append(f"motion scaled {scale:.2f}x")
    if math.isfinite(result.bone_direction_error_deg):
        parts.append(f"bone directions {result.bone_direction_error_deg:.1f}°")
    if f is not None and f.knees_backwards:
        parts.append(f"knees backwards on {f.knees_backwards} frames")
    into = f"{result.action.name!r}"
    if result.action.users and obj is not None and obj.animation_data is not None \
            and obj.animation_data.action != result.action:   # (Bake Into: NLA Strip)
        into = f"the NLA strip {result.action.name!r} (mute its track to compare)"
    return f"Baked {result.frames} frames into {into}: " + ", ".join(parts)


def _world_scale(result, obj):
    """The factor the source's motion was scaled by onto the rig, in world terms (None when unknown)."""
    import math

    ratio = getattr(getattr(result, "retarget", None), "scale", None)
    if ratio is None or obj is None or not math.isfinite(ratio):
        return None
    unit = float(np.cbrt(abs(np.linalg.det(np.array(obj.matrix_world)[:3, :3]))))
    return float(ratio) * unit if unit > 0 else None


def _pose_summary(out):
    """Status line of a one-frame solve: the effectors' reach first."""
    import math

    if out.get("unchanged"):
        return "No effector moved: the pose is kept"
    mean, mx = out["effector_reach_mm"]
    msg = f"Solved in {out['seconds'] * 1000:.0f} ms"
    if math.isfinite(mx):
        msg += f": effectors within {mx:.1f} mm"
    if out["unreachable"]:
        msg += "; not reached: " + "; ".join(out["unreachable"])
    return msg


class NEURAL_IK_OT_solve_frame(bpy.types.Operator):
    """Pose the target armature from the keypoints at the current frame (no keys)"""

    bl_idname = "neural_ik.solve_frame"
    bl_label = "Solve Frame"
    bl_options = {'REGISTER', 'UNDO'}

    def execute(self, context):
        obj = properties.target_armature(context)
        try:
            kp, mask, _fps, _name = scene_input(context, current_frame=True)
            out = pose_solve.solve_current_frame(obj, kp, mask, _options(context),
                                               rotations=effector_rotation_targets(context))
        except (InputError, bake_mod.BakeError) as ex:
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        msg = _pose_summary(out)
        context.scene.neural_ik.status = msg
        self.report({'WARNING'} if out["unreachable"] else {'INFO'}, msg)
        if context.scene.neural_ik.source == 'EFFECTORS' and effector_owner_warning(context, obj):
            self.report({'WARNING'}, effector_owner_warning(context, obj))
        span = properties.input_frames(context.scene.neural_ik)
        frame = context.scene.frame_current
        if context.scene.neural_ik.source == 'KEYPOINTS' and span and not span[0] <= frame <= span[1]:
            self.report({'WARNING'}, f"frame {frame} is outside the keypoints' frames {span[0]}-{span[1]}: "
                                     "solved from the pose they hold there")
        keep_solved_pose(context, obj, self.report)  # an active action would replace the pose: key it or warn
        return {'FINISHED'}


class NEURAL_IK_OT_bake(bpy.types.Operator):
    """Solve every frame of the input and bake it into a new action on the target armature (Esc cancels)"""

    bl_idname = "neural_ik.bake"
    bl_label = "Bake"
    bl_options = {'REGISTER', 'UNDO'}

    action_name: bpy.props.StringProperty(
        name="Action Name", default="", options={'SKIP_SAVE'},
        description="Name of the new action (default: the input's name); made unique")

    _timer = None
    _runner = None

    def _job(self, context):
        obj = properties.target_armature(context)
        kp, mask, fps, name = scene_input(context)
        options = _options(context)
        if self.action_name:
            options.action_name = self.action_name
        s = context.scene.neural_ik
        src = source_rig_of(s.keypoint_object, kp) if s.source == 'KEYPOINTS' else None
        job = bake_mod.BakeJob(obj, kp, mask, fps, options, source_name=name, scene=context.scene,
                               source_rig=src)
        job.into = s.bake_into
        job.core.placed_effectors = s.source == 'EFFECTORS'
        self._source = name
        return job

    def _finish(self, context, result):
        if result.action is not None:   # (Render Contact Sheet draws the input it was baked from)
            result.action[SOURCE_PROP] = getattr(self, "_source", "")
        msg = _summary(result, properties.target_armature(context))
        context.scene.neural_ik.status = msg
        self.report({'INFO'}, msg)
        warnings = list(result.warnings)
        if context.scene.neural_ik.source == 'EFFECTORS':
            warnings.append(effector_owner_warning(context, properties.target_armature(context)))
        for w in filter(None, warnings):
            self.report({'WARNING'}, ui_text(w))

    # -- synchronous (scripts, tests) -------------------------------------------
    def execute(self, context):
        try:
            job = self._job(context)
            result = job.run()
        except (InputError, bake_mod.BakeError) as ex:
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        self._finish(context, result)
        return {'FINISHED'}

    # -- modal (UI) -------------------------------------------------------------
    def invoke(self, context, event):
        try:
            job = self._job(context)
            # load the network on the main thread: errors are reported right away
            job.solver = job.solver or bake_mod.get_solver(job.options.device)
        except (InputError, bake_mod.BakeError) as ex:
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        self._runner = BakeRunner(job)
        self._runner.start()
        wm = context.window_manager
        wm.progress_begin(0, 100)
        self._timer = wm.event_timer_add(0.1, window=context.window)
        wm.modal_handler_add(self)
        context.workspace.status_text_set("Neural IK: baking... (Esc to cancel)")
        return {'RUNNING_MODAL'}

    def _cleanup(self, context):
        wm = context.window_manager
        if self._timer is not None:
            wm.event_timer_remove(self._timer)
            self._timer = None
        wm.progress_end()
        context.workspace.status_text_set(None)

    def modal(self, context, event):
        runner = self._runner
        if event.type == 'ESC':
            runner.cancel()
            return {'RUNNING_MODAL'}
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        context.window_manager.progress_update(int(100 * runner.progress))
        if not runner.done:
            return {'RUNNING_MODAL'}
        try:
            result = runner.finish(lambda f, _s: context.window_manager.progress_update(int(90 + 10 * f)))
        except bake_mod.BakeCancelled:
            self._cleanup(context)
            self.report({'WARNING'}, "Bake cancelled: nothing was changed")
            return {'CANCELLED'}
        except Exception as ex:
            self._cleanup(context)
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        self._cleanup(context)
        self._finish(context, result)
        return {'FINISHED'}

    def cancel(self, context):
        if getattr(self, "_runner", None) is not None:
            self._runner.cancel()
            self._runner.join(timeout=10)
        self._cleanup(context)


class BakeRunner:
    """Runs a :class:`..blender_io.bake.BakeJob`'s solve and retarget in a worker thread.

    The modal bake polls :attr:`done` and :attr:`progress` from its timer and
    calls :meth:`finish` on the main thread, which writes the keys (or raises
    what the worker raised: :class:`BakeCancelled`, :class:`BakeError`...).

    Parameters
    ----------
    job : BakeJob
        A validated job (nothing written yet).
    batch_size : int
        Solver batch size: how often progress moves and Esc is noticed.
    """

    def __init__(self, job, batch_size: int = MODAL_BATCH):
        self.job = job
        self.batch_size = int(batch_size)
        self.progress = 0.0
        self.error = None
        self.done = False
        self._cancel = False
        self._thread = None

    def start(self):
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._work, name="neural_ik_bake", daemon=True)
        self._thread.start()

    def _work(self):
        try:
            self.job.solve(self._on_progress, lambda: self._cancel, batch_size=self.batch_size)
            if self._cancel:
                raise bake_mod.BakeCancelled("bake cancelled")
            self.job.retarget(lambda f, _s: setattr(self, "progress", 0.5 + 0.4 * f), lambda: self._cancel)
            self.progress = 0.9
        except BaseException as ex:  # handed to the main thread by finish()
            self.error = ex
        finally:
            self.done = True

    def _on_progress(self, fraction, _stage):
        self.progress = 0.5 * fraction

    def cancel(self):
        """Ask the worker to stop after the current batch."""
        self._cancel = True

    def join(self, timeout=None):
        """Wait for the worker thread."""
        if self._thread is not None:
            self._thread.join(timeout)

    def finish(self, progress=None):
        """Write the keys (main thread) once :attr:`done`; re-raise the worker's error.

        Returns
        -------
        BakeResult
        """
        self.join()
        if self.error is not None:
            raise self.error
        if self._cancel:
            raise bake_mod.BakeCancelled("bake cancelled")
        return self.job.write(progress)


classes = [NEURAL_IK_OT_solve_frame, NEURAL_IK_OT_bake]


def register():
    properties.register()


def unregister():
    properties.unregister()
