"""Issue 9's validation: mocap from other studios and skeletons baked by Neural IK and by Blender.

Every clip of ``../shared/mocap/foreign/`` (31 clips, 6 conventions), cut to
``--max-frames`` frames (default 300 per clip; the output says so), is baked

- onto **its own skeleton**: the same BVH imported by Blender as the target
  armature (``own``: Blender's bones along the limbs with their rolls, i.e.
  joint orients), and a copy of that skeleton whose bones all point along
  world +Y with no roll (``world``: the convention without joint orients);
- onto **Rigify's human meta-rig** (``rigify``),

in the **dense** mode (every keypoint) and the **sparse** mode (six effectors:
pelvis, head, hands, feet), by Neural IK (the CLI's ``read_source`` +
``bake_one``, the same calls ``neural-ik bake`` makes) and by Blender's own
constraint bake (:mod:`blender_baseline`: pole-target IK and rotation copies,
or IK chains on the six effectors; ``nla.bake``), the reference rows.

Everything is measured on the baked Blender armature (bones' world matrices
read after ``frame_set``) against the source as Blender's importer reads it
(for ``rigify``: the source scaled by the ratio of the rest hip heights with
its floor on the rig's, the placement :mod:`blender_baseline` gives Blender's bake).
Per folder a table (frame-weighted means over clips):

- **joint mm**: mean distance of the body's joints (the paths from the root
  to the head, hands and toes; fingers and eyes left out) to the reference
  at the rig's scale (own / world); the 14 limb, pelvis and head joints on
  ``rigify`` (proportions differ there: not zero for a perfect retarget);
- **rot deg all / child**: own and world: the angle between the baked and
  the source's local rotations (each bone's rotation from rest relative to
  its parent's, so independent of the bones' rest frames), over the body's
  joints and over those with a child in the body;
- **reach mm** (sparse): distance of the pelvis, head, wrists and ankles to
  their targets, and the largest (**reach max**); on ``rigify`` to the
  source's effectors moved and scaled as one (the clip's best scale and
  shift: how the bake sizes another body is its own choice, a shape it does
  not keep is a miss);
- **floor cm**: the lowest foot point (heads and tails of the foot bones and
  their children) over the frames where a foot of the source stands (an
  ankle or toe within 3 cm of its low and under 0.25 m/s, as the bake's own
  contacts; the skate figure's contacts are looser), against the floor
  (signed: + floats, - sinks): on ``rigify`` its floor, the rest's lowest
  foot point; on its own skeleton (whose rest hangs from its hips and says
  nothing of its sole) where the source's feet stand over those frames, so
  that the ``source`` row reads 0 and a baked row how far its feet stand
  off the source's;
- **upright %**: share of frames with the head within 45 degrees of straight
  above the pelvis; **knees back**: leg-frames whose knee bends backwards
  (more than 2% of the leg's length behind the hip-ankle line, against the
  source's foot direction, as the bake's own figure; knees folded more than
  120 degrees are not judged); **knees own**: the same against the rig's own
  feet (a knee seen bent backwards; six effectors give no foot heading, so
  a leg turned along a foot heading off the source's counts in *knees back*
  only);
- **jitter mm/f^2**: mean second difference of the joints per frame;
  **skate mm/f**: horizontal movement per frame of the ankles and toe tips on
  the source's contact frames (both rows on the same frames).

A ``source`` row gives the reference's own figures. Clips the reader refuses
(or a bake fails on) are listed as ``refused: <message>`` rows.

    .venv/bin/python benchmarks/bench_foreign.py [--folders fair1,sfu] [--max-frames 300] [--clips-per-folder N]
        [--targets own,world,rigify] [--modes dense,sparse] [--no-blender] [--no-hints] [--quick] [--keypoints]
        [--json PATH]

``--keypoints`` adds a method, ``keypoints``: Neural IK given the clip's joint
positions alone, its skeleton's rotations withheld, so the network is the
start pose and the prior (what a bake from video keypoints or markers gets).

``--quick``: one clip per folder, 200 frames each (a few minutes). Twelve bakes
per clip (3 targets x 2 modes x 2 methods, less the ``n/a`` ones).

``--no-hints``: the CLI guesses units and up axis itself (by default it gets
the folder's units and up axis as flags, as Blender's importer gets them).
The cut clips go to a temporary folder, deleted at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import blender_baseline as bb  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_ROOT = os.path.normpath(os.path.join(REPO, "..", "shared", "mocap", "foreign"))
LIMB_KEYS = ("pelvis", "head") + tuple(k + s for k in ("upperarm_", "forearm_", "hand_", "thigh_", "calf_", "foot_")
                                       for s in "lr")
EFFECTOR_KEYS = ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")
#: Contact thresholds (source metres / per second): near the floor and slow.
CONTACT_HEIGHT = 0.05
CONTACT_SPEED = 0.5
#: ... and where a foot stands (the floor figure): as the bake's own contacts, nearer and slower.
STAND_HEIGHT = 0.03
STAND_SPEED = 0.25
UPRIGHT_DEG = 45.0
KNEE_BACK = 0.02
#: ... judged only where the foot is at least this far (degrees) from the hip-ankle line:
#: a foot pointed along the shin gives no front (the bakes' own figure does the same).
FOOT_ALONG_LEG_DEG = 20.0
#: A knee folded further than this is not judged (the product's ``tuning.KNEE_JUDGED_BEND_DEG``).
KNEE_JUDGED_BEND_DEG = 120.0


# ---------------------------------------------------------------------------
# measurement (pure numpy)

def _angle_of(R):
    """Rotation angle (degrees) of rotation matrices (..., 3, 3)."""
    tr = np.trace(R, axis1=-2, axis2=-1)
    return np.degrees(np.arccos(np.clip((tr - 1.0) / 2.0, -1.0, 1.0)))


def _rot(M):
    """Rotation parts of (..., 4, 4) or (..., 3, 3) matrices, scale removed (columns normalised)."""
    R = np.asarray(M, dtype=np.float64)[..., :3, :3]
    return R / np.maximum(np.linalg.norm(R, axis=-2, keepdims=True), 1e-12)


def local_rotations(world, rest, parents):
    """Each bone's rotation from rest relative to its parent's: (T, B, 3, 3).

    ``D_j = R_j(t) R_j,rest^T`` is the world rotation a bone made from rest;
    the local rotation is ``D_parent^T D_j`` (``D_j`` for a root). It does not
    depend on the bones' rest frames (rolls, joint orients), so two rigs with
    the same rest positions but other bone axes compare directly.

    Parameters
    ----------
    world : ndarray (T, B, 4, 4)
        Posed world matrices.
    rest : ndarray (B, 4, 4)
        Rest world matrices.
    parents : sequence of int
        -1 for a root.
    """
    D = _rot(world) @ np.swapaxes(_rot(rest), -1, -2)[None]
    out = D.copy()
    for j, p in enumerate(parents):
        if p is not None and p >= 0:
            out[:, j] = np.swapaxes(D[:, p], -1, -2) @ D[:, j]
    return out


def rotation_error(local_pred, local_ref):
    """Mean angle (degrees) between two sets of local rotations (T, J, 3, 3)."""
    return float(np.mean(_angle_of(np.swapaxes(local_ref, -1, -2) @ local_pred)))


def joint_error(pred, ref):
    """Mean distance (mm) between joint positions (T, J, 3) given in metres."""
    return float(np.mean(np.linalg.norm(np.asarray(pred) - np.asarray(ref), axis=-1)) * 1000.0)


def reach_error(pred, ref, similar):
    """Mean and max distance (mm) of effectors (T, E, 3) in metres; ``similar``: after the best uniform scale and
    shift of ``ref`` onto ``pred`` (least squares, one for the clip)."""
    p = np.asarray(pred, dtype=np.float64).reshape(-1, 3)
    r = np.asarray(ref, dtype=np.float64).reshape(-1, 3)
    if similar:
        p, r = p - p.mean(axis=0), r - r.mean(axis=0)
        r = r * float(np.sum(p * r) / max(np.sum(r * r), 1e-12))
    d = np.linalg.norm(p - r, axis=-1) * 1000.0
    return float(d.mean()), float(d.max())


def jitter(pos):
    """Mean second difference of positions (T, J, 3) in metres, mm per frame squared."""
    p = np.asarray(pos, dtype=np.float64)
    if p.shape[0] < 3:
        return 0.0
    return float(np.mean(np.linalg.norm(p[2:] - 2.0 * p[1:-1] + p[:-2], axis=-1)) * 1000.0)


def contacts(points, fps, *, height=CONTACT_HEIGHT, speed=CONTACT_SPEED):
    """Which points (T, P, 3) touch the floor: each point near its own lowest height and slow.

    Uses :func:`retarget.metrics.foot_contacts` per point with that point's
    2nd-percentile height as its floor (an ankle rests higher than a toe).
    """
    from neural_ik.retarget.metrics import foot_contacts

    p = np.asarray(points, dtype=np.float64)
    out = np.zeros(p.shape[:2], bool)
    for k in range(p.shape[1]):
        floor = float(np.percentile(p[:, k, 2], 2.0))
        out[:, k] = foot_contacts(p[:, k:k + 1], fps, floor=floor, height=height, speed=speed)[:, 0]
    return out


def foot_skate(points, contact):
    """Mean horizontal movement (mm/frame) of points (T, P, 3) on steps where ``contact`` holds at both ends."""
    p = np.asarray(points, dtype=np.float64)
    step = np.linalg.norm(np.diff(p[..., :2], axis=0), axis=-1)
    both = contact[1:] & contact[:-1]
    return float(step[both].mean() * 1000.0) if both.any() else 0.0


def floor_error(foot_pts, floor, contact_frames):
    """Mean height (cm) of the lowest foot point over the contact frames, above ``floor`` (signed).

    Parameters
    ----------
    foot_pts : ndarray (T, P, 3)
        Every foot point of the rig (metres).
    floor : float
        The floor's height (metres).
    contact_frames : ndarray of bool (T,)
    """
    low = np.nanmin(np.asarray(foot_pts)[..., 2], axis=1)
    if not np.any(contact_frames):
        return float("nan")
    return float(np.mean(low[contact_frames] - floor) * 100.0)


def _standing_floor(foot_pts, contact):
    """Mean height (metres) of the lowest foot point over the frames with a contact: where the feet stand."""
    c = np.asarray(contact).any(1) if np.ndim(contact) == 2 else np.asarray(contact)
    low = np.nanmin(np.asarray(foot_pts)[..., 2], axis=1)
    return float(np.mean(low[c])) if c.any() else float(np.nanmin(low))


def upright_share(pelvis, head, max_deg=UPRIGHT_DEG):
    """Share (%) of frames whose pelvis -> head direction is within ``max_deg`` of +Z."""
    d = np.asarray(head) - np.asarray(pelvis)
    c = d[:, 2] / np.maximum(np.linalg.norm(d, axis=-1), 1e-12)
    return float(np.mean(c > np.cos(np.radians(max_deg))) * 100.0)


def knees_backwards(hip, knee, ankle, toe, *, tol=KNEE_BACK):
    """Frames (count) where the knee lies behind the hip-ankle line, against the foot's direction.

    All arrays (T, 3). The knee's offset from the hip-ankle line is compared
    with the foot's direction (ankle -> toe) across that line; a knee more
    than ``tol`` times the leg's length behind counts. A foot within
    ``FOOT_ALONG_LEG_DEG`` of the hip-ankle line (pointed along the shin)
    says nothing of the knee's front, nor does a knee folded further than
    ``KNEE_JUDGED_BEND_DEG`` (the hip-ankle line turns with the thigh-to-shin
    length ratio): such frames never count.
    """
    hip, knee, ankle, toe = (np.asarray(a, dtype=np.float64) for a in (hip, knee, ankle, toe))
    axis = ankle - hip
    length = np.linalg.norm(axis, axis=-1, keepdims=True)
    u = axis / np.maximum(length, 1e-12)
    off = (knee - hip) - np.einsum("ti,ti->t", knee - hip, u)[:, None] * u
    f0 = toe - ankle
    f = f0 - np.einsum("ti,ti->t", f0, u)[:, None] * u
    nf = np.linalg.norm(f, axis=-1)
    across = nf > np.sin(np.radians(FOOT_ALONG_LEG_DEG)) * np.linalg.norm(f0, axis=-1)
    a, b = hip - knee, ankle - knee
    cos = np.einsum("ti,ti->t", a, b) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
    across &= 180.0 - np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))) <= KNEE_JUDGED_BEND_DEG
    f /= np.maximum(nf, 1e-12)[:, None]
    leg = np.linalg.norm(knee - hip, axis=-1) + np.linalg.norm(ankle - knee, axis=-1)
    return int(np.sum(across & (np.einsum("ti,ti->t", off, f) < -tol * leg)))


# ---------------------------------------------------------------------------
# one rig's posed clip

@dataclasses.dataclass
class Posed:
    """A rig's pose over a clip, read from Blender, in metres."""

    names: list
    parents: list
    roles: dict
    world: np.ndarray       # (T, B, 4, 4)
    rest: np.ndarray        # (B, 4, 4)
    lengths: np.ndarray     # (B,)

    def heads(self, idx):
        return self.world[:, idx][..., :3, 3]

    def role_heads(self, keys):
        return self.world[:, [self.roles[k] for k in keys]][..., :3, 3]

    def foot(self):
        pts, _ = bb.foot_points(self.world, self.lengths, self.roles, self.parents)
        return pts

    def ankles_toes(self):
        """Ankle and toe tip of each side (T, 4, 3): points every rig has (the foot's tail without toes)."""
        out = []
        for s in "lr":
            out.append(self.world[:, self.roles["foot_" + s], :3, 3])
            out.append(self.toe_tip(s))
        return np.stack(out, 1)

    def toe_tip(self, s):
        """The toe bone's tail, or the foot bone's tail on a rig without toes (T, 3)."""
        t = self.roles["toe_" + s]
        b = t if t is not None else self.roles["foot_" + s]
        return self.world[:, b, :3, 3] + self.world[:, b, :3, 1] * self.lengths[b]

    def toe_point(self, s):
        t = self.roles["toe_" + s]
        f = self.roles["foot_" + s]
        if t is not None:
            return self.world[:, t, :3, 3]
        return self.world[:, f, :3, 3] + self.world[:, f, :3, 1] * self.lengths[f]


