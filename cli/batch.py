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

import fnmatch
import glob
import os
import signal
import sys
import time

from ..outputs import remove_pending
from . import argtypes, arguments, errors, pathcheck, sources
from .clips import ClipJob, bake_job, failed_row
from ..errors import UserError
from .errors import CliError, UsageError, guarded, say
from .errors import exit_code as error_exit_code
from .progress import Progress
from .report import emit_report, headline, summary
from .signals import STOP_SIGNALS, exit_code, signal_name

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


def find_clips(input_dir, pattern=None, exclude=None, problems=None):
    """Keypoint files below ``input_dir``, sorted.

    Parameters
    ----------
    input_dir : str
    pattern : str, optional
        Glob relative to ``input_dir``; default: every file with a readable
        extension, recursively.
    exclude : str, optional
        A folder to leave out (the output folder when it lies inside).
    problems : list, optional
        Gets ``(path, reason, status)`` of each entry that is not a readable file:
        a dangling or looping link, a FIFO, a link back to a folder already
        searched (:func:`.clipwalk.walk_sources`; never left out silently).

    Returns
    -------
    list of str
        Absolute paths; hidden files and folders are left out. Linked
        folders are searched (each folder once).
    """
    from .clipwalk import walk_sources

    root = os.path.abspath(input_dir)
    exclude = os.path.abspath(exclude) if exclude else None
    problems = [] if problems is None else problems
    if pattern:
        paths = glob.glob(os.path.join(root, pattern), recursive=True)
    else:
        paths = walk_sources(root, sources.SOURCE_EXTENSIONS, problems, exclude)
    out = []
    for path in paths:
        path = os.path.abspath(path)
        rel = os.path.relpath(path, root)
        if any(part.startswith(".") for part in rel.split(os.sep)):
            continue
        if not os.path.isfile(path):
            if pattern and not os.path.isdir(path):   # (walk_sources names them without a pattern)
                from .pathcheck import not_a_file

                problems.append((path, not_a_file(path), "failed"))
            continue
        if exclude and (path + os.sep).startswith(exclude + os.sep):
            continue
        if fnmatch.fnmatch(os.path.basename(path), "*.partial.*"):
            continue
        out.append(path)
    return sorted(set(out))


def output_names(sources, root):
    """Unique, deterministic output names (paths below the output folder, no extension) of clips.

    A clip's name is its path below ``root`` without the extension
    (``sub/walk_02``). Clips that share it (``walk.npz`` and ``walk.bvh``)
    take their extension into the name (``walk_npz``, ``walk_bvh``); a name
    still taken by an earlier clip in sorted order (``walk_npz.npz``) gets
    ``_2``, ``_3``... Names are compared case-insensitively, so they stay
    distinct on case-insensitive file systems too.

    Parameters
    ----------
    sources : list of str
        Absolute paths, sorted.
    root : str

    Returns
    -------
    list of (str, str or None)
        ``(name, note)`` per source; ``note`` says why a name differs from
        the plain path (``None`` when it does not).
    """
    rels = [os.path.relpath(s, root) for s in sources]
    stems = [os.path.splitext(r)[0] for r in rels]
    count = {}
    for stem in stems:
        count[stem.lower()] = count.get(stem.lower(), 0) + 1
    wanted = []
    for rel, stem in zip(rels, stems):
        if count[stem.lower()] > 1:  # walk.npz and walk.bvh side by side
            wanted.append((stem + "_" + os.path.splitext(rel)[1].lstrip(".").lower(),
                           "{} shares its name with another clip".format(stem)))
        else:
            wanted.append((stem, None))
    plain = {stem.lower() for stem, note in wanted if note is None}
    taken, out = set(), []
    for (name, note), rel in zip(wanted, rels):
        base = name
        k = 1
        # a renamed clip never takes a name that another clip has plainly
        while name.lower() in taken or (note is not None and name.lower() in plain):
            k += 1
            name = "{}_{}".format(base, k)
        if name != base:
            note = "{} is taken by another clip".format(base)
        taken.add(name.lower())
        out.append((name, "outputs named {!r}: {}".format(name.replace(os.sep, "/"), note) if note else None))
    return out


