"""What the Dask workers of ``batch --scheduler`` run: the package loaded once per worker, then each clip.

:class:`PackageLoader` is sent to the workers by value (cloudpickle: a worker
needs nothing of the package to unpickle it); as each worker joins, it loads
the package from the checkout the client runs from (the same path on every
worker: a shared filesystem or the same install) under the name
``./neural-ik`` gives it, so the tasks, :func:`bake_task`, unpickle by name.
Only the standard library and ``distributed`` here, for that reason.
"""

import importlib
import importlib.util
import os
import sys

from distributed import WorkerPlugin

#: The name the package is loaded under on a worker (as ``./neural-ik`` loads it).
PACKAGE = "neural_ik"


def load_package(root):
    """The package loaded from ``root`` (once per worker process)."""
    module = sys.modules.get(PACKAGE)
    if module is not None:
        return module
    path = os.path.join(root, "cli", "standalone.py")
    if not os.path.isfile(path):
        raise ImportError("no neural_ik checkout at {} on this worker (every worker needs it at the path the "
                          "client runs from)".format(root))
    spec = importlib.util.spec_from_file_location("_neural_ik_standalone", path)
    standalone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standalone)
    standalone.tune_malloc()   # (as ./neural-ik's own process: a bake's arrays reuse freed memory)
    return standalone.load_package(root)


class PackageLoader(WorkerPlugin):
    """Loads the package on every worker as it joins, before it takes a task.

    ``local``: the workers are this command's children (``local:N``), in its
    process group: Ctrl-C in the terminal is the command's to handle (it
    stops the tasks), so they ignore SIGINT, as ``--jobs`` workers do.
    """

    def __init__(self, root, local=False):
        self.root = root
        self.local = local

    def setup(self, worker):
        if self.local:
            import signal

            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            except ValueError:   # (not the main thread: a terminal's Ctrl-C may then end this worker)
                pass
        load_package(self.root)


def bake_task(spec, clip):
    """One clip: ``(status, row or None)`` of :func:`.cluster.worker_bake`."""
    return importlib.import_module(PACKAGE + ".cli.cluster").worker_bake(spec, clip)
