"""Every tuning constant of the bake pipeline, each with the reason for its value (no ``bpy``).

The measurements behind the values are in ``docs/tuning.md``, one section per
constant (``docs/tuning.md#name``). The stages read these through this module
(``tuning.NAME``) at call time, so a test or an experiment can change one.
"""

from __future__ import annotations

import numpy as np

# -- figures and warnings -------------------------------------------------------------------------
#: Warn when the feet float or sink more than this over the contacts (cm).
FLOOR_WARN_CM = 3.0
#: Warn when an effector ends farther than this from its target (mm).
REACH_WARN_MM = 5.0
#: An effector within this of its target counts as reached (mm).
REACH_OK_MM = 1.0
#: A foot this near its hip-ankle line (degrees) hides the knee's front (see docs/tuning.md#foot_along_leg_deg).
FOOT_ALONG_LEG_DEG = 20.0
#: A knee bent backwards by more than this (degrees) counts as bent backwards.
KNEE_BACKWARDS_DEG = 5.0
#: A knee folded further than this (degrees of bend) is not judged: thigh and shin lie nearly along each
#: other, and the hip-ankle line whose side the judgement reads turns with their length ratio.
KNEE_JUDGED_BEND_DEG = 120.0
#: Share of frames by which the rig may be upright less often than the source before a warning.
UPRIGHT_WARN_SHARE = 0.05

# -- the rig-space solve: iterations and priors -----------------------------------------------------
#: Dense iterations: a source's rotations need one step, the network's eight (see docs/tuning.md#rig_iterations).
RIG_ITERATIONS = {"source": 1, "network": 8}
#: Sparse clips: iterations at least, so every frame meets its effectors to the millimetre.
SPARSE_ITERATIONS = 20
#: Sparse clips: the factor by which the prior on the start pose fades per iteration.
SPARSE_PRIOR_DECAY = 0.3
#: One sparse pose (Solve Frame, Live Solve): enough for a drag (see docs/tuning.md#sparse_pose_iterations).
SPARSE_POSE_ITERATIONS = 5
#: One sparse pose: the prior's fade per iteration (fewer iterations than a clip).
SPARSE_POSE_PRIOR_DECAY = 0.2
#: One sparse pose: the network's refinement steps; the rig solve meets the effectors anyway.
SPARSE_POSE_REFINE_STEPS = 2
#: Sparse clips: the prior fades down to this share of its weight (see docs/tuning.md#sparse_prior_floor).
SPARSE_PRIOR_FLOOR = 3e-2
#: One sparse pose: the prior's floor, lower to meet dragged effectors (see docs/tuning.md#sparse_pose_prior_floor).
SPARSE_POSE_PRIOR_FLOOR = 1e-2
#: Sparse: the torso's prior weight, so that it resists and the limbs do the reaching.
SPARSE_PRIOR_TORSO = 0.3
#: Sparse: the limbs' prior weight (they reach for the effectors).
SPARSE_PRIOR_LIMB = 0.05
#: Dense: a weak, constant prior that only settles twist (many targets decide the pose).
DENSE_PRIOR = 0.01
#: Dense: the prior of a solved bone no joint is mapped to (a neck bone between neck and head) is this
#: many times stronger: its turn about the segment it shares with its neighbours is not seen
#: (docs/tuning.md#dense_prior_between).
DENSE_PRIOR_BETWEEN = 30.0
#: Sparse second pass (an effector still off): the prior at this share of the first pass's.
SPARSE_SECOND_PASS_PRIOR = 0.05
#: Sparse second pass: iterations at least, from the pose the first pass reached.
SPARSE_SECOND_PASS_ITERATIONS = 6
#: Dense: a rigid segment this far off (share of length) gets a second pass (see docs/tuning.md#dense_second_pass_off).
DENSE_SECOND_PASS_OFF = 0.35
#: Dense: a segment this far off in the network's start pose is turned round (see docs/tuning.md#dense_start_flipped).
DENSE_START_FLIPPED = 1.4
#: Dense second pass: iterations, enough to unwind a segment turned round.
DENSE_SECOND_PASS_ITERATIONS = 40
#: Dense second pass: the prior at this share (it holds on to a pose the wrong way round).
DENSE_SECOND_PASS_PRIOR = 0.1

