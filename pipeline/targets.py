"""What the rig-space solve aims at, built from the source (no ``bpy``).

Every position here is in the target rig's armature space, armature units.
The source is brought there by ``x -> s * src_m``: ``src_m`` are the source's
world points in the armature's axes (metres, origin at the armature's origin:
the object transform undone), ``s`` the rig's size per source metre (leg
length ratio, or ``BakeOptions.scale``); this is also where the root goes.

Dense sources (:func:`dense_targets`)
    - **bone directions** of the source: for each canonical bone whose joint
      and child joint are mapped (or the next joint down the chain both have,
      where the source lacks one), ``head(child) - head(joint)`` on the rig
      points along the source's direction (only the error across it counts,
      so a rig with other proportions, or a segment whose length changes
      with bones in between, still moves like the performer); plus
      the left-right directions of the hips and clavicles (the pelvis and
      chest orientation); from keypoints, the hands along the hand tips and
      turned about themselves to the thumbs (:func:`_rig_thumb`);
    - **effectors** relative to their chain roots at the rig's scale: hands
      from the upper arms, feet from the thighs, the head from the pelvis,
      each scaled by the chain's length ratio (rig / source; the head's chain
      along the spine joints both have);
    - **contacts**: where the source's ankle or ball of the foot rests on its
      floor, the rig's ankle or ball goes where the source's is (at the rig's
      scale) with the rig's own foot height: the rig's feet stand on the
      rig's floor and stay planted where the source's are;
    - **heights**: on every frame, weakly, each ankle as high above the
      rig's floor as the source's above its own (scaled, flat-foot heights
      matched), so the body sits right in flight and on raised ground too;
    - the **root** near the scaled source root (the middle of its hip joints
      where it gives both: conventions agree on those, not on the pelvis
      joint), weakly, vertically shifted by
      the median contact correction (the median height correction without
      contacts) so the body does not pop between contacts and flight: how far
      the source's planted points move to stand on the rig's floor, not how
      far the start pose's feet are from them (that is the start pose's own
      error: a network start pose 8 cm too high lowered the body's root
      target as much).
Sparse sources (:func:`sparse_targets`)
    The effectors (pelvis, head, hands, feet) where they are, elbow and knee
    hints weakly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import BONE_CHILD, JOINTS, KEYPOINTS, PARENTS, SPARSE_EFFECTORS, SPARSE_HINTS
from ..retarget.rigsolve import Targets

__all__ = ["stance", "dense_targets", "sparse_targets", "TargetInfo", "foot_points", "floor_normal", "planted_height",
           "rig_sole", "rest_floor_gap", "hinge_axes", "settle_hinges", "settle_clavicles", "unbend_backwards",
           "foot_corrections", "WEIGHTS"]

_J = {n: i for i, n in enumerate(JOINTS)}
_K = {n: i for i, n in enumerate(KEYPOINTS)}

#: Row weights (per armature unit of error) and prior weights (per radian). The root holds its
#: horizontal place at 1.0 (0.3 before): each contact pulled the hips of `sfu`'s walk, baked onto
#: the meta-rig, 2-3 cm towards the planted foot, swaying with the steps (jitter 1.18 -> 1.09 times
#: the source's at the rig's scale; its feet as planted, 0.6 mm a frame).
WEIGHTS = dict(direction=1.0, lateral=0.5, effector=1.0, contact=2.0, height=0.3, root=1.0, root_vertical=0.1,
               sparse_effector=1.0, sparse_hint=0.1, pole=0.005,
               sparse_foot=0.1, flat_foot=0.3)
#: Seconds over which a contact target fades in and out (four frames at 30 fps). In frames, as
#: it was, a 120 fps clip's contacts came on in 33 ms and pulled the body a centimetre or two
#: onto them within three frames: keypoints of `sfu`'s 120 fps walk onto the meta-rig jittered
#: 2.2 times as much as the source, the pops at contact changes.
CONTACT_BLEND = 4.0 / 30.0


def _blend_frames(fps) -> int:
    """:data:`CONTACT_BLEND` in frames at ``fps`` (four where the rate is unknown)."""
    return max(int(round(CONTACT_BLEND * float(fps))), 1) if fps else 4


#: An effector beyond its chain's reach keeps this share of its weight: its
#: chain stretches toward it, the other effectors stay where they are.
UNREACHABLE_WEIGHT = 0.05
#: The bone each effector's reach is measured from.
CHAIN_ROOTS = {"hand_l": "upperarm_l", "hand_r": "upperarm_r", "foot_l": "thigh_l", "foot_r": "thigh_r"}

_CHAINS = (("hand_l", "upperarm_l", ("upperarm_l", "forearm_l", "hand_l")),
           ("hand_r", "upperarm_r", ("upperarm_r", "forearm_r", "hand_r")),
           ("foot_l", "thigh_l", ("thigh_l", "calf_l", "foot_l")),
           ("foot_r", "thigh_r", ("thigh_r", "calf_r", "foot_r")),
           ("head", "pelvis", ("pelvis", "head")))


@dataclass
class TargetInfo:
    """What was built, for the figures and the messages.

    Attributes
    ----------
    effectors : dict
        Effector joint name -> row index (its position or relative row).
    contacts : ndarray of bool (T, 4) or None
        Source contacts of (ankle_l, ball_l, ankle_r, ball_r).
    contact_rows : list of int
    floor_points : list of int
        Point indices (rig heels and balls, see :func:`foot_points`).
    floor_offset : float
        Vertical shift given to the root target (armature units): the median
        correction of the source's planted points onto the rig's floor.
    reach : dict
        Effector -> chain length (armature units), for reachability.
    clamped : dict
        Effector -> its real targets (T, 3) where some lay out of reach and
        the row aims at the nearest reachable point instead.
    rigid : dict
        Row index -> length (armature units) of the direction rows whose two
        heads keep their distance (their whole error counts).
    sole : float
        How far (armature units) the rig's floor lies below its lowest rest
        foot point (:func:`rig_sole`; 0 where the source is a skeleton).
    foot_pitch : dict
        ``"foot_l"``/``"foot_r"`` -> degrees by which the source's foot
        direction was pitched onto the rig's flat foot
        (:func:`foot_pitch_corrections`).
    """

    effectors: dict = field(default_factory=dict)
    contacts: np.ndarray | None = None
    contact_rows: list = field(default_factory=list)
    floor_points: list = field(default_factory=list)
    floor_offset: float = 0.0
    reach: dict = field(default_factory=dict)
    clamped: dict = field(default_factory=dict)
    rigid: dict = field(default_factory=dict)
    sole: float = 0.0
    foot_pitch: dict = field(default_factory=dict)


def floor_normal(object_matrix) -> np.ndarray:
    """World up expressed in armature axes (unit vector)."""
    m = np.asarray(object_matrix, dtype=np.float64)[:3, :3]
    n = m[2].copy()          # world z of an armature point p is m[2] . p + const
    return n / np.linalg.norm(n)


def _rig_thumb(plan, hand):
    """The tip of the rig's thumb at rest (its last bone's tail: a BVH's End Site), in the hand bone's frame, or None."""
    from ..retarget.mapping import thumb_end

    rig = plan.rig
    c = thumb_end(rig, hand)
    if c is None:
        return None
    d = rig.tail[c] - rig.head[hand]
    if float(np.linalg.norm(d)) < 1e-9:
        return None
    return rig.rest_rotation()[hand].T @ d


def _bone(plan, joint):
    b = plan.mapping.entries.get(joint)
    if b is None or not plan.rig.has(b):
        return None
    return plan.rig.index(b)


def _foot_rest_points(plan) -> list:
    """Rest heads and tails (armature space) of the feet's bones: the foot's, and the toe's where mapped."""
    rig = plan.rig
    pts = []
    for s in "lr":
        f, t = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
        if f is None:
            continue
        pts += [rig.head[f], rig.tail[f]]
        if t is not None:
            pts += [rig.head[t], rig.tail[t]]
    return pts


def rest_floor_gap(plan, object_matrix) -> float | None:
    """Height of the rig's lowest rest foot point above its object's floor, in armature units.

    The object's floor: the plane through the armature's origin across the
    world up (where a character modelled on the ground has its origin; the
    plane the targets measure the source's heights from, the source's floor
    brought into armature space). ``None`` without feet. Armature units
    along the world up (the object's scale taken out), as
    :func:`foot_points` measures heights.
    """
    pts = _foot_rest_points(plan)
    if not pts:
        return None
    n = floor_normal(object_matrix)
    return min(float(n @ p) for p in pts)


