"""``.json`` keypoints as written by pose tools (MediaPipe Pose world landmarks...).

Accepted shapes
---------------
1. An object with frames::

       {"fps": 30, "units": "m", "up_axis": "-Y", "layout": "mediapipe_pose",
        "joint_names": [...],
        "frames": [{"landmarks": [{"name": "nose", "x": .., "y": .., "z": .., "visibility": ..}, ...]},
                   ...]}

   Every key except ``frames`` is optional. A frame may also use
   ``world_landmarks``, ``pose_world_landmarks`` or ``keypoints`` instead of
   ``landmarks``, or be the landmark list itself. A frame with an empty list
   (no detection) is all missing.
2. A bare list of frames, each a list of landmarks (dicts with ``x``, ``y``,
   ``z`` and optional ``visibility``/``presence``/``score``/``confidence``,
   or ``[x, y, z]`` / ``[x, y, z, visibility]`` lists).

MediaPipe's image landmarks (a frame's ``pose_landmarks``, or x and y all
within 0..1) are lifted to 3D with ``image_size`` and refused without it
(:mod:`.image2d`); 2D detector output (OpenPose, COCO, AlphaPose) is refused
with what to do.

Points without ``name`` take the names of the ``layout`` argument, or of
MediaPipe Pose when there are 33 (the MediaPipe world landmarks default:
metres, origin between the hips, **y down**, z towards the camera) or of the
canonical skeleton when there are 32. ``null`` coordinates are missing.

No ``bpy`` here.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import setting
from .base import finish_clip
from .clip import KeypointReadError
from .image2d import IMAGE_FRAME_KEYS, describe_2d, image_landmarks, refuse_2d
from .layouts import get_layout, recognise_nameless

__all__ = ["read_json"]

_FRAME_KEYS = ("landmarks", "world_landmarks", "pose_world_landmarks", "keypoints", "joints", "points")
_CONF_KEYS = ("visibility", "presence", "score", "confidence")


def _landmarks(frame):
    """A frame's landmark list (``None`` when it has none) and whether it is MediaPipe's image landmarks."""
    if isinstance(frame, dict):
        for k in _FRAME_KEYS + IMAGE_FRAME_KEYS:
            if k in frame:
                return frame[k], k in IMAGE_FRAME_KEYS
        return None, False
    return frame, False


def _num(v):
    if v is None:
        return np.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(repr(v))
    return float(v)


def read_json(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True, image_size=None):
    """Read pose-tool JSON (shapes in the module docstring); ``image_size`` (W, H) lifts image landmarks."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise KeypointReadError(path, "not a text file (binary data where JSON was expected)") from None
    except json.JSONDecodeError as ex:
        raise KeypointReadError(path, f"invalid or truncated JSON at line {ex.lineno}, column {ex.colno}: {ex.msg}") from None
    except RecursionError:
        raise KeypointReadError(path, "nested too deeply to be keypoints (JSON)") from None
    except ValueError as ex:  # an integer past Python's digit limit
        raise KeypointReadError(path, f"a number too long to be read ({str(ex).split(';')[0]}): "
                                "not a keypoint file?") from None
    except OSError as ex:
        raise KeypointReadError(path, f"cannot read ({ex})") from None

    two_d = describe_2d(data)
    if two_d:
        raise refuse_2d(path, two_d)
    meta = {}
    if isinstance(data, dict):
        meta = data
        frames = data.get("frames")
        if frames is None:
            raise KeypointReadError(path, "a JSON object needs a 'frames' list")
    else:
        frames = data
    if not isinstance(frames, list):
        raise KeypointReadError(path, "frames must be a list")
    if not frames:
        raise KeypointReadError(path, "no frames")

    lists, image_key = [], False
    for t, fr in enumerate(frames):
        lm, is_image = _landmarks(fr)
        image_key |= is_image
        if lm is None:
            lm = []
        if not isinstance(lm, list):
            raise KeypointReadError(path, f"frame {t}: landmarks must be a list")
        lists.append(lm)
    J = max(len(lm) for lm in lists)
    if J == 0:
        raise KeypointReadError(path, "no landmarks in any frame")

    T = len(lists)
    pos = np.full((T, J, 3), np.nan)
    conf = np.full((T, J), np.nan)
    has_conf = False
    names = [None] * J
    for t, lm in enumerate(lists):
        if lm and len(lm) != J:
            raise KeypointReadError(path, f"frame {t} has {len(lm)} landmarks, other frames {J}")
        for j, pt in enumerate(lm):
            try:
                if isinstance(pt, dict):
                    pos[t, j] = (_num(pt.get("x")), _num(pt.get("y")), _num(pt.get("z")))
                    for k in _CONF_KEYS:
                        if k in pt:
                            conf[t, j] = _num(pt[k])
                            has_conf = True
                            break
                    n = pt.get("name")
                    if n is not None:
                        if names[j] is None:
                            names[j] = str(n)
                        elif names[j] != str(n):
                            raise KeypointReadError(path, f"frame {t}: landmark {j} is named {n!r}, "
                                                    f"earlier frames call it {names[j]!r}")
                elif isinstance(pt, (list, tuple)) and len(pt) in (3, 4):
                    pos[t, j] = [_num(v) for v in pt[:3]]
                    if len(pt) == 4:
                        conf[t, j] = _num(pt[3])
                        has_conf = True
                else:
                    raise TypeError(repr(pt)[:40])
            except (TypeError, ValueError) as ex:
                raise KeypointReadError(path, f"frame {t}, landmark {j}: not a point ({ex})") from None

    if all(n is not None for n in names):
        pass
    elif "joint_names" in meta:
        names = [str(n) for n in meta["joint_names"]]
        if len(names) != J:
            raise KeypointReadError(path, f"{len(names)} joint_names for {J} landmarks per frame")
    else:
        lay_arg = layout if layout is not None else meta.get("layout")
        if lay_arg is not None:
            try:
                lay = get_layout(lay_arg)
            except (KeyError, ValueError) as ex:
                raise KeypointReadError(path, str(ex).strip("'\"")) from None
        else:
            lay, nl_names, reason = recognise_nameless(pos)
            if lay is None:
                raise KeypointReadError(path, f"unnamed landmarks: {reason}; pass {setting('layout', 'NAME')} "
                                        "(e.g. coco17)")
        if lay_arg is not None and len(lay.joint_names) != J:
            raise KeypointReadError(path, f"{J} landmarks per frame but layout {lay.name!r} has {len(lay.joint_names)}")
        names = list(lay.joint_names) if lay_arg is not None else nl_names
        if layout is None:
            layout = lay

    if layout is None and meta.get("layout") is not None:
        layout = meta["layout"]
    file_fps = meta.get("fps", meta.get("frame_rate"))
    if file_fps is not None and (isinstance(file_fps, bool) or not isinstance(file_fps, (int, float))):
        raise KeypointReadError(path, f"'fps' must be a number, got {file_fps!r}")
    file_units, file_up, warns = meta.get("units"), meta.get("up_axis"), []
    lifted = image_landmarks(path, pos, names, layout=layout, explicit=image_key, image_size=image_size,
                             units=units if units is not None else file_units)
    if lifted is not None:   # pixels scaled to a body's height: metres, y down
        pos, warns = lifted
        units, file_units, file_up = None, "m", "-Y"
    return finish_clip(
        path, pos, names, fps=fps, file_fps=file_fps, confidence=conf if has_conf else None, layout=layout,
        units=units, up_axis=up_axis, file_units=file_units, file_up_axis=file_up,
        default_up_axis="-Y", max_gap=max_gap, ground=ground, warnings=warns,
    )
