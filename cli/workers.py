"""``batch --jobs``: clips baked in forked worker processes, each taking the next clip from a shared counter
(the clips and the target are in the forked memory) and saying what it does down its own pipe."""

from __future__ import annotations

import os
import signal
import sys
import time

from . import sources
from .clips import bake_clip, cores, failed_row, finish_clip, limit_threads, remove_clip_partials
from .errors import CliError
from .signals import STOP_SIGNALS

__all__ = ["worker_count", "run_parallel", "WORKER_BASE_BYTES", "WORKER_FRAME_BYTES"]


#: Memory a worker needs for a clip, beyond what it shares with the batch: a
#: base plus a share per frame, above what ``bench_long`` measures of a BVH bake.
WORKER_BASE_BYTES = 200 * 2 ** 20


WORKER_FRAME_BYTES = 8 * 2 ** 10


def _available_memory():
    """Bytes of memory available now (``None`` where the system does not say)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def worker_count(args, target, pending, progress=None, in_blender=None):
    """Processes to bake ``pending`` in: ``--jobs`` (0: one per core), where the bake needs no Blender.

    Clips run in forked worker processes only when the target is a file's
    armature (:func:`.targets.direct_target`: no Blender scene to share) and
    ``bpy`` is not loaded (inside Blender, clips go one at a time). Never more
    than the clips, and no more than the available memory holds at the
    longest clip's size (:data:`WORKER_BASE_BYTES`, :data:`WORKER_FRAME_BYTES`).
    """
    import multiprocessing

    from ..readers.bvh_armature import FileArmature

    asked = int(getattr(args, "jobs", 0) or 0)
    why = None
    if not isinstance(target.obj, FileArmature):
        why = "the bake goes through Blender (a .bvh target with --no-blend and --export bvh only does not)"
    elif (sys.modules.get("bpy") is not None) if in_blender is None else in_blender:   # (None: import blocked)
        why = "inside Blender"
    elif not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        # (macOS: a process forked after Accelerate or the Objective-C runtime ran may crash)
        why = "worker processes are forked on Linux only"
    if why is not None:
        if asked > 1 and progress is not None:
            progress.message("--jobs {}: one clip at a time: {}".format(asked, why))
        return 1
    n = min(asked or cores(), len(pending))
    frames = [sources.peek_frame_count(job.source) for job in pending]
    longest = max((f for f in frames if f is not None), default=0)
    if any(f is None for f in frames):
        longest = max(longest, 100_000)   # a file whose length is unknown until read
    need = WORKER_BASE_BYTES + WORKER_FRAME_BYTES * longest
    avail = _available_memory()
    if avail is not None and n > 1:
        fit = max(int(avail // need), 1)
        if fit < n:
            if asked > 1 and progress is not None:
                progress.message("--jobs {}: {} at once: {:.1f} GB of memory is available, about {:.1f} GB a "
                                 "clip".format(asked, fit, avail / 2 ** 30, need / 2 ** 30))
            n = fit
    return max(n, 1)


_WORKER = {}


class _PipeProgress:
    """What :func:`.bake.bake_file` reports progress to, in a worker: ``send(("progress", clip, fraction,
    stage, frames))`` to the batch's process."""

    def __init__(self, send, index):
        self.send, self.index = send, index
        self.clip_frames = 0
        self._last = 0.0

    def callback(self, stage=""):
        def report(fraction, name=stage):
            now = time.perf_counter()
            if now - self._last >= 0.2:
                self._last = now
                self.send(("progress", self.index, float(fraction), name or stage, self.clip_frames))
        return report


def _worker_init():
    # Ctrl-C is the batch's to handle (it sets the stop event); the processes share the cores:
    # the rig solve of a clip takes one, and the idle ones once fewer clips are left than workers
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    n_cores, busy, waiting = cores(), _WORKER["busy"], _WORKER["waiting"]
    # (while clips wait, a worker between two clips is not idle: it takes the next at once)
    limit_threads(lambda: 1 if waiting.value > 0 else n_cores - busy.value + 1)


def _worker_bake(index):
    """Bake ``_WORKER["jobs"][index]`` in a worker: ``(index, status, row or message)``."""
    w = _WORKER
    job = w["jobs"][index]
    stop = w["stop"]
    if stop.is_set():
        return index, "not run", None
    progress = _PipeProgress(w["send"], index)
    busy = w["busy"]
    with busy.get_lock():
        busy.value += 1
    with w["waiting"].get_lock():
        w["waiting"].value -= 1
    try:
        return (index,) + bake_clip(job, w["target"], w["args"], w["solver"], w["mapping"], stop.is_set, progress)
    finally:
        with busy.get_lock():
            busy.value -= 1


def _worker_main(conn):
    """A worker process: takes the next clip of ``_WORKER["order"]`` until none is left or the batch stops.

    The clips are the forked process's own (no clip is sent to it); what it
    says goes down its own pipe, ``conn``, as it happens (a process killed
    mid-clip has said which clip it took): ``("start", clip)``, progress,
    then ``("result", clip, status, row or message)``.
    """
    w = _WORKER
    _worker_init()
    w["send"] = send = conn.send
    order, taken = w["order"], w["taken"]
    while not w["stop"].is_set():
        with taken.get_lock():
            k = taken.value
            if k >= len(order):
                break
            taken.value = k + 1
        i = order[k]
        send(("start", i))
        send(("result",) + _worker_bake(i))
    conn.close()