def read_posed(obj, frames):
    """Pose of an armature over ``frames``, read from Blender."""
    names, parents = bb.bone_tree(obj)
    roles = bb.skeleton_roles(names, parents)
    roles["_body"] = bb.body_joints(roles, parents)
    return Posed(names, parents, roles, bb.pose_world(obj, frames), bb.rest_world(obj), bb.bone_lengths(obj))


def transformed(posed, scale, offset):
    """A posed rig scaled about the origin and moved (the reference for another rig)."""
    M = np.eye(4)
    M[:3, :3] *= scale
    M[:3, 3] = offset
    return dataclasses.replace(posed, world=M[None, None] @ posed.world, rest=M[None] @ posed.rest)


def measure(pred, ref, fps, *, own, sparse, contact, floor, stand):
    """Every figure of one baked clip against its reference.

    Parameters
    ----------
    pred, ref : Posed
        The baked rig and the reference (the source, or the source placed
        for another rig); the same bones by name when ``own``.
    fps : float
    own : bool
        Same skeleton (joint and rotation errors over the body's joints).
    sparse : bool
        Report the effector reach.
    contact : ndarray of bool (T, P)
        The source's contacts of :meth:`Posed.ankles_toes` points.
    floor : float
        The rig's floor (metres).
    stand : ndarray of bool (T, P)
        The frames in which those points stand (the floor figure's).
    """
    out = {"frames": int(pred.world.shape[0])}
    if own:
        idx_r = ref.roles["_body"]
        pos = {n: i for i, n in enumerate(pred.names)}
        idx_p = [pos[ref.names[i]] for i in idx_r]
        jp, jr = pred.heads(idx_p), ref.heads(idx_r)
        Lp = local_rotations(pred.world, pred.rest, pred.parents)
        Lr = local_rotations(ref.world, ref.rest, ref.parents)
        body = set(idx_r)
        child = [i for i in idx_r if any(ref.parents[k] == i for k in body)]
        out["rot_all"] = rotation_error(Lp[:, idx_p], Lr[:, idx_r])
        out["rot_child"] = rotation_error(Lp[:, [pos[ref.names[i]] for i in child]], Lr[:, child])
    else:
        jp, jr = pred.role_heads(LIMB_KEYS), ref.role_heads(LIMB_KEYS)
    out["joint"] = joint_error(jp, jr)
    out["jitter"] = jitter(jp)
    if sparse:
        out["reach"], out["reach_max"] = reach_error(pred.role_heads(EFFECTOR_KEYS), ref.role_heads(EFFECTOR_KEYS),
                                                     similar=not own)
    out.update(rig_figures(pred, fps, contact=contact, floor=floor, stand=stand, foot_from=ref))
    return out


