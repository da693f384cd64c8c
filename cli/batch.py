"""``batch``: bake every keypoint clip of a folder onto one target rig.

``neural-ik batch INPUT_DIR --target TARGET --out-dir DIR [--pattern GLOB] [--export FMT] [options]``

Every clip becomes its own action, named after its path below INPUT_DIR.
Outputs: one ``.blend`` holding the target and every action
(``--out``, default ``DIR/batch.blend``; ``--no-blend`` to skip) and/or one
export per clip (``--export bvh|fbx|glb|gltf``, repeatable:
``DIR/<clip path>.<fmt>``), plus the JSON report (``DIR/report.json`` unless
``--report``).

- The target is loaded once and the network once; one bad clip is reported
  and skipped, the others complete (exit code 1 when any failed).
- Memory does not grow with the clips: each clip's arrays are released once
  its outputs are written, and with ``--no-blend`` its action too (only
  the ``.blend`` keeps every clip's keys).
- A rerun skips clips whose outputs are all newer than the clip and were
  baked with the same settings, target and weights (:mod:`.fingerprint`;
  for the ``.blend``: it holds the clip's action and is newer); ``--force`` bakes
  everything again. Actions of skipped clips are carried over into the new
  ``.blend``.
- Every file is written to a temporary name and renamed when complete.
  Ctrl-C (SIGINT) or SIGTERM stops after cleaning up: the clip in progress is
  dropped, temporary files are removed, the report lists what completed, and
  the exit code is 130 (143 after SIGTERM). A second signal aborts at once
  (still removing temporary files).
- ``DIR/.neural_ik.lock`` keeps a second batch out of the folder (:mod:`.locks`).
- ``--scheduler ADDRESS`` bakes the clips as tasks of a Dask cluster
  (:mod:`.cluster`, ``docs/cluster.md``) with the same rules and report.
"""

from __future__ import annotations

import os
import sys
import time

from ..outputs import remove_pending
from . import argtypes, arguments, errors, pathcheck
from .batch_plan import check_output_folders, find_clips, output_names, problem_row, say_skips, split_fresh, \
    write_record
from .clips import ClipJob, bake_job, failed_row
from ..errors import UserError
from .errors import CliError, UsageError, guarded, say
from .errors import exit_code as error_exit_code
from .progress import Progress
from .report import emit_report, headline, summary
from .signals import Interrupt, exit_code, signal_name
from .sources import SOURCE_EXTENSIONS

__all__ = ["add_parser", "run", "find_clips"]

EXPORT_FORMATS = ("bvh", "fbx", "glb", "gltf")


def add_parser(subparsers):
    """Add the ``batch`` subcommand."""
    parser = subparsers.add_parser(
        "batch",
        help="bake every keypoint clip of a folder onto one rig",
        description=(
            "Bake every keypoint file below INPUT_DIR (.npz, .npy, .json, .csv, .trc, .c3d, .bvh, .fbx; or those "
            "matching --pattern) onto TARGET, each clip as its own action. Writes one .blend holding them all "
            "and/or one export per clip, and a JSON report. A bad clip is reported and skipped. Clips whose "
            "outputs are newer than the clip and baked with the same settings, target and weights are skipped "
            "unless --force. Exit codes: 0 all clips done, 1 some failed, 2 bad arguments, 130 interrupted, "
            "143 terminated (SIGTERM)."
        ),
    )
    parser.add_argument("input_dir", metavar="INPUT_DIR", help="folder of keypoint clips (searched recursively)")
    parser.add_argument("--out-dir", metavar="DIR", required=True, help="output folder (created when missing)")
    parser.add_argument("--pattern", metavar="GLOB", default=None,
                        help="only files matching this glob, relative to INPUT_DIR ('**/' for subfolders; "
                             "default: every readable file, recursively)")
    parser.add_argument("--out", metavar="NAME.blend", default="batch.blend",
                        help="the .blend holding the target and every action, in DIR unless a path "
                             "(default: batch.blend)")
    parser.add_argument("--no-blend", action="store_true", help="write no .blend (exports only)")
    parser.add_argument("--export", metavar="FMT", action="append", default=None,
                        choices=EXPORT_FORMATS,
                        help="also export each clip as DIR/<clip>.FMT with Blender's exporter (repeatable)")
    parser.add_argument("--previews", action="store_true",
                        help="also render DIR/<clip>.png: a contact sheet of each clip, the input and the baked rig "
                             "side by side over the floor at six frames, and DIR/previews_index.png: a tile of each")
    parser.add_argument("--force", action="store_true", help="bake every clip, even when its outputs are up to date")
    parser.add_argument("--jobs", type=argtypes.int_at_least(0, "0: one per CPU core"), default=0, metavar="N",
                        help="clips baked at once, each in its own process, where the bake needs no Blender "
                             "(a .bvh target, --no-blend, --export bvh only); default 0: one per CPU core, "
                             "fewer where memory is short")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None, type=_scheduler_address,
                        help="bake the clips as tasks of a Dask cluster: its scheduler's address "
                             "(tcp://host:8786) or local:N for N worker processes on this machine; needs "
                             "dask[distributed], a .bvh target, --no-blend and --export bvh, and INPUT_DIR and DIR "
                             "at the same paths on every worker (docs/cluster.md)")
    arguments.add_bake_arguments(parser)
    return parser


