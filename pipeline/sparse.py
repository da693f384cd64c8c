"""The sparse path: a few effectors (pelvis, head, hands, feet) met to the millimetre (no ``bpy``).

The network guesses what six effectors leave open frame by frame; the path
smooths that guess, fades the prior on it so the effectors are met, solves
again the frames an effector missed, and over a clip settles the open part
of the pose in time (:func:`settle_in_time`) without crossing a cut.
"""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import CANONICAL, KEYPOINTS, SPARSE_EFFECTORS
from . import tuning
from .filters import smooth, smooth_columns
from .paths import BakePath, pose_jumps
from .plans import cached_plan, hip_height, leg_length
from .source import rest_is_human, source_rest_is_human
from .start import network_start

__all__ = ["SparsePath", "settle_in_time", "mend_islands", "cuts", "stretches"]

_K = {n: i for i, n in enumerate(KEYPOINTS)}
#: The foot points a body's height (its pelvis over them) is measured from: what the legs span.
ANKLES = ("foot_l", "foot_r")
#: The bones of the limbs, which reach for the effectors (a weaker prior than the torso's).
_LIMBS = ("upperarm_l", "forearm_l", "hand_l", "upperarm_r", "forearm_r", "hand_r", "thigh_l", "calf_l",
          "foot_l", "thigh_r", "calf_r", "foot_r", "clavicle_l", "clavicle_r")


