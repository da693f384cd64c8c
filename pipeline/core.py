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
   (:func:`..retarget.solve.plan_retarget`). Any problem raises
   :class:`BakeError` before the long work.
2. **Solve** (:meth:`RigBake.solve`): the start pose. A source with a
   skeleton (``source_rig``: BVH, FBX, an armature) gives its own joint
   rotations (:mod:`.source`); otherwise the network
   (:class:`..model.inference.Solver`) solves the keypoints on the canonical
   skeleton. Either is carried onto the rig by
   :func:`..retarget.solve.retarget`.
3. **Fit** (:meth:`RigBake.fit`): the rig-space solve
   (:func:`..retarget.rigsolve.solve_rig`) meets the targets of
   :mod:`.targets` on the rig's own bones (every bone of each chain), with
   the start pose as the prior; optional rotation smoothing after it.
4. **Figures** (:meth:`RigBake.measure`): effector reach, floor error, joint
   error at the rig's scale, upright share, knees bent backwards, bone
   direction error, jitter, foot sliding, and warnings when one is off.

Spaces: the rig is solved in its armature space (armature units); the
object's transform (``object_matrix``) brings world keypoints there.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import BONE_CHILD, CANONICAL, JOINTS, KEYPOINTS, PARENTS, SPARSE_EFFECTORS, Skeleton
from .options import BakeCancelled, BakeError, BakeOptions, check_options
from .prepare import prepare_source

__all__ = ["RigBake", "BakeFigures", "leg_length", "object_frame", "FLOOR_WARN_CM", "REACH_WARN_MM"]

_J = {n: i for i, n in enumerate(JOINTS)}
_K = {n: i for i, n in enumerate(KEYPOINTS)}
#: Warn when the feet float or sink more than this over the contacts (cm).
FLOOR_WARN_CM = 3.0
#: Warn when an effector ends farther than this from its target (mm).
REACH_WARN_MM = 5.0
#: An effector within this of its target counts as reached (mm).
REACH_OK_MM = 1.0
#: Rig-solve iterations of a dense bake (:attr:`.options.BakeOptions.rig_iterations` unset),
#: by where the start pose comes from: a source skeleton's own rotations (BVH, FBX, an
#: armature) are one Gauss-Newton step from the solve's answer (bench_foreign --quick, BVH
#: sources onto the meta-rig, one step against two: joints 111.4 / 111.9 mm, floor -0.8 /
#: -0.9 cm, the same knees and jitter; a 3,000-frame clip of another body size: 33.03 /
#: 33.01 mm, bone directions 1.34 / 1.33 deg, its fit 0.58 / 0.87 s), the network's answer
#: to keypoints is further off and takes eight (held-out fair1 + sfu, every frame, keypoints
#: onto their own skeletons: joints 1.74 / 1.25 / 1.17 / 1.17 mm and rotations 7.05 / 6.80
#: / 6.74 / 6.67 deg after 2 / 3 / 4 / 6 steps; four steps against two: the fit stage 2.8 ->
#: 3.5-3.8 s, the whole bake about 12 % longer; the CMU-converted folders 18.0 -> 16.3 mm).
#: Eight, not four: a CMU skeleton's neck of two bones (Neck, Neck1), straight in the start
#: pose where the keypoints bend it a little, folds under the first Gauss-Newton steps, and
#: four left `cmu_hahne`'s head 4-7 cm off its keypoint on 218 of 300 frames (six: 49, eight:
#: none; its joints at most 66.8 -> 3.7 mm off, jitter 20.2 -> 18.4 mm/frame^2, the source's
#: 18.4). At 200 frames a clip, held-out 0.89 -> 0.88 mm, 6.87 -> 6.82 deg (with a child
#: 6.95 -> 6.87), the CMU-converted folders 4.76 mm, 11.49 -> 11.38 deg (8.94 -> 8.84); the
#: dense bake 1.41 -> 1.83 ms a frame.
RIG_ITERATIONS = {"source": 1, "network": 8}
#: Rig-solve iterations at least, in sparse mode (effectors met to the millimetre) ...
SPARSE_ITERATIONS = 20
#: ... and the factor by which the prior on the start pose fades per iteration.
SPARSE_PRIOR_DECAY = 0.3
#: The same for one pose (Solve Frame, Live Solve): five iterations (bench_live.py:
#: a drag of all six empties on the meta-rig stays within 1 mm with rare second
#: passes; the straight-legged rest pose needs the second pass).
SPARSE_POSE_ITERATIONS = 5
SPARSE_POSE_PRIOR_DECAY = 0.2
#: ... after this many refinement steps of the network's answer (the canonical
#: skeleton's; three are the model's default): the rig-space solve meets the
#: effectors anyway, and each step costs about 0.7 ms of a Live Solve tick.
SPARSE_POSE_REFINE_STEPS = 2
#: The second pass of a sparse solve (an effector out of reach) starts with the
#: prior at this fraction of the first pass's.
SPARSE_SECOND_PASS_PRIOR = 0.05
#: Dense mode: frames in which a segment of fixed length (a bone, the two
#: clavicles' heads) is still off its source direction by this share of its
#: length (0.35: some 20 degrees; a flipped start pose leaves 1.5-2) after the
#: first pass or, from the network, turned round in the start pose (below), are
#: solved once more with :data:`DENSE_SECOND_PASS_ITERATIONS`. (Four first-pass steps
#: unwind a flipped chest part of the way, to 0.15-0.3 with joints still 10 cm off:
#: the start pose says which frames were flipped. A lower bar after the first pass is no answer:
#: a skeleton of other proportions never meets every segment, and 0.09 gave a
#: child's 3,000-frame clip onto an adult's skeleton 40 more steps on many frames.)
DENSE_SECOND_PASS_OFF = 0.35
#: ... and the share of a segment's length by which it is off in the network's start
#: pose for a frame to count as turned round (1.4: a quarter turn or more). The network's
#: start poses, 200 frames a clip: on the held-out folders 198 of 3,565 frames above 1.4
#: (the flipped chest of a child's skipping clip), 793 above 0.35; on the CMU-converted
#: folders 1 of 2,011 above 1.4 but 1,811 above 0.35 (40 more steps for all of them read
#: 19.6 mm and 15.4 deg there instead of 16.3 mm and 11.7 deg, at 3.7 times the time).
DENSE_START_FLIPPED = 1.4
DENSE_SECOND_PASS_ITERATIONS = 40
DENSE_SECOND_PASS_PRIOR = 0.1
#: Dense, from the network (:meth:`RigBake._ease_start_jumps`): a start pose's bone turning more
#: than this many degrees in one frame, and more than this factor times its median step, ...
START_JUMP_DEG = 10.0
START_JUMP_FACTOR = 10.0
#: ... where no source point moves more than this factor times its median step, is eased into the
#: low-pass of the start pose over this many seconds either side.
START_JUMP_SOURCE = 5.0
START_JUMP_SECONDS = 0.15
#: Sparse (:meth:`RigBake._mend_islands`): the longest run of solved frames (seconds) on another branch than
#: the runs beside it that is solved again from theirs.
ISLAND_SECONDS = 0.5
#: The prior fades down to this fraction of its weight. Lower (1e-3) leaves the
#: directions no effector constrains undamped: steps there get rejected, whole
#: iterations are lost and effectors end farther away; higher keeps more of the
#: smoothed start pose where the effectors leave the pose open, but more frames
#: need the second pass (bench_foreign --quick, six effectors: 1e-2 / 3e-2 / 5e-2 /
#: 1e-1 give a jitter of 1.52 / 1.40 / 1.37 / 1.45 times the source's onto the
#: clip's own skeleton and 2.45 / 2.21 / 1.97 / 1.84 onto the meta-rig, every
#: effector within 0.1 mm on the own skeleton at each; fair1's dab took 1.85 /
#: 2.0 / 3.1 ms a frame at 1e-2 / 3e-2 / 5e-2).
SPARSE_PRIOR_FLOOR = 3e-2
#: The same for one pose (Solve Frame, Live Solve: five iterations): 5e-2 left the dragged
#: effectors up to 0.95 mm off (median 0.29 mm), 1e-2 within 0.42 mm (median 0.10).
SPARSE_POSE_PRIOR_FLOOR = 1e-2
#: Sparse clips: what six effectors leave open (how the spine shares the bend
#: between pelvis and head, the pelvis' tilt, the elbows' and knees' swing) is
#: settled over time: this many rounds of a zero-phase low-pass of the solved
#: rotations (Butterworth, the strength of the Smoothing option: 0.7 is 1.5 Hz)
#: and a solve of :data:`SPARSE_SETTLE_ITERATIONS` that meets the effectors
#: again from there. A solve frame by frame lands on one of several equally
#: good spines, and a walk's chest swung 14 cm back and forth between frames
#: (held-out fair1 + sfu, 200 frames a clip: body jitter 1.56 times the
#: source's, the upper spine's 4.3; one round 1.19, two 1.13, three 1.09).
SPARSE_SETTLE_ROUNDS = 3
SPARSE_SETTLE_STRENGTH = 0.7
SPARSE_SETTLE_ITERATIONS = 8
#: ... never across a cut: a frame to which an effector jumps faster than this (m/s; a
#: punch's fist moves at 10-15) starts a new stretch of the settling's low-pass. Many mocap
#: files open on a T-pose frame (CMU's `01_01`: hands 55-64 cm away at 120 fps, 77 m/s), and
#: the low-pass spread that jump over the next frames.
SPARSE_CUT_SPEED = 20.0


