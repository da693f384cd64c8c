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
        The exit code of :func:`.parser.main`; 1 with the install hint when
        PyTorch is missing or broken (except ``info`` and ``--help``).
    """
    from .. import deps, preferences
    state, _detail = deps.torch_state()
    if state in ("missing", "broken") and argv[:1] and argv[0] not in ("info", "-h", "--help"):
        import sys
        print("{}: {}; install it in Edit > Preferences > Add-ons > Neural IK > Install PyTorch ('{} info' "
              "says what is there)".format(PROG_BLENDER, deps.status_line(), PROG_BLENDER), file=sys.stderr)
        return 1
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
