"""A lock file guarding a batch's output folder: a second batch into it is refused while the first runs.

``DIR/.neural_ik.lock`` holds the owner's process id, host and start time
(for the message) and is held with ``fcntl.flock`` for the run: the kernel
releases it when the process ends however it ends, so a lock left by a
dead process is taken over. Where ``flock`` is missing (Windows) or not
supported by the file system (some network mounts) the recorded process id
is checked instead.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time

from .errors import CliError

__all__ = ["LOCK_NAME", "FolderLock"]

LOCK_NAME = ".neural_ik.lock"


def _pid_alive(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError, TypeError):
        return True   # someone else's process, or a record we cannot judge: assume alive
    except OSError:
        return True
    return True


class FolderLock:
    """Hold ``folder``'s lock file for a ``with`` block (:class:`CliError` when another run holds it).

    Parameters
    ----------
    folder : str
    command : str
        What holds it, for the other run's message (``"batch"``).
    """

    def __init__(self, folder, command="batch"):
        self.path = os.path.join(os.path.abspath(folder), LOCK_NAME)
        self.command = command
        self.fd = None
        self.note = None   # "took over a stale lock of process N" when one was left behind

    def _owner(self, tries=1):
        """The holder's record; with ``tries`` over 1 an empty one is read again (a refused run: the
        holder writes its record just after it takes the lock, and the message would name nobody)."""
        for _ in range(tries):
            try:
                with open(self.path, encoding="utf-8") as fh:
                    owner = json.load(fh)
                if owner:
                    return owner
            except (OSError, ValueError):
                pass
            if tries > 1:
                time.sleep(0.05)
        return {}

    def _refuse(self, owner):
        who = "process {} on {}".format(owner.get("pid", "?"), owner.get("host", "?"))
        since = owner.get("started")
        raise CliError("{}: another neural-ik {} ({}, started {}) is writing into this folder; wait for it to "
                       "finish or pick another --out-dir (a lock of a process that has ended is taken over by "
                       "itself)".format(self.path, owner.get("command", "run"), who, since or "at an unknown time"))

    def _open_locked(self, fcntl):
        """``(descriptor, flocked)`` of the lock file; a file replaced meanwhile (released by its owner) is opened
        again."""
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as ex:
                if ex.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return fd, False   # (a file system without flock: the recorded process id decides)
                os.close(fd)
                self._refuse(self._owner(tries=20))
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd, True
            except FileNotFoundError:
                pass
            os.close(fd)
        raise CliError("{}: cannot take the lock (the file keeps being replaced)".format(self.path))

    def acquire(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            import fcntl
        except ImportError:   # pragma: no cover (Windows)
            fcntl = None
        owner = self._owner()
        locked = False
        if fcntl is not None:
            fd, locked = self._open_locked(fcntl)
        else:   # pragma: no cover
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not locked and owner.get("pid") not in (None, os.getpid()) \
                and owner.get("host") == socket.gethostname() and _pid_alive(owner["pid"]):
            os.close(fd)
            self._refuse(owner)
        if owner.get("pid") is not None:
            self.note = "took over the lock {} left by process {} (no longer running)".format(
                self.path, owner["pid"])
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                  "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
        self.fd = fd
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)   # (while still held: no other run can be holding this file)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