class SparsePath(BakePath):
    """A few effectors: the network's guess as the start pose, smoothed, then met exactly."""

    names_missed = True
    #: How far the effectors were raised (armature units; :meth:`_lift`), set with the targets.
    lift = 0.0
    #: Where the rig's floor lies under its lowest rest foot point (:meth:`_sole`), set with the targets.
    sole = None
    #: The ankles' stances of a clip (:func:`.targets.sparse.ankle_stances`), set with the targets.
    stances = None

    def _clip(self) -> bool:
        """Whether the job is a clip to smooth and settle over time (not one pose or a handful of frames)."""
        return self.job.n_frames > tuning.LOW_PASS_MIN_FRAMES

    def start_pose(self, kp, progress, cancel, batch_size):
        job = self.job
        if job.skeleton is None and job.plan.leg_length > 0:
            job.skeleton = self._skeleton()
        steps = tuning.SPARSE_POSE_REFINE_STEPS if job.n_frames == 1 else None
        return network_start(job, kp, progress, cancel, batch_size, refine_steps=steps)

    def _skeleton(self):
        """The network's skeleton: a few effectors say little about bone lengths.

        The source skeleton's size when the file has one (its effectors are
        scaled onto the rig like a dense clip); for a clip of effectors alone,
        the rig's size over :meth:`_body_ratio` (another body's effectors are
        scaled onto the rig too); else the rig's own (effectors placed for this
        rig, as the empties of Add Effectors: taken as they are).
        """
        job = self.job
        leg = job.plan.leg_length * job.unit
        if job.source_rig is not None:
            try:
                splan = cached_plan(job.source_rig.rig, job.source_rig.mapping)
                leg = splan.leg_length if splan.leg_length > 0 else leg
            except ValueError:
                pass
        elif self._body_ratio() is not None:
            leg = leg / self._body_ratio()
        return CANONICAL.scaled(leg / leg_length(CANONICAL))

    def _body_ratio(self):
        """The rig's size over the body's of a clip of effectors without a skeleton, or None (one pose, no feet).

        The smaller of two ratios, each the rig's rest length over the clip's
        :data:`.tuning.STANDING_PERCENTILE` of the body's (where it stands straight): the pelvis'
        height over the lower ankle (against :meth:`_rig_hip_height`; None where the rig's rest does
        not stand) and the pelvis-to-head distance. Bent knees all clip long (a dance) make the
        legs read short, never the torso; the smaller keeps the legs and the torso able to span
        the scaled effectors. Within :data:`.tuning.SAME_BODY` of 1 the body is taken as the rig's
        own (effectors made for it).
        """
        from .targets import floor_normal

        job = self.job
        if job.source_rig is not None or not self._clip():
            return None
        if "body_ratio" not in self.__dict__:
            self.body_ratio = None
            n = floor_normal(job.object_matrix)
            legs = self._part_ratio(self._rig_hip_height(n), ("pelvis", "foot_l", "foot_r"),
                                    lambda p: (p[:, 0] - np.minimum(p[:, 1], p[:, 2])) @ n)
            if legs is not None:
                torso = self._part_ratio(self._rig_torso(), ("pelvis", "head"),
                                         lambda p: vector_norm(p[:, 1] - p[:, 0]))
                ratio = legs if torso is None else min(legs, torso)
                if abs(ratio - 1.0) > tuning.SAME_BODY:
                    self.body_ratio = ratio
        return self.body_ratio

    def _part_ratio(self, rig_length, joints, measure):
        """``rig_length`` over the standing percentile of ``measure`` (T,) of the clip's ``joints`` (T, J, 3),
        or None without them on the rig (``rig_length`` 0) or in the clip."""
        job = self.job
        rig, ent = job.plan.rig, job.plan.mapping.entries
        if rig_length <= 0 or not all(j in ent and rig.has(ent[j]) for j in joints):
            return None
        src = measure(job.src_m[:, [KEYPOINTS.index(j) for j in joints]].astype(np.float64))
        src = src[np.isfinite(src)]
        if not src.size:
            return None
        ratio = rig_length / float(np.percentile(src, tuning.STANDING_PERCENTILE))
        return ratio if np.isfinite(ratio) and ratio > 0 else None

    def _rig_torso(self) -> float:
        """The rig's pelvis-to-head distance at rest (world units), 0 where its rest is no human pose."""
        job = self.job
        rig, ent = job.plan.rig, job.plan.mapping.entries
        if not all(j in ent and rig.has(ent[j]) for j in ("pelvis", "head")) or not rest_is_human(job.plan):
            return 0.0
        return float(np.linalg.norm(rig.head[rig.index(ent["head"])] - rig.head[rig.index(ent["pelvis"])])) * job.unit

    def _rig_hip_height(self, n) -> float:
        """The rig's pelvis over its lower ankle at rest (world units), or 0 where the rest does not
        stand: no human pose (:func:`.source.rest_is_human`: a skeleton's rest as some files give it,
        its legs along an axis) or lying (the height under half the legs' length); such a rest says
        nothing of the rig's standing height."""
        job = self.job
        height = hip_height(job.plan, n, ANKLES)
        if not rest_is_human(job.plan) or height < 0.5 * job.plan.leg_length:
            return 0.0
        return height * job.unit

    def scale(self, scale):
        from .targets import floor_normal

        job = self.job
        if job.source_rig is None or not source_rest_is_human(job.source_rig):
            return scale   # (effectors alone: the network's skeleton has the body's size, see _skeleton)
        # a file's effectors: the rig's legs must span its pelvis-to-ankle distances, so the scale is
        # the ratio of the pelvis' heights over the ankles at rest (the legs' lengths leave out where
        # the hips sit below the pelvis; the balls, how high an ankle stands over them)
        splan = cached_plan(job.source_rig.rig, job.source_rig.mapping)
        src_h, rig_h = hip_height(splan, feet=ANKLES), hip_height(job.plan, floor_normal(job.object_matrix), ANKLES)
        return rig_h / src_h if src_h > 0 and rig_h > 0 else scale

    def prepare(self, init):
        """The network's frame-by-frame guess smoothed (the start pose and prior); the effectors are met anyway."""
        from ..retarget.channels import quat_continuity
        from ..retarget.rigpose import pose_rig

        job = self.job
        if not self._clip():
            return
        q = np.array(init.quaternions, dtype=np.float64)
        driven = np.flatnonzero(init.driven)   # (the others keep their rest: nothing to low-pass)
        for a, b in stretches(job):   # (never across a cut: see SPARSE_CUT_SPEED)
            smooth_columns("smooth_rotations", q[a:b], driven, "butter", tuning.START_LOW_PASS, job.fps,
                           unit=True, inplace=True)
        init.quaternions = quat_continuity(q, out=q)
        _, init.heads = pose_rig(job.plan.rig, init.quaternions, init.locations, chunk=job.chunk, rotations=False)

    def targets(self, src, n, scale, init, free):
        from .targets import sparse_targets

        from .targets.sparse import ankle_stances

        job = self.job
        self.sole = self._sole()
        # (once a clip: the lift and both passes' targets read them)
        self.stances = ankle_stances(src, job.mask, n, job.fps) if self._clip() else None
        self.lift = self._lift(src, n, scale)
        heads = init.heads
        if self.lift:   # the start pose's knees, elbows and chain roots go with the effectors they were placed for
            heads = heads + (self.lift * np.asarray(n)).astype(heads.dtype)
        targets, info = sparse_targets(job.plan, src, job.mask, scale, init_heads=heads, n=n, fps=job.fps,
                                       lift=self.lift, sole=self.sole or 0.0, stances=self.stances)
        if self.lift:
            job.warnings.append(f"the effectors were moved {self.lift * job.unit * 100.0:+.1f} cm vertically so "
                                "that the ankles stand as high as the rig's where they stand")
        prior = sparse_prior(job)
        return targets, info, np.array([prior.get(b, tuning.SPARSE_PRIOR_LIMB) for b in free])

    def _lift(self, src, n, scale) -> float:
        """How far (armature units, along ``n``) another body's effectors are raised so that its ankles
        stand at the rig's flat-foot ankle height where they stand.

        Scaled by the body's size, a source's ankles stand as high as its own
        feet put them (a CMU ankle joint a few centimetres lower than the
        meta-rig's): the rig's foot would sink or float by the difference. One
        shift for the clip (its motion unchanged), the mean over the feet
        seen standing (:attr:`stances`, the median height there); 0 for
        an animator's empties (:attr:`.core.RigBake.placed_effectors`), one pose,
        a rig whose rest does not stand on its floor (a skeleton hanging from
        its hips keeps the source's heights), ankles never seen standing, a
        shift under :data:`.tuning.SPARSE_LIFT_MIN` or over
        :data:`.tuning.SPARSE_LIFT_MAX` (said in a warning) unless the clip's
        stances lie far apart in height (:attr:`.core.RigBake.stance_spread`:
        raised ground, a markerless capture's drift), where no height of the
        source's is its floor and the ankles go where they stand most.
        """
        from .targets import foot_points

        job = self.job
        if job.placed_effectors or not self._clip() or self.sole is None:
            return 0.0
        fp = foot_points(job.plan, n)
        out = []
        for s, on in self.stances.items():
            if s in fp and on.sum() >= 3:
                out.append(fp[s][0][3] + self.sole - scale * float(np.median(src[on, _K[f"foot_{s}"]] @ n)))
        lift = float(np.mean(out)) if out else 0.0
        apart = job.stance_spread is not None and job.stance_spread > tuning.STANCE_SPREAD_WARN
        if abs(lift) > tuning.SPARSE_LIFT_MAX * job.plan.leg_length and not apart:
            where = "above" if lift < 0 else "below"
            job.warnings.append(f"where they stand, the ankles are {abs(lift) * job.unit * 100.0:.1f} cm {where} the "
                                "rig's standing ankle height (on tiptoe or in the air?): the effectors keep their heights")
            return 0.0
        return lift if abs(lift) >= tuning.SPARSE_LIFT_MIN / job.unit else 0.0

    def _sole(self):
        """How far (armature units) the rig's floor lies under its lowest rest foot point where its rest stands
        on its object's floor (a character modelled on the ground), else None (a skeleton hanging from its hips)."""
        from .targets import rest_floor_gap, stands_at_rest

        job = self.job
        gap = rest_floor_gap(job.plan, job.object_matrix)
        return max(float(gap), 0.0) if rest_is_human(job.plan) and stands_at_rest(job.plan, gap) else None

    def iterations(self, iterations, free, copied):
        if iterations <= 0:
            return iterations
        if self.job.n_frames == 1 and self.job.options.rig_iterations is None:
            # one pose has a count of its own: the dense bakes' (for a two-bone neck the keypoints
            # bend) would cost a Live Solve tick a third more (docs/tuning.md#sparse_pose_iterations)
            return tuning.SPARSE_POSE_ITERATIONS
        # effectors must be met to the millimetre: the prior fades over more steps (more for
        # clips, whose every frame must converge, straight limbs included)
        return max(iterations, tuning.SPARSE_ITERATIONS if self.job.n_frames > 1 else tuning.SPARSE_POSE_ITERATIONS)

    def first_share(self, iterations):
        if not (self._clip() and iterations > 0):
            return 1.0
        return iterations / (iterations + tuning.SPARSE_SETTLE_ROUNDS * tuning.SPARSE_SETTLE_ITERATIONS)

    def prior_decay(self):
        return tuning.SPARSE_PRIOR_DECAY if self.job.n_frames > 1 else tuning.SPARSE_POSE_PRIOR_DECAY

    def solve(self, init, targets, info, free, prior, kw, span, context):
        src, scale = context
        fit, targets, info = super().solve(init, targets, info, free, prior, kw, span, context)
        span[0] = span[1]   # (the second pass holds the bar where it is; a cancel still stops it)
        fit, targets, info = second_pass(self.job, fit, targets, info, src, scale, free, prior, kw)
        if self._clip() and kw["iterations"] > 0:
            fit = mend_islands(self.job, fit, targets, free, kw)
            fit = settle_in_time(self.job, fit, targets, free, kw, span)
            fit, targets, info = second_pass(self.job, fit, targets, info, src, scale, free, prior, kw)
        return fit, targets, info

    def settle(self, quats, locs, heads, iterations):
        from ..retarget.channels import quat_continuity
        from ..retarget.rigpose import pose_rig
        from .targets import settle_clavicles, unbend_backwards

        job = self.job
        if iterations <= 0:
            return
        # a limb at its full reach leaves the bend's way open: a knee or an elbow left bent
        # backwards a little bends forwards as much (the effectors unmoved)
        turned = unbend_backwards(job.plan, quats, locs, chunk=job.chunk, locked=job.locked)
        # the clavicles' turn about themselves, as in a dense bake (no joint moves)
        settle_clavicles(job.plan, quats, locs, chunk=job.chunk, locked=job.locked)
        if turned.any():
            k = np.flatnonzero(turned)
            _, heads[k] = pose_rig(job.plan.rig, quats[k], locs[k], chunk=job.chunk, rotations=False)
        quat_continuity(quats, out=quats)


