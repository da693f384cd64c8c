"""Foot lock: planted feet stay planted on the target rig (no ``bpy``).

Why
---
:func:`.solve.retarget` copies the source's joint rotations and scales its
root motion by the leg-length ratio. When the target's proportions differ
from the source's (thigh/calf ratio, foot length, hip width...), the scaled
root motion and the copied leg rotations no longer agree and a foot that is
planted in the source slides on the target.

What
----
:func:`foot_lock` takes a :class:`.solve.RetargetResult` and returns a new
one in which, on the frames where the SOURCE foot is in contact, the
target's planted heel or toe is kept where the TARGET's own foot already
is, using soft two-bone IK on the thigh and calf and, where a leg is
nearly straight, a small vertical move of the pelvis. The lock only
removes drift: a retarget that already keeps the foot planted (same
proportions, a clean solve) comes back unchanged.

1. **Contacts** (:func:`source_contacts`) are detected on the source
   keypoints (heel and toe tip of each foot): within 5 cm of the floor,
   horizontal speed under 0.1 m/s (3.3 mm/frame at 30 fps) and vertical
   speed under 0.1 m/s, released when over 1.5 times these (7.5 cm,
   0.15 m/s: hysteresis, no chattering), at least 3 frames long. Much
   stricter than the sliding metric (:func:`.metrics.foot_sliding`:
   0.5 m/s horizontal, no vertical limit): a foot that really moves
   (shuffling, sliding into a turn, a heel lifting) is not locked.
2. **Ankle goals** (:func:`_foot_correction`): a foot's contact segments
   are its heel's and toe's contacts merged. Inside one, the target's
   planted point (the heel or the toe tip, whichever moves least: the
   pivot) is held at ITS OWN mean position over the segment: the
   correction is minus its drift from that mean (cumulated frame steps, so
   switching pivots is continuous). A segment whose drift stays under
   :data:`DRIFT_TOL` (3 mm, scaled with the rig) is not touched; the
   correction fades in between once and twice that drift. The foot's
   orientation is kept, so adding the correction to the ankle moves the
   planted point by it. Before and after a segment the correction at its
   first / last frame fades out over ``blend_frames`` frames with a
   smoothstep (no pops).
3. **Soft IK and the pelvis**: a leg changes its hip-ankle distance with
   Wilson's soft-IK falloff applied to the change (:func:`soft_extension`:
   identity while the leg is bent, attenuated in the last ``1 - reach`` =
   3 % of thigh + calf, full extension never reached). Near full extension
   the knee moves by ``1 / (2 tan(half knee angle))`` times an extension
   change (tens of times on a straight stance leg: 2 mm of ankle -> 40 mm
   of knee, a pop); with the falloff it moves by at most about
   ``0.5 sqrt(thigh / soft zone)`` (about 2x) times the asked change. What
   a straight leg does not take is asked of the pelvis, vertically
   (lowered where a goal is too far, raised where a straight leg would
   have to shorten); the two legs' requests are averaged, weighted by how
   straight each leg is, and refined once with the pelvis moved (the
   requests follow the corrections, which fade in and out, so the pelvis
   moves smoothly over all the frames of a segment). The root's
   horizontal motion is never changed (in-place bakes stay in place).
4. **Two-bone IK** (armature space): hip ``H`` (thigh head), knee ``N``
   (calf head), ankle ``A`` (foot head). The ankle goes along the hip-goal
   line to the soft distance; the knee stays in the plane of ``H``, the
   new ankle and the current knee (the current knee is the pole); the law
   of cosines gives the new knee. The thigh and calf get the smallest
   world rotations taking them onto the new knee and ankle, and the
   foot's local rotation is recomputed so that its WORLD orientation
   (hence the toes') is unchanged. Leg-frames still missing their goal by
   more than the drift tolerance are counted in the report.

Only the thigh, calf and foot rotations of the locked legs change, on
frames within ``blend_frames`` of a locked contact, plus the root's
location where the pelvis moves; ``heads`` are recomputed with
:func:`.solve.pose_rig` on those frames; quaternions stay sign-continuous.

In-place bakes: pass source keypoints with the same horizontal root motion
removed (as :class:`..blender_io.bake.BakeJob` does): feet that walk
backwards under a fixed pelvis are not planted, so nothing is locked there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..model.rotations_np import matrix_to_quat, quat_to_matrix, rotation_between
from ..model.skeleton import CANONICAL, END_OFFSETS, END_POINTS, KEYPOINTS
from .metrics import CONTACT_HEIGHT, FOOT_POINTS, foot_contacts
from .solve import RetargetResult, _leg_length, pose_rig, quat_continuity

__all__ = ["FootLockReport", "source_contacts", "foot_lock", "contact_weights", "soft_extension",
           "LOCK_SPEED", "LOCK_VSPEED", "LOCK_HEIGHT", "DRIFT_TOL"]


@dataclass
class FootLockReport:
    """What :func:`foot_lock` did.

    Attributes
    ----------
    legs : list of str
        Sides locked (``"l"``, ``"r"``); a leg needs mapped thigh, calf and
        foot bones in one chain.
    segments : int
        Contact segments of the feet (heel and toe contacts merged).
    locked_segments : int
        Those corrected (the others' target foot already stays within the
        drift tolerance).
    frames : int
        Frames whose leg rotations changed (either leg).
    max_correction : float
        Largest ankle correction asked for (armature units).
    limited_frames : int
        Leg-frames whose ankle still misses its lock by more than the drift
        tolerance (soft IK near full extension, after the pelvis moved).
    pelvis_drop : float
        Largest vertical move of the pelvis (armature units, lowered where
        a lock is out of reach or raised to spare a straight leg).
    max_knee_move : float
        Largest knee displacement caused by the lock (armature units).
    """

    legs: list
    segments: int = 0
    frames: int = 0
    max_correction: float = 0.0
    limited_frames: int = 0
    pelvis_drop: float = 0.0
    locked_segments: int = 0
    max_knee_move: float = 0.0


#: Horizontal speed (m/s) under which a source foot point near the floor is
#: planted: 0.1 m/s is 3.3 mm/frame at 30 fps (a foot that really moves, e.g.
#: sliding into a turn or shuffling, is faster; the sliding metric's looser
#: 0.5 m/s, :data:`.metrics.CONTACT_SPEED`, is a separate definition).
LOCK_SPEED = 0.10
#: Vertical speed (m/s, absolute) under which it is planted (a heel lifting
#: off or coming down is not planted yet).
LOCK_VSPEED = 0.10
#: Height above the floor (m) under which it is planted.
LOCK_HEIGHT = CONTACT_HEIGHT
#: A contact segment whose target planted point drifts less than this from
#: its own mean position (source metres, scaled with the rig) is left alone;
#: the lock fades in between once and twice this drift (no pop between a
#: segment that is locked and one that is not).
DRIFT_TOL = 0.003


def source_contacts(source_keypoints, fps: float, *, height: float = LOCK_HEIGHT,
                    speed: float = LOCK_SPEED, vspeed: float = LOCK_VSPEED, hysteresis: float = 1.5,
                    min_frames: int = 3) -> np.ndarray:
    """Heel / toe-tip floor contacts of the source motion.

    Parameters
    ----------
    source_keypoints : array_like (T, 32, 3)
        Canonical keypoints of the source (metres, Z up), e.g. the solved
        motion's forward kinematics.
    fps : float
    height, speed, vspeed : float
        Contact thresholds: height above the floor (m, default 5 cm),
        horizontal speed (m/s, default 0.1) and vertical speed (m/s,
        default 0.1), see :func:`.metrics.foot_contacts`. Much stricter than
        the sliding metric's 0.5 m/s: only a really still foot is locked.
    hysteresis : float
        Release thresholds = ``hysteresis`` times the contact thresholds
        (default 1.5: a contact lasts while under 7.5 cm, 0.15 m/s).
    min_frames : int
        Shorter contacts are ignored.

    Returns
    -------
    ndarray of bool (T, 4)
        Columns in :data:`.metrics.FOOT_POINTS` order (heel_l, toe_tip_l,
        heel_r, toe_tip_r).
    """
    kp = np.asarray(source_keypoints, dtype=np.float64)
    p = kp[:, [KEYPOINTS.index(n) for n in FOOT_POINTS]]
    c = foot_contacts(p, fps, height=height, speed=speed, vspeed=vspeed, hysteresis=hysteresis,
                      min_frames=min_frames)
    return c & np.isfinite(p).all(-1)


def _smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def contact_weights(contact, blend_frames: int):
    """Per-frame lock weights around the contact segments of one point.

    Parameters
    ----------
    contact : ndarray of bool (T,)
    blend_frames : int
        Frames over which the lock fades in before and out after a segment.

    Returns
    -------
    seg_prev, seg_next : ndarray of int (T,)
        Index of the nearest segment at or before / at or after each frame
        (-1: none).
    w_prev, w_next : ndarray (T,)
        Their weights: 1 inside a segment, a smoothstep falling to 0 at
        ``blend_frames + 1`` frames away. Inside a segment both sides name
        the same segment.
    """
    c = np.asarray(contact, dtype=bool)
    T = c.shape[0]
    idx = np.arange(T)
    start = c & ~np.concatenate([[False], c[:-1]])
    label = np.cumsum(start) - 1                     # segment of each contact frame
    big = 1 << 40
    last = np.maximum.accumulate(np.where(c, idx, -big))
    nxt = np.minimum.accumulate(np.where(c, idx, big)[::-1])[::-1]
    has_prev, has_next = last >= 0, nxt < T
    seg_prev = np.where(has_prev, label[np.clip(last, 0, T - 1)], -1)
    seg_next = np.where(has_next, label[np.clip(nxt, 0, T - 1)], -1)
    n = float(blend_frames) + 1.0
    w_prev = np.where(has_prev, _smoothstep(1.0 - (idx - last) / n), 0.0)
    w_next = np.where(has_next, _smoothstep(1.0 - (nxt - idx) / n), 0.0)
    inside = c
    w_next = np.where(inside, 0.0, w_next)          # inside: count the segment once
    return seg_prev, seg_next, w_prev, w_next


def _foot_correction(points, contacts, blend_frames, tol=0.0):
    """Ankle correction keeping a foot's planted points in place.

    Parameters
    ----------
    points : list of ndarray (T, 3)
        The foot's contact points on the target (heel, toe tip), unlocked.
    contacts : list of ndarray of bool (T,)
        Their source contacts.
    blend_frames : int
    tol : float
        Drift tolerance (armature units): a segment whose planted point stays
        within ``tol`` of its mean is not corrected; between ``tol`` and
        ``2 tol`` the correction fades in (smoothstep of the drift).

    Returns
    -------
    corr : ndarray (T, 3)
        Correction to add to the ankle (the foot's orientation is kept, so
        every point of the foot moves by it).
    weight : ndarray (T,)
        Lock weight in [0, 1] (0: frame untouched).
    nseg : int
        Contact segments of the foot (heel and toe contacts merged).
    nlocked : int
        Those corrected (drift over ``tol``).

    Notes
    -----
    Inside a foot segment (heel or toe planted) the correction cancels the
    movement of the planted point since the segment's start (cumulated frame
    steps, so switching the pivot from heel to toe is continuous; with both
    in contact the pivot is the one moving least), minus its mean over the
    segment (smallest corrections). Before and after a segment the correction at its first /
    last frame fades out with :func:`contact_weights` (a constant offset: a
    fast foot next to a contact is not dragged along).
    """
    T = points[0].shape[0]
    P = np.stack(points, 1)                                  # (T, n, 3)
    C = np.stack(contacts, 1)                                # (T, n)
    u = C.any(1)
    seg_prev, seg_next, w_prev, w_next = contact_weights(u, blend_frames)
    nseg = int(max(seg_prev.max(initial=-1), seg_next.max(initial=-1)) + 1)
    if nseg == 0:
        return np.zeros((T, 3)), np.zeros(T), 0, 0
    # displacement of the planted point over each step t-1 -> t inside a
    # segment: of the point(s) in contact on both frames (else on frame t),
    # the one moving least (the pivot: the heel while the toe comes down,
    # the toe while the heel lifts)
    both = C[1:] & C[:-1]
    cand = np.where(both.any(1, keepdims=True), both, C[1:])
    dp = np.diff(P, axis=0)
    size = np.where(cand, np.linalg.norm(dp, axis=-1), np.inf)
    pick = np.argmin(size, axis=1)
    step = np.take_along_axis(dp, pick[:, None, None], axis=1)[:, 0]
    step = np.where((u[1:] & u[:-1] & cand.any(1))[:, None], step, 0.0)
    c = -np.concatenate([np.zeros((1, 3)), np.cumsum(step, 0)], 0)
    frames = np.flatnonzero(u)
    lab = seg_prev[u]
    first = np.full(nseg, T)
    last = np.full(nseg, -1)
    np.minimum.at(first, lab, frames)
    np.maximum.at(last, lab, frames)
    c = c - c[first[np.maximum(seg_prev, 0)]]               # zero at each segment's start
    cnt = np.bincount(lab, minlength=nseg).astype(np.float64)
    mean = np.stack([np.bincount(lab, weights=c[u, k], minlength=nseg) for k in range(3)], -1) / cnt[:, None]
    # the target's own drift from its mean: a segment that already stays put
    # (drift under tol) is not touched, the lock fades in up to 2 tol
    c_in = c - mean[np.maximum(seg_prev, 0)]
    amp = np.zeros(nseg)
    np.maximum.at(amp, lab, np.linalg.norm(c_in[u], axis=-1))
    gain = _smoothstep((amp - tol) / tol) if tol > 0 else np.ones(nseg)
    c_first = (c[first] - mean) * gain[:, None]
    c_last = (c[last] - mean) * gain[:, None]
    c_prev = np.where((seg_prev >= 0)[:, None], c_last[np.maximum(seg_prev, 0)], 0.0)
    c_next = np.where((seg_next >= 0)[:, None], c_first[np.maximum(seg_next, 0)], 0.0)
    wsum = w_prev + w_next
    corr = (w_prev[:, None] * c_prev + w_next[:, None] * c_next) / np.maximum(wsum, 1.0)[:, None]
    corr = np.where(u[:, None], c_in * gain[np.maximum(seg_prev, 0)][:, None], corr)
    g_prev = np.where(seg_prev >= 0, gain[np.maximum(seg_prev, 0)], 0.0)
    g_next = np.where(seg_next >= 0, gain[np.maximum(seg_next, 0)], 0.0)
    weight = np.minimum(w_prev * (g_prev > 0) + w_next * (g_next > 0), 1.0)
    return corr, weight, nseg, int(np.sum(gain > 0))


def _soft(u, L, sw):
    """Wilson's soft-IK falloff: ``u`` up to ``L - sw``, then ``L - sw exp(-(u - L + sw) / sw)`` (< L)."""
    da = L - sw
    return np.where(u <= da, u, L - sw * np.exp(-np.maximum(u - da, 0.0) / sw))