# -- the start pose --------------------------------------------------------------------------------
#: Dense, from the network: a bone turning more than this (degrees) in one frame may be a jump ...
START_JUMP_DEG = 10.0
#: ... if also more than this factor times its median step ...
START_JUMP_FACTOR = 10.0
#: ... while no source point moves more than this factor times its median step (a cut is the source's) ...
START_JUMP_SOURCE = 5.0
#: ... and is eased into the start pose's low-pass over this many seconds either side.
START_JUMP_SECONDS = 0.15
#: Strength of the low-pass a jumping or sparse start pose is eased or smoothed with (0..1).
START_LOW_PASS = 0.5
#: Sparse clips: a run of solved frames on another branch up to this long (seconds) is solved again.
ISLAND_SECONDS = 0.5
#: Degrees a source bone may rest off the canonical T-pose (legs and spine, arms) for its rest to stand.
SOURCE_REST_LIMITS = {"thigh_l": 60, "thigh_r": 60, "calf_l": 60, "calf_r": 60, "spine1": 60, "pelvis": 60,
                      "upperarm_l": 100, "upperarm_r": 100, "forearm_l": 100, "forearm_r": 100}
#: The same skeleton: shared bones rest within this share of the leg length of each other.
SAME_SKELETON_TOLERANCE = 0.01
#: The same skeleton: at least this share of the rig's mapped joints have a bone of the same name.
SAME_SKELETON_SHARED = 0.9

# -- sparse clips: settling over time --------------------------------------------------------------
#: Rounds of low-pass and re-solve settling what effectors leave open (see docs/tuning.md#sparse_settle_rounds).
SPARSE_SETTLE_ROUNDS = 3
#: The settling low-pass's strength (0.7: about 1.5 Hz).
SPARSE_SETTLE_STRENGTH = 0.7
#: Iterations of each settling round's re-solve.
SPARSE_SETTLE_ITERATIONS = 8
#: An effector faster than this (m/s) marks a cut no low-pass crosses (see docs/tuning.md#sparse_cut_speed).
SPARSE_CUT_SPEED = 20.0
#: A stretch between cuts needs more frames than this to be low-passed.
LOW_PASS_MIN_FRAMES = 4

# -- memory ----------------------------------------------------------------------------------------
#: On the CPU, clips over this many frames go through the network in batches of LONG_CLIP_BATCH:
#: the refinement's workspace grows with its batch (docs/tuning.md#long_clip_batch).
LONG_CLIP_FRAMES = 8192
LONG_CLIP_BATCH = 1024
#: Bakes of fewer frames keep their free heap pages (little to give back; a trim costs a Live Solve tick's share).
TRIM_MIN_FRAMES = 4096

# -- targets: weights and contacts -----------------------------------------------------------------
#: Row weights (per armature unit) and prior weights (per radian); the root holds its place (see docs/tuning.md#weights).
WEIGHTS = dict(direction=1.0, lateral=0.5, effector=1.0, contact=2.0, height=0.3, root=1.0, root_vertical=0.1,
               sparse_effector=1.0, sparse_hint=0.1, pole=0.005,
               sparse_foot=0.1, flat_foot=0.3)
