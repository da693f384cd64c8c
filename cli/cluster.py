"""``batch --scheduler``: the clips of a batch as tasks of a Dask cluster.

``neural-ik batch INPUT_DIR --target RIG.bvh --out-dir DIR --no-blend --export bvh --scheduler ADDRESS``

- ``ADDRESS`` is a Dask scheduler's (``tcp://host:8786``, from ``dask
  scheduler``, dask-jobqueue or dask-kubernetes) or ``local:N``: a
  ``LocalCluster`` of N worker processes on this machine, closed at the end.
- One task per clip, the largest first, no more at once than the cluster
  has threads (a worker holds only the clip it bakes: Dask counts a worker's
  death against every task it holds); each worker bakes it with the same
  :func:`.clips.bake_clip` as a ``--jobs`` worker and hands back its report
  row. The client (this process) keeps the skip rules, the progress line,
  the report and the exit codes of the local batch.
- Workers bake onto a ``.bvh`` target's armature without Blender, so the
  bakes they can run are those of ``--no-blend --export bvh`` (a ``.blend``
  holding every action is one Blender session's; other formats go through
  Blender's exporters): anything else is refused with exit code 2.
- A worker loads the package from the client's checkout path, and the target,
  the bone mapping and the network once per process (:func:`worker_bake`);
  INPUT_DIR and DIR must be at the same paths on every worker.
- Faults: a clip whose worker dies is submitted once more, then reported
  failed with the worker named (on a local cluster ``allowed-failures`` is
  0, so Dask itself runs it no more; a remote scheduler's own setting adds
  its runs); an exception that escapes a task is retried once
  (``retries=1``); a worker that cannot read a clip or write in DIR fails
  that clip naming the worker and the path. Ctrl-C sets a stop event the
  tasks poll (the clips in progress are dropped, no other is submitted) and
  the report lists what finished; a second one cancels everything at once. Outputs are written under temporary names and renamed
  when whole, as in the local batch.

Dask is imported here only when ``--scheduler`` is given: the Blender
extension neither ships nor needs it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

from .errors import CliError, UsageError

__all__ = ["check_arguments", "run_batch", "worker_bake", "INSTALL_HINT"]

#: How to install the pinned Dask packages (requirements.txt holds the same pins).
INSTALL_HINT = ("install it with `.venv/bin/pip install dask==2026.8.0 distributed==2026.8.0` "
                "(./setup.sh installs them from requirements.txt)")

#: Seconds between two looks of a task at the batch's stop event (a round trip to the scheduler).
STOP_POLL_SECONDS = 0.25

#: Seconds the client waits, after Ctrl-C, for the clips in progress to stop before cancelling them.
STOP_GRACE_SECONDS = 60.0

#: The checkout the workers load the package from.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_distributed():
    try:
        import distributed
    except ImportError as ex:
        raise UsageError("--scheduler needs Dask's distributed package, which does not import here ({}): "
                         "{}".format(ex, INSTALL_HINT)) from None
    return distributed


def check_arguments(args, blend, exports):
    """Refuse what the workers cannot bake, and a missing Dask, before any work (exit code 2)."""
    if getattr(args, "previews", False):
        raise UsageError("--scheduler: --previews renders with Blender, which the workers do not load; "
                         "bake the previews with one machine's batch or bake --preview")
    if blend is not None:
        raise UsageError("--scheduler: the .blend holding every action is saved by one Blender session, not "
                         "by the workers: add --no-blend (with --export bvh)")
    other = [fmt for fmt in exports if fmt != "bvh"]
    if other:
        raise UsageError("--scheduler: --export {} goes through Blender's exporter, which the workers do not "
                         "run: use --export bvh only (or --jobs on one machine)".format(other[0]))
    if os.path.splitext(args.target or "")[1].lower() != ".bvh":
        raise UsageError("--scheduler: --target {}: the workers bake onto a .bvh target's armature, with no "
                         "Blender scene: give a .bvh target (or use --jobs on one machine)".format(args.target))
    if not __name__.startswith("neural_ik."):   # (the name the workers load the package under)
        raise UsageError("--scheduler: run it from ./neural-ik, not inside Blender")
    from ..blender_io.targets import direct_target

    if direct_target(args.target, args.armature, units=args.target_units, up_axis=args.target_up_axis) is None:
        raise UsageError("--scheduler: --target {}: this BVH file is built by Blender's importer, which the "
                         "workers do not run: use --jobs on one machine".format(args.target))
    _import_distributed()


def _plain_args(args):
    """The parsed options a worker needs, as plain values (nothing that names this package)."""
    plain = {}
    for key, value in vars(args).items():
        if isinstance(value, (type(None), bool, int, float, str)) or (
                isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value)):
            plain[key] = value
    return plain


def _connect(address):
    """``(client, cluster or None)`` for ``--scheduler``: a LocalCluster of ``local:N`` or a running scheduler."""
    import logging

    import dask
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)   # (a worker's death is reported per clip)
    if address.startswith("local:"):
        n = int(address.split(":", 1)[1])
        # a dying worker's clip fails at once, to be submitted again by _Feeder (read at the scheduler's start)
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                   silence_logs=logging.ERROR)
        return Client(cluster), cluster
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as ex:
        raise UsageError("--scheduler {}: cannot connect ({})".format(address, ex)) from None
    try:
        client.wait_for_workers(1, timeout=120)
    except (TimeoutError, OSError):
        client.close()
        raise CliError("--scheduler {}: no worker joined within 120 s".format(address)) from None
    return client, None


def _threads_per_host(client):
    """Worker processes per host: a worker takes its host's cores divided among them."""
    hosts = {}
    for info in client.scheduler_info(n_workers=-1)["workers"].values():
        hosts[info.get("host")] = hosts.get(info.get("host"), 0) + 1
    return hosts


