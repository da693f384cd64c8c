"""The one bake pipeline: source -> solve -> the rig's own skeleton -> figures (no ``bpy``).

The UI operators, the CLI and the benchmarks all call :class:`RigBake` (the
Blender layer, :mod:`..blender_io.bake`, only reads the rig and writes the
action)::

    job = RigBake(rig, mapping, keypoints, mask, 30.0, BakeOptions(), object_matrix=M, fps=24.0)
    job.run()                  # or job.solve(), job.fit() (a worker thread may run both)
    job.result.quaternions     # (T, B, 4) pose-bone rotations to key
    job.figures                # what a user sees: reach, floor, upright, knees...

Stages
------
1. **Prepare** (constructor, cheap): options, keypoints and the frame slice
   are checked (:mod:`.prepare`), the source is grounded when asked and
   resampled to the bake's rate, the rig is planned
   (:func:`..retarget.plan.plan_retarget`). Any problem raises
   :class:`BakeError` before the long work.
2. **Solve** (:meth:`RigBake.solve`, :mod:`.start`): the start pose. A
   source with a skeleton (``source_rig``: BVH, FBX, an armature) gives its
   own joint rotations (:mod:`.source`); otherwise the network
   (:class:`..model.inference.Solver`) solves the keypoints on the canonical
   skeleton.
3. **Fit** (:meth:`RigBake.fit`, :mod:`.fit`): the start pose carried onto
   the rig (:func:`..retarget.solve.retarget`), then the rig-space solve
   (:func:`..retarget.rigsolve.solve_rig`) meets the targets of
   :mod:`.targets` on the rig's own bones, with the start pose as the
   prior; optional rotation smoothing after it.
4. **Figures** (:meth:`RigBake.measure`, :mod:`.figures`): effector reach,
   floor error, joint error at the rig's scale, upright share, knees bent
   backwards, bone direction error, jitter, foot sliding, and warnings.

What differs between a dense clip of keypoints, a source skeleton's
rotations and a few effectors is a :class:`.paths.BakePath` (:mod:`.paths`,
:mod:`.sparse`), chosen when the solve starts.

Spaces: the rig is solved in its armature space (armature units); the
object's transform (``object_matrix``) brings world keypoints there.
"""
from __future__ import annotations

import time

import numpy as np

from ..model.skeleton import JOINTS
from .figures import BakeFigures, figure_warnings, measure
from .filters import smooth_columns
from .fit import FitStage
from .memory import drop_fields, motionless, return_free_memory
from .options import BakeCancelled, BakeError, BakeOptions, check_options
from .paths import BakePath, DensePath, SourcePath
from .plans import cached_plan, free_bones_of, hip_height, leg_length, object_frame
from .prepare import prepare_source
from .source import joints_from_source_rig, source_rest_is_human
from .sparse import SparsePath
from .start import shared_with_source
from .tuning import FLOOR_WARN_CM, REACH_WARN_MM, RIG_ITERATIONS

__all__ = ["RigBake", "BakeFigures", "leg_length", "hip_height", "object_frame", "FLOOR_WARN_CM", "REACH_WARN_MM",
           "RIG_ITERATIONS"]


