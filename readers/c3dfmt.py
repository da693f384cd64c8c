"""``.c3d`` optical motion capture (Vicon Nexus, Qualisys, OptiTrack, Motion Analysis, Cortex).

Read through the ``c3d`` package (pure Python; an optional dependency: the
message says how to install it). What is read:

- the 3D points and their labels (``POINT:LABELS``; a ``Subject:`` prefix
  is dropped), a point whose residual is negative is missing on that frame;
- the point rate, the first frame and ``POINT:UNITS`` (usually ``mm``);
- analog channels are not read.

Skin markers (Plug-in Gait, Helen Hayes, OpenSim gait sets...) give joint
centres by the regressions of :mod:`.markers`; points whose labels are joint
names of a known layout are taken as they are. Points that are neither
(props, starting blocks, force-plate corners stored as points) are left out
with a note. The up axis is detected from the motion (C3D labs are Z up).

No ``bpy`` here.
"""

from __future__ import annotations

import struct
import warnings

import numpy as np

from ..errors import setting
from .base import finish_clip
from .clip import KeypointReadError

__all__ = ["read_c3d"]

#: Install hint when the ``c3d`` package is missing.
INSTALL_HINT = ("reading .c3d files needs the 'c3d' package: pip install c3d==0.6.0 (in Blender: "
                "Preferences > Add-ons > Neural IK > Install)")


def read_c3d(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read a ``.c3d`` file (see the module docstring)."""
    names, pos, file_fps, first, file_units = _read_points(path)
    warns = [] if first in (0, 1) else [f"the capture starts at frame {first}"]
    if layout is None:
        pos, names, layout = _body_points(path, pos, names, warns)
    return finish_clip(path, pos, names, fps=fps, file_fps=file_fps, layout=layout, units=units,
                       up_axis=up_axis, file_units=file_units, default_up_axis="Z", max_gap=max_gap,
                       warnings=warns, ground=ground)


def _read_points(path):
    """``(labels, points (T, M, 3) with NaN where missing, rate, first frame, units or None)``."""
    try:
        import c3d
    except ImportError:
        raise KeypointReadError(path, INSTALL_HINT) from None
    try:
        with open(path, "rb") as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "no analog data" and similar notes of the package
            reader = c3d.Reader(fh)
            labels = [str(x).strip() for x in reader.point_labels]
            rate = float(reader.point_rate)
            first = int(reader.first_frame)
            unit_param = reader.get("POINT:UNITS")
            file_units = unit_param.string_value.strip() if unit_param is not None else ""
            frames = [pts[:, :4].astype(np.float64) for _i, pts, _an in reader.read_frames()]
    except OSError as ex:
        raise KeypointReadError(path, f"cannot read the file ({ex.strerror or ex})") from None
    except (ValueError, KeyError, IndexError, TypeError, AssertionError, EOFError, struct.error) as ex:
        raise KeypointReadError(path, f"not a readable C3D file ({type(ex).__name__}: {ex})") from None
    if not frames:
        raise KeypointReadError(path, "no frames")
    data = np.stack(frames)                                   # (T, M, 4)
    if data.shape[1] == 0:
        raise KeypointReadError(path, "no 3D points (analog data only?)")
    pos = np.where((data[..., 3] < 0)[..., None], np.nan, data[..., :3])
    names = _unique([lab.split(":")[-1].strip() or f"point{i}" for i, lab in enumerate(labels[:pos.shape[1]])])
    names += [f"point{i}" for i in range(len(names), pos.shape[1])]
    if not np.isfinite(rate) or rate <= 0:
        raise KeypointReadError(path, f"point rate {rate:g}: not a frame rate (pass {setting('source_fps')})")
    return names, pos, rate, first, (file_units.lower() or None)


def _unique(names):
    seen, out = {}, []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k + 1}")
    return out


def _body_points(path, pos, names, warns):
    """Joint centres from the markers (or the named joints as they are); other points left out."""
    from .layouts import detect_layout
    from .markers import marker_roles
    from .trc import _with_joint_centres

    lay, score = detect_layout(names)
    if lay is not None and score >= 0.999:
        return pos, names, None
    pos2, names2, lay2 = _with_joint_centres(path, pos, names, warns)
    if lay2 is None:
        return pos, names, None
    body = set(marker_roles(names).values()) | set(range(len(names), len(names2)))
    used = set(lay2.to_canonical) | {s for terms in lay2.derived.values() for s, _w in terms}
    keep = [j for j, n in enumerate(names2) if j in body or n in used]
    dropped = len(names2) - len(keep)
    if dropped:
        warns.append(f"{dropped} points that are not body markers left out (props, plates...)")
    return pos2[:, keep], [names2[j] for j in keep], lay2
