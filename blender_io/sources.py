"""Which reader reads which source, written once for the import dialog and the command line.

Keypoint files (and an OpenPose output folder, named and refused as 2D)
go to :func:`..readers.read_keypoints`; FBX, glTF and ``.blend`` files to
Blender's importers (:func:`.armature_source.read_armature_file`). A file
nested too deeply for Python's JSON decoder is a read error, not a crash.
"""

from __future__ import annotations

import os

from ..readers import EXTENSIONS, KeypointReadError, read_keypoints
from .armature_source import ARMATURE_SOURCE_EXTENSIONS, read_armature_file

__all__ = ["SOURCE_EXTENSIONS", "read_source_file", "is_armature_file"]

#: Every source file type: keypoint files, then armature files (FBX and glTF through Blender's importers, a
#: ``.blend``'s animated armature).
SOURCE_EXTENSIONS = EXTENSIONS + ARMATURE_SOURCE_EXTENSIONS


def is_armature_file(path) -> bool:
    """Whether ``path`` is read through Blender's importers (an armature's motion) rather than a reader."""
    return os.path.splitext(os.fspath(path))[1].lower() in ARMATURE_SOURCE_EXTENSIONS


def read_source_file(path, *, layout=None, units=None, up_axis=None, fps=None, ground=True, image_size=None):
    """Read a source file (or folder) into a ``KeypointClip`` with the reader its type takes.

    Parameters
    ----------
    path : str
    layout, units, up_axis, fps, ground
        The source settings (``pipeline/options.py``: ``SOURCE_SETTINGS``);
        ``None``: from the file, or detected.
    image_size : (int, int), optional
        For MediaPipe image landmarks (``.json``); other files ignore it.

    Raises
    ------
    readers.KeypointReadError
    """
    kwargs = dict(layout=layout, units=units, up_axis=up_axis, fps=fps, ground=ground)
    try:
        if is_armature_file(path):
            return read_armature_file(path, **kwargs)   # imported, sampled and removed again
        return read_keypoints(path, image_size=image_size, **kwargs)
    except RecursionError:  # json's decoder on thousands of nested brackets
        raise KeypointReadError(path, "nested too deeply to be read (thousands of nested brackets: not a "
                                "keypoint file?)") from None
