"""Stage 1 of a bake: the source, checked and brought to the bake's frames (no ``bpy``).

:func:`prepare_source` validates canonical keypoints (shape, NaN, the frame
slice, what is required), optionally grounds them, and resamples them (and
the source skeleton's motion, when the source has one) to the bake's rate.
Nothing here is slow: every check runs before the long work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.skeleton import JOINTS, KEYPOINTS
from ..errors import setting
from .options import BakeError

__all__ = ["PreparedSource", "prepare_source", "prepare_keypoints", "check_required", "ground_keypoints",
           "resolve_frames", "REQUIRED_KEYPOINTS", "facing_apart", "FACING_APART_DEGREES", "swapped_sides",
           "swap_sides", "swapped_parts", "SIDE_PARTS"]

#: Keypoints that must be present on every baked frame: only the pelvis; the
#: network infers every other joint (a long gap elsewhere is masked).
REQUIRED_KEYPOINTS: tuple = ("pelvis",)

@dataclass
class PreparedSource:
    """Keypoints ready to bake.

    Attributes
    ----------
    keypoints : ndarray (T, 32, 3)
        World positions (metres, Z up) at ``fps``; NaN = missing.
    mask : ndarray of bool (T, 32)
    fps : float
    source_rig : readers.source_rig.SourceRig or None
        The source skeleton's motion at ``fps`` (same frames).
    warnings : list of str
    first_source_frame : int
    source_frames : int
        Frames of the slice before resampling.
    swapped : str or None
        ``"arms"`` or ``"legs"``: the chain whose left and right the source
        swaps on nearly every frame (:func:`swapped_sides`), for the bake to
        swap back (its keypoints are as read).
    stance_spread : float or None
        How far apart in height (metres) the clip's stances stand
        (:func:`.stances.stance_spread`).
    """

    keypoints: np.ndarray
    mask: np.ndarray
    fps: float
    source_rig: object
    warnings: list
    first_source_frame: int
    source_frames: int
    swapped: str | None = None
    stance_spread: float | None = None


def prepare_keypoints(keypoints, mask):
    """Validate (T, 32, 3) keypoints; returns ``(kp copy with NaN where not valid, valid)``."""
    kp = np.asarray(keypoints, dtype=np.float64)
    if kp.ndim != 3 or kp.shape[1:] != (len(KEYPOINTS), 3):
        raise BakeError(f"keypoints must have shape (frames, {len(KEYPOINTS)}, 3), got {kp.shape}")
    if kp.shape[0] == 0:
        raise BakeError("the keypoint clip has no frames")
    kp = kp.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        valid = np.isfinite(kp).all(-1)
        big = np.abs(np.where(np.isfinite(kp), kp, 0.0)).max(-1) > 1e5
    if big.any():
        t, k = (int(x[0]) for x in np.nonzero(big))
        raise BakeError(f"keypoint {KEYPOINTS[k]!r} on source frame {t} is {np.abs(kp[t, k]).max():.3g} m from the "
                        f"origin: the values are not positions in metres (check the units: {setting('units')})")
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != valid.shape:
            raise BakeError(f"mask must have shape {valid.shape}, got {m.shape}")
        valid &= m
    kp[~valid] = np.nan
    return kp, valid


def resolve_frames(frames, total: int) -> tuple:
    """``(a, b)`` source frames (end exclusive) from ``frames`` with ``None`` ends."""
    if frames is None:
        return 0, total
    a, b = frames
    a = 0 if a is None else int(a)
    b = total if b is None else int(b)
    if not (0 <= a < b <= total):
        raise BakeError(f"frame range {a}:{b} is outside the input (source frames 0:{total})")
    return a, b


def check_required(kp, valid, offset: int, mode: str) -> list:
    """Raise :class:`BakeError` when the keypoints cannot be baked; return warnings."""
    if not valid.any():
        raise BakeError("every keypoint is missing (all NaN) in the chosen frames")
    warnings = []
    for name in REQUIRED_KEYPOINTS:
        k = KEYPOINTS.index(name)
        bad = np.flatnonzero(~valid[:, k])
        if bad.size:
            raise BakeError(f"required keypoint {name!r} is missing on {bad.size} of {len(kp)} frames "
                            f"(first: source frame {int(bad[0]) + offset}); fill the gaps or bake another range")
    if mode == "dense":
        n_joints = valid[:, : len(JOINTS)].sum(1)
        if (n_joints < len(JOINTS) // 2).any():
            raise BakeError("dense mode needs most joints on every frame; use mode 'auto' or 'sparse' "
                            f"({setting('mode')})")
    missing = [(n, int((~valid[:, KEYPOINTS.index(n)]).sum())) for n in ("head", "hand_l", "hand_r", "foot_l",
                                                                         "foot_r")]
    missing = [f"{n} ({c} frames)" for n, c in missing if c]
    if missing:
        warnings.append("missing and inferred by the network: " + ", ".join(missing))
    # a body that is not there: every point at one place
    from ..readers.measure import frame_sides

    spread = frame_sides(kp)
    if np.isfinite(spread).any() and np.nanmax(spread) < 1e-3:
        raise BakeError("every keypoint sits at one point (the body has no size): the clip holds no pose")
    return warnings


#: The angle (degrees) between the hips' and the shoulders' left-to-right lines past which a frame's
#: chest faces away from its hips. A spine turns under 90 degrees (CMU's dancer reaches 122 at a
#: spin's end, the most in 13,243 frames of ../shared/mocap/cmu); a source whose arms' or legs'
#: left and right are swapped (a pose estimator's flip, a mislabelled skeleton) reads near 180
#: (foreign/fair1's hist_5yr_old__skipping: 144-180 on every frame, the only one of 31 clips).
FACING_APART_DEGREES = 140.0


def _facing_warnings(kp, valid, offset: int, swapped) -> list:
    """A warning where the chest faces away from the hips on some frames and no chain is swapped all clip long
    (``swapped``, :func:`swapped_sides`: the bake swaps that one back and says so)."""
    twisted = facing_apart(kp, valid)
    if swapped is not None or not twisted.any():
        return []
    bad = np.flatnonzero(twisted)
    return [f"the chest faces away from the hips (their left-to-right lines over {FACING_APART_DEGREES:g} degrees "
            f"apart) on {bad.size} of {len(kp)} frames (first: source frame {int(bad[0]) + offset}): the source's "
            "left and right of the arms or of the legs may be swapped there, and no body turns so; the bake follows "
            "the points"]


def _side_lines(kp, valid):
    """``(hips, arms, judged)``: the hips' and the shoulders' left-to-right lines (T, 3) and the frames with both
    (upper arms' heads, else the clavicles')."""
    def line(a, b):
        ia, ib = KEYPOINTS.index(a), KEYPOINTS.index(b)
        return kp[:, ia] - kp[:, ib], valid[:, ia] & valid[:, ib]

    hips, hv = line("thigh_l", "thigh_r")
    arms, av = line("upperarm_l", "upperarm_r")
    clav, cv = line("clavicle_l", "clavicle_r")
    arms = np.where(av[:, None], arms, clav)
    with np.errstate(invalid="ignore"):
        n = np.linalg.norm(hips, axis=-1) * np.linalg.norm(arms, axis=-1)
    return np.nan_to_num(hips), np.nan_to_num(arms), hv & (av | cv) & (n > 1e-9)


def facing_apart(kp, valid) -> np.ndarray:
    """Frames (T,) bool on which the shoulders' left-to-right line points over
    :data:`FACING_APART_DEGREES` away from the hips' (thighs' heads; upper arms' heads, else the
    clavicles'); False where a point is missing."""
    return _apart(*_side_lines(kp, valid))


