"""Blender's own constraint bake, the competitor, done as a careful Blender user would.

The job (all timed together, :func:`constraint_bake`):

1. **Import** the source BVH with Blender's importer (``import_anim.bvh``) as the
   animated source armature; the target is already in the scene (the same BVH
   imported again as a rest armature, Rigify's human meta-rig, or anything else
   whose bones :func:`skeleton_roles` recognises). On another rig than the
   source's own, the source object is scaled by the ratio of the rest hip
   heights (:func:`rig_scale`) and moved so that its floor (its lowest foot point over the clip)
   lies on the target's (its lowest foot point at rest), as a user lines up a
   source with a character.
2. **Constraints** on the target:

   - ``dense`` (the complete retarget): two-bone IK (``chain_count`` 2) on the
     forearms and shins, targeting the source's hand / foot bones (their heads:
     the wrists and ankles), with pole targets at the source's forearm / shin
     bones (the elbows and knees); the pole angle is *measured*, not guessed
     (:func:`measure_pole_angles`: the angle at which the target's elbow or
     knee bends in the source's plane on the clip's most bent frames); Copy
     Location (world) on the pelvis; Copy Rotation (world) on every other body
     bone: pelvis, spine, neck, head, clavicles, hip bones, hands, feet, toes.
     Where the target's rest orientations differ from the source's (another
     rig), Copy Rotation reads helper bones added to the source, parented to
     the source bone and oriented like the target bone at rest, so the target
     gets the source's rotation *from rest* (the usual helper-bone retarget).
   - ``sparse`` (six effectors): Copy Location on the pelvis, IK chains without
     pole targets from the head (through the neck and spine), the hands
     (forearm, upper arm, clavicle) and the feet (shin, thigh).
3. **Bake**: ``bpy.ops.nla.bake(visual_keying=True, clear_constraints=True,
   only_selected=True, bake_types={'POSE'})`` over the clip's frames, with all
   the target's bones selected; then the source armature is deleted.

Blender's IK uses a bone's tail as the effector, so it needs rigs whose
forearm and shin tails lie on the wrist and ankle (Blender's BVH importer and
Rigify do; a rig whose bones point along a world axis does not:
:func:`ik_applicable` says so and the benchmarks print ``n/a``).

As a script, one clip::

    .venv/bin/python benchmarks/blender_baseline.py CLIP.bvh [--target own|rigify] [--mode dense|sparse]
        [--max-frames N] [--scale S] [--up Y|Z]

prints the job's time by stage and the baked rig's mean joint distance to the
source (mm). Nothing here is part of the extension; it reads no code of it.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "skeleton_roles", "body_joints", "import_bvh", "to_rest", "add_metarig", "make_world_aligned",
    "pose_world", "rest_world", "hip_height", "leg_length", "rig_scale", "foot_points", "ik_applicable", "constraint_bake",
    "measure_pole_angles", "BlenderBake", "new_scene", "delete_object", "write_cut_bvh", "FOLDER_UNITS",
]

# ---------------------------------------------------------------------------
# bone roles (pure python: names and parent indices only)

#: Names of the hand / foot / head bones in the conventions measured here
#: (BVH files of ../shared/mocap/foreign, Mixamo-style names, Rigify's meta-rig).
HAND_NAMES = {"l": ("LeftHand", "lHand", "LeftWrist", "hand.L", "mixamorig:LeftHand"),
              "r": ("RightHand", "rHand", "RightWrist", "hand.R", "mixamorig:RightHand")}
FOOT_NAMES = {"l": ("LeftFoot", "lFoot", "LeftAnkle", "foot.L", "mixamorig:LeftFoot"),
              "r": ("RightFoot", "rFoot", "RightAnkle", "foot.R", "mixamorig:RightFoot")}
HEAD_NAMES = ("Head", "head", "spine.006", "mixamorig:Head")

#: Metres per file unit of each folder of ../shared/mocap/foreign (its README) and up axis.
FOLDER_UNITS = {
    "cmu_hahne": (0.0254 / 0.45, "Y", "cmu"),   # CMU units (1/0.45 inch)
    "cmu_ad": (0.0254 / 0.45, "Y", "cmu"),
    "cmu_sl": (1.0, "Y", "m"),
    "fair1": (0.0254, "Z", "in"),
    "sfu": (0.0254, "Y", "in"),
    "rokoko": (0.01, "Y", "cm"),
}


def _find(names, candidates):
    for c in candidates:
        if c in names:
            return names.index(c)
    low = [n.lower() for n in names]
    for c in candidates:
        if c.lower() in low:
            return low.index(c.lower())
    return None


def _chain_to_root(i, parents):
    out = []
    while i is not None and i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]  # root first


def skeleton_roles(names, parents):
    """Body roles of a humanoid skeleton from its bone names and hierarchy.

    The hands, feet and head are found by name (:data:`HAND_NAMES`...); the
    rest by the hierarchy: forearm = the hand's parent, upper arm = its
    parent, clavicle = the upper arm's parent when it is not on the spine;
    shin and thigh likewise above the foot; the pelvis is the lowest common
    ancestor of the head and the feet; the spine runs from the pelvis to the
    bone carrying the clavicles, the neck from there to the head.

    Parameters
    ----------
    names : list of str
    parents : list of int
        Parent index per bone, -1 for a root.

    Returns
    -------
    dict
        Role -> bone index (``pelvis``, ``head``, ``hand_l``, ``forearm_l``,
        ``upperarm_l``, ``clavicle_l`` (or None), ``foot_l``, ``calf_l``,
        ``thigh_l``, ``toe_l`` (or None), the same with ``_r``), plus
        ``spine`` and ``neck``: lists of indices, pelvis side first.

    Raises
    ------
    ValueError
        A hand, foot or the head is not found.
    """
    names = list(names)
    parents = [(-1 if p is None else int(p)) for p in parents]
    roles = {}
    head = _find(names, HEAD_NAMES)
    if head is None:
        raise ValueError("no head bone (one of {})".format(", ".join(HEAD_NAMES)))
    roles["head"] = head
    for s in "lr":
        h = _find(names, HAND_NAMES[s])
        f = _find(names, FOOT_NAMES[s])
        if h is None or f is None:
            raise ValueError("no {} hand or foot bone".format("left" if s == "l" else "right"))
        roles["hand_" + s], roles["foot_" + s] = h, f
        roles["forearm_" + s] = parents[h]
        roles["upperarm_" + s] = parents[roles["forearm_" + s]]
        roles["calf_" + s] = parents[f]
        roles["thigh_" + s] = parents[roles["calf_" + s]]
        kids = [i for i, p in enumerate(parents) if p == f]
        # the toe: the foot's child lying furthest along the chain (Rigify's heel is a child too)
        toe = [i for i in kids if names[i].lower().startswith(("toe", "lefttoe", "righttoe", "ltoe", "rtoe"))
               or "toe" in names[i].lower()]
        roles["toe_" + s] = toe[0] if toe else None
    head_path = _chain_to_root(head, parents)
    foot_path = _chain_to_root(roles["foot_l"], parents)
    common = [a for a, b in zip(head_path, foot_path) if a == b]
    pelvis = common[-1]
    roles["pelvis"] = pelvis
    trunk = head_path[head_path.index(pelvis) + 1:-1]  # between the pelvis and the head
    for s in "lr":
        u = roles["upperarm_" + s]
        c = parents[u]
        roles["clavicle_" + s] = None if (c in trunk or c == pelvis) else c
    chest = parents[roles["clavicle_l"]] if roles["clavicle_l"] is not None else parents[roles["upperarm_l"]]
    if chest in trunk:
        k = trunk.index(chest) + 1
        roles["spine"], roles["neck"] = trunk[:k], trunk[k:]
    else:
        roles["spine"], roles["neck"] = trunk, []
    return roles


def body_joints(roles, parents):
    """Indices of the body's bones: the root's path to the head, hands and toes (or feet).

    Fingers, eyes and other extremities beyond the hands, head and toes are
    left out; bones between (hip bones, clavicles, every spine and neck bone)
    are in. Sorted by index.
    """
    parents = [(-1 if p is None else int(p)) for p in parents]
    out = set()
    for key in ("head", "hand_l", "hand_r"):
        out.update(_chain_to_root(roles[key], parents))
    for s in "lr":
        end = roles["toe_" + s] if roles["toe_" + s] is not None else roles["foot_" + s]
        out.update(_chain_to_root(end, parents))
    return sorted(out)


# ---------------------------------------------------------------------------
# Blender helpers

def new_scene():
    """An empty scene (factory settings, nothing in it)."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)