def _soft_inv(d, L, sw):
    """Inverse of :func:`_soft` (``d`` clamped just below ``L``)."""
    da = L - sw
    d = np.minimum(d, L - 1e-9 * L)
    return np.where(d <= da, d, da - sw * np.log(np.maximum(L - d, 1e-300) / sw))


def soft_extension(current, delta, length, soft):
    """New hip-ankle distance of a two-bone leg asked to change it by ``delta``.

    Soft IK (Wilson's falloff) applied to the change: the leg's extension
    ``current`` is mapped to the soft coordinate ``u`` (identity below
    ``length - soft``, exponential approach to ``length`` above), moved by
    ``delta`` there and mapped back. ``delta = 0`` gives ``current``
    exactly (a lock asking nothing changes nothing), the leg never reaches
    full extension, and near it an extension change is attenuated by
    ``(length - d) / soft``: the knee moves by at most about
    ``0.5 sqrt(thigh / soft)`` times ``|delta|`` (about 2x with the default
    3 % soft zone) instead of ``1 / (2 tan(half knee angle))`` times (tens
    of times on a straight leg, the knee "pop").

    Parameters
    ----------
    current, delta, length, soft : array_like
        Current extension, asked change, thigh + calf, soft-zone width.

    Returns
    -------
    ndarray
    """
    return _soft(_soft_inv(current, length, soft) + delta, length, soft)


