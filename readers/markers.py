"""Joint centres from anatomical marker sets (OpenSim, OpenCap, Vicon Plug-in Gait).

Motion-capture marker files (``.trc``) hold skin markers, not joint centres.
:func:`marker_joint_centres` recognises the anatomical markers by name and
computes the joint centres by the standard regressions:

- hip joint centres from the pelvis markers (both ASIS and both PSIS, or a
  sacral marker between the PSIS),
  Harrington et al. 2007 in the pelvis frame: 0.24 PD + 0.04 PW posterior,
  0.34 PW inferior, 0.36 PW lateral of the mid-ASIS point (PW: inter-ASIS
  width, PD: mid-ASIS to mid-PSIS depth; the millimetre constants taken
  relative to a 25 cm pelvis width); the pelvis keypoint 0.2 PW above the
  mid hip centre;
- knee and ankle centres: the midpoint of the lateral and medial epicondyle
  (malleolus) markers; with a lateral marker only (Plug-in Gait), that
  marker moved half the joint's width (0.2 and 0.14 pelvis widths) towards
  the midline;
- elbow and wrist centres: the midpoint of the two elbow (wrist) markers;
- shoulder centres: the acromion marker moved 12% of the acromion distance
  down the trunk (towards the mid hip centre);
- toe tips and heels: the toe and calcaneus markers; the ball of the foot
  between the first and fifth metatarsal heads;
- the neck between C7 and the clavicles' notch (CLAV), the head joint a third
  of the way from the four head markers' centre down to it (Plug-in Gait).

The centres are appended to the clip's points under the names of
:data:`MARKER_LAYOUT` (``HJC_L``...). Names another layout knows (OpenCap's
OpenPose BODY_25 points) are kept for what the markers do not give. Head
points may be missing: they are masked.

No ``bpy`` here.
"""

from __future__ import annotations

import re

import numpy as np

from .layouts import OPENPOSE25, Layout, normalize_name

__all__ = ["marker_roles", "marker_joint_centres", "MARKER_LAYOUT", "marker_layout"]

#: Marker role -> normalised names (side removed) that denote it.
_ROLES = {
    "asis": {"asis", "asi", "ias", "eias"},
    "psis": {"psis", "psi", "ips", "eips"},
    "knee_lat": {"knee", "kne", "kneelat", "latknee", "lknee", "lfc", "kneelateral", "latepicondyle", "fle", "genou", "genoulat",
                 "condylelat", "condyleext"},
    "knee_med": {"mknee", "kneemed", "knem", "kneem", "mfc", "medknee", "kneemedial", "medepicondyle", "fme", "genoumed", "condylemed",
                 "condyleint"},
    "ankle_lat": {"ankle", "ank", "anklelat", "lmal", "lankle", "latmal", "latmalleolus", "lmalleolus", "fal", "cheville",
                  "malleolelat", "malleoleext", "malext"},
    "ankle_med": {"mankle", "anklemed", "ankm", "mmal", "medmal", "medmalleolus", "mmalleolus", "ankmed", "tam", "malleolemed",
                  "malleoleint", "malint"},
    "shoulder": {"shoulder", "sho", "acromion", "acr", "acromium", "shoulderacromion", "saj", "sae", "epaule"},
    "elbow_lat": {"lelbow", "elb", "elbowlat", "elbow", "lelb", "latelbow", "hle", "coude", "coudelat"},
    "elbow_med": {"melbow", "elbowmed", "melb", "elbm", "medelbow", "hme"},
    "wrist_a": {"lwrist", "wra", "wristrad", "radius", "wrist", "radstyl", "rsp", "poignet", "poignetrad"},
    "wrist_b": {"mwrist", "wrb", "wristuln", "ulna", "ulnstyl", "usp", "uhe"},
    "toe": {"toe", "toetip", "hallux", "orteil", "toetip1"},
    "heel": {"calc", "hee", "heel", "calcaneus", "fcc", "talon"},
    "meta1": {"fm1", "mt1", "met1", "meta1", "mh1", "mt1head"},
    "meta5": {"fm5", "mt5", "met5", "meta5", "mh5", "mt5head"},
    "head_front": {"fhd", "fhead", "fronthead", "headfront", "hdf"},
    "head_back": {"bhd", "bhead", "backhead", "headback", "hdb"},
}
_LOOKUP = {n: role for role, names in _ROLES.items() for n in names}
#: Trunk markers on the midline (Plug-in Gait): normalised name -> role.
_CENTRAL = {"c7": "c7", "cv7": "c7", "clav": "clav", "clavicle": "clav", "jugular": "clav", "ij": "clav",
            "snj": "clav", "strn": "strn", "sternum": "strn", "xiphoid": "strn", "sxs": "strn", "xiph": "strn",
            "t10": "t10", "sacral": "sacrum", "vsacral": "sacrum", "sacrum": "sacrum", "sacr": "sacrum",
            "sacre": "sacrum"}