#: Seconds over which a contact target fades in and out, whatever the rate (see docs/tuning.md#contact_blend).
CONTACT_BLEND = 4.0 / 30.0
#: An effector beyond its chain's reach keeps this share of its weight, so the other effectors stay met.
UNREACHABLE_WEIGHT = 0.05
#: Sparse: a target beyond this many times its chain's reach is moved in to the reach.
FAR_TARGET_REACH = 1.5
#: Sparse second pass: a target this share past the reach starts fading ...
STRETCH_START = 1.02
#: ... and over this share further fades down to UNREACHABLE_WEIGHT.
STRETCH_FADE = 0.1
#: A rig whose lowest rest foot point is this near its floor (share of leg: below, above) stands on it at rest.
STANDING_GAP = (-0.02, 0.1)
#: Metres a source skeleton's lowest rest foot joint may stand off its floor where its feet stand for its
#: rest heights to be taken as heights above that floor (see docs/tuning.md#sole_tolerance) ...
SOLE_TOLERANCE = 0.01
#: ... read at this percentile of the heights where the point stands (a foot rolls on and off in them).
STAND_PERCENTILE = 20.0
#: The most (degrees) a foot's direction is pitched from the source's onto the rig's flat foot.
FOOT_PITCH_MAX = 30.0
#: The least: a smaller difference is within what planted frames vary by (see docs/tuning.md#foot_pitch_min).
FOOT_PITCH_MIN = 4.0
#: How far (share of the ankle-to-ball length) an ankle target may lie below the ankle's rest
#: clearance before it is lifted to it, on a rig standing on its floor (docs/tuning.md#foot_floor_slack).
FOOT_FLOOR_SLACK = 0.05
#: Seconds over which a foot given by its ankle alone turns to lie flat as its ankle stands, and back.
FOOT_TURN_BLEND = CONTACT_BLEND
#: ... from this long before its ankle stands: a heel-first landing rolls flat (see docs/tuning.md#foot_turn_lead).
FOOT_TURN_LEAD = 2.0 / 30.0
#: A ball of the foot within this share of the foot's length of the floor has its toes flat on it.
TOE_FLOOR_GAP = 0.1

# -- settling joints: hinges -----------------------------------------------------------------------
#: A limb bent at least this much at rest (degrees) bends in that plane, as its rig's author put it.
HINGE_REST_BEND = 5.0
#: Bends (degrees) over which the hinge settling fades in: a straight limb shows no plane.
HINGE_BEND = (5.0, 20.0)
#: Cosines of the axis' angle off the limb's plane over which the hinge settling fades out (30 to 60 degrees).
HINGE_OFF = (np.cos(np.radians(30.0)), np.cos(np.radians(60.0)))
#: A knee or elbow bent backwards by up to this much (degrees) is turned to bend forwards as much ...
HYPEREXTENSION_MAX = 30.0
#: ... over a run of frames bent backwards that reaches this much somewhere (a straight limb's flicker is left).
HYPEREXTENSION_MIN = 4.0

#: A clip of effectors without a skeleton whose pelvis-over-ankle height is within this share of the
#: rig's is taken as made for the rig (its effectors kept as they are); another body is scaled.
SAME_BODY = 0.05
#: Another body's effectors are raised to the rig's standing ankle height by at least this much (metres):
#: a smaller shift is the stance's noise, and it would move every effector off the file's.
SPARSE_LIFT_MIN = 0.005
#: ... and by at most this share of the rig's leg length: skeletons put their ankle joints a few centimetres
#: apart over the sole; an ankle standing farther off stands on tiptoe or in the air (a markerless dance).
SPARSE_LIFT_MAX = 0.1
#: The percentile of a clip's pelvis-over-ankle heights and pelvis-to-head distances taken as its standing
#: size: legs and back at their straightest (a dance's bent knees put the 90th short: the legs could not reach).
STANDING_PERCENTILE = 98.0

# -- stances at heights apart ------------------------------------------------------------------------
#: Warn when a clip's stances stand this far apart in height (metres; 10th to 90th percentile): one
#: floor is kept (see docs/tuning.md#stance_spread_warn).
STANCE_SPREAD_WARN = 0.10
#: A foot point stands where it is within STANCE_LOW (metres) of its lowest height within
#: STANCE_WINDOW seconds either side, slower than STANCE_SPEED (m/s), for STANCE_RUN seconds at least.
STANCE_WINDOW = 1.0
STANCE_LOW = 0.03
#: (markerless feet shake: a planted one reads up to a metre per second)
STANCE_SPEED = 1.0
STANCE_RUN = 0.03
