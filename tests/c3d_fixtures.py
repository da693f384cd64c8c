"""Plug-in Gait C3D files made from a known motion (for the C3D reader's tests).

:func:`plug_in_gait_markers` places the lower-body and trunk markers of
Vicon's Plug-in Gait model on canonical keypoints by inverting the joint
centre regressions of ``readers/markers.py`` (hip centres from the pelvis
markers, a lateral knee and ankle marker half a joint's width out), so the
centres a reader regresses are the keypoints the markers were made from.
"""

import numpy as np

from neural_ik.model.skeleton import KEYPOINTS

K = {n: i for i, n in enumerate(KEYPOINTS)}


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def plug_in_gait_markers(kp):
    """Marker name -> (T, 3) positions (metres, Z up) for canonical keypoints ``kp`` (T, 32, 3)."""
    hl, hr = kp[:, K["thigh_l"]], kp[:, K["thigh_r"]]
    xh = _unit(hl - hr)                                      # towards the left
    up = np.array([0.0, 0.0, 1.0])
    fh = _unit(np.cross(xh, up))                             # forward: left x up... then up = forward x left
    uh = np.cross(fh, xh)
    pw = (np.linalg.norm(hl - hr, axis=-1, keepdims=True)) / 0.72
    pd = 0.6 * pw
    mid_a = 0.5 * (hl + hr) + fh * (0.24 * pd + 0.04 * pw) + uh * (0.34 * pw)
    mid_p = mid_a - fh * pd
    m = {"LASI": mid_a + xh * pw / 2, "RASI": mid_a - xh * pw / 2,
         "LPSI": mid_p + xh * 0.2 * pw, "RPSI": mid_p - xh * 0.2 * pw}
    for s, S, sg in (("l", "L", 1.0), ("r", "R", -1.0)):
        m[f"{S}KNE"] = kp[:, K[f"calf_{s}"]] + sg * xh * 0.2 * pw
        m[f"{S}ANK"] = kp[:, K[f"foot_{s}"]] + sg * xh * 0.14 * pw
        m[f"{S}TOE"] = kp[:, K[f"toe_tip_{s}"]]
        m[f"{S}HEE"] = kp[:, K[f"heel_{s}"]]
        m[f"{S}SHO"] = kp[:, K[f"upperarm_{s}"]] + uh * 0.02
        m[f"{S}ELB"] = kp[:, K[f"forearm_{s}"]] + sg * xh * 0.03
        m[f"{S}WRA"] = kp[:, K[f"hand_{s}"]] + fh * 0.025
        m[f"{S}WRB"] = kp[:, K[f"hand_{s}"]] - fh * 0.025
        m[f"{S}THI"] = 0.5 * (kp[:, K[f"thigh_{s}"]] + kp[:, K[f"calf_{s}"]]) + sg * xh * 0.07
        m[f"{S}TIB"] = 0.5 * (kp[:, K[f"calf_{s}"]] + kp[:, K[f"foot_{s}"]]) + sg * xh * 0.05
    neck = kp[:, K["neck"]]
    m["C7"] = neck - fh * 0.06
    m["CLAV"] = neck + fh * 0.06
    m["STRN"] = kp[:, K["spine2"]] + fh * 0.1
    m["T10"] = kp[:, K["spine2"]] - fh * 0.1
    centre = neck + (kp[:, K["head"]] - neck) * 1.5          # the head joint a third of the way down
    for s, sg in (("L", 1.0), ("R", -1.0)):
        m[f"{s}FHD"] = centre + fh * 0.08 + sg * xh * 0.06
        m[f"{s}BHD"] = centre - fh * 0.08 + sg * xh * 0.06
    return m


def write_c3d(path, markers, fps=100.0, *, units_mm=True, missing=None, extra=None, first_frame=1):
    """Write ``markers`` (name -> (T, 3) metres) as a C3D file; ``missing``: name -> frames with no point."""
    import c3d

    names = list(markers) + list(extra or {})
    pts = np.stack([markers[n] for n in markers] + [extra[n] for n in (extra or {})], 1)   # (T, M, 3)
    scale = 1000.0 if units_mm else 1.0
    writer = c3d.Writer(point_rate=float(fps), analog_rate=0.0)
    frames = []
    for t in range(pts.shape[0]):
        p = np.zeros((pts.shape[1], 5), dtype=np.float32)
        p[:, :3] = pts[t] * scale
        for n, fr in (missing or {}).items():
            if t in fr:
                p[names.index(n), 3] = -1.0
        frames.append((p, np.zeros((0, 0), dtype=np.float32)))
    writer.add_frames(frames)
    writer.set_point_labels(["Subject:" + n for n in names])
    writer.set_start_frame(first_frame)
    if not units_mm:
        writer.get("POINT").get("UNITS")._data = b"m "   # (the package writes mm by default)
    with open(path, "wb") as fh:
        writer.write(fh)
    return path
