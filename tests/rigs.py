"""Test armatures as plain data (:class:`RigDescription`) and in Blender.

Plain-data builders (no ``bpy``):

- :func:`humanoid` builds a humanoid in one of several naming conventions
  (``CONVENTION_NAMES``), rest pose ``"T"`` or ``"A"``, 1-5 spine bones,
  0-2 neck bones, optional clavicles/toes/twist/IK/finger bones, and bone
  axes ``"default"`` (Y along the bone, Blender's roll 0), ``"random"``
  (random rolls) or ``"world"`` (every bone's axes = armature axes, tails
  along +Y: a BVH with joint orients);
- :func:`rigify_metarig_description` is Rigify's human meta-rig, stored in
  ``tests/data/rigify_metarig.json``.

Blender helpers (import ``bpy`` lazily):

- :func:`description_from_blender` reads an armature object with
  ``foreach_get`` (the reference extraction for the Blender layer);
- :func:`rigify_metarig_from_blender` adds Rigify's human meta-rig and reads
  it (:func:`save_rigify_metarig` rewrites the stored copy);
- :func:`build_blender_armature` creates an armature object from a
  description (for other engineers' Blender tests).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from devpkg import import_package

import_package()
from neural_ik.model.skeleton import CANONICAL, JOINTS  # noqa: E402
from neural_ik.retarget.rig import RigDescription  # noqa: E402

_SIDES = {"L": {"Side": "Left", "side": "left", "S": "L", "s": "l"},
          "R": {"Side": "Right", "side": "right", "S": "R", "s": "r"}}

#: Per convention: slot -> name template ({Side} Left/Right, {side}, {S} L/R, {s} l/r),
#: "spine"/"neck": callables n -> list of names.
CONVENTION_NAMES = {
    "mixamo": dict(
        pelvis="mixamorig:Hips",
        spine=lambda n: ["mixamorig:Spine"] + [f"mixamorig:Spine{k}" for k in range(1, n)],
        neck=lambda n: ["mixamorig:Neck"] + [f"mixamorig:Neck{k}" for k in range(1, n)],
        head="mixamorig:Head", head_end="mixamorig:HeadTop_End",
        clavicle="mixamorig:{Side}Shoulder", upperarm="mixamorig:{Side}Arm",
        forearm="mixamorig:{Side}ForeArm", hand="mixamorig:{Side}Hand",
        finger="mixamorig:{Side}HandIndex{k}",
        thigh="mixamorig:{Side}UpLeg", calf="mixamorig:{Side}Leg", foot="mixamorig:{Side}Foot",
        toe="mixamorig:{Side}ToeBase", toe_end="mixamorig:{Side}Toe_End"),
    "unreal": dict(
        root="root", pelvis="pelvis",
        spine=lambda n: [f"spine_{k:02d}" for k in range(1, n + 1)],
        neck=lambda n: [f"neck_{k:02d}" for k in range(1, n + 1)],
        head="head", clavicle="clavicle_{s}", upperarm="upperarm_{s}", forearm="lowerarm_{s}",
        hand="hand_{s}", finger="index_{k:02d}_{s}", thigh="thigh_{s}", calf="calf_{s}",
        foot="foot_{s}", toe="ball_{s}",
        twist_upperarm="upperarm_twist_01_{s}", twist_forearm="lowerarm_twist_01_{s}",
        twist_thigh="thigh_twist_01_{s}", twist_calf="calf_twist_01_{s}",
        ik=["ik_foot_root", "ik_foot_{s}", "ik_hand_root", "ik_hand_gun", "ik_hand_{s}"]),
    "rigify_deform": dict(
        pelvis="DEF-spine",
        spine=lambda n: [f"DEF-spine.{k:03d}" for k in range(1, n + 1)],
        neck=lambda n: [f"DEF-spine.{k:03d}" for k in range(10, 10 + n)],
        head="DEF-spine.020", clavicle="DEF-shoulder.{S}", upperarm="DEF-upper_arm.{S}",
        forearm="DEF-forearm.{S}", hand="DEF-hand.{S}", finger="DEF-f_index.{k:02d}.{S}",
        thigh="DEF-thigh.{S}", calf="DEF-shin.{S}", foot="DEF-foot.{S}", toe="DEF-toe.{S}",
        segment=True),
    "smpl": dict(
        pelvis="Pelvis", spine=lambda n: [f"Spine{k}" for k in range(1, n + 1)],
        neck=lambda n: ["Neck"] + [f"Neck{k}" for k in range(1, n)], head="Head",
        clavicle="{S}_Collar", upperarm="{S}_Shoulder", forearm="{S}_Elbow", hand="{S}_Wrist",
        hand_end="{S}_Hand", thigh="{S}_Hip", calf="{S}_Knee", foot="{S}_Ankle", toe="{S}_Foot"),
    "vrm": dict(
        pelvis="J_Bip_C_Hips",
        spine=lambda n: ["J_Bip_C_Spine", "J_Bip_C_Chest", "J_Bip_C_UpperChest", "J_Bip_C_Spine4",
                         "J_Bip_C_Spine5"][:n],
        neck=lambda n: ["J_Bip_C_Neck", "J_Bip_C_Neck2"][:n], head="J_Bip_C_Head",
        clavicle="J_Bip_{S}_Shoulder", upperarm="J_Bip_{S}_UpperArm", forearm="J_Bip_{S}_LowerArm",
        hand="J_Bip_{S}_Hand", thigh="J_Bip_{S}_UpperLeg", calf="J_Bip_{S}_LowerLeg",
        foot="J_Bip_{S}_Foot", toe="J_Bip_{S}_ToeBase"),
    "vrm_spec": dict(
        pelvis="hips", spine=lambda n: ["spine", "chest", "upperChest", "spine4", "spine5"][:n],
        neck=lambda n: ["neck", "neck2"][:n], head="head",
        clavicle="{side}Shoulder", upperarm="{side}UpperArm", forearm="{side}LowerArm",
        hand="{side}Hand", thigh="{side}UpperLeg", calf="{side}LowerLeg", foot="{side}Foot",
        toe="{side}Toes"),
    "cc": dict(
        root="CC_Base_BoneRoot", pelvis="CC_Base_Hip", hip_extra="CC_Base_Pelvis",
        spine=lambda n: ["CC_Base_Waist", "CC_Base_Spine01", "CC_Base_Spine02", "CC_Base_Spine03",
                         "CC_Base_Spine04"][:n],
        neck=lambda n: ["CC_Base_NeckTwist01", "CC_Base_NeckTwist02"][:n], head="CC_Base_Head",
        clavicle="CC_Base_{S}_Clavicle", upperarm="CC_Base_{S}_Upperarm",
        forearm="CC_Base_{S}_Forearm", hand="CC_Base_{S}_Hand", thigh="CC_Base_{S}_Thigh",
        calf="CC_Base_{S}_Calf", foot="CC_Base_{S}_Foot", toe="CC_Base_{S}_ToeBase",
        twist_upperarm="CC_Base_{S}_UpperarmTwist01", twist_forearm="CC_Base_{S}_ForearmTwist01"),
    "cmu": dict(
        pelvis="Hips", leg_extra="{S}HipJoint",
        spine=lambda n: ["LowerBack", "Spine", "Spine1", "Spine2", "Spine3"][:n],
        neck=lambda n: ["Neck", "Neck1"][:n], head="Head",
        clavicle="{Side}Shoulder", upperarm="{Side}Arm", forearm="{Side}ForeArm", hand="{Side}Hand",
        finger="{Side}FingerBase", thigh="{Side}UpLeg", calf="{Side}Leg", foot="{Side}Foot",
        toe="{Side}ToeBase"),
    "mmd": dict(
        root="center", pelvis="lower body",
        spine=lambda n: ["upper body", "upper body 2", "upper body 3", "upper body 4", "upper body 5"][:n],
        neck=lambda n: ["neck", "neck 2"][:n], head="head",
        clavicle="shoulder_{S}", upperarm="arm_{S}", forearm="elbow_{S}", hand="wrist_{S}",
        thigh="leg_{S}", calf="knee_{S}", foot="ankle_{S}", toe="toe_{S}",
        inchain_twist="arm twist_{S}", ik=["leg IK_{S}"]),
    "mmd_english": dict(
        pelvis="Lower body", spine=lambda n: ["Upper body", "Upper body 2", "Upper body 3",
                                               "Upper body 4", "Upper body 5"][:n],
        neck=lambda n: ["Neck", "Neck 2"][:n], head="Head",
        clavicle="{Side} shoulder", upperarm="{Side} arm", forearm="{Side} elbow",
        hand="{Side} wrist", thigh="{Side} leg", calf="{Side} knee", foot="{Side} ankle",
        toe="{Side} toe"),
    "generic_suffix": dict(
        pelvis="Hips", spine=lambda n: ["Spine", "Chest", "UpperChest", "Spine4", "Spine5"][:n],
        neck=lambda n: ["Neck", "Neck2"][:n], head="Head",
        clavicle="Shoulder_{S}", upperarm="UpperArm_{S}", forearm="LowerArm_{S}", hand="Hand_{S}",
        thigh="UpperLeg_{S}", calf="LowerLeg_{S}", foot="Foot_{S}", toe="Toes_{S}"),
    "generic_prefix": dict(
        pelvis="Pelvis", spine=lambda n: ["Spine_01", "Spine_02", "Spine_03", "Spine_04", "Spine_05"][:n],
        neck=lambda n: ["Neck", "Neck_02"][:n], head="Head",
        clavicle="{S}_Clavicle", upperarm="{S}_UpperArm", forearm="{S}_Forearm", hand="{S}_Hand",
        thigh="{S}_Thigh", calf="{S}_Calf", foot="{S}_Foot", toe="{S}_Toe"),
}


def _fmt(tpl, side, k=0):
    return tpl.format(k=k, **_SIDES[side]) if side else tpl.format(k=k)


def _rot_about(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def bone_matrix(head, tail, roll=0.0):
    """Blender-like ``matrix_local``: Y along head->tail, then ``roll`` about Y."""
    y = np.asarray(tail, float) - np.asarray(head, float)
    y = y / np.linalg.norm(y)
    # smallest rotation taking +Y onto y (Blender's vec_roll_to_mat3 with roll 0)
    ref = np.array([0.0, 1.0, 0.0])
    c = float(np.dot(ref, y))
    if c < -1 + 1e-9:
        R = np.diag([-1.0, -1.0, 1.0])
    else:
        v = np.cross(ref, y)
        Kx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
        R = np.eye(3) + Kx + Kx @ Kx / (1 + c)
    R = R @ _rot_about([0, 1, 0], roll)
    M = np.eye(4)
    M[:3, :3] = R
    M[:3, 3] = head
    return M


def humanoid(convention="mixamo", *, pose="T", spine=3, neck=1, clavicles=True, toes=True,
             axes="default", twist=None, fingers=None, ik=None, seed=0, scale=1.0,
             proportions=1.0, face="-Y", ends=True, knuckles=False, hand_roll=0.0) -> RigDescription:
    """Build a humanoid rig description.

    Parameters
    ----------
    convention : str
        Key of :data:`CONVENTION_NAMES`.
    pose : "T" or "A"
        Rest pose of the arms (A: 45 degrees down, elbows bent 15 degrees).
    spine, neck : int
        Number of spine bones between pelvis and neck (1-5), neck bones (0-2).
    axes : "default", "random" or "world"
        Bone axes: Y along the bone with roll 0, random rolls, or the
        armature's axes for every bone (BVH with joint orients).
    twist, fingers, ik : bool or None
        Add twist / finger / IK helper bones (None: when the convention has them).
    scale : float
        Uniform scale (e.g. 100 for a centimetre rig).
    proportions : float
        Limb length factor relative to the canonical skeleton.
    face : "-Y" or "+Y"
        Direction the character faces in armature space.
    knuckles : bool
        Add index and pinky base bones under each hand (``{Side}HandIndex0`` /
        ``{Side}HandPinky0``, 4 cm forward / back of the hand tip).
    hand_roll : float
        Degrees the hand (with its knuckles) is rolled about the hand axis in
        the rest (90: palms forward for the left hand).
    """
    names = CONVENTION_NAMES[convention]
    rng = np.random.default_rng(seed)
    kp = CANONICAL.rest_keypoints()
    J = {n: kp[i].copy() for i, n in enumerate(JOINTS)}
    bones = []  # (name, parent, head, tail)

    def add(name, parent, head, tail):
        bones.append((name, parent, np.asarray(head, float), np.asarray(tail, float)))
        return name

    root = None
    if "root" in names:
        root = add(names["root"], None, [0, 0, 0], [0, 0.2, 0])
    pelvis_h = J["pelvis"]
    spine_names = names["spine"](spine)
    neck_names = names["neck"](neck) if neck else []
    chest_z = J["spine3"][2]
    z0 = J["spine1"][2]
    sp_z = [chest_z] if spine == 1 else list(np.linspace(z0, chest_z, spine))
    nk_z = list(np.linspace(J["neck"][2], J["head"][2], neck + 1))[:-1] if neck else []
    chain_z = sp_z + nk_z + [J["head"][2]]
    pelvis = add(names["pelvis"], root, pelvis_h, [0, 0, chain_z[0]])
    parent = pelvis
    all_chain = spine_names + neck_names
    for k, nm in enumerate(all_chain):
        parent = add(nm, parent, [0, 0, chain_z[k]], [0, 0, chain_z[k + 1]])
    chest = spine_names[-1]
    head = add(names["head"], parent, J["head"], J["head"] + [0, 0, 0.18])
    if ends and "head_end" in names:
        add(names["head_end"], head, J["head"] + [0, 0, 0.18], J["head"] + [0, 0, 0.26])
    want_twist = twist if twist is not None else True
    want_fingers = fingers if fingers is not None else True
    want_ik = ik if ik is not None else True
    pr = proportions
    for S, sx in (("L", 1.0), ("R", -1.0)):
        s = S.lower()
        sh = J[f"upperarm_{s}"].copy()
        el = sh + (J[f"forearm_{s}"] - sh) * pr
        wr = el + (J[f"hand_{s}"] - J[f"forearm_{s}"]) * pr
        tip = wr + np.array([sx * 0.18, 0, 0])
        hand_rot = np.eye(3)
        if pose == "A":
            R = _rot_about([0, 1, 0], sx * np.radians(45.0))  # arm down about the forward axis
            bend = _rot_about([0, 0, 1], -sx * np.radians(15.0))  # elbow bent forward a little
            el = sh + R @ (el - sh)
            wr = el + R @ bend @ (wr - J[f"forearm_{s}"] - (sh - sh))
            wr = el + R @ bend @ (J[f"hand_{s}"] - J[f"forearm_{s}"]) * pr
            tip = wr + R @ bend @ np.array([sx * 0.18, 0, 0])
            hand_rot = R @ bend
        par = chest
        if clavicles:
            par = add(_fmt(names["clavicle"], S), chest, J[f"clavicle_{s}"], sh)
        ua = add(_fmt(names["upperarm"], S), par, sh, el)
        if "inchain_twist" in names:
            mid = (sh + el) / 2
            bones[-1] = (ua, par, sh, mid)
            ua2 = add(_fmt(names["inchain_twist"], S), ua, mid, el)
        else:
            ua2 = ua
        fa = add(_fmt(names["forearm"], S), ua2, el, wr)
        if names.get("segment"):
            # Rigify-style in-chain segments: upper_arm -> upper_arm.001 -> forearm...
            mid = (sh + el) / 2
            bones[-2 if False else [b[0] for b in bones].index(ua)] = (ua, par, sh, mid)
            seg = add(ua + ".001", ua, mid, el)
            bones[[b[0] for b in bones].index(fa)] = (fa, seg, el, (el + wr) / 2)
            fa_seg = add(fa + ".001", fa, (el + wr) / 2, wr)
            hand_parent = fa_seg
        else:
            hand_parent = fa
        hd = add(_fmt(names["hand"], S), hand_parent, wr, tip)
        if knuckles:
            roll = _rot_about(tip - wr, np.radians(hand_roll))
            for nm, dy in (("{Side}HandIndex0", -0.04), ("{Side}HandPinky0", 0.04)):
                kh = tip + roll @ hand_rot @ np.array([0.0, dy, 0.0])
                add(_fmt(nm, S), hd, kh, kh + (tip - wr) * 0.3)
        if "hand_end" in names:
            add(_fmt(names["hand_end"], S), hd, tip, tip + (tip - wr) * 0.3)
        if want_fingers and "finger" in names:
            p = hd
            d = (tip - wr) / 3
            for k in range(1, 4 if "{k" in names["finger"] else 2):
                p = add(_fmt(names["finger"], S, k), p, tip + d * (k - 1), tip + d * k)
        if want_twist:
            for slot, a, b_, par_b in (("twist_upperarm", sh, el, ua), ("twist_forearm", el, wr, fa)):
                if slot in names:
                    add(_fmt(names[slot], S), par_b, (a + b_) / 2, b_)
        # legs
        hp = J[f"thigh_{s}"]
        kn = hp + (J[f"calf_{s}"] - hp) * pr
        an = kn + (J[f"foot_{s}"] - J[f"calf_{s}"]) * pr
        tb = an + (J[f"toe_{s}"] - J[f"foot_{s}"])
        tt = tb + np.array([0, -0.06, 0])
        lp = pelvis
        if "hip_extra" in names:
            if S == "L":
                add(names["hip_extra"], pelvis, pelvis_h, pelvis_h - [0, 0, 0.1])
            lp = names["hip_extra"]
        if "leg_extra" in names:
            lp = add(_fmt(names["leg_extra"], S), pelvis, pelvis_h, hp)
        th = add(_fmt(names["thigh"], S), lp, hp, kn)
        ca = add(_fmt(names["calf"], S), th, kn, an)
        ft = add(_fmt(names["foot"], S), ca, an, tb if toes else tb + [0, -0.03, 0])
        if toes:
            to = add(_fmt(names["toe"], S), ft, tb, tt)
            if ends and "toe_end" in names:
                add(_fmt(names["toe_end"], S), to, tt, tt + [0, -0.03, 0])
        if want_twist:
            for slot, a, b_, par_b in (("twist_thigh", hp, kn, th), ("twist_calf", kn, an, ca)):
                if slot in names:
                    add(_fmt(names[slot], S), par_b, (a + b_) / 2, b_)
    if want_ik and "ik" in names:
        for tpl in names["ik"]:
            for S in ("L", "R"):
                nm = _fmt(tpl, S)
                if nm in [b[0] for b in bones]:
                    continue
                par = root if nm.endswith(("root",)) or root is None else \
                    next((b[0] for b in reversed(bones) if b[0].startswith("ik_") and b[0].endswith("root")), root)
                add(nm, par, [0.1 * (S == "L"), 0, 0.05], [0.1 * (S == "L"), 0.1, 0.05])
    # assemble
    nm_list = [b[0] for b in bones]
    parents = [nm_list.index(b[1]) if b[1] is not None else -1 for b in bones]
    heads = np.array([b[2] for b in bones]) * scale
    tails = np.array([b[3] for b in bones]) * scale
    flip = np.diag([-1.0, -1.0, 1.0]) if face == "+Y" else np.eye(3)
    heads, tails = heads @ flip.T, tails @ flip.T
    mats = []
    for i in range(len(bones)):
        if axes == "world":
            length = np.linalg.norm(tails[i] - heads[i])
            tails[i] = heads[i] + [0, length, 0]
            M = np.eye(4)
            M[:3, 3] = heads[i]
        else:
            roll = rng.uniform(-np.pi, np.pi) if axes == "random" else 0.0
            M = bone_matrix(heads[i], tails[i], roll)
        mats.append(M)
    return RigDescription(nm_list, parents, np.array(mats), heads, tails,
                          name=f"{convention}_{pose}")


def random_motion(T=24, seed=0, amount=0.6):
    """Random canonical local rotations (T, 22, 3, 3) and a wandering root (T, 3) near the rest pelvis."""
    from neural_ik.model.rotations_np import axis_angle_to_matrix

    rng = np.random.default_rng(seed)
    R = axis_angle_to_matrix(rng.normal(size=(T, len(JOINTS), 3)) * amount)
    root = CANONICAL.offsets[0] + np.cumsum(rng.normal(size=(T, 3)) * 0.02, axis=0)
    return R, root


def straight_line_with_reference(convention="mixamo", **kwargs) -> RigDescription:
    """A rig whose rest is no human pose, with a human ``reference_matrix`` pose.

    Rest: every bone's axes are the armature's, each child's head lies on its
    parent's +Y axis at the human bone distance (a BVH with joint orients at
    zero rotation: everything stacked along +Y). Reference: the pose of that
    rest in which every bone points along its human T-pose direction.
    """
    human = humanoid(convention, **kwargs)
    n = len(human.names)
    length = np.linalg.norm(human.tail - human.head, axis=-1)
    heads = np.zeros((n, 3))
    for i in human.order:
        p = human.parents[i]
        if p >= 0:
            heads[i] = heads[p] + [0, np.linalg.norm(human.head[i] - human.head[p]), 0]
    tails = heads + np.stack([np.zeros(n), length, np.zeros(n)], axis=1)
    mats = np.tile(np.eye(4), (n, 1, 1))
    mats[:, :3, 3] = heads
    ref = np.tile(np.eye(4), (n, 1, 1))
    for i in human.order:
        d = human.tail[i] - human.head[i]
        # world rotation taking +Y onto the human direction (the posed bone)
        ref[i, :3, :3] = bone_matrix(np.zeros(3), d)[:3, :3]
        p = human.parents[i]
        if p >= 0:
            ref[i, :3, 3] = ref[p, :3, 3] + ref[p, :3, :3] @ (heads[i] - heads[p])
        else:
            ref[i, :3, 3] = human.head[i]
    return RigDescription(human.names, human.parents, mats, heads, tails, reference_matrix=ref,
                          name="straight_line")


# --------------------------------------------------------------------------
# Blender (lazy bpy)
# --------------------------------------------------------------------------
def description_from_blender(obj) -> RigDescription:
    """Read an armature object's rest pose with ``foreach_get`` (reference extraction)."""
    bones = obj.data.bones
    n = len(bones)
    ml = np.empty(n * 16, dtype=np.float32)
    hd = np.empty(n * 3, dtype=np.float32)
    tl = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("matrix_local", ml)
    bones.foreach_get("head_local", hd)
    bones.foreach_get("tail_local", tl)
    names = [b.name for b in bones]
    parents = [b.parent.name if b.parent else None for b in bones]
    world = np.array([list(r) for r in obj.matrix_world])
    return RigDescription.from_foreach(names, parents, ml, hd, tl, world_matrix=world, name=obj.name)