def delete_object(obj):
    """Delete an object and its armature data / action."""
    import bpy

    data = obj.data
    ad = obj.animation_data
    action = ad.action if ad is not None else None
    bpy.data.objects.remove(obj, do_unlink=True)
    if data is not None and data.users == 0:
        bpy.data.armatures.remove(data)
    if action is not None and action.users == 0:
        bpy.data.actions.remove(action)


def _quiet(func, *args, **kwargs):
    """Call ``func`` with the C-level stdout silenced (Blender's importers print a lot)."""
    fd = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return func(*args, **kwargs)
    finally:
        os.dup2(fd, 1)
        os.close(fd)


def import_bvh(path, *, scale=1.0, up="Y", rest=False):
    """Import a BVH with Blender's importer; returns the armature object.

    Parameters
    ----------
    path : str
    scale : float
        ``global_scale`` (metres per file unit, so the rig is in metres).
    up : str
        ``"Y"`` (the BVH convention; Blender's default axes) or ``"Z"`` (a
        Z-up file, imported without axis change).
    rest : bool
        Drop the animation and reset the pose (the skeleton as a target).
    """
    import bpy

    axes = dict(axis_forward="-Z", axis_up="Y") if up == "Y" else dict(axis_forward="Y", axis_up="Z")
    before = set(bpy.data.objects)
    _quiet(bpy.ops.import_anim.bvh, filepath=os.path.abspath(path), global_scale=float(scale),
           update_scene_fps=False, update_scene_duration=False, **axes)
    obj = [o for o in bpy.data.objects if o not in before and o.type == "ARMATURE"][0]
    if rest:
        to_rest(obj)
    return obj


def to_rest(obj):
    """Remove an armature's action and constraints and reset every pose bone."""
    import bpy

    from _pkg import import_package   # the script's folder is on sys.path

    import_package()
    from neural_ik.blender_io.targets import _rest_pose   # (imports no torch: the baseline stays Blender's alone)

    for pb in obj.pose.bones:
        for c in list(pb.constraints):
            pb.constraints.remove(c)
    _rest_pose(obj)
    for pb in obj.pose.bones:
        pb.rotation_axis_angle = (0.0, 0.0, 1.0, 0.0)
    bpy.context.view_layer.update()