def foot_points(plan, n) -> dict:
    """Rig foot points per side: ``{side: [(name, bone, offset, rest height)]}``.

    ``ankle``: the foot bone's head; ``ball``: the toe bone's head (or the
    foot bone's tail without a toe bone); ``heel``: the point under the
    ankle at the rig's rest floor. Heights along ``n`` above the rest floor
    (the lowest rest point of either foot).
    """
    rig = plan.rig
    Q = rig.rest_rotation()
    out = {}
    for s in "lr":
        f, t = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
        if f is None:
            continue
        side = [("ankle", f, np.zeros(3), rig.head[f])]
        if t is not None:
            side.append(("ball", t, np.zeros(3), rig.head[t]))
        else:
            side.append(("ball", f, Q[f].T @ (rig.tail[f] - rig.head[f]), rig.tail[f]))
        out[s] = side
    pts = _foot_rest_points(plan)
    if not pts:
        return {}
    floor = min(float(np.dot(n, p)) for p in pts)
    res = {}
    for s, side in out.items():
        f = side[0][1]
        heel = side[0][3] - n * (np.dot(n, side[0][3]) - floor)
        entries = [(name, b, off, float(np.dot(n, p) - floor)) for name, b, off, p in side]
        entries.append(("heel", f, Q[f].T @ (heel - rig.head[f]), 0.0))
        res[s] = entries
    return res


#: A rig whose lowest rest foot point is this close to its object's floor (the plane through
#: its origin, :func:`rest_floor_gap`), as a
#: share of its leg length, stands on that floor at rest (below: a skeleton hanging from its
#: hips at the origin, as Blender's BVH import makes one): (below, above).
STANDING_GAP = (-0.02, 0.1)


def stands_at_rest(plan, rest_floor_gap) -> bool:
    """Whether the rig's rest stands on its object's floor (:data:`STANDING_GAP`): a character
    modelled on the ground, whose rest feet stand flat (not a skeleton hanging from its hips)."""
    leg = float(plan.leg_length) if plan.leg_length > 0 else 0.0
    return rest_floor_gap is not None and leg > 0 and STANDING_GAP[0] * leg <= rest_floor_gap <= STANDING_GAP[1] * leg


#: The most (degrees) by which a foot's direction is pitched from the source's onto the rig's flat foot ...
FOOT_PITCH_MAX = 30.0
#: ... and the least: a smaller difference is within what a foot's planted frames vary by (keypoints
#: of the demo walk against their own standing skeleton read -1.9 and +0.8 degrees).
FOOT_PITCH_MIN = 4.0


def foot_pitch_corrections(plan, src, mask, n, fps, rest_floor_gap) -> dict:
    """Per foot, ``side -> angle`` (radians): how much further down the rig's ankle-to-ball line points
    than the source's when each foot stands flat.

    Skeletons put the ankle and the ball of the foot at different heights
    above the sole: fair1's ankle joint stands 3 cm above the floor, the
    meta-rig's foot bone drops 7 cm from ankle to toe over 11 cm. Copying
    the source's ankle-to-ball direction onto the rig tilts the rig's foot
    by the difference. The rig's flat pitch is read from its rest where it
    stands on its floor at rest (:func:`stands_at_rest`: a skeleton hanging
    from its hips says nothing about how its feet stand), the source's from
    the frames in which that foot is seen planted flat (the median); a foot
    with neither gets none, nor one whose difference is under
    :data:`FOOT_PITCH_MIN`. Clamped to :data:`FOOT_PITCH_MAX`.
    """
    if not stands_at_rest(plan, rest_floor_gap):
        return {}
    rig = plan.rig
    out = {}
    for s, pts in foot_points(plan, n).items():
        flat = _flat_frames(src, mask, s, n, fps)
        if flat is None:
            continue
        a, b = _K[f"foot_{s}"], _K[f"toe_{s}"]
        rig_pitch = float(_pitch(_rest_point(rig, *pts[1][1:3]) - _rest_point(rig, *pts[0][1:3]), n))
        src_pitch = float(np.median(_pitch(src[flat, b] - src[flat, a], n)))
        d = rig_pitch - src_pitch
        if np.isfinite(d) and abs(d) >= np.radians(FOOT_PITCH_MIN):
            lim = np.radians(FOOT_PITCH_MAX)
            out[s] = float(np.clip(d, -lim, lim))
    return out


def _rest_point(rig, bone, offset):
    """Rest position of a point ``offset`` (the bone's rest frame) from ``bone``'s head (a :func:`foot_points` point)."""
    return rig.head[bone] + rig.rest_rotation()[bone] @ offset


def _pitch(d, n):
    """How far (radians) vectors ``d`` (..., 3) point below the plane across ``n``."""
    v = d @ n
    return np.arctan2(-v, vector_norm(d - v[..., None] * n))


def pitch_down(u, n, angle):
    """Unit directions ``u`` (T, 3) turned ``angle`` radians further down, about the level axis across each."""
    w = n - (u @ n)[:, None] * u                 # up, across u
    lw = vector_norm(w, keepdims=True)
    ok = lw[:, 0] > 1e-6                         # (a vertical direction has no level axis: as it is)
    w = np.where(ok[:, None], w / np.where(ok[:, None], lw, 1.0), 0.0)
    return np.where(ok[:, None], u * np.cos(angle) - w * np.sin(angle), u)


def rig_sole(plan, fp, src, mask, n, fps, scale, rest_floor_gap=None) -> float:
    """How far (armature units) the rig's floor lies below its lowest rest foot point, for keypoint sources.

    :func:`foot_points` measures heights from the rig's lowest rest foot
    point, the keypoints' heights are above the floor they were captured
    on, and a mocap skeleton's joints sit above that floor by the sole of
    the foot: taking the lowest joint for the floor, a clip of keypoints
    baked back onto its own skeleton sank by the sole (1-2.5 cm on every
    frame of the held-out studios' clips). So:

    - a rig standing on its object's floor at rest (``rest_floor_gap``
      within :data:`STANDING_GAP` of the leg length, as a character modelled
      on the ground, its origin at its feet): that floor, the lowest point's
      height above it;
    - otherwise the floor is unknown (a skeleton whose rest hangs from its
      hips at the origin, as Blender's BVH import makes one): the rig's
      ankles are taken to stand as high above it as the source's, at the
      rig's scale, where the source's foot is seen planted flat
      (:func:`planted_height`; the mean of the two sides), never with the
      lowest rest point under the floor (a source with lower ankles than
      the rig: that point on the floor, as before) nor more than a tenth of
      the leg above it;
    - 0 when neither applies.
    """
    leg = float(plan.leg_length) if plan.leg_length > 0 else 0.0
    if stands_at_rest(plan, rest_floor_gap):
        return max(float(rest_floor_gap), 0.0)
    out = []
    for sd, pts in fp.items():
        k = _K[f"foot_{sd}"]
        if not mask[:, k].any():
            continue
        h_src, known = planted_height(src, mask, sd, n, fps, k, with_flag=True)
        if known:
            out.append(scale * h_src - pts[0][3])       # (pts[0]: the ankle)
    if not out:
        return 0.0
    return float(np.clip(np.mean(out), 0.0, 0.1 * leg))


#: The limbs that bend as hinges: (upper, lower, end) canonical joints; knees, then elbows.
HINGE_LIMBS = (("thigh", "calf", "foot"), ("upperarm", "forearm", "hand"))
#: A limb bent at least this much at rest (degrees) bends in that plane (the rig's author put it so,
#: as IK chains need); a straighter one about the axis across it and the body's forward direction.
HINGE_REST_BEND = 5.0


def hinge_axes(plan) -> list:
    """The knees' and elbows' hinge axes: ``[(upper, lower, end, axis in the lower bone's rest frame)]``.

    A limb bent at rest (:data:`HINGE_REST_BEND` or more: the meta-rig's
    elbows and knees) bends in that plane: its axis is the plane's normal.
    A straight one bends about the axis across its lower bone (shin,
    forearm) and the body's forward direction (the canonical -Y in the
    rig's axes, ``plan.K``), whatever the rig's bone rolls: a knee forward,
    an elbow of a T or A pose forward too (held-out studios' skeletons
    bend exactly so; CMU's converted skeletons turn the elbow's axis some
    30 degrees from it). A limb whose lower bone is not its upper bone's
    child, or whose end is not its lower bone's child, or a straight one
    pointing forward at rest gives none.
    """
    rig = plan.rig
    Q = rig.rest_rotation()
    forward = plan.K @ np.array([0.0, -1.0, 0.0])
    out = []
    for upper, lower, end in HINGE_LIMBS:
        for s in "lr":
            t, c, f = _bone(plan, f"{upper}_{s}"), _bone(plan, f"{lower}_{s}"), _bone(plan, f"{end}_{s}")
            if t is None or c is None or f is None or int(rig.parents[c]) != t or int(rig.parents[f]) != c:
                continue
            u = rig.head[c] - rig.head[t]
            d = rig.head[f] - rig.head[c]     # the shin, the forearm
            nu, nd = float(np.linalg.norm(u)), float(np.linalg.norm(d))
            if nu < 1e-9 or nd < 1e-9:
                continue
            h = np.cross(u / nu, d / nd)
            if np.linalg.norm(h) < np.sin(np.radians(HINGE_REST_BEND)):
                h = np.cross(d / nd, forward)
                if np.linalg.norm(h) < 0.5:    # the lower bone points forward (or back) at rest: no plane
                    continue
            out.append((t, c, f, Q[c].T @ (h / np.linalg.norm(h))))
    return out