def sparse_prior(job):
    """Per-bone prior: the torso resists more than the limbs (they do the reaching)."""
    rig = job.plan.rig
    limbs = set()
    for j in _LIMBS:
        b = job.mapping.entries.get(j)
        if b is not None and rig.has(b):
            limbs.add(rig.index(b))
    return {b: tuning.SPARSE_PRIOR_LIMB if b in limbs else tuning.SPARSE_PRIOR_TORSO for b in range(len(rig))}


def cuts(job):
    """Frames (sorted) to which a given effector jumped faster than :data:`.tuning.SPARSE_CUT_SPEED`."""
    eff = [_K[e] for e in SPARSE_EFFECTORS]
    p = job.src_m[:, eff]
    with np.errstate(invalid="ignore"):
        speed = vector_norm(np.diff(p, axis=0)) * job.fps
    return [int(t) + 1 for t in np.flatnonzero(np.nan_to_num(speed, nan=0.0).max(axis=1) > tuning.SPARSE_CUT_SPEED)]


def stretches(job):
    """``[(a, b)]``: the runs of frames between cuts (:func:`cuts`) long enough to low-pass."""
    edges = [0, *cuts(job), job.n_frames]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b - a > tuning.LOW_PASS_MIN_FRAMES]


def _island_starts(start, runs, bounds, most):
    """The frames of short runs between longer ones, their start poses (``start``) set from their neighbours'."""
    from ..model.rotations_np import quat_slerp

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
    return sub