#: Rigify's human meta-rig as plain data, read once from Blender (``save_rigify_metarig``):
#: pure tests use it without ``bpy``; ``tests/blender/test_layout.py`` checks it against
#: the live meta-rig.
RIGIFY_METARIG_JSON = Path(__file__).resolve().parent / "data" / "rigify_metarig.json"


def rigify_metarig_from_blender() -> RigDescription:
    """Rigify's human meta-rig (``armature_human_metarig_add``) read from Blender (needs ``bpy``)."""
    import bpy
    import addon_utils

    try:
        addon_utils.enable("rigify")
    except Exception:  # headless registration may complain; the operator still works
        pass
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.active_object
    rig = description_from_blender(obj)
    data = obj.data
    bpy.data.objects.remove(obj)
    bpy.data.armatures.remove(data)
    return rig


def save_rigify_metarig(path=RIGIFY_METARIG_JSON):
    """Write :func:`rigify_metarig_from_blender` to ``path`` (JSON, float32 values as read)."""
    rig = rigify_metarig_from_blender()
    blob = {"names": list(rig.names),
            "parents": [rig.names[p] if p >= 0 else None for p in rig.parents],
            # the flat, column-major buffer ``foreach_get("matrix_local")`` fills
            "matrix_local": np.asarray(rig.matrix_local, dtype=np.float32).transpose(0, 2, 1).reshape(-1).tolist(),
            "head": np.asarray(rig.head, dtype=np.float32).reshape(-1).tolist(),
            "tail": np.asarray(rig.tail, dtype=np.float32).reshape(-1).tolist()}
    Path(path).write_text(json.dumps(blob) + "\n")


