"""Low-passes over time of whole clips, a few tracks at a time (no ``bpy``)."""

from __future__ import annotations

import numpy as np

from ..model.rotations_np import vector_norm
from .options import BakeError

__all__ = ["smooth", "smooth_columns"]


def smooth_columns(name, x, columns, *args, unit=False, inplace=False, group=4):
    """``x`` (T, N, ...) with its ``columns`` (of axis 1) smoothed over time, ``group`` at a time (a copy).

    Every track is filtered on its own (:mod:`..retarget.smoothing`), so
    this is :func:`smooth` of the whole array restricted to ``columns``; the
    filters' temporaries stay a few tracks wide instead of a long clip's
    whole. ``unit``: the results (quaternions) are normalised. ``inplace``:
    into ``x`` itself (float64).
    """
    out = x if inplace else np.array(x, dtype=np.float64)
    columns = list(columns)
    for k in range(0, len(columns), group):
        g = columns[k:k + group]
        y = np.asarray(smooth(name, out[:, g], *args))
        if unit:
            y = y / vector_norm(y, keepdims=True)
        out[:, g] = y
    return out


def smooth(name, *args):
    """:mod:`..retarget.smoothing`'s filter ``name`` (it needs scipy: a :class:`BakeError` without)."""
    try:
        from ..retarget import smoothing
    except ImportError as ex:
        raise BakeError(f"smoothing is not available ({ex})") from None
    return getattr(smoothing, name)(*args)
