"""Neural IK: inverse kinematics for humanoid armatures solved by a PyTorch network.

Registration only, in two phases:

1. :mod:`.preferences` is always registered (compute device, PyTorch status,
   "Install PyTorch").
2. Operators, panels, their properties and the ``neural_ik`` CLI command are
   registered only when their dependencies (PyTorch, NumPy) import.
"""

import importlib
import importlib.util

#: UI packages registered in phase 2, in order; each exports ``classes`` and ``modules``.
_DEPENDENT_PACKAGES = ("operators", "panels")

_dependent = []          # imported packages whose classes are registered
_registered_classes = []  # phase-2 classes, in registration order
_cli_registered = False

#: Why phase 2 is not registered ("" when it is).
missing_reason = ""


def _dependencies_error():
    """Return ``""`` when the phase-2 dependencies are there, else a short reason.

    numpy is imported (Blender ships it, so it costs nothing). torch is only
    looked up, not imported: importing it would add about 1.5 s to every
    Blender start; the solver imports it on first use and reports a broken
    install there (:func:`.blender_io.bake.get_solver`).
    """
    try:
        importlib.import_module("numpy")
    except Exception as ex:  # a broken install may raise anything
        return "numpy does not import ({}: {})".format(type(ex).__name__, ex)
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "torch does not import (no module named 'torch')"
    return ""


def register_dependent():
    """Register operators, panels, properties and the CLI command (phase 2).

    Returns
    -------
    bool
        ``True`` when registered (now or before), ``False`` when a dependency
        is missing; the reason is kept in :data:`missing_reason`.
    """
    global missing_reason, _cli_registered
    if _dependent:
        return True
    import bpy

    missing_reason = _dependencies_error()
    if missing_reason:
        print("Neural IK: " + missing_reason + "; only the preferences are available")
        return False

    for name in _DEPENDENT_PACKAGES:
        package = importlib.import_module("." + name, __name__)
        for cls in package.classes:
            bpy.utils.register_class(cls)
            _registered_classes.append(cls)
        for module in package.modules:
            if hasattr(module, "register"):
                module.register()
        _dependent.append(package)

    from .cli import blender_command
    blender_command.register()
    _cli_registered = True
    return True


def unregister_dependent():
    """Undo :func:`register_dependent`; safe to call when it did not run."""
    global _cli_registered
    import bpy

    if _cli_registered:
        from .cli import blender_command
        blender_command.unregister()
        _cli_registered = False
    for package in reversed(_dependent):
        for module in reversed(package.modules):
            if hasattr(module, "unregister"):
                module.unregister()
    _dependent.clear()
    for cls in reversed(_registered_classes):
        bpy.utils.unregister_class(cls)
    _registered_classes.clear()


def register():
    """Blender entry point: preferences first, the rest when dependencies import."""
    from . import preferences
    preferences.register()
    register_dependent()


def unregister():
    """Blender entry point: remove everything :func:`register` added."""
    from . import preferences
    unregister_dependent()
    preferences.unregister()