def rig_figures(posed, fps, *, contact, floor, stand, foot_from=None):
    """Figures of a rig alone: floor, upright, knees backwards, skate (on the given contacts).

    ``foot_from``: the reference (the source) whose foot directions judge the knees, as the
    bake's own figure does (a rig's foot pitched onto its own flat foot says nothing of its knee).
    """
    def toe(s):
        if foot_from is None:
            return posed.toe_point(s)
        ref_ankle = foot_from.heads(foot_from.roles["foot_" + s])
        return posed.heads(posed.roles["foot_" + s]) + (foot_from.toe_point(s) - ref_ankle)

    def knees(toe_of):
        return sum(knees_backwards(posed.heads(posed.roles["thigh_" + s]), posed.heads(posed.roles["calf_" + s]),
                                   posed.heads(posed.roles["foot_" + s]), toe_of(s)) for s in "lr")

    return {"floor": floor_error(posed.foot(), floor, stand.any(axis=1)),
            "upright": upright_share(posed.heads(posed.roles["pelvis"]), posed.heads(posed.roles["head"])),
            "knees": knees(toe),
            # (against the rig's own feet: a knee bent backwards as seen, not a leg turned off the source's heading)
            "knees_own": knees(posed.toe_point),
            "skate": foot_skate(posed.ankles_toes(), contact)}


