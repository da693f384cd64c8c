"""Small generated humanoid sources of many conventions (BVH naming schemes, axes, units, joint
orients, floors; marker sets; nameless arrays), for the reader tests and
``benchmarks/check_sources.py``. No shared data: everything is made from the
canonical skeleton and a procedural walk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

try:
    from _pkg import pkg
except ImportError:  # run from benchmarks/, whose _pkg has the same job
    from _pkg import import_package as pkg

pkg()
from neural_ik.model.bvh import frames_from_rotations, write_bvh  # noqa: E402
from neural_ik.model.rotations_np import axis_angle_to_matrix  # noqa: E402
from neural_ik.model.skeleton import (  # noqa: E402
    END_OFFSETS, END_PARENTS, END_POINTS, JOINTS, KEYPOINTS, PARENTS, REST_OFFSETS,
    forward_kinematics_np, keypoints_from_fk_np,
)
from neural_ik.readers.source_rig import axis_matrix  # noqa: E402

__all__ = ["SCHEMES", "UNIT_SCALE", "bone_names", "walk_rotations", "humanoid_bvh", "walk_keypoints",
           "opencap_markers", "write_trc"]

#: Bone names of each BVH naming scheme, canonical joint -> name ("{S}" Left/Right, "{s}" L/R...).
SCHEMES = {
    "mixamo": dict(pelvis="Hips", spine1="Spine", spine2="Spine1", spine3="Spine2", neck="Neck", head="Head",
                   clavicle="{Side}Shoulder", upperarm="{Side}Arm", forearm="{Side}ForeArm", hand="{Side}Hand",
                   thigh="{Side}UpLeg", calf="{Side}Leg", foot="{Side}Foot", toe="{Side}ToeBase"),
    # a studio scheme with _L/_R suffixes
    "studio": dict(pelvis="Hips", spine1="Spine_01", spine2="Spine_02", spine3="Chest", neck="Neck",
                   head="Head", clavicle="Clavicle_{S}", upperarm="UpperArm_{S}", forearm="LowerArm_{S}",
                   hand="Hand_{S}", thigh="UpperLeg_{S}", calf="LowerLeg_{S}", foot="Foot_{S}", toe="Toe_{S}"),
    # ASF-style names: the arm's "Shoulder" is the upper arm, "Hip" the thigh
    "asf": dict(pelvis="Hips", spine1="lowerback", spine2="Chest", spine3="Chest2", neck="Neck", head="Head",
                clavicle="{Side}Collar", upperarm="{Side}Shoulder", forearm="{Side}Elbow", hand="{Side}Wrist",
                thigh="{Side}Hip", calf="{Side}Knee", foot="{Side}Ankle", toe="{Side}Toe"),
    # Blender's own BVH export of Rigify's meta-rig
    "metarig": dict(pelvis="spine", spine1="spine.001", spine2="spine.002", spine3="spine.003",
                    neck="spine.004", head="spine.006", clavicle="shoulder.{S}", upperarm="upper_arm.{S}",
                    forearm="forearm.{S}", hand="hand.{S}", thigh="thigh.{S}", calf="shin.{S}", foot="foot.{S}",
                    toe="toe.{S}"),
}

#: Metres per unit of the generated files.
UNIT_SCALE = {"m": 1.0, "cm": 0.01, "mm": 0.001, "in": 0.0254, "cmu": 0.0254 / 0.45}


def bone_names(scheme: str) -> list:
    """Names of the 22 canonical joints in a naming scheme."""
    table = SCHEMES[scheme]
    out = []
    for j in JOINTS:
        if j.endswith(("_l", "_r")):
            base, s = j[:-2], j[-1]
            S, Side = ("L", "Left") if s == "l" else ("R", "Right")
            out.append(table[base].format(S=S, Side=Side, s=s))
        else:
            out.append(table[j])
    return out


def walk_rotations(T: int, fps: float = 30.0, lean: float = 0.0, seed: int = 0):
    """Canonical local rotations (T, 22, 3, 3) and root positions (T, 3) of the demo's walk
    (``cli.demo_motion``: the stance foot planted, the lowest foot point on the floor; Z up, metres).

    ``lean`` bends the upper body forward at the waist (radians), as when pushing something.
    """
    from neural_ik.cli import demo_motion
    from neural_ik.model.rotations_np import axis_rotation

    del seed
    seconds = T / float(fps)
    rot = demo_motion.walk_rotations(seconds, fps)[:T]
    root = demo_motion.walk_keypoints(seconds, fps)[:T, 0]
    if lean:
        rot[:, JOINTS.index("spine1")] = rot[:, JOINTS.index("spine1")] @ axis_rotation(0, float(lean))
    return rot, root


def _orients(kind: str, seed: int) -> np.ndarray:
    """Rest orientation O (22, 3, 3) of each joint's BVH frame relative to the canonical T-pose frame."""
    n = len(JOINTS)
    if kind == "none":
        return np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
    if kind == "A":  # arms rest 45 degrees down: the arm joints' frames are rotated
        aa = np.zeros((n, 3))
        for s, sg in (("l", 1.0), ("r", -1.0)):
            for j in ("upperarm", "forearm", "hand"):
                aa[JOINTS.index(f"{j}_{s}"), 1] = sg * np.pi / 4
        return axis_angle_to_matrix(aa)
    rng = np.random.default_rng(seed + 101)
    return axis_angle_to_matrix(rng.normal(0.0, 1.0, (n, 3)))


