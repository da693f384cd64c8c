"""``.trc`` marker / joint trajectories (OpenSim, OpenCap, Vicon, Pose2Sim).

Layout of the file (tab separated)::

    PathFileType  4  (X/Y/Z)  walk.trc
    DataRate  CameraRate  NumFrames  NumMarkers  Units  OrigDataRate  OrigDataStartFrame  OrigNumFrames
    100.00    100.00      500        41          mm     100.00        1                   500
    Frame#  Time  RShoulder        LShoulder ...
                  X1  Y1  Z1       X2  Y2  Z2 ...
    <blank line, optional>
    1  0.000  ...

``DataRate`` gives the frame rate and ``Units`` the units; the up axis is
not stated: Y up (OpenSim) is assumed unless the pose says otherwise.
Empty cells, short rows and ``NaN`` are missing points.

No ``bpy`` here.
"""

from __future__ import annotations

import math

from .base import finish_clip
from .clip import KeypointReadError
from .csvfmt import _read_text, parse_numeric_table

__all__ = ["read_trc"]


def read_trc(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read a ``.trc`` file (format in the module docstring)."""
    text = _read_text(path).replace("\r", "")
    lines = text.split("\n")
    if not text.strip():
        raise KeypointReadError(path, "empty file")
    if len(lines) < 5:
        raise KeypointReadError(path, "truncated header (a TRC header has 5 lines)")
    if not lines[0].startswith("PathFileType"):
        raise KeypointReadError(path, "line 1: not a TRC file (expected 'PathFileType')")
    keys = [k.strip() for k in lines[1].split("\t")]
    vals = [v.strip() for v in lines[2].split("\t")]
    meta = dict(zip(keys, vals))
    file_fps = None
    for k in ("DataRate", "CameraRate", "OrigDataRate"):
        try:
            v = float(meta.get(k, ""))
            if v > 0 and math.isfinite(v):
                file_fps = v
                break
        except ValueError:
            pass
    rate_given = file_fps is not None and k == "DataRate"
    file_units = meta.get("Units") or None
    try:
        n_markers = int(float(meta["NumMarkers"])) if meta.get("NumMarkers") else None
        n_frames = int(float(meta["NumFrames"])) if meta.get("NumFrames") else None
    except ValueError:
        raise KeypointReadError(path, "line 3: NumFrames/NumMarkers are not numbers") from None

    name_cells = lines[3].split("\t")
    if len(name_cells) < 3 or name_cells[0].strip().lower() not in ("frame#", "frame"):
        raise KeypointReadError(path, "line 4: expected 'Frame#<tab>Time<tab>marker names'")
    names = [c.strip() for c in name_cells[2:] if c.strip()]
    if n_markers is not None and n_markers != len(names):
        if n_markers < len(names):
            names = names[:n_markers]
        else:
            raise KeypointReadError(path, f"line 4: {len(names)} marker names but NumMarkers is {n_markers}")
    if not names:
        raise KeypointReadError(path, "line 4: no marker names")
    ncols = 2 + 3 * len(names)

    data_lines = [ln for ln in lines[5:]]
    while data_lines and not data_lines[0].strip():
        data_lines.pop(0)
    first_line = len(lines) - len(data_lines) + 1
    body_lines = [ln.rstrip("\t ") if ln.strip() else ln for ln in data_lines]
    # rows may stop early (missing trailing markers) or carry a trailing tab: pad/trim
    fixed = []
    for ln in body_lines:
        if not ln.strip():
            continue
        n = ln.count("\t") + 1
        if n < ncols:
            ln = ln + "\t" * (ncols - n)
        elif n > ncols:
            cells = ln.split("\t")
            if any(c.strip() for c in cells[ncols:]):
                raise KeypointReadError(path, f"row with {n} values, expected {ncols}")
            ln = "\t".join(cells[:ncols])
        fixed.append(ln)
    if not fixed:
        raise KeypointReadError(path, "no data rows")
    data = parse_numeric_table(path, "\n".join(fixed), ncols, sep="\t", first_line=first_line)
    warns = []
    if n_frames is not None and n_frames != data.shape[0]:
        warns.append(f"header says {n_frames} frames, the file has {data.shape[0]}")
    if not rate_given and fps is None:  # the Time column is the next best witness of the rate
        time_fps = _rate_from_time(data[:, 1])
        if time_fps is not None:
            warns.append(f"DataRate {meta.get('DataRate', '(missing)') or '(empty)'} is not a frame rate: "
                         f"{time_fps:g} fps taken from the Time column")
            file_fps = time_fps
    pos = data[:, 2:].reshape(data.shape[0], len(names), 3)
    if layout is None:
        pos, names, layout = _with_joint_centres(path, pos, names, warns)
    return finish_clip(path, pos, names, fps=fps, file_fps=file_fps, layout=layout, units=units,
                       up_axis=up_axis, file_units=file_units, default_up_axis="Y", max_gap=max_gap,
                       warnings=warns, ground=ground)


def _rate_from_time(times):
    """Frames per second from a TRC's Time column (median step; ``None`` when it does not increase)."""
    import numpy as np

    steps = np.diff(np.asarray(times, dtype=np.float64))
    steps = steps[np.isfinite(steps)]
    if steps.size == 0 or not (steps > 0).all():
        return None
    rate = 1.0 / float(np.median(steps))
    if not math.isfinite(rate):
        return None
    return float(round(rate)) if abs(rate - round(rate)) < 1e-3 * rate else rate


#: A leg needs these centres (from markers or from named points) to be solved.
_LEG = (("thigh", "hip (ASIS and PSIS markers)"), ("calf", "knee (lateral and medial epicondyle markers)"),
        ("foot", "ankle (lateral and medial malleolus markers)"))


def _with_joint_centres(path, pos, names, warns):
    """Append joint centres regressed from anatomical markers; returns ``(pos, names, layout or None)``."""
    import numpy as np

    from ..errors import setting
    from .layouts import canonical_weights, detect_layout
    from .markers import marker_joint_centres, marker_layout

    centre_names, centres, found = marker_joint_centres(names, pos)
    if not centre_names:
        return pos, names, None
    name, score = detect_layout(names)
    if name is not None and score >= 0.999:
        return pos, names, None  # an exact keypoint layout: no regression needed
    taken = set(names)
    centre_names = [n if n not in taken else n + "_centre" for n in centre_names]
    all_names = list(names) + centre_names
    lay = marker_layout(all_names)
    _, defined = canonical_weights(lay, all_names)
    from ..model.skeleton import KEYPOINTS
    missing = []
    for s, side in (("l", "left"), ("r", "right")):
        for joint, what in _LEG:
            if not defined[KEYPOINTS.index(f"{joint}_{s}")]:
                missing.append(f"{side} {what}")
    if missing:
        got = ", ".join(f"{side} {role}={n}" for (role, side), n in sorted(found.items())) or "none"
        raise KeypointReadError(
            path, f"marker set missing part of a leg: no {'; no '.join(missing)}. Recognised markers: {got}. "
            "Add the markers, or pass a mapping of marker names to canonical keypoints with "
            f"{setting('layout', 'MAPPING.json')}")
    warns.append(f"joint centres regressed from {len(found)} anatomical markers ({', '.join(centre_names)})")
    return np.concatenate([pos, centres], axis=1), all_names, lay