def _scheduler_address(text):
    """``--scheduler``: ``local:N`` (N at least 1) or a Dask scheduler's address."""
    import argparse

    if text.startswith("local:"):
        n = text[len("local:"):]
        if not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError("{!r}: local:N needs N, the worker processes, at least 1".format(text))
    elif not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError("{!r}: not a scheduler address (tcp://host:8786 or local:N)".format(text))
    return text


def _carry_actions(path, names):
    """Append the named actions from an older ``.blend`` (actions of skipped clips)."""
    import bpy

    names = [n for n in names if n not in bpy.data.actions]
    if not names:
        return []
    with bpy.data.libraries.load(path, link=False) as (_data_from, data_to):
        data_to.actions = list(names)
    carried = []
    for action in data_to.actions:
        if action is not None:
            action.use_fake_user = True
            carried.append(action.name)
    return carried


@guarded
def run(args):
    """Bake every clip; returns 0, 1 (some failed), 2 (bad arguments), 130 or 143 (SIGINT, SIGTERM)."""
    held = []
    try:
        return _run(args, held)
    finally:
        for lock in held:
            lock.release()


def _run(args, held):
    from . import fingerprint
    from .bake import input_files
    from .devicecheck import check_device
    from .locks import FolderLock

    started = time.perf_counter()
    mapping, root, out_dir, blend, exports, report_path = _checked_arguments(args)
    problems = []
    found = find_clips(root, args.pattern, exclude=out_dir, problems=problems)
    if not found:
        what = "matching {!r}".format(args.pattern) if args.pattern else "({})".format(
            ", ".join(SOURCE_EXTENSIONS))
        unread = "; not read: {}".format("; ".join("{}: {}".format(p, why) for p, why, _s in problems)) \
            if problems else ""
        raise CliError("{}: no keypoint files {}{}".format(args.input_dir, what, unread))
    jobs = [ClipJob(s, root, out_dir, exports, name, note, preview=bool(getattr(args, "previews", False)))
            for s, (name, note) in zip(found, output_names(found, root))]
    pathcheck.check_output_paths([("--out", blend), ("--report", report_path)]
                              + [("export of " + job.rel, p) for job in jobs for p in job.exports]
                              + [("preview of " + job.rel, job.preview) for job in jobs if job.preview]
                              + ([("--previews index", os.path.join(out_dir, PREVIEWS_INDEX))] if args.previews else []),
                              input_files(args))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as ex:
        raise UsageError("--out-dir {}: cannot create ({})".format(args.out_dir, ex.strerror or ex)) from None
    held.append(FolderLock(out_dir, "batch").acquire())   # (before the outputs there are read)
    device_note = check_device(args, "batch")
    settings = fingerprint.settings(args)
    record = fingerprint.read_record(out_dir)

    pending, skipped = split_fresh(jobs, args, blend, record, settings)
    progress = Progress(len(jobs), 0, quiet=args.quiet)
    say_skips(progress, held[0].note, skipped, pending, problems, root)
    interrupt = Interrupt(progress).install()
    done = _Outcome()
    try:
        if pending:
            _bake_pending(done, args, jobs, pending, skipped, (root, out_dir, exports), blend, mapping, progress,
                          interrupt)
    except KeyboardInterrupt:
        remove_pending()
        done.interrupted = True

    index = _previews_index(jobs, out_dir, progress) if args.previews and not done.interrupted else None
    report = _report(args, jobs, problems, root, out_dir, blend, done, device_note, index, started, interrupt)
    interrupted = done.interrupted
    report_error = None
    try:
        emit_report(report_path, report)
        if interrupt.requested and not interrupted:   # a signal while the report was written
            interrupted = report["summary"]["interrupted"] = True
            report["summary"]["signal"] = signal_name(interrupt.signum)
            emit_report(report_path, report)
    except KeyboardInterrupt:
        remove_pending()
        interrupted = True
    except UserError as ex:  # e.g. a full disk
        report_error = say(ex)
    finally:
        interrupt.restore()
    write_record(out_dir, jobs, record, settings, progress)
    return _finish(args, report, done.blend_error, report_error, interrupted, interrupt, progress)


