"""Paths checked before any work: why a path is not a regular file one can read (the message a SOURCE
or a batch's clip gets), and whether the outputs can be written (exit code 2 when not).

``os.path.isfile`` is false alike for a folder, a FIFO, a dangling link and
a link loop; each gets its own words here (a FIFO is never opened: reading
one blocks until a writer comes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

from .errors import UsageError
from .names import check_name_length

__all__ = ["not_a_file", "not_a_folder", "path_inside", "check_writable_folder", "check_output_paths"]


def _link_problem(path):
    """What is wrong with a symbolic link that cannot be followed (``None``: it can)."""
    try:
        os.stat(path)
    except OSError as ex:
        if ex.errno == errno.ELOOP:
            return "a symbolic link loop (it leads back to itself)"
        if ex.errno == errno.ENOENT:
            return "a broken symbolic link (to {}, which does not exist)".format(os.readlink(path))
        return "a symbolic link that cannot be followed ({})".format(ex.strerror or ex)
    return None


def _kind(mode):
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def not_a_file(path):
    """Why ``path`` is not a regular file (``None`` when it is one): "a folder", "a FIFO", "no such file"..."""
    try:
        st = os.stat(path)
    except OSError as ex:
        if os.path.islink(path):
            return _link_problem(path)
        if ex.errno == errno.ELOOP:
            return "a symbolic link loop on the way to it"
        if ex.errno == errno.ENOENT:
            return "no such file"
        return "cannot be read ({})".format(ex.strerror or ex)
    if stat.S_ISREG(st.st_mode):
        return None
    kind = _kind(st.st_mode)
    return "is {}, not a file".format(kind) if kind.startswith("a ") else kind


def not_a_folder(path):
    """Why ``path`` is not a folder (``None`` when it is one)."""
    if os.path.isdir(path):
        return None
    why = not_a_file(path)
    if why is None:
        return "is a file, not a folder"
    return "no such folder" if why == "no such file" else why


def _same_key(path):
    """Comparison key of a path: resolved links, case folded where the file system folds it."""
    return os.path.normcase(os.path.realpath(os.path.abspath(path)))


def path_inside(path, folder):
    """Whether ``path`` is ``folder`` or lies below it (after resolving links)."""
    path, folder = _same_key(path), _same_key(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_writable_folder(folder, what):
    """Check that files can be created in ``folder`` (or in the nearest existing folder above it).

    A file is created there and removed again: permission bits say nothing
    for root or on a read-only mount.

    Parameters
    ----------
    folder : str
    what : str
        ``"--out x.blend"``, for messages.

    Raises
    ------
    UsageError
        A parent is a file, or the folder is not writable.
    """
    folder = os.path.abspath(folder)
    existing = folder
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        raise UsageError("{}: {} is a file, not a folder".format(what, existing))
    try:
        fd, probe = tempfile.mkstemp(prefix=".neural_ik-write-check-", dir=existing)
    except OSError as ex:
        raise UsageError("{}: cannot write in the folder {} ({})".format(
            what, existing, ex.strerror or ex)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_paths(outputs, inputs=()):
    """Check every output path before any work.

    Parameters
    ----------
    outputs : list of (str, str)
        ``(flag, path)`` pairs, e.g. ``("--out", "walk.blend")``; a path of
        ``"-"`` (stdout) is skipped.
    inputs : iterable of str
        Files the run reads (source, target, mapping); no output may replace one.

    Raises
    ------
    UsageError
        An output is a folder or not a regular file, its folder is not
        writable or a parent is a file, two outputs are the same file, or an
        output is one of the inputs.
    """
    seen = {}
    input_keys = {_same_key(p): p for p in inputs if p}
    checked = set()
    for flag, path in outputs:
        if path is None or path == "-":
            continue
        what = "{} {}".format(flag, path)
        if os.path.isdir(path):
            raise UsageError("{}: is a folder; give a file name".format(what))
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError("{}: exists and is not a regular file".format(what))
        too_long = check_name_length(path)
        if too_long:
            raise UsageError("{}: {}".format(what, too_long))
        key = _same_key(path)
        if key in seen:
            raise UsageError("{}: the same file as {}; give each output its own name".format(what, seen[key]))
        seen[key] = what
        if key in input_keys:
            raise UsageError("{}: would replace the input {}".format(what, input_keys[key]))
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in checked:
            check_writable_folder(folder, what)
            checked.add(folder)