#: Bends (degrees) over which :func:`settle_hinges` fades in: a straight limb shows no plane.
HINGE_BEND = (5.0, 20.0)
#: Cosines of the angle between a hinge's axis and its limb's plane normal over which
#: :func:`settle_hinges` fades out (30 to 60 degrees off).
HINGE_OFF = (np.cos(np.radians(30.0)), np.cos(np.radians(60.0)))


def _limb_bones(plan, limbs):
    """``(toe_of, bones)``: each foot bone's toe bone (its child) where the rig has one, and the bones
    to pose for ``limbs`` (:func:`hinge_axes`): theirs, their ancestors' and the toes."""
    rig = plan.rig
    toe_of = {}
    for s in "lr":
        f, k = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
        if f is not None and k is not None and int(rig.parents[k]) == f:
            toe_of[f] = k
    bones = sorted({b for t, c, f, _a in limbs for b in (t, c, f, *rig.ancestors(t))} | set(toe_of.values()))
    return toe_of, bones


def _free_of_locks(bones, locked) -> bool:
    """True when none of ``bones`` has a locked rotation axis in ``locked`` (bone -> (3,) bool)."""
    return not locked or not any(np.any(locked.get(int(b), False)) for b in bones)


def settle_hinges(plan, quats, locations, chunk=None, locked=None) -> None:
    """Turn the upper and lower bone of each knee and elbow about themselves so that it bends about its hinge axis.

    ``quats`` in place. Joint positions leave a thigh's (an upper arm's)
    turn about itself open where the knee (elbow) may turn any way (the
    lower bone makes up for it, and the end bone for that): the held-out
    studios' keypoints came back with thighs and calves turned 10-20
    degrees about themselves and forearms whose bend axis wandered 2-17
    degrees from frame to frame, some 25 degrees from their skeletons' own,
    and the rig-space solve meets the joints with whatever turn its steps
    left. A knee or an elbow is a hinge: its axis (:func:`hinge_axes`) is
    the normal of the plane of its three joints. Per frame, the upper bone
    turns about its line until the hinge axis lies along that normal, the
    lower bone about its own line likewise, and the end bone (foot, hand)
    keeps its turn in the world: every joint stays where it was, only the
    three rotations change. Faded in over bends of :data:`HINGE_BEND` (a
    straight limb has no plane), and out where the axis is
    :data:`HINGE_OFF` off the plane already. A straight knee whose foot has
    a toe bone faces where the foot points instead: its axis goes across
    the leg and the ankle-to-ball line (held-out studios, 200 frames a
    clip: dense rotations 7.77 -> 7.24 deg). A limb with a locked rotation
    axis on any of its three bones (``locked``: bone -> (3,) bool, as the
    rig-space solve's) is left as the solve made it.
    """
    from ..model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix
    from ..retarget.solve import frame_chunks, pose_rig

    rig = plan.rig
    Q = rig.rest_rotation()
    limbs = [lb for lb in hinge_axes(plan) if _free_of_locks(lb[:3], locked)]
    if not limbs:
        return
    # a straight knee shows no plane: its foot says where it faces (the ankle-to-ball line, across the leg)
    toe_of, bones = _limb_bones(plan, limbs)

    def turn(u, onto, about):
        """The angle (T,) about ``about`` (T, 3) that takes ``u`` (T, 3) (across ``about``) onto ``onto``."""
        u_p = u - (u * about).sum(-1, keepdims=True) * about
        return np.arctan2((np.cross(u_p, onto) * about).sum(-1), (u_p * onto).sum(-1))

    for a0, b0 in frame_chunks(len(quats), chunk):
        W, X = pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)
        for t, c, f, a in limbs:
            upper = X[:, c] - X[:, t]     # thigh, upper arm
            lower = X[:, f] - X[:, c]     # shin, forearm
            n = np.cross(upper, lower)
            nn = vector_norm(n)
            lu, ll = vector_norm(upper), vector_norm(lower)
            bend = np.degrees(np.arcsin(np.clip(nn / np.maximum(lu * ll, 1e-12), 0.0, 1.0)))
            w = np.clip((bend - HINGE_BEND[0]) / (HINGE_BEND[1] - HINGE_BEND[0]), 0.0, 1.0)
            n = n / np.maximum(nn, 1e-12)[:, None]
            uw = upper / np.maximum(lu, 1e-12)[:, None]
            lw = lower / np.maximum(ll, 1e-12)[:, None]
            ha = W[:, c] @ a                                      # the lower bone's hinge axis now
            if f in toe_of:   # a straight knee: its axis across the leg and the foot's forward line
                fwd = X[:, toe_of[f]] - X[:, f]
                nf = np.cross(lw, fwd)
                nnf = vector_norm(nf)
                ok = nnf > 0.5 * vector_norm(fwd)     # (a foot along the leg says nothing)
                nf = nf / np.maximum(nnf, 1e-12)[:, None]
                nf = np.where(((nf * ha).sum(-1) < 0)[:, None], -nf, nf)
                n = np.where((((n * ha).sum(-1)) < 0)[:, None], -n, n)
                mix = np.where(ok, 1.0 - w, 0.0)[:, None]
                n = (1.0 - mix) * n + mix * nf
                n = n / np.maximum(vector_norm(n, keepdims=True), 1e-12)
                w = np.maximum(w, ok.astype(np.float64))
            if not w.any():
                continue
            cos = (n * ha).sum(-1)
            n = np.where((cos < 0)[:, None], -n, n)              # (the normal's sign nearest it)
            # a joint turned far from any hinge (its axis 30-60 degrees or more off the limb's plane:
            # no human pose; which way to turn it is unclear) is left as the solve made it
            w = w * np.clip((np.abs(cos) - HINGE_OFF[1]) / (HINGE_OFF[0] - HINGE_OFF[1]), 0.0, 1.0)
            R_rel = Q[t].T @ Q[c]
            Wt, Wc, Wf = W[:, t], W[:, c], W[:, f]
            g = w * turn(Wt @ (R_rel @ a), n, uw)                 # the upper bone about its own line
            b = w * turn(ha, n, lw)                               # the lower bone about its own line
            Wt2 = axis_angle_to_matrix(g[:, None] * uw) @ Wt
            Wc2 = axis_angle_to_matrix(b[:, None] * lw) @ Wc
            Bt = quat_to_matrix(np.asarray(quats[a0:b0, t], dtype=np.float64))
            quats[a0:b0, t] = matrix_to_quat(Bt @ (np.swapaxes(Wt, -1, -2) @ Wt2))
            quats[a0:b0, c] = matrix_to_quat(R_rel.T @ np.swapaxes(Wt2, -1, -2) @ Wc2)
            R_f = Q[c].T @ Q[f]
            quats[a0:b0, f] = matrix_to_quat(R_f.T @ np.swapaxes(Wc2, -1, -2) @ Wf)


#: A knee or elbow bent backwards by up to this much (degrees) is turned to bend forwards as much ...
HYPEREXTENSION_MAX = 30.0
#: ... over a run of frames bent backwards that reaches this much somewhere.
HYPEREXTENSION_MIN = 4.0


def _unbend_setup(plan):
    """What :func:`unbend_backwards` needs of a plan: ``(Q, limbs, flex, thighs, toe_of, bones)``."""
    rig = plan.rig
    Q = rig.rest_rotation()
    limbs = hinge_axes(plan)
    # which way each limb bends forwards (flexes) about its hinge axis: as it bends at rest where it
    # does; a straight one, an elbow with its forearm turning forwards, a knee with its shin turning
    # backwards (:func:`hinge_axes` gives both the forearm's way, which its users need not tell apart)
    forward = plan.K @ np.array([0.0, -1.0, 0.0])
    thighs = {_bone(plan, "thigh_l"), _bone(plan, "thigh_r")}
    flex = {}
    for t, c, f, a in limbs:
        u, d = rig.head[c] - rig.head[t], rig.head[f] - rig.head[c]
        h = np.cross(u, d)
        if np.linalg.norm(h) < np.sin(np.radians(HINGE_REST_BEND)) * np.linalg.norm(u) * np.linalg.norm(d):
            h = np.cross(d, -forward if t in thighs else forward)
        flex[c] = 1.0 if float((Q[c] @ a) @ h) >= 0.0 else -1.0
    # a knee is judged against its foot too: bent backwards is behind the hip-ankle line as the foot
    # points (heel to ball), where the rig has a toe bone (a knee whose hinge is turned about the
    # leg would otherwise read backwards when it is not)
    toe_of, bones = _limb_bones(plan, limbs)
    return Q, limbs, flex, thighs, toe_of, bones