def leg_length(skel) -> float:
    """Mean thigh + calf length of a canonical :class:`Skeleton` (metres)."""
    o = np.asarray(skel.offsets)
    return float(np.mean([np.linalg.norm(o[_J[f"calf_{s}"]]) + np.linalg.norm(o[_J[f"foot_{s}"]]) for s in "lr"]))


def hip_height(plan, n=(0.0, 0.0, 1.0)) -> float:
    """Rest height along ``n`` of the pelvis bone's head over the lowest ankle or ball (foot and toe heads); 0 without.

    Joints only, no bone tails: two conventions of one skeleton (joint
    orients or none, tails along the bone or along an axis) have the same
    hip height.
    """
    rig, ent = plan.rig, plan.mapping.entries
    n = np.asarray(n, dtype=np.float64)
    feet = [rig.head[rig.index(ent[j])] @ n for j in ("foot_l", "foot_r", "toe_l", "toe_r")
            if j in ent and rig.has(ent[j])]
    if not feet or "pelvis" not in ent or not rig.has(ent["pelvis"]):
        return 0.0
    return max(float(rig.head[rig.index(ent["pelvis"])] @ n) - min(feet), 0.0)


def object_frame(matrix_world):
    """``(Minv (4, 4), unit)``: world -> armature space, and metres per armature unit."""
    m = np.asarray(matrix_world, dtype=np.float64).reshape(4, 4)
    s = abs(np.linalg.det(m[:3, :3])) ** (1.0 / 3.0)
    if not (s > 1e-12 and np.isfinite(s)):
        raise BakeError("the armature object has a zero scale")
    sv = np.linalg.svd(m[:3, :3], compute_uv=False)
    if sv.max() / sv.min() > 1.001:
        raise BakeError(f"the armature object is scaled non-uniformly (scale factors {', '.join(f'{x:.3g}' for x in sv)}"
                        "): apply the scale (Ctrl+A > Scale) or make it uniform")
    return np.linalg.inv(m), float(s)


@dataclass
class BakeFigures:
    """What a user sees on the rig (all in world units of the rig).

    Attributes
    ----------
    effector_reach_mm : tuple
        Mean and max distance of the effectors (hands, feet, head; the
        dragged empties in sparse mode) from their targets.
    floor_error_cm : float
        Median height of the rig's lowest foot point (heel under the ankle,
        ankle, ball of the foot) above the rig's floor (its object's floor,
        the plane through its origin, less the sole where a keypoint bake
        put one: ``pipeline.targets.rig_sole``) over the frames where the
        source has a foot planted (positive: floats).
    joint_error_mm : tuple
        Mean and max distance of the rig's mapped joints from the source's
        joints at the rig's scale (includes proportion differences; on the
        same skeleton this is the round-trip error).
    upright_share : float
        Share of frames in which the rig's head is above its pelvis.
    source_upright_share : float
    knees_backwards : int
        Frames in which a knee of the rig bends backwards and the source's
        does not.
    bone_direction_error_deg : float
    jitter : float
        Mean joint acceleration (m/s^2).
    source_jitter : float
        The source's, at the rig's size (scaled as the bake scales it).
    foot_sliding_mm : float
        Mean movement of planted foot points (mm/frame).
    unreachable : list of str
        Effectors that could not be reached, with the distance.
    """

    effector_reach_mm: tuple = (float("nan"), float("nan"))
    floor_error_cm: float = float("nan")
    joint_error_mm: tuple = (float("nan"), float("nan"))
    upright_share: float = float("nan")
    source_upright_share: float = float("nan")
    knees_backwards: int = 0
    bone_direction_error_deg: float = float("nan")
    jitter: float = float("nan")
    source_jitter: float = float("nan")
    foot_sliding_mm: float = float("nan")
    unreachable: list = field(default_factory=list)


