"""The layouts Neural IK knows (:data:`LAYOUTS`): pose estimators, motion-capture skeletons and rigs.

Every approximation is written in the layout's ``notes`` (see :mod:`.layouts`).

No ``bpy`` here.
"""

from __future__ import annotations

from ..model.skeleton import KEYPOINTS
from .layout_spec import Layout

__all__ = ["LAYOUTS", "CANONICAL_LAYOUT", "MEDIAPIPE", "COCO17", "H36M17", "OPENPOSE25", "SMPL24", "SMPLX",
           "MIXAMO", "CMU", "CC_BASE", "RIGIFY", "UE_MANNEQUIN", "KINECT_V2"]


# fractions along mid-hip -> mid-shoulder on the canonical rest pose
_F_PELVIS = 0.05 / 0.53   # pelvis 5 cm above the thigh joints
_F_NECK = 0.04 / 0.53     # neck 4 cm above the shoulder line


def _mid(a, b, w=1.0):
    return ((a, 0.5 * w), (b, 0.5 * w))


def _between(lo_pair, hi_pair, f):
    """Point at fraction ``f`` from mid(lo_pair) to mid(hi_pair)."""
    return _mid(*lo_pair, 1.0 - f) + _mid(*hi_pair, f)


def _lr(table):
    """Expand ``{"{L}..": "..{l}"}`` templates to both sides."""
    out = {}
    for src, dst in table.items():
        if "{" in src or "{" in dst:
            for S, s, L, side in (("Left", "left", "L", "l"), ("Right", "right", "R", "r")):
                out[src.format(Side=S, side=s, S=L, s=side)] = dst.format(Side=S, side=s, S=L, s=side)
        else:
            out[src] = dst
    return out


_MEDIAPIPE_NAMES = (
    "nose", "left_eye_inner", "left_eye", "left_eye_outer", "right_eye_inner", "right_eye",
    "right_eye_outer", "left_ear", "right_ear", "mouth_left", "mouth_right", "left_shoulder",
    "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_pinky",
    "right_pinky", "left_index", "right_index", "left_thumb", "right_thumb", "left_hip",
    "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle", "left_heel",
    "right_heel", "left_foot_index", "right_foot_index",
)

# ears ~6 cm above the head joint: head = mid-ear + 0.3 (mid-shoulder - mid-ear)
_HEAD_FROM_EARS = (("left_ear", 0.35), ("right_ear", 0.35), ("left_shoulder", 0.15), ("right_shoulder", 0.15))
_TORSO = {
    "pelvis": _between(("left_hip", "right_hip"), ("left_shoulder", "right_shoulder"), _F_PELVIS),
    "neck": _between(("left_hip", "right_hip"), ("left_shoulder", "right_shoulder"), 1.0 + _F_NECK),
    "head": _HEAD_FROM_EARS,
}
_TORSO_NOTES = (
    "hips map to the thigh joints and shoulders to the upper-arm joints (landmark centres sit a few cm "
    "off the skeleton's joint centres: detector hips are wider and lower); pelvis = mid-hip moved 9% of "
    "the way to mid-shoulder, neck = mid-shoulder moved up 7.5% of the hip-shoulder distance; "
    "head = 0.7 mid-ear + 0.3 mid-shoulder (ears sit ~6 cm above the head joint); spine1..3, "
    "clavicles and head_top are masked"
)