def humanoid_bvh(path, scheme="mixamo", up="Y", units="cm", orients="none", frames=24, fps=30.0,
                 floor=0.0, lean=0.0, seed=0):
    """Write a humanoid BVH of a naming scheme, axis convention, units and rest orientation.

    Parameters
    ----------
    scheme : str
        A key of :data:`SCHEMES`.
    up : {"Y", "Z", "-Y", "-Z"}
        The file's up axis.
    units : str
        A key of :data:`UNIT_SCALE`.
    orients : {"none", "A", "random"}
        Joint frames at rest: the canonical T-pose's, arms' frames 45 degrees
        down, or random per joint (joint orients baked into the OFFSETs, the
        zero-rotation pose no human pose).
    floor : float
        Height (metres) of the performer's floor in the file (0: feet on z = 0).

    Returns
    -------
    path, world : the file and the canonical keypoints (T, 32, 3) it encodes (metres, Z up,
    floor at ``floor``).
    """
    G_local, root = walk_rotations(frames, fps, lean, seed)
    root = root + [0.0, 0.0, floor]
    Gw, pw = forward_kinematics_np(G_local, root)
    O = _orients(orients, seed)
    A = axis_matrix(up).T          # Z-up world -> file axes
    k = 1.0 / UNIT_SCALE[units]
    names = bone_names(scheme)
    par = np.array(PARENTS)
    offsets = np.zeros((len(JOINTS), 3))
    L = np.empty_like(G_local)
    for j in range(len(JOINTS)):
        p = par[j]
        if p < 0:
            offsets[j] = A @ REST_OFFSETS[0] * k
            L[:, j] = A @ Gw[:, j] @ O[j] @ A.T
        else:
            offsets[j] = A @ (O[p].T @ REST_OFFSETS[j]) * k
            L[:, j] = A @ (O[p].T @ np.swapaxes(Gw[:, p], -1, -2) @ Gw[:, j] @ O[j]) @ A.T
    trans = np.broadcast_to(offsets, (frames, len(JOINTS), 3)).copy()
    trans[:, 0] = root @ A.T * k
    ends = []
    for e, pj in zip(END_POINTS, END_PARENTS):
        if e in ("head_top", "toe_tip_l", "toe_tip_r", "hand_tip_l", "hand_tip_r"):
            ends.append((pj, A @ (O[pj].T @ END_OFFSETS[END_POINTS.index(e)]) * k))
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + \
        [("Zrotation", "Xrotation", "Yrotation")] * (len(JOINTS) - 1)
    motion = frames_from_rotations(channels, L, trans)
    write_bvh(path, names, par, offsets, channels, motion, frame_time=1.0 / fps, end_sites=ends, precision=8)
    world = keypoints_from_fk_np(G_local, root)
    return path, world


