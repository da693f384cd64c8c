"""Rows of numbers as fixed-point text, vectorised (no Python loop over values): BVH motion lines.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["format_rows"]


def _fixed_point(x, precision):
    """Integer and fraction parts of ``|x|`` rounded to ``precision`` decimals, sign, widest integer part."""
    p10 = 10 ** int(precision)
    I = np.rint(np.abs(x) * float(p10)).astype(np.int64)
    ip, fp = np.divmod(I, p10)
    neg = (x < 0) & (I > 0)  # a value rounding to zero has no sign
    kmax = len(str(int(ip.max()))) if ip.size else 1
    if kmax <= 9:
        ip = ip.astype(np.int32)
    return ip, fp.astype(np.int32) if precision <= 9 else fp, neg, kmax


def _fields(parts, W, precision):
    """Fields of width ``W`` (right aligned) plus a separating space, shape (n, C, W + 1), uint8."""
    ip, fp, neg, kmax = parts
    out = np.full(ip.shape + (W + 1,), 32, np.uint8)
    frac = precision + 1 if precision > 0 else 0
    f = fp
    for k in range(precision):
        f, d = np.divmod(f, 10)
        out[..., W - 1 - k] = d
        out[..., W - 1 - k] += 48
    if precision:
        out[..., W - 1 - precision] = 46  # "."
    units = W - 1 - frac
    q = ip
    nd = np.ones(ip.shape, np.int8)  # integer digits
    for k in range(kmax):
        q, d = np.divmod(q, 10)
        if k == 0:
            out[..., units] = d
            out[..., units] += 48
        else:
            has = ip >= 10 ** k
            nd += has
            out[..., units - k] = np.where(has, d + 48, 32)
    if neg.any():
        r, c = np.nonzero(neg)
        out[r, c, units - nd[r, c]] = 45  # "-"
    return out


def format_rows(block, precision):
    """Rows of ``block`` (n, C) as ``%.{precision}f`` numbers, one line per row, or None.

    Vectorised fixed-point formatting (several times faster than ``%``
    formatting): every value of the block gets the same field width, right
    aligned after a space, so numbers are separated by one or more spaces
    (any BVH reader splits on whitespace). The digits are those of the value
    rounded to ``precision`` decimals. Columns constant over the block are
    formatted once. Returns None for non-finite or huge values (the caller
    formats those with ``%``).
    """
    n, C = block.shape
    if not np.isfinite(block).all() or (block.size and float(np.abs(block).max()) >= 2.0 ** 62 / 10 ** precision):
        return None
    const = (block[1:] == block[:1]).all(0) if n > 1 else np.zeros(C, dtype=bool)
    vary = _fixed_point(block[:, ~const], precision) if not const.all() else None
    fixed = _fixed_point(block[:1, const], precision) if const.any() else None
    frac = precision + 1 if precision > 0 else 0
    W = max(p[3] + int(p[2].any()) for p in (vary, fixed) if p is not None) + frac  # widest number
    if fixed is None:
        out = _fields(vary, W, precision)
    else:
        out = np.empty((n, C, W + 1), np.uint8)
        out[:, const] = _fields(fixed, W, precision)
        if vary is not None:
            out[:, ~const] = _fields(vary, W, precision)
    out[:, -1, W] = 10  # "\n"
    return out.tobytes()