MEDIAPIPE = Layout(
    "mediapipe_pose",
    "MediaPipe Pose / BlazePose 33 landmarks (world landmarks: metres, hips origin, y down)",
    _MEDIAPIPE_NAMES,
    _lr({
        "nose": "nose",
        "{side}_shoulder": "upperarm_{s}", "{side}_elbow": "forearm_{s}", "{side}_wrist": "hand_{s}",
        "{side}_thumb": "thumb_{s}", "{side}_hip": "thigh_{s}", "{side}_knee": "calf_{s}",
        "{side}_ankle": "foot_{s}", "{side}_heel": "heel_{s}", "{side}_foot_index": "toe_tip_{s}",
    }),
    dict(_TORSO, **{
        # index and pinky landmarks are the MCP knuckles, about half way to the finger tips
        "hand_tip_l": (("left_index", 1.0), ("left_pinky", 1.0), ("left_wrist", -1.0)),
        "hand_tip_r": (("right_index", 1.0), ("right_pinky", 1.0), ("right_wrist", -1.0)),
        # the ball of the foot sits 3/4 of the way from heel to toe tip
        "toe_l": (("left_heel", 0.25), ("left_foot_index", 0.75)),
        "toe_r": (("right_heel", 0.25), ("right_foot_index", 0.75)),
    }),
    notes=_TORSO_NOTES + "; hand_tip = index MCP + pinky MCP - wrist (the knuckle midpoint pushed out to "
    "the finger tips); thumb = thumb landmark (a thumb tip, further out than the canonical thumb point); "
    "toe_tip = foot_index, heel = heel, toe (ball) = 1/4 heel + 3/4 foot_index",
    up_axis="-Y",
)

COCO17 = Layout(
    "coco17",
    "COCO 17 keypoints (ViTPose, RTMPose, Detectron, YOLO pose, lifted to 3D)",
    ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
     "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
     "left_knee", "right_knee", "left_ankle", "right_ankle"),
    _lr({
        "nose": "nose",
        "{side}_shoulder": "upperarm_{s}", "{side}_elbow": "forearm_{s}", "{side}_wrist": "hand_{s}",
        "{side}_hip": "thigh_{s}", "{side}_knee": "calf_{s}", "{side}_ankle": "foot_{s}",
    }),
    dict(_TORSO),
    notes=_TORSO_NOTES + "; no hands or feet beyond the wrists and ankles: hand tips, thumbs, toes and heels are masked",
)

H36M17 = Layout(
    "h36m17",
    "Human3.6M 17 joints (VideoPose3D, MotionBERT, most 3D lifters)",
    ("Hip", "RHip", "RKnee", "RFoot", "LHip", "LKnee", "LFoot", "Spine", "Thorax", "Neck/Nose",
     "Head", "LShoulder", "LElbow", "LWrist", "RShoulder", "RElbow", "RWrist"),
    _lr({
        "Hip": "pelvis", "Spine": "spine2", "Thorax": "neck", "Neck/Nose": "nose", "Head": "head_top",
        "{S}Hip": "thigh_{s}", "{S}Knee": "calf_{s}", "{S}Foot": "foot_{s}",
        "{S}Shoulder": "upperarm_{s}", "{S}Elbow": "forearm_{s}", "{S}Wrist": "hand_{s}",
    }),
    # the head joint sits 36% of the way from the neck (Thorax) to the top of the head
    {"head": (("Thorax", 0.64), ("Head", 0.36))},
    notes="Hip (root, mid-hip at hip-joint height, ~5 cm below the canonical pelvis) -> pelvis; Spine "
    "(mid back) -> spine2; Thorax (between the shoulders) -> neck; Neck/Nose (around chin and nose) -> "
    "nose; Head (top of head) -> head_top; head = 0.64 Thorax + 0.36 Head (where the head joint sits "
    "between neck and head top on the canonical rest pose); Foot is the ankle -> foot. spine1, spine3, "
    "clavicles, hand tips, thumbs, toes and heels are masked",
)