def mend_islands(job, fit, targets, free, kw):
    """Sparse clips: a short run of frames the solve left on another branch, solved again from its neighbours'.

    Six effectors leave two good spines for many poses, and the solve of one
    frame lands on either (see docs/tuning.md#island_seconds): where the
    spine's pose jumps and no effector does (:func:`.paths.pose_jumps`), the
    clip splits into runs. A run of at most :data:`.tuning.ISLAND_SECONDS`,
    shorter than the runs beside it, is solved again from their pose (at a
    clip's end, the next run's first or the last run's last pose; between
    two runs, from one to the other), its prior on that pose. Returns the
    new fit.
    """
    from ..retarget.rigsolve import solve_rig

    q = fit.quaternions
    T = len(q)
    # (the spine's branches: the bones from the pelvis to the head)
    cols = np.array([b for b in free if b in set(job.plan.path)], dtype=np.int64)
    if T < 3 or not cols.size:
        return fit
    jump = pose_jumps(job, q[:, cols])
    if not jump.any():
        return fit
    bounds = [0, *(np.flatnonzero(jump) + 1).tolist(), T]    # the runs between jumps
    start = np.array(q, dtype=np.float64)
    sub = _island_starts(start, np.diff(bounds), bounds, max(int(round(tuning.ISLAND_SECONDS * job.fps)), 1))
    if not sub:
        return fit
    sub = np.asarray(sub)
    again = solve_rig(job.plan.rig, start[sub], fit.locations[sub], targets.frames(sub), free, job.plan.root,
                      **dict(kw, progress=None))
    return fit.take_frames(sub, again)


