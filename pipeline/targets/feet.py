"""The rig's feet and the source's: foot points, floors, soles, planted heights and stances (no ``bpy``)."""

from __future__ import annotations

import numpy as np

from ...model.rotations_np import vector_norm
from ...readers.base import FLOOR_KEPT
from .. import tuning
from .common import _K, _bone, _world_from, floor_normal


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


def stands_at_rest(plan, rest_floor_gap) -> bool:
    """Whether the rig's rest stands on its object's floor (:data:`..tuning.STANDING_GAP`): a character
    modelled on the ground, whose rest feet stand flat (not a skeleton hanging from its hips)."""
    leg = float(plan.leg_length) if plan.leg_length > 0 else 0.0
    return rest_floor_gap is not None and leg > 0 and tuning.STANDING_GAP[0] * leg <= rest_floor_gap <= tuning.STANDING_GAP[1] * leg


def foot_pitch_corrections(plan, src, mask, n, fps, rest_floor_gap) -> dict:
    """Per foot, ``side -> angle`` (radians): how much further down the rig's ankle-to-ball line points
    than the source's when each foot stands flat.

    Skeletons put the ankle and the ball of the foot at different heights
    above the sole (see docs/tuning.md#foot_pitch_min). Copying
    the source's ankle-to-ball direction onto the rig tilts the rig's foot
    by the difference. The rig's flat pitch is read from its rest where it
    stands on its floor at rest (:func:`stands_at_rest`: a skeleton hanging
    from its hips says nothing about how its feet stand), the source's from
    the frames in which that foot is seen planted flat (the median); a foot
    with neither gets none, nor one whose difference is under
    :data:`..tuning.FOOT_PITCH_MIN`. Clamped to :data:`..tuning.FOOT_PITCH_MAX`.
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
        if np.isfinite(d) and abs(d) >= np.radians(tuning.FOOT_PITCH_MIN):
            lim = np.radians(tuning.FOOT_PITCH_MAX)
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
    baked back onto its own skeleton sank by the sole (see
    docs/tuning.md#rig_sole). So:

    - a rig standing on its object's floor at rest (``rest_floor_gap``
      within :data:`..tuning.STANDING_GAP` of the leg length, as a character modelled
      on the ground, its origin at its feet): that floor, the lowest point's
      height above it;
    - otherwise the floor is unknown (a skeleton whose rest hangs from its
      hips at the origin, as Blender's BVH import makes one): the rig's
      ankles are taken to stand as high above it as the source's, at the
      rig's scale, where the source's foot is seen planted flat
      (:func:`planted_height`; the mean of the two sides), never with the
      lowest rest point more than the reader's
      :data:`...readers.base.FLOOR_KEPT` under the floor (a file whose feet
      stand below its z = 0 keeps its heights: the rig's go with them) nor
      more than a tenth of the leg above it, give or take that same
      ``FLOOR_KEPT`` (a file whose feet stand above its z = 0 keeps its
      heights too);
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
    return float(np.clip(np.mean(out), -FLOOR_KEPT, 0.1 * leg + FLOOR_KEPT))


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
    rest) tilted the body by correcting each foot its own way, and a foot
    never seen planted flat has only a guess, its lowest heights (see
    docs/tuning.md#foot_corrections). Feet without an ankle keypoint are
    left out.
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


def skeleton_on_its_floor(heights, src, mask, n, fps) -> bool:
    """Whether a source skeleton's flat-foot heights (:func:`..source.source_heights`, above its lowest
    rest foot joint) are heights above the floor it walks on: where the balls of its feet (its
    ankles, without balls) stand (:func:`stance`; a low percentile of those frames, :data:`..tuning.STAND_PERCENTILE`: they include a
    foot rolling on and off) they are their rest height above that floor, within
    :data:`..tuning.SOLE_TOLERANCE` (the mean of the feet). A CMU toe joint stands centimetres above
    it. ``True`` when no ball is seen standing (nothing says otherwise)."""
    soles = []
    for s, h in (heights or {}).items():
        # (the ball of the foot where the source has it, else the ankle: cmu_sl's feet have no toes)
        for name, kp in (("ball", f"toe_{s}"), ("ankle", f"foot_{s}")):
            k = _K[kp]
            if name in h and mask[:, k].any():
                on = stance(src, mask, n, fps, k)
                if on.sum() >= 3:
                    soles.append(float(np.percentile(src[on, k] @ n, tuning.STAND_PERCENTILE)) - float(h[name]))
                break
    return not soles or abs(float(np.mean(soles))) <= tuning.SOLE_TOLERANCE


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
            # no ball of the foot in the source: where the ankle stands, low and still, the foot
            # is planted (its 5th percentile sank a skeleton: see docs/tuning.md#foot_corrections)
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
    heights, the ball within 8 cm of the floor, give or take the reader's
    :data:`...readers.base.FLOOR_KEPT`) and still (under 0.15 m/s).
    """
    a, b = _K[f"foot_{side}"], _K[f"toe_{side}"]
    ok = mask[:, a] & mask[:, b]
    if ok.sum() < 3:
        return None
    h = src[:, [a, b]] @ n
    vel = np.maximum(_speed(src, mask, a, fps), _speed(src, mask, b, fps))
    lo_a = np.percentile(h[ok, 0], 5.0)
    lo_b = np.percentile(h[ok, 1], 5.0)
    # low and still, and the ball of the foot near the floor (z = 0, give or take the reader's FLOOR_KEPT)
    flat = ok & (vel < 0.15) & (h[:, 0] < lo_a + 0.03) & (h[:, 1] < lo_b + 0.03) & (h[:, 1] < 0.08 + FLOOR_KEPT)
    return flat if flat.sum() >= 3 else None


def _speed(src, mask, k, fps):
    """Speed (T,) of point ``k`` in metres per second; infinite where it or a neighbour frame is missing."""
    v = np.gradient(np.where(mask[:, k, None], src[:, k], np.nan), axis=0) * float(fps)
    return np.nan_to_num(vector_norm(v), nan=np.inf)


def stance(src, mask, n, fps, k):
    """Frames (T,) bool where point ``k`` stands, low and still.

    Within 3 cm of its 5th percentile height, slower than 0.15 m/s (definition).
    For an ankle given alone (six effectors), whose foot's own points are
    not known: :func:`..retarget.metrics.foot_contacts` on it, with its own
    low height as the floor; stances shorter than 3 frames are dropped.
    """
    from ...retarget.metrics import foot_contacts

    ok = mask[:, k]
    if ok.sum() < 3:
        return np.zeros(len(ok), dtype=bool)
    p = np.where(ok[:, None], src[:, k], np.nan)[:, None] @ _world_from(n).T    # (T, 1, 3), Z up
    floor = float(np.percentile(p[ok, 0, 2], 5.0))
    return foot_contacts(p, fps, floor=floor, height=0.03, speed=0.15, vertical=True, min_frames=3)[:, 0] & ok
