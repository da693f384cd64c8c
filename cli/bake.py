"""``bake``: solve one keypoint file and bake it onto a target rig.

``neural-ik bake SOURCE --target TARGET [--out OUT.blend] [--export OUT.bvh|.fbx|.glb] [options]``
"""

from __future__ import annotations

import math
import os
import sys
import time

from ..outputs import remove_pending
from . import argtypes, arguments, pathcheck, sources
from ..errors import UserError
from .errors import CliError, UsageError, exit_code, guarded, say
from .progress import Progress
from .report import emit_report, headline, result_row, summary

__all__ = ["add_parser", "run", "bake_file", "bake_and_write", "load_bake_target", "write_outputs"]


def add_parser(subparsers):
    """Add the ``bake`` subcommand."""
    parser = subparsers.add_parser(
        "bake",
        help="bake one keypoint file onto a rig",
        description=(
            "Solve the keypoints of SOURCE (.npz, .npy, .json, .csv, .trc, .bvh or .fbx) with the network and "
            "bake them as a new action onto TARGET. A source holding only effectors (pelvis, head, hands, "
            "feet) is solved in the sparse mode. Outputs are written to a temporary name and renamed when "
            "complete. Exit codes: 0 done, 1 failed, 2 bad arguments."
        ),
    )
    parser.add_argument("source", metavar="SOURCE", help="keypoint file")
    parser.add_argument("--out", metavar="OUT.blend", default=None,
                        help="save the target scene plus the new action as a .blend file")
    parser.add_argument("--export", metavar="OUT.bvh|.fbx|.glb", action="append", default=None,
                        help="export the baked armature with Blender's exporter (repeatable); the skeleton "
                             "keeps the target's bone names and rest pose")
    parser.add_argument("--preview", metavar="OUT.png", default=None,
                        help="render a contact sheet of the bake: the input keypoints and the baked rig side by "
                             "side over the floor at six frames")
    arguments.add_bake_arguments(parser)
    return parser


def input_files(args, *sources):
    """Files a bake reads (sources, a target file, ``--mapping``, a ``--layout`` file): no output may replace one."""
    files = [p for p in sources if p]
    for path in (args.target, args.mapping, args.layout):
        if path and os.path.isfile(path):
            files.append(path)
    return files


def check_outputs(args):
    """Validate ``--out``, ``--export`` and ``--report`` before any work (exit code 2 on a bad path).

    Each must be a file name whose folder can be written (see
    :func:`.pathcheck.check_output_paths`), none the same file as another or
    as an input.
    """
    from ..blender_io.export import check_export_path

    if args.out is not None and not args.out.lower().endswith(".blend"):
        raise UsageError("--out {}: must be a .blend file".format(args.out))
    preview = getattr(args, "preview", None)
    if preview is not None and not preview.lower().endswith(".png"):
        raise UsageError("--preview {}: must be a .png file".format(preview))
    for path in args.export or []:
        check_export_path(path)
    outputs = [("--out", args.out)] + [("--export", p) for p in args.export or []] + [("--report", args.report),
                                                                                        ("--preview", preview)]
    pathcheck.check_output_paths(outputs, input_files(args, args.source))


def action_name_for(source):
    """Action name for a source file: its name without the extension."""
    return os.path.splitext(os.path.basename(source))[0] or "neural_ik"


def bake_file(source, target, args, *, solver=None, progress=None, cancel=None, action_name=None,
              mapping=None, after_keys=None, preview=0):
    """Read ``source`` and bake it onto the loaded target; returns ``(row, result)``.

    Parameters
    ----------
    source : str
    target : .targets.Target
    args : argparse.Namespace
        The bake flags.
    solver : model.inference.Solver, optional
    progress : .progress.Progress, optional
    cancel : callable, optional
    action_name : str, optional
    mapping : BoneMapping, optional
    after_keys : callable, optional
        Called once the keys are written (:meth:`..blender_io.bake.BakeJob.run`).
    preview : int
        Frames kept for a contact sheet (the result's ``preview``).

    Returns
    -------
    row : dict
        The report row (``outputs`` still empty).
    result : blender_io.bake.BakeResult

    Raises
    ------
    CliError
        The file cannot be read or baked (the message names the file).
    """
    from ..readers import KeypointReadError
    from ..blender_io.targets import target_label

    t0 = time.perf_counter()
    max_frames = getattr(args, "max_frames", arguments.MAX_FRAMES)
    peeked = sources.peek_frame_count(source)
    if peeked is not None and args.frames is not None:
        peeked = _sliced(peeked, args.frames)
    if peeked is not None:  # a huge file is refused before it is loaded
        sources.check_frame_count(source, peeked, max_frames)
    try:
        clip = sources.read_source(source, args)
    except KeypointReadError as ex:
        raise CliError(str(ex)) from None
    t_read = time.perf_counter() - t0
    if solver is None:  # after reading: a bad source is reported before the network is loaded
        solver = get_solver(args)
    result = _bake(target, clip, source, args, solver=solver, progress=progress, cancel=cancel,
                   action_name=action_name or action_name_for(source), mapping=mapping, after_keys=after_keys,
                   preview=preview)
    action = getattr(result, "action", None)
    if action is not None:
        action.use_fake_user = True
        action["neural_ik_source"] = os.path.abspath(source)
    row = result_row(result, clip, os.path.abspath(source), target_label(target.spec), {"read": t_read})
    row["warnings"].extend(getattr(target, "warnings", None) or [])
    return row, result