# ---------------------------------------------------------------------------
# the run

COLUMNS = (("joint", "joint mm", "{:.1f}"), ("rot_all", "rot deg", "{:.1f}"), ("rot_child", "rot child", "{:.1f}"),
           ("reach", "reach mm", "{:.1f}"), ("reach_max", "reach max", "{:.1f}"), ("floor", "floor cm", "{:+.1f}"),
           ("upright", "upright %", "{:.0f}"),
           ("knees", "knees back", "{:d}"), ("knees_own", "knees own", "{:d}"), ("jitter", "jitter mm/f2", "{:.2f}"), ("skate", "skate mm/f", "{:.2f}"))


def aggregate(rows):
    """Frame-weighted means (knees: sums) of measured rows."""
    rows = [r for r in rows if "frames" in r]
    if not rows:
        return {}
    w = np.array([r["frames"] for r in rows], float)
    out = {"frames": int(w.sum()), "clips": len(rows)}
    for key, _, _ in COLUMNS:
        vals = [(r[key], wi) for r, wi in zip(rows, w) if key in r and r[key] is not None and np.isfinite(r[key])]
        if not vals:
            continue
        if key in ("knees", "knees_own"):
            out[key] = int(sum(v for v, _ in vals))
        elif key == "reach_max":
            out[key] = float(max(v for v, _ in vals))
        else:
            out[key] = float(sum(v * wi for v, wi in vals) / sum(wi for _, wi in vals))
    return out