class RigBake:
    """A bake of keypoints (and optionally a source skeleton's motion) onto one rig.

    Parameters
    ----------
    rig : RigDescription
    mapping : BoneMapping
        Validated mapping of the rig (see ``blender_io.bake.resolve_mapping``).
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
        :data:`..retarget.solve.CHUNK_FRAMES`). Results do not depend on it.
    """

    def __init__(self, rig, mapping, keypoints, mask, source_fps, options: BakeOptions | None = None, *,
                 object_matrix=None, fps=None, source_rig=None, locked=None, solver=None, source_name="",
                 chunk_frames=None):
        from ..retarget.solve import CHUNK_FRAMES

        options = options or BakeOptions()
        check_options(options)
        self.options = options
        self.chunk = max(int(chunk_frames or CHUNK_FRAMES), 1)
        self.warnings: list = []
        self.seconds: dict = {}
        if fps is None:
            fps = options.fps
        self.minv, self.unit = object_frame(np.eye(4) if object_matrix is None else object_matrix)
        self.object_matrix = np.linalg.inv(self.minv)
        src = prepare_source(keypoints, mask, source_fps, options, fps=fps, source_rig=source_rig)
        self.warnings += src.warnings
        self.fps = src.fps
        self.source_fps = float(source_fps)
        self.source_rig = src.source_rig
        if len(rig) == 0:
            raise BakeError("the armature has no bones")
        self.rig = rig
        self.mapping = mapping
        try:
            self.plan = _cached_plan(rig, mapping)
        except ValueError as ex:
            raise BakeError(f"cannot retarget: {ex}") from None
        if self.plan.root < 0:
            raise BakeError("no pelvis bone mapped")
        self._check_bones()
        self.locked = dict(locked or {})
        if self.unit < 0.999 or self.unit > 1.001:
            self.warnings.append(f"armature object scale {self.unit:g}: keypoints converted to its units")
        kp = src.keypoints
        if self.source_rig is not None:
            kp = _joints_from_source_rig(kp, self.source_rig, self.chunk)
        src = None      # (a long clip's keypoints: one whole-clip array at a time below)
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
        self.solver = solver
        self.source_name = str(source_name or "Neural IK")
        mode = options.mode
        if mode == "auto":
            from ..model.result import detect_mode

            mode = detect_mode(self.mask)
        self.mode = mode
        if mode == "sparse":
            # a few effectors do not show the spine's shape: the rig's own posture is its upright
            # (held-out six effectors, every frame: 41.81 -> 22.02 mm, 26.02 -> 20.10 deg; at 200
            # frames a clip fair1's chest was 9 cm off, now 2 cm)
            self.plan = _cached_plan(rig, mapping, spine="rest")
        self.solved = None
        #: Where :meth:`solve` took the start pose from: ``"source"`` (the source skeleton's own
        #: rotations) or ``"network"``.
        self.start = "network"
        self.initial = None
        self.result = None
        self.figures = None
        #: Source skeleton for the network (None: fitted from the keypoints).
        self.skeleton = None
        #: A pose being dragged (Solve Frame, Live Solve): the result's heads only
        #: for the bones the rig solve poses (NaN elsewhere).
        self.light = False

    def _check_bones(self):
        rig = self.rig
        length = np.linalg.norm(rig.tail - rig.head, axis=-1)
        used = set()
        for j in JOINTS:
            b = self.mapping.entries.get(j)
            if b is not None and rig.has(b):
                used.add(rig.index(b))
        bad = [rig.names[b] for b in sorted(used) if length[b] < 1e-6]
        if bad:
            raise BakeError(f"zero-length bones: {', '.join(bad)}; give them a length in Edit Mode")

    # -- stage 2 ---------------------------------------------------------------
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
        o = self.options
        t0 = time.perf_counter()
        kp = self.kp_body + self.offset
        if o.smooth != "none" and o.smooth_target in ("keypoints", "both"):
            # the source as read stays for the figures only (bone directions, its jitter): in
            # float32 (a 100,000-frame clip: 38 MB less; its figures change below 1e-6)
            self.kp_body = self.kp_body.astype(np.float32)
            kp = _smooth_columns("smooth_keypoints", kp, range(kp.shape[1]), o.smooth, float(o.smooth_strength),
                                 self.fps, inplace=True)
            kp[~self.mask] = np.nan
            KT = self.plan.K.T
            for c0 in range(0, len(kp), 8192):   # the smoothed source, into src_m's own array
                self.src_m[c0:c0 + 8192] = (kp[c0:c0 + 8192] - self.offset) @ KT
        else:   # made again from src_m where the figures read it (the same numbers; a long clip: 77 MB less)
            self.kp_body = None
        if cancel is not None and cancel():
            raise BakeCancelled("bake cancelled")
        self.start = "network"
        if self.source_rig is not None and self.mode == "dense":
            if self._shared_bones()[1] or self._source_rest_is_human():
                self.solved = self._from_source_rig(kp)
                self.start = "source"
            else:
                self.warnings.append("the source skeleton's rest is not a standing human pose: its joint "
                                     "rotations are not used, the network solves its joints")
                self.source_rig_rotations = False
                self.solved = self._from_network(kp, progress, cancel, batch_size)
        else:
            if self.mode == "sparse" and self.skeleton is None and self.plan.leg_length > 0:
                # a few effectors say little about bone lengths: the source skeleton's
                # size when the file has one (its effectors are scaled onto the rig like
                # a dense clip), else the rig's own (effectors placed for this rig, as
                # the empties of Add Effectors: taken as they are)
                leg = self.plan.leg_length * self.unit
                if self.source_rig is not None:
                    try:
                        splan = _cached_plan(self.source_rig.rig, self.source_rig.mapping)
                        leg = splan.leg_length if splan.leg_length > 0 else leg
                    except ValueError:
                        pass
                self.skeleton = CANONICAL.scaled(leg / leg_length(CANONICAL))
            self.solved = self._from_network(kp, progress, cancel, batch_size)
        if self.source_rig is not None:   # nor its motion: the fit reads the skeleton's rest only
            self.source_rig = _motionless(self.source_rig)
        _return_free_memory(self.n_frames)
        self.seconds["solve"] = time.perf_counter() - t0
        return self.solved

    def _from_network(self, kp, progress, cancel, batch_size):
        from .cache import get_solver

        o = self.options
        solver = self.solver or get_solver(o.device)
        self.solver = solver

        def _progress(done, total):
            if cancel is not None and cancel():
                raise BakeCancelled("bake cancelled")
            if progress is not None and total:
                progress(min(done / total, 1.0), "solve")

        kwargs = {"batch_size": int(batch_size)}
        if self.mode == "sparse" and self.n_frames == 1:
            kwargs["refine_steps"] = SPARSE_POSE_REFINE_STEPS
        if self.skeleton is not None:
            kwargs["skeleton"] = self.skeleton
        try:
            return solver.solve(kp, self.mask, mode=self.mode, refine=bool(o.refine), progress=_progress, **kwargs)
        except BakeCancelled:
            raise
        except ValueError as ex:
            raise BakeError(f"the solver rejected the keypoints: {ex}") from None

    def _source_rest_is_human(self) -> bool:
        """Whether the source skeleton's rest is a standing human pose (T, A, any joint orients).

        Its joint rotations are read relative to that rest (:mod:`.source`); a
        rest lying down or with limbs folded (markerless captures that rest
        along one axis) would turn every rotation wrong.
        """
        try:
            splan = _cached_plan(self.source_rig.rig, self.source_rig.mapping)
        except ValueError:
            return False
        limits = {"thigh_l": 60, "thigh_r": 60, "calf_l": 60, "calf_r": 60, "spine1": 60, "pelvis": 60,
                  "upperarm_l": 100, "upperarm_r": 100, "forearm_l": 100, "forearm_r": 100}
        for j, lim in limits.items():
            bone = self.source_rig.mapping.entries.get(j)
            if bone is None or not self.source_rig.rig.has(bone):
                continue
            C = splan.offset.get(self.source_rig.rig.index(bone))
            if C is None:
                continue
            ang = np.degrees(np.arccos(np.clip((np.trace(C) - 1.0) / 2.0, -1.0, 1.0)))
            if ang > lim:
                return False
        return True

    def _from_source_rig(self, kp):
        from ..model.result import SolveResult
        from ..model.rotations_np import change_basis, matmul_each
        from ..retarget.solve import frame_chunks
        from .source import source_world_rotations

        src = self.source_rig
        splan = _cached_plan(src.rig, src.mapping)
        # world -> the body frame the network would have used
        Rm = self.minv[:3, :3] * self.unit
        M = self.plan.K.T @ Rm
        T = src.num_frames
        local = np.empty((T, len(JOINTS), 3, 3))
        # the source's pose a chunk of frames at a time (a whole clip's (T, B, 3, 3) would
        # take gigabytes): the canonical joints' rotations
        for a, b in frame_chunks(T, self.chunk):
            W, _ = _source_pose(src, a, b)
            rot, given, _ = source_world_rotations(src, W, splan)
            rb = change_basis(M, rot)
            local[a:b, 0] = rb[:, 0]
            for j in range(1, len(JOINTS)):
                local[a:b, j] = np.swapaxes(rb[:, PARENTS[j]], -1, -2) @ rb[:, j]
        leg = splan.leg_length if splan.leg_length > 0 else leg_length(CANONICAL)
        skel = CANONICAL.scaled(leg / leg_length(CANONICAL))
        root = kp[:, _J["pelvis"]].copy()    # (not a view: the fit lets the keypoints go)
        copied = self._copied_bones()
        self._copied = [tb for tb, _ in copied or ()]
        self._world_rotations = None
        if copied:
            R = self._source_to_armature()
            Qs, Qt = src.rig.rest_rotation(), self.rig.rest_rotation()

            def turns(a, b):
                """The copied bones' world rotations in frames a:b, from the source's pose there (the
                carry onto the rig asks a chunk at a time: a whole clip's would take 72 bytes per frame
                and bone)."""
                W, _ = _source_pose(src, a, b)
                # the source bone's turn from rest (source world), in the rig's axes, from the rig bone's
                # rest: R W Qs^T R^T Qt, as (R (W C)) with the constant C = Qs^T R^T Qt (2-D products)
                out = {}
                for tb, sb in copied:
                    WC = matmul_each(W[None, :, sb], (Qs[sb].T @ R.T @ Qt[tb])[None])[0]
                    out[tb] = np.swapaxes(matmul_each(np.swapaxes(WC, -1, -2)[None], R.T[None])[0], -1, -2)
                return out

            self._world_rotations = turns
        missing = [JOINTS[j] for j in range(len(JOINTS)) if not given[j]]
        if missing:
            self.warnings.append("the source skeleton has no bone for " + ", ".join(missing)
                                 + " (they follow their parent)")
        return SolveResult(local, root, kp, skel, np.zeros(len(kp)), "dense", {})

    def _shared_bones(self):
        """``(pairs, same)``: (rig bone, source bone) pairs sharing a name, and whether it is the same skeleton.

        The same skeleton: every bone the two share by name rests at the same
        place relative to the pelvis, within 1% of the leg length, whatever
        the bones' rolls or joint orients.
        """
        if getattr(self, "_shared", None) is not None:
            return self._shared
        src = self.source_rig
        rig, plan = self.rig, self.plan
        shared = [(b, src.rig.index(rig.names[b])) for b in range(len(rig)) if src.rig.has(rig.names[b])]
        same = False
        pelvis_s = src.rig.index(src.mapping.entries["pelvis"]) if "pelvis" in src.mapping.entries else -1
        if shared and pelvis_s >= 0 and plan.leg_length > 0 and len(shared) >= 0.9 * len(plan.mapping.entries):
            R = self._source_to_armature()
            ht = rig.head[[b for b, _ in shared]] - rig.head[plan.root]
            hs = (src.rig.head[[sb for _, sb in shared]] - src.rig.head[pelvis_s]) @ R.T / self.unit
            same = bool(np.max(np.linalg.norm(ht - hs, axis=-1)) < 0.01 * plan.leg_length)
        self._shared = (shared, same)
        self.same_skeleton = same
        return self._shared

    def _source_to_armature(self):
        """Rotation from the source's world (the clip's space) into the rig's armature axes."""
        Rm = self.minv[:3, :3] * self.unit
        return Rm / np.cbrt(np.linalg.det(Rm))

    def _copied_bones(self):
        """(rig bone, source bone) pairs whose world rotation is the source's, where that applies; or None.

        - The **same skeleton** (:meth:`_shared_bones`): every shared bone
          turns exactly as in the source, relative to its rest; the clip comes
          back as it was, fingers included.
        - Otherwise only in-chain bones no canonical joint stands for (a CMU
          ``LHipJoint``, a second neck bone) take the source's turn.

        Their rotations are computed with the canonical joints' in
        :meth:`_from_source_rig`.
        """
        from ..retarget.rigsolve import free_bones

        rig, plan = self.rig, self.plan
        shared, same = self._shared_bones()
        if not shared:
            return None
        if not same:
            mapped = {rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and rig.has(b)}
            chain = set(free_bones(rig, mapped, plan.root)) - mapped
            shared = [(b, sb) for b, sb in shared if b in chain]
            if not shared:
                return None
        else:
            self.warnings.append("same skeleton as the source: its bones' rotations are copied")
        return shared

    # -- stage 3 ---------------------------------------------------------------
    def fit(self, progress=None, cancel=None):
        """Carry the start pose onto the rig, then solve on the rig's own skeleton.

        Once per :meth:`solve` (it releases the solve's rotations). Afterwards
        :attr:`targets` keeps what the figures read: the effector rows'
        targets and weights.
        """
        from ..retarget.rigsolve import free_bones, solve_rig
        from ..retarget.solve import RetargetResult, quat_continuity, retarget
        from .targets import (dense_targets, floor_normal, foot_points, rest_floor_gap, settle_clavicles,
                              settle_hinges, sparse_targets, unbend_backwards)

        if self.solved is None or getattr(self.solved, "local_rot", 0) is None:
            raise RuntimeError("solve() first (once per fit: the fit releases the solve's rotations)")
        o = self.options
        t0 = time.perf_counter()
        sol = self.solved
        skel = getattr(sol, "skeleton", None) or Skeleton()
        plan = self.plan
        if o.scale is not None:
            scale = float(o.scale)
        else:
            src_leg = leg_length(skel)
            scale = plan.leg_length / src_leg if plan.leg_length > 0 and src_leg > 0 else 1.0 / self.unit
            if self.mode == "sparse" and self.source_rig is not None and self._source_rest_is_human():
                # a file's effectors: its pelvis must stand over its feet on the rig as in the
                # file, so the scale is the ratio of the hip heights at rest (as retargeting tools
                # and Blender's own placement do); the legs' lengths leave out where the hips
                # sit below the pelvis and how high the ankle is: a walk onto the meta-rig by
                # their ratio put the pelvis 7 cm beyond the legs' reach
                splan = _cached_plan(self.source_rig.rig, self.source_rig.mapping)
                src_h, rig_h = hip_height(splan), hip_height(plan, floor_normal(self.object_matrix))
                if src_h > 0 and rig_h > 0:
                    scale = rig_h / src_h
        self.scale = scale
        offsets = np.array(skel.offsets, dtype=np.float64)
        offsets[0] = (plan.K.T @ plan.rest_head[plan.root]) / scale + self.offset
        src_skel = Skeleton(offsets, np.array(skel.end_offsets, dtype=np.float64))
        if dataclasses.is_dataclass(sol):   # the solved keypoints are not read from here on
            self.solved = sol = dataclasses.replace(sol, keypoints=None)
        init = retarget(plan, sol.local_rot, sol.root_pos, src_skel, scale=scale, in_place=bool(o.in_place),
                        world_rotations=getattr(self, "_world_rotations", None), chunk=self.chunk)
        copied = set(getattr(self, "_copied", None) or ())
        self._world_rotations = None     # (the source's motion with it): carried onto the rig now
        if self.mode == "dense" and self.start == "network" and self.n_frames > 8:
            self._ease_start_jumps(init)
        if self.mode == "sparse" and self.n_frames > 4:
            # the network guesses what a few effectors leave open frame by frame:
            # smooth that guess (the start pose and prior); the effectors are met anyway
            from ..retarget.solve import pose_rig

            q = np.array(init.quaternions, dtype=np.float64)
            for a, b in self._stretches():   # (never across a cut: see SPARSE_CUT_SPEED)
                _smooth_columns("smooth_rotations", q[a:b], range(q.shape[1]), "butter", 0.5, self.fps,
                                unit=True, inplace=True)
            init.quaternions = quat_continuity(q, out=q)
            _, init.heads = pose_rig(plan.rig, init.quaternions, init.locations, chunk=self.chunk, rotations=False)
        self.initial = init
        start_driven, root_bone = init.driven, init.root_bone
        if dataclasses.is_dataclass(sol):   # the start pose holds them now (a long clip: hundreds of MB)
            self.solved = sol = dataclasses.replace(sol, local_rot=None, root_pos=None, keypoints=None)
        src = self.src_m    # (read only: no copy of a whole clip's keypoints)
        if o.in_place:   # as baked: the root's horizontal travel removed from every point
            travel = src[:, _J["pelvis"]] - src[:1, _J["pelvis"]]
            travel -= np.outer(travel @ self._up_arm(), self._up_arm())
            src = src - travel[:, None]
        n = floor_normal(self.object_matrix)
        self.up = n
        if self.mode == "sparse":
            targets, info = sparse_targets(plan, src, self.mask, scale, init_heads=init.heads, n=n, fps=self.fps)
            prior = self._sparse_prior()
        else:
            if getattr(self, "same_skeleton", False):
                # the source's feet are the rig's: their flat-foot heights are the rig's own
                # (bone tails, which these heights read, may point anywhere on either)
                fp = foot_points(plan, n)
                heights = {sd: {nm: h / scale for nm, _b, _o, h in pts if nm in ("ankle", "ball")}
                           for sd, pts in fp.items()}
            elif self.source_rig is not None and self._source_rest_is_human():
                heights = self._source_heights()
            else:   # no skeleton, or one whose rest says nothing about standing: from the motion
                heights = None
            targets, info = dense_targets(plan, src, self.mask, scale, self.fps, n,
                                          foot_lock=bool(o.foot_lock), source_heights=heights,
                                          skeleton_floor=heights is not None and not getattr(self, "same_skeleton",
                                                                                             False),
                                          source_rest=self._source_lengths() if heights is not None else None,
                                          rest_floor_gap=rest_floor_gap(plan, self.object_matrix),
                                          hands=self.source_rig is None)
            prior = 0.01
        self.targets, self.target_info = targets, info
        if len(targets) and self.mode != "sparse":   # the start pose's heads: no dense target reads them (60
            init.heads = None                        # MB a 100,000-frame clip); the fit poses the rig again
        mapped = [plan.rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and plan.rig.has(b)]
        key = ("free_bones", tuple(mapped), plan.root)   # (plans are cached: so is this)
        free = plan.__dict__.get(key)
        if free is None:
            free = plan.__dict__[key] = free_bones(plan.rig, mapped, plan.root)
        if isinstance(prior, dict):
            prior = np.array([prior.get(b, 0.05) for b in free])

        iterations = int(o.rig_iterations if o.rig_iterations is not None else RIG_ITERATIONS[self.start])
        if self.mode == "sparse" and iterations > 0:
            # effectors must be met to the millimetre: the prior fades over more steps
            # (more for clips, whose every frame must converge, straight limbs included)
            iterations = max(iterations, SPARSE_ITERATIONS if self.n_frames > 1 else SPARSE_POSE_ITERATIONS)
        # the share of the fit stage's bar the solve under way fills: the first pass, then the
        # settling rounds of a sparse clip (about as many steps again)
        settles = self.mode == "sparse" and self.n_frames > 4 and iterations > 0
        first = iterations / (iterations + SPARSE_SETTLE_ROUNDS * SPARSE_SETTLE_ITERATIONS) if settles else 1.0
        span = [0.0, first]

        def _progress(done, total):
            if cancel is not None and cancel():
                raise BakeCancelled("bake cancelled")
            if progress is not None and total:
                progress(span[0] + (span[1] - span[0]) * min(done / total, 1.0), "fit")
        if self.mode == "dense" and getattr(self, "same_skeleton", False) and all(b in copied for b in free):
            # the source's own skeleton: every solved bone already turns exactly as the
            # source's (its joints are met); the solve would only measure
            iterations = 0
        if len(targets):   # (0 iterations still measures the residuals of the start pose)
            # sparse: the prior fades so the effectors are met exactly; dense: many
            # targets decide the pose and a weak, constant prior only settles twist
            kw = dict(prior_rotation=prior, iterations=iterations, locked=self.locked, progress=_progress, chunk=512,
                      prior_decay=(1.0 if self.mode != "sparse" else SPARSE_PRIOR_DECAY if self.n_frames > 1
                                   else SPARSE_POSE_PRIOR_DECAY),
                      prior_floor=SPARSE_PRIOR_FLOOR if self.n_frames > 1 else SPARSE_POSE_PRIOR_FLOOR,
                      root_fixed=(np.eye(3) - np.outer(n, n)) if o.in_place else None,
                      all_heads=self.n_frames > 1 or not self.light)
            flipped = None
            if self.mode == "dense" and self.start == "network" and iterations > 0 and info.rigid:
                # the frames whose start pose has a segment turned far round (see _dense_second_pass),
                # read before the first pass unwinds them part of the way (no step taken here)
                start = solve_rig(plan.rig, init.quaternions, init.locations, targets, free, plan.root,
                                  **dict(kw, iterations=0, progress=None, all_heads=False, overwrite=True))
                flipped = self._segments_off(start.residual, targets, info, DENSE_START_FLIPPED)
                del start
            fit = solve_rig(plan.rig, init.quaternions, init.locations, targets, free, plan.root, overwrite=True,
                            **kw)
            self.initial = init = None      # (the fit started from it, in its arrays: not needed any more)
            if self.mode == "sparse":
                span[0] = span[1]   # (the second pass holds the bar where it is; a cancel still stops it)
                fit, targets, info = self._second_pass(fit, targets, info, src, scale, free, prior, kw)
                if settles:
                    fit = self._mend_islands(fit, targets, free, kw)
                    fit = self._settle_in_time(fit, targets, free, kw, span)
                    fit, targets, info = self._second_pass(fit, targets, info, src, scale, free, prior, kw)
            elif iterations > 0:
                fit = self._dense_second_pass(fit, targets, info, free, kw, flipped)
            quats, locs, heads = fit.quaternions, fit.locations, fit.heads
            self.residual = fit.residual
            if self.mode == "dense" and self.source_rig is None and iterations > 0:
                # keypoints leave the thighs' and upper arms' turn about themselves open (the solve
                # met the joints with a knee or elbow turned any way): the knees and elbows as hinges
                # settle it, every joint unmoved (a source skeleton's rotations carry their own; six
                # effectors: held-out rotations 25.83 -> 26.15 deg, those with a child 27.47 -> 26.76;
                # with the rig's own spine posture 20.38 -> 20.27 and 20.60 -> 19.31, but the
                # CMU-converted folders, whose elbows bend off the straight-arm rule, 13.11 -> 15.90;
                # the knees alone 20.38 -> 19.88 and 13.11 -> 13.45; 200 frames a clip: not done)
                settle_hinges(plan, quats, locs, chunk=self.chunk, locked=self.locked)
                settle_clavicles(plan, quats, locs, chunk=self.chunk, locked=self.locked)
                quat_continuity(quats, out=quats)
            elif self.mode == "sparse" and iterations > 0:
                # an ankle or a wrist at its limb's full reach leaves the bend's way open: a knee or an
                # elbow left bent backwards a little bends forwards as much (the effectors unmoved)
                turned = unbend_backwards(plan, quats, locs, chunk=self.chunk, locked=self.locked)
                # the clavicles' turn about themselves, as in a dense bake (no joint moves; held-out
                # six effectors, 200 frames a clip: 20.49 -> 20.38 deg, the CMU-converted folders
                # 13.10 -> 13.11)
                settle_clavicles(plan, quats, locs, chunk=self.chunk, locked=self.locked)
                if turned.any():
                    from ..retarget.solve import pose_rig

                    k = np.flatnonzero(turned)
                    _, heads[k] = pose_rig(plan.rig, quats[k], locs[k], chunk=self.chunk, rotations=False)
                quat_continuity(quats, out=quats)
        else:
            quats, locs, heads = init.quaternions, init.locations, init.heads
            if heads is None:   # (the start pose eased: _ease_start_jumps)
                from ..retarget.solve import pose_rig

                _, heads = pose_rig(plan.rig, quats, locs, chunk=self.chunk, rotations=False)
            self.residual = np.zeros((self.n_frames, 0))
        driven = start_driven.copy()
        driven[free] = True
        if o.smooth != "none" and o.smooth_target in ("rotations", "both") and self.n_frames > 2:
            from ..retarget.solve import pose_rig

            own = self.initial is None     # the fit's arrays (not the start pose's): smoothed in place
            fit = heads = None             # (posed again below)
            # (the driven bones' tracks only, a few at a time: each is filtered on its own)
            quats = _smooth_columns("smooth_rotations", quats, np.flatnonzero(driven), o.smooth,
                                    float(o.smooth_strength), self.fps, unit=True, inplace=own)
            quat_continuity(quats, out=quats)
            r = plan.root
            loc = _smooth("smooth_keypoints", locs[:, r:r + 1], o.smooth, float(o.smooth_strength), self.fps)
            if not own:
                locs = locs.copy()
            locs[:, r] = np.asarray(loc)[:, 0]
            _, heads = pose_rig(plan.rig, quats, locs, chunk=self.chunk, rotations=False)
        self.result = RetargetResult(list(plan.bone_names), quats, locs, heads, scale, driven, root_bone)
        # what the figures read of the targets: the effector rows' targets and weights; the other
        # rows' per-frame arrays and the per-frame projections (T, 3, 3) only the fit reads (a
        # 100,000-frame clip: some 200 MB)
        keep = set(getattr(info, "effectors", {}).values())
        self.targets = type(targets)(targets.points, [
            {k: v for k, v in r.items() if k != "proj" and (i in keep or k not in ("target", "weight"))}
            for i, r in enumerate(targets.rows)])
        self.seconds["fit"] = time.perf_counter() - t0
        return self.result

    def _pose_jumps(self, q):
        """Frames (T-1,) bool after which the rotations ``q`` (T, B, 4) jump and the source does not.

        A bone turning more than :data:`START_JUMP_DEG` and :data:`START_JUMP_FACTOR`
        times its median step in one frame, while no source point moves more
        than :data:`START_JUMP_SOURCE` times its median step (a cut in the
        source is the source's).
        """
        step = np.degrees(2.0 * np.arccos(np.abs((q[1:] * q[:-1]).sum(-1)).clip(0.0, 1.0)))   # (T-1, B)
        jump = (step > np.maximum(START_JUMP_DEG, START_JUMP_FACTOR * np.median(step, axis=0))).any(1)
        moved = np.nan_to_num(vector_norm(np.diff(self.src_m, axis=0)), nan=0.0).max(1)
        return jump & (moved < START_JUMP_SOURCE * np.median(moved))

    def _ease_start_jumps(self, init):
        """Dense, from the network: ease the start pose across frames where it jumps and the source does not.

        The network answers frame by frame, and now and then its answer takes
        another branch from one frame to the next (a chest bent 33 degrees
        otherwise at 120 fps, where a spine bone turns 0.4 a frame). On the
        clip's own skeleton the solve meets the joints anyway; on other
        proportions, where the targets cannot all be met and leave some turn
        open (how a spine shares a bend), the solve stays near its start, and
        the body jumped with it (a `cmu_sl` clip onto the meta-rig: the chest
        7 cm in one frame). A frame where a bone of the start pose turns more
        than :data:`START_JUMP_DEG` and :data:`START_JUMP_FACTOR` times its
        median step, while no source point moves more than
        :data:`START_JUMP_SOURCE` times its median step (a cut in the source
        is the source's), blends the start pose into its low-pass over
        :data:`START_JUMP_SECONDS` either side. Modifies ``init`` in place.
        """
        from ..retarget.solve import quat_continuity

        q = init.quaternions           # (read; the clip's whole array is copied only where it jumps)
        jump = self._pose_jumps(q)
        if not jump.any():
            return
        T = len(q)
        half = max(int(round(START_JUMP_SECONDS * self.fps)), 2)
        wgt = np.zeros(T)
        for t in np.flatnonzero(jump):      # (a tent around the jump, between frames t and t + 1)
            lo, hi = max(t - half, 0), min(t + 1 + half, T)
            wgt[lo:hi] = np.maximum(wgt[lo:hi], 1.0 - np.abs(np.arange(lo, hi) - (t + 0.5)) / (half + 1.0))
        # the low-pass of a window around each stretch of eased frames (with a margin for the filter)
        touched = np.flatnonzero(wgt > 0)
        breaks = np.flatnonzero(np.diff(touched) > 1)
        pad = 4 * half
        for a, b in zip(np.r_[touched[0], touched[breaks + 1]], np.r_[touched[breaks], touched[-1]] + 1):
            lo, hi = max(a - pad, 0), min(b + pad, T)
            low = np.array(q[lo:hi], dtype=np.float64)
            _smooth_columns("smooth_rotations", low, range(q.shape[1]), "butter", 0.5, self.fps, unit=True,
                            inplace=True)
            quat_continuity(low, out=low)
            part = np.array(q[a:b], dtype=np.float64)
            low = low[a - lo:b - lo]
            low *= np.sign((low * part).sum(-1, keepdims=True))
            part += wgt[a:b, None, None] * (low - part)
            q[a:b] = part / vector_norm(part, keepdims=True)
        init.quaternions = quat_continuity(q, out=q)
        init.heads = None     # (stale now; no dense target reads them: posed where needed)

    def _mend_islands(self, fit, targets, free, kw):
        """Sparse clips: a short run of frames the solve left on another branch, solved again from its neighbours'.

        Six effectors leave two good spines for many poses (the chest ahead of
        the pelvis-head line or behind it), and the solve of one frame lands
        on either: where the solved pose jumps (a bone turning more than
        :data:`START_JUMP_DEG` and :data:`START_JUMP_FACTOR` times its median
        step in one frame) and no effector does (:data:`START_JUMP_SOURCE`
        times its median step), the clip splits into runs. A run of at most
        :data:`ISLAND_SECONDS`, shorter than the runs beside it, is solved
        again from their pose (at a clip's end, the next run's first or the
        last run's last pose; between two runs, from one to the other), its
        prior on that pose. The low-passes that settle the clip afterwards
        average such a run away in the middle of a clip only partly, and at
        its ends not at all: four `fair1` clips opened with the chest 12-13
        cm off for four frames, then jumped back. Returns the new fit.
        """
        from ..model.rotations_np import quat_slerp
        from ..retarget.rigsolve import solve_rig

        q = fit.quaternions
        T = len(q)
        # (the spine's branches: the bones from the pelvis to the head)
        cols = np.array([b for b in free if b in set(self.plan.path)], dtype=np.int64)
        if T < 3 or not cols.size:
            return fit
        jump = self._pose_jumps(q[:, cols])
        if not jump.any():
            return fit
        bounds = [0, *(np.flatnonzero(jump) + 1).tolist(), T]    # the runs between jumps
        runs = np.diff(bounds)
        most = max(int(round(ISLAND_SECONDS * self.fps)), 1)
        start = np.array(q, dtype=np.float64)
        sub = []
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):   # (per run: a few a clip)
            left = runs[i - 1] if i > 0 else 0
            right = runs[i + 1] if i + 1 < len(runs) else 0
            if runs[i] > most or runs[i] >= max(left, right):
                continue
            if i == 0:
                start[a:b] = start[b]
            elif i == len(runs) - 1:
                start[a:b] = start[a - 1]
            else:
                f = (np.arange(a, b) - a + 1.0) / (b - a + 1.0)
                start[a:b] = quat_slerp(np.broadcast_to(start[a - 1], start[a:b].shape),
                                        np.broadcast_to(start[b], start[a:b].shape),
                                        np.broadcast_to(f[:, None], start[a:b].shape[:2]))
            sub.extend(range(a, b))
        if not sub:
            return fit
        sub = np.asarray(sub)
        again = solve_rig(self.plan.rig, start[sub], fit.locations[sub], targets.frames(sub), free, self.plan.root,
                          **dict(kw, progress=None))
        return fit.take_frames(sub, again)

    def _settle_in_time(self, fit, targets, free, kw, span):
        """Sparse clips: the pose the effectors leave open, made to flow from frame to frame.

        :data:`SPARSE_SETTLE_ROUNDS` rounds of: the free bones' rotations and
        the root's place low-passed over time (zero phase), then
        :data:`SPARSE_SETTLE_ITERATIONS` steps of the rig-space solve from
        there, its prior on that smoothed pose, which meet the effectors
        again. Each round leaves less of the frame-to-frame wander in the
        directions no effector decides. Bones with a locked rotation axis are
        not low-passed. ``span``: the [start, end] of the fit
        stage's bar that ``kw["progress"]`` fills (set per round, from where
        the first pass ended). Returns the new fit.
        """
        from ..retarget.rigsolve import solve_rig
        from ..retarget.solve import quat_continuity

        r = self.plan.root
        kw = dict(kw, iterations=SPARSE_SETTLE_ITERATIONS)
        rounds = int(SPARSE_SETTLE_ROUNDS)
        # (a bone with a locked axis keeps the solve's rotation: a low-pass of its whole rotation
        # would move it about the locked axes too, and the solve keeps locked axes where they start)
        cols = [b for b in free if not np.any(self.locked.get(int(b), False))]
        lo = span[1]
        stretches = self._stretches()
        for k in range(rounds):
            span[:] = [lo + (1.0 - lo) * k / rounds, lo + (1.0 - lo) * (k + 1) / rounds]
            q, loc = fit.quaternions, fit.locations
            for a, b in stretches:   # (each stretch between cuts on its own, in place)
                _smooth_columns("smooth_rotations", q[a:b], cols, "butter", SPARSE_SETTLE_STRENGTH, self.fps,
                                unit=True, inplace=True)
                loc[a:b, r] = np.asarray(_smooth("smooth_keypoints", loc[a:b, r:r + 1], "butter",
                                                 SPARSE_SETTLE_STRENGTH, self.fps))[:, 0]
            quat_continuity(q, out=q)
            fit = solve_rig(self.plan.rig, q, loc, targets, free, r, overwrite=True, **kw)
        span[:] = [1.0, 1.0]
        return fit

    def _cuts(self):
        """Frames (sorted) to which a given effector jumped faster than :data:`SPARSE_CUT_SPEED`."""
        eff = [_K[e] for e in SPARSE_EFFECTORS]
        p = self.src_m[:, eff]
        with np.errstate(invalid="ignore"):
            speed = vector_norm(np.diff(p, axis=0)) * self.fps
        return [int(t) + 1 for t in np.flatnonzero(np.nan_to_num(speed, nan=0.0).max(axis=1) > SPARSE_CUT_SPEED)]

    def _stretches(self):
        """``[(a, b)]``: the runs of frames between cuts (:meth:`_cuts`) long enough to low-pass (over 4)."""
        edges = [0, *self._cuts(), self.n_frames]
        return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b - a > 4]

    def _second_pass(self, fit, targets, info, src, scale, free, prior, kw):
        """Sparse mode: the frames in which an effector is still over 1 mm off, solved once more.

        From the pose the first pass reached, with the prior on it weak (an
        effector near the end of its reach, a spine nearly straight between
        pelvis and head: the fading prior left it short). An effector out of
        reach of its chain as solved (:meth:`_stretched`) keeps only a fading
        share of its weight, so that the others are met. Returns the new
        ``(fit, targets, info)``.
        """
        from ..retarget.rigsolve import solve_rig
        from .targets import sparse_targets

        ok = REACH_OK_MM / 1000.0 / self.unit
        rows = list(info.effectors.values())
        again = (fit.residual[:, rows] > ok).any(axis=1) if rows else np.zeros(self.n_frames, dtype=bool)
        stretched = self._stretched(fit, targets, info)
        for frames in stretched.values():
            again |= frames
        if not again.any():
            return fit, targets, info
        plan = self.plan
        targets, info = sparse_targets(plan, src, self.mask, scale, init_heads=fit.heads, stretched=stretched,
                                      n=self.up, fps=self.fps)
        self.targets, self.target_info = targets, info
        sub = np.flatnonzero(again)
        part = targets.frames(sub)
        kw = dict(kw, prior_rotation=np.asarray(prior) * SPARSE_SECOND_PASS_PRIOR,
                  iterations=max(int(kw["iterations"]), 6))
        again_fit = solve_rig(plan.rig, fit.quaternions[sub], fit.locations[sub], part, free, plan.root, **kw)
        return fit.take_frames(sub, again_fit), targets, info

    @staticmethod
    def _segments_off(residual, targets, info, share=None):
        """Frames (T,) bool in which a segment of fixed length is off by ``share`` of its length
        (default :data:`DENSE_SECOND_PASS_OFF`)."""
        rows = list(info.rigid)
        lengths = np.array([info.rigid[r] for r in rows])
        weights = np.stack([targets.rows[r]["weight"] for r in rows], 1)
        share = DENSE_SECOND_PASS_OFF if share is None else share
        return ((residual[:, rows] > share * lengths) & (weights > 0)).any(axis=1)

    def _dense_second_pass(self, fit, targets, info, free, kw, flipped=None):
        """Dense mode: the frames in which a segment of fixed length still points elsewhere, solved further.

        The network's start pose can have a segment turned far from the
        source's (a child's chest twisted 150 degrees about the spine, its
        clavicles with it): a few steps bring it only part of the way, and
        the figures show it (joints 18 cm off, the pose popping). Those frames
        only (still off after the first pass, or ``flipped``: off in the start
        pose, which the first pass may have unwound only part of the way), from
        where the first pass left them, get :data:`DENSE_SECOND_PASS_ITERATIONS`
        more steps. Returns the new fit.
        """
        from ..retarget.rigsolve import solve_rig

        if not info.rigid:
            return fit
        again = self._segments_off(fit.residual, targets, info)
        if flipped is not None:
            again |= flipped
        if not again.any():
            return fit
        sub = np.flatnonzero(again)
        # (the prior holds on to where the first pass left them, the wrong way round: weaker)
        tick = kw.get("progress")   # (the bar stays where the first pass ended; a cancel still stops it)
        kw = dict(kw, iterations=DENSE_SECOND_PASS_ITERATIONS,
                  progress=None if tick is None else (lambda done, total: tick(1, 1)),
                  prior_rotation=np.asarray(kw["prior_rotation"]) * DENSE_SECOND_PASS_PRIOR)
        more = solve_rig(self.plan.rig, fit.quaternions[sub], fit.locations[sub], targets.frames(sub), free,
                         self.plan.root, **kw)
        better = (more.residual ** 2).sum(1) < (fit.residual[sub] ** 2).sum(1)
        return fit.take_frames(sub[better], more, keep=better)

    def _stretched(self, fit, targets, info):
        """Hand -> frames (T,) bool in which it is missed by over REACH_WARN_MM, out of reach of its arm as solved."""
        from .targets import CHAIN_ROOTS

        out = {}
        ok = REACH_WARN_MM / 1000.0 / self.unit
        for eff, reach in info.reach.items():
            if eff.startswith("foot"):
                # a foot out of reach keeps its weight: the hips come down to it rather than
                # the foot leaving its place (a planted foot must not slide)
                continue
            row = targets.rows[info.effectors[eff]]
            tgt = info.clamped.get(eff, row["target"])     # where the user wants it
            b = self.plan.rig.index(self.mapping.entries[eff])
            missed = (vector_norm(fit.heads[:, b] - tgt) > ok) & (row["weight"] > 0)
            if not missed.any():
                continue
            root = self.plan.rig.index(self.mapping.entries[CHAIN_ROOTS[eff]])
            far = missed & (vector_norm(tgt - fit.heads[:, root]) > 0.98 * reach)
            if far.any():
                out[eff] = far
        return out

    def _up_arm(self):
        from .targets import floor_normal

        return floor_normal(self.object_matrix)

    def _sparse_prior(self):
        """Per-bone prior: the torso resists more than the limbs (they do the reaching)."""
        rig = self.plan.rig
        out = {}
        limbs = set()
        for j in ("upperarm_l", "forearm_l", "hand_l", "upperarm_r", "forearm_r", "hand_r", "thigh_l", "calf_l",
                  "foot_l", "thigh_r", "calf_r", "foot_r", "clavicle_l", "clavicle_r"):
            b = self.mapping.entries.get(j)
            if b is not None and rig.has(b):
                limbs.add(rig.index(b))
        for b in range(len(rig)):
            out[b] = 0.05 if b in limbs else 0.3
        return out

    def _source_heights(self):
        """Flat-foot heights (metres) of the source's ankles and balls per side, from its skeleton when known."""
        src = self.source_rig
        if src is None:
            return None
        from .targets import foot_points

        try:
            splan = _cached_plan(src.rig, src.mapping)
        except ValueError:
            return None
        fp = foot_points(splan, np.array([0.0, 0.0, 1.0]))
        if not fp:
            return None
        return {side: {name: h for name, _b, _o, h in pts if name in ("ankle", "ball")} for side, pts in fp.items()}

    def _source_lengths(self):
        """Rest distances (metres) between the source skeleton's mapped joints, when it has a skeleton."""
        src = self.source_rig
        if src is None:
            return None
        out = {}
        for j, bone in src.mapping.entries.items():
            if j in _J and src.rig.has(bone):
                out[j] = src.rig.head[src.rig.index(bone)]
        return out

    # -- stage 4 ---------------------------------------------------------------
    def measure(self):
        """Compute :attr:`figures` and add warnings for what is off."""
        from ..retarget import metrics
        from ..retarget.solve import target_keypoints

        _return_free_memory(self.n_frames)    # (the fit's temporaries: before the figures' whole-clip arrays)
        res = self.result
        plan = self.plan
        u = self.unit
        J = len(JOINTS)
        f = BakeFigures()
        # the rig's keypoints serve bone directions (two ends given) and motion figures
        # (3 frames or more): a dragged pose of a few effectors has neither
        pairs = self.mask[:, :J] & self.mask[:, list(BONE_CHILD)]
        if self.n_frames >= 3 or pairs.any():
            tk = target_keypoints(plan, res.quaternions, res.locations, unit_scale=u, chunk=self.chunk)   # metres
            body = (self.kp_body.astype(np.float64) if self.kp_body is not None
                    else self.src_m @ plan.K)   # the source as read
            f.bone_direction_error_deg = metrics.bone_direction_error(tk, body, self.mask)
            f.jitter = metrics.jitter(tk[:, :J], self.fps)
            # (at the rig's size: a body a quarter taller moves a quarter further in the same motion)
            f.source_jitter = metrics.jitter(body[:, :J], self.fps) * self.scale * u
            del body
            f.foot_sliding_mm = metrics.foot_sliding(tk, self.fps)
            del tk
        # joints at the rig's scale (world metres)
        ent = {j: plan.rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and plan.rig.has(b)}
        js = [_J[j] for j in ent]
        rig_j = res.heads[:, list(ent.values())] * u
        src_j = self.src_m[:, js] * self.scale * u
        f.joint_error_mm = metrics.keypoint_error(rig_j, src_j, self.mask[:, js])
        # effectors
        info = self.target_info
        d = []
        for eff, row in info.effectors.items():
            w = self.targets.rows[row]["weight"] > 0
            if eff in info.clamped:    # measured against where the user wants it, not the clamp
                b = plan.rig.index(self.mapping.entries[eff])
                r = vector_norm(res.heads[:, b] - info.clamped[eff]) * u * 1000.0
            else:
                r = self.residual[:, row] * u * 1000.0
            d.append(np.where(w, r, np.nan))
            if self.mode == "sparse" and w.any():
                worst = float(np.nanmax(r[w]))
                if worst > REACH_OK_MM:
                    why = self._reach_reason(eff, r, w)
                    f.unreachable.append(f"{eff} {worst:.0f} mm away{why}")
        if d:
            d = np.stack(d, 1)
            if np.isfinite(d).any():
                f.effector_reach_mm = (float(np.nanmean(d)), float(np.nanmax(d)))
        # floor, upright, knees (world heights)
        f.floor_error_cm = self._floor_error(res)
        if "head" in ent:   # (the two bones' heights only: a long clip's every bone would take memory)
            up_rig = self._world_heights(res.heads[:, [ent["head"], ent["pelvis"]]])
            f.upright_share = float(np.mean(up_rig[:, 0] > up_rig[:, 1]))
        ok = self.mask[:, _J["head"]] & self.mask[:, _J["pelvis"]]
        if ok.any():
            sh = self.src_m[:, [_J["head"], _J["pelvis"]]] @ self.up
            f.source_upright_share = float(np.mean(sh[ok, 0] > sh[ok, 1]))
        f.knees_backwards = self._knees_backwards(res.heads, ent)
        self.figures = f
        self._warn(f)
        return f

    def _reach_reason(self, eff, r, w):
        reach = self.target_info.reach.get(eff)
        root = {"hand_l": "upperarm_l", "hand_r": "upperarm_r", "foot_l": "thigh_l", "foot_r": "thigh_r"}.get(eff)
        if reach is None or root is None:
            return ""
        b = self.plan.rig.index(self.mapping.entries[root])
        tgt = self.target_info.clamped.get(eff, self.targets.rows[self.target_info.effectors[eff]]["target"])
        dist = vector_norm(tgt - self.result.heads[:, b])
        far = w & (dist > reach * 0.999)
        if far.any():
            return f" (out of reach of the {root.split('_')[0]} chain on {int(far.sum())} frames)"
        return ""

    def _world_heights(self, heads):
        m = self.object_matrix
        return heads @ m[2, :3] + m[2, 3]

    def _floor_error(self, res):
        from .targets import foot_points

        info = self.target_info
        if info.contacts is None or not info.contacts.any():
            return float("nan")
        fp = foot_points(self.plan, self.up)
        if not fp:
            return float("nan")
        from ..retarget.solve import pose_rig

        from ..retarget.solve import frame_chunks

        rig = self.plan.rig
        feet = {b for side in fp.values() for _n, b, _o, _h in side}
        bones = sorted(feet | {a for b in feet for a in rig.ancestors(b)})
        low = np.empty(self.n_frames)
        for a, b in frame_chunks(self.n_frames, self.chunk):
            W, X = pose_rig(rig, res.quaternions[a:b], res.locations[a:b], bones=bones, chunk=b - a)
            pts = np.stack([X[:, k] + W[:, k] @ off for side in fp.values() for _n, k, off, _h in side], 1)
            # (world units above the object's floor, the plane through its origin: where the targets
            # put the rig's floor; a rig placed above the world's origin stands on its own)
            low[a:b] = (pts @ self.object_matrix[2, :3]).min(axis=1)
        # (above the rig's floor: the sole under its lowest foot point, where the bake put one)
        low -= getattr(info, "sole", 0.0) * float(np.linalg.norm(self.object_matrix[2, :3]))
        c = info.contacts.any(1)
        return float(np.median(low[c]) * 100.0)

    def _knees_backwards(self, heads, ent) -> int:
        out = np.zeros(self.n_frames, dtype=bool)
        for s in "lr":
            names = [f"thigh_{s}", f"calf_{s}", f"foot_{s}"]
            if not all(n in ent for n in names):
                continue
            fwd_j = f"toe_{s}" if f"toe_{s}" in ent else None
            H, Kn, A = (heads[:, ent[n]] for n in names)
            Fd = (heads[:, ent[fwd_j]] - A) if fwd_j else None
            src = self.src_m
            rig_back = _backwards(H, Kn, A, Fd, self.up)
            sk = [_J[n] for n in names]
            if not rig_back.any() or not self.mask[:, sk].all(axis=1).any():
                out |= rig_back      # (the source's knee unknown: effectors only)
                continue
            sf = src[:, _K[f"toe_{s}"]] - src[:, sk[2]] if self.mask[:, _K[f"toe_{s}"]].any() else None
            src_back = _backwards(src[:, sk[0]], src[:, sk[1]], src[:, sk[2]], sf, self.up)
            out |= rig_back & ~src_back
        return int(out.sum())

    def _warn(self, f: BakeFigures):
        if np.isfinite(f.floor_error_cm) and abs(f.floor_error_cm) > FLOOR_WARN_CM:
            what = "float" if f.floor_error_cm > 0 else "sink"
            self.warnings.append(f"the feet {what} {abs(f.floor_error_cm):.1f} cm "
                                 f"{'above' if what == 'float' else 'below'} the floor over the contacts")
        if self.mode == "sparse" and f.unreachable:
            self.warnings.append("effectors not reached: " + "; ".join(f.unreachable))
        elif np.isfinite(f.effector_reach_mm[1]) and f.effector_reach_mm[1] > REACH_WARN_MM and self.mode == "sparse":
            self.warnings.append(f"an effector ends {f.effector_reach_mm[1]:.1f} mm from its target")
        if f.knees_backwards:
            self.warnings.append(f"a knee bends backwards on {f.knees_backwards} frames")
        if (np.isfinite(f.upright_share) and np.isfinite(f.source_upright_share)
                and f.upright_share < f.source_upright_share - 0.05):
            self.warnings.append(f"upright on {f.upright_share:.0%} of the frames against the source's "
                                 f"{f.source_upright_share:.0%}")

    def release(self):
        """Drop the whole-clip arrays that only the solve, the fit and the figures read.

        Kept: :attr:`result` (the pose-bone values to key), :attr:`figures`,
        :attr:`warnings`, :attr:`mask` and the solve's per-frame error. A
        100,000-frame bake holds about a gigabyte of these (keypoints in
        three frames, the start pose, the fit's targets and residuals, the
        network's or the source's joint rotations); the Blender layer calls
        this before it writes the keys, which take memory of their own.
        """
        for name in ("kp_solve", "kp_body", "src_m", "targets", "residual", "_world_rotations"):
            if getattr(self, name, None) is not None:
                setattr(self, name, None)
        self.initial = None
        if self.source_rig is not None:
            self.source_rig = _motionless(self.source_rig)
        if dataclasses.is_dataclass(self.solved):
            self.solved = dataclasses.replace(self.solved, local_rot=None, root_pos=None, keypoints=None)
        _return_free_memory(self.n_frames)

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


