"""The files below a batch's INPUT_DIR: linked folders followed once each, unreadable entries named.

``os.walk`` left out dangling and looping links and never entered a linked
folder, with no word in the report; here a linked folder is searched like
any other (a link back to a folder already searched is reported, not
followed: no endless loop), and every entry that looks like a clip but is
not a readable file comes back with the reason.
"""

from __future__ import annotations

import os

from .pathcheck import not_a_file

__all__ = ["walk_sources"]


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _linked_folder_problem(path, root_real, exclude_real, seen):
    """Why the linked folder ``path`` is not searched (``None``: it is)."""
    real = os.path.realpath(path)
    if _inside(root_real, real):
        return "a symbolic link to {}, which holds INPUT_DIR (a loop): not followed".format(real)
    if exclude_real and _inside(real, exclude_real):
        return "a symbolic link into the output folder {}: not followed".format(exclude_real)
    if real in seen:
        return "a symbolic link to {}, searched already as {}: not searched twice".format(real, seen[real])
    return None


def walk_sources(root, extensions, problems, exclude=None):
    """Paths below ``root`` with one of ``extensions`` (hidden folders skipped); appends ``(path, reason,
    status)`` to ``problems`` for entries that cannot be read as files (any link that cannot be followed, a
    FIFO...: ``"failed"``) and linked folders not searched (``"skipped"``).

    A linked folder is searched unless it holds ``root`` (a loop), lies in
    ``exclude`` (the output folder) or was searched already.
    """
    paths = []
    root_real = os.path.realpath(root)
    exclude_real = os.path.realpath(exclude) if exclude else None
    seen = {root_real: root}
    for folder, dirs, files in os.walk(root, followlinks=True):
        kept = []
        # plain folders first: a folder reached both ways is searched under its own name
        for d in sorted(dirs, key=lambda d: (os.path.islink(os.path.join(folder, d)), d)):
            if d.startswith("."):
                continue
            path = os.path.join(folder, d)
            why = _linked_folder_problem(path, root_real, exclude_real, seen) if os.path.islink(path) else None
            if why is None and os.path.realpath(path) in seen:   # (a plain folder reached again through a link)
                why = "searched already as {}: not searched twice".format(seen[os.path.realpath(path)])
            if why is not None:   # (a folder left out on purpose: skipped, not failed)
                problems.append((path, why, "skipped"))
                continue
            seen[os.path.realpath(path)] = path
            kept.append(d)
        dirs[:] = kept
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            clip_like = os.path.splitext(name)[1].lower() in extensions
            why = not_a_file(path)
            if why is None:
                if clip_like:
                    paths.append(path)
            elif clip_like or os.path.islink(path):
                problems.append((path, why, "failed"))
    return paths