def format_table(title, rows):
    """Text table: one line per (target, mode, method) with the aggregated figures."""
    head = "{:<7} {:<6} {:<10} {:>5}".format("target", "mode", "method", "clips") + "".join(
        " {:>12}".format(h) for _, h, _ in COLUMNS)
    lines = [title, head, "-" * len(head)]
    for (target, mode, method), agg, note in rows:
        if not agg:
            lines.append("{:<7} {:<6} {:<10} {:>5} {}".format(target, mode, method, 0, note or "n/a"))
            continue
        cells = ""
        for key, _, fmt in COLUMNS:
            v = agg.get(key)
            cells += " {:>12}".format(fmt.format(v) if v is not None else "-")
        lines.append("{:<7} {:<6} {:<10} {:>5}".format(target, mode, method, note or agg["clips"]) + cells)
    return "\n".join(lines)


def _cli_args(path, hints):
    from neural_ik.cli.parser import build_parser

    return build_parser().parse_args(["bake", path, "--target", "rigify", "--device", "cpu", "-q"] + hints)


def _hints(folder, parser_choices):
    scale, up, units = bb.FOLDER_UNITS.get(folder, (1.0, "Y", None))
    out = []
    if units and units in parser_choices.get("units", ()):
        out += ["--units", units]
    if up != "Y":
        out += ["--up-axis", up]
    return out


def _parser_choices():
    from neural_ik.cli.parser import build_parser

    p = build_parser()
    sub = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)][0].choices["bake"]
    return {a.dest: tuple(a.choices or ()) for a in sub._actions}