@functools.lru_cache(maxsize=1)
def rigify_metarig_description() -> RigDescription:
    """Rigify's human meta-rig as a description, from :data:`RIGIFY_METARIG_JSON` (no ``bpy``)."""
    blob = json.loads(RIGIFY_METARIG_JSON.read_text())
    return RigDescription.from_foreach(blob["names"], blob["parents"],
                                       np.array(blob["matrix_local"], dtype=np.float32),
                                       np.array(blob["head"], dtype=np.float32),
                                       np.array(blob["tail"], dtype=np.float32),
                                       world_matrix=np.eye(4), name="metarig")


def build_blender_armature(rig: RigDescription, name: str = "Rig"):
    """Create an armature object in the current scene from a description.

    Bones get ``matrix_local`` (head, axes, roll) and length from the
    description; not connected. Returns the object (left in object mode).
    """
    import bpy
    from mathutils import Matrix

    data = bpy.data.armatures.new(name)
    obj = bpy.data.objects.new(name, data)
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = Matrix(rig.world_matrix.tolist())
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    ebs = []
    for i, nm in enumerate(rig.names):
        eb = data.edit_bones.new(nm)
        length = float(np.linalg.norm(rig.tail[i] - rig.head[i])) or 1e-3
        eb.head = (0.0, 0.0, 0.0)
        eb.tail = (0.0, length, 0.0)
        eb.matrix = Matrix(rig.matrix_local[i].tolist())
        ebs.append(eb)
    for i, p in enumerate(rig.parents):
        if p >= 0:
            ebs[i].parent = ebs[p]
            ebs[i].use_connect = False
    bpy.ops.object.mode_set(mode="OBJECT")
    return obj