def settle_in_time(job, fit, targets, free, kw, span):
    """Sparse clips: the pose the effectors leave open, made to flow from frame to frame.

    :data:`.tuning.SPARSE_SETTLE_ROUNDS` rounds of: the free bones'
    rotations and the root's place low-passed over time (zero phase, each
    stretch between cuts on its own), then
    :data:`.tuning.SPARSE_SETTLE_ITERATIONS` steps of the rig-space solve
    from there, its prior on that smoothed pose. Bones with a locked
    rotation axis are not low-passed. ``span``: the [start, end] of the fit
    stage's bar that ``kw["progress"]`` fills (set per round). Returns the
    new fit.
    """
    from ..retarget.rigsolve import solve_rig
    from ..retarget.channels import quat_continuity

    r = job.plan.root
    kw = dict(kw, iterations=tuning.SPARSE_SETTLE_ITERATIONS)
    rounds = int(tuning.SPARSE_SETTLE_ROUNDS)
    # (a bone with a locked axis keeps the solve's rotation: a low-pass of its whole rotation
    # would move it about the locked axes too)
    cols = [b for b in free if not np.any(job.locked.get(int(b), False))]
    lo = span[1]
    parts = stretches(job)
    for k in range(rounds):
        span[:] = [lo + (1.0 - lo) * k / rounds, lo + (1.0 - lo) * (k + 1) / rounds]
        q, loc = fit.quaternions, fit.locations
        for a, b in parts:   # (in place)
            smooth_columns("smooth_rotations", q[a:b], cols, "butter", tuning.SPARSE_SETTLE_STRENGTH, job.fps,
                           unit=True, inplace=True)
            loc[a:b, r] = np.asarray(smooth("smooth_keypoints", loc[a:b, r:r + 1], "butter",
                                            tuning.SPARSE_SETTLE_STRENGTH, job.fps))[:, 0]
        quat_continuity(q, out=q)
        fit = solve_rig(job.plan.rig, q, loc, targets, free, r, overwrite=True, **kw)
    span[:] = [1.0, 1.0]
    return fit


def second_pass(job, fit, targets, info, src, scale, free, prior, kw):
    """Sparse mode: the frames in which an effector is still over :data:`.tuning.REACH_OK_MM` off, solved once more.

    From the pose the first pass reached, with the prior on it weak. An
    effector out of reach of its chain as solved (:func:`stretched`) keeps
    only a fading share of its weight, so that the others are met. Returns
    the new ``(fit, targets, info)``.
    """
    from ..retarget.rigsolve import solve_rig
    from .targets import sparse_targets

    ok = tuning.REACH_OK_MM / 1000.0 / job.unit
    rows = list(info.effectors.values())
    again = (fit.residual[:, rows] > ok).any(axis=1) if rows else np.zeros(job.n_frames, dtype=bool)
    far = stretched(job, fit, targets, info)
    for frames in far.values():
        again |= frames
    if not again.any():
        return fit, targets, info
    plan = job.plan
    targets, info = sparse_targets(plan, src, job.mask, scale, init_heads=fit.heads, stretched=far,
                                  n=job.up, fps=job.fps, lift=job.path.lift, sole=job.path.sole or 0.0,
                                  stances=job.path.stances)
    sub = np.flatnonzero(again)
    kw = dict(kw, prior_rotation=np.asarray(prior) * tuning.SPARSE_SECOND_PASS_PRIOR,
              iterations=max(int(kw["iterations"]), tuning.SPARSE_SECOND_PASS_ITERATIONS))
    again_fit = solve_rig(plan.rig, fit.quaternions[sub], fit.locations[sub], targets.frames(sub), free, plan.root,
                          **kw)
    return fit.take_frames(sub, again_fit), targets, info


def stretched(job, fit, targets, info):
    """Hand -> frames (T,) bool in which it is missed by over REACH_WARN_MM, out of reach of its arm as solved."""
    from .targets import CHAIN_ROOTS

    out = {}
    ok = tuning.REACH_WARN_MM / 1000.0 / job.unit
    for eff, reach in info.reach.items():
        if eff.startswith("foot"):
            # a foot out of reach keeps its weight: the hips come down to it rather than
            # the foot leaving its place (a planted foot must not slide)
            continue
        row = targets.rows[info.effectors[eff]]
        tgt = info.clamped.get(eff, row["target"])     # where the user wants it
        b = job.plan.rig.index(job.mapping.entries[eff])
        missed = (vector_norm(fit.heads[:, b] - tgt) > ok) & (row["weight"] > 0)
        if not missed.any():
            continue
        root = job.plan.rig.index(job.mapping.entries[CHAIN_ROOTS[eff]])
        far = missed & (vector_norm(tgt - fit.heads[:, root]) > 0.98 * reach)
        if far.any():
            out[eff] = far
    return out