def swapped_chain(posed):
    """``(chain, parts)`` or None: the chain whose sides the source swaps all clip long and its
    keypoints to swap back, as the bake finds them (:func:`neural_ik.pipeline.prepare.swapped_sides`
    on the role points)."""
    from neural_ik.model.skeleton import KEYPOINTS
    from neural_ik.pipeline.prepare import swapped_parts, swapped_sides

    kp = np.full((len(posed.world), len(KEYPOINTS), 3), np.nan)
    for k in ("thigh", "upperarm", "clavicle", "foot", "toe"):
        for s in "lr":
            if posed.roles.get(f"{k}_{s}") is not None:
                kp[:, KEYPOINTS.index(f"{k}_{s}")] = posed.heads(posed.roles[f"{k}_{s}"])
    valid = np.isfinite(kp).all(-1)
    chain = swapped_sides(kp, valid)
    return None if chain is None else (chain, swapped_parts(kp, valid, chain))


def swapped_back(posed, swapped):
    """``posed`` with the left and right roles of the swapped parts (:func:`swapped_chain`) exchanged, and
    their bones' names (which a bake onto the clip's own skeleton is compared by): itself without any."""
    if swapped is None:
        return posed
    roles, names = dict(posed.roles), list(posed.names)
    for k in swapped[1]:
        a, b = roles.get(f"{k}_l"), roles.get(f"{k}_r")
        if a is not None and b is not None:
            roles[f"{k}_l"], roles[f"{k}_r"] = b, a
            names[a], names[b] = posed.names[b], posed.names[a]
    return dataclasses.replace(posed, roles=roles, names=names)


def neural_bake(path, target_obj, args, solver, roles_src_names, sparse, joints_only=False):
    """Bake ``path`` onto ``target_obj`` through the CLI's entry points; returns (first frame, frames).

    ``joints_only``: the clip's joint positions alone, its skeleton's rotations withheld (the
    network is the start pose and prior, as for keypoints of a video or a marker set).
    """
    from neural_ik.cli import arguments, sources
    from neural_ik.cli.bake import prepare_scene
    from neural_ik.blender_io.targets import Target

    clip = sources.read_source(path, args)
    if joints_only:
        clip = dataclasses.replace(clip, source_rig=None)
    if sparse:
        keep = [i for i, n in enumerate(clip.joint_names) if n in roles_src_names]
        pos = np.full_like(clip.positions, np.nan)
        pos[:, keep] = clip.positions[:, keep]
        clip = dataclasses.replace(clip, positions=pos)
    target = Target(target_obj, "bench", "bvh")
    fps = prepare_scene(target, clip.fps, clip.num_frames, None)
    options = arguments.bake_options(args, action_name=os.path.splitext(os.path.basename(path))[0], fps=fps)
    if sparse:
        options.mode = "sparse"
    result = sources.bake_one(target_obj, clip, options, source_name=os.path.basename(path), solver=solver)
    return int(result.frame_start), int(result.frames)


def _short(ex):
    text = " ".join(str(ex).split())
    return text if len(text) < 160 else text[:157] + "..."