def add_metarig():
    """Rigify's human meta-rig (``armature_human_metarig_add``) at the origin; returns it."""
    import addon_utils
    import bpy

    _quiet(addon_utils.enable, "rigify", default_set=True)
    before = set(bpy.data.objects)
    _quiet(bpy.ops.object.armature_human_metarig_add)
    return [o for o in bpy.data.objects if o not in before and o.type == "ARMATURE"][0]


def _set_mode(obj, mode):
    import bpy

    for o in bpy.context.view_layer.objects:
        if o is not None:     # (a source deleted a moment ago can still be listed, as None)
            o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    if obj.mode != mode:
        bpy.ops.object.mode_set(mode=mode)


def make_world_aligned(obj, name="world_aligned"):
    """A copy of an armature's skeleton whose bones all point along world +Y with no roll.

    Each bone's head is the original's (the joint), its tail the head plus
    (0, L, 0) with L the original's length; nothing is connected. Every bone's
    rest frame is the world's: a local rotation is the BVH channel rotation,
    the convention of rigs without joint orients (FBX rigs imported without
    "automatic bone orientation" look like this).
    """
    import bpy

    heads = {b.name: obj.matrix_world @ b.head_local for b in obj.data.bones}
    lengths = {b.name: max(b.length, 1e-3) for b in obj.data.bones}
    parents = {b.name: (b.parent.name if b.parent else None) for b in obj.data.bones}
    order = [b.name for b in obj.data.bones]
    arm = bpy.data.armatures.new(name)
    new = bpy.data.objects.new(name, arm)
    bpy.context.scene.collection.objects.link(new)
    _set_mode(new, "EDIT")
    for n in order:
        eb = arm.edit_bones.new(n)
        h = heads[n]
        eb.head = h
        eb.tail = (h[0], h[1] + lengths[n], h[2])
        eb.roll = 0.0
    for n in order:
        if parents[n] is not None:
            arm.edit_bones[n].parent = arm.edit_bones[parents[n]]
            arm.edit_bones[n].use_connect = False
    bpy.ops.object.mode_set(mode="OBJECT")
    return new


def bone_tree(obj):
    """``(names, parents)`` of an armature's bones, in ``obj.data.bones`` order."""
    names = [b.name for b in obj.data.bones]
    index = {n: i for i, n in enumerate(names)}
    parents = [index[b.parent.name] if b.parent else -1 for b in obj.data.bones]
    return names, parents


def rest_world(obj):
    """World rest matrices (B, 4, 4) of an armature's bones (``obj.data.bones`` order)."""
    mw = np.array(obj.matrix_world, dtype=np.float64)
    n = len(obj.data.bones)
    buf = np.empty(n * 16, np.float32)
    obj.data.bones.foreach_get("matrix_local", buf)
    m = buf.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)  # foreach_get gives column-major
    return mw[None] @ m


def pose_world(obj, frames):
    """World matrices (T, B, 4, 4) of the posed bones at ``frames`` (``frame_set`` per frame).

    Bones in ``obj.data.bones`` order (the same as ``obj.pose.bones``). Heads
    are ``[..., :3, 3]``; a bone's tail is its head plus its Y axis times its
    length.
    """
    import bpy

    scene = bpy.context.scene
    pb = obj.pose.bones
    n = len(pb)
    buf = np.empty(n * 16, np.float32)
    out = np.empty((len(frames), n, 4, 4), np.float64)
    mw = np.array(obj.matrix_world, dtype=np.float64)
    for k, f in enumerate(frames):
        scene.frame_set(int(f))
        pb.foreach_get("matrix", buf)
        out[k] = buf.reshape(n, 4, 4).transpose(0, 2, 1)
    return mw[None, None] @ out


def bone_lengths(obj):
    """Rest lengths (B,) in armature units (world matrices carry the object's scale on their axes)."""
    return np.array([b.length for b in obj.data.bones])


def hip_height(obj, roles):
    """Rest height of the pelvis above the rest pose's lowest foot point, along the body's up axis."""
    names, parents = bone_tree(obj)
    W = rest_world(obj)
    up = _body_frame(W, roles)[:, 2]
    pts, _ = foot_points(W[None], bone_lengths(obj), roles, parents)
    return float(np.dot(W[roles["pelvis"], :3, 3], up) - np.min(pts[0] @ up))


def leg_length(obj, roles):
    """Mean rest length of the legs (thigh head to knee to ankle), armature units."""
    W = rest_world(obj)[:, :3, 3]
    return float(np.mean([np.linalg.norm(W[roles["calf_" + s]] - W[roles["thigh_" + s]])
                          + np.linalg.norm(W[roles["foot_" + s]] - W[roles["calf_" + s]]) for s in "lr"]))


def rig_scale(target, source, roles_t, roles_s):
    """Source-to-target scale: the ratio of the rest hip heights (a standing target's legs reach the floor).

    Where a rest pose does not stand (its feet less than 80% of a leg's
    length below its pelvis: Rokoko's rest lies along one axis), the ratio of
    the legs' lengths.
    """
    ht, hs = hip_height(target, roles_t), hip_height(source, roles_s)
    lt, ls = leg_length(target, roles_t), leg_length(source, roles_s)
    if ht > 0.8 * lt and hs > 0.8 * ls:
        return ht / hs
    return lt / ls


