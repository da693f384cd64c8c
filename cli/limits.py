"""Ranges of the numeric bake flags: an absurd value is refused by argparse, naming the flag, before any work.

``--scale 1e300`` made inf/NaN keys and ``--fps 1e-9`` a scene Blender
clamps to another rate; values outside these ranges are typing errors or
units mixed up, never a bake anyone wants.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["FPS_RANGE", "SCALE_RANGE", "bounded_float"]

#: ``--fps`` / ``--source-fps``: Blender's scene rate is a whole number up to 32,767 over a base up to 100.
FPS_RANGE = (0.01, 32767.0)
#: ``--scale`` (armature units per source metre): a millimetre rig from kilometres, a kilometre rig from
#: micrometres are the ends of what units explain.
SCALE_RANGE = (1e-4, 1e4)


def bounded_float(low, high, what):
    """An argparse type: a finite number in ``[low, high]`` (``what`` says what it counts, in the message)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: {!r}".format(text)) from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError("must be a positive number, got {!r}".format(text))
        if not low <= value <= high:
            raise argparse.ArgumentTypeError("{!r} is outside {:g}..{:g} {}".format(text, low, high, what))
        return value

    return parse
