"""Reading a source and baking it: the checks before any work (path, type, frame count), the read and
the bake of one clip onto an armature (``bake``, ``batch``, ``demo``)."""

from __future__ import annotations

import contextlib
import os

from ..blender_io.sources import SOURCE_EXTENSIONS as _SOURCE_EXTENSIONS
from .errors import CliError, UsageError

__all__ = ["SOURCE_EXTENSIONS", "check_source_path", "peek_frame_count", "check_frame_count", "read_source",
           "bake_one", "release_motion"]


#: Keypoint files ``bake`` and ``batch`` read (FBX and glTF through Blender's importers, a ``.blend``'s
#: animated armature).
SOURCE_EXTENSIONS = _SOURCE_EXTENSIONS


def check_source_path(path):
    """Validate a SOURCE argument (exit code 2 when missing or of an unknown type; 1 for a folder of 2D frames)."""
    from ..readers.image2d import openpose_frames

    if openpose_frames(path):   # an OpenPose output folder: named and refused as 2D image keypoints
        from ..readers import KeypointReadError, read_keypoints

        try:
            read_keypoints(path)
        except KeypointReadError as ex:
            raise CliError(str(ex)) from None
    ext = os.path.splitext(path)[1].lower()
    if ext not in SOURCE_EXTENSIONS:
        raise UsageError("{}: unknown source type {!r}; readable: {}".format(
            path, ext or "(none)", ", ".join(SOURCE_EXTENSIONS)))
    from .pathcheck import not_a_file

    why = not_a_file(path)
    if why is not None:
        raise UsageError("{}: {}".format(path, why))


def peek_frame_count(path):
    """Frame count of a ``.npz`` (keypoints, AMASS), ``.npy`` or ``.bvh`` file from its header only, else ``None``.

    Lets ``--max-frames`` refuse a huge file before it is loaded. Anything
    unexpected returns ``None`` (the reader reports bad files).
    """
    import zipfile

    import numpy as np

    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".npy", ".npz"):
            with contextlib.ExitStack() as stack:
                if ext == ".npz":   # keypoints, or an AMASS motion's rotations
                    archive = stack.enter_context(zipfile.ZipFile(path))
                    member = next((m for m in ("positions.npy", "poses.npy", "root_orient.npy")
                                   if m in archive.namelist()), None)
                    if member is None:
                        return None
                    handle = stack.enter_context(archive.open(member))
                else:
                    handle = stack.enter_context(open(path, "rb"))
                version = np.lib.format.read_magic(handle)
                shape = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                         else np.lib.format.read_array_header_2_0(handle))[0]
                return int(shape[0]) if len(shape) else None
        if ext == ".bvh":
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    parts = line.replace(":", " : ").split()
                    if len(parts) == 3 and parts[0].lower() == "frames" and parts[1] == ":":
                        return int(parts[2])
    except (OSError, ValueError, zipfile.BadZipFile, IndexError, TypeError):
        return None
    return None


def check_frame_count(source, n_source, max_frames, *, n_baked=None, source_fps=None, fps=None):
    """Refuse a clip longer than ``--max-frames`` (:class:`CliError` naming the file, the count and the flag).

    Parameters
    ----------
    source : str
    n_source : int
        Source frames (after ``--frames``).
    max_frames : int
    n_baked, source_fps, fps : optional
        Frames after resampling from ``source_fps`` to ``fps``.
    """
    if max_frames is None:
        return
    if n_source > max_frames:
        raise CliError("{}: {:,} frames, more than --max-frames {:,} (raise --max-frames to bake it, or bake a "
                       "part with --frames A:B)".format(source, n_source, max_frames))
    if n_baked is not None and n_baked > max_frames:
        raise CliError("{}: {:,} frames at {:g} fps resample to {:,} frames at {:g} fps, more than --max-frames "
                       "{:,} (lower --fps or raise --max-frames)".format(source, n_source, source_fps, n_baked,
                                                                         fps, max_frames))


def read_source(path, args):
    """Read a source file into a ``KeypointClip`` with the source flags (:func:`..blender_io.sources.read_source_file`).

    Parameters
    ----------
    path : str
    args : argparse.Namespace
        ``layout``, ``units``, ``up_axis``, ``source_fps``, ``ground``, ``image_size``.

    Returns
    -------
    readers.KeypointClip

    Raises
    ------
    readers.KeypointReadError
    """
    from ..blender_io.sources import read_source_file

    return read_source_file(path, layout=getattr(args, "layout", None), units=getattr(args, "units", None),
                            up_axis=getattr(args, "up_axis", None), fps=getattr(args, "source_fps", None),
                            ground=getattr(args, "ground", True), image_size=getattr(args, "image_size", None))


def bake_one(obj, clip, options, *, source_name, mapping=None, solver=None, progress=None, cancel=None,
             after_keys=None, preview=0):
    """Convert a clip to canonical keypoints and bake it onto ``obj``.

    The clip's motion is released (:func:`release_motion`) once the bake
    has taken what it reads, and the result's pose arrays
    (``result.retarget``) once the action holds them.

    Parameters
    ----------
    obj : bpy.types.Object
        The target armature.
    clip : readers.KeypointClip
    options : blender_io.bake.BakeOptions
    source_name : str
    mapping : retarget.mapping.BoneMapping, optional
    solver : model.inference.Solver, optional
    progress, cancel : callable, optional
    after_keys : callable, optional
        See :meth:`..blender_io.bake.BakeJob.run` (a file's armature: the
        exports, written while the figures are measured).
    preview : int
        Frames kept for a contact sheet (the result's ``preview``).

    Returns
    -------
    blender_io.bake.BakeResult
    """
    from ..blender_io.bake import BakeJob
    from ..readers import to_canonical

    keypoints, mask = to_canonical(clip)
    job = BakeJob(obj, keypoints, mask, clip.fps, options, source_name=source_name, mapping=mapping,
                  solver=solver, source_rig=getattr(clip, "source_rig", None))
    # the job holds what it reads (prepared, in the armature's axes): the clip's motion goes now
    # (hundreds of MB for a long clip), so that the bake's peak does not carry it
    del keypoints, mask
    release_motion(clip)
    result = job.run(progress, cancel, keep_pose=False, after_keys=after_keys, preview=preview)
    result.retarget = None   # the action holds the keys: the arrays go before the exports read it
    return result


def release_motion(clip):
    """Drop a read clip's per-frame arrays (``positions``, ``confidence``, ``source_rig``) once a bake took them.

    Its source, rate, layout, units, up axis and warnings stay (the report
    row reads them); it has no frames left.
    """
    import numpy as np

    clip.positions = np.zeros((0,) + tuple(np.shape(clip.positions)[1:]))
    clip.confidence = None
    clip.source_rig = None