def check_output_folders(args, root, out_dir, blend, report_path):
    """Check the output folder before any work (exit code 2).

    ``--out-dir`` must be a folder (or creatable), writable, and outside
    INPUT_DIR: outputs there would become clips of the next run. ``--out``
    and ``--report`` given as paths must not lie in INPUT_DIR either.
    """
    what = "--out-dir {}".format(args.out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError("{}: is a file, not a folder".format(what))
    if pathcheck.path_inside(out_dir, root):
        raise UsageError("{}: lies inside INPUT_DIR {}; its outputs would be read as clips by the next run: "
                         "pick a folder outside it".format(what, args.input_dir))
    for flag, path in (("--out", blend), ("--report", report_path)):
        if path not in (None, "-") and pathcheck.path_inside(path, root):
            raise UsageError("{} {}: lies inside INPUT_DIR {}; it would be read as a clip by the next run: "
                             "pick a path outside it".format(flag, path, args.input_dir))
    pathcheck.check_writable_folder(out_dir, what)


def _blend_actions(path):
    """Names of the actions stored in a ``.blend`` (empty when unreadable)."""
    import bpy

    try:
        with bpy.data.libraries.load(path, link=False) as (data_from, _data_to):
            return set(data_from.actions)
    except Exception:
        return set()


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


class _Interrupt:
    """SIGINT and SIGTERM handler: the first asks to stop cleanly, a second aborts at once."""

    def __init__(self, progress):
        self.requested = False
        self.signum = None
        self.progress = progress
        self.previous = {}

    def __call__(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signum = signum
        try:
            self.progress.message("{}: stopping after cleaning up (Ctrl-C again to abort now)".format(
                "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"))
        except RuntimeError:   # stderr was being written when the signal came (a reentrant write)
            pass

    def install(self):
        for signum in STOP_SIGNALS:
            try:
                self.previous[signum] = signal.signal(signum, self)
            except ValueError:  # not the main thread
                pass
        return self

    def restore(self):
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous = {}


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
    from .bake import get_solver, load_bake_target
    from .devicecheck import check_device, device_fallback
    from .locks import FolderLock
    from ..blender_io.targets import check_target, target_label
    from .workers import run_parallel, worker_count

    started = time.perf_counter()
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

    problems = []
    sources = find_clips(root, args.pattern, exclude=out_dir, problems=problems)
    if not sources:
        what = "matching {!r}".format(args.pattern) if args.pattern else "({})".format(
            ", ".join(sources.SOURCE_EXTENSIONS))
        unread = "; not read: {}".format("; ".join("{}: {}".format(p, why) for p, why, _s in problems)) \
            if problems else ""
        raise CliError("{}: no keypoint files {}{}".format(args.input_dir, what, unread))
    jobs = [ClipJob(s, root, out_dir, exports, name, note, preview=bool(getattr(args, "previews", False)))
            for s, (name, note) in zip(sources, output_names(sources, root))]
    from .bake import input_files

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

    pending, skipped = _split_fresh(jobs, args, blend, record, settings)
    progress = Progress(len(jobs), 0, quiet=args.quiet)
    _say_skips(progress, held[0].note, skipped, pending, problems, root)
    interrupt = _Interrupt(progress).install()
    interrupted = False
    target = None
    load_seconds = 0.0
    blend_written = None
    blend_error = None
    try:
        if pending:
            t0 = time.perf_counter()
            try:
                target = load_bake_target(args, exports, blend)
                solver = get_solver(args)
            except UserError as ex:
                raise CliError(say(ex), error_exit_code(ex)) from None
            load_seconds = time.perf_counter() - t0
            # frames of every clip for the time left: estimated from the file sizes as clips are read
            progress.total_frames = 0
            workers = 1 if getattr(args, "scheduler", None) else worker_count(args, target, pending, progress)
            if getattr(args, "scheduler", None):
                from . import cluster

                interrupted = cluster.run_batch(args, pending, len(skipped), len(jobs), (root, out_dir, exports),
                                                progress, interrupt)
            elif workers > 1:
                interrupted = run_parallel(workers, pending, len(skipped), len(jobs), target, args, solver,
                                            mapping, progress, interrupt)
            else:
                done_rows = []
                for i, job in enumerate(pending, start=1):
                    if interrupt.requested:
                        break
                    progress.begin_clip(len(skipped) + i, job.rel, 0)
                    try:
                        job.row = bake_job(job, target, args, solver, mapping, blend, progress,
                                            lambda: interrupt.requested)
                        done_rows.append(job.row)
                        _estimate_total(progress, done_rows, pending, i)
                        progress.end_clip("done, {} frames: {}".format(job.row["frames"], headline(job.row)))
                    except KeyboardInterrupt:
                        interrupted = True
                        progress.message("clip {}/{} {}: interrupted".format(len(skipped) + i, len(jobs), job.rel))
                        break
                    except Exception as ex:  # one bad clip never stops the batch
                        job.row = failed_row(job, ex, args)
                        progress.end_clip("failed: {}".format(job.row["error"]))
            interrupted = interrupted or interrupt.requested
            if blend is not None and not interrupted:
                if any(j.row and j.row.get("status") == "done" for j in pending) or not os.path.isfile(blend):
                    if skipped and os.path.isfile(blend):
                        _carry_actions(blend, [j.action_name for j in skipped])
                    t0 = time.perf_counter()
                    from ..blender_io.export import save_blend

                    try:
                        save_blend(blend)
                    except UserError as ex:  # e.g. a full disk: the report still lists what was done
                        blend_error = say(ex)
                        progress.message("failed: {}".format(blend_error))
                    else:
                        blend_written = time.perf_counter() - t0
                        progress.message("wrote {}".format(blend))
                    # (a signal during the save waits for it: the file is whole, the run still interrupted)
                    interrupted = interrupted or interrupt.requested
    except KeyboardInterrupt:
        remove_pending()
        interrupted = True

    index = _previews_index(jobs, out_dir, progress) if args.previews and not interrupted else None
    rows = []
    for job in jobs:
        if job.row is None:
            job.row = {"source": job.source, "target": target_label(args.target),
                       "status": "interrupted" if interrupted else "not run", "outputs": []}
        if blend is not None and job.row.get("status") == "done" and blend_written is None:
            job.row["outputs"] = [p for p in job.row["outputs"] if p != blend]
        if job.row.get("status") == "done" and job.rebake:
            job.row.setdefault("warnings", []).append("baked again: {}".format(job.rebake))
        rows.append(job.row)
    rows += [_problem_row(path, why, status, args) for path, why, status in problems]
    extra = {"load_target_seconds": round(load_seconds, 3), "interrupted": interrupted,
             "blend": blend if blend_written is not None else None, **device_fallback(device_note)}
    if interrupted:
        extra["signal"] = signal_name(interrupt.signum)
    if blend_error is not None:
        extra["blend_error"] = blend_error
    target_warnings = list(getattr(target, "warnings", None) or []) if target is not None else []
    if target_warnings:
        extra["target_warnings"] = target_warnings
    if blend_written is not None:
        extra["blend_seconds"] = round(blend_written, 3)
    if index is not None:
        extra["previews_index"] = index
    report = {"command": "batch", "input_dir": root, "out_dir": out_dir, "target": target_label(args.target),
              "clips": rows, "summary": summary(rows, time.perf_counter() - started, **extra)}
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
    _write_record(out_dir, jobs, record, settings, progress)
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


def _split_fresh(jobs, args, blend, record, settings):
    """``(pending, skipped)``: a clip is skipped when its outputs are newer than it and its record matches."""
    from ..blender_io.targets import target_label

    old_actions = set()
    if blend is not None and os.path.isfile(blend) and not args.force:
        old_actions = _blend_actions(blend)
    pending, skipped = [], []
    for job in jobs:
        fresh = (not args.force and job.exports_fresh()
                 and (blend is None or (job.action_name in old_actions
                                        and os.path.getmtime(blend) > os.path.getmtime(job.source))))
        if fresh:
            job.rebake = _changed(job, record, settings)
            fresh = job.rebake is None
        if fresh:
            job.row = {"source": job.source, "target": target_label(args.target), "status": "skipped",
                       "action": job.action_name, "reason": "outputs newer than the clip, same settings",
                       "outputs": list(job.exports) + ([blend] if blend else [])}
            skipped.append(job)
        else:
            pending.append(job)
    return pending, skipped


def _say_skips(progress, lock_note, skipped, pending, problems, root):
    """The lines before the work: a lock taken over, clips skipped or baked again, folders not searched."""
    if lock_note:
        progress.message(lock_note)
    for job in skipped:
        progress.message("skip {}: outputs are up to date".format(job.rel))
    for path, why, status in problems:
        if status == "skipped":
            progress.message("skip {}: {}".format(os.path.relpath(path, root), why))
    for job in pending:
        if job.rebake:
            progress.message("bake {} again: {}".format(job.rel, job.rebake))


def _problem_row(path, why, status, args):
    """The row of an entry of INPUT_DIR that is not read (:func:`find_clips`' ``problems``)."""
    from ..blender_io.targets import target_label

    row = {"source": path, "target": target_label(args.target), "status": status, "outputs": []}
    row["error" if status == "failed" else "reason"] = "{}: {}".format(path, why)
    return row


def _changed(job, record, settings):
    """Why a clip with fresh outputs must be baked again (``None``: it need not): :mod:`.fingerprint`."""
    from . import fingerprint

    entry = record.get(job.action_name)
    if entry is None:
        return fingerprint.describe_change(None, settings)
    if entry.get("source") != job.source or entry.get("source_file") != fingerprint.source_identity(job.source):
        return "{} is not the file its outputs were baked from".format(job.rel)
    return fingerprint.describe_change(entry.get("settings"), settings)


def _write_record(out_dir, jobs, record, settings, progress):
    """Store what each clip's outputs were baked from (clips of other runs, e.g. another --pattern, stay)."""
    from . import fingerprint

    clips = dict(record)
    for job in jobs:
        status = (job.row or {}).get("status")
        if status == "done" and os.path.isfile(job.source):   # (a clip removed meanwhile: no record)
            clips[job.action_name] = {"source": job.source, "source_file": fingerprint.source_identity(job.source),
                                      "settings": settings}
        elif status != "skipped":   # (failed, interrupted: its outputs, if any, are not this run's)
            clips.pop(job.action_name, None)
    try:
        fingerprint.write_record(out_dir, clips)
    except (UserError, OSError) as ex:   # the next run then bakes again: no harm beyond the time
        progress.message("cannot record the settings in {} ({})".format(out_dir, ex))


def _estimate_total(progress, done_rows, pending, index):
    """Update the progress line's total frames from the clips done so far (mean frames per clip)."""
    frames = sum(int(r.get("frames") or 0) for r in done_rows)
    mean = frames / max(len(done_rows), 1)
    progress.total_frames = int(progress.frames_done + progress.clip_frames + mean * (len(pending) - index))