def _apart(hips, arms, ok) -> np.ndarray:
    """Frames (T,) bool of :func:`facing_apart` from :func:`_side_lines`."""
    n = np.linalg.norm(hips, axis=-1) * np.linalg.norm(arms, axis=-1)
    cos = np.einsum("ti,ti->t", hips, arms) / np.where(ok, n, 1.0)
    return ok & (cos < np.cos(np.radians(FACING_APART_DEGREES)))


#: The keypoints of each chain whose left and right a source can swap (``part_l`` and ``part_r``).
SIDE_PARTS = {"arms": ("clavicle", "upperarm", "forearm", "hand", "hand_tip", "thumb"),
              "legs": ("thigh", "calf", "foot", "toe", "toe_tip", "heel")}
#: Share of the frames whose chest faces away from the hips, and of those whose feet point one
#: chain's way, past which the other chain's left and right are swapped all clip long (a
#: mislabelled skeleton, a converter's slip; a pose estimator's flip of a few frames is left as it is).
SWAPPED_SHARE = 0.8


def swapped_sides(kp, valid) -> str | None:
    """``"arms"`` or ``"legs"``: the chain whose left and right the source swaps on nearly every frame.

    The chest faces away from the hips (:func:`facing_apart`) on at least
    :data:`SWAPPED_SHARE` of the frames where both are seen, and on as many
    of those the feet (heel to toe, both sides' sum: which foot is which
    does not matter) point the way the hips face (the arms are swapped) or
    the way the chest faces (the legs are). ``None`` otherwise, and without
    toes: nothing says which.
    """
    hips, arms, ok = _side_lines(kp, valid)
    twisted = _apart(hips, arms, ok)
    if not ok.any() or twisted.sum() < SWAPPED_SHARE * ok.sum():
        return None
    fwd = np.zeros((len(kp), 3))
    seen = twisted.copy()
    for s in "lr":
        a, t = KEYPOINTS.index(f"foot_{s}"), KEYPOINTS.index(f"toe_{s}")
        seen &= valid[:, a] & valid[:, t]
        fwd += np.nan_to_num(kp[:, t] - kp[:, a])
    if not seen.any():
        return None
    up = np.array([0.0, 0.0, 1.0])
    hips_way = np.einsum("ti,ti->t", np.cross(hips, up), fwd)[seen]   # (left x up: the way the hips face)
    if np.mean(hips_way > 0) >= SWAPPED_SHARE:
        return "arms"
    if np.mean(hips_way < 0) >= SWAPPED_SHARE:
        return "legs"
    return None