def unbend_backwards(plan, quats, locations=None, chunk=None, locked=None) -> np.ndarray:
    """Knees and elbows bent backwards a little, turned to bend forwards as much (``quats`` in place).

    Near a limb's full reach its bend's direction is nearly free: a knee
    bent a few degrees backwards (against its hinge, :func:`hinge_axes`)
    meets the ankle as well as one bent forwards, and six effectors of
    fair1's standing clips, baked onto the meta-rig, left knees 6-9 degrees
    backwards on a third of the frames. Over each run of frames in which a
    limb bends backwards (by up to :data:`HYPEREXTENSION_MAX`, and somewhere
    by :data:`HYPEREXTENSION_MIN` or more), its middle joint is mirrored across the
    line from its upper joint to its end (the upper and the lower bone each
    turn about the normal of the limb's plane; the end bone keeps its
    rotation in the world): the end stays where it was, the bend is as
    large, now forwards. A limb with a locked rotation axis (``locked``) is
    left alone. Returns the frames (T,) bool in which a limb turned.
    """
    from ..model.rotations_np import matrix_to_quat, quat_to_matrix, rotation_between
    from ..retarget.solve import frame_chunks, pose_rig

    rig = plan.rig
    turned = np.zeros(len(quats), dtype=bool)
    cached = plan.__dict__.get("_unbend")
    if cached is None:   # (per plan: a Live Solve tick asks again and again)
        cached = plan.__dict__["_unbend"] = _unbend_setup(plan)
    Q, limbs, flex, thighs, toe_of, bones = cached
    limbs = [lb for lb in limbs if _free_of_locks(lb[:3], locked)]
    if not limbs:
        return turned
    T = len(quats)

    def posed(a0, b0):
        return pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)

    # the signed bend of every limb on every frame (degrees, backwards negative)
    bend = {c: np.zeros(T) for _t, c, _f, _a in limbs}
    for a0, b0 in frame_chunks(T, chunk):
        W, X = posed(a0, b0)
        for t, c, f, a in limbs:
            upper, lower = X[:, c] - X[:, t], X[:, f] - X[:, c]
            n = np.cross(upper, lower)
            sin_bend = vector_norm(n) / np.maximum(
                vector_norm(upper) * vector_norm(lower), 1e-12)
            deg = np.degrees(np.arcsin(np.clip(sin_bend, 0.0, 1.0)))
            deg = np.where((upper * lower).sum(-1) > 0, deg, 180.0 - deg)
            back = flex[c] * (n * (W[:, c] @ a)).sum(-1) < 0
            if t in thighs and f in toe_of:
                line = X[:, f] - X[:, t]
                e = line / np.maximum(vector_norm(line, keepdims=True), 1e-12)
                fwd = X[:, toe_of[f]] - X[:, f]
                fwd = fwd - (fwd * e).sum(-1, keepdims=True) * e
                off = upper - (upper * e).sum(-1, keepdims=True) * e      # the knee off the line
                back &= (off * fwd).sum(-1) < 0
            bend[c][a0:b0] = np.where(back, -deg, deg)
    # whole runs of frames bent backwards, where the run reaches HYPEREXTENSION_MIN: within a run the
    # bend turns smoothly to its other side (it is 0 where the run starts and ends); a limb straight
    # but for a degree or two either way is left alone (turning those frames alone put kinks into
    # walks: the bend's sign flickers about a straight knee)
    todo = {}
    for _t, c, _f, _a in limbs:
        back = (bend[c] < 0) & (bend[c] >= -HYPEREXTENSION_MAX)
        if not back.any():
            continue
        # runs of backward frames (each a start and an end), each run's deepest bend at once
        edges = np.flatnonzero(np.diff(np.concatenate([[0], back.astype(np.int8), [0]])))
        r0, r1 = edges[::2], edges[1::2]
        deepest = np.minimum.reduceat(np.where(back, bend[c], np.inf), r0)
        run = np.zeros(T + 1, dtype=np.int64)    # +1 where a chosen run starts, -1 past its end
        keep = deepest <= -HYPEREXTENSION_MIN
        np.add.at(run, r0[keep], 1)
        np.add.at(run, r1[keep], -1)
        sel = np.cumsum(run[:T]) > 0
        if sel.any():
            todo[c] = sel
    if not todo:
        return turned
    for a0, b0 in frame_chunks(T, chunk):
        if not any(sel[a0:b0].any() for sel in todo.values()):
            continue
        W, X = posed(a0, b0)
        for t, c, f, a in limbs:
            if c not in todo or not todo[c][a0:b0].any():
                continue
            k = np.flatnonzero(todo[c][a0:b0])
            upper, lower = X[k, c] - X[k, t], X[k, f] - X[k, c]
            line = X[k, f] - X[k, t]
            e = line / vector_norm(line, keepdims=True)
            uw = upper / vector_norm(upper, keepdims=True)
            lw = lower / vector_norm(lower, keepdims=True)
            # (mirrored across the line: both ends and the lengths kept, the bend as large)
            uw2 = 2.0 * (uw * e).sum(-1, keepdims=True) * e - uw
            lw2 = 2.0 * (lw * e).sum(-1, keepdims=True) * e - lw
            Wt, Wc, Wf = W[k, t], W[k, c], W[k, f]
            Wt2 = rotation_between(uw, uw2) @ Wt
            Wc2 = rotation_between(lw, lw2) @ Wc
            Bt = quat_to_matrix(np.asarray(quats[a0 + k, t], dtype=np.float64))
            quats[a0 + k, t] = matrix_to_quat(Bt @ (np.swapaxes(Wt, -1, -2) @ Wt2))
            quats[a0 + k, c] = matrix_to_quat((Q[t].T @ Q[c]).T @ np.swapaxes(Wt2, -1, -2) @ Wc2)
            quats[a0 + k, f] = matrix_to_quat((Q[c].T @ Q[f]).T @ np.swapaxes(Wc2, -1, -2) @ Wf)
            turned[a0 + k] = True
    return turned


def settle_clavicles(plan, quats, locations=None, chunk=None, locked=None) -> None:
    """Take each clavicle's turn about its own line out of its rotation (``quats`` in place).

    Joint positions show where a clavicle points, not how it is turned about
    itself: the upper arm, whose head is the clavicle's end, makes up for any
    turn, and the solve leaves the one the network guessed (held-out studios:
    12-28 degrees off the source's). A clavicle turns little about itself;
    here it turns none (its rotation from rest is a swing: CMU's skeletons
    move theirs so), about its current line, so its end does not move, and
    the upper arm keeps its rotation in the world: no joint moves. A side
    whose clavicle or upper arm has a locked rotation axis (``locked``) is
    left alone.
    """
    from ..model.rotations_np import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix
    from ..retarget.solve import frame_chunks, pose_rig, twist_angle

    rig = plan.rig
    Q = rig.rest_rotation()
    pairs = []
    for s in "lr":
        c, u = _bone(plan, f"clavicle_{s}"), _bone(plan, f"upperarm_{s}")
        if c is None or u is None or int(rig.parents[u]) != c or not _free_of_locks((c, u), locked):
            continue
        d = rig.head[u] - rig.head[c]
        if float(np.linalg.norm(d)) < 1e-9:
            continue
        pairs.append((c, u, Q[c].T @ (d / np.linalg.norm(d))))   # the clavicle's line in its own frame
    if not pairs:
        return
    bones = sorted({b for c, u, _a in pairs for b in (c, u, *rig.ancestors(c))})
    for a0, b0 in frame_chunks(len(quats), chunk):
        W, _ = pose_rig(rig, quats[a0:b0], None if locations is None else locations[a0:b0], bones=bones,
                        chunk=b0 - a0)
        for c, u, a in pairs:
            q = np.asarray(quats[a0:b0, c], dtype=np.float64)
            untwist = axis_angle_to_matrix(-twist_angle(q, a)[:, None] * a)   # (the turn about its line)
            Wc2 = W[:, c] @ untwist
            quats[a0:b0, c] = matrix_to_quat(quat_to_matrix(q) @ untwist)
            R_rel = Q[c].T @ Q[u]
            quats[a0:b0, u] = matrix_to_quat(R_rel.T @ np.swapaxes(Wc2, -1, -2) @ W[:, u])


def _smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _around(flags):
    """``(idx, last, nxt)`` of ``flags`` (T,) bool: each frame's index, the last flagged frame at or before it
    (``-big`` where none) and the next at or after it (``big`` where none), ``big`` beyond any distance."""
    T = len(flags)
    idx = np.arange(T)
    big = 10 * T + 10
    last = np.maximum.accumulate(np.where(flags, idx, -big))
    nxt = np.minimum.accumulate(np.where(flags, idx, big)[::-1])[::-1]
    return idx, last, nxt


def _ramp(contact, blend):
    """Weights 1 on contact frames fading to 0 over ``blend`` frames around them."""
    c = np.asarray(contact, dtype=bool)
    if not c.any():
        return np.zeros(c.shape[0])
    idx, last, nxt = _around(c)
    d = np.minimum(idx - last, nxt - idx).astype(np.float64)
    return _smoothstep(1.0 - d / (blend + 1.0))


