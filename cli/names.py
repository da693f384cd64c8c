"""Output file names: their length against the file system's limit, and short temporary names.

A 250-byte output name was refused only after the bake ("File name too
long"), because the temporary name beside it is longer: the length is now
checked before any work, and a temporary name keeps at most
:data:`..outputs.TEMP_STEM_BYTES` bytes of the output's stem, so it is never the
longer of the two.
"""

from __future__ import annotations

import os

__all__ = ["name_max", "check_name_length"]

def name_max(folder):
    """Longest file name, in bytes, of the file system holding ``folder`` (or its nearest existing parent)."""
    folder = os.path.abspath(folder)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (AttributeError, OSError, ValueError):  # (Windows: no pathconf)
        return 255


def check_name_length(path):
    """Why ``path``'s file name is too long for its file system (``None`` when it fits)."""
    name = os.fsencode(os.path.basename(os.path.abspath(path)))
    limit = name_max(os.path.dirname(os.path.abspath(path)))
    if len(name) > limit:
        return "file name too long ({} bytes; this file system allows {})".format(len(name), limit)
    return None