OPENPOSE25 = Layout(
    "openpose_body25",
    "OpenPose BODY_25 (3D triangulated or lifted)",
    ("Nose", "Neck", "RShoulder", "RElbow", "RWrist", "LShoulder", "LElbow", "LWrist", "MidHip",
     "RHip", "RKnee", "RAnkle", "LHip", "LKnee", "LAnkle", "REye", "LEye", "REar", "LEar",
     "LBigToe", "LSmallToe", "LHeel", "RBigToe", "RSmallToe", "RHeel"),
    _lr({
        "Nose": "nose",
        "{S}Shoulder": "upperarm_{s}", "{S}Elbow": "forearm_{s}", "{S}Wrist": "hand_{s}",
        "{S}Hip": "thigh_{s}", "{S}Knee": "calf_{s}", "{S}Ankle": "foot_{s}", "{S}Heel": "heel_{s}",
    }),
    {
        "pelvis": (("MidHip", 1.0 - _F_PELVIS), ("Neck", _F_PELVIS)),
        "neck": (("Neck", 1.0 + _F_NECK), ("MidHip", -_F_NECK)),
        "head": (("LEar", 0.35), ("REar", 0.35), ("Neck", 0.3)),
        "toe_tip_l": _mid("LBigToe", "LSmallToe"),
        "toe_tip_r": _mid("RBigToe", "RSmallToe"),
        "toe_l": (("LHeel", 0.25), ("LBigToe", 0.375), ("LSmallToe", 0.375)),
        "toe_r": (("RHeel", 0.25), ("RBigToe", 0.375), ("RSmallToe", 0.375)),
    },
    notes="Neck is the mid-shoulder point; pelvis = MidHip moved 9% towards Neck; neck = Neck moved up "
    "7.5% of the hip-neck distance; head = 0.7 mid-ear + 0.3 Neck; toe_tip = mid big/small toe; "
    "toe (ball) = 1/4 heel + 3/4 toe tip; hips/shoulders as joint centres (approximate); spine1..3, "
    "clavicles, head_top, hand tips and thumbs are masked",
)

_SMPL_BODY = (
    "pelvis", "left_hip", "right_hip", "spine1", "left_knee", "right_knee", "spine2",
    "left_ankle", "right_ankle", "spine3", "left_foot", "right_foot", "neck", "left_collar",
    "right_collar", "head", "left_shoulder", "right_shoulder", "left_elbow", "right_elbow",
    "left_wrist", "right_wrist",
)
_SMPL_MAP = _lr({
    "pelvis": "pelvis", "spine1": "spine1", "spine2": "spine2", "spine3": "spine3", "neck": "neck",
    "head": "head", "{side}_collar": "clavicle_{s}", "{side}_shoulder": "upperarm_{s}",
    "{side}_elbow": "forearm_{s}", "{side}_wrist": "hand_{s}", "{side}_hip": "thigh_{s}",
    "{side}_knee": "calf_{s}", "{side}_ankle": "foot_{s}", "{side}_foot": "toe_{s}",
})

SMPL24 = Layout(
    "smpl24",
    "SMPL 24 joints (SMPL/SMPL-H body regressors, AMASS, 4D-Humans, WHAM)",
    _SMPL_BODY + ("left_hand", "right_hand"),
    _SMPL_MAP,
    {
        "hand_tip_l": (("left_hand", 2.0), ("left_wrist", -1.0)),
        "hand_tip_r": (("right_hand", 2.0), ("right_wrist", -1.0)),
    },
    notes="one-to-one body joints (SMPL joint centres: hips a little wider, spine joints placed "
    "differently); *_foot is the ball of the foot -> toe; hand_tip = wrist + 2 x (hand - wrist) "
    "(the SMPL hand joint sits near the knuckles); head_top, nose, thumbs, toe tips and heels are masked. "
    "SMPL is Y up, facing +Z",
    up_axis="Y",
)

_SMPLX_HANDS = tuple(
    f"{side}_{finger}{i}" for side in ("left", "right")
    for finger in ("index", "middle", "pinky", "ring", "thumb") for i in (1, 2, 3)
)
SMPLX = Layout(
    "smplx",
    "SMPL-X joints (22 body + jaw, eyes, 30 hand joints, 21 extra landmarks: nose, ears, toes, heels, finger tips)",
    _SMPL_BODY + ("jaw", "left_eye_smplhf", "right_eye_smplhf") + _SMPLX_HANDS + (
        "nose", "right_eye", "left_eye", "right_ear", "left_ear", "left_big_toe", "left_small_toe",
        "left_heel", "right_big_toe", "right_small_toe", "right_heel", "left_thumb", "left_index",
        "left_middle", "left_ring", "left_pinky", "right_thumb", "right_index", "right_middle",
        "right_ring", "right_pinky"),
    dict(_SMPL_MAP, **_lr({"nose": "nose", "{side}_heel": "heel_{s}", "{side}_middle": "hand_tip_{s}",
                           "{side}_thumb": "thumb_{s}"})),
    {
        "toe_tip_l": _mid("left_big_toe", "left_small_toe"),
        "toe_tip_r": _mid("right_big_toe", "right_small_toe"),
    },
    notes="SMPL body joints one-to-one; middle finger tip -> hand_tip; thumb tip -> thumb (further out "
    "than the canonical thumb point); toe_tip = mid big/small toe; heel = heel; head_top masked. Y up, facing +Z",
    up_axis="Y",
)

