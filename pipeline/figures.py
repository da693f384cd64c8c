"""Stage 4, the figures: what a user sees of a bake on the rig, and warnings when one is off (no ``bpy``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.rotations_np import vector_norm
from ..model.skeleton import BONE_CHILD, JOINTS, KEYPOINTS
from ..retarget.chunks import frame_chunks
from . import tuning

__all__ = ["BakeFigures", "measure", "figure_warnings", "knee_bends_backwards"]

_J = {n: i for i, n in enumerate(JOINTS)}
_K = {n: i for i, n in enumerate(KEYPOINTS)}
#: The bone each limb effector's reach is measured from, and the chain named in a message.
_REACH_ROOTS = {"hand_l": "upperarm_l", "hand_r": "upperarm_r", "foot_l": "thigh_l", "foot_r": "thigh_r"}


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
        source has a foot planted (positive: floats); on a rig whose rest
        does not stand on its floor, its ankles and balls above the
        source's, scaled.
    floor_reference : str
        ``"floor"`` or ``"source"``: what ``floor_error_cm`` is measured from.
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
    floor_reference: str = "floor"
    joint_error_mm: tuple = (float("nan"), float("nan"))
    upright_share: float = float("nan")
    source_upright_share: float = float("nan")
    knees_backwards: int = 0
    bone_direction_error_deg: float = float("nan")
    jitter: float = float("nan")
    source_jitter: float = float("nan")
    foot_sliding_mm: float = float("nan")
    unreachable: list = field(default_factory=list)


def measure(job) -> BakeFigures:
    """The figures of ``job`` (:class:`.core.RigBake`, after its fit)."""
    res, plan, u = job.result, job.plan, job.unit
    f = BakeFigures()
    _motion_figures(job, f)
    # joints at the rig's scale (world metres)
    ent = {j: plan.rig.index(b) for j, b in plan.mapping.entries.items() if j in _J and plan.rig.has(b)}
    js = [_J[j] for j in ent]
    bs, s = list(ent.values()), job.scale * u
    from ..retarget import metrics

    # a chunk at a time: a long clip's columns would be copies of the heads and the source
    f.joint_error_mm = metrics.mean_and_max(
        metrics.distance_sums(res.heads[a:b, bs] * u, job.src_m[a:b, js] * s, job.mask[a:b, js])
        for a, b in frame_chunks(job.n_frames, job.chunk))
    _effector_figures(job, f)
    if job.light:
        return f
    # floor, upright, knees (world heights)
    f.floor_error_cm, f.floor_reference = _floor_error(job, res)
    if "head" in ent:   # (the two bones' heights only: a long clip's every bone would take memory)
        m = job.object_matrix
        up_rig = res.heads[:, [ent["head"], ent["pelvis"]]] @ m[2, :3] + m[2, 3]
        f.upright_share = float(np.mean(up_rig[:, 0] > up_rig[:, 1]))
    ok = job.mask[:, _J["head"]] & job.mask[:, _J["pelvis"]]
    if ok.any():
        sh = job.src_m[:, [_J["head"], _J["pelvis"]]] @ job.up
        f.source_upright_share = float(np.mean(sh[ok, 0] > sh[ok, 1]))
    f.knees_backwards = _knees_backwards(job, res.heads, ent)
    return f


def _motion_figures(job, f):
    """Bone directions (two ends given) and motion figures (3 frames or more): a dragged pose has neither."""
    from ..retarget import metrics
    from ..retarget.solve import target_keypoints

    J = len(JOINTS)
    pairs = job.mask[:, :J] & job.mask[:, list(BONE_CHILD)]
    if not (job.n_frames >= 3 or pairs.any()):
        return
    plan, res = job.plan, job.result
    # both sides in float32 (the figures sum a chunk at a time in float64): a long clip's
    # whole-clip arrays are the bake's peak
    tk = target_keypoints(plan, res.quaternions, res.locations, unit_scale=job.unit, chunk=job.chunk,
                          dtype=np.float32)   # metres
    body = job.kp_body if job.kp_body is not None else _source_body(job)   # the source as read
    f.bone_direction_error_deg = metrics.bone_direction_error(tk, body, job.mask)
    f.jitter = metrics.jitter(tk[:, :J], job.fps)
    # (at the rig's size: a body a quarter taller moves a quarter further in the same motion)
    f.source_jitter = metrics.jitter(body[:, :J], job.fps) * job.scale * job.unit
    del body
    f.foot_sliding_mm = metrics.foot_sliding(tk, job.fps)


def _source_body(job):
    """The source keypoints in the body frame (T, 32, 3) as float32, made a chunk at a time from :attr:`src_m`."""
    src, K = job.src_m, job.plan.K
    out = np.empty(src.shape, dtype=np.float32)
    for a, b in frame_chunks(len(src), job.chunk):
        np.matmul(src[a:b], K, out=out[a:b], casting="same_kind")
    return out


def _effector_figures(job, f):
    """Mean and max effector distance; in sparse mode the effectors missed by more than REACH_OK_MM, named."""
    info, res, u = job.target_info, job.result, job.unit
    d = []
    for eff, row in info.effectors.items():
        w = job.targets.rows[row]["weight"] > 0
        if eff in info.clamped:    # measured against where the user wants it, not the clamp
            b = job.plan.rig.index(job.mapping.entries[eff])
            r = vector_norm(res.heads[:, b] - info.clamped[eff]) * u * 1000.0
        else:
            r = job.residual[:, row] * u * 1000.0
        d.append(np.where(w, r, np.nan))
        if job.path.names_missed and w.any():
            worst = float(np.nanmax(r[w]))
            if worst > tuning.REACH_OK_MM:
                f.unreachable.append(f"{eff} {worst:.0f} mm away{_reach_reason(job, eff, w)}")
    if d:
        d = np.stack(d, 1)
        if np.isfinite(d).any():
            f.effector_reach_mm = (float(np.nanmean(d)), float(np.nanmax(d)))


def _reach_reason(job, eff, w):
    info = job.target_info
    reach = info.reach.get(eff)
    root = _REACH_ROOTS.get(eff)
    if reach is None or root is None:
        return ""
    b = job.plan.rig.index(job.mapping.entries[root])
    tgt = info.clamped.get(eff, job.targets.rows[info.effectors[eff]]["target"])
    dist = vector_norm(tgt - job.result.heads[:, b])
    far = w & (dist > reach * 0.999)
    if far.any():
        return f" (out of reach of the {root.split('_')[0]} chain on {int(far.sum())} frames)"
    return ""


def _floor_error(job, res):
    """Median height (cm) of the rig's feet over the source's contacts: above its floor, or above the source's feet.

    A rig standing on its floor at rest (a character modelled on the
    ground): its lowest foot point above that floor. A rig whose rest says
    nothing about its floor (a skeleton hanging from its hips, a rest that is
    no standing pose): its ankles and balls of the feet against the
    source's, scaled (``floor_reference`` says which).
    """
    from ..retarget.rigpose import pose_rig
    from .source import rest_is_human
    from .targets import foot_points, rest_floor_gap, stands_at_rest

    info = job.target_info
    if info.contacts is None or not info.contacts.any():
        return float("nan"), "floor"
    fp = foot_points(job.plan, job.up)
    if not fp:
        return float("nan"), "floor"
    standing = rest_is_human(job.plan) and stands_at_rest(job.plan, rest_floor_gap(job.plan, job.object_matrix))
    # (a rig not standing: its ankle and ball, as the source has them)
    points = [(s, p) for s, side in fp.items() for p in side if standing or p[0] in _SOURCE_POINT]
    rig = job.plan.rig
    feet = {p[1] for _s, p in points}
    bones = sorted(feet | {a for b in feet for a in rig.ancestors(b)})
    up_w = job.object_matrix[2, :3]
    src_k = [_K[f"{_SOURCE_POINT[nm]}_{s}"] for s, (nm, *_r) in points] if not standing else None
    low = np.empty(job.n_frames)
    for a, b in frame_chunks(job.n_frames, job.chunk):
        W, X = pose_rig(rig, res.quaternions[a:b], res.locations[a:b], bones=bones, chunk=b - a)
        pts = np.stack([X[:, k] + W[:, k] @ off for _s, (_n, k, off, _h) in points], 1)
        if not standing:
            pts = np.where(job.mask[a:b, src_k, None], pts - job.scale * job.src_m[a:b, src_k], np.nan)
        # (world units above the object's floor, the plane through its origin: where the targets
        # put the rig's floor; a rig placed above the world's origin stands on its own)
        low[a:b] = (pts @ up_w).min(axis=1) if standing else _mean_height_difference(pts, up_w)
    c = info.contacts.any(1) & np.isfinite(low)
    if not c.any():
        return float("nan"), "floor"
    if standing:
        # (above the rig's floor: the sole under its lowest foot point, where the bake put one)
        low -= info.sole * float(np.linalg.norm(up_w))
        return float(np.median(low[c]) * 100.0), "floor"
    return float(np.median(low[c]) * 100.0), "source"


#: The source keypoint of each rig foot point compared with the source's (:func:`_floor_error`).
_SOURCE_POINT = {"ankle": "foot", "ball": "toe"}


def _mean_height_difference(d, up_w):
    """Per frame, the mean height difference (rig less source, ``d`` (T, P, 3); NaN where neither is given)."""
    h = d @ up_w
    finite = np.isfinite(h)
    h = np.where(finite, h, np.nan)
    with np.errstate(invalid="ignore"):
        out = np.nanmean(h, axis=1)
    return np.where(finite.any(1), out, np.nan)


def _knees_backwards(job, heads, ent) -> int:
    """Frames in which a knee of the rig bends backwards and the source's does not (or is unknown).

    Where the source has the foot, both knees are judged against the source's foot direction: the
    rig's foot may pitch otherwise (onto its own flat foot), which says nothing of where its knee points.
    """
    out = np.zeros(job.n_frames, dtype=bool)
    src = job.src_m
    for s in "lr":
        names = [f"thigh_{s}", f"calf_{s}", f"foot_{s}"]
        if not all(n in ent for n in names):
            continue
        fwd_j = f"toe_{s}" if f"toe_{s}" in ent else None
        H, Kn, A = (heads[:, ent[n]] for n in names)
        Fd = (heads[:, ent[fwd_j]] - A) if fwd_j else None
        sk = [_J[n] for n in names]
        kt = _K[f"toe_{s}"]
        sf = src[:, kt] - src[:, sk[2]] if job.mask[:, kt].any() else None
        if sf is not None:
            seen = job.mask[:, kt] & job.mask[:, sk[2]]
            Fd = np.where(seen[:, None], sf, Fd) if Fd is not None else np.where(seen[:, None], sf, 0.0)
        rig_back = knee_bends_backwards(H, Kn, A, Fd, job.up)
        if not rig_back.any() or not job.mask[:, sk].all(axis=1).any():
            out |= rig_back      # (the source's knee unknown: effectors only)
            continue
        src_back = knee_bends_backwards(src[:, sk[0]], src[:, sk[1]], src[:, sk[2]], sf, job.up)
        out |= rig_back & ~src_back
    return int(out.sum())


def knee_bends_backwards(H, Kn, A, F, up, degrees: float | None = None):
    """Frames where a knee at ``Kn`` bends backwards (towards the heel side) by more than ``degrees``.

    Judged against the foot's direction ``F`` across the hip-ankle line;
    frames whose foot lies within :data:`.tuning.FOOT_ALONG_LEG_DEG` of that
    line (or no foot direction at all), or whose knee is folded further than
    :data:`.tuning.KNEE_JUDGED_BEND_DEG`, are never counted. ``degrees``:
    :data:`.tuning.KNEE_BACKWARDS_DEG` by default.
    """
    degrees = tuning.KNEE_BACKWARDS_DEG if degrees is None else degrees
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
    across = nf[..., 0] > np.sin(np.radians(tuning.FOOT_ALONG_LEG_DEG)) * vector_norm(F)
    across &= _knee_bend(H, Kn, A) <= tuning.KNEE_JUDGED_BEND_DEG
    with np.errstate(invalid="ignore", divide="ignore"):
        fwd = fwd / nf
        lk = vector_norm(k)
        s = np.sum(off * fwd, -1) / lk
    return across & (np.nan_to_num(s, nan=0.0) < -np.sin(np.radians(degrees)))


def figure_warnings(f: BakeFigures, sparse: bool) -> list:
    """The warnings a user reads for the figures ``f``; ``sparse``: effectors the user placed are named."""
    out = []
    if np.isfinite(f.floor_error_cm) and abs(f.floor_error_cm) > tuning.FLOOR_WARN_CM:
        what = "float" if f.floor_error_cm > 0 else "sink"
        if f.floor_reference == "source":
            out.append(f"the feet stand {abs(f.floor_error_cm):.1f} cm {'higher' if what == 'float' else 'lower'} "
                       "than the source's (scaled) over the contacts")
        else:
            out.append(f"the feet {what} {abs(f.floor_error_cm):.1f} cm "
                       f"{'above' if what == 'float' else 'below'} the floor over the contacts")
    if sparse and f.unreachable:
        out.append("effectors not reached: " + "; ".join(f.unreachable))
    elif np.isfinite(f.effector_reach_mm[1]) and f.effector_reach_mm[1] > tuning.REACH_WARN_MM and sparse:
        out.append(f"an effector ends {f.effector_reach_mm[1]:.1f} mm from its target")
    if f.knees_backwards:
        out.append(f"a knee bends backwards on {f.knees_backwards} frames")
    if (np.isfinite(f.upright_share) and np.isfinite(f.source_upright_share)
            and f.upright_share < f.source_upright_share - tuning.UPRIGHT_WARN_SHARE):
        out.append(f"upright on {f.upright_share:.0%} of the frames against the source's "
                   f"{f.source_upright_share:.0%}")
    return out


def _knee_bend(H, Kn, A):
    """How far (degrees) each knee is bent from straight: 180 less the angle between thigh and shin."""
    a, b = H - Kn, A - Kn
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.sum(a * b, -1) / (vector_norm(a) * vector_norm(b))
    return 180.0 - np.degrees(np.arccos(np.clip(np.nan_to_num(c, nan=-1.0), -1.0, 1.0)))