def walk_keypoints(frames=24, fps=30.0, floor=0.0, seed=0):
    """Canonical keypoints (T, 32, 3) of the procedural walk (metres, Z up)."""
    G_local, root = walk_rotations(frames, fps, 0.0, seed)
    return keypoints_from_fk_np(G_local, root + [0.0, 0.0, floor])


def opencap_markers(frames=30, drop=()):
    """An OpenCap-style anatomical marker set (``*_study`` names) around the walk: dict name -> (T, 3).

    Placed so that the standard regressions give back the walk's joints: the hip centres 0.24 PD +
    0.04 PW behind, 0.34 PW below and 0.36 PW lateral of the mid-ASIS point in the pelvis frame (the
    Harrington regression, PW = 25 cm, PD = 16 cm); epicondyles, malleoli, elbow and wrist markers in pairs around
    the joints; acromions 12% of their distance above the shoulder joints. ``drop``: names left out.
    """
    w = walk_keypoints(frames)

    def K(n):
        return w[:, KEYPOINTS.index(n)]

    pw, pd = 0.25, 0.16
    post = 0.24 * pd + 0.04 * pw
    width = np.linalg.norm(K("upperarm_l") - K("upperarm_r"), axis=-1, keepdims=True)
    up = np.array([0.0, 0.0, 1.0])
    m = {}
    # the pelvis frame: left, up (hips -> pelvis), forward
    xh = K("thigh_l") - K("thigh_r")
    xh /= np.linalg.norm(xh, axis=-1, keepdims=True)
    uh = K("pelvis") - 0.5 * (K("thigh_l") + K("thigh_r"))
    uh /= np.linalg.norm(uh, axis=-1, keepdims=True)
    fh = np.cross(xh, uh)
    for s, S, sg in (("l", "L", 1.0), ("r", "R", -1.0)):
        hip = K(f"thigh_{s}")
        lat = sg * (0.5 * pw - 0.36 * pw)
        m[f"{S}.ASIS_study"] = hip + lat * xh + post * fh + 0.34 * pw * uh
        m[f"{S}.PSIS_study"] = hip + lat * xh + (post - pd) * fh + 0.34 * pw * uh
        m[f"{s}_knee_study"] = K(f"calf_{s}") + [sg * 0.05, 0, 0]
        m[f"{s}_mknee_study"] = K(f"calf_{s}") - [sg * 0.05, 0, 0]
        m[f"{s}_ankle_study"] = K(f"foot_{s}") + [sg * 0.035, 0, 0]
        m[f"{s}_mankle_study"] = K(f"foot_{s}") - [sg * 0.035, 0, 0]
        m[f"{s}_toe_study"] = K(f"toe_tip_{s}")
        m[f"{s}_calc_study"] = K(f"heel_{s}")
        m[f"{s}_lelbow_study"] = K(f"forearm_{s}") + [0, 0, 0.03]
        m[f"{s}_melbow_study"] = K(f"forearm_{s}") - [0, 0, 0.03]
        m[f"{s}_lwrist_study"] = K(f"hand_{s}") + [0, 0.02, 0]
        m[f"{s}_mwrist_study"] = K(f"hand_{s}") - [0, 0.02, 0]
    hips = 0.5 * (K("thigh_l") + K("thigh_r"))
    for s in "lr":
        sh = K(f"upperarm_{s}")
        down = hips - 0.5 * (K("upperarm_l") + K("upperarm_r"))
        down /= np.linalg.norm(down, axis=-1, keepdims=True)
        # acromion such that acromion + 0.12 width * down(acromions -> hips) is the shoulder joint
        m[f"{s}_shoulder_study"] = sh - down * (0.12 * width) + 0 * up
    return {k: v for k, v in m.items() if k not in drop}, w