CANONICAL_LAYOUT = Layout(
    "canonical",
    "Neural IK canonical keypoints (22 joints + 10 end points)",
    KEYPOINTS,
    {k: k for k in KEYPOINTS},
    notes="identity",
    up_axis="Z",
)

MIXAMO = Layout(
    "mixamo",
    "Mixamo rig (mixamorig:Hips, Spine, Spine1, Spine2, LeftArm...)",
    ("Hips", "Spine", "Spine1", "Spine2", "Neck", "Head", "HeadTop_End",
     "LeftShoulder", "LeftArm", "LeftForeArm", "LeftHand", "LeftHandMiddle4", "LeftHandThumb4",
     "RightShoulder", "RightArm", "RightForeArm", "RightHand", "RightHandMiddle4", "RightHandThumb4",
     "LeftUpLeg", "LeftLeg", "LeftFoot", "LeftToeBase", "LeftToe_End",
     "RightUpLeg", "RightLeg", "RightFoot", "RightToeBase", "RightToe_End"),
    _lr({
        "Hips": "pelvis", "Spine": "spine1", "Spine1": "spine2", "Spine2": "spine3", "Neck": "neck",
        "Head": "head", "HeadTop_End": "head_top", "Head_End": "head_top",
        "{Side}Shoulder": "clavicle_{s}", "{Side}Arm": "upperarm_{s}", "{Side}ForeArm": "forearm_{s}",
        "{Side}Hand": "hand_{s}", "{Side}HandMiddle4": "hand_tip_{s}", "{Side}HandThumb4": "thumb_{s}",
        "{Side}UpLeg": "thigh_{s}", "{Side}Leg": "calf_{s}", "{Side}Foot": "foot_{s}",
        "{Side}ToeBase": "toe_{s}", "{Side}Toe_End": "toe_tip_{s}", "{Side}ToeBase_End": "toe_tip_{s}",
    }),
    notes="joint origins (bone heads) map one-to-one; the rig's own proportions are kept; "
    "finger tips (Middle4, Thumb4) give hand_tip and thumb when present; nose and heels are masked",
)

CMU = Layout(
    "cmu",
    "CMU mocap BVH skeleton (Hips, LowerBack, Spine, Spine1, LHipJoint, LeftUpLeg...)",
    ("Hips", "LHipJoint", "LeftUpLeg", "LeftLeg", "LeftFoot", "LeftToeBase", "RHipJoint", "RightUpLeg",
     "RightLeg", "RightFoot", "RightToeBase", "LowerBack", "Spine", "Spine1", "Neck", "Neck1", "Head",
     "LeftShoulder", "LeftArm", "LeftForeArm", "LeftHand", "LeftFingerBase", "LeftHandIndex1", "LThumb",
     "RightShoulder", "RightArm", "RightForeArm", "RightHand", "RightFingerBase", "RightHandIndex1", "RThumb"),
    _lr({
        "Hips": "pelvis", "LowerBack": "spine1", "Spine": "spine2", "Spine1": "spine3", "Neck": "neck",
        "Head": "head", "Head_End": "head_top",
        "{Side}Shoulder": "clavicle_{s}", "{Side}Arm": "upperarm_{s}", "{Side}ForeArm": "forearm_{s}",
        "{Side}Hand": "hand_{s}", "{Side}HandIndex1": "hand_tip_{s}", "{S}Thumb": "thumb_{s}",
        "{Side}UpLeg": "thigh_{s}", "{Side}Leg": "calf_{s}", "{Side}Foot": "foot_{s}",
        "{Side}ToeBase": "toe_{s}", "{Side}ToeBase_End": "toe_tip_{s}",
    }),
    notes="joint origins one-to-one; LowerBack/Spine/Spine1 -> spine1..3; the CMU hand chain is short: "
    "HandIndex1 (finger) -> hand_tip approximately; the Head End Site -> head_top",
)

