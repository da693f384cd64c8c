"""SIGTERM handled like Ctrl-C: job schedulers and ``timeout`` stop a run with it.

A run stopped by SIGTERM cleans up as after Ctrl-C (temporary files
removed, the report written, saying ``interrupted``) and leaves with exit
code 143 (128 + 15, what a shell reports for a process killed by SIGTERM),
130 after SIGINT.
"""

from __future__ import annotations

import contextlib
import signal

__all__ = ["Terminated", "STOP_SIGNALS", "exit_code", "signal_name", "sigterm_raises"]

#: The signals a run stops cleanly on.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler of :func:`sigterm_raises`: caught wherever Ctrl-C is."""


def exit_code(signum):
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum or signal.SIGINT)


def signal_name(signum):
    return signal.Signals(signum).name if signum else "SIGINT"


def _raise_terminated(signum, frame):
    raise Terminated


@contextlib.contextmanager
def sigterm_raises():
    """Within the block SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) as Ctrl-C would."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:   # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
