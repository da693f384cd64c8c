"""One clip of a batch: its job, its bake and its report row, alike one at a time, in a ``--jobs`` worker
process or in a Dask task (:mod:`.batch`, :mod:`.workers`, :mod:`.cluster`)."""

from __future__ import annotations

import os
import sys

from ..outputs import remove_partials, remove_pending
from ..errors import SettingError, UserError
from .errors import CliError, say
from .report import headline

__all__ = ["ClipJob", "bake_job", "failed_row", "bake_clip", "finish_clip", "remove_clip_partials", "cores",
           "limit_threads"]


class ClipJob:
    """One clip of a batch: its outputs, whether it is up to date, its report row.

    Parameters
    ----------
    source : str
        Absolute path of the clip.
    root : str
        INPUT_DIR.
    out_dir : str
    exports : list of str
        Export formats.
    name : str
        Unique output name (:func:`output_names`): the action's name and the
        exports' path below ``out_dir``.
    note : str, optional
        Why ``name`` differs from the clip's path (goes into the report).
    """

    def __init__(self, source, root, out_dir, exports, name, note=None, preview=False):
        self.source = source
        self.rel = os.path.relpath(source, root)
        self.action_name = name.replace(os.sep, "/")
        self.note = note
        self.exports = [os.path.join(out_dir, "{}.{}".format(name, fmt)) for fmt in exports]
        #: the clip's contact sheet (``--previews``), or None
        self.preview = os.path.join(out_dir, name + ".png") if preview else None
        self.row = None
        self.rebake = None   # why outputs newer than the clip are stale (:func:`.batch_plan._changed`)

    def exports_fresh(self):
        """Whether every per-clip export exists and is newer than the clip."""
        src = os.path.getmtime(self.source)
        outputs = self.exports + ([self.preview] if self.preview else [])
        return all(os.path.isfile(p) and os.path.getmtime(p) > src for p in outputs)


def _remove_action(name):
    if not name:   # (a bake onto a file's armature makes none)
        return
    import bpy

    action = bpy.data.actions.get(name)
    if action is not None:
        bpy.data.actions.remove(action)


def bake_job(job, target, args, solver, mapping, blend, progress, cancel):
    """Bake one clip and write its exports; returns its report row.

    Raises ``KeyboardInterrupt`` when ``cancel()`` turns true, any other
    error as it comes; either way nothing of the clip is left behind (its
    temporary files, its action unless a ``.blend`` keeps it).
    """
    from .bake import bake_and_write, preview_frames, write_outputs, write_preview

    action_name = None
    try:
        row, result, written = bake_and_write(job.source, target, args, job.exports, solver=solver,
                                              progress=progress, cancel=cancel, action_name=job.action_name,
                                              mapping=mapping, preview=preview_frames(job.preview))
        action_name = row.get("action")
        if written is None:
            if cancel():
                raise KeyboardInterrupt
            written = write_outputs(target, result, None, job.exports)
        paths, t_export = written
        if job.preview:
            t_export += write_preview(job.preview, result, paths, label="{}, ".format(job.action_name))
        result = None      # the clip's arrays go before the next clip is read
        if blend is None:  # (--no-blend) nothing keeps the keys once exported
            _remove_action(action_name)
            action_name = None
        row["outputs"] = paths + ([blend] if blend else [])
        row["seconds"]["export"] = round(row["seconds"].get("export", 0.0) + t_export, 4)
        row["seconds_total"] = round(sum(row["seconds"].values()), 4)
        row["frames_per_second"] = round(row["frames"] / row["seconds_total"], 2) if row["seconds_total"] else None
        if job.note:
            row["warnings"].append(job.note)
        return row
    except BaseException:
        remove_pending()
        _remove_action(action_name)
        raise


def failed_row(job, ex, args):
    from ..blender_io.targets import target_label

    # (the command line's errors and the neutral ones of blender_io name the file; others get it here)
    message = say(ex) if isinstance(ex, CliError) or type(ex) in (UserError, SettingError) else "{}: {}: {}".format(
        job.source, type(ex).__name__, " ".join(str(ex).split()))
    return {"source": job.source, "target": target_label(args.target), "status": "failed", "error": message,
            "outputs": []}


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def limit_threads(allowed):
    """Threads of a worker process that shares the cores with others: ``allowed()`` for the rig solve, one
    for numpy and torch (a worker of ``--jobs`` or of a Dask cluster)."""
    from ..retarget import rigsolve
    from ..retarget.threads import openblas

    rigsolve.MAX_THREADS = max(cores(), 1)
    rigsolve.THREADS_ALLOWED = allowed
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"     # (torch, if a clip needs the network, is imported in the worker)
    # numpy's OpenBLAS may be loaded already (before a fork), out of the variables' reach: one thread,
    # told directly (a worker's products on two threads take the core another worker bakes on)
    lib = openblas()
    if lib is not None:
        lib[1](1)
    torch = sys.modules.get("torch")
    if torch is not None:   # (loaded before the fork: its thread pool did not come along)
        torch.set_num_threads(1)


def bake_clip(job, target, args, solver, mapping, cancel, progress=None):
    """Bake one clip of a batch in a worker (``--jobs`` or a Dask cluster): ``(status, row or None)``.

    ``status`` is ``"done"`` (the row), ``"failed"`` (the failed row: one bad
    clip never stops the batch) or ``"interrupted"`` (``cancel()`` turned
    true; nothing of the clip is left).
    """
    try:
        return "done", bake_job(job, target, args, solver, mapping, None, progress, cancel)
    except KeyboardInterrupt:
        return "interrupted", None
    except Exception as ex:  # one bad clip never stops the batch
        return "failed", failed_row(job, ex, args)


def finish_clip(job, label, status, payload, progress):
    """Take a worker's result for ``job`` (its row when done or failed) and say so; whether it was
    interrupted."""
    if status == "done":
        job.row = payload
        progress.frames_done += int(payload["frames"])
        progress.message("{}: done, {} frames: {}".format(label, payload["frames"], headline(payload)))
    elif status == "failed":
        job.row = payload
        progress.message("{}: failed: {}".format(label, payload["error"]))
    elif status == "interrupted":
        progress.message("{}: interrupted".format(label))
    return status == "interrupted"


def remove_clip_partials(job):
    """Temporary files of ``job``'s exports that a killed worker left behind."""
    for path in job.exports:
        remove_partials(path)
