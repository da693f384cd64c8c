"""The whole CMU Graphics Lab Motion Capture Database, in its public BVH conversion, for the training cache.

The conversion read is Bruce Hahne's "MotionBuilder-friendly" BVH release
(``cmuconvert-mb2``; its GitHub mirror ``una-dinosauria/cmu-mocap`` keeps one
folder per subject, ``001/01_01.bvh``): the same convention as
``foreign/cmu_hahne/`` (root ``Hips``; ``LHipJoint``, ``LowerBack``,
``Spine``, ``Spine1``, ``Neck``, ``Neck1``, ``Head``, ``LeftShoulder``,
``LeftArm``, ...; Y up, CMU length units, 120 frames per second, a
calibration T-pose as the first frame of most takes). Each take is read like a
user's file by :mod:`neural_ik.readers` (automatic mapping, units and up axis
from the data) and converted onto the canonical skeleton from its own
rotations (:func:`.cache.foreign_to_canonical`), the leading T-pose left out.

**Held out by subject**: every subject whose number ends in 6
(:data:`HELDOUT_CMU_SUBJECTS`) is left out of training wherever CMU motion
comes from: this database, ``../shared/mocap/cmu`` (its subject 6) and the
CMU-derived ``foreign/cmu_*`` folders. The rule was fixed before any
training on the database.

Files are found anywhere below the given folder by their take name
``SS_TT.bvh`` (``SS`` the subject, ``TT`` the trial); other files are ignored.

No ``bpy`` here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["HELDOUT_CMU_SUBJECTS", "DUPLICATE_FOLDERS", "is_heldout_subject", "take_of", "find_takes", "load_heldout"]

#: CMU subjects held out of training: the subject numbers that end in 6 (about a tenth of the database).
HELDOUT_CMU_SUBJECTS = tuple(range(6, 150, 10))
#: ``foreign/`` folders that hold takes of the same conversion as the database: with the database in the
#: cache their takes would be counted twice, so they are left out there.
DUPLICATE_FOLDERS = ("cmu_hahne",)

_TAKE = re.compile(r"^0*(\d+)_0*(\d+)")


def is_heldout_subject(subject) -> bool:
    """Whether a CMU subject number is held out of training (:data:`HELDOUT_CMU_SUBJECTS`)."""
    return subject is not None and int(subject) in HELDOUT_CMU_SUBJECTS


def take_of(name) -> tuple | None:
    """``(subject, trial)`` of a CMU take name (``"01_14"``, ``"60_05_scaled"``,
    ``"001/01_14.bvh"``); None when the name does not start with one."""
    m = _TAKE.match(Path(str(name)).stem)
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_takes(root) -> list:
    """Every take below ``root``: a sorted list of ``(path, subject, trial)``.

    Raises
    ------
    FileNotFoundError
        When ``root`` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"CMU database folder not found: {root}")
    out = []
    for f in root.rglob("*.bvh"):
        t = take_of(f.name)
        if t is not None:
            out.append((f, t[0], t[1]))
    out.sort(key=lambda r: (r[1], r[2], str(r[0])))
    return out


def load_heldout(root, fps=30.0, max_frames=None, log=None) -> list:
    """The takes of the held-out subjects below ``root`` as :class:`.foreign.ForeignClip` (folder
    ``cmu_full``, the leading T-pose left out), for :func:`.evaluate.evaluate_foreign`; a take that cannot
    be read is skipped with a message."""
    from .foreign import read_foreign_file

    if log is None:
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    out = []
    for path, subject, trial in find_takes(root):
        if not is_heldout_subject(subject):
            continue
        try:
            out.append(read_foreign_file(path, "cmu_full", fps, max_frames, drop_tpose=True,
                                         name=f"cmu_full/{subject:02d}_{trial:02d}"))
        except Exception as ex:  # a broken take is skipped, never the run
            log(f"skipping {path}: {type(ex).__name__}: {ex}")
    return out
