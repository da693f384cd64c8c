"""SIGTERM handled like Ctrl-C: job schedulers and ``timeout`` stop a run with it.

A run stopped by SIGTERM cleans up as after Ctrl-C (temporary files
removed, the report written, saying ``interrupted``) and leaves with exit
code 143 (128 + 15, what a shell reports for a process killed by SIGTERM),
130 after SIGINT.
"""

from __future__ import annotations

import contextlib
import signal

__all__ = ["Terminated", "STOP_SIGNALS", "exit_code", "signal_name", "TermFlag", "sigterm_stops", "Interrupt"]

#: The signals a run stops cleanly on.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler of :func:`sigterm_raises`: caught wherever Ctrl-C is."""


def exit_code(signum):
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum or signal.SIGINT)


def signal_name(signum):
    return signal.Signals(signum).name if signum else "SIGINT"


class TermFlag:
    """SIGTERM handler of a bake: the first asks the bake to stop (polled like a cancel), a second raises
    :class:`Terminated` at once.

    Raising at the first signal could land inside an import of torch or bpy (a crash); the bake polls
    ``requested`` between its steps instead.
    """

    def __init__(self):
        self.requested = False

    def __call__(self, signum=None, frame=None):
        if signum is None:   # (called as the bake's cancel test)
            return self.requested
        if self.requested:
            raise Terminated
        self.requested = True
        return None

    def check(self):
        """Raise :class:`Terminated` when SIGTERM came."""
        if self.requested:
            raise Terminated


@contextlib.contextmanager
def sigterm_stops():
    """Within the block SIGTERM sets the yielded :class:`TermFlag` (a second one raises :class:`Terminated`)."""
    flag = TermFlag()
    try:
        previous = signal.signal(signal.SIGTERM, flag)
    except ValueError:   # not the main thread
        previous = None
    try:
        yield flag
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Interrupt:
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