CC_BASE = Layout(
    "cc_base",
    "Character Creator / iClone rig (CC_Base_Hip, CC_Base_Waist, CC_Base_L_Upperarm...)",
    ("CC_Base_Hip", "CC_Base_Pelvis", "CC_Base_Waist", "CC_Base_Spine01", "CC_Base_Spine02",
     "CC_Base_NeckTwist01", "CC_Base_Head", "CC_Base_L_Clavicle", "CC_Base_L_Upperarm",
     "CC_Base_L_Forearm", "CC_Base_L_Hand", "CC_Base_L_Mid2", "CC_Base_L_Mid3", "CC_Base_L_Thumb2",
     "CC_Base_R_Clavicle", "CC_Base_R_Upperarm", "CC_Base_R_Forearm", "CC_Base_R_Hand", "CC_Base_R_Mid2",
     "CC_Base_R_Mid3", "CC_Base_R_Thumb2", "CC_Base_L_Thigh", "CC_Base_L_Calf", "CC_Base_L_Foot",
     "CC_Base_L_ToeBase", "CC_Base_L_MidToe1", "CC_Base_R_Thigh", "CC_Base_R_Calf", "CC_Base_R_Foot",
     "CC_Base_R_ToeBase", "CC_Base_R_MidToe1"),
    _lr({
        "CC_Base_Hip": "pelvis", "CC_Base_Waist": "spine1", "CC_Base_Spine01": "spine2",
        "CC_Base_Spine02": "spine3", "CC_Base_NeckTwist01": "neck", "CC_Base_Head": "head",
        "CC_Base_{S}_Clavicle": "clavicle_{s}", "CC_Base_{S}_Upperarm": "upperarm_{s}",
        "CC_Base_{S}_Forearm": "forearm_{s}", "CC_Base_{S}_Hand": "hand_{s}",
        "CC_Base_{S}_Thumb2": "thumb_{s}",
        "CC_Base_{S}_Thigh": "thigh_{s}", "CC_Base_{S}_Calf": "calf_{s}", "CC_Base_{S}_Foot": "foot_{s}",
        "CC_Base_{S}_ToeBase": "toe_{s}",
    }),
    {
        f"hand_tip_{s}": ((f"CC_Base_{S}_Mid3", 1.8), (f"CC_Base_{S}_Mid2", -0.8)) for S, s in (("L", "l"), ("R", "r"))
    } | {
        f"toe_tip_{s}": ((f"CC_Base_{S}_MidToe1", 2.0), (f"CC_Base_{S}_ToeBase", -1.0)) for S, s in (("L", "l"), ("R", "r"))
    },
    notes="joint origins one-to-one, as in training/joint_maps/cmu_cc_base.json (the training data): "
    "hand_tip = Mid3 + 0.8 (Mid3 - Mid2), thumb = Thumb2, toe_tip = MidToe1 + (MidToe1 - ToeBase); "
    "head_top and nose (built from the eyes in the head frame there) and heels are masked",
)

RIGIFY = Layout(
    "rigify",
    "Blender Rigify deform bones (DEF-spine, DEF-upper_arm.L...)",
    ("DEF-spine", "DEF-spine.001", "DEF-spine.002", "DEF-spine.003", "DEF-spine.004", "DEF-spine.005",
     "DEF-spine.006", "DEF-shoulder.L", "DEF-upper_arm.L", "DEF-forearm.L", "DEF-hand.L",
     "DEF-shoulder.R", "DEF-upper_arm.R", "DEF-forearm.R", "DEF-hand.R", "DEF-thigh.L", "DEF-shin.L",
     "DEF-foot.L", "DEF-toe.L", "DEF-thigh.R", "DEF-shin.R", "DEF-foot.R", "DEF-toe.R"),
    _lr({
        "DEF-spine": "pelvis", "DEF-spine.001": "spine1", "DEF-spine.002": "spine2",
        "DEF-spine.003": "spine3", "DEF-spine.004": "neck", "DEF-spine.006": "head",
        "DEF-shoulder.{S}": "clavicle_{s}", "DEF-upper_arm.{S}": "upperarm_{s}",
        "DEF-forearm.{S}": "forearm_{s}", "DEF-hand.{S}": "hand_{s}", "DEF-thigh.{S}": "thigh_{s}",
        "DEF-shin.{S}": "calf_{s}", "DEF-foot.{S}": "foot_{s}", "DEF-toe.{S}": "toe_{s}",
    }),
    notes="bone heads one-to-one (DEF-spine.005 is the upper neck and is unused); twist bones "
    "(DEF-upper_arm.L.001...) are ignored; end points are masked",
)