def write_trc(path, markers, rate=60.0, units="mm", up="Y"):
    """Write a ``.trc`` file of named markers (metres, Z up in; ``units`` and ``up`` in the file)."""
    names = list(markers)
    pos = np.stack([markers[n] for n in names], 1)
    if up == "Y":
        pos = np.stack([pos[..., 0], pos[..., 2], -pos[..., 1]], -1)
    pos = pos / UNIT_SCALE[units]
    T = pos.shape[0]
    lines = [f"PathFileType\t4\t(X/Y/Z)\t{Path(path).name}",
             "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
             f"{rate:g}\t{rate:g}\t{T}\t{len(names)}\t{units}\t{rate:g}\t1\t{T}",
             "Frame#\tTime\t" + "\t\t\t".join(names),
             "\t\t" + "\t".join(f"X{i + 1}\tY{i + 1}\tZ{i + 1}" for i in range(len(names))), ""]
    for t in range(T):
        lines.append(f"{t + 1}\t{t / rate:.5f}\t" + "\t".join(f"{v:.4f}" for v in pos[t].ravel()))
    Path(path).write_text("\n".join(lines) + "\n")
    return path


#: Unity Humanoid-style names of the canonical joints.
UNITY = {"pelvis": "Hips", "spine1": "Spine", "spine2": "Chest", "spine3": "UpperChest", "neck": "Neck",
         "head": "Head"}
for _s, _S in (("l", "L"), ("r", "R")):
    UNITY.update({f"clavicle_{_s}": f"Shoulder_{_S}", f"upperarm_{_s}": f"UpperArm_{_S}",
                  f"forearm_{_s}": f"LowerArm_{_S}", f"hand_{_s}": f"Hand_{_S}", f"thigh_{_s}": f"UpperLeg_{_S}",
                  f"calf_{_s}": f"LowerLeg_{_S}", f"foot_{_s}": f"Foot_{_S}", f"toe_{_s}": f"Toes_{_S}"})


def kinect_points(walk):
    """Kinect v2's 25 joints (SDK order) placed on the canonical walk, in camera axes (Y up)."""
    from neural_ik.model.skeleton import KEYPOINTS
    from neural_ik.readers.layouts import KINECT_V2

    k = {n: KEYPOINTS.index(n) for n in KEYPOINTS}
    up = np.array([0.0, 0.0, 0.1])
    where = {"SpineBase": walk[:, k["pelvis"]], "SpineMid": walk[:, k["spine2"]], "Neck": walk[:, k["head"]],
             "Head": walk[:, k["head"]] + up, "SpineShoulder": walk[:, k["neck"]]}
    for s, side in (("l", "Left"), ("r", "Right")):
        where.update({f"Shoulder{side}": walk[:, k[f"upperarm_{s}"]], f"Elbow{side}": walk[:, k[f"forearm_{s}"]],
                      f"Wrist{side}": walk[:, k[f"hand_{s}"]],
                      f"Hand{side}": 0.5 * (walk[:, k[f"hand_{s}"]] + walk[:, k[f"hand_tip_{s}"]]),
                      f"HandTip{side}": walk[:, k[f"hand_tip_{s}"]], f"Thumb{side}": walk[:, k[f"thumb_{s}"]],
                      f"Hip{side}": walk[:, k[f"thigh_{s}"]], f"Knee{side}": walk[:, k[f"calf_{s}"]],
                      f"Ankle{side}": walk[:, k[f"foot_{s}"]], f"Foot{side}": walk[:, k[f"toe_{s}"]]})
    pts = np.stack([where[n] for n in KINECT_V2.joint_names], 1)
    return np.stack([pts[..., 0], pts[..., 2], -pts[..., 1]], -1)     # Z up -> Y up