def _ramp_within(contact, blend, lead=0):
    """Weights fading in over ``blend`` frames from ``lead`` frames before each run of ``contact``, out over ``blend`` after it.

    With ``lead`` under ``blend`` the fade-in lies mostly within the run
    (:func:`_ramp` centres it on the run's first frame): a foot landing
    heel first rolls flat as its ankle stops, not before.
    """
    c = np.asarray(contact, dtype=bool)
    if not c.any():
        return np.zeros(c.shape[0])
    idx, first, next_first = _around(_run_starts(c))
    start = np.where(c, first, next_first)            # (before a run: the run to come)
    w_in = _smoothstep(np.clip((idx - start + lead + 1.0) / (blend + 1.0), 0.0, 1.0))
    _, last, _ = _around(c)
    after = ~c & (last >= 0)
    w_out = np.where(after, w_in[np.maximum(last, 0)] * _smoothstep(1.0 - (idx - last) / (blend + 1.0)), 0.0)
    return np.where(c, w_in, np.maximum(np.where(next_first <= idx[-1], w_in, 0.0), w_out))


def _run_means(v, runs):
    """``v`` (T, D) with every frame of each run of True frames of ``runs`` at the run's mean (others as they are)."""
    v = np.asarray(v, dtype=np.float64)
    runs = np.asarray(runs, dtype=bool)
    out = v.copy()
    if not runs.any():
        return out
    starts = _run_starts(runs)
    rid = np.cumsum(starts) - 1                       # each frame's run (meaningful in a run)
    nrun = int(starts.sum())
    sums = np.zeros((nrun,) + v.shape[1:])
    np.add.at(sums, rid[runs], v[runs])
    means = sums / np.bincount(rid[runs], minlength=nrun).reshape((-1,) + (1,) * (v.ndim - 1))
    out[runs] = means[rid[runs]]
    return out


def _run_starts(flags):
    """The first frame of each run of True frames of ``flags`` (T,) bool, as (T,) bool."""
    return flags & ~np.concatenate([[False], flags[:-1]])


def _level(v, n):
    """The unit direction (T, 3) of ``v`` (T, 3) across the up direction ``n`` (3,)."""
    h = v - (v @ n)[:, None] * n
    return h / np.maximum(vector_norm(h, keepdims=True), 1e-12)


def _nearest(frames):
    """Each frame's nearest frame (T,) int among ``frames`` (T,) bool (at least one True)."""
    idx, last, nxt = _around(np.asarray(frames, dtype=bool))
    return np.clip(np.where(idx - last <= nxt - idx, last, nxt), 0, len(idx) - 1)


#: Seconds over which a foot given by its ankle alone turns to lie flat as its ankle stands, and back ...
FOOT_TURN_BLEND = CONTACT_BLEND
#: ... from this long before its ankle stands: a foot landing heel first rolls flat as it stops (held-out
#: six effectors, 200 frames a clip: frames with a pop 56 / 58 / 65 at 0 / 2 / 4 frames of 30 fps,
#: the symmetric fade of the contacts' 89; at 0 the toes stood 6 cm up on a stance's first frame).
FOOT_TURN_LEAD = 2.0 / 30.0
#: A ball of the foot within this share of the foot's length (ankle to ball) of the floor has its toes flat on it.
TOE_FLOOR_GAP = 0.1


def _median_length(src, a, b, mask):
    ok = mask[:, a] & mask[:, b]
    if not ok.any():
        return float("nan")
    return float(np.median(np.linalg.norm(src[ok, b] - src[ok, a], axis=-1)))