def _return_free_memory(frames):
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    A long bake frees hundreds of MB of chunk-sized temporaries between its
    stages; glibc keeps them mapped (they count in the process's memory)
    while the next stage's whole-clip arrays are mapped anew beside them.
    A bake of fewer than :data:`TRIM_MIN_FRAMES` frames has little to give
    back, and a trim costs about 0.3 ms (two a Live Solve tick: 7 % of it).
    """
    global _TRIM
    if frames < TRIM_MIN_FRAMES:
        return
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL(None).malloc_trim
        except Exception:    # not glibc (macOS, musl without it; Windows has no CDLL(None))
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None
#: Bakes of fewer frames skip :func:`_return_free_memory`.
TRIM_MIN_FRAMES = 4096


def _motionless(source_rig):
    """The source skeleton without its motion (zero frames): what a bake reads of it after the solve."""
    if source_rig.num_frames == 0:
        return source_rig
    B = len(source_rig.rig)
    return type(source_rig)(source_rig.rig, source_rig.mapping, np.zeros((0, B, 4), np.float32),
                            np.zeros((0, B, 3), np.float32), list(source_rig.notes))


def _source_pose(src, a, b):
    """``(W, X)``: the source skeleton posed at frames ``a:b`` (every bone; :func:`..retarget.solve.pose_rig`).

    The last chunk posed is kept on the source: a clip of one chunk (up to
    :data:`..retarget.solve.CHUNK_FRAMES` frames, most clips) is posed once,
    not three times (its joints, its canonical rotations, the bones whose
    turn the rig copies), 30 ms of a 3,000-frame clip each.
    """
    from ..retarget.solve import pose_rig

    key = (a, b, id(src.quaternions), id(src.locations))
    cached = src.__dict__.get("_pose_cache")
    if cached is not None and cached[0] == key:
        return cached[1]
    out = pose_rig(src.rig, src.quaternions[a:b], src.locations[a:b], chunk=b - a)
    src.__dict__["_pose_cache"] = (key, out)
    return out


def _joints_from_source_rig(kp, source_rig, chunk):
    """Keypoints whose joints are the source skeleton's mapped bone heads (the same mapper as the rig's).

    A reader may place a canonical joint between bones (a CMU ``LHipJoint``
    and ``LeftHip``); the targets of the rig-space solve must name the very
    points the source skeleton's mapping names, or a skeleton baked onto
    itself would be pulled away from where it is. The source is posed
    ``chunk`` frames at a time, only the mapped bones and their ancestors.
    """
    from ..retarget.solve import frame_chunks, pose_rig

    out = kp.copy()
    rig = source_rig.rig
    pairs = [(j, rig.index(source_rig.mapping.entries[name])) for j, name in enumerate(JOINTS)
             if source_rig.mapping.entries.get(name) is not None and rig.has(source_rig.mapping.entries[name])]
    if not pairs:
        return out
    need = sorted({b for _, b in pairs} | {a for _, b in pairs for a in rig.ancestors(b)})
    chunks = list(frame_chunks(len(kp), chunk))
    for a, b in chunks:
        if len(chunks) == 1:   # (posed whole once, for the stages after this one too)
            _, X = _source_pose(source_rig, a, b)
        else:
            _, X = pose_rig(rig, source_rig.quaternions[a:b], source_rig.locations[a:b], bones=need, chunk=b - a)
        for j, sb in pairs:
            part = out[a:b, j]
            given = np.isfinite(part).all(-1)         # a masked joint stays masked
            part[given] = X[given, sb]
    return out


_PLANS: dict = {}


def _cached_plan(rig, mapping, spine="segments"):
    """:func:`..retarget.solve.plan_retarget`, remembered for the last few (rig, mapping) pairs.

    Solve Frame and Live Solve plan the same rig many times a second; the key
    is the rig's content (names, parents, rest) and the mapping, so an edited
    rig or mapping is planned anew. ``spine``: as :func:`..retarget.solve.plan_retarget`'s
    (``"rest"`` for solves from a few effectors).
    """
    from ..retarget.solve import plan_retarget

    import hashlib

    h = hashlib.sha1()
    h.update("\0".join(rig.names).encode())
    for a in (rig.parents, rig.matrix_local, rig.head, rig.tail):
        h.update(np.ascontiguousarray(a).tobytes())
    if rig.reference_matrix is not None:
        h.update(np.ascontiguousarray(rig.reference_matrix).tobytes())
    h.update(repr(sorted(mapping.entries.items())).encode())
    h.update(repr(sorted((k, tuple(v)) for k, v in getattr(mapping, "twist", {}).items())).encode())
    h.update(repr(list(getattr(mapping, "extra_spine", []))).encode())
    h.update(spine.encode())
    key = h.hexdigest()
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_retarget(rig, mapping, spine=spine)
        if len(_PLANS) >= 8:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
    return plan


#: A foot within this many degrees of its hip-ankle line (pointed along the shin: on tiptoe
#: with the knee bent deep, kneeling on the instep) says nothing of where the knee's front is:
#: across that line it points anywhere, and a few degrees of the leg's direction flip it (a
#: dance bent 125 degrees at the knee, foot 4 degrees off the line: "backwards" on 66 frames
#: of the bake and on none of the source, thigh and shin within 3 degrees of the source's).
FOOT_ALONG_LEG_DEG = 20.0


def _backwards(H, Kn, A, F, up, degrees: float = 5.0):
    """Frames where a knee at ``Kn`` bends backwards (towards the heel side) by more than ``degrees``.

    Judged against the foot's direction ``F`` across the hip-ankle line;
    frames whose foot lies within :data:`FOOT_ALONG_LEG_DEG` of that line
    (or no foot direction at all) are never counted.
    """
    u = A - H
    nu = vector_norm(u, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = u / nu
    k = Kn - H
    off = k - np.sum(k * u, -1, keepdims=True) * u
    if F is None:    # no toes: the body's forward is unknown here; nothing to say
        return np.zeros(len(H), dtype=bool)
    fwd = F - np.sum(F * u, -1, keepdims=True) * u
    nf = vector_norm(fwd, keepdims=True)
    across = nf[..., 0] > np.sin(np.radians(FOOT_ALONG_LEG_DEG)) * vector_norm(F)
    with np.errstate(invalid="ignore", divide="ignore"):
        fwd = fwd / nf
        lk = vector_norm(k)
        s = np.sum(off * fwd, -1) / lk
    return across & (np.nan_to_num(s, nan=0.0) < -np.sin(np.radians(degrees)))


def _smooth_columns(name, x, columns, *args, unit=False, inplace=False, group=4):
    """``x`` (T, N, ...) with its ``columns`` (of axis 1) smoothed over time, ``group`` at a time (a copy).

    Every track is filtered on its own (:mod:`..retarget.smoothing`), so
    this is :func:`_smooth` of the whole array restricted to ``columns``; the
    filters' temporaries (padded copies, passes) stay a few tracks wide
    instead of a long clip's whole. ``unit``: the results (quaternions) are
    normalised. ``inplace``: into ``x`` itself (float64).
    """
    out = x if inplace else np.array(x, dtype=np.float64)
    columns = list(columns)
    for k in range(0, len(columns), group):
        g = columns[k:k + group]
        y = np.asarray(_smooth(name, out[:, g], *args))
        if unit:
            y = y / vector_norm(y, keepdims=True)
        out[:, g] = y
    return out


def _smooth(name, *args):
    try:
        from ..retarget import smoothing
    except ImportError as ex:
        raise BakeError(f"smoothing is not available ({ex})") from None
    return getattr(smoothing, name)(*args)