def _sliced(n, frames):
    a, b = frames
    return len(range(n)[slice(a, b)])


def baked_frame_count(n_source, source_fps, fps, frames=None):
    """Frames a bake makes from ``n_source`` source frames (after ``--frames`` and resampling)."""
    n = _sliced(n_source, frames) if frames is not None else n_source
    if n < 2 or abs(fps - source_fps) < 1e-6:
        return n
    return int(math.floor((n - 1) / source_fps * fps + 1e-6)) + 1


def _scene_rate(fps):
    """``(fps, fps_base)`` a scene is set to for ``fps`` (``fps_base`` single precision, as Blender keeps it)."""
    import numpy as np

    whole = int(math.ceil(fps - 1e-6))
    return whole, float(np.float32(whole / float(fps)))


def set_scene_fps(scene, fps):
    """Set a scene's frame rate (``fps`` / ``fps_base``) to ``fps``."""
    scene.render.fps, scene.render.fps_base = _scene_rate(fps)


def prepare_scene(target, fps, n_frames, frame_start=None):
    """Frame rate and frame range of a scene the CLI made (imported or built-in targets).

    A ``.blend`` target's scene keeps its own settings (the bake defaults to
    its frame rate); other targets play at the baked rate and their frame
    range grows to hold the longest baked clip.

    Returns
    -------
    float or None
        The frame rate to bake at (``None``: the scene's).
    """
    from ..readers.bvh_armature import FileArmature

    if target.kind == "blend":
        return None
    if isinstance(target.obj, FileArmature):   # no scene: the bake's own rate
        return fps
    import bpy

    scene = bpy.context.scene
    set_scene_fps(scene, fps)
    start = scene.frame_start if frame_start is None else frame_start
    end = start + max(int(n_frames), 1) - 1
    if not getattr(target, "range_set", False):
        scene.frame_end = max(end, scene.frame_start)
        target.range_set = True
    else:
        scene.frame_end = max(scene.frame_end, end)
    return fps


def _bake(target, clip, source, args, *, solver, progress, cancel, action_name, mapping, after_keys=None, preview=0):
    from ..blender_io.bake import BakeCancelled, BakeError

    fps = args.fps or clip.fps
    frames = argtypes.resolve_frames(args.frames, clip.num_frames, source)
    n = baked_frame_count(clip.num_frames, clip.fps, fps, frames)
    n_source = frames[1] - frames[0] if frames is not None else clip.num_frames
    sources.check_frame_count(source, n_source, getattr(args, "max_frames", arguments.MAX_FRAMES), n_baked=n,
                             source_fps=clip.fps, fps=fps)
    if args.frame_start is not None and args.frame_start + n - 1 > argtypes.FRAME_MAX:
        raise CliError("{}: --frame-start {} with {} baked frames ends at frame {}, past Blender's last frame "
                       "{}".format(source, args.frame_start, n, args.frame_start + n - 1, argtypes.FRAME_MAX))
    fps = prepare_scene(target, fps, n, args.frame_start)
    if progress is not None:
        progress.clip_frames = n
    options = arguments.bake_options(args, action_name=action_name, fps=fps, frames=frames)
    callback = progress.callback() if progress is not None else None
    try:
        return sources.bake_one(target.obj, clip, options, source_name=os.path.basename(source), mapping=mapping,
                               solver=solver, progress=callback, cancel=cancel, after_keys=after_keys, preview=preview)
    except BakeCancelled:
        raise KeyboardInterrupt from None
    except BakeError as ex:
        raise CliError("{}: {}".format(source, ex)) from None
    except (ValueError, KeyError) as ex:  # e.g. a layout that gives no usable keypoints
        raise CliError("{}: {}".format(source, " ".join(str(ex).split()))) from None