def _checked_arguments(args):
    """``(mapping, INPUT_DIR, DIR, the .blend or None, export formats, report path)``: every argument
    checked before any clip is looked at (exit code 2)."""
    from ..blender_io.targets import check_target
    from .pathcheck import not_a_folder

    why = not_a_folder(args.input_dir)
    if why is not None:
        raise UsageError("{}: {}".format(args.input_dir, why))
    check_target(args.target)
    arguments.check_layout_argument(args.layout)
    mapping = arguments.load_bone_mapping(args.mapping)
    root = os.path.abspath(args.input_dir)
    out_dir = os.path.abspath(args.out_dir)
    blend = None
    if not args.no_blend:
        if not args.out.lower().endswith(".blend"):
            raise UsageError("--out {}: must be a .blend file".format(args.out))
        blend = args.out if os.path.dirname(args.out) else os.path.join(out_dir, args.out)
        blend = os.path.abspath(blend)
    exports = list(dict.fromkeys(args.export or []))
    if blend is None and not exports:
        raise UsageError("nothing to write: --no-blend needs --export FMT")
    report_path = args.report if args.report is not None else os.path.join(out_dir, "report.json")
    check_output_folders(args, root, out_dir, blend, report_path)
    if getattr(args, "scheduler", None):
        from . import cluster

        cluster.check_arguments(args, blend, exports)   # (before any clip is looked at: exit code 2)
    return mapping, root, out_dir, blend, exports, report_path


class _Outcome:
    """What the bake of the pending clips got to (kept when a second signal cuts it short)."""

    def __init__(self):
        self.interrupted = False
        self.target = None
        self.load_seconds = 0.0
        self.blend_written = None
        self.blend_error = None


def _bake_pending(done, args, jobs, pending, skipped, folders, blend, mapping, progress, interrupt):
    """Load the target and the network, bake the pending clips (here, on ``--jobs`` workers or on a
    cluster), then save the ``.blend``; what it got to goes into ``done``."""
    from .bake import get_solver, load_bake_target
    from .workers import run_parallel, worker_count

    exports = folders[2]
    t0 = time.perf_counter()
    try:
        done.target = target = load_bake_target(args, exports, blend)
        solver = get_solver(args)
    except UserError as ex:
        raise CliError(say(ex), error_exit_code(ex)) from None
    done.load_seconds = time.perf_counter() - t0
    # frames of every clip for the time left: estimated from the file sizes as clips are read
    progress.total_frames = 0
    workers = 1 if getattr(args, "scheduler", None) else worker_count(args, target, pending, progress)
    if getattr(args, "scheduler", None):
        from . import cluster

        done.interrupted = cluster.run_batch(args, pending, len(skipped), len(jobs), folders, progress, interrupt)
    elif workers > 1:
        done.interrupted = run_parallel(workers, pending, len(skipped), len(jobs), target, args, solver,
                                        mapping, progress, interrupt)
    else:
        done.interrupted = _bake_in_turn(pending, len(skipped), len(jobs), target, args, solver, mapping, blend,
                                         progress, interrupt)
    done.interrupted = done.interrupted or interrupt.requested
    if blend is not None and not done.interrupted:
        if any(j.row and j.row.get("status") == "done" for j in pending) or not os.path.isfile(blend):
            if skipped and os.path.isfile(blend):
                _carry_actions(blend, [j.action_name for j in skipped])
            _save_batch_blend(done, blend, progress)
            # (a signal during the save waits for it: the file is whole, the run still interrupted)
            done.interrupted = done.interrupted or interrupt.requested


def _bake_in_turn(pending, n_skipped, n_jobs, target, args, solver, mapping, blend, progress, interrupt) -> bool:
    """The pending clips baked one after the other in this process; whether a signal stopped a clip."""
    done_rows = []
    for i, job in enumerate(pending, start=1):
        if interrupt.requested:
            break
        progress.begin_clip(n_skipped + i, job.rel, 0)
        try:
            job.row = bake_job(job, target, args, solver, mapping, blend, progress,
                               lambda: interrupt.requested)
            done_rows.append(job.row)
            _estimate_total(progress, done_rows, pending, i)
            progress.end_clip("done, {} frames: {}".format(job.row["frames"], headline(job.row)))
        except KeyboardInterrupt:
            progress.message("clip {}/{} {}: interrupted".format(n_skipped + i, n_jobs, job.rel))
            return True
        except Exception as ex:  # one bad clip never stops the batch
            job.row = failed_row(job, ex, args)
            progress.end_clip("failed: {}".format(job.row["error"]))
    return False


