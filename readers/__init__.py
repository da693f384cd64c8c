"""Keypoint readers: files -> :class:`KeypointClip` -> canonical keypoints.

Outside the Blender layer (no ``bpy``); FBX goes through Blender's importer
elsewhere. Every reader returns a :class:`KeypointClip` (metres, Z up,
NaN = missing) and raises :class:`KeypointReadError` naming the file and
the problem.

>>> clip = read_keypoints("walk.csv", units="mm")          # doctest: +SKIP
>>> keypoints, mask = to_canonical(clip)                    # doctest: +SKIP
>>> clip30 = resample(clip, 30.0)                           # doctest: +SKIP

Formats (by extension): ``.npz`` (interchange format, see
:mod:`.npz`; AMASS body-model motions, :mod:`.amass`), ``.npy`` (recognised by joint count and geometry, or
``layout=``), ``.json`` (:mod:`.jsonfmt`), ``.csv`` (:mod:`.csvfmt`),
``.trc`` (:mod:`.trc`; anatomical markers -> joint centres, :mod:`.markers`),
``.bvh`` (:mod:`.bvh`). Layouts: :mod:`.layouts`. Armature files (FBX, glTF,
``.blend``) are read in Blender by :mod:`..blender_io.armature_source`.

Units, up axis and floor come from the data (:func:`.base.finish_clip`):
units from the body's height, the up axis from the motion, and the clip is
put on the floor unless ``ground=False``. Sources with a hierarchy carry the
source skeleton and its motion, ``clip.source_rig`` (:mod:`.source_rig`).
"""

from __future__ import annotations

import importlib
import os

from .base import DEFAULT_FPS, UNITS, UP_AXES, convert_up_axis, to_canonical
from .clip import KeypointClip, KeypointReadError
from .frames import MAX_GAP, fill_gaps, resample
from .measure import body_height, body_size, detect_up_axis, floor_height, upright_share
from .source_rig import SourceRig
from .layouts import LAYOUTS, Layout, detect_layout, get_layout, layout_table, load_mapping

__all__ = [
    "KeypointClip",
    "KeypointReadError",
    "read_keypoints",
    "to_canonical",
    "resample",
    "fill_gaps",
    "convert_up_axis",
    "body_size",
    "body_height",
    "detect_up_axis",
    "floor_height",
    "upright_share",
    "SourceRig",
    "LAYOUTS",
    "Layout",
    "detect_layout",
    "get_layout",
    "load_mapping",
    "layout_table",
    "EXTENSIONS",
    "UNITS",
    "UP_AXES",
    "DEFAULT_FPS",
    "MAX_GAP",
]

#: Extension -> (reader module, function name); modules are imported on first use.
_READERS = {
    ".npz": ("npz", "read_npz"),
    ".npy": ("npz", "read_npy"),
    ".json": ("jsonfmt", "read_json"),
    ".csv": ("csvfmt", "read_csv"),
    ".trc": ("trc", "read_trc"),
    ".c3d": ("c3dfmt", "read_c3d"),
    ".bvh": ("bvh", "read_bvh_keypoints"),
}

#: File extensions :func:`read_keypoints` reads.
EXTENSIONS = tuple(_READERS)


def _reader(ext):
    entry = _READERS.get(ext)
    if entry is None:
        return None
    module, name = entry
    return getattr(importlib.import_module(f".{module}", __name__), name)


def read_keypoints(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap: int = MAX_GAP,
                   ground: bool = True, image_size=None) -> KeypointClip:
    """Read a keypoint file, dispatching on its extension.

    Parameters
    ----------
    path : str or os.PathLike
    layout : str, dict, path or Layout, optional
        Layout name (see :data:`LAYOUTS`), user mapping (dict or ``.json``
        file: source name -> canonical keypoint) or Layout. Detected from
        the joint names when omitted.
    units : {"m", "cm", "mm", "in", "cmu"}, optional
        Overrides the file's units (or the guess from the body size).
    up_axis : {"Z", "Y", "-Y", "-Z"}, optional
        Overrides the file's up axis (or the format's convention, or the
        one detected from the pose).
    fps : float, optional
        Overrides the file's frame rate (default 30 when the file has none).
    max_gap : int
        Gaps of up to this many frames are filled linearly (0: none).
    ground : bool
        Move the clip vertically so that its lowest foot point touches the
        floor (default; the shift is reported in the warnings and kept in
        ``clip.floor_shift``). ``False`` keeps the file's heights.
    image_size : (int, int), optional
        Width and height (pixels) of the video that MediaPipe image
        landmarks (``.json``, x and y in 0..1) were taken from: they are
        lifted to 3D (:mod:`.image2d`); without it they are refused. Other
        files ignore it.

    Returns
    -------
    KeypointClip

    Raises
    ------
    KeypointReadError
        Unknown extension, a folder (an OpenPose output folder: 2D), missing, empty, truncated or garbage file, bad
        shapes, duplicate or unknown joint names, inf values, all points
        missing, absurd scale; the message names the file and the problem.
    """
    path = os.fspath(path)
    if os.path.isdir(path):   # an OpenPose output folder is named and refused as 2D
        from .image2d import read_folder

        read_folder(path)
    ext = os.path.splitext(path)[1].lower()
    reader = _reader(ext)
    if reader is None:
        hint = " (FBX goes through Blender's importer)" if ext == ".fbx" else ""
        raise KeypointReadError(path, f"unknown keypoint file type {ext or '(none)'!r}; "
                                f"readable: {', '.join(EXTENSIONS)}{hint}")
    if not os.path.isfile(path):
        raise KeypointReadError(path, "no such file")
    if os.path.getsize(path) == 0:
        raise KeypointReadError(path, "empty file")
    extra = {"image_size": image_size} if image_size is not None and ext == ".json" else {}
    return reader(path, layout=layout, units=units, up_axis=up_axis, fps=fps, max_gap=max_gap, ground=ground,
                  **extra)
