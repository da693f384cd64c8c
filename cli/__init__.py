"""Command line interface, shared by ``blender -b -c neural_ik`` and ``./neural-ik``.

See :mod:`.parser` for how subcommands are registered.
"""

from .parser import build_parser, main

__all__ = ["build_parser", "main"]