def run_clip(path, folder, opts, solver, choices, pole_cache, log):
    """Bake one clip every way asked for; returns {(target, mode, method): row}."""
    import bpy

    scale, up, _ = bb.FOLDER_UNITS.get(folder, (1.0, "Y", None))
    bb.new_scene()
    source = bb.import_bvh(path, scale=scale, up=up)
    act = source.animation_data.action
    first = int(round(act.frame_range[0]))
    n = int(round(act.frame_range[1])) - first + 1
    frames = list(range(first, first + n))
    fps = float(bpy.context.scene.render.fps) / float(bpy.context.scene.render.fps_base)
    with open(path, "r", errors="replace") as fh:
        for line in fh:
            if line.strip().lower().startswith("frame time"):
                fps = 1.0 / float(line.split(":")[1])
                break
    src = read_posed(source, frames)
    src_names_eff = {src.names[src.roles[k]] for k in EFFECTOR_KEYS}
    contact = contacts(src.ankles_toes(), fps)
    stand = contacts(src.ankles_toes(), fps, height=STAND_HEIGHT, speed=STAND_SPEED)
    src_floor = float(np.nanmin(src.foot()[..., 2]))
    swapped = swapped_chain(src)
    out = {}
    hints = [] if opts.no_hints else _hints(folder, choices)
    for kind in opts.targets:
        # no flags, as a user runs it: a clip standing on its floor keeps the file's heights (as
        # Blender's importer, the reference, reads them)
        args = _cli_args(path, hints)
        if kind == "rigify":
            target = bb.add_metarig()
        else:
            target = bb.import_bvh(path, scale=scale, up=up, rest=True)
            if kind == "world":
                aligned = bb.make_world_aligned(target)
                bb.delete_object(target)
                target = aligned
        tnames, tparents = bb.bone_tree(target)
        troles = bb.skeleton_roles(tnames, tparents)
        own = kind != "rigify"
        if own:
            # its own skeleton, hanging from its hips at rest, says nothing of its sole: the floor is
            # where the source's feet stand at their contacts (the source's row reads 0; a baked row,
            # how far its feet stand off the source's)
            ref, floor = src, _standing_floor(src.foot(), stand)
        else:
            s = bb.rig_scale(target, source, troles, src.roles)
            ft, _ = bb.foot_points(bb.rest_world(target)[None], bb.bone_lengths(target), troles, tparents)
            floor = float(np.nanmin(ft[..., 2]))
            ref = transformed(src, s, np.array([0.0, 0.0, floor - s * src_floor]))
        unswapped = swapped_back(ref, swapped)
        out[(kind, "-", "source")] = dict(rig_figures(ref, fps, contact=contact, floor=floor, stand=stand), frames=n,
                                          jitter=jitter(ref.heads(ref.roles["_body"]) if own
                                                        else ref.role_heads(LIMB_KEYS)))
        for mode in opts.modes:
            sparse = mode == "sparse"
            for method in opts.methods:
                key = (kind, mode, method)
                bb.to_rest(target)
                t0 = time.perf_counter()
                try:
                    if method in ("neural-ik", "keypoints"):
                        start, count = neural_bake(path, target, args, solver, src_names_eff, sparse,
                                                   joints_only=method == "keypoints")
                    else:
                        if not bb.ik_applicable(target, troles):
                            out[key] = {"n/a": "Blender's IK needs forearm/shin tails on the wrists/ankles"}
                            continue
                        res = bb.constraint_bake(path, target, scale=scale, up=up, mode=mode, own=own,
                                                 pole_cache=pole_cache)
                        start, count = res.first_frame, res.frames
                except Exception as ex:  # a refused clip or a failed bake is a row, not a crash
                    from neural_ik.errors import UserError

                    known = isinstance(ex, (UserError, ValueError, KeyError, RuntimeError)) or \
                        type(ex).__name__ in ("KeypointReadError", "BakeError")
                    if not known:
                        raise
                    out[key] = {"refused": _short(ex)}
                    continue
                seconds = time.perf_counter() - t0
                if count != n:
                    out[key] = {"refused": "baked {} frames, the source has {}".format(count, n)}
                    continue
                pred = read_posed(target, range(start, start + n))
                # a bake that swapped the source's sides back is measured against them swapped back
                # (six effectors alone do not show it; onto its own skeleton the file is followed)
                back = swapped and not sparse and not (own and method == "neural-ik")
                row = measure(pred, unswapped if back else ref, fps, own=own, sparse=sparse, contact=contact, floor=floor, stand=stand)
                row["seconds"] = seconds
                out[key] = row
        bb.delete_object(target)
    log("  {} ({} frames): {}".format(os.path.basename(path), n, ", ".join(
        "{}/{}/{} {}".format(k[0], k[1], k[2], "refused" if "refused" in v else
                             "n/a" if "n/a" in v else "{:.1f} mm {:.1f} s".format(v["joint"], v["seconds"]))
        for k, v in out.items() if k[2] != "source")))
    return out, src_floor


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=DEFAULT_ROOT, help="the foreign mocap folder (default: ../shared/mocap/foreign)")
    ap.add_argument("--folders", default=None, help="comma-separated folders (default: all)")
    ap.add_argument("--max-frames", type=int, default=300, help="frames per clip (default 300; 0: whole clips)")
    ap.add_argument("--clips-per-folder", type=int, default=0, help="at most this many clips per folder (0: all)")
    ap.add_argument("--targets", default="own,world,rigify")
    ap.add_argument("--modes", default="dense,sparse")
    ap.add_argument("--no-blender", action="store_true", help="leave out Blender's constraint bake")
    ap.add_argument("--no-hints", action="store_true", help="do not give the CLI the folder's units and up axis")
    ap.add_argument("--json", default=None, help="write every clip's figures there")
    ap.add_argument("--quick", action="store_true", help="one clip per folder, at most 200 frames each")
    ap.add_argument("--keypoints", action="store_true",
                    help="also a 'keypoints' method: Neural IK given the clip's joints alone (its rotations "
                         "withheld: the network is the start, as for video keypoints)")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.clips_per_folder = opts.clips_per_folder or 1
        opts.max_frames = min(opts.max_frames or 200, 200)
    opts.targets = [t for t in opts.targets.split(",") if t]
    opts.modes = [m for m in opts.modes.split(",") if m]
    opts.methods = ["neural-ik"] + (["keypoints"] if opts.keypoints else []) + ([] if opts.no_blender else ["blender"])
    if not os.path.isdir(opts.root):
        print("bench_foreign: {}: no such folder (the foreign mocap data)".format(opts.root), file=sys.stderr)
        return 2
    folders = sorted(d for d in os.listdir(opts.root) if os.path.isdir(os.path.join(opts.root, d)))
    if opts.folders:
        want = opts.folders.split(",")
        missing = [f for f in want if f not in folders]
        if missing:
            print("bench_foreign: unknown folders: {}".format(", ".join(missing)), file=sys.stderr)
            return 2
        folders = want

    sys.path.insert(0, HERE)
    from _pkg import import_package

    import_package()
    import torch

    torch.set_num_threads(2)
    from neural_ik.cli.bake import get_solver

    choices = _parser_choices()
    solver = get_solver(_cli_args("x.bvh", []))
    # a SIGTERM (timeout, kill) ends the run through the finally below, which removes the cut clips
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="bench_foreign_")
    started = time.perf_counter()
    print("bench_foreign: {} folders, {} per clip, targets {}, modes {}, methods {}{}".format(
        len(folders), "at most {} frames".format(opts.max_frames) if opts.max_frames else "all frames",
        ",".join(opts.targets), ",".join(opts.modes), ",".join(opts.methods),
        "" if opts.no_hints else "; the CLI gets the folder's units and up axis (--no-hints: guessed)"))
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    report = {}
    tables = []
    try:
        for folder in folders:
            clips = sorted(f for f in os.listdir(os.path.join(opts.root, folder)) if f.lower().endswith(".bvh"))
            if opts.clips_per_folder:
                clips = clips[:opts.clips_per_folder]
            log("{}: {} clips".format(folder, len(clips)))
            pole_cache = {}
            per_key, refused, floors = {}, [], []
            os.makedirs(os.path.join(tmp, folder), exist_ok=True)
            for name in clips:
                src = os.path.join(opts.root, folder, name)
                path = os.path.join(tmp, folder, name)
                if opts.max_frames:
                    bb.write_cut_bvh(src, path, opts.max_frames, loop=False)
                else:
                    shutil.copyfile(src, path)
                rows, floor = run_clip(path, folder, opts, solver, choices, pole_cache, log)
                floors.append(floor)
                report["{}/{}".format(folder, name)] = {"/".join(k): v for k, v in rows.items()}
                for k, v in rows.items():
                    per_key.setdefault(k, []).append(v)
                    if "refused" in v:
                        refused.append("{} {}/{}/{}: refused: {}".format(name, *k, v["refused"]))
            table_rows = []
            for kind in opts.targets:
                for mode in ["-"] + opts.modes:
                    for method in (["source"] if mode == "-" else opts.methods):
                        vals = per_key.get((kind, mode, method), [])
                        agg = aggregate(vals)
                        done = sum(1 for v in vals if "frames" in v)
                        note = None
                        if any("n/a" in v for v in vals):
                            note = "n/a (Blender's IK needs bone tails on the wrists/ankles)"
                        elif done < len(vals):
                            note = "{}/{}".format(done, len(vals))
                        table_rows.append(((kind, mode, method), agg, note))
            frames = sum(v["frames"] for v in per_key.get((opts.targets[0], "-", "source"), []))
            title = "\n{}: {} clips, {} frames (at most {} per clip); source floor {:+.1f} cm (mean)".format(
                folder, len(clips), frames, opts.max_frames or "all", float(np.mean(floors)) * 100.0)
            text = format_table(title, table_rows)
            if refused:
                text += "\n" + "\n".join(refused)
            tables.append(text)
            print(text, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nwall time {:.0f} s".format(time.perf_counter() - started))
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(report, fh, indent=1, default=float)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