#: Side words before or after a marker's name (English, French).
_SIDES = {"r": "R", "l": "L", "right": "R", "left": "L", "d": "R", "g": "L", "droite": "R", "droit": "R",
          "gauche": "L"}

#: Virtual point names of the computed centres -> canonical keypoints.
MARKER_LAYOUT = Layout(
    "markers",
    "joint centres regressed from anatomical markers (ASIS/PSIS, epicondyles, malleoli, acromion...)",
    ("PELVIS_C", "HJC_L", "HJC_R", "KJC_L", "KJC_R", "AJC_L", "AJC_R", "SJC_L", "SJC_R", "EJC_L", "EJC_R",
     "WJC_L", "WJC_R", "TOE_L", "TOE_R", "HEEL_L", "HEEL_R", "BALL_L", "BALL_R", "NECK_C", "HEAD_C"),
    {"PELVIS_C": "pelvis", "HJC_L": "thigh_l", "HJC_R": "thigh_r", "KJC_L": "calf_l", "KJC_R": "calf_r",
     "AJC_L": "foot_l", "AJC_R": "foot_r", "SJC_L": "upperarm_l", "SJC_R": "upperarm_r",
     "EJC_L": "forearm_l", "EJC_R": "forearm_r", "WJC_L": "hand_l", "WJC_R": "hand_r",
     "TOE_L": "toe_tip_l", "TOE_R": "toe_tip_r", "HEEL_L": "heel_l", "HEEL_R": "heel_r",
     "BALL_L": "toe_l", "BALL_R": "toe_r", "NECK_C": "neck", "HEAD_C": "head"},
    notes=__doc__.split("\n\n")[1].replace("\n", " "),
)


def marker_roles(names) -> dict:
    """``(role, side)`` -> column index of the anatomical markers among ``names``."""
    out = {}
    known = OPENPOSE25.normalized_names()
    for j, name in enumerate(names):
        if normalize_name(name) in known:  # OpenPose points (OpenCap) are joint centres, not markers
            continue
        central = _CENTRAL.get(re.sub(r"[^a-z0-9]", "", str(name).strip().lower()))
        if central is not None:
            out.setdefault((central, "C"), j)
            continue
        s = re.sub(r"[_.\- ]?study$", "", str(name).strip(), flags=re.I)
        toks = [t for t in re.split(r"[^A-Za-z0-9]+", s) if t]
        side, core = None, None
        if len(toks) > 1 and toks[0].lower() in _SIDES:
            side, core = _SIDES[toks[0].lower()], "".join(toks[1:]).lower()
        elif len(toks) > 1 and toks[-1].lower() in _SIDES:
            side, core = _SIDES[toks[-1].lower()], "".join(toks[:-1]).lower()
        elif toks and toks[0][:1] in "RLrl" and len(toks[0]) > 2:
            side, core = toks[0][0].upper(), (toks[0][1:] + "".join(toks[1:])).lower()
        if (side is None or core not in _LOOKUP) and len(toks) == 1 and re.fullmatch(r"[A-Z0-9]+[lr]", toks[0]):
            side, core = toks[0][-1].upper(), toks[0][:-1].lower()   # a lower-case side after the name (ASISr)
        if side is None or core is None:
            continue
        role = _LOOKUP.get(core)
        if role is not None:
            out.setdefault((role, side), j)
    return out


def _unit(v):
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(n > 0, n, np.nan)


