"""Training motion: BVH clips mapped onto the canonical skeleton.

:func:`load_clips` reads every BVH under a folder (by default
``../shared/mocap/cmu`` next to the repository), maps each clip onto the
canonical skeleton of :mod:`.skeleton` using a joint-map data file
(``training/joint_maps/cmu_cc_base.json``), resamples it and caches the result
under ``<repo>/.cache/``.

Conversion, step by step
------------------------
1. **Read** the BVH (:mod:`.bvh`). Axes: the source is Y up in centimetres
   with the character facing +Z and its left side at +X. The world
   conversion is ``p_z = 0.01 * A @ p_bvh`` with ``A`` = +90 deg about X
   (``(x, y, z) -> (x, -z, y)``): up becomes +Z, forward becomes -Y, left stays
   +X. The heading is *checked* on the calibration T-pose (left hip/shoulder
   direction must come out along +X; otherwise the quarter turn about Z that
   fixes it is applied and logged).
2. **Root quirk**: files rooted at ``CC_Base_Hip`` store the root position
   channels as offsets to add to the OFFSET, files rooted at ``RL_BoneRoot``
   store them the standard way. Each clip is read the standard way and the
   interpretation whose feet are near the floor is kept (1st percentile over
   frames of the lowest foot/toe joint must lie in [-10, 25] cm; otherwise
   :class:`DatasetError`).
3. **Leading T-pose**: while frame 0 has the hands more than 1.2 m apart and
   some joint jumps more than 0.2 m to the next frame, frame 0 is dropped.
4. **Rotations**: the CC rig's zero pose is not a human pose (its joint
   frames carry orients; bones run along each joint's local +Y). For each
   canonical joint ``j`` with CC world rotation ``W_j(t)`` (already in Z-up
   world axes) a constant correction ``C_j`` gives the canonical world
   rotation ``G_j(t) = W_j(t) @ C_j``:

   - ``b_j`` = direction, in the CC joint's own frame, from the joint to the
     CC point that plays the canonical bone tail (``skeleton.BONE_CHILD``;
     median over the clip's frames, the rig being rigid),
   - ``d_j`` = the canonical rest bone direction (``REST_OFFSETS`` of the
     child, or ``END_OFFSETS`` for head/hand/toe tips),
   - the twist is fixed by a **reference T-pose**: the leading T-pose frame
     that the conversion prepended to some files (subject 7), in which every
     canonical frame should be world aligned. With ``W_ref`` its world
     rotation, ``C_j = R(W_ref^T d_j -> b_j) @ W_ref^T``, i.e. the rotation
     closest to ``W_ref^T`` that maps ``d_j`` onto ``b_j``. So in the
     reference T-pose ``G_j`` is the identity up to the (small) swing that
     aligns the canonical bone with the real one, with no twist.
   - A per-frame swing ``R(G_j d_j -> actual bone direction)`` is then
     applied; it is the identity up to round-off for rigid bones and absorbs
     the motion of folded joints (``NeckTwist02`` inside ``neck``).

   Local rotations: ``L_0 = G_pelvis``, ``L_j = G_parent^T G_j``.
5. **Subject skeleton**: offset of each joint from its parent =
   median over frames of ``G_parent^T (x_child - x_parent)``. For the bone
   that defines the parent's direction this is ``length * d`` exactly (the
   canonical direction, measured length); for side branches (thighs from
   the pelvis, clavicles from spine3, end points) it is the measured vector,
   which reproduces the data instead of forcing the canonical direction.
   The root rest offset is set so that the lowest heel / toe tip of the rest
   pose sits at z = 0.
6. **End points** (see the joint-map file): head_top along the CC Head bone
   axis at twice the eye height above the head joint; nose = eye midpoint
   3 cm forward and 4 cm down (head frame); hand tips = ``Mid3 + 0.8 (Mid3 -
   Mid2)``; thumbs = ``Thumb2``; toe tips = ``ToeBase + 2 (MidToe1 -
   ToeBase)``; heels computed in the foot frame, behind the ankle by 0.35 of
   the ankle-to-ball horizontal distance and 1.5 cm below the ball.
7. **Check**: ``keypoints_from_fk_np(L, root, skeleton)`` is compared with
   the data's world positions of the 22 joints and the world-defined end
   points on every clip (``clip.meta["recon_mm_mean"/"recon_mm_max"]``);
   the floor (``clip.meta["floor_m"]``) too.
8. **Resample** to ``fps`` (slerp for rotations, linear for the root).

No ``bpy`` here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neural_ik.model import skeleton as sk
from neural_ik.model.bvh import BVHData, read_bvh
from neural_ik.model.rotations_np import axis_rotation, resample_rotations, rotation_between
from neural_ik.model.skeleton import Skeleton, keypoints_from_fk_np

__all__ = [
    "Clip",
    "DatasetError",
    "load_clips",
    "split_by_subject",
    "load_joint_map",
    "convert_bvh",
    "find_reference",
    "default_root",
    "CODE_VERSION",
]

log = logging.getLogger(__name__)

#: Bump when the conversion changes: invalidates the cache.
CODE_VERSION = "cmu-cc-1"

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JOINT_MAP = Path(__file__).resolve().parent / "joint_maps" / "cmu_cc_base.json"

#: Floor check: 1st percentile of the per-frame lowest foot joint height (m).
FLOOR_RANGE = (-0.10, 0.25)
#: Leading T-pose: hands further apart than this (m) ...
TPOSE_HAND_DIST = 1.2
#: ... and a jump larger than this (m) to the next frame.
TPOSE_JUMP = 0.2


class DatasetError(ValueError):
    """A clip that cannot be converted (floor, T-pose reference, missing joints)."""


def default_root() -> Path:
    """``../shared/mocap/cmu`` relative to the package (repository) root."""
    return (PACKAGE_ROOT / ".." / "shared" / "mocap" / "cmu").resolve()


@dataclass
class Clip:
    """One motion clip on the canonical skeleton.

    Attributes
    ----------
    name : str
        File stem, e.g. ``"006_03"``.
    subject : int
        Subject number (from the name's prefix).
    fps : float
        Frame rate.
    local_rot : ndarray, shape (T, 22, 3, 3), float32
        Canonical local rotations (row 0 is the root's world orientation).
    root_pos : ndarray, shape (T, 3), float32
        Root (pelvis) world position, metres, Z up, floor at z = 0.
    skeleton : Skeleton
        The subject's bone offsets (22, 3) and end offsets (10, 3).
    source : str
        Path of the BVH file.
    meta : dict
        Diagnostics: ``recon_mm_mean``, ``recon_mm_max`` (joints),
        ``recon_end_mm_mean``, ``recon_end_mm_max`` (end points),
        ``floor_m``, ``dropped_tpose``, ``root_mode``, ``source_fps``,
        ``source_frames``.
    """

    name: str
    subject: int
    fps: float
    local_rot: np.ndarray
    root_pos: np.ndarray
    skeleton: Skeleton
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.local_rot.shape[0])

    @property
    def num_frames(self) -> int:
        return len(self)

    def keypoints(self) -> np.ndarray:
        """World keypoints (T, 32, 3) float32 via ``keypoints_from_fk_np``."""
        return keypoints_from_fk_np(self.local_rot, self.root_pos, self.skeleton).astype(np.float32)


# ----------------------------------------------------------------------------- joint map


def load_joint_map(path=None) -> dict:
    """Read a joint-map JSON file (default ``training/joint_maps/cmu_cc_base.json``).

    Raises
    ------
    DatasetError
        When a canonical joint or end point is missing from the map.
    """
    path = Path(path) if path is not None else DEFAULT_JOINT_MAP
    with open(path, "r", encoding="utf-8") as fh:
        jmap = json.load(fh)
    missing = [n for n in sk.JOINTS if n not in jmap.get("joints", {})]
    missing += [n for n in sk.END_POINTS if n not in jmap.get("end_points", {})]
    if missing:
        raise DatasetError(f"{path}: joint map lacks {', '.join(missing)}")
    jmap["_path"] = str(path)
    return jmap


def _source_axes(jmap) -> np.ndarray:
    """Matrix taking source axes to Z-up / -Y-forward / +X-left (before the heading check)."""
    up = jmap.get("source", {}).get("up_axis", "Y").upper()
    if up == "Y":
        return axis_rotation(0, np.pi / 2)  # (x, y, z) -> (x, -z, y)
    if up == "Z":
        return np.eye(3)
    raise DatasetError(f"unsupported up axis {up!r}")


# ----------------------------------------------------------------------------- raw stage


@dataclass
class _Raw:
    """CC data resampled onto canonical joints, Z-up metres, before calibration."""

    pos: np.ndarray  # (T, 22, 3) joint world positions
    rot: np.ndarray  # (T, 22, 3, 3) CC world rotations (Z-up world)
    pts: dict  # name -> (T, 3) auxiliary world points (eyes, finger and toe points)
    root_mode: str
    floor: float
    dropped: int
    fps: float
    frames: int


def _index(data: BVHData, name: str) -> int:
    try:
        return data.names.index(name)
    except ValueError:
        raise DatasetError(f"{data.path}: joint {name!r} (needed by the joint map) not in the file") from None


def _raw_from_bvh(data: BVHData, jmap: dict, axes: np.ndarray) -> _Raw:
    scale = float(jmap.get("source", {}).get("units_to_metres", 0.01))
    wr, wp = data.world()
    cc = [jmap["joints"][n]["joint"] for n in sk.JOINTS]
    idx = np.array([_index(data, n) for n in cc])
    for n in sk.JOINTS:
        for m in jmap["joints"][n].get("merged", []):
            _index(data, m)
    # root quirk: choose replace / add by the floor height
    foot_ids = [sk.JOINTS.index(n) for n in ("foot_l", "foot_r", "toe_l", "toe_r")]
    pos = scale * np.einsum("ij,tkj->tki", axes, wp[:, idx])
    candidates = [("replace", np.zeros(3))]
    root = int(idx[0])
    while data.parents[root] >= 0:
        root = int(data.parents[root])
    has_pos = any(c.endswith("position") for c in data.channels[root])
    if has_pos and data.position_mode == "replace":
        # add mode = every joint under that root moves by the root OFFSET
        candidates.append(("add", scale * axes @ data.offsets[root]))
    floors = []
    for mode, shift in candidates:
        low = (pos[:, foot_ids, 2] + shift[2]).min(axis=1)
        floors.append(float(np.percentile(low, 1)))
    ok = [i for i, f in enumerate(floors) if FLOOR_RANGE[0] <= f <= FLOOR_RANGE[1]]
    if not ok:
        raise DatasetError(
            f"{data.path}: feet not near the floor in any root interpretation "
            + ", ".join(f"{m}: {f:.3f} m" for (m, _), f in zip(candidates, floors))
        )
    best = min(ok, key=lambda i: abs(floors[i] - 0.05))
    mode, shift = candidates[best]
    pos = pos + shift
    rot = np.einsum("ij,tkjl->tkil", axes, wr[:, idx])
    names = set()
    for e in jmap["end_points"].values():
        for key in ("joint", "from", "to"):
            if key in e:
                names.add(e[key])
        names.update(e.get("eyes", []))
    pts = {}
    for n in sorted(names):
        pts[n] = scale * np.einsum("ij,tj->ti", axes, wp[:, _index(data, n)]) + shift
    # leading T-pose
    hl, hr = sk.JOINTS.index("hand_l"), sk.JOINTS.index("hand_r")
    drop = 0
    T = pos.shape[0]
    while drop < T - 1:
        hands = np.linalg.norm(pos[drop, hl] - pos[drop, hr])
        jump = np.abs(pos[drop + 1] - pos[drop]).max()
        if hands > TPOSE_HAND_DIST and jump > TPOSE_JUMP:
            drop += 1
        else:
            break
    raw = _Raw(pos, rot, pts, mode, floors[best], drop, data.fps, T)
    return raw


def _slice(raw: _Raw, sl) -> _Raw:
    return _Raw(raw.pos[sl], raw.rot[sl], {k: v[sl] for k, v in raw.pts.items()}, raw.root_mode, raw.floor,
                raw.dropped, raw.fps, raw.frames)


# ----------------------------------------------------------------------------- geometry


def _canonical_dirs() -> np.ndarray:
    """Canonical rest bone direction of each joint (unit, (22, 3))."""
    rest = sk.CANONICAL.rest_keypoints()
    d = rest[list(sk.BONE_CHILD)] - rest[: len(sk.JOINTS)]
    return d / np.linalg.norm(d, axis=-1, keepdims=True)


def _end_points_world(raw: _Raw, jmap: dict) -> dict:
    """World positions (T, 3) of the end points defined by CC joints (not the computed heels)."""
    out = {}
    J = sk.JOINTS
    for name, e in jmap["end_points"].items():
        kind = e["kind"]
        if kind == "joint":
            out[name] = raw.pts[e["joint"]]
        elif kind == "extrapolate":
            a, b = raw.pts[e["from"]], raw.pts[e["to"]]
            out[name] = b + float(e["factor"]) * (b - a)
        elif kind == "head_top":
            h = J.index("head")
            ax = np.einsum("tij,j->ti", raw.rot[:, h], np.asarray(e["bone_axis"], float))
            eyes = 0.5 * (raw.pts[e["eyes"][0]] + raw.pts[e["eyes"][1]])
            height = np.median(np.sum((eyes - raw.pos[:, h]) * ax, axis=-1))
            out[name] = raw.pos[:, h] + float(e["factor"]) * height * ax
        elif kind in ("eyes_offset", "heel"):
            continue  # defined in a canonical frame: see _convert_raw
        else:
            raise DatasetError(f"{jmap.get('_path')}: unknown end point kind {kind!r} for {name}")
    return out


def _tails(raw: _Raw, ends: dict) -> np.ndarray:
    """World position of each canonical joint's bone tail (T, 22, 3)."""
    cols = []
    nj = len(sk.JOINTS)
    for j, c in enumerate(sk.BONE_CHILD):
        cols.append(raw.pos[:, c] if c < nj else ends[sk.KEYPOINTS[c]])
    return np.stack(cols, axis=1)


def _heading_fix(ref_pos: np.ndarray) -> np.ndarray:
    """Quarter turn about Z making the reference pose's left side point along +X."""
    J = sk.JOINTS
    left = (ref_pos[J.index("thigh_l")] - ref_pos[J.index("thigh_r")]) + (
        ref_pos[J.index("upperarm_l")] - ref_pos[J.index("upperarm_r")]
    )
    ang = np.arctan2(left[1], left[0])
    k = int(np.round(ang / (np.pi / 2)))
    if k % 4:
        log.warning("source heading off by %d quarter turns: correcting", k)
    return axis_rotation(2, -k * np.pi / 2)


@dataclass
class Reference:
    """Calibration T-pose: CC world rotations (22, 3, 3) and positions (22, 3), Z up."""

    rot: np.ndarray
    pos: np.ndarray
    source: str


def _convert_raw(raw: _Raw, ref: Reference, jmap: dict):
    """Calibrated canonical motion from the raw stage.

    Returns
    -------
    local : (T, 22, 3, 3) float64
    root : (T, 3)
    skel : Skeleton
    target : (T, 32, 3) data keypoints for the check (heels from the foot frame)
    """
    J = sk.JOINTS
    nj = len(J)
    d = _canonical_dirs()
    ends = _end_points_world(raw, jmap)
    tails = _tails(raw, ends)  # (T, 22, 3)
    vec = tails - raw.pos
    # bone direction in the CC joint frame (median over frames)
    b = np.median(np.einsum("tkji,tkj->tki", raw.rot, vec), axis=0)
    b /= np.linalg.norm(b, axis=-1, keepdims=True)
    q0 = np.swapaxes(ref.rot, -1, -2)  # W_ref^T
    C = rotation_between(np.einsum("kij,kj->ki", q0, d), b) @ q0  # (22, 3, 3)
    G = raw.rot @ C
    # per-frame swing onto the actual bone (identity for rigid bones)
    g = np.einsum("tkij,kj->tki", G, d)
    G = rotation_between(g, vec) @ G
    # subject skeleton
    offsets = np.zeros((nj, 3))
    for j in range(1, nj):
        p = sk.PARENTS[j]
        rel = np.einsum("tji,tj->ti", G[:, p], raw.pos[:, j] - raw.pos[:, p])
        offsets[j] = np.median(rel, axis=0)
    end_off = np.zeros((len(sk.END_POINTS), 3))
    for k, name in enumerate(sk.END_POINTS):
        e = jmap["end_points"][name]
        p = sk.END_PARENTS[k]
        if name in ends:
            rel = np.einsum("tji,tj->ti", G[:, p], ends[name] - raw.pos[:, p])
            end_off[k] = np.median(rel, axis=0)
        elif e["kind"] == "eyes_offset":
            eyes = 0.5 * (raw.pts[e["eyes"][0]] + raw.pts[e["eyes"][1]])
            rel = np.einsum("tji,tj->ti", G[:, p], eyes - raw.pos[:, p])
            end_off[k] = np.median(rel, axis=0) + np.asarray(e["offset_m"], float)
    for k, name in enumerate(sk.END_POINTS):
        e = jmap["end_points"][name]
        if e["kind"] == "heel":
            toe = offsets[J.index(e["toe"])]
            back = float(e["back"]) * float(np.hypot(toe[0], toe[1]))
            end_off[k] = (0.0, back, toe[2] - float(e["below_toe_m"]))
    skel = Skeleton(offsets, end_off)
    rest = keypoints_from_fk_np(np.broadcast_to(np.eye(3), (nj, 3, 3)), np.zeros(3), skel)
    low = min(rest[sk.KEYPOINTS.index(n), 2] for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r"))
    skel.offsets[0] = (0.0, 0.0, -low)
    # local rotations
    local = np.empty_like(G)
    local[:, 0] = G[:, 0]
    par = np.array(sk.PARENTS[1:])
    local[:, 1:] = np.swapaxes(G[:, par], -1, -2) @ G[:, 1:]
    root = raw.pos[:, 0].copy()
    # data keypoints for the check
    target = np.empty((raw.pos.shape[0], len(sk.KEYPOINTS), 3))
    target[:, :nj] = raw.pos
    for k, name in enumerate(sk.END_POINTS):
        p = sk.END_PARENTS[k]
        if name in ends:
            target[:, nj + k] = ends[name]
        else:  # defined in a canonical frame: the FK value by construction
            target[:, nj + k] = raw.pos[:, p] + np.einsum("tij,j->ti", G[:, p], end_off[k])
    return local, root, skel, target


def reconstruction_error_mm(local, root, skel, target) -> dict:
    """Per-clip FK check: joints and end points (mm)."""
    kp = keypoints_from_fk_np(local, root, skel)
    err = np.linalg.norm(kp - target, axis=-1) * 1000.0
    nj = len(sk.JOINTS)
    return {
        "recon_mm_mean": float(err[:, :nj].mean()),
        "recon_mm_max": float(err[:, :nj].max()),
        "recon_end_mm_mean": float(err[:, nj:].mean()),
        "recon_end_mm_max": float(err[:, nj:].max()),
    }


# ----------------------------------------------------------------------------- public conversion


def find_reference(files, jmap=None, cache_dir=None) -> Reference:
    """The calibration T-pose: the first dropped leading T-pose frame found in ``files``.

    Files are scanned in reverse-sorted order (the subject-7 files that carry
    one come last alphabetically). The result is cached under ``cache_dir``.

    Raises
    ------
    DatasetError
        When no file has a leading T-pose frame.
    """
    jmap = jmap or load_joint_map()
    files = sorted((Path(f) for f in files), reverse=True)
    key = None
    if cache_dir is not None:
        h = hashlib.sha1(CODE_VERSION.encode())
        h.update(json.dumps({k: v for k, v in jmap.items() if k != "_path"}, sort_keys=True).encode())
        for f in files:
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
        key = Path(cache_dir) / f"reference_{h.hexdigest()[:16]}.npz"
        if key.exists():
            z = np.load(key, allow_pickle=False)
            return Reference(z["rot"], z["pos"], str(z["source"]))
    axes = _source_axes(jmap)
    for f in files:
        raw = _raw_from_bvh(read_bvh(f), jmap, axes)
        if raw.dropped:
            ref = Reference(raw.rot[0].copy(), raw.pos[0].copy(), str(f))
            if key is not None:
                key.parent.mkdir(parents=True, exist_ok=True)
                np.savez(key, rot=ref.rot, pos=ref.pos, source=ref.source)
            return ref
    raise DatasetError("no file with a leading T-pose frame to calibrate the joint frames against")


def convert_bvh(path, reference: Reference, jmap=None, fps: float | None = 30.0, data: BVHData | None = None) -> Clip:
    """Convert one BVH file into a :class:`Clip` (see the module docstring).

    Parameters
    ----------
    path : str or Path
    reference : Reference
        Calibration T-pose (:func:`find_reference`).
    jmap : dict, optional
        Joint map (:func:`load_joint_map`).
    fps : float or None
        Output frame rate; ``None`` keeps the source rate.
    data : BVHData, optional
        Already parsed file.
    """
    jmap = jmap or load_joint_map()
    path = Path(path)
    data = data if data is not None else read_bvh(path)
    axes = _source_axes(jmap)
    heading = _heading_fix(reference.pos)
    raw = _raw_from_bvh(data, jmap, heading @ axes)
    ref = reference
    if not np.allclose(heading, np.eye(3)):
        ref = Reference(heading @ reference.rot, reference.pos @ heading.T, reference.source)
    dropped = raw.dropped
    raw = _slice(raw, slice(dropped, None))
    local, root, skel, target = _convert_raw(raw, ref, jmap)
    meta = reconstruction_error_mm(local, root, skel, target)
    foot_kp = [sk.KEYPOINTS.index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    meta.update(
        floor_m=float(np.percentile(target[:, foot_kp, 2].min(axis=1), 1)),
        dropped_tpose=int(dropped),
        root_mode=raw.root_mode,
        source_fps=float(raw.fps),
        source_frames=int(data.num_frames),
    )
    src_fps = raw.fps
    if fps is not None and abs(fps - src_fps) > 1e-6 * src_fps and local.shape[0] > 1:
        t_src = np.arange(local.shape[0]) / src_fps
        n_out = int(np.floor(t_src[-1] * fps + 1e-6)) + 1
        t_dst = np.arange(n_out) / fps
        local = resample_rotations(local, t_src, t_dst)
        root = np.stack([np.interp(t_dst, t_src, root[:, i]) for i in range(3)], axis=-1)
        out_fps = float(fps)
    else:
        out_fps = float(src_fps)
    name = path.stem
    try:
        subject = int(name.split("_")[0])
    except ValueError:
        subject = -1
    return Clip(name, subject, out_fps, local.astype(np.float32), root.astype(np.float32), skel, str(path), meta)


# ----------------------------------------------------------------------------- loading + cache


def _cache_dir() -> Path:
    return PACKAGE_ROOT / ".cache" / "clips"


def _clip_key(path: Path, fps, ref: Reference, jmap: dict) -> str:
    st = path.stat()
    h = hashlib.sha1()
    h.update(f"{CODE_VERSION}|{path.name}|{st.st_size}|{st.st_mtime_ns}|{fps}".encode())
    h.update(json.dumps({k: v for k, v in jmap.items() if k != "_path"}, sort_keys=True).encode())
    h.update(np.ascontiguousarray(ref.rot).tobytes())
    return h.hexdigest()[:20]


def _save_clip(fn: Path, clip: Clip) -> None:
    fn.parent.mkdir(parents=True, exist_ok=True)
    tmp = fn.with_suffix(".tmp.npz")
    np.savez(
        tmp, local_rot=clip.local_rot, root_pos=clip.root_pos, offsets=clip.skeleton.offsets,
        end_offsets=clip.skeleton.end_offsets, fps=clip.fps, subject=clip.subject,
        meta=json.dumps(clip.meta),
    )
    os.replace(tmp, fn)


def _load_clip(fn: Path, name: str, source: str) -> Clip:
    z = np.load(fn, allow_pickle=False)
    return Clip(name, int(z["subject"]), float(z["fps"]), z["local_rot"], z["root_pos"],
                Skeleton(z["offsets"].copy(), z["end_offsets"].copy()), source, json.loads(str(z["meta"])))


def load_clips(root=None, fps=30.0, subjects=None, progress=True, cache=True, joint_map=None, skip_bad=False,
               log=None) -> list:
    """Load every BVH under ``root`` as canonical :class:`Clip` objects.

    Parameters
    ----------
    root : str or Path, optional
        Folder of BVH files (searched recursively); default :func:`default_root`.
    fps : float or None
        Output frame rate (``None``: keep the source rate).
    subjects : iterable of int, optional
        Only these subjects (file names ``SSS_TT.bvh``).
    progress : bool
        Print a progress line on stderr.
    cache : bool
        Use / fill ``<repo>/.cache/clips`` (keyed by file size, mtime, fps,
        joint map, calibration and :data:`CODE_VERSION`).
    joint_map : str or Path, optional
        Joint-map file (default ``training/joint_maps/cmu_cc_base.json``).
    skip_bad : bool
        Skip a clip that cannot be read or converted, with a message naming
        the file (to ``log``, default stderr), instead of raising.
    log : callable, optional
        Receives the messages of skipped clips.

    Returns
    -------
    list of Clip
        Sorted by name.

    Raises
    ------
    FileNotFoundError
        When ``root`` does not exist or holds no BVH file.
    DatasetError, BVHError
        On a clip that cannot be read or converted.
    """
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        raise FileNotFoundError(f"motion folder not found: {root}")
    files = sorted(root.rglob("*.bvh"), key=lambda p: p.name)
    if not files:
        raise FileNotFoundError(f"no .bvh files under {root}")
    jmap = load_joint_map(joint_map)
    want = None if subjects is None else {int(s) for s in subjects}
    chosen = []
    for f in files:
        try:
            subj = int(f.stem.split("_")[0])
        except ValueError:
            subj = -1
        if want is None or subj in want:
            chosen.append(f)
    t0 = time.time()
    cdir = _cache_dir() if cache else None
    ref = find_reference(files, jmap, cdir)
    clips = []
    hits = 0
    for i, f in enumerate(chosen):
        if progress:
            sys.stderr.write(f"\rloading clips {i + 1}/{len(chosen)} {f.stem} ")
            sys.stderr.flush()
        fn = None
        if cdir is not None:
            fn = cdir / f"{f.stem}_{_clip_key(f, fps, ref, jmap)}.npz"
            if fn.exists():
                try:
                    clips.append(_load_clip(fn, f.stem, str(f)))
                    hits += 1
                    continue
                except Exception:  # corrupt cache entry: rebuild
                    pass
        try:
            clip = convert_bvh(f, ref, jmap, fps)
            if not (FLOOR_RANGE[0] <= clip.meta["floor_m"] <= FLOOR_RANGE[1]):
                raise DatasetError(f"{f}: floor check failed ({clip.meta['floor_m']:.3f} m)")
        except Exception as ex:
            if not skip_bad:
                raise
            (log or (lambda s: print(s, file=sys.stderr)))(f"skipping {f}: {type(ex).__name__}: {ex}")
            continue
        if clip.meta["recon_mm_max"] > 10.0:
            log.warning("%s: reconstruction max error %.1f mm", f.name, clip.meta["recon_mm_max"])
        if fn is not None:
            _save_clip(fn, clip)
        clips.append(clip)
    if progress:
        n = sum(len(c) for c in clips)
        sys.stderr.write(
            f"\rloaded {len(clips)} clips, {n} frames at {fps} fps in {time.time() - t0:.1f} s"
            f" ({hits} cached)\n"
        )
        sys.stderr.flush()
    return clips


def split_by_subject(clips, holdout=(6,)):
    """Split clips into (train, held out) by subject number.

    Parameters
    ----------
    clips : list of Clip
    holdout : iterable of int
        Subjects held out.

    Returns
    -------
    tuple of (list of Clip, list of Clip)
    """
    hold = {int(s) for s in holdout}
    train = [c for c in clips if c.subject not in hold]
    test = [c for c in clips if c.subject in hold]
    return train, test
