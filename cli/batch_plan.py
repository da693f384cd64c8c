"""What a batch does before any work: its clips and their output names, the output folder checked, the
clips whose outputs are up to date (skipped), and the record of what each clip's outputs were baked from
(:mod:`.fingerprint`).
"""

from __future__ import annotations

import fnmatch
import glob
import os

from ..errors import UserError
from . import pathcheck, sources
from .errors import UsageError

__all__ = ["find_clips", "output_names", "check_output_folders", "split_fresh", "say_skips", "problem_row",
           "write_record"]


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


def split_fresh(jobs, args, blend, record, settings):
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


def say_skips(progress, lock_note, skipped, pending, problems, root):
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


def problem_row(path, why, status, args):
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


def write_record(out_dir, jobs, record, settings, progress):
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
