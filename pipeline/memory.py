"""Memory bookkeeping of a long bake: what a stage lets go, and the heap given back (no ``bpy``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from . import tuning

__all__ = ["return_free_memory", "motionless", "drop_fields"]

_TRIM = None


def return_free_memory(frames):
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    A long bake frees hundreds of MB of chunk-sized temporaries between its
    stages; glibc keeps them mapped while the next stage's whole-clip arrays
    are mapped anew beside them. Bakes under :data:`.tuning.TRIM_MIN_FRAMES`
    frames skip it.
    """
    global _TRIM
    if frames < tuning.TRIM_MIN_FRAMES:
        return
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL(None).malloc_trim
        except Exception:    # not glibc (macOS, musl without it; Windows has no CDLL(None))
            _TRIM = False
    if _TRIM:
        _TRIM(0)


def motionless(source_rig):
    """The source skeleton without its motion (zero frames): what a bake reads of it after the solve."""
    if source_rig is None or source_rig.num_frames == 0:
        return source_rig
    B = len(source_rig.rig)
    return type(source_rig)(source_rig.rig, source_rig.mapping, np.zeros((0, B, 4), np.float32),
                            np.zeros((0, B, 3), np.float32), list(source_rig.notes))


def drop_fields(solved, *names):
    """``solved`` (a dataclass: the solve's answer) without the whole-clip arrays ``names`` (None)."""
    if dataclasses.is_dataclass(solved):
        return dataclasses.replace(solved, **{n: None for n in names})
    return solved