def foot_points(world, lengths, roles, parents):
    """Heads and tails of each foot bone and its descendants: (T, P, 3) and the side of each point.

    Parameters
    ----------
    world : ndarray (T, B, 4, 4)
    lengths : ndarray (B,)
    roles : dict
    parents : list of int
    """
    pts, side = [], []
    for s in "lr":
        f = roles["foot_" + s]
        members = [i for i in range(len(parents)) if f in _chain_to_root(i, parents)]
        for i in members:
            pts.append(world[:, i, :3, 3])
            pts.append(world[:, i, :3, 3] + world[:, i, :3, 1] * lengths[i])
            side += [s, s]
    return np.stack(pts, 1), np.array(side)


def ik_applicable(obj, roles, tol=1e-4):
    """Whether Blender's IK can target the wrists and ankles: forearm / shin tails on the hand / foot heads."""
    W = rest_world(obj)
    L = bone_lengths(obj)
    for s in "lr":
        for a, b in (("forearm_", "hand_"), ("calf_", "foot_")):
            i, j = roles[a + s], roles[b + s]
            tail = W[i, :3, 3] + W[i, :3, 1] * L[i]
            if np.linalg.norm(tail - W[j, :3, 3]) > tol * max(L[i], 1e-6) + 1e-6:
                return False
    return True


# ---------------------------------------------------------------------------
# the job

@dataclass
class BlenderBake:
    """What :func:`constraint_bake` did.

    Attributes
    ----------
    frames : int
    seconds : dict
        ``import``, ``constraints`` (pole angles measured included), ``bake``, ``total``.
    pole_angles : dict
        Chain (``arm_l``...) -> measured pole angle (degrees); ``None`` where
        the chain never bends enough to define a plane (no pole target).
    scale : float
        Source object scale (:func:`rig_scale`; 1 on the own skeleton).
    offset : ndarray (3,)
        Source object location (the floor alignment).
    """

    frames: int
    seconds: dict = field(default_factory=dict)
    pole_angles: dict = field(default_factory=dict)
    scale: float = 1.0
    offset: np.ndarray = field(default_factory=lambda: np.zeros(3))


def _mapping(roles_t, roles_s, names_t, names_s, same):
    """Target bone index -> source bone index for rotation copies (not the IK chains)."""
    ik = {roles_t[k + s] for k in ("upperarm_", "forearm_", "thigh_", "calf_") for s in "lr"}
    if same:  # the source's own skeleton: every body bone by name
        idx = {n: i for i, n in enumerate(names_s)}
        return {i: idx[names_t[i]] for i in roles_t["_body"] if i not in ik and names_t[i] in idx}
    out = {roles_t["pelvis"]: roles_s["pelvis"], roles_t["head"]: roles_s["head"]}
    for key in ("spine", "neck"):
        t, s = roles_t[key], roles_s[key]
        if not t or not s:
            continue
        for k, i in enumerate(t):
            out[i] = s[int(round(k * (len(s) - 1) / max(len(t) - 1, 1)))] if len(t) > 1 else s[-1]
    for s in "lr":
        for key in ("clavicle_", "hand_", "foot_", "toe_"):
            if roles_t.get(key + s) is not None and roles_s.get(key + s) is not None:
                out[roles_t[key + s]] = roles_s[key + s]
    return out


def _bend(p0, p1, p2):
    """Bend angle (rad) and bend-plane normal of a chain of three points (T, 3)."""
    a, b = p1 - p0, p2 - p1
    n = np.cross(a, b)
    na = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    ang = np.arctan2(np.linalg.norm(n, axis=-1), np.einsum("ti,ti->t", a, b))
    return ang, n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12) * (na[:, None] > 0)


#: Pose bend (radians, about the forearm's / shin's X axis) that lets Blender's pole-target IK work.
PRE_BEND = 0.01

CHAINS = {"arm_l": ("upperarm_l", "forearm_l", "hand_l"), "arm_r": ("upperarm_r", "forearm_r", "hand_r"),
          "leg_l": ("thigh_l", "calf_l", "foot_l"), "leg_r": ("thigh_r", "calf_r", "foot_r")}