def get_solver(args):
    """The solver for ``--device``, ``--precision`` and ``--weights``, loaded when a clip first needs the network.

    A clip whose source skeleton gives every rotation is baked without it (a
    batch of BVH clips never imports torch). An unknown device or a missing
    weights file is a :class:`CliError` at once; a weights file that does not
    load, when the first clip needs it.
    """
    from ..pipeline.cache import LazySolver
    from ..pipeline.options import BakeError
    from .parser import device_choice, precision_choice

    try:
        return LazySolver(device_choice(args), weights=getattr(args, "weights", None),
                          on_error=lambda ex: CliError(str(ex)), precision=precision_choice(args))
    except BakeError as ex:
        raise CliError(str(ex)) from None


def scene_frame_time(fps):
    """Seconds per frame of a scene set to ``fps`` (:func:`set_scene_fps`), as Blender's exporters read it."""
    whole, base = _scene_rate(fps)
    return 1.0 / (whole / base)


def bake_and_write(source, target, args, exports, *, solver=None, progress=None, cancel=None,
                   action_name=None, mapping=None, preview=0):
    """:func:`bake_file`; on a file's armature also its exports: ``(row, result, written)``.

    On a file's armature (a BVH target, BVH exports only) the exports are
    written as soon as the keys are, while the figures are measured on a
    second thread (:meth:`..blender_io.bake.BakeJob.run`: the end of a long
    clip's bake overlaps); ``written`` is then
    ``(paths, seconds)`` of :func:`write_outputs`, else ``None`` (the
    caller writes them). A cancel before the exports leaves none.
    """
    from ..readers.bvh_armature import FileArmature

    done = {}
    after_keys = None
    if isinstance(target.obj, FileArmature) and exports:
        def after_keys(partial):
            if cancel is not None and cancel():
                raise KeyboardInterrupt
            done["written"] = write_outputs(target, partial, None, exports)
    row, result = bake_file(source, target, args, solver=solver, progress=progress, cancel=cancel,
                            action_name=action_name, mapping=mapping, after_keys=after_keys, preview=preview)
    return row, result, done.get("written")


def write_outputs(target, result, out=None, exports=()):
    """Save the ``.blend`` and the exports of one baked clip; returns ``(paths, seconds)``.

    A bake onto a file's armature (:func:`.targets.direct_target`) has its
    keys as arrays: its BVH files are written from them with no Blender
    scene (the file the numpy writer makes of the same keys in Blender).
    """
    from ..readers.bvh_armature import FileArmature
    from ..blender_io.export import export_armature, save_blend, write_keys_bvh

    t0 = time.perf_counter()
    paths = []
    start = int(result.frame_start)
    end = start + int(result.frames) - 1
    try:
        if isinstance(target.obj, FileArmature):
            if out is not None:
                raise ValueError("a file's armature has no scene to save as .blend")
            for path in exports:
                write_keys_bvh(target.obj, result, path, scene_frame_time(float(result.fps)))
                paths.append(os.path.abspath(path))
            return paths, time.perf_counter() - t0
        import bpy

        scene = bpy.context.scene
        saved = (scene.render.fps, scene.render.fps_base)
        try:
            set_scene_fps(scene, float(result.fps))  # exporters take the frame time from the scene
            for path in exports:
                export_armature(target.obj, path, start, end)
                paths.append(os.path.abspath(path))
        finally:
            scene.render.fps, scene.render.fps_base = saved
        if out is not None:
            save_blend(out)
            paths.append(os.path.abspath(out))
    except BaseException:
        _remove_written(paths)
        raise
    return paths, time.perf_counter() - t0


def preview_frames(wanted):
    """Frames a bake keeps for its contact sheet: the sheet's (the sidebar's too) when ``wanted``, else 0."""
    from ..blender_io.contact_sheet import SHEET_FRAMES

    return SHEET_FRAMES if wanted else 0


def write_preview(path, result, written, label=""):
    """Render ``result``'s contact sheet to ``path`` and add it to ``written``; returns the seconds it took.

    ``label`` prefixes each tile's caption (a batch: the clip's name). A
    failed render removes the clip's other outputs (all of a clip's outputs
    or none).
    """
    from ..blender_io.contact_sheet import render_preview

    t0 = time.perf_counter()
    try:
        render_preview(path, result.preview, result.frame_start, label=label)
    except (RuntimeError, OSError) as ex:
        _remove_written(written)
        raise CliError("--preview {}: rendering failed ({})".format(path, ex)) from None
    written.append(os.path.abspath(path))
    return time.perf_counter() - t0


