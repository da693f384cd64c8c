"""Why a path is not a regular file one can read: the message a SOURCE or a batch's clip gets.

``os.path.isfile`` is false alike for a folder, a FIFO, a dangling link and
a link loop; each gets its own words here (a FIFO is never opened: reading
one blocks until a writer comes).
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["not_a_file", "not_a_folder"]


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