def measure_pole_angles(target, source, roles_t, roles_s, constraints, frames, *, k=5, min_bend_deg=10.0):
    """Set each IK chain's pole angle to the one that bends it in the source's plane (measured).

    On the ``k`` frames where the source's limb is most bent, the signed
    angle (about the shoulder-wrist or hip-ankle axis) between the target's
    bend plane and the source's is measured with the pole angle at 0, both
    signs of the correction are tried, and the better one is iterated until
    the planes agree (a few evaluations per chain, all chains at once). On the
    own skeleton this is the angle that keeps the rest pose (the target's
    bone frames are the source's).

    Returns
    -------
    dict
        Chain -> angle in degrees, or None (never bent more than
        ``min_bend_deg``: the pole target is removed, the chain solved without).
    """
    import bpy

    src = pose_world(source, frames)[:, :, :3, 3]
    pick, angles = {}, {}
    for ch, (a, b, c) in CHAINS.items():
        ang, _ = _bend(src[:, roles_s[a]], src[:, roles_s[b]], src[:, roles_s[c]])
        order = [i for i in np.argsort(-ang)[:k] if np.degrees(ang[i]) >= min_bend_deg]
        if not order:
            constraints[ch].pole_target = None
            angles[ch] = None
            continue
        pick[ch] = [frames[i] for i in order]
    if not pick:
        return angles
    eval_frames = sorted({f for v in pick.values() for f in v})
    src_e = pose_world(source, eval_frames)[:, :, :3, 3]
    rows = {ch: [eval_frames.index(f) for f in v] for ch, v in pick.items()}

    def measure(values):
        """Per chain: (mean plane angle, circular mean of the signed angle target -> source), radians."""
        for ch, v in values.items():
            constraints[ch].pole_angle = math.radians(v)
        tgt = pose_world(target, eval_frames)[:, :, :3, 3]
        out = {}
        for ch, r in rows.items():
            a, b, c = CHAINS[ch]
            _, ns = _bend(src_e[r, roles_s[a]], src_e[r, roles_s[b]], src_e[r, roles_s[c]])
            _, nt = _bend(tgt[r, roles_t[a]], tgt[r, roles_t[b]], tgt[r, roles_t[c]])
            u = src_e[r, roles_s[c]] - src_e[r, roles_s[a]]
            u /= np.maximum(np.linalg.norm(u, axis=-1, keepdims=True), 1e-12)
            sa = np.arctan2(np.einsum("ti,ti->t", u, np.cross(nt, ns)), np.einsum("ti,ti->t", nt, ns))
            err = np.arccos(np.clip(np.einsum("ti,ti->t", ns, nt), -1.0, 1.0))
            out[ch] = (float(err.mean()), float(np.arctan2(np.sin(sa).mean(), np.cos(sa).mean())))
        return out

    cur = {ch: 0.0 for ch in pick}
    m0 = measure(cur)
    tries = [{ch: math.degrees(sign * m0[ch][1]) for ch in pick} for sign in (1.0, -1.0)]
    m = [measure(t) for t in tries]
    sign = {ch: (1.0 if m[0][ch][0] <= m[1][ch][0] else -1.0) for ch in pick}
    cur = {ch: tries[0 if sign[ch] > 0 else 1][ch] for ch in pick}
    best = {ch: (min(m[0][ch][0], m[1][ch][0], m0[ch][0]), cur[ch] if min(m[0][ch][0], m[1][ch][0]) <= m0[ch][0]
                 else 0.0) for ch in pick}
    last = {ch: m[0 if sign[ch] > 0 else 1][ch] for ch in pick}
    for _ in range(4):
        cur = {ch: cur[ch] + math.degrees(sign[ch] * last[ch][1]) for ch in pick}
        last = measure(cur)
        for ch in pick:
            if last[ch][0] < best[ch][0]:
                best[ch] = (last[ch][0], cur[ch])
    for ch in pick:
        a = (best[ch][1] + 180.0) % 360.0 - 180.0
        constraints[ch].pole_angle = math.radians(a)
        angles[ch] = round(a, 3)
    bpy.context.view_layer.update()
    return angles


def _pre_bend(target, source, roles_t, roles_s, frames):
    """Bend each forearm / shin of the target's pose by :data:`PRE_BEND` the way the limb bends.

    The way: the target's own rest bend where its rest limb is bent (over 3
    degrees), otherwise the source's bend on its most bent frame, carried
    into the target's bone frame through the rest poses.
    """
    Wt = rest_world(target)
    Ws = rest_world(source)
    src = pose_world(source, frames)
    for ch, (a, b, c) in CHAINS.items():
        ua, ma = Wt[roles_t[a], :3, 1], Wt[roles_t[b], :3, 1]
        axis = np.cross(ua, ma)
        if np.degrees(np.arcsin(min(np.linalg.norm(axis), 1.0))) < 3.0:
            P = src[:, :, :3, 3]
            ang, _ = _bend(P[:, roles_s[a]], P[:, roles_s[b]], P[:, roles_s[c]])
            t = int(np.argmax(ang))
            Rm = _unit_cols(src[t, roles_s[b], :3, :3])
            world_axis = np.cross(P[t, roles_s[b]] - P[t, roles_s[a]], P[t, roles_s[c]] - P[t, roles_s[b]])
            axis = _unit_cols(Ws[roles_s[b], :3, :3]) @ (Rm.T @ world_axis)
        axis = _unit_cols(Wt[roles_t[b], :3, :3]).T @ axis
        axis /= max(np.linalg.norm(axis), 1e-12)
        p = target.pose.bones[target.data.bones[roles_t[b]].name]
        p.rotation_mode = "AXIS_ANGLE"
        p.rotation_axis_angle = (PRE_BEND, float(axis[0]), float(axis[1]), float(axis[2]))


def _unit_cols(R):
    return R / np.maximum(np.linalg.norm(R, axis=0, keepdims=True), 1e-12)


def _ends_on_child(bone, length):
    """A bone of real length whose tail is a child's head (its direction is the limb's)."""
    if length < 1e-3:
        return False
    return any((c.head_local - bone.tail_local).length < 1e-3 * max(length, 1.0) for c in bone.children)