def marker_joint_centres(names, points):
    """Joint centres computed from the anatomical markers a clip has.

    Parameters
    ----------
    names : sequence of str
    points : ndarray (T, J, 3)
        Any units; Z or Y up (the regressions use the pelvis' own frame).

    Returns
    -------
    centre_names : list of str
        Names from :data:`MARKER_LAYOUT` of the centres that could be computed.
    centres : ndarray (T, K, 3)
    found : dict
        ``(role, side)`` -> marker name, what was recognised.
    """
    roles = marker_roles(names)
    p = np.asarray(points, dtype=np.float64)
    T = p.shape[0]
    out = {}

    def get(role, side):
        j = roles.get((role, side))
        return None if j is None else p[:, j]

    sides = (("L", 1.0), ("R", -1.0))
    la, ra, lp, rp = get("asis", "L"), get("asis", "R"), get("psis", "L"), get("psis", "R")
    if (lp is None or rp is None) and get("sacrum", "C") is not None:   # one sacral marker (OpenSim gait2354)
        lp = rp = get("sacrum", "C")
    hjc_mid = None
    if all(v is not None for v in (la, ra, lp, rp)):
        mid_a, mid_p = 0.5 * (la + ra), 0.5 * (lp + rp)
        x = la - ra
        pw = np.linalg.norm(x, axis=-1, keepdims=True)
        xh = _unit(x)
        f = mid_a - mid_p
        f = f - np.sum(f * xh, -1, keepdims=True) * xh
        pd = np.linalg.norm(f, axis=-1, keepdims=True)
        fh = _unit(f)
        uh = np.cross(fh, xh)
        for s, sg in sides:
            out[f"HJC_{s}"] = mid_a - fh * (0.24 * pd + 0.04 * pw) - uh * (0.34 * pw) + sg * xh * (0.36 * pw)
        hjc_mid = 0.5 * (out["HJC_L"] + out["HJC_R"])
        out["PELVIS_C"] = hjc_mid + uh * (0.2 * pw)
    for s, sg in sides:
        for a, b, key in (("knee_lat", "knee_med", "KJC"), ("ankle_lat", "ankle_med", "AJC"),
                          ("elbow_lat", "elbow_med", "EJC"), ("wrist_a", "wrist_b", "WJC")):
            pa, pb = get(a, s), get(b, s)
            if pa is not None and pb is not None:
                out[f"{key}_{s}"] = 0.5 * (pa + pb)
            elif pa is not None and hjc_mid is not None and key in ("KJC", "AJC"):
                # a lateral marker only (Plug-in Gait): half the joint's width towards the midline,
                # the knee 0.2 and the ankle 0.14 pelvis widths (5 and 3.5 cm for a 25 cm pelvis)
                out[f"{key}_{s}"] = pa - sg * xh * ((0.2 if key == "KJC" else 0.14) * pw)
        for role, key in (("toe", "TOE"), ("heel", "HEEL")):
            v = get(role, s)
            if v is not None:
                out[f"{key}_{s}"] = v
        m1, m5 = get("meta1", s), get("meta5", s)
        if m1 is not None and m5 is not None:   # the ball of the foot: between the metatarsal heads
            out[f"BALL_{s}"] = 0.5 * (m1 + m5)
    ls, rs = get("shoulder", "L"), get("shoulder", "R")
    if ls is not None and rs is not None:
        width = np.linalg.norm(ls - rs, axis=-1, keepdims=True)
        mid = 0.5 * (ls + rs)
        below = hjc_mid if hjc_mid is not None else None
        if below is not None:
            down = _unit(below - mid)
            for s, v in (("L", ls), ("R", rs)):
                out[f"SJC_{s}"] = v + down * (0.12 * width)
    _head_and_neck(get, out)
    order = [n for n in MARKER_LAYOUT.joint_names if n in out]
    centres = np.stack([out[n] for n in order], axis=1) if order else np.zeros((T, 0, 3))
    found = {k: str(names[j]) for k, j in roles.items()}
    return order, centres, found


def _head_and_neck(get, out):
    """The neck (between C7 and the clavicles' notch) and the head joint (a third of the way from
    the head markers' centre down to the neck), where those markers are there."""
    c7, clav = get("c7", "C"), get("clav", "C")
    if c7 is None or clav is None:
        return
    out["NECK_C"] = 0.5 * (c7 + clav)
    head = [get(r, s) for r in ("head_front", "head_back") for s in "LR"]
    if all(h is not None for h in head):
        centre = sum(head) / 4.0
        out["HEAD_C"] = centre + (out["NECK_C"] - centre) / 3.0


def marker_layout(names) -> Layout:
    """:data:`MARKER_LAYOUT` plus the OpenPose BODY_25 points the file also has (OpenCap)."""
    given = {normalize_name(n) for n in names}
    table = dict(MARKER_LAYOUT.to_canonical)
    have = set(table.values())
    for src, kp in OPENPOSE25.to_canonical.items():
        if normalize_name(src) in given and kp not in have:
            table[src] = kp
            have.add(kp)
    derived = {kp: terms for kp, terms in OPENPOSE25.derived.items()
               if kp not in have and all(normalize_name(s) in given for s, _ in terms)}
    return Layout("markers", MARKER_LAYOUT.description, tuple(table), table, derived, notes=MARKER_LAYOUT.notes)