def _remove_written(paths):
    """Remove the outputs one clip wrote before a later one failed: its outputs are all there or none."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def load_bake_target(args, exports, blend):
    """The bake target: where only BVH files are written, an armature whose keys stay arrays (a BVH
    target's built without Blender, another's read from Blender: :func:`..blender_io.rig.file_armature`),
    else Blender's.

    Parameters
    ----------
    args : argparse.Namespace
    exports : list of str
        Export paths or formats.
    blend : str or None
        The ``.blend`` to save (``None``: none).

    Returns
    -------
    .targets.Target
    """
    from ..blender_io.targets import direct_target, load_target

    kw = dict(units=args.target_units, up_axis=args.target_up_axis)
    bvh_only = blend is None and exports and all(e.lower().rsplit(".", 1)[-1] == "bvh" for e in exports)
    target = direct_target(args.target, args.armature, **kw) if bvh_only else None
    if target is not None:
        return target
    target = load_target(args.target, args.armature, **kw)
    if bvh_only and target.kind != "blend":    # (a .blend's scene keeps its own frame rate)
        from dataclasses import replace

        from ..blender_io.rig import file_armature
        from ..blender_io.bvh_writer import numpy_bvh_unsupported

        arm = file_armature(target.obj, target.spec, numpy_bvh_unsupported)
        if arm is not None:
            target = replace(target, obj=arm)
    return target


@guarded
def run(args):
    """Bake SOURCE onto TARGET; returns 0, 1 (failed), 2 (bad arguments), 130 or 143 (SIGINT, SIGTERM)."""
    from .signals import sigterm_stops

    with sigterm_stops() as term:
        return _run(args, term)


def _run(args, term):
    from .devicecheck import check_device, device_fallback
    from ..blender_io.targets import check_target, target_label

    started = time.perf_counter()
    sources.check_source_path(args.source)
    check_target(args.target)
    arguments.check_layout_argument(args.layout)
    mapping = arguments.load_bone_mapping(args.mapping)
    check_outputs(args)
    device_note = check_device(args)
    progress = Progress(1, 0, quiet=args.quiet)
    name = os.path.basename(args.source)
    progress.begin_clip(1, name, 0)
    row = {"source": os.path.abspath(args.source), "target": target_label(args.target), "status": "failed",
           "outputs": []}
    load_seconds = 0.0
    try:
        t0 = time.perf_counter()
        target = load_bake_target(args, args.export or [], args.out)
        load_seconds = time.perf_counter() - t0
        term.check()
        row, result, written = bake_and_write(args.source, target, args, args.export or [], progress=progress,
                                              mapping=mapping, cancel=term,   # (a .blend: Blender's armature)
                                              preview=preview_frames(args.preview))
        term.check()
        paths, t_export = written or write_outputs(target, result, args.out, args.export or [])
        if args.preview:
            t_export += write_preview(args.preview, result, paths)
        if term.requested:   # (during the writing: the outputs go, as after Ctrl-C)
            _remove_written(paths)
            term.check()
        row["outputs"] = paths
        row["seconds"]["export"] = round(row["seconds"].get("export", 0.0) + t_export, 4)
        row["seconds_total"] = round(sum(row["seconds"].values()), 4)
        row["frames_per_second"] = round(row["frames"] / row["seconds_total"], 2) if row["seconds_total"] else None
        if device_note:
            row["warnings"].append(device_note)
    except KeyboardInterrupt as ex:   # Ctrl-C or SIGTERM: no output half-written, the report says so
        remove_pending()
        from .signals import Terminated

        signum = 15 if isinstance(ex, Terminated) or term.requested else 2
        row.update(status="interrupted", outputs=[])
        progress.message("clip 1/1 {}: interrupted".format(name))
        report = {"command": "bake", "clips": [row],
                  "summary": summary([row], time.perf_counter() - started, load_target_seconds=load_seconds,
                                            interrupted=True, signal="SIGTERM" if signum == 15 else "SIGINT",
                                            **device_fallback(device_note))}
        emit_report(args.report, report)
        return 128 + signum
    except UserError as ex:
        row["status"], row["error"] = "failed", say(ex)
        progress.message("clip 1/1 {}: failed".format(name))
        print("neural-ik bake: error: {}".format(say(ex)), file=sys.stderr)
        report = {"command": "bake", "clips": [row],
                  "summary": summary([row], time.perf_counter() - started, load_target_seconds=load_seconds,
                                            **device_fallback(device_note))}
        emit_report(args.report, report)
        return 2 if exit_code(ex) == 2 else 1
    progress.end_clip("done, {} frames, {} fps: {}".format(row["frames"], row["fps"], headline(row)))
    report = {"command": "bake", "clips": [row],
              "summary": summary([row], time.perf_counter() - started, load_target_seconds=load_seconds,
                                        **device_fallback(device_note))}
    emit_report(args.report, report)
    if not args.quiet:
        for path in row["outputs"]:
            print("wrote {}".format(path), file=sys.stderr)
    return 0
