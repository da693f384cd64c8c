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
target's ankle is moved so that the contacting heel and/or toe tip stay at
one place, using analytic two-bone IK on the thigh and calf:

1. **Contacts** (:func:`source_contacts`) are detected on the source
   keypoints (heel and toe tip of each foot: near the floor and slow, see
   :func:`.metrics.foot_contacts`) with hysteresis and a minimum length, so
   they do not chatter.
2. **Ankle goals** (:func:`_foot_correction`): a foot's contact segments
   are its heel's and toe's contacts merged. Inside one, the correction
   cancels the target's movement of the planted point (the heel or the toe
   tip, whichever moves least: the pivot) since the segment's start,
   re-centred on its mean over the segment (smallest corrections, i.e. the
   point held at its mean position). The foot's orientation is kept, so
   adding the correction to the ankle moves the planted point by it.
   Before and after a segment the correction at its first / last frame
   fades out over ``blend_frames`` frames with a smoothstep (no pops).
3. **Two-bone IK** (armature space): hip ``H`` (thigh head), knee ``N``
   (calf head), ankle ``A`` (foot head). The knee stays in the plane of
   ``H``, the new ankle target and the current knee (the current knee is
   the pole); the law of cosines gives the new knee. The thigh and calf get
   the smallest world rotations taking them onto the new knee and ankle,
   and the foot's local rotation is recomputed so that its WORLD
   orientation (hence the toes') is unchanged.
4. **Reach** (choice: lower the pelvis, then stretch-limit): where an
   ankle goal is farther from the hip than the leg allows (more than
   ``reach`` = 97 % of thigh + calf, or than the leg's current extension
   when it is straighter than that), the pelvis (root bone) is lowered
   vertically by the shortfall, spread smoothly over time (moving maximum
   then moving mean, ``blend_frames`` wide, so it is never less than
   needed). What remains out of reach is softly limited (a tanh that never
   reaches full extension, no knee snapping): the ankle stops short along
   the hip-goal line and the report counts those leg-frames. The root's
   horizontal motion is never changed (in-place bakes stay in place).

Only the thigh, calf and foot rotations of the locked legs change, on
frames within ``blend_frames`` of a contact, plus the root's location where
the pelvis is lowered; ``heads`` are recomputed with
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

__all__ = ["FootLockReport", "source_contacts", "foot_lock", "contact_weights", "LOCK_SPEED"]


@dataclass
class FootLockReport:
    """What :func:`foot_lock` did.

    Attributes
    ----------
    legs : list of str
        Sides locked (``"l"``, ``"r"``); a leg needs mapped thigh, calf and
        foot bones in one chain.
    segments : int
        Contact segments (heel and toe tip counted separately).
    frames : int
        Frames whose leg rotations changed (either leg).
    max_correction : float
        Largest ankle correction asked for (armature units).
    limited_frames : int
        Leg-frames whose ankle still stopped short of its lock (beyond the
        soft reach limit after lowering the pelvis).
    pelvis_drop : float
        Largest lowering of the pelvis (armature units) to reach the locks.
        Note: a leg that is nearly straight bends a lot at the knee for a
        few millimetres of ankle correction (the knee moves by about the
        correction divided by twice the tangent of the half knee angle).
    """

    legs: list
    segments: int = 0
    frames: int = 0
    max_correction: float = 0.0
    limited_frames: int = 0
    pelvis_drop: float = 0.0


#: Speed (m/s, 3-D) under which a source foot point near the floor is planted.
LOCK_SPEED = 0.25


def source_contacts(source_keypoints, fps: float, *, height: float = CONTACT_HEIGHT,
                    speed: float = LOCK_SPEED, hysteresis: float = 1.5,
                    min_frames: int = 3) -> np.ndarray:
    """Heel / toe-tip floor contacts of the source motion.

    Parameters
    ----------
    source_keypoints : array_like (T, 32, 3)
        Canonical keypoints of the source (metres, Z up), e.g. the solved
        motion's forward kinematics.
    fps : float
    height, speed : float
        Contact thresholds (m above the floor, m/s), see
        :func:`.metrics.foot_contacts`; the speed is 3-D (a heel lifting in
        place is not planted) and stricter than the sliding metric's.
    hysteresis : float
        Release thresholds = ``hysteresis`` times the contact thresholds.
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
    c = foot_contacts(p, fps, height=height, speed=speed, hysteresis=hysteresis, min_frames=min_frames,
                      vertical=True)
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


def _foot_correction(points, contacts, blend_frames):
    """Ankle correction keeping a foot's planted points in place.

    Parameters
    ----------
    points : list of ndarray (T, 3)
        The foot's contact points on the target (heel, toe tip), unlocked.
    contacts : list of ndarray of bool (T,)
        Their source contacts.
    blend_frames : int

    Returns
    -------
    corr : ndarray (T, 3)
        Correction to add to the ankle (the foot's orientation is kept, so
        every point of the foot moves by it).
    weight : ndarray (T,)
        Lock weight in [0, 1] (0: frame untouched).
    nseg : int
        Contact segments of the foot (heel and toe contacts merged).

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
        return np.zeros((T, 3)), np.zeros(T), 0
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
    c_first = c[first] - mean
    c_last = c[last] - mean
    c_prev = np.where((seg_prev >= 0)[:, None], c_last[np.maximum(seg_prev, 0)], 0.0)
    c_next = np.where((seg_next >= 0)[:, None], c_first[np.maximum(seg_next, 0)], 0.0)
    wsum = w_prev + w_next
    corr = (w_prev[:, None] * c_prev + w_next[:, None] * c_next) / np.maximum(wsum, 1.0)[:, None]
    c_in = c - mean[np.maximum(seg_prev, 0)]
    corr = np.where(u[:, None], c_in, corr)
    return corr, np.minimum(wsum, 1.0), nseg


def _soft_reach(d, r, knee, current):
    """Distance ``d`` softly limited below ``r``.

    Unchanged up to ``max(knee * r, current)`` (``current``: the unlocked
    hip-ankle distance, so a zero correction is never altered), then
    compressed with a tanh that tends to ``r``.
    """
    k = np.maximum(knee * r, np.minimum(current, r * (1.0 - 1e-6)))
    over = d > k
    span = r - k
    soft = k + span * np.tanh((d - k) / np.maximum(span, 1e-12))
    return np.where(over, soft, d), over


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
              min_frames: int = 3):
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
        Fraction of the leg length (thigh + calf) where the soft reach limit
        starts.
    hysteresis, min_frames
        Contact detection, see :func:`source_contacts`.

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
        corr, wsum, nseg = _foot_correction(pts, cons, blend_frames)
        report.segments += nseg
        f = np.flatnonzero(wsum > 0)
        if not f.size:
            continue
        report.max_correction = max(report.max_correction, float(np.linalg.norm(corr[f], axis=-1).max()))
        legs.append((th, ca, fo, f, X[f, fo] + corr[f]))
    if not legs:
        out = replace(result, quaternions=q, locations=locs, heads=heads)
        out.foot_lock = report
        return out
    # pelvis: lowered (smoothly) where a goal is beyond the leg's reach
    drop = np.zeros(T)
    moved = []
    for th, ca, fo, f, goal in legs:
        H, N, A = X[f, th], X[f, ca], X[f, fo]
        r = np.linalg.norm(N - H, axis=-1) + np.linalg.norm(A - N, axis=-1)
        lim = np.maximum(reach * r, np.linalg.norm(A - H, axis=-1))
        v = goal - H
        vu = v @ up
        disc = vu * vu - (np.sum(v * v, -1) - lim * lim)
        need = np.where(np.sum(v * v, -1) > lim * lim, -vu - np.sqrt(np.maximum(disc, 0.0)), 0.0)
        drop[f] = np.maximum(drop[f], np.maximum(need, 0.0))
    if plan.root >= 0 and drop.max() > 0:
        drop = _smooth_cover(drop, blend_frames)
        report.pelvis_drop = float(drop.max())
        r = plan.root
        base = W[:, r] @ np.swapaxes(quat_to_matrix(q[:, r]), -1, -2)   # root's parent frame
        locs[:, r] -= (np.swapaxes(base, -1, -2) @ up) * drop[:, None]
        moved = [r] + list(rig.descendants(r))           # rotations unchanged: a translation
        X = X.copy()
        X[:, moved] -= drop[:, None, None] * up
    # pass 2: two-bone IK on each leg
    changed = drop > 0
    for th, ca, fo, f, goal in legs:
        H, N, A = X[f, th], X[f, ca], X[f, fo]
        a = np.linalg.norm(N - H, axis=-1)
        b = np.linalg.norm(A - N, axis=-1)
        v = goal - H
        d = np.linalg.norm(v, axis=-1)
        n = v / np.maximum(d, 1e-12)[:, None]
        d, over = _soft_reach(d, a + b, reach, np.linalg.norm(A - H, axis=-1))
        d = np.maximum(d, np.abs(a - b) + 1e-6 * (a + b))
        report.limited_frames += int(np.sum(over & (np.linalg.norm(v, axis=-1) - d > 1e-4 * (a + b))))
        # pole: the current knee, perpendicular to the new hip -> ankle line
        pole = (N - H) - np.sum((N - H) * n, -1, keepdims=True) * n
        pn = np.linalg.norm(pole, axis=-1, keepdims=True)
        alt = fwd - np.sum(fwd * n, -1, keepdims=True) * n   # straight leg: knee forward
        pole = np.where(pn > 1e-6 * (a + b)[:, None], pole, alt)
        pole /= np.linalg.norm(pole, axis=-1, keepdims=True)
        cos_a = np.clip((a * a + d * d - b * b) / (2.0 * a * d), -1.0, 1.0)
        sin_a = np.sqrt(1.0 - cos_a * cos_a)
        N2 = H + a[:, None] * (cos_a[:, None] * n + sin_a[:, None] * pole)
        A2 = H + d[:, None] * n
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
    if drop.max() > 0:                               # the root's subtree moved down
        heads[:, moved] -= drop[:, None, None] * up
    # re-pose the changed legs' subtrees (their parents' poses are known)
    sub = sorted({d for th, _, _, _, _ in legs for d in [th] + list(rig.descendants(th))})
    _, Xs = pose_rig(rig, q[fr], locs[fr], bones=sorted(set(sub) | set(chain)))
    heads[np.ix_(fr, sub)] = Xs[:, sub]
    out = replace(result, quaternions=q, locations=locs, heads=heads)
    out.foot_lock = report
    return out


def _smooth_cover(x, n):
    """A smooth curve >= ``x`` (T,): moving maximum then moving mean, both 2n+1 wide."""
    n = max(int(n), 1)
    T = x.shape[0]
    pad = np.concatenate([np.zeros(n), x, np.zeros(n)])
    win = np.lib.stride_tricks.sliding_window_view(pad, 2 * n + 1)
    mx = win.max(axis=-1)
    pad = np.concatenate([np.zeros(n), mx, np.zeros(n)])
    kern = np.ones(2 * n + 1) / (2 * n + 1)
    return np.convolve(pad, kern, mode="valid")[:T]