def _align(a, b):
    """The smallest rotation (3, 3) taking unit vector ``a`` onto unit vector ``b``."""
    v = np.cross(a, b)
    c = float(np.dot(a, b))
    if c < -1.0 + 1e-9:  # opposite: half a turn about any perpendicular axis
        p = np.cross(a, [1.0, 0.0, 0.0] if abs(a[0]) < 0.9 else [0.0, 1.0, 0.0])
        p /= np.linalg.norm(p)
        return 2.0 * np.outer(p, p) - np.eye(3)
    K = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
    return np.eye(3) + K + K @ K / (1.0 + c)


def _body_frame(W, roles):
    """Rest body frame (3, 3): columns left (right thigh -> left thigh), forward, up (pelvis -> head)."""
    up = W[roles["head"], :3, 3] - W[roles["pelvis"], :3, 3]
    up = up / max(np.linalg.norm(up), 1e-12)
    left = W[roles["thigh_l"], :3, 3] - W[roles["thigh_r"], :3, 3]
    left = left - np.dot(left, up) * up
    left = left / max(np.linalg.norm(left), 1e-12)
    return np.stack([left, np.cross(up, left), up], 1)


def _helper_bones(source, target, pairs, roles_s, roles_t):
    """Helper bones in the source, each parented to a source bone and oriented like a target bone at rest.

    The target's rest orientations are first turned by the rotation between
    the two rest poses' body frames (up: pelvis to head; left: between the
    thighs), so a source whose rest pose lies or faces elsewhere (Rokoko's
    rest lies along X) still drives an upright target upright.

    Parameters
    ----------
    pairs : dict
        Target bone name -> source bone name.

    Returns
    -------
    dict
        Target bone name -> helper bone name.
    """
    import bpy
    from mathutils import Matrix

    Ws, Wtr = rest_world(source), rest_world(target)
    G = _body_frame(Ws, roles_s) @ _body_frame(Wtr, roles_t).T
    index_s = {b.name: i for i, b in enumerate(source.data.bones)}
    index_t = {b.name: i for i, b in enumerate(target.data.bones)}
    Ls = bone_lengths(source)
    Wt = {}
    for tname, sname in pairs.items():
        R = G @ _unit_cols(Wtr[index_t[tname], :3, :3])
        i = index_s[sname]
        if i != roles_s["pelvis"] and _ends_on_child(source.data.bones[sname], Ls[i]):
            # then each bone turned onto its source bone's rest direction (rest poses matched bone by bone)
            R = _align(R[:, 1], _unit_cols(Ws[i, :3, :3])[:, 1]) @ R
        Wt[tname] = Matrix(R.tolist())
    rot_src = source.matrix_world.to_3x3().normalized()
    heads = {b.name: b.head_local.copy() for b in source.data.bones}
    length = max(b.length for b in source.data.bones) * 0.2 + 1e-3
    _set_mode(source, "EDIT")
    arm = source.data
    out = {}
    for tname, sname in pairs.items():
        r = rot_src.inverted() @ Wt[tname]
        eb = arm.edit_bones.new("nik_helper_" + tname)
        eb.head = heads[sname]
        eb.tail = heads[sname] + r.col[1] * length
        eb.matrix = Matrix.Translation(heads[sname]) @ r.to_4x4()
        eb.length = length
        eb.parent = arm.edit_bones[sname]
        eb.use_connect = False
        out[tname] = eb.name
    bpy.ops.object.mode_set(mode="OBJECT")
    return out