def _save_batch_blend(done, blend, progress):
    """Save the ``.blend`` (its seconds, or its error, into ``done``)."""
    from ..blender_io.export import save_blend

    t0 = time.perf_counter()
    try:
        save_blend(blend)
    except UserError as ex:  # e.g. a full disk: the report still lists what was done
        done.blend_error = say(ex)
        progress.message("failed: {}".format(done.blend_error))
    else:
        done.blend_written = time.perf_counter() - t0
        progress.message("wrote {}".format(blend))


def _report(args, jobs, problems, root, out_dir, blend, done, device_note, index, started, interrupt) -> dict:
    """The batch's report: a row per clip (and per entry not read) and the summary."""
    from ..blender_io.targets import target_label
    from .devicecheck import device_fallback

    interrupted = done.interrupted
    rows = []
    for job in jobs:
        if job.row is None:
            job.row = {"source": job.source, "target": target_label(args.target),
                       "status": "interrupted" if interrupted else "not run", "outputs": []}
        if blend is not None and job.row.get("status") == "done" and done.blend_written is None:
            job.row["outputs"] = [p for p in job.row["outputs"] if p != blend]
        if job.row.get("status") == "done" and job.rebake:
            job.row.setdefault("warnings", []).append("baked again: {}".format(job.rebake))
        rows.append(job.row)
    rows += [problem_row(path, why, status, args) for path, why, status in problems]
    extra = {"load_target_seconds": round(done.load_seconds, 3), "interrupted": interrupted,
             "blend": blend if done.blend_written is not None else None, **device_fallback(device_note)}
    if interrupted:
        extra["signal"] = signal_name(interrupt.signum)
    if done.blend_error is not None:
        extra["blend_error"] = done.blend_error
    target = done.target
    target_warnings = list(getattr(target, "warnings", None) or []) if target is not None else []
    if target_warnings:
        extra["target_warnings"] = target_warnings
    if done.blend_written is not None:
        extra["blend_seconds"] = round(done.blend_written, 3)
    if index is not None:
        extra["previews_index"] = index
    return {"command": "batch", "input_dir": root, "out_dir": out_dir, "target": target_label(args.target),
            "clips": rows, "summary": summary(rows, time.perf_counter() - started, **extra)}


def _finish(args, report, blend_error, report_error, interrupted, interrupt, progress) -> int:
    """The closing lines and the exit code."""
    rows = report["clips"]
    s = report["summary"]
    if not args.quiet:
        progress.message("{} clips: {} done, {} skipped, {} failed{}; {} frames{}".format(
            s["clips"], s["done"], s["skipped"], s["failed"],
            ", interrupted ({})".format(signal_name(interrupt.signum)) if interrupted else "",
            s["frames"], "" if s["frames_per_second"] is None else " at {} frames/s".format(s["frames_per_second"])))
    for row in rows:
        if row.get("status") == "failed":
            print("neural-ik batch: failed: {}".format(row.get("error")), file=sys.stderr)
    if blend_error is not None:
        print("neural-ik batch: error: {}".format(blend_error), file=sys.stderr)
    if report_error is not None:
        print("neural-ik batch: error: {}".format(report_error), file=sys.stderr)
    if interrupted:
        return exit_code(interrupt.signum)
    return errors.EXIT_FAILED if (s["failed"] or blend_error or report_error) else errors.EXIT_OK


#: ``batch --previews``: one tile of every clip's contact sheet, in DIR.
PREVIEWS_INDEX = "previews_index.png"


def _previews_index(jobs, out_dir, progress):
    """DIR/:data:`PREVIEWS_INDEX` from the clips' sheets (baked now or up to date); its path, or None."""
    from ..blender_io.contact_sheet import index_sheet

    path = os.path.join(out_dir, PREVIEWS_INDEX)
    try:
        used = index_sheet(path, [j.preview for j in jobs if j.preview and os.path.isfile(j.preview)])
    except OSError as ex:   # e.g. a full disk: the clips' own sheets are there
        progress.message("failed: {}: {}".format(path, ex.strerror or ex))
        return None
    if not used:
        return None
    progress.message("wrote {} ({} clips)".format(path, len(used)))
    return path


def _estimate_total(progress, done_rows, pending, index):
    """Update the progress line's total frames from the clips done so far (mean frames per clip)."""
    frames = sum(int(r.get("frames") or 0) for r in done_rows)
    mean = frames / max(len(done_rows), 1)
    progress.total_frames = int(progress.frames_done + progress.clip_frames + mean * (len(pending) - index))
