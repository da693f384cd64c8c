"""Argument types of the command line: frame ranges, scene frames, bounded numbers (argparse types)."""

from __future__ import annotations

import argparse

from .errors import CliError

__all__ = ["parse_frames", "resolve_frames", "frame_number", "int_at_least", "positive_int", "unit_float",
           "FRAME_MIN", "FRAME_MAX"]


#: Blender's scene frame limits (``MINAFRAME``..``MAXFRAME``).
FRAME_MIN, FRAME_MAX = -1048574, 1048574


def parse_frames(text):
    """Parse ``A:B`` (source frames A up to B, B excluded; either may be empty).

    Parameters
    ----------
    text : str

    Returns
    -------
    tuple of (int or None, int or None)

    Raises
    ------
    argparse.ArgumentTypeError
    """
    parts = str(text).split(":")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError("expected A:B (e.g. 0:120, 30: or :90), got {!r}".format(text))
    try:
        a = int(parts[0]) if parts[0].strip() else None
        b = int(parts[1]) if parts[1].strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError("frames must be integers A:B, got {!r}".format(text)) from None
    if (a is not None and a < 0) or (b is not None and b < 0):
        raise argparse.ArgumentTypeError("frames must not be negative, got {!r}".format(text))
    if a is not None and b is not None and b <= a:
        raise argparse.ArgumentTypeError("empty frame range {!r} (B must be greater than A)".format(text))
    return a, b


def resolve_frames(frames, n_frames, source):
    """Resolve ``--frames A:B`` (open ends allowed) against a clip of ``n_frames`` frames.

    Parameters
    ----------
    frames : tuple of (int or None, int or None) or None
        As parsed by :func:`parse_frames`.
    n_frames : int
        Frames of the source clip.
    source : str
        The file, for messages.

    Returns
    -------
    tuple of (int, int) or None
        ``(A, B)`` with ``0 <= A < B <= n_frames`` (B excluded), from
        ``pipeline.prepare.resolve_frames``; ``None`` when ``frames`` is ``None``.

    Raises
    ------
    CliError
        The range lies outside the clip (the message names the file and the flag).
    """
    if frames is None:
        return None
    from ..pipeline.options import BakeError
    from ..pipeline.prepare import resolve_frames as _resolve

    given = "{}:{}".format("" if frames[0] is None else frames[0], "" if frames[1] is None else frames[1])
    try:
        return _resolve(frames, int(n_frames))
    except BakeError as ex:
        raise CliError("{}: --frames {}: {}".format(source, given, ex)) from None


def frame_number(text):
    """A scene frame within Blender's limits."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: {!r}".format(text)) from None
    if not FRAME_MIN <= value <= FRAME_MAX:
        raise argparse.ArgumentTypeError("{} is outside Blender's frame range {}..{}".format(
            value, FRAME_MIN, FRAME_MAX))
    return value


def int_at_least(minimum, meaning=""):
    """An argparse type: a whole number of at least ``minimum`` (``meaning`` said in the message)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a whole number: {!r}".format(text)) from None
        if value < minimum:
            raise argparse.ArgumentTypeError("must be at least {}{}, got {!r}".format(
                minimum, " ({})".format(meaning) if meaning else "", text))
        return value

    return parse


positive_int = int_at_least(1)


def unit_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: {!r}".format(text)) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1, got {!r}".format(text))
    return value