def constraint_bake(source_path, target, *, scale=1.0, up="Y", mode="dense", own=None, frames=None,
                    pole_cache=None, keep_source=False):
    """Blender's constraint bake of a BVH clip onto ``target``: import, constraints, ``nla.bake``.

    Parameters
    ----------
    source_path : str
        The BVH clip (every frame is baked; cut the file for fewer).
    target : bpy.types.Object
        The target armature, in its rest pose, at the origin.
    scale : float
        Metres per file unit of the source (Blender's ``global_scale``).
    up : str
        ``"Y"`` or ``"Z"``: the source's up axis.
    mode : str
        ``"dense"`` (pole-target IK and rotation copies) or ``"sparse"``
        (IK chains on the six effectors).
    own : bool, optional
        The target is the source's own skeleton (same bone names and rest
        positions): no scaling, no floor move, rotations copied by name.
        Default: decided by the bone names.
    frames : int, optional
        Bake only the first ``frames`` frames.
    pole_cache : dict, optional
        Measured pole angles kept per (target, source skeleton) so that a
        batch measures them once per skeleton, as a user sets up a rig once.
    keep_source : bool
        Leave the source armature in the scene (its object is returned as
        ``result.source``).

    Returns
    -------
    BlenderBake
    """
    import bpy

    t0 = time.perf_counter()
    source = import_bvh(source_path, scale=scale, up=up)
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    act = source.animation_data.action
    n_src = int(round(act.frame_range[1] - act.frame_range[0])) + 1
    first = int(round(act.frame_range[0]))
    n = n_src if frames is None else min(int(frames), n_src)
    names_s, parents_s = bone_tree(source)
    names_t, parents_t = bone_tree(target)
    roles_s = skeleton_roles(names_s, parents_s)
    roles_t = skeleton_roles(names_t, parents_t)
    roles_t["_body"] = body_joints(roles_t, parents_t)
    if own is None:
        own = set(names_t) <= set(names_s)
    if not ik_applicable(target, roles_t) and mode == "dense":
        raise ValueError("Blender's IK needs forearm / shin tails on the wrists / ankles; this rig's are not")
    result = BlenderBake(frames=n)
    if not own:
        s = rig_scale(target, source, roles_t, roles_s)
        source.scale = (s, s, s)
        bpy.context.view_layer.update()
        L = bone_lengths(source)
        fp, _ = foot_points(pose_world(source, range(first, first + n)), L, roles_s, parents_s)
        rt = rest_world(target)
        ft, _ = foot_points(rt[None], bone_lengths(target), roles_t, parents_t)
        dz = float(np.nanmin(ft[..., 2]) - np.nanmin(fp[..., 2]))
        source.location = (0.0, 0.0, dz)
        bpy.context.view_layer.update()
        result.scale, result.offset = s, np.array([0.0, 0.0, dz])
    pb = target.pose.bones
    con = {}
    if mode == "dense":
        pairs = _mapping(roles_t, roles_s, names_t, names_s, own)
        if own:
            helpers = {names_t[t]: names_s[s] for t, s in pairs.items()}
        else:
            helpers = _helper_bones(source, target, {names_t[t]: names_s[s] for t, s in pairs.items()},
                                    roles_s, roles_t)
        c = pb[names_t[roles_t["pelvis"]]].constraints.new("COPY_LOCATION")
        c.target, c.subtarget = source, names_s[roles_s["pelvis"]]
        for t in sorted(pairs):
            c = pb[names_t[t]].constraints.new("COPY_ROTATION")
            c.target, c.subtarget = source, helpers[names_t[t]]
        for ch, (_, mid, end) in CHAINS.items():
            c = pb[names_t[roles_t[mid]]].constraints.new("IK")
            c.target, c.subtarget = source, names_s[roles_s[end]]
            c.pole_target, c.pole_subtarget = source, names_s[roles_s[mid]]
            c.chain_count = 2
            con[ch] = c
        # Blender's IK ignores a pole target (and misses its goal) when the chain starts exactly at rest;
        # the usual remedy is a slight bend of the chain's pose (invisible after the bake), in the
        # direction the limb bends, or the chain solves with its upper bone twisted half a turn
        _pre_bend(target, source, roles_t, roles_s, list(range(first, first + n)))
        bpy.context.view_layer.update()
        key = None
        if pole_cache is not None:
            key = (target.name, tuple(names_s), round(result.scale, 6))
        if pole_cache is not None and key in pole_cache:
            result.pole_angles = dict(pole_cache[key])
            for ch, a in result.pole_angles.items():
                if a is None:
                    con[ch].pole_target = None
                else:
                    con[ch].pole_angle = math.radians(a)
        else:
            result.pole_angles = measure_pole_angles(target, source, roles_t, roles_s, con,
                                                     list(range(first, first + n)))
            if pole_cache is not None:
                pole_cache[key] = dict(result.pole_angles)
    elif mode == "sparse":
        c = pb[names_t[roles_t["pelvis"]]].constraints.new("COPY_LOCATION")
        c.target, c.subtarget = source, names_s[roles_s["pelvis"]]
        neck_end = parents_t[roles_t["head"]]
        chain = _chain_to_root(neck_end, parents_t)
        c = pb[names_t[neck_end]].constraints.new("IK")
        c.target, c.subtarget = source, names_s[roles_s["head"]]
        c.chain_count = len(chain) - chain.index(roles_t["pelvis"]) - 1
        for s in "lr":
            c = pb[names_t[roles_t["forearm_" + s]]].constraints.new("IK")
            c.target, c.subtarget = source, names_s[roles_s["hand_" + s]]
            c.chain_count = 3 if roles_t["clavicle_" + s] is not None else 2
            c = pb[names_t[roles_t["calf_" + s]]].constraints.new("IK")
            c.target, c.subtarget = source, names_s[roles_s["foot_" + s]]
            c.chain_count = 2
    else:
        raise ValueError("mode must be 'dense' or 'sparse'")
    t_con = time.perf_counter() - t1
    t2 = time.perf_counter()
    _set_mode(target, "POSE")
    for p in target.pose.bones:
        if hasattr(p, "select"):
            p.select = True
        else:
            p.bone.select = True
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = first, first + n - 1
    bpy.ops.nla.bake(frame_start=first, frame_end=first + n - 1, only_selected=True, visual_keying=True,
                     clear_constraints=True, bake_types={"POSE"})
    bpy.ops.object.mode_set(mode="OBJECT")
    t_bake = time.perf_counter() - t2
    result.seconds = {"import": t_import, "constraints": t_con, "bake": t_bake,
                      "total": time.perf_counter() - t0}
    result.first_frame = first
    if keep_source:
        result.source = source
    else:
        delete_object(source)
    return result


def write_cut_bvh(src, dst, frames, *, loop=True):
    """Write ``src`` with exactly ``frames`` frames to ``dst`` (cut, or looped when shorter).

    A loop repeats the motion lines as they are (the root jumps back at each
    repeat: fine for timing, not for quality figures). Returns the frame count.
    """
    with open(src, "r", encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    k = next(i for i, l in enumerate(lines) if l.strip().upper().startswith("MOTION"))
    ft = next(i for i in range(k, len(lines)) if lines[i].strip().lower().startswith("frame time"))
    motion = [l for l in lines[ft + 1:] if l.strip()]
    if not motion:
        raise ValueError("{}: no frames".format(src))
    if len(motion) < frames and not loop:
        frames = len(motion)
    rows = [motion[i % len(motion)] for i in range(frames)]
    with open(dst, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines[:k + 1]) + "\n")
        fh.write("Frames: {}\n".format(frames))
        fh.write(lines[ft].strip() + "\n")
        fh.write("\n".join(rows) + "\n")
    return frames