def _leg_bones(plan, side):
    rig, ent = plan.rig, plan.mapping.entries
    names = [ent.get(f"{x}_{side}") for x in ("thigh", "calf", "foot")]
    if any(n is None or not rig.has(n) for n in names):
        return None
    th, ca, fo = (rig.index(n) for n in names)
    if not (rig.is_ancestor(th, ca) and rig.is_ancestor(ca, fo)):
        return None
    toe = ent.get(f"toe_{side}")
    toe = rig.index(toe) if toe is not None and rig.has(toe) and rig.is_ancestor(fo, rig.index(toe)) else None
    return th, ca, fo, toe


def foot_lock(plan, result: RetargetResult, source_keypoints, fps: float, *, contacts=None,
              blend_frames: int = 4, reach: float = 0.97, hysteresis: float = 1.5,
              min_frames: int = 3, drift_tol: float = DRIFT_TOL, pelvis_smooth: int = 0,
              pelvis_iterations: int = 2):
    """Keep the target's planted feet in place (see the module docstring).

    Parameters
    ----------
    plan : RetargetPlan
        The plan ``result`` was made with.
    result : RetargetResult
        Retargeted values (not modified).
    source_keypoints : array_like (T, 32, 3)
        Source keypoints (metres, Z up) used to detect the contacts; with
        an in-place bake, without the horizontal root motion.
    fps : float
        Frame rate (contact speeds).
    contacts : ndarray of bool (T, 4), optional
        Precomputed contacts (:data:`.metrics.FOOT_POINTS` order); default:
        :func:`source_contacts`.
    blend_frames : int
        Fade-in/out length of a lock around each contact (frames).
    reach : float
        Fraction of the leg length (thigh + calf) where the soft-IK zone
        starts (:func:`soft_extension`, zone width ``(1 - reach) * leg``).
    hysteresis, min_frames
        Contact detection, see :func:`source_contacts`.
    drift_tol : float
        Drift tolerance (source metres, scaled by the leg-length ratio): a
        segment whose target point already stays within it of its mean is
        left alone, see :data:`DRIFT_TOL`.
    pelvis_smooth : int
        Extra moving mean (``2n + 1`` frames) on the pelvis offset; 0 (the
        default): none, the offset already follows the faded corrections
        smoothly and any smoothing leaves the straight legs short.
    pelvis_iterations : int
        Passes of the pelvis estimate (each with the pelvis moved by the
        previous ones).

    Returns
    -------
    RetargetResult
        A new result (arrays copied) with ``foot_lock`` set to a
        :class:`FootLockReport`.
    """
    q = np.array(result.quaternions, dtype=np.float64, copy=True)
    heads = np.array(result.heads, dtype=np.float64, copy=True)
    T = q.shape[0]
    if contacts is None:
        contacts = source_contacts(source_keypoints, fps, hysteresis=hysteresis, min_frames=min_frames)
    contacts = np.asarray(contacts, dtype=bool).reshape(T, len(FOOT_POINTS))
    rig, K = plan.rig, plan.K
    report = FootLockReport(legs=[])
    locs = np.array(result.locations, dtype=np.float64, copy=True)
    leg_bones = [b for side in "lr" if _leg_bones(plan, side) is not None
                 for b in _leg_bones(plan, side) if b is not None]
    chain = sorted({a for b in leg_bones for a in rig.ancestors(b)} | set(leg_bones))
    W, X = pose_rig(rig, q, locs, bones=chain)     # the legs and their ancestors only
    s = plan.leg_length / _leg_length(CANONICAL) if plan.leg_length > 0 else 1.0
    fwd = -K[:, 1]                                   # the body's forward, armature axes
    up = K[:, 2]
    # pass 1: ankle goals (armature space) from the heel / toe-tip locks
    legs = []
    for side in ("l", "r"):
        bones = _leg_bones(plan, side)
        if bones is None:
            continue
        th, ca, fo, toe = bones
        report.legs.append(side)
        # heel (carried by the foot) and toe tip (by the toe) on the target,
        # as target_keypoints places them: X + s W A^T K e
        col = FOOT_POINTS.index(f"heel_{side}")
        pts, cons = [], []
        for k, (name, bone) in enumerate(((f"heel_{side}", fo), (f"toe_tip_{side}", toe))):
            if bone is None or bone not in plan.align:
                continue
            e = END_OFFSETS[END_POINTS.index(name)]
            pts.append(X[:, bone] + s * (W[:, bone] @ (plan.align[bone].T @ (K @ e))))
            cons.append(contacts[:, col + k])
        corr, wsum, nseg, nlocked = _foot_correction(pts, cons, blend_frames, tol=drift_tol * s)
        report.segments += nseg
        report.locked_segments += nlocked
        f = np.flatnonzero(wsum > 0)
        if not f.size:
            continue
        report.max_correction = max(report.max_correction, float(np.linalg.norm(corr[f], axis=-1).max()))
        legs.append((th, ca, fo, f, X[f, fo] + corr[f]))
    if not legs:
        out = replace(result, quaternions=q, locations=locs, heads=heads)
        out.foot_lock = report
        return out
    # pass 1.5: the pelvis. A leg follows its goal with soft IK (Wilson's falloff
    # on the extension change, :func:`soft_extension`): a nearly straight leg
    # barely changes its length instead of bending its knee sharply. What it
    # does not take is asked of the pelvis, vertically (lowered where a goal is
    # too far, raised where a straight leg would have to shorten); the legs'
    # requests are averaged, weighted by how straight each leg is, smoothed
    # over time, and refined once with the pelvis moved.
    lift = np.zeros(T)
    if plan.root >= 0:
        for _ in range(pelvis_iterations):
            num, den = np.zeros(T), np.zeros(T)
            for th, ca, fo, f, goal in legs:
                H, N, A = X[f, th] + lift[f, None] * up, X[f, ca], X[f, fo]
                L = np.linalg.norm(N - X[f, th], axis=-1) + np.linalg.norm(A - N, axis=-1)
                sw = (1.0 - reach) * L
                d0 = np.linalg.norm(A - X[f, th], axis=-1)
                v = goal - H
                dg = np.linalg.norm(v, axis=-1)
                u = _soft_inv(d0, L, sw) + (dg - d0)
                e1 = _soft(u, L, sw)                          # the leg's own share
                vu = v @ up
                disc = np.maximum(vu * vu - (dg * dg - e1 * e1), 0.0)
                z = np.where(vu < -0.3 * dg, vu + np.sqrt(disc), 0.0)   # hip offset (up) putting the goal at e1
                w = 1.0 - np.exp(-np.maximum(u - (L - sw), 0.0) / sw)   # 0: bent leg (follows), 1: straight
                np.add.at(num, f, w * z)
                np.add.at(den, f, w)
            step = np.where(den > 1e-9, num / np.maximum(den, 1e-9), 0.0)
            lift = lift + _moving_mean(step, pelvis_smooth)
    moved = []
    if np.abs(lift).max() > 0:
        report.pelvis_drop = float(np.abs(lift).max())
        r = plan.root
        base = W[:, r] @ np.swapaxes(quat_to_matrix(q[:, r]), -1, -2)   # root's parent frame
        locs[:, r] += (np.swapaxes(base, -1, -2) @ up) * lift[:, None]
        moved = [r] + list(rig.descendants(r))           # rotations unchanged: a translation
        X = X.copy()
        X[:, moved] += lift[:, None, None] * up
    # pass 2: two-bone IK on each leg, soft about its current extension
    changed = lift != 0
    for th, ca, fo, f, goal in legs:
        H, N, A = X[f, th], X[f, ca], X[f, fo]
        a = np.linalg.norm(N - H, axis=-1)
        b = np.linalg.norm(A - N, axis=-1)
        L = a + b
        v = goal - H
        dg = np.linalg.norm(v, axis=-1)
        n = v / np.maximum(dg, 1e-12)[:, None]
        d0 = np.linalg.norm(A - H, axis=-1)
        d = soft_extension(d0, dg - d0, L, (1.0 - reach) * L)
        d = np.maximum(d, np.abs(a - b) + 1e-6 * L)
        report.limited_frames += int(np.sum(dg - d > drift_tol * s))
        # pole: the current knee, perpendicular to the new hip -> ankle line
        pole = (N - H) - np.sum((N - H) * n, -1, keepdims=True) * n
        pn = np.linalg.norm(pole, axis=-1, keepdims=True)
        alt = fwd - np.sum(fwd * n, -1, keepdims=True) * n   # straight leg: knee forward
        pole = np.where(pn > 1e-6 * L[:, None], pole, alt)
        pole /= np.linalg.norm(pole, axis=-1, keepdims=True)
        cos_a = np.clip((a * a + d * d - b * b) / (2.0 * a * d), -1.0, 1.0)
        sin_a = np.sqrt(1.0 - cos_a * cos_a)
        N2 = H + a[:, None] * (cos_a[:, None] * n + sin_a[:, None] * pole)
        A2 = H + d[:, None] * n
        report.max_knee_move = max(report.max_knee_move, float(np.linalg.norm(N2 - N, axis=-1).max()))
        D1 = rotation_between(N - H, N2 - H)
        D2 = rotation_between((D1 @ (A - N)[..., None])[..., 0], A2 - N2)
        D21 = D2 @ D1
        tr = lambda m: np.swapaxes(m, -1, -2)  # noqa: E731
        Wt, Wc, Wf = W[f, th], W[f, ca], W[f, fo]
        # basis' = basis @ W^T E_parent^T E_bone W (E: the world change)
        new = {
            th: quat_to_matrix(q[f, th]) @ (tr(Wt) @ D1 @ Wt),
            ca: quat_to_matrix(q[f, ca]) @ (tr(Wc) @ tr(D1) @ D21 @ Wc),
            fo: quat_to_matrix(q[f, fo]) @ (tr(Wf) @ tr(D21) @ Wf),
        }
        for bone, m in new.items():
            nq = matrix_to_quat(m)
            nq *= np.where(np.sum(nq * q[f, bone], -1) < 0, -1.0, 1.0)[:, None]
            q[f, bone] = nq
        changed[f] = True
    report.frames = int(changed.sum())
    cols = sorted({b for th, ca, fo, _, _ in legs for b in (th, ca, fo)})
    q[:, cols] = quat_continuity(q[:, cols])
    fr = np.flatnonzero(changed)
    if moved:                                        # the root's subtree moved vertically
        heads[:, moved] += lift[:, None, None] * up
    # re-pose the changed legs' subtrees (their parents' poses are known)
    sub = sorted({d for th, _, _, _, _ in legs for d in [th] + list(rig.descendants(th))})
    _, Xs = pose_rig(rig, q[fr], locs[fr], bones=sorted(set(sub) | set(chain)))
    heads[np.ix_(fr, sub)] = Xs[:, sub]
    out = replace(result, quaternions=q, locations=locs, heads=heads)
    out.foot_lock = report
    return out


def _moving_mean(x, n):
    """Moving mean of ``x`` (T,) over ``2n + 1`` frames (zeros outside); ``n = 0``: ``x``."""
    n = int(n)
    if n <= 0:
        return x
    pad = np.concatenate([np.zeros(n), x, np.zeros(n)])
    return np.convolve(pad, np.ones(2 * n + 1) / (2 * n + 1), mode="valid")