def run_batch(args, pending, n_skipped, n_jobs, where, progress, interrupt):
    """Bake ``pending`` (:class:`.clips.ClipJob`) on the cluster of ``--scheduler``; whether interrupted.

    ``where`` is ``(INPUT_DIR, DIR, export formats)``. Each job's ``row``
    is set as its task comes back (done or failed); jobs left without one
    were not run or were interrupted.
    """
    import cloudpickle

    from . import cluster_task
    from .clips import remove_clip_partials

    _import_distributed()
    cloudpickle.register_pickle_by_value(cluster_task)   # (workers need no import of this package to unpickle)
    client, cluster = _connect(args.scheduler)
    try:
        client.register_plugin(cluster_task.PackageLoader(PACKAGE_ROOT, local=cluster is not None),
                               name="neural-ik-package")
        root, out_dir, exports = where
        token = uuid.uuid4().hex[:12]
        plain = _plain_args(args)
        spec = {"root": root, "out_dir": out_dir, "exports": list(exports), "args": plain,
                "key": json.dumps([root, out_dir, list(exports), plain], sort_keys=True, default=str),
                "stop": "neural-ik-stop-" + token, "hosts": _threads_per_host(client)}
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        progress.message("baking {} clips on {} Dask workers ({})".format(len(pending), n_workers, args.scheduler))
        return _collect(client, _Feeder(client, pending, spec, token), n_skipped, n_jobs, args, spec, progress,
                        interrupt)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        for job in pending:    # (what a worker killed or stopped mid-clip left behind)
            if job.row is None:
                remove_clip_partials(job)


#: Runs of a clip whose worker died under it (the second death fails it).
RUNS_PER_CLIP = 2


class _Feeder:
    """Hands the cluster the next clips, the largest first (the batch does not end waiting on one long
    clip), no more than it has threads for, so a worker holds only the clip it bakes: Dask counts a
    worker's death against every task it holds, and a clip whose worker died is submitted again here
    (``allowed-failures`` 0 on a local cluster), never stacked behind another."""

    def __init__(self, client, pending, spec, token):
        size = [os.path.getsize(job.source) if os.path.isfile(job.source) else 0 for job in pending]
        self.queue = sorted(range(len(pending)), key=lambda i: -size[i])
        self.client, self.pending, self.spec, self.token = client, pending, spec, token
        self.runs = {}
        self.left = {}      # future -> clip index
        self.checked = 0.0

    def fill(self, arrived, force=False):
        """Submit clips while the cluster has a free thread (asked at most twice a second unless ``force``)."""
        from . import cluster_task

        if not self.queue or (not force and time.monotonic() - self.checked < 0.5):
            return
        self.checked = time.monotonic()
        room = max(sum(self.client.nthreads().values()), 1) - len(self.left)
        while room > 0 and self.queue:
            i = self.queue.pop(0)
            self.runs[i] = self.runs.get(i, 0) + 1
            job = self.pending[i]
            clip = (job.source, job.action_name.replace("/", os.sep), job.note)
            future = self.client.submit(cluster_task.bake_task, self.spec, clip, retries=1, pure=False,
                                        key="neural-ik-{}-{}-{}".format(self.token, i, self.runs[i]))
            self.left[future] = i
            arrived.add(future)
            room -= 1

    def again(self, i):
        """Whether clip ``i``, whose worker died, runs again (first in line)."""
        if self.runs.get(i, 0) >= RUNS_PER_CLIP:
            return False
        self.queue.insert(0, i)
        return True


