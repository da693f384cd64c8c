"""Neural IK: inverse kinematics for humanoid armatures solved by a PyTorch network.

Registration only, in two phases:

1. :mod:`.preferences` (compute device, dependency status, "Install PyTorch")
   and the ``neural_ik`` CLI command are always registered; without PyTorch
   the command's ``info`` says what is missing and the other subcommands
   answer with the install hint (exit 1).
2. Operators, panels and their properties are registered only when their
   dependencies (PyTorch, NumPy) are found.
"""

import importlib

#: UI packages registered in phase 2, in order; each exports ``classes`` and ``modules``.
_DEPENDENT_PACKAGES = ("operators", "panels")

_dependent = []          # imported packages whose classes are registered
_registered_classes = []  # phase-2 classes, in registration order

#: Why phase 2 is not registered ("" when it is).
missing_reason = ""


def _dependencies_error():
    """Return ``""`` when the phase-2 dependencies are there, else a short reason.

    numpy is imported (Blender ships it, so it costs nothing). torch is only
    looked up, not imported: importing it would slow every Blender start
    noticeably; the solver imports it on first use and reports a broken
    install there (:func:`.blender_io.bake.get_solver`).
    """
    try:
        importlib.import_module("numpy")
    except Exception as ex:  # a broken install may raise anything
        return "numpy does not import ({}: {})".format(type(ex).__name__, ex)
    from . import deps

    state, detail = deps.torch_state()
    if state == "missing":
        return "torch does not import (no module named 'torch')"
    if state == "broken":
        return "torch does not import ({})".format(detail)
    return ""


def register_dependent():
    """Register operators, panels and properties (phase 2).

    Returns
    -------
    bool
        ``True`` when registered (now or before), ``False`` when a dependency
        is missing; the reason is kept in :data:`missing_reason`.
    """
    global missing_reason
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
    if not bpy.app.background:   # working in the UI: the first Solve Frame should not wait
        from . import preferences
        from .blender_io import preload

        preload.start(preferences.device_choice(), defer=True)
    return True


def unregister_dependent():
    """Undo :func:`register_dependent`; safe to call when it did not run."""
    import bpy

    for package in reversed(_dependent):
        for module in reversed(package.modules):
            if hasattr(module, "unregister"):
                module.unregister()
    if _dependent:
        from .blender_io import preload

        preload.stop_timers()
    _dependent.clear()
    for cls in reversed(_registered_classes):
        bpy.utils.unregister_class(cls)
    _registered_classes.clear()


def register():
    """Blender entry point: preferences and the CLI command first, the rest when dependencies are found."""
    from . import preferences
    from .cli import blender_command
    preferences.register(register_dependent)
    blender_command.register()
    register_dependent()


def unregister():
    """Blender entry point: remove everything :func:`register` added."""
    from . import preferences
    from .cli import blender_command
    unregister_dependent()
    blender_command.unregister()
    preferences.unregister()