def swap_sides(kp, chain, parts=None):
    """``kp`` (T, 32, ...) with the left and right keypoints of ``chain`` (:data:`SIDE_PARTS`, or its
    ``parts``) exchanged (a copy)."""
    out = np.array(kp, copy=True)
    for part in SIDE_PARTS[chain] if parts is None else parts:
        a, b = KEYPOINTS.index(f"{part}_l"), KEYPOINTS.index(f"{part}_r")
        out[:, [a, b]] = out[:, [b, a]]
    return out


def swapped_parts(kp, valid, chain) -> tuple:
    """The keypoints of ``chain`` (:func:`swapped_sides`) to swap back: all but the clavicles where their
    heads stand on the hips' sides (the clavicles' channels turned the arms through the body, not their names)."""
    parts = SIDE_PARTS[chain]
    if chain != "arms":
        return parts
    a, b = KEYPOINTS.index("clavicle_l"), KEYPOINTS.index("clavicle_r")
    ia, ib = KEYPOINTS.index("thigh_l"), KEYPOINTS.index("thigh_r")
    ok = valid[:, a] & valid[:, b] & valid[:, ia] & valid[:, ib]
    if not ok.any():
        return parts
    agree = np.einsum("ti,ti->t", kp[ok, a] - kp[ok, b], kp[ok, ia] - kp[ok, ib]) > 0
    return tuple(p for p in parts if p != "clavicle") if np.mean(agree) >= SWAPPED_SHARE else parts


def _stances_apart(spread) -> list:
    """A warning where the clip's stances stand far apart in height (``spread``, :func:`.stances.stance_spread`)."""
    from . import tuning

    if spread is None or spread <= tuning.STANCE_SPREAD_WARN:
        return []
    return [f"where the feet stand, their heights lie {spread * 100.0:.0f} cm apart over the clip (raised ground, "
            "tiptoe, or a markerless capture's height drifting): one floor is kept for the clip, so some stances "
            "go through it or stand above it"]


def ground_keypoints(kp, valid):
    """Shift ``kp`` vertically so its lowest foot point is on the floor (:func:`..readers.measure.floor_height`).

    Returns
    -------
    kp : ndarray (T, 32, 3)
    shift : float or None
        Metres added to every z (``None`` when the source has no foot points).
    """
    from ..readers.measure import floor_height

    floor = floor_height(kp, valid)
    if floor is None:
        return kp, None
    out = kp.copy()
    out[..., 2] -= floor
    return out, -floor


def prepare_source(keypoints, mask, source_fps, options, *, fps=None, source_rig=None) -> PreparedSource:
    """Check, slice, ground and resample a source (the cheap first stage of a bake).

    Parameters
    ----------
    keypoints : array_like (T, 32, 3)
        Canonical keypoints, world metres, Z up; NaN = missing.
    mask : array_like of bool (T, 32) or None
    source_fps : float
    options : BakeOptions
        ``frames``, ``mode`` and ``ground`` apply.
    fps : float, optional
        The bake's rate (default: the source's).
    source_rig : readers.source_rig.SourceRig, optional
        The source's skeleton motion, same frames as ``keypoints``.

    Raises
    ------
    BakeError
    """
    import math

    from .stances import stance_spread

    if not (source_fps and source_fps > 0 and math.isfinite(source_fps)):
        raise BakeError(f"the source frame rate must be positive, got {source_fps}")
    fps = float(source_fps if fps is None else fps)
    kp, valid = prepare_keypoints(keypoints, mask)
    total = kp.shape[0]
    if source_rig is not None and source_rig.num_frames != total:
        raise BakeError(f"the source skeleton has {source_rig.num_frames} frames but the keypoints {total}")
    a, b = resolve_frames(options.frames, total)
    kp, valid = kp[a:b], valid[a:b]
    if source_rig is not None and (a, b) != (0, total):
        source_rig = source_rig.frames(a, b)
    warnings = check_required(kp, valid, a, options.mode)
    swapped = swapped_sides(kp, valid)
    warnings += _facing_warnings(kp, valid, a, swapped)
    if options.ground:
        kp, shift = ground_keypoints(kp, valid)
        if shift is not None:
            if source_rig is not None:
                source_rig = source_rig.translated((0.0, 0.0, shift))
            warnings.append(f"grounded: the motion was moved {shift * 100.0:+.1f} cm vertically "
                            "so that the feet touch the floor")
    spread = stance_spread(kp, valid, source_fps)
    warnings += _stances_apart(spread)
    n = b - a
    if abs(fps - source_fps) > 1e-6 and n >= 2:
        from ..readers import KeypointClip, resample

        clip = resample(KeypointClip(kp, list(KEYPOINTS), float(source_fps), source_rig=source_rig), fps)
        kp, source_rig = clip.positions, clip.source_rig
        warnings.append(f"resampled {n} frames at {source_fps:g} fps to {kp.shape[0]} frames at {fps:g} fps")
    valid = np.isfinite(kp).all(-1)
    return PreparedSource(kp, valid, fps, source_rig, warnings, a, n, swapped, spread)