def _collect(client, feeder, n_skipped, n_jobs, args, spec, progress, interrupt):
    """Take the tasks' rows as they come back; Ctrl-C stops the cluster's clips. Whether interrupted."""
    from distributed import Event, as_completed

    from .clips import finish_clip

    pending, left = feeder.pending, feeder.left
    arrived = as_completed()
    feeder.fill(arrived, force=True)
    stop_at = None
    interrupted = False
    try:
        while left:
            if interrupt.requested and stop_at is None:
                stop_at = time.monotonic()   # (no clip is submitted after this; those running see the event)
                Event(spec["stop"], client=client).set()
            elif stop_at is not None and time.monotonic() - stop_at > STOP_GRACE_SECONDS:
                client.cancel(list(left))
                stop_at = float("inf")   # (once)
            batch = arrived.next_batch(block=False)
            for future in batch:
                i = left.pop(future)
                label = "clip {}/{} {}".format(n_skipped + i + 1, n_jobs, pending[i].rel)
                status, row = _outcome(future, pending[i], args)
                if status == "died" and stop_at is None and feeder.again(i):
                    progress.message("{}: its worker ended abruptly: running it again".format(label))
                    continue
                if status == "died":
                    status, row = "failed", _died_row(future, pending[i], args)
                interrupted |= finish_clip(pending[i], label, status, row, progress)
            if stop_at is None:
                feeder.fill(arrived, force=bool(batch))
            _status(progress, pending, n_skipped, len(left))
            if not batch:
                time.sleep(0.05)
    except KeyboardInterrupt:    # a second Ctrl-C: everything stops now
        client.cancel(list(left))
        raise
    return interrupted or stop_at is not None


def _outcome(future, job, args):
    """``(status, row)`` of a finished, failed or cancelled task (``"died"``: its worker did)."""
    from .clips import failed_row

    if future.status == "cancelled":
        return "not run", None
    if future.status == "finished":
        return future.result()
    ex = future.exception()
    if type(ex).__name__ == "KilledWorker":
        return "died", None
    return "failed", failed_row(job, ex, args)


def _died_row(future, job, args):
    from .clips import failed_row

    ex = future.exception()
    last = ex.args[1] if len(ex.args) > 1 else None
    return failed_row(job, CliError("{}: not baked: the worker process baking it ended abruptly twice, the "
                                     "last time {} (out of memory?)".format(job.source,
                                                                           getattr(last, "address", last))), args)


def _status(progress, pending, n_skipped, n_left):
    """The progress line: clips done, those on the cluster, frames/s over the batch, the time left."""
    if progress.quiet:
        return
    rows = [job.row for job in pending if job.row is not None and job.row.get("status") == "done"]
    if rows:   # clips left count as the mean clip so far
        waiting = sum(1 for job in pending if job.row is None)
        progress.total_frames = int(progress.frames_done + waiting * progress.frames_done / len(rows))
    done = n_skipped + sum(1 for job in pending if job.row is not None)
    progress.update_many(done, "{} clips on the cluster".format(n_left), progress.frames_done)


# ---------------------------------------------------------------------------
# on a worker

#: What a worker process loaded for the batch (``key``: the batch it is for): loaded once, not per clip.
_STATE = {}


