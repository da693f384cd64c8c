"""Bone-name conventions as data (used by :mod:`.mapping`).

Names are normalised in this order (see :func:`.bone_names.parse_name`):

1. the namespace is dropped (``mixamorig:LeftArm`` -> ``LeftArm``; also
   FBX paths ``a|b``);
2. known prefixes are stripped repeatedly (``DEF-``, ``ORG-``, ``CC_Base_``,
   ``J_Bip_``, ``Bip01 ``...); deprioritising prefixes (``ORG-``, ``MCH-``...)
   mark the bone as a helper;
3. a Blender duplicate suffix ``.001`` is split off (segment number);
4. the rest is split into lowercase tokens at separators, camelCase and
   digit boundaries (``LeftUpLeg`` -> ``left up leg``, ``spine_01`` ->
   ``spine 01``);
5. side tokens at the start or the end (``l``, ``left``, ``r``, ``right``)
   and centre tokens (``c``, ``center``...) are removed and recorded;
6. the remaining letters joined give the *core* (``upper_arm`` ->
   ``upperarm``), looked up in :data:`ROLE_ALIASES`; tokens are checked
   against :data:`IGNORE_TOKENS`, :data:`TWIST_TOKENS`, :data:`HELPER_TOKENS`.

Names only give *hints*: the mapping decides with the hierarchy (chain
position), which resolves e.g. SMPL ``L_Shoulder`` (an upper arm) versus
Mixamo/MMD ``LeftShoulder`` (a clavicle).
"""

from __future__ import annotations

__all__ = [
    "STRIP_PREFIXES",
    "HELPER_PREFIXES",
    "PREFERRED_PREFIXES",
    "LEFT_TOKENS",
    "RIGHT_TOKENS",
    "CENTER_TOKENS",
    "ROLE_ALIASES",
    "IGNORE_TOKENS",
    "IGNORE_CORES",
    "TWIST_TOKENS",
    "HELPER_TOKENS",
    "CONVENTIONS",
]

#: Prefixes removed before tokenising (case-insensitive, longest first).
STRIP_PREFIXES: tuple = (
    "def-", "org-", "mch-", "ctrl-", "ctl-", "wgt-", "vis-", "tgt-", "drv-",
    "def_", "org_", "mch_",
    "cc_base_", "rl_", "j_bip_", "j_sec_", "j_adj_", "j_",
    "mixamorig_", "mixamorig1_", "bip01_", "bip001_", "bip01 ", "bip001 ", "bip01", "bip001",
    "b_", "bone_",
)
#: Prefixes whose bones are helpers (never mapped when a plain bone exists).
HELPER_PREFIXES: tuple = ("org-", "mch-", "ctrl-", "ctl-", "wgt-", "vis-", "tgt-", "drv-",
                          "org_", "mch_", "j_sec_", "j_adj_")
#: Prefixes that mark deforming bones, preferred when names collide.
PREFERRED_PREFIXES: tuple = ("def-", "def_")

LEFT_TOKENS: frozenset = frozenset({"l", "left", "lf", "lft"})
RIGHT_TOKENS: frozenset = frozenset({"r", "right", "rt", "rgt"})
CENTER_TOKENS: frozenset = frozenset({"c", "center", "centre", "mid", "m"})

#: core name (letters only) -> roles it may denote. Several roles = ambiguous,
#: resolved with the hierarchy. Roles: pelvis, spine, neck, head, clavicle,
#: upperarm, forearm, hand, thigh, calf, foot, toe.
ROLE_ALIASES: dict = {
    # pelvis / root of the body
    "hips": ("pelvis",), "hip": ("pelvis", "thigh"), "pelvis": ("pelvis",),
    "lowerbody": ("pelvis", "spine"), "cog": ("pelvis",), "centerofgravity": ("pelvis",),
    # spine
    "spine": ("spine", "pelvis"), "chest": ("spine",), "upperchest": ("spine",),
    "torso": ("spine",), "abdomen": ("spine",), "abdomenupper": ("spine",),
    "abdomenlower": ("spine",), "chestupper": ("spine",), "chestlower": ("spine",),
    "waist": ("spine",), "back": ("spine",), "lowerback": ("spine",), "upperback": ("spine",),
    "upperbody": ("spine",), "ribcage": ("spine",), "stomach": ("spine",),
    "thorax": ("spine",), "lumbar": ("spine",),
    # neck, head
    "neck": ("neck",), "necktwist": ("neck",), "neckbase": ("neck",), "upperneck": ("neck",),
    "head": ("head",), "skull": ("head",),
    # arms
    "clavicle": ("clavicle",), "collar": ("clavicle",), "collarbone": ("clavicle",),
    "shoulder": ("clavicle", "upperarm"), "scapula": ("clavicle",),
    "upperarm": ("upperarm",), "arm": ("upperarm",), "uparm": ("upperarm",),
    "humerus": ("upperarm",), "bicep": ("upperarm",),
    "forearm": ("forearm",), "lowerarm": ("forearm",), "elbow": ("forearm",),
    "loarm": ("forearm",), "radius": ("forearm",), "ulna": ("forearm",),
    "hand": ("hand",), "wrist": ("hand",),
    # legs
    "thigh": ("thigh",), "upleg": ("thigh",), "upperleg": ("thigh",), "femur": ("thigh",),
    "leg": ("thigh", "calf"), "hipjoint": ("thigh",),
    "calf": ("calf",), "shin": ("calf",), "lowerleg": ("calf",), "knee": ("calf",),
    "loleg": ("calf",), "tibia": ("calf",), "crus": ("calf",),
    "foot": ("foot", "toe"), "ankle": ("foot",),
    "toe": ("toe",), "toes": ("toe",), "toebase": ("toe",), "ball": ("toe",),
    "bigtoe": ("toe",), "forefoot": ("toe",),
}