def run_batch(folder, target_path, *, scale=1.0, up="Y", mode="dense", export_dir=None):
    """Blender's constraint bake of every ``.bvh`` of ``folder`` onto one target (one process, as a user's script).

    The target (a BVH skeleton in its rest pose, or ``rigify``) is loaded
    once; each clip is imported, constrained, baked, optionally exported
    with Blender's BVH exporter, and its source deleted. Pole angles are
    measured once per source skeleton. Returns (clips, frames, seconds).
    """
    import bpy

    t0 = time.perf_counter()
    new_scene()
    if target_path == "rigify":
        target = add_metarig()
    else:
        target = import_bvh(target_path, scale=scale, up=up, rest=True)
    cache, frames, clips = {}, 0, 0
    for name in sorted(os.listdir(folder)):
        if not name.lower().endswith(".bvh"):
            continue
        to_rest(target)
        res = constraint_bake(os.path.join(folder, name), target, scale=scale, up=up, mode=mode, pole_cache=cache)
        if export_dir:
            _set_mode(target, "OBJECT")
            _quiet(bpy.ops.export_anim.bvh, filepath=os.path.join(export_dir, name), check_existing=False,
                   frame_start=res.first_frame, frame_end=res.first_frame + res.frames - 1, root_transform_only=False)
        ad = target.animation_data
        if ad is not None and ad.action is not None:
            act = ad.action
            ad.action = None
            bpy.data.actions.remove(act)
        frames += res.frames
        clips += 1
    return clips, frames, time.perf_counter() - t0


def _main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("clip", nargs="?", help="one BVH clip (or --batch DIR)")
    ap.add_argument("--batch", metavar="DIR", default=None,
                    help="bake every .bvh of DIR onto --target (a BVH skeleton or rigify) in one process")
    ap.add_argument("--export-dir", default=None, help="with --batch: export each baked clip with Blender's BVH exporter")
    ap.add_argument("--target", default="own",
                    help="own (the clip's own skeleton; with --batch the first clip's), rigify, or with --batch "
                         "a BVH file")
    ap.add_argument("--mode", default="dense", choices=("dense", "sparse"))
    ap.add_argument("--max-frames", type=int, default=None)
    ap.add_argument("--scale", type=float, default=None, help="metres per file unit (default: by folder)")
    ap.add_argument("--up", default=None, choices=("Y", "Z"))
    args = ap.parse_args(argv)
    if args.batch:
        folder = os.path.basename(os.path.abspath(args.batch)).split("__")[0]
        scale, up, _ = FOLDER_UNITS.get(folder, (1.0, "Y", None))
        target = args.target if args.target != "own" else sorted(
            os.path.join(args.batch, f) for f in os.listdir(args.batch) if f.lower().endswith(".bvh"))[0]
        clips, frames, seconds = run_batch(args.batch, target, scale=args.scale or scale, up=args.up or up,
                                           mode=args.mode, export_dir=args.export_dir)
        print("{} clips, {} frames, {:.2f} s, {:.0f} frames/s".format(clips, frames, seconds, frames / seconds))
        return 0
    if args.clip is None:
        ap.error("give a CLIP or --batch DIR")
    folder = os.path.basename(os.path.dirname(os.path.abspath(args.clip)))
    scale, up, _ = FOLDER_UNITS.get(folder, (1.0, "Y", None))
    scale = args.scale or scale
    up = args.up or up
    new_scene()
    target = import_bvh(args.clip, scale=scale, up=up, rest=True) if args.target == "own" else add_metarig()
    res = constraint_bake(args.clip, target, scale=scale, up=up, mode=args.mode, frames=args.max_frames,
                          keep_source=True)
    frames = list(range(res.first_frame, res.first_frame + res.frames))
    names_t, parents_t = bone_tree(target)
    names_s, parents_s = bone_tree(res.source)
    rt, rs = skeleton_roles(names_t, parents_t), skeleton_roles(names_s, parents_s)
    keys = ["pelvis", "head"] + [k + s for k in ("upperarm_", "forearm_", "hand_", "thigh_", "calf_", "foot_")
                                  for s in "lr"]
    pt = pose_world(target, frames)[:, [rt[k] for k in keys]][..., :3, 3]
    ps = pose_world(res.source, frames)[:, [rs[k] for k in keys]][..., :3, 3]
    err = np.linalg.norm(pt - ps, axis=-1) * 1000.0
    print("{} -> {} ({}): {} frames, {:.2f} s ({}), {:.0f} frames/s; pole angles {}".format(
        os.path.basename(args.clip), args.target, args.mode, res.frames, res.seconds["total"],
        ", ".join("{} {:.2f}".format(k, v) for k, v in res.seconds.items() if k != "total"),
        res.frames / res.seconds["total"], res.pole_angles))
    print("joint distance to the source (14 joints, mm): mean {:.3f}, max {:.3f}".format(err.mean(), err.max()))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