def worker_bake(spec, clip):
    """Bake one clip on this worker: ``(status, row or None)`` as :func:`.clips.bake_clip`, the row naming
    the worker."""
    from distributed import get_worker

    from .clips import ClipJob, failed_row, bake_clip

    address = get_worker().address
    source, name, note = clip
    cancel = _stopper(spec["stop"])
    if cancel():
        return "not run", None
    job = ClipJob(source, spec["root"], spec["out_dir"], spec["exports"], name, note)
    target, args, solver, mapping = _worker_state(spec, address)
    problem = _access_problem(job, address)
    if problem is not None:
        status, row = "failed", failed_row(job, CliError(problem), args)
    else:
        status, row = bake_clip(job, target, args, solver, mapping, cancel, _TaskProgress(source, address))
    if row is not None:
        row["worker"] = address
    return status, row


def _worker_state(spec, address):
    """``(target, args, solver, mapping)`` of the batch, loaded on the first of its clips in this process."""
    if _STATE.get("key") != spec["key"]:
        from . import arguments
        from .bake import get_solver, load_bake_target
        from .clips import cores, limit_threads
        from ..readers.bvh_armature import FileArmature

        _STATE.clear()
        args = argparse.Namespace(**spec["args"])
        target = load_bake_target(args, spec["exports"], None)
        if not isinstance(target.obj, FileArmature):   # (refused by check_arguments: never Blender here)
            raise CliError("--target {}: not baked without Blender".format(args.target))
        host = address.split("://")[-1].rsplit(":", 1)[0]
        threads = max(cores() // max(spec["hosts"].get(host, 1), 1), 1)
        limit_threads(lambda: threads)
        # the network too takes the worker's share of its host's cores (one worker alone: all of them)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        if sys.modules.get("torch") is not None:
            sys.modules["torch"].set_num_threads(threads)
        _STATE.update(key=spec["key"], state=(target, args, get_solver(args), arguments.load_bone_mapping(args.mapping)))
    return _STATE["state"]


def _stopper(name):
    """``cancel()`` for a task: whether the batch's stop event is set (asked at most every
    :data:`STOP_POLL_SECONDS`)."""
    from distributed import Event

    event = Event(name)
    seen = {"at": -STOP_POLL_SECONDS, "set": False}

    def cancel():
        now = time.monotonic()
        if not seen["set"] and now - seen["at"] >= STOP_POLL_SECONDS:
            seen["at"], seen["set"] = now, bool(event.is_set())
        return seen["set"]
    return cancel


def _access_problem(job, address):
    """Why this worker cannot read the clip or write its outputs (``None`` when it can)."""
    import tempfile

    try:
        with open(job.source, "rb") as fh:
            fh.read(1)
    except OSError as ex:
        return "{}: worker {} cannot read the input: {} (every worker must see INPUT_DIR at this path)".format(
            job.source, address, ex.strerror or ex)
    for path in job.exports:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tempfile.TemporaryFile(dir=os.path.dirname(path)):
                pass
        except OSError as ex:
            return "{}: worker {} cannot write the output {}: {} (every worker must see DIR at this path)".format(
                job.source, address, path, ex.strerror or ex)
    return None


class _TaskProgress:
    """What the bake reports progress to on a worker: nothing is sent (rows come back whole), except the
    test-only fault below."""

    def __init__(self, source, address):
        self.clip_frames = 0
        self._source, self._address = source, address

    def callback(self, stage=""):
        def report(fraction, name=stage):
            if fraction > 0:
                _test_kill(self._source, self._address)
        return report


def _test_kill(source, address):
    """Test-only: ``NEURAL_IK_TEST_KILL=NAME:TIMES[,...]`` with ``NEURAL_IK_TEST_KILL_RECORD=FILE`` ends
    this worker process mid-clip (as a kill would) on the clip named NAME until FILE holds TIMES lines, one
    written per death; nothing happens unless both variables are set."""
    wanted, record = os.environ.get("NEURAL_IK_TEST_KILL"), os.environ.get("NEURAL_IK_TEST_KILL_RECORD")
    if not wanted or not record:
        return
    times = dict(item.rsplit(":", 1) for item in wanted.split(",") if ":" in item)
    name = os.path.basename(source)
    if name not in times:
        return
    try:
        with open(record) as fh:
            deaths = sum(1 for line in fh if line.split()[:1] == [name])
    except OSError:
        deaths = 0
    if deaths < int(times[name]):
        with open(record, "a") as fh:
            fh.write("{} {}\n".format(name, address))
        sys.stdout.flush()
        os._exit(70)