#: Tokens that exclude a bone from the body mapping (fingers, face, ends...).
IGNORE_TOKENS: frozenset = frozenset({
    # fingers
    "thumb", "index", "middle", "ring", "pinky", "little", "finger", "fingers", "palm",
    "metacarpal", "carpal", "knuckle", "pointer",
    # face and head details
    "eye", "eyes", "jaw", "lip", "lips", "brow", "lid", "lids", "cheek", "nose", "ear", "ears",
    "tongue", "teeth", "tooth", "chin", "forehead", "temple", "mouth", "face", "eyelid",
    "eyebrow", "hair", "hat", "glasses",
    # body extras
    "breast", "bust", "heel", "belly", "butt", "glute", "skirt", "cape", "tail", "wing",
    "jiggle", "physics", "cloth", "weapon", "prop", "socket", "attach", "attachment",
    # end sites
    "end", "top", "nub", "site", "tip", "dummy", "null", "effector", "ee",
})
#: Whole cores that are ignored.
IGNORE_CORES: frozenset = frozenset({"root", "armature", "master", "world", "global", "groove",
                                     "center", "centre", "properties", "torsoroot"})
#: Tokens marking a twist/roll helper (reported as twist bones of its limb).
TWIST_TOKENS: frozenset = frozenset({"twist", "roll", "share", "segment", "rot", "bend", "bendy"})
#: Tokens marking a control/helper bone (never mapped).
HELPER_TOKENS: frozenset = frozenset({
    "ik", "fk", "pole", "target", "tgt", "ctrl", "control", "con", "mch", "helper", "tweak",
    "corrective", "driver", "ref", "parent", "socket", "aim", "lookat", "constraint",
    "vis", "wgt", "rig", "hose", "str", "pivot", "sec", "adj", "d", "ex",
})

#: Conventions covered, with example names (documentation and tests).
CONVENTIONS: dict = {
    "rigify_metarig": ["spine", "spine.001", "spine.006", "shoulder.L", "upper_arm.L", "forearm.L",
                       "hand.L", "thigh.L", "shin.L", "foot.L", "toe.L"],
    "rigify_deform": ["DEF-spine", "DEF-upper_arm.L", "DEF-upper_arm.L.001", "DEF-forearm.L",
                      "DEF-thigh.L", "DEF-shin.L", "DEF-foot.L", "DEF-toe.L"],
    "mixamo": ["mixamorig:Hips", "mixamorig:Spine", "mixamorig:Spine1", "mixamorig:Spine2",
               "mixamorig:Neck", "mixamorig:Head", "mixamorig:LeftShoulder", "mixamorig:LeftArm",
               "mixamorig:LeftForeArm", "mixamorig:LeftHand", "mixamorig:LeftUpLeg",
               "mixamorig:LeftLeg", "mixamorig:LeftFoot", "mixamorig:LeftToeBase"],
    "unreal": ["pelvis", "spine_01", "spine_05", "neck_01", "head", "clavicle_l", "upperarm_l",
               "lowerarm_l", "hand_l", "thigh_l", "calf_l", "foot_l", "ball_l",
               "upperarm_twist_01_l", "ik_hand_l"],
    "bvh_cmu": ["Hips", "LHipJoint", "LeftUpLeg", "LeftLeg", "LeftFoot", "LeftToeBase",
                "LowerBack", "Spine", "Spine1", "Neck", "Neck1", "Head", "LeftShoulder",
                "LeftArm", "LeftForeArm", "LeftHand"],
    "character_creator": ["CC_Base_Hip", "CC_Base_Pelvis", "CC_Base_Waist", "CC_Base_Spine01",
                          "CC_Base_Spine02", "CC_Base_NeckTwist01", "CC_Base_Head",
                          "CC_Base_L_Clavicle", "CC_Base_L_Upperarm", "CC_Base_L_Forearm",
                          "CC_Base_L_Hand", "CC_Base_L_Thigh", "CC_Base_L_Calf", "CC_Base_L_Foot",
                          "CC_Base_L_ToeBase", "CC_Base_L_UpperarmTwist01"],
    "generic": ["L_Shoulder", "UpperArm_L", "Hand.L", "Bip01 L UpperArm"],
    "mmd_english": ["lower body", "upper body", "upper body 2", "neck", "head", "Left shoulder",
                    "Left arm", "Left elbow", "Left wrist", "Left leg", "Left knee", "Left ankle",
                    "Left toe", "arm twist_L"],
    "vrm": ["J_Bip_C_Hips", "J_Bip_C_Spine", "J_Bip_C_Chest", "J_Bip_C_UpperChest", "J_Bip_C_Neck",
            "J_Bip_C_Head", "J_Bip_L_Shoulder", "J_Bip_L_UpperArm", "J_Bip_L_LowerArm",
            "J_Bip_L_Hand", "J_Bip_L_UpperLeg", "J_Bip_L_LowerLeg", "J_Bip_L_Foot",
            "J_Bip_L_ToeBase"],
    "vrm_spec": ["hips", "spine", "chest", "upperChest", "neck", "head", "leftShoulder",
                 "leftUpperArm", "leftLowerArm", "leftHand", "leftUpperLeg", "leftLowerLeg",
                 "leftFoot", "leftToes"],
    "smpl": ["Pelvis", "L_Hip", "L_Knee", "L_Ankle", "L_Foot", "Spine1", "Spine2", "Spine3",
             "Neck", "Head", "L_Collar", "L_Shoulder", "L_Elbow", "L_Wrist", "L_Hand"],
}