class RigBake:
    """A bake of keypoints (and optionally a source skeleton's motion) onto one rig.

    Parameters
    ----------
    rig : RigDescription
    mapping : BoneMapping
        Validated mapping of the rig (see ``blender_io.mapping_store.resolve_mapping``).
    keypoints : array_like (T, 32, 3)
        Canonical keypoints, world metres, Z up; NaN = missing.
    mask : array_like of bool (T, 32) or None
    source_fps : float
    options : BakeOptions, optional
    object_matrix : array_like (4, 4)
        The armature object's world matrix.
    fps : float, optional
        The bake's rate (default ``options.fps``, else the source's).
    source_rig : readers.source_rig.SourceRig, optional
        The source skeleton's motion (same frames as ``keypoints``).
    locked : dict, optional
        Bone index -> (3,) bool locked rotation axes.
    solver : Solver, optional
    source_name : str
    chunk_frames : int, optional
        Frames of the per-frame stages (the source's pose, the carry onto
        the rig, the figures' poses) computed at a time: whole-clip results,
        temporaries of one chunk (default
        :data:`..retarget.chunks.CHUNK_FRAMES`). Results do not depend on it.
    """

    def __init__(self, rig, mapping, keypoints, mask, source_fps, options: BakeOptions | None = None, *,
                 object_matrix=None, fps=None, source_rig=None, locked=None, solver=None, source_name="",
                 chunk_frames=None):
        from ..retarget.chunks import CHUNK_FRAMES

        options = options or BakeOptions()
        check_options(options)
        self.options = options
        self.chunk = max(int(chunk_frames or CHUNK_FRAMES), 1)
        self.warnings: list = []
        self.seconds: dict = {}
        self.minv, self.unit = object_frame(np.eye(4) if object_matrix is None else object_matrix)
        self.object_matrix = np.linalg.inv(self.minv)
        src = prepare_source(keypoints, mask, source_fps, options, fps=options.fps if fps is None else fps,
                             source_rig=source_rig)
        self.warnings += src.warnings
        self.fps = src.fps
        self.source_fps = float(source_fps)
        self.source_rig = src.source_rig
        #: How far apart in height (metres) the clip's stances stand (:func:`.stances.stance_spread`), or None.
        self.stance_spread = src.stance_spread
        self._plan_rig(rig, mapping)
        #: The keypoints swapped back (:meth:`_swapped_back`): ``(chain, parts)``, or None.
        self.swapped = None
        src = self._swapped_back(src)
        self.locked = dict(locked or {})
        if self.unit < 0.999 or self.unit > 1.001:
            self.warnings.append(f"armature object scale {self.unit:g}: keypoints converted to its units")
        self._armature_keypoints(src)
        src = None      # (a long clip's keypoints: one whole-clip array at a time)
        self.solver = solver
        self.source_name = str(source_name or "Neural IK")
        self._choose_mode()
        self._posed_only()
        self._declare_results()

    def _plan_rig(self, rig, mapping):
        """The rig's plan (:func:`..retarget.plan.plan_retarget`); a rig that cannot be baked raises :class:`BakeError`."""
        if len(rig) == 0:
            raise BakeError("the armature has no bones")
        self.rig = rig
        self.mapping = mapping
        try:
            self.plan = cached_plan(rig, mapping)
        except ValueError as ex:
            raise BakeError(f"cannot retarget: {ex}") from None
        if self.plan.root < 0:
            raise BakeError("no pelvis bone mapped")
        length = np.linalg.norm(rig.tail - rig.head, axis=-1)
        used = {rig.index(b) for j in JOINTS for b in [mapping.entries.get(j)] if b is not None and rig.has(b)}
        bad = [rig.names[b] for b in sorted(used) if length[b] < 1e-6]
        if bad:
            raise BakeError(f"zero-length bones: {', '.join(bad)}; give them a length in Edit Mode")

    def _swapped_back(self, src):
        """The source with the chain whose left and right it swaps all clip long (``src.swapped``) swapped back.

        Onto another rig, the performer's arm on the right is the character's
        right arm: the keypoints' sides are exchanged, and the source
        skeleton's rotations (its chain turned through the body) are left
        unused. Onto the source's own skeleton the clip comes back as read.
        """
        from .prepare import FACING_APART_DEGREES, swap_sides, swapped_parts
        from .source import shared_bones

        if src.swapped is None:
            return src
        if self.source_rig is not None and shared_bones(self.source_rig, self.plan, self.minv, self.unit)[1]:
            self.warnings.append(f"the source's {src.swapped} have their left and right swapped (the chest faces away "
                                 "from the hips on nearly every frame); onto its own skeleton the bake follows the file")
            return src
        parts = swapped_parts(src.keypoints, src.mask, src.swapped)
        self.swapped = (src.swapped, parts)
        src.keypoints = swap_sides(src.keypoints, src.swapped, parts)
        src.mask = swap_sides(src.mask, src.swapped, parts)
        said = "; its skeleton's rotations are not used" if self.source_rig is not None else ""
        self.source_rig = src.source_rig = None
        self.warnings.append(f"the source's {src.swapped} have their left and right swapped on nearly every frame (the "
                             f"chest faces over {FACING_APART_DEGREES:g} degrees away from the hips, the feet point the "
                             f"{'hips' if src.swapped == 'arms' else 'chest'}' way): swapped back{said}")
        return src

    def _armature_keypoints(self, src):
        """The source keypoints in the armature's axes (:attr:`src_m`, metres) and in the body frame (:attr:`kp_body`)."""
        kp = src.keypoints
        if self.source_rig is not None:
            kp = joints_from_source_rig(kp, self.source_rig, self.chunk)
        K = self.plan.K
        arm = kp @ self.minv[:3, :3].T + self.minv[:3, 3]
        del kp
        arm *= self.unit
        #: source keypoints in the armature's axes, metres (origin: the armature's)
        self.src_m = arm
        self.kp_body = self.src_m @ K
        # the network sees world heights (its floor is z = 0)
        self.offset = -(self.minv[:3, 3] @ K) * self.unit
        self.mask = np.isfinite(self.kp_body).all(-1)
        self.n_frames = int(self.kp_body.shape[0])

    def _choose_mode(self):
        mode = self.options.mode
        if mode == "auto":
            from ..model.result import detect_mode

            mode = detect_mode(self.mask)
        #: ``"dense"`` or ``"sparse"``; a caller may set it before :meth:`solve` (Solve Frame does).
        self.mode = mode
        if mode == "sparse":
            # a few effectors do not show the spine's shape: the rig's own posture is its upright
            # (see docs/tuning.md#sparse_rig_spine)
            self.plan = cached_plan(self.rig, self.mapping, spine="rest")

    def _posed_only(self):
        """Plan the posed bones only (:func:`..retarget.posed.posed_plan`): a long clip's arrays hold no
        column for a bone no stage turns; :attr:`rig` and :attr:`locked` follow, :attr:`full_rig` is the rig."""
        from ..retarget.posed import posed_plan

        self.full_rig = self.rig
        names = self.source_rig.rig.names if self.source_rig is not None else ()
        self.plan, new = posed_plan(self.plan, free_bones_of(self.plan), names)
        self.rig = self.plan.rig
        self.locked = {int(new[b]): v for b, v in self.locked.items() if new[b] >= 0}

    def _declare_results(self):
        """Every attribute the stages fill, unset."""
        self.solved = None
        #: Where :meth:`solve` took the start pose from: ``"source"`` (the source skeleton's own
        #: rotations) or ``"network"``.
        self.start = "network"
        self.start_pose = None      # (the solve stage's StartPose)
        self.path = None            # (the BakePath chosen at the solve)
        self.initial = None
        self.result = None
        self.figures = None
        self.targets = None
        self.target_info = None
        self.residual = None
        #: Where the rig solve ran: ``"cpu"`` (numpy), or the GPU the network solved the clip on (torch).
        self.rig_device = "cpu"
        self.scale = None
        self.up = None
        #: Source skeleton for the network (None: fitted from the keypoints).
        self.skeleton = None
        #: A pose being dragged (Solve Frame, Live Solve): the result's heads only
        #: for the bones the rig solve poses (NaN elsewhere), and of the figures the
        #: effectors' reach and the joints' error only (what its status line says).
        self.light = False
        #: Whether the effectors are an animator's empties (Add Effectors): met where they are, never
        #: moved to the rig's standing height as another body's are (:meth:`.sparse.SparsePath._lift`).
        self.placed_effectors = False
        #: Whether the source skeleton is the rig's own (set at the solve of a dense bake with one).
        self.same_skeleton = False
        self.shared = None          # (rig bone, source bone) pairs sharing a name, and same_skeleton
        #: False where the source skeleton's rest does not stand and the network solves its joints.
        self.source_rig_rotations = None

    # -- stage 2 ---------------------------------------------------------------
    def _smooth_source(self, kp):
        """The keypoints ``kp`` (world heights) low-passed where the options ask; the figures keep the source as read."""
        o = self.options
        if o.smooth == "none" or o.smooth_target not in ("keypoints", "both"):
            self.kp_body = None   # (made again from src_m where the figures read it: the same numbers)
            return kp
        # the source as read stays for the figures only, in float32 (see docs/tuning.md#source_float32)
        self.kp_body = self.kp_body.astype(np.float32)
        kp = smooth_columns("smooth_keypoints", kp, range(kp.shape[1]), o.smooth, float(o.smooth_strength),
                            self.fps, inplace=True)
        kp[~self.mask] = np.nan
        KT = self.plan.K.T
        for c0 in range(0, len(kp), 8192):   # the smoothed source, into src_m's own array
            self.src_m[c0:c0 + 8192] = (kp[c0:c0 + 8192] - self.offset) @ KT
        return kp

    def solve(self, progress=None, cancel=None, batch_size: int = 4096):
        """The start pose: the source skeleton's rotations, or the network's answer.

        Parameters
        ----------
        progress : callable, optional
            ``progress(fraction, stage)``.
        cancel : callable, optional
            Returns true to abort (raises :class:`BakeCancelled`).
        batch_size : int
            Network frames per batch.
        """
        t0 = time.perf_counter()
        kp = self._smooth_source(self.kp_body + self.offset)
        # the stages after read the source in float32 (see docs/tuning.md#source_float32)
        self.src_m = self.src_m.astype(np.float32)
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        self.start = "network"
        self.path = choose_path(self)
        self.start_pose = self.path.start_pose(kp, progress, cancel, batch_size)
        self.solved, self.start = self.start_pose.solved, self.start_pose.start
        self.start_pose.solved = None    # (the job holds it: one reference to let go of)
        # nor the source's motion: the fit reads the skeleton's rest only
        self.source_rig = motionless(self.source_rig)
        return_free_memory(self.n_frames)
        self.seconds["solve"] = time.perf_counter() - t0
        return self.solved

    # -- stage 3 ---------------------------------------------------------------
    def fit(self, progress=None, cancel=None):
        """Carry the start pose onto the rig, then solve on the rig's own skeleton.

        Once per :meth:`solve` (it releases the solve's rotations). Afterwards
        :attr:`targets` keeps what the figures read: the effector rows'
        targets and weights.
        """
        if self.solved is None or self.solved.local_rot is None:
            raise RuntimeError("solve() first (once per fit: the fit releases the solve's rotations)")
        t0 = time.perf_counter()
        fit = FitStage(self, self.path, progress, cancel).run()
        self.result, self.targets, self.target_info = fit.result, fit.targets, fit.target_info
        self.residual, self.scale = fit.residual, fit.scale
        self.seconds["fit"] = time.perf_counter() - t0
        return self.result

    def full_result(self):
        """The fit's result with a column for every bone of the rig (:attr:`result` holds the posed bones')."""
        return None if self.result is None else self.result.on_rig(self.full_rig)

    # -- stage 4 ---------------------------------------------------------------
    def measure(self):
        """Compute :attr:`figures` and add warnings for what is off."""
        return_free_memory(self.n_frames)    # (the fit's temporaries: before the figures' whole-clip arrays)
        self.figures = measure(self)
        self.warnings += figure_warnings(self.figures, self.path.names_missed)
        return self.figures

    def release(self):
        """Drop the whole-clip arrays that only the solve, the fit and the figures read.

        Kept: :attr:`result` (the pose-bone values to key), :attr:`figures`,
        :attr:`warnings`, :attr:`mask` and the solve's per-frame error. A long
        bake holds about a gigabyte of these (keypoints in three frames, the
        start pose, the fit's targets and residuals, the network's or the
        source's joint rotations); the Blender layer calls this before it
        writes the keys, which take memory of their own.
        """
        self.kp_body = self.src_m = self.targets = self.residual = None
        if self.start_pose is not None:
            self.start_pose.world_rotations = None
        self.initial = None
        self.source_rig = motionless(self.source_rig)
        self.solved = drop_fields(self.solved, "local_rot", "root_pos", "keypoints")
        return_free_memory(self.n_frames)

    def run(self, progress=None, cancel=None):
        """Solve (0-60 %), fit (60-95 %), measure."""
        def stage(lo, hi):
            if progress is None:
                return None
            return lambda f, name: progress(lo + (hi - lo) * f, name)

        self.solve(stage(0.0, 0.6), cancel)
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        self.fit(stage(0.6, 0.95), cancel)
        self.measure()
        return self.result


def choose_path(job) -> BakePath:
    """The path of ``job`` by its mode and source (call at the solve: the mode may be set after construction)."""
    if job.mode != "dense":
        return SparsePath(job) if job.mode == "sparse" else DensePath(job)
    if job.source_rig is not None:
        if shared_with_source(job)[1] or source_rest_is_human(job.source_rig):
            return SourcePath(job)
        job.warnings.append("the source skeleton's rest is not a standing human pose: its joint "
                            "rotations are not used, the network solves its joints")
        job.source_rig_rotations = False
    return DensePath(job)