def dense_targets(plan, src, mask, scale, fps, n, *, foot_lock=True, source_heights=None,
                  source_rest=None, rest_floor_gap=None, hands=True, skeleton_floor=False, weights=WEIGHTS):
    """Targets for a dense source (see the module docstring).

    Parameters
    ----------
    plan : RetargetPlan
    src : ndarray (T, 32, 3)
        Source keypoints in the armature's axes, metres (``src_m``).
    mask : ndarray of bool (T, 32)
    scale : float
        Rig armature units per source metre.
    fps : float
    n : ndarray (3,)
        World up in armature axes.
    foot_lock : bool
        Add contact targets.
    source_heights : dict, optional
        ``{side: {"ankle": h, "ball": h}}`` flat-foot heights of the source
        (metres) when its skeleton is known; estimated from the motion
        otherwise.
    source_rest : dict, optional
        Joint name -> rest position (metres) of the source skeleton, when
        known: chain lengths come from it instead of the motion.
    rest_floor_gap : float, optional
        Height (armature units, along ``n``) of the rig's lowest rest foot
        point above the object's floor (:func:`rest_floor_gap`); with keypoint sources
        it decides where the rig's floor is (:func:`rig_sole`).
    hands : bool
        Rows for the hands' direction and turn from the hand tips and thumbs
        (keypoints; a source skeleton's rotations carry its hands' turn).
    skeleton_floor : bool
        ``source_heights`` are another skeleton's, measured from its lowest
        rest foot joint as its motion was grounded: a rig standing on its
        floor at rest stands its sole, not its lowest foot joint, there.

    Returns
    -------
    Targets, TargetInfo
    """
    from ..retarget.solve import end_offset_on_rig

    tg = Targets()
    info = TargetInfo()
    T = src.shape[0]
    rig = plan.rig
    rest = rig.head
    x = src * scale
    w = weights
    def direction(ja, jb, weight, kind, pitch=0.0):
        """A row: rig head(jb) - head(ja) along the source's jb - ja.

        Where the two heads keep their distance in every pose (one bone's
        head on the other, or two heads on one bone) the whole error counts:
        the rig's segment of its own length along the source's direction, so
        a segment pointing the other way is as wrong as it looks (an error
        across the direction alone is zero there too: a clavicle flipped in
        the start pose stayed flipped, the shoulder 18 cm off). Elsewhere
        (bones between them) only the error across it: the span bends.
        """
        ba, bb = _bone(plan, JOINTS[ja]), _bone(plan, JOINTS[jb])
        L = float(np.linalg.norm(rest[bb] - rest[ba]))
        if L < 1e-6:
            return False
        rigid = rig.parents[bb] == ba or (rig.parents[bb] == rig.parents[ba] and rig.parents[ba] >= 0)
        d = src[:, jb] - src[:, ja]
        nd = vector_norm(d, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            u = d / nd
        ok = mask[:, ja] & mask[:, jb] & (nd[:, 0] > 1e-6)
        if pitch:   # (a foot: the source's flat foot onto the rig's, foot_pitch_corrections)
            u = np.where(ok[:, None], pitch_down(np.where(ok[:, None], u, 0.0), n, pitch), u)
            feet_dir[JOINTS[ja]] = u
        if rigid:
            info.rigid[len(tg.rows)] = L
        tg.add({tg.point(bb): 1.0, tg.point(ba): -1.0}, L * u, weight * ok, name=f"{JOINTS[ja]}>{JOINTS[jb]}",
               kind=kind, perpendicular=not rigid)
        return True

    # bone directions (a foot's pitched from the source's flat foot onto the rig's)
    pitch = {f"foot_{sd}": a for sd, a in foot_pitch_corrections(plan, src, mask, n, fps, rest_floor_gap).items()}
    info.foot_pitch = {k: float(np.degrees(a)) for k, a in pitch.items()}
    feet_dir = {}         # foot joint -> its pitched direction (T, 3), for the ball's contact
    pelvis_row = False    # (whether a row leaves the pelvis along the spine)
    for j, name in enumerate(JOINTS):
        c = BONE_CHILD[j]
        if c >= len(JOINTS):
            continue
        bj, bc = _bone(plan, name), _bone(plan, JOINTS[c])
        if bj is not None and bc is not None and rig.is_ancestor(bj, bc):
            if direction(j, c, w["direction"], "direction", pitch.get(name, 0.0)) and name == "pelvis":
                pelvis_row = True
    # joints missing in the middle of a bone chain (a rig with fewer spine bones, a source
    # without one: sfu's and cmu_sl's keypoints have no spine2, and nothing held the chest's
    # lean but the start pose): the direction from the nearest ancestor along bone links
    # that both have
    for j, name in enumerate(JOINTS):
        if _bone(plan, name) is None or PARENTS[j] < 0:
            continue
        k, a = j, -1
        while PARENTS[k] >= 0 and BONE_CHILD[PARENTS[k]] == k:
            if _bone(plan, JOINTS[PARENTS[k]]) is not None and mask[:, PARENTS[k]].any():
                a = PARENTS[k]
                break
            k = PARENTS[k]
        if a >= 0 and a != PARENTS[j] and rig.is_ancestor(_bone(plan, JOINTS[a]), _bone(plan, name)):
            if direction(a, j, w["direction"], "direction") and JOINTS[a] == "pelvis":
                pelvis_row = True
    # the hands: where the source gives a hand tip, the hand points along it; where it gives a thumb,
    # the hand turns about its own line until its thumb is on the source's side of it (the direction
    # across the hand only: where a thumb point sits along the hand differs between skeletons). Joint
    # positions alone leave a hand's turn to the network (fair1: the thumb 21-98 deg off). On the rig,
    # the hand tip is the canonical end offset carried by the hand's alignment (as target_keypoints
    # places it: end_offset_on_rig), the thumb the tip of the rig's own thumb at rest where it has one,
    # else the canonical thumb carried so.
    for s in (("l", "r") if hands else ()):
        b, jh = _bone(plan, f"hand_{s}"), _J[f"hand_{s}"]
        tip = end_offset_on_rig(plan, f"hand_tip_{s}")
        if b is None or tip is None:
            continue
        kt, kb = _K[f"hand_tip_{s}"], _K[f"thumb_{s}"]
        # the hand's line: to its tip where given, else along the forearm
        ja = kt if mask[:, kt].any() else _J[f"forearm_{s}"]
        along = src[:, ja] - src[:, jh] if ja == kt else src[:, jh] - src[:, ja]
        with np.errstate(invalid="ignore", divide="ignore"):
            h = along / vector_norm(along, keepdims=True)
        h_ok = mask[:, jh] & mask[:, ja] & np.isfinite(h).all(-1)
        h = np.where(h_ok[:, None], h, 0.0)
        L_tip = float(np.linalg.norm(tip))
        if mask[:, kt].any():
            info.rigid[len(tg.rows)] = L_tip
            tg.add({tg.point(b, tip): 1.0, tg.point(b): -1.0}, L_tip * h, w["direction"] * h_ok,
                   name=f"hand_{s}>hand_tip_{s}", kind="direction")
        if mask[:, kb].any():
            o = _rig_thumb(plan, b)
            o = end_offset_on_rig(plan, f"thumb_{s}") if o is None else o
            t_ax = tip / L_tip                                    # the hand's line, in its frame
            L = float(np.linalg.norm(o - (o @ t_ax) * t_ax))      # the thumb's reach across the hand
            d = src[:, kb] - src[:, jh]
            d = d - (d * h).sum(-1, keepdims=True) * h
            with np.errstate(invalid="ignore", divide="ignore"):
                u = d / vector_norm(d, keepdims=True)
            ok = h_ok & mask[:, kb] & np.isfinite(u).all(-1)
            if L > 1e-9 and ok.any():
                P = np.eye(3)[None] - h[:, :, None] * h[:, None, :]      # across the hand's line
                tg.add({tg.point(b, o): 1.0, tg.point(b): -1.0}, L * np.where(ok[:, None], u, 0.0),
                       w["direction"] * ok, axes=P, name=f"hand_{s}>thumb_{s}", kind="direction")
    # the hips from the pelvis, where no row leaves the pelvis along the spine: the canonical bone
    # chain leaves the pelvis along the spine only, and where a rig's first spine joint sits on its
    # pelvis (CMU's LowerBack: no length, no row) nothing held the pelvis' pitch (cmu_hahne's own
    # skeleton: its legs swung 6 cm about it with the foot lock off, and bent against the contacts
    # with it on: 16.4 -> 1.6 mm). Not where the spine row holds it: the hips sit differently on other
    # skeletons (CMU's hip joints well below the pelvis), and the direction would tilt the rig's
    # pelvis to the source's convention (keypoints of cmu_hahne onto the meta-rig: jitter 31 -> 47)
    for s in (("l", "r") if not pelvis_row else ()):
        bp, bt = _bone(plan, "pelvis"), _bone(plan, f"thigh_{s}")
        if bp is not None and bt is not None and rig.is_ancestor(bp, bt):
            direction(_J["pelvis"], _J[f"thigh_{s}"], w["direction"], "direction")
    # left-right directions of hips and shoulders
    # (joints fixed on the pelvis and on the chest: the clavicles, not the upper
    # arms, whose distance changes when the clavicles turn)
    for a, b in (("thigh_r", "thigh_l"), ("clavicle_r", "clavicle_l")):
        if _bone(plan, a) is not None and _bone(plan, b) is not None:
            direction(_J[a], _J[b], w["lateral"], "lateral")
    # effectors relative to their chain roots, at the chain's scale
    for eff, root, chain in _CHAINS:
        be, br = _bone(plan, eff), _bone(plan, root)
        if be is None or br is None or not mask[:, _J[eff]].any():
            continue
        if root == "pelvis":   # along the spine and neck joints both have (bending does not change it)
            chain = [j for j in ("pelvis", "spine1", "spine2", "spine3", "neck", "head")
                     if _bone(plan, j) is not None and mask[:, _J[j]].any()]
        bones = [_bone(plan, c) for c in chain]
        if any(b is None for b in bones):
            continue
        rig_len = float(sum(np.linalg.norm(rest[bones[k + 1]] - rest[bones[k]]) for k in range(len(bones) - 1)))
        if source_rest is not None and all(c in source_rest for c in chain):
            src_len = float(sum(np.linalg.norm(source_rest[chain[k + 1]] - source_rest[chain[k]])
                                for k in range(len(chain) - 1)))
        else:
            src_len = sum(_median_length(src, _J[chain[k]], _J[chain[k + 1]], mask) for k in range(len(chain) - 1))
        if not (np.isfinite(src_len) and src_len > 1e-6 and rig_len > 1e-9):
            continue
        k = rig_len / src_len
        v = (src[:, _J[eff]] - src[:, _J[root]]) * k
        ok = mask[:, _J[eff]] & mask[:, _J[root]]
        info.effectors[eff] = len(tg.rows)
        info.reach[eff] = rig_len
        tg.add({tg.point(be): 1.0, tg.point(br): -1.0}, v, w["effector"] * ok, name=f"{eff} from {root}",
               kind="effector")
    # root: the middle of the hip joints where the source gives both, the pelvis joint elsewhere.
    # Conventions put the pelvis joint in different places (CMU's root 10 cm above its hip joints,
    # Rokoko's between them, the meta-rig's spine bone below its thigh heads) but the hip joints
    # in one: the rig's hips where the source's are, its legs (of the scaled length) reach the
    # scaled feet. Aimed at the pelvis, the meta-rig's hips stood 6 cm above Rokoko's, out of
    # reach of each contact: the body dropped onto every step (jitter twice the source's)
    r = plan.root
    nn = np.outer(n, n)
    root_rows = []
    if r >= 0:
        P = w["root"] * (np.eye(3) - nn) + w["root_vertical"] * nn
        hips = [_bone(plan, f"thigh_{s}") for s in "lr"]
        both = np.zeros(T, dtype=bool)
        if all(b is not None and rig.is_ancestor(r, b) for b in hips):
            both = mask[:, _J["thigh_l"]] & mask[:, _J["thigh_r"]]
            if both.any():
                mid = 0.5 * (x[:, _J["thigh_l"]] + x[:, _J["thigh_r"]])
                # frames that lost a hip (a video estimator's dropout) keep the same row: the pelvis
                # joint plus its offset to the hips' middle, taken from the frames that have all three
                # (interpolated across the gap). Switching to the pelvis row there would move the rig
                # by the conventions' difference (CMU's root 10 cm above its hips): a pop each time
                gap = mask[:, _J["pelvis"]] & ~both
                ref = np.flatnonzero(both & mask[:, _J["pelvis"]])
                if gap.any() and ref.size:
                    off = mid[ref] - x[ref, _J["pelvis"]]
                    f = np.flatnonzero(gap)
                    mid[f] = x[f, _J["pelvis"]] + np.stack([np.interp(f, ref, off[:, c]) for c in range(3)], -1)
                    both = both | gap
                root_rows.append(len(tg.rows))
                tg.add({tg.point(hips[0]): 0.5, tg.point(hips[1]): 0.5}, mid, both, axes=P, name="hips",
                       kind="root")
        if (mask[:, _J["pelvis"]] & ~both).any():
            root_rows.append(len(tg.rows))
            tg.add({tg.point(r): 1.0}, x[:, _J["pelvis"]], ~both, axes=P, name="pelvis", kind="root")
    # contacts: ankle and ball of each foot
    if foot_lock and T >= 3:
        fp = foot_points(plan, n)
        if source_heights is None:   # keypoints: their heights are above a real floor; so are the rig's
            info.sole = rig_sole(plan, fp, src, mask, n, fps, scale, rest_floor_gap)
        elif skeleton_floor and stands_at_rest(plan, rest_floor_gap):
            # another skeleton, grounded by its lowest foot joints (toe tips): a rig standing on its
            # floor at rest has its lowest foot joint that high above its sole (the meta-rig's toes
            # 1.7 cm): its sole goes where the source's lowest joints are, not its toes (its heels
            # stood 1.7 cm under the floor)
            info.sole = max(float(rest_floor_gap), 0.0)
        if info.sole:
            fp = {sd: [(nm, b, o, h + info.sole) for nm, b, o, h in pts] for sd, pts in fp.items()}
        names = {"ankle": "foot", "ball": "toe"}
        contacts = np.zeros((T, 4), dtype=bool)
        offsets, heights = [], []   # (each frame's correction: its foot's delta; the root takes their median)
        flat = foot_corrections(fp, src, mask, n, fps, scale, source_heights)
        for si, s in enumerate("lr"):
            if s not in flat:
                continue
            ka = _K[f"foot_{s}"]
            h_rig_ankle = fp[s][0][3]
            h_src, known, delta = flat[s]
            # the ankle's height above the floor on every frame (weakly): the rig's feet
            # are as high above its floor as the source's above its own, scaled, in
            # flight and on raised ground too, so the root sits where the feet say
            # (only where the source's flat-foot height is known: from its skeleton, or
            # from frames where that foot stands flat; a guess would move the body)
            a_bone = fp[s][0][1]
            a_tgt = x[:, ka] + n * delta
            if known:
                tg.add({tg.point(a_bone): 1.0}, a_tgt, w["height"] * mask[:, ka], axes=np.outer(n, n),
                       name=f"ankle_{s} height", kind="height")
                heights.append(np.full(int(mask[:, ka].sum()), delta))
            for pi, (pname, bone, off, h_rig) in enumerate(fp[s][:2]):
                k = _K[f"{names[pname]}_{s}"]
                ok = mask[:, k]
                if not ok.any():
                    continue
                h_pt = h_src if pname == "ankle" else h_src * h_rig / max(h_rig_ankle, 1e-9)
                pts = src[:, k] - n * h_pt                   # the point lowered to flat-foot height
                from ..retarget.metrics import foot_contacts
                c = foot_contacts(np.where(ok[:, None], pts, np.nan)[:, None] @ _world_from(n).T, fps, floor=0.0,
                                  height=0.03, speed=0.25, hysteresis=1.5, min_frames=3)[:, 0] & ok
                contacts[:, 2 * si + pi] = c
                if not c.any():
                    continue
                tgt = x[:, k] + n * delta
                if pname == "ball" and f"foot_{s}" in feet_dir:
                    # a foot pitched onto the rig's flat foot: its ball where the rig's own foot puts
                    # it, from the ankle's target along that direction (the source's ball, scaled,
                    # lies at the source's foot's length and drop: it tilted the rig's foot back)
                    L = float(np.linalg.norm(_rest_point(rig, bone, off) - _rest_point(rig, *fp[s][0][1:3])))
                    ka = _K[f"foot_{s}"]
                    tgt = np.where(mask[:, ka, None], x[:, ka] + n * delta + L * feet_dir[f"foot_{s}"], tgt)
                wts = w["contact"] * _ramp(c, _blend_frames(fps)) * ok
                pidx = tg.point(bone, off)
                info.contact_rows.append(len(tg.rows))
                info.floor_points.append(pidx)
                tg.add({pidx: 1.0}, tgt, wts, name=f"{pname}_{s} contact", kind="contact")
                if not np.any(off):
                    offsets.append(np.full(int(c.sum()), delta))
        info.contacts = contacts
        if not offsets:
            offsets = heights
        if offsets and root_rows and np.concatenate(offsets).size:
            shift = float(np.median(np.concatenate(offsets)))
            info.floor_offset = shift
            for row in root_rows:
                tg.rows[row]["target"] = tg.rows[row]["target"] + n * shift
    return tg, info


def foot_corrections(fp, src, mask, n, fps, scale, source_heights=None) -> dict:
    """Per foot, ``side -> (h_src, known, delta)``: the vertical correction of its contacts.

    From the ankle: a foot's own correction is the rig's flat-foot ankle
    height (``fp``, :func:`foot_points`, the sole included) less the
    source's (``h_src``, scaled: from its skeleton, ``source_heights``, or
    :func:`planted_height` where the foot is seen planted flat, ``known``);
    the ball gets the same. Both feet then take one ``delta``, the mean of
    the corrections of the feet whose height is known (the floor and the
    sole are both feet's; ``h_src`` becomes the height it implies): a rig
    whose rest stands one foot higher than the other (a BVH skeleton's
    rest, measured at rest) tilted the body by correcting each foot its
    own way (held-out keypoints onto their own skeletons, every frame:
    joints 1.17 -> 0.76 mm), and a foot never seen planted flat had only a
    guess, its lowest heights, which put a climbing clip's contacts 4 cm
    under the source's, the body with them (33.3 -> 18.5 mm). Feet without
    an ankle keypoint are left out.
    """
    flat = {}
    for s in "lr":
        ka = _K[f"foot_{s}"]
        if s not in fp or not mask[:, ka].any():
            continue
        if source_heights is not None and "ankle" in source_heights.get(s, {}):
            h_src, known = float(source_heights[s]["ankle"]), True
        else:
            h_src, known = planted_height(src, mask, s, n, fps, ka, with_flag=True)
        flat[s] = (float(h_src), bool(known), float(fp[s][0][3] - scale * h_src))
    seen = [d for _h, known, d in flat.values() if known]
    if seen:
        delta = float(np.mean(seen))
        for s, (h_src, known, _d) in list(flat.items()):
            flat[s] = ((fp[s][0][3] - delta) / scale if scale else h_src, known, delta)
    return flat


def planted_height(src, mask, side, n, fps, k, *, with_flag=False):
    """The source point's height (metres) while its foot is planted flat, estimated from the motion.

    The median height over frames where the ankle and the ball of that foot
    are both low and still; the 5th percentile of its height when the foot is
    never planted. ``with_flag``: also return whether the foot was seen
    planted (the estimate is then reliable).
    """
    h, ok = _planted_height(src, mask, side, n, fps, k)
    return (h, ok) if with_flag else h


def _planted_height(src, mask, side, n, fps, k):
    a, b = _K[f"foot_{side}"], _K[f"toe_{side}"]
    h = src @ n
    ok = mask[:, a] & mask[:, b] & mask[:, k]
    if ok.sum() < 3:
        if not mask[:, b].any() and mask[:, a].any():
            # no ball of the foot in the source (cmu_sl has no toes): where the ankle stands,
            # low and still, the foot is planted (its 5th percentile, taken for the planted height
            # before, sank cmu_sl's own skeleton 1.8 cm)
            flat = stance(src, mask, n, fps, a) & mask[:, k]
            if flat.sum() >= 3:
                return float(np.median(h[flat, k])), True
        return float(np.percentile(h[mask[:, k], k], 5.0)), False
    flat = _flat_frames(src, mask, side, n, fps)
    flat = None if flat is None else flat & mask[:, k]
    if flat is None or flat.sum() < 3:
        return float(np.percentile(h[mask[:, k], k], 5.0)), False
    return float(np.median(h[flat, k])), True


def _flat_frames(src, mask, side, n, fps):
    """Frames (T,) bool in which the foot of ``side`` stands flat, or None where fewer than three.

    Its ankle and ball both given, low (within 3 cm of their 5th percentile
    heights, the ball within 8 cm of the floor) and still (under 0.15 m/s).
    """
    a, b = _K[f"foot_{side}"], _K[f"toe_{side}"]
    ok = mask[:, a] & mask[:, b]
    if ok.sum() < 3:
        return None
    h = src[:, [a, b]] @ n
    vel = np.maximum(_speed(src, mask, a, fps), _speed(src, mask, b, fps))
    lo_a = np.percentile(h[ok, 0], 5.0)
    lo_b = np.percentile(h[ok, 1], 5.0)
    # low and still, and the ball of the foot near the floor (z = 0 after grounding)
    flat = ok & (vel < 0.15) & (h[:, 0] < lo_a + 0.03) & (h[:, 1] < lo_b + 0.03) & (h[:, 1] < 0.08)
    return flat if flat.sum() >= 3 else None


def _speed(src, mask, k, fps):
    """Speed (T,) of point ``k`` in metres per second; infinite where it or a neighbour frame is missing."""
    v = np.gradient(np.where(mask[:, k, None], src[:, k], np.nan), axis=0) * float(fps)
    return np.nan_to_num(vector_norm(v), nan=np.inf)


def stance(src, mask, n, fps, k):
    """Frames (T,) bool where point ``k`` stands: within 3 cm of its 5th percentile height, slower than 0.15 m/s.

    For an ankle given alone (six effectors), whose foot's own points are
    not known: :func:`..retarget.metrics.foot_contacts` on it, with its own
    low height as the floor; stances shorter than 3 frames are dropped.
    """
    from ..retarget.metrics import foot_contacts

    ok = mask[:, k]
    if ok.sum() < 3:
        return np.zeros(len(ok), dtype=bool)
    p = np.where(ok[:, None], src[:, k], np.nan)[:, None] @ _world_from(n).T    # (T, 1, 3), Z up
    floor = float(np.percentile(p[ok, 0, 2], 5.0))
    return foot_contacts(p, fps, floor=floor, height=0.03, speed=0.15, vertical=True, min_frames=3)[:, 0] & ok


def _world_from(n):
    """A rotation taking ``n`` to +Z (so contact heights read along world up)."""
    from ..model.rotations_np import rotation_between

    return rotation_between(np.asarray(n, dtype=np.float64), np.array([0.0, 0.0, 1.0]))


def sparse_targets(plan, src, mask, scale, weights=WEIGHTS, init_heads=None, stretched=None, n=None, fps=None):
    """Targets for effectors (and elbow/knee hints) at ``scale * src``.

    Elbows and knees without a hint in the source keep, weakly, where the
    start pose (the network's answer) has them: like a pole target, this
    keeps the bend on the natural side while the prior fades (a nearly
    straight leg could otherwise fold backwards).

    A hand or foot target beyond 1.5 times its chain's reach (from the chain's
    root in ``init_heads``) is moved in to the reach. ``stretched``
    (effector -> (T,) bool, for a second pass from a solved pose): on those
    frames a target more than 2% past the reach from the solved chain root
    keeps a fading share of its weight (down to :data:`UNREACHABLE_WEIGHT`
    12% past it), so that the chain points at it while the other effectors
    are met.

    A foot given by its ankle alone keeps the start pose's direction in the
    world (heel to ball, weakly); with ``n`` (up) and ``fps``, on the frames
    where its ankle stands (:func:`stance`, faded in and out over
    :data:`CONTACT_BLEND` seconds) its ball is held at the ankle target's
    height less the rig's own flat-foot drop from ankle to ball: the foot
    stands flat, its heading the stance's mean (the start pose's turns
    frame by frame slid the ball of a planted foot), faded in once the ankle
    stands (the heel lands first) and out after; and the foot's direction
    never puts its ball under the floor it stood on (the start pose's foot,
    pitched toes down as the heel rose, stabbed 5 cm into it).

    Returns
    -------
    Targets, TargetInfo
    """
    tg = Targets()
    info = TargetInfo()
    x = src * scale
    rest = plan.rig.head
    # where each ankle given alone stands (its foot's own points unknown)
    still, along, fp = {}, {}, {}
    if n is not None and fps and len(src) >= 3:
        fp = foot_points(plan, n)
        for s in "lr":
            ka = _K[f"foot_{s}"]
            if mask[:, ka].any() and not mask[:, _K[f"toe_{s}"]].any():
                still[s] = stance(src, mask, n, fps, ka)
    for name in SPARSE_EFFECTORS + SPARSE_HINTS:
        b = _bone(plan, name)
        k = _K[name]
        if b is None or not mask[:, k].any():
            continue
        hint = name in SPARSE_HINTS
        if not hint:
            info.effectors[name] = len(tg.rows)
            for eff, root, chain in _CHAINS:
                if eff == name and root != "pelvis":
                    bones = [_bone(plan, c) for c in chain]
                    if all(bb is not None for bb in bones):
                        info.reach[name] = float(sum(np.linalg.norm(rest[bones[i + 1]] - rest[bones[i]])
                                                     for i in range(len(bones) - 1)))
        wt = weights["sparse_hint" if hint else "sparse_effector"] * mask[:, k]
        tgt = x[:, k]
        if not hint and name in info.reach and init_heads is not None:
            # beyond the chain's reach from where the chain starts: the stretched chain
            # points at it, weakly (the other effectors stay met: the body is not dragged
            # along), at a point just past its reach (a target metres away pulls no harder)
            root = _bone(plan, CHAIN_ROOTS[name])
            d = tgt - init_heads[:, root]
            dist = vector_norm(d, keepdims=True)
            # (the weight fades from 100% 2% past the reach to UNREACHABLE_WEIGHT 12% past
            # it: the start pose's chain roots are approximate, a straight leg is at its
            # reach, and a dragged empty crossing the reach must not make the pose jump)
            ratio = dist[:, 0] / info.reach[name]
            if not stretched or name not in stretched:   # only targets far out of reach are moved in
                far = (ratio > 1.5) & mask[:, k]
                if far.any():
                    info.clamped[name] = tgt.copy()
                    tgt = np.where(far[:, None], init_heads[:, root] + d / dist * 0.999 * info.reach[name], tgt)
            else:
                far = (ratio > 1.02) & mask[:, k] & stretched[name]
                if far.any():
                    info.clamped[name] = tgt.copy()
                    aim = init_heads[:, root] + d / np.maximum(dist, 1e-12) * np.minimum(dist, 1.12 * info.reach[name])
                    tgt = np.where(far[:, None], aim, tgt)
                    fade = np.where(far, np.clip((ratio - 1.02) / 0.1, 0.0, 1.0), 0.0)
                    wt = wt * (1.0 - (1.0 - UNREACHABLE_WEIGHT) * fade)
        tg.add({tg.point(b): 1.0}, tgt, wt, name=name, kind="hint" if hint else "effector")
    if init_heads is not None:
        for name in SPARSE_HINTS:
            b = _bone(plan, name)
            if b is None:
                continue
            k = _K[name]
            w = weights["pole"] * (~mask[:, k])
            if w.any():
                tg.add({tg.point(b): 1.0}, init_heads[:, b], w, name=f"{name} pole", kind="pole")
        # a foot given by its ankle alone keeps the start pose's direction in the world (heel
        # to ball: pitch and heading, the network's guess), not its turn relative to the
        # shin: a leg the solve bends or straightens to meet the ankle would tip the foot
        # with it (toes up through the floor while the foot stands)
        for s in "lr":
            fb, tb = _bone(plan, f"foot_{s}"), _bone(plan, f"toe_{s}")
            if fb is None or tb is None or not plan.rig.is_ancestor(fb, tb):
                continue
            d = init_heads[:, tb] - init_heads[:, fb]
            L = float(np.linalg.norm(rest[tb] - rest[fb]))
            nd = vector_norm(d, keepdims=True)
            ok = mask[:, _K[f"foot_{s}"]] & (nd[:, 0] > 1e-9) & ~mask[:, _K[f"toe_{s}"]]
            if L > 1e-9 and ok.any() and s in still and still[s].any():
                ka = _K[f"foot_{s}"]
                near = _nearest(still[s])
                held = _run_means(d / np.maximum(nd, 1e-12), still[s])[near]   # the nearest stance's heading
                flat = s in fp and fp[s][1][1] == tb     # (the ball is the toe bone's head: the row's end)
                if flat:   # standing, the foot lies flat: its ball the rig's flat-foot drop below the ankle
                    drop = fp[s][0][3] - fp[s][1][3]
                    held = (np.sqrt(max(L ** 2 - drop ** 2, 0.0)) * _level(held, n) - drop * n) / L
                r = _ramp_within(still[s], max(int(round(FOOT_TURN_BLEND * float(fps))), 1),
                                 int(round(FOOT_TURN_LEAD * float(fps))))[:, None]
                d = (1.0 - r) * d / np.maximum(nd, 1e-12) + r * held
                d /= np.maximum(vector_norm(d, keepdims=True), 1e-12)
                if flat:   # the ball never under the floor the foot stood on
                    a_z = x[:, ka] @ n
                    floor = (a_z - drop)[near]
                    low = ok & (a_z + L * (d @ n) < floor) & (a_z - floor < L)
                    if low.any():
                        dz = (floor[low] - a_z[low]) / L
                        d[low] = _level(d[low], n) * np.sqrt(np.maximum(1.0 - dz ** 2, 0.0))[:, None] + dz[:, None] * n
                    # the ball on that floor (within TOE_FLOOR_GAP of it): the toes lie flat on it too
                    # (toes bent down through it as the heel rose: 3 cm under on the held-out walk)
                    ball_gap = a_z + L * (d @ n) - floor
                    on_floor = _smoothstep(1.0 - np.clip(ball_gap / (TOE_FLOOR_GAP * L), 0.0, 1.0))
                    along[s] = (L * d, r[:, 0], np.maximum(r[:, 0], on_floor * ok))
                nd = vector_norm(d, keepdims=True)
                ok = ok & (nd[:, 0] > 1e-6)    # (a start pose's foot turned the other way: no direction)
            if L > 1e-9 and ok.any():
                tg.add({tg.point(tb): 1.0, tg.point(fb): -1.0}, L * d / np.maximum(nd, 1e-12),
                       weights["sparse_foot"] * ok, name=f"foot_{s} direction", kind="pole", perpendicular=True)
    for s in still:     # (a given toe says how the foot stands: no stance of its own)
        ka = _K[f"foot_{s}"]
        if s not in fp or not still[s].any():
            continue
        (_, _, _, h_ankle), (_, bb, boff, h_ball) = fp[s][0], fp[s][1]
        tgt = x[:, ka] - n * (h_ankle - h_ball)        # the ball at flat-foot height under the ankle
        if s in along:
            # as high as the foot's direction row puts it: flat where the foot stands, and
            # from the ankle along the foot's direction as the row fades in and out
            to_ball, r, r_toe = along[s]
            tgt = x[:, ka] + to_ball
            wt = weights["flat_foot"] * r * mask[:, ka]
            wt_toe = weights["flat_foot"] * r_toe * mask[:, ka]
        else:
            wt = wt_toe = weights["flat_foot"] * _ramp(still[s], _blend_frames(fps)) * mask[:, ka]
        tg.add({tg.point(bb, boff): 1.0}, tgt, wt, axes=np.outer(n, n), name=f"ball_{s} flat", kind="height")
        tb = _bone(plan, f"toe_{s}")
        if tb is not None and tb == bb:   # the toes flat too: their tip as high as the ball
            Q = plan.rig.rest_rotation()
            tip = Q[tb].T @ (plan.rig.tail[tb] - plan.rig.head[tb])
            h_tip = float(np.dot(n, plan.rig.tail[tb] - plan.rig.head[tb]))
            tg.add({tg.point(tb, tip): 1.0}, tgt + n * h_tip, wt_toe, axes=np.outer(n, n), name=f"toe_{s} flat",
                   kind="height")
    return tg, info
