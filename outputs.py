"""Files written whole or not at all: a temporary name next to the output, renamed when complete (no
``bpy``; the command line's outputs and Blender's exports alike)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile

from .errors import UserError

__all__ = ["atomic_output", "remove_pending", "remove_partials", "write_json", "json_default", "temp_stem",
           "TEMP_STEM_BYTES"]


_PENDING = set()


#: Temporary names of :func:`atomic_output` (``.walk.x8k2.partial.bvh`` for ``walk.bvh``).
_PARTIAL_PREFIX, _PARTIAL_SUFFIX = ".{}.", ".partial{}"


@contextlib.contextmanager
def atomic_output(path):
    """Yield a temporary path next to ``path``; rename it to ``path`` on success.

    The temporary name keeps the extension (exporters check it) and starts
    with a dot. On any exception (including ``KeyboardInterrupt``) the
    temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str
    """
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    stem, ext = os.path.splitext(os.path.basename(path))
    stem = temp_stem(stem)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_PARTIAL_PREFIX.format(stem), suffix=_PARTIAL_SUFFIX.format(ext),
                                   dir=folder)
    except OSError as ex:
        raise UserError("{}: cannot write ({})".format(path, ex.strerror or ex)) from None
    os.close(fd)
    os.unlink(tmp)  # exporters create it themselves
    _PENDING.add(tmp)
    try:
        try:
            yield tmp
            if not os.path.isfile(tmp):
                raise UserError("{}: the writer produced no file".format(path))
            os.replace(tmp, path)
        except OSError as ex:  # a full disk, a file too large, a folder removed meanwhile
            raise UserError("{}: cannot write ({}); the previous file, if any, is unchanged".format(
                path, ex.strerror or ex)) from None
    finally:
        _PENDING.discard(tmp)
        _unlink_temporary(tmp)


def remove_pending():
    """Remove temporary output files not renamed yet (on an interrupted run)."""
    for tmp in list(_PENDING):
        _unlink_temporary(tmp)
        _PENDING.discard(tmp)


def remove_partials(path):
    """Remove the temporary files :func:`atomic_output` made for ``path`` in another process (one killed
    before it could remove them: ``remove_pending`` only knows this process's)."""
    folder = os.path.dirname(os.path.abspath(path))
    stem, ext = os.path.splitext(os.path.basename(path))
    stem = temp_stem(stem)
    pattern = glob.escape(_PARTIAL_PREFIX.format(stem)) + "*" + glob.escape(_PARTIAL_SUFFIX.format(ext))
    for left in glob.glob(os.path.join(glob.escape(folder), pattern)):
        _unlink_temporary(left)


def _unlink_temporary(tmp):
    """Remove a temporary output and Blender's backup / save-in-progress names of it, where they exist."""
    for leftover in (tmp, tmp + "1", tmp + "@"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def write_json(path, data):
    """Write JSON atomically (temporary name, then rename)."""
    text = json.dumps(data, indent=2, sort_keys=False, default=json_default) + "\n"
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)


def json_default(value):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None:
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


#: Bytes of an output's stem kept in its temporary name (``.walk.x8k2abcd.partial.bvh``).
TEMP_STEM_BYTES = 64


def temp_stem(stem):
    """``stem`` cut to :data:`TEMP_STEM_BYTES` bytes (at a character boundary) for a temporary name."""
    raw = os.fsencode(stem)
    if len(raw) <= TEMP_STEM_BYTES:
        return stem
    return os.fsdecode(raw[:TEMP_STEM_BYTES].decode("utf-8", "ignore").encode("utf-8"))