def run_parallel(workers, pending, n_skipped, n_jobs, target, args, solver, mapping, progress, interrupt):
    """Bake ``pending`` in ``workers`` forked processes; returns whether the batch was interrupted.

    Each worker takes whole clips, the largest first, from a shared counter
    (the same :func:`bake_job` as one at a time: nothing is sent to it, the
    clips and the target are in the forked memory) and hands back the clip's
    report row. This process shows the progress of the clips being baked and
    finishes each row; a worker that ends abruptly (killed: out of memory?)
    fails the clip it was baking, named, and another process takes its place
    for the clips left. Ctrl-C sets the workers' stop event (the clips in
    progress are dropped, their temporary files removed), a second one ends
    them at once.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    # the largest files first: the batch does not end waiting on one long clip
    size = [os.path.getsize(job.source) if os.path.isfile(job.source) else 0 for job in pending]
    order = sorted(range(len(pending)), key=lambda i: -size[i])
    _WORKER.update(jobs=pending, order=order, taken=ctx.Value("i", 0), target=target, args=args, solver=solver,
                   mapping=mapping, stop=stop, busy=ctx.Value("i", 0), waiting=ctx.Value("i", len(pending)))
    progress.message("baking {} clips in {} processes".format(len(pending), workers))
    active = {}          # index -> (fraction, stage, frames)
    done_rows = []
    interrupted = False
    workers_of = {}      # the reading end of a worker's pipe -> [process, the clip it is baking or None]
    left = set(range(len(pending)))

    def start_worker():
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker_main, args=(writer,), daemon=True)
        proc.start()
        writer.close()   # (the worker's end: its end of file is the worker's end)
        workers_of[reader] = [proc, None]

    def finish(i, status, payload):
        left.discard(i)
        active.pop(i, None)
        job = pending[i]
        if status == "done":
            done_rows.append(payload)
        return finish_clip(job, "clip {}/{} {}".format(n_skipped + i + 1, n_jobs, job.rel), status, payload,
                           progress)

    def ended(reader):
        """The worker behind ``reader`` is gone: a clip it took and did not finish fails, named."""
        proc, i = workers_of.pop(reader)
        reader.close()
        proc.join()
        if i is None or i not in left:
            return
        remove_clip_partials(pending[i])
        why = ("killed by signal {}".format(-proc.exitcode) if (proc.exitcode or 0) < 0
               else "exit code {}".format(proc.exitcode))
        finish(i, "failed", failed_row(pending[i], CliError(
            "{}: not baked: a worker process ended abruptly ({}; out of memory? try --jobs 1)".format(
                pending[i].source, why)), args))
        if not stop.is_set() and _WORKER["taken"].value < len(order):
            start_worker()   # the clips left get another process

    try:
        for _ in range(workers):
            start_worker()
        while left:
            if interrupt.requested and not stop.is_set():
                stop.set()
            for reader in wait(list(workers_of), timeout=0.05):
                try:
                    msg = reader.recv()
                except (EOFError, OSError):
                    ended(reader)
                    continue
                if msg[0] == "progress":
                    if msg[1] in left:
                        active[msg[1]] = msg[2:]
                elif msg[0] == "start":
                    workers_of[reader][1] = msg[1]
                elif msg[0] == "result":
                    workers_of[reader][1] = None
                    interrupted |= finish(*msg[1:])
            if not workers_of and left:   # every worker gone: the clips none took were not run
                for i in sorted(left):
                    finish(i, "not run", None)
            if left:
                _parallel_status(progress, pending, n_skipped, active, done_rows)
        interrupted = interrupted or stop.is_set()
        for reader in list(workers_of):   # (each ends by itself once no clip is left)
            workers_of[reader][0].join(timeout=5.0)
            reader.close()
    except KeyboardInterrupt:     # a second Ctrl-C: the workers end now
        for proc, _i in workers_of.values():
            proc.kill()   # (they ignore SIGTERM: the batch's to handle)
        for proc, _i in workers_of.values():
            proc.join()
        for job in pending:
            if job.row is None:
                remove_clip_partials(job)
        raise
    finally:
        _WORKER.clear()
    return interrupted


def _parallel_status(progress, pending, n_skipped, active, done_rows):
    """One progress line for the clips being baked (frames/s over the batch, time left)."""
    if progress.quiet:
        return
    frames_now = progress.frames_done + sum(f * n for f, _s, n in active.values())
    if done_rows:   # the time left: clips not started count as the mean clip so far
        mean = sum(int(r["frames"]) for r in done_rows) / len(done_rows)
        waiting = sum(1 for i, job in enumerate(pending) if job.row is None and i not in active)
        progress.total_frames = int(frames_now + sum((1 - f) * n for f, _s, n in active.values())
                                    + mean * waiting)
    baking = ", ".join("{} ({}{:.0f}%)".format(pending[i].rel, (s + " ") if s else "", 100 * f)
                       for i, (f, s, _n) in sorted(active.items()))
    progress.update_many(n_skipped + sum(1 for job in pending if job.row is not None), baking, frames_now)