UE_MANNEQUIN = Layout(
    "ue_mannequin",
    "Unreal Engine mannequin (pelvis, spine_01..03, upperarm_l, lowerarm_l, ball_l...)",
    ("pelvis", "spine_01", "spine_02", "spine_03", "neck_01", "head", "clavicle_l", "upperarm_l",
     "lowerarm_l", "hand_l", "clavicle_r", "upperarm_r", "lowerarm_r", "hand_r", "thigh_l", "calf_l",
     "foot_l", "ball_l", "thigh_r", "calf_r", "foot_r", "ball_r"),
    _lr({
        "pelvis": "pelvis", "spine_01": "spine1", "spine_02": "spine2", "spine_03": "spine3",
        "neck_01": "neck", "head": "head", "clavicle_{s}": "clavicle_{s}", "upperarm_{s}": "upperarm_{s}",
        "lowerarm_{s}": "forearm_{s}", "hand_{s}": "hand_{s}", "thigh_{s}": "thigh_{s}",
        "calf_{s}": "calf_{s}", "foot_{s}": "foot_{s}", "ball_{s}": "toe_{s}",
    }),
    notes="UE4 names one-to-one; on a UE5 mannequin spine_04/05 and neck_02 are ignored "
    "(spine3 then sits low); end points are masked",
)

KINECT_V2 = Layout(
    "kinect_v2",
    "Kinect v2 body tracking (25 joints, the SDK's JointType order; Azure Kinect's first 25 differ)",
    ("SpineBase", "SpineMid", "Neck", "Head", "ShoulderLeft", "ElbowLeft", "WristLeft", "HandLeft",
     "ShoulderRight", "ElbowRight", "WristRight", "HandRight", "HipLeft", "KneeLeft", "AnkleLeft", "FootLeft",
     "HipRight", "KneeRight", "AnkleRight", "FootRight", "SpineShoulder", "HandTipLeft", "ThumbLeft",
     "HandTipRight", "ThumbRight"),
    {
        "SpineBase": "pelvis", "SpineMid": "spine2", "SpineShoulder": "neck", "Neck": "head",
        "ShoulderLeft": "upperarm_l", "ElbowLeft": "forearm_l", "WristLeft": "hand_l", "HandTipLeft": "hand_tip_l",
        "ThumbLeft": "thumb_l", "ShoulderRight": "upperarm_r", "ElbowRight": "forearm_r", "WristRight": "hand_r",
        "HandTipRight": "hand_tip_r", "ThumbRight": "thumb_r", "HipLeft": "thigh_l", "KneeLeft": "calf_l",
        "AnkleLeft": "foot_l", "FootLeft": "toe_l", "HipRight": "thigh_r", "KneeRight": "calf_r",
        "AnkleRight": "foot_r", "FootRight": "toe_r",
    },
    notes="SpineShoulder (the neck's base) is the neck, the SDK's Neck the head joint; the head's centre, "
    "spine1, spine3, the clavicles, head top and toe tips are masked; camera space: metres, Y up",
    up_axis="Y",
)

#: Built-in layouts by name.
LAYOUTS: dict[str, Layout] = {
    lay.name: lay
    for lay in (CANONICAL_LAYOUT, MEDIAPIPE, COCO17, H36M17, OPENPOSE25, SMPL24, SMPLX,
                MIXAMO, CMU, CC_BASE, RIGIFY, UE_MANNEQUIN, KINECT_V2)
}
