"""Glue for ``blender --background --command neural_ik ...``."""

import bpy

from .parser import PROG_BLENDER, main

_handle = None


def execute(argv):
    """Callback given to :func:`bpy.utils.register_cli_command`.

    Parameters
    ----------
    argv : list of str
        Arguments after ``--command neural_ik``.

    Returns
    -------
    int
        The exit code of :func:`.parser.main`.
    """
    from .. import preferences
    return main(argv, prog=PROG_BLENDER, default_device=preferences.device_choice())


def register():
    """Register the ``neural_ik`` command."""
    global _handle
    _handle = bpy.utils.register_cli_command("neural_ik", execute)


def unregister():
    """Unregister the ``neural_ik`` command."""
    global _handle
    if _handle is not None:
        bpy.utils.unregister_cli_command(_handle)
        _handle = None


def is_registered():
    """Return whether the command is registered by this module."""
    return _handle is not None
