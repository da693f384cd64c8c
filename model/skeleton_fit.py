"""A subject's skeleton estimated from keypoints (:func:`fit_skeleton`): bone lengths, canonical directions.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from .features import NUM_JOINTS, NUM_KEYPOINTS
from .skeleton import CANONICAL, END_PARENTS, KEYPOINTS, PARENTS, Skeleton

__all__ = ["fit_skeleton"]


def _canonical_dirs_lengths():
    off = CANONICAL.offsets
    end = CANONICAL.end_offsets
    ln = np.linalg.norm(off, axis=1)
    le = np.linalg.norm(end, axis=1)
    return ln, le


def fit_skeleton(keypoints: np.ndarray, mask: np.ndarray | None = None) -> Skeleton:
    """Estimate a subject skeleton from keypoints.

    Bone lengths are the median over frames of the distance between a
    keypoint and its parent joint where both are given; bones never observed
    take the canonical length times the overall scale, itself the median
    ratio of the observed lengths to the canonical ones or, when no bone is
    observed (sparse effectors only), per body part: the torso from the
    pelvis-to-head distance, the legs from the pelvis-to-foot distances (95th
    percentile over frames, over the canonical ones), the arms from both. Directions are canonical; the root's rest height
    puts the rest pose on the floor.

    Parameters
    ----------
    keypoints : ndarray, shape (T, 32, 3) or (32, 3)
    mask : ndarray, shape (T, 32) bool, optional
        Default: the finite entries.

    Returns
    -------
    Skeleton
    """
    kp = np.asarray(keypoints)
    if kp.dtype not in (np.float32, np.float64):
        kp = kp.astype(np.float64)
    kp = kp.reshape(-1, NUM_KEYPOINTS, 3)
    if mask is None:
        mask = np.isfinite(kp).all(-1)
    mask = np.asarray(mask, dtype=bool).reshape(-1, NUM_KEYPOINTS) & np.isfinite(kp).all(-1)
    ln0, le0 = _canonical_dirs_lengths()
    parent_kp = list(PARENTS[1:]) + list(END_PARENTS)  # parent of keypoints 1..31
    child = np.arange(1, NUM_KEYPOINTS)
    d = np.empty((len(kp), len(child)))  # bone lengths per frame, in chunks (no (T, 31, 3) temporaries)
    for a in range(0, len(kp), 65536):
        c = kp[a:a + 65536].astype(np.float64)
        d[a:a + 65536] = np.linalg.norm(c[:, child] - c[:, parent_kp], axis=-1)
    d[~(mask[:, child] & mask[:, parent_kp])] = np.nan
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(d, axis=0) if len(d) else np.full(len(child), np.nan)
    canon = np.concatenate([ln0[1:], le0])
    ok = np.isfinite(med) & (med > 1e-4)
    if ok.any():
        scale = float(np.median(med[ok] / canon[ok]))
    else:  # effectors only: torso and legs scaled separately, arms by their geometric mean
        scale = _segment_scales(kp, mask)
    lengths = np.where(ok, med, canon * scale)
    dirs_j = CANONICAL.offsets[1:] / ln0[1:, None]
    dirs_e = CANONICAL.end_offsets / le0[:, None]
    off = np.zeros((NUM_JOINTS, 3))
    off[1:] = dirs_j * lengths[: NUM_JOINTS - 1, None]
    end = dirs_e * lengths[NUM_JOINTS - 1:, None]
    sk = Skeleton(off, end)
    rest = sk.rest_keypoints()  # root at the origin
    feet = [KEYPOINTS.index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    off[0] = [0.0, 0.0, -rest[feet, 2].min()]
    return Skeleton(off, end)


_SEGMENT = None


def _segment_of_keypoints():
    """0 = torso/head, 1 = legs, 2 = arms, for keypoints 1..31 (the bone ending there)."""
    out = []
    for name in KEYPOINTS[1:]:
        if name.startswith(("calf", "foot", "toe", "heel")):
            out.append(1)
        elif name.startswith(("clavicle", "upperarm", "forearm", "hand", "thumb")):
            out.append(2)
        else:
            out.append(0)
    return np.array(out)


def _segment_scales(kp, mask) -> np.ndarray:
    """Per-bone scale (31,) from effector distances when no bone is observed.

    Torso: 95th percentile over frames of the pelvis-head distance over the
    canonical one; legs: the same for pelvis-foot (legs are straight at some
    point of most motions); arms: the geometric mean of both. Missing
    measurements fall back to the other one, or to 1.
    """
    global _SEGMENT
    if _SEGMENT is None:
        _SEGMENT = _segment_of_keypoints()
    rest = CANONICAL.rest_keypoints()
    pel, head = KEYPOINTS.index("pelvis"), KEYPOINTS.index("head")

    def ratio(pairs):
        vals = []
        for a, b in pairs:
            ok = mask[:, a] & mask[:, b]
            if ok.any():
                dist = np.linalg.norm(kp[ok, a] - kp[ok, b], axis=-1)
                vals.append(np.percentile(dist, 95) / np.linalg.norm(rest[a] - rest[b]))
        return float(np.mean(vals)) if vals else None

    torso = ratio([(pel, head)])
    legs = ratio([(pel, KEYPOINTS.index(f)) for f in ("foot_l", "foot_r")])
    torso = torso if torso is not None else (legs if legs is not None else 1.0)
    legs = legs if legs is not None else torso
    arms = float(np.sqrt(torso * legs))
    return np.array([torso, legs, arms])[_SEGMENT]
