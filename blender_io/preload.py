"""Load the network in the background when the add-on is enabled or effectors are added.

Importing torch and reading the weights take a second or two; started early,
the first Solve Frame does not wait for them. While the load runs the
sidebar says "Loading network..." and is redrawn when it ends.
"""

import bpy

from ..pipeline.cache import preload_solver, solver_loading

__all__ = ["start", "loading", "stop_timers"]

#: How often the sidebar is checked for the end of the load (seconds).
POLL_SECONDS = 0.25


def start(device: str = "auto", defer: bool = False) -> bool:
    """Start loading the solver for ``device`` unless a load is under way; returns whether one started.

    ``defer``: start from the event loop instead of now. Importing torch in a thread changes
    ``sys.modules`` while add-ons that iterate it (Rigify) may be loading on the main thread;
    from the event loop no add-on is being enabled at Blender's start-up.
    """
    if defer:
        if not bpy.app.timers.is_registered(_start_deferred):
            _DEFERRED["device"] = device
            bpy.app.timers.register(_start_deferred, first_interval=0.0)
        return True
    started = preload_solver(device)
    if started and not bpy.app.timers.is_registered(_redraw_when_loaded):
        bpy.app.timers.register(_redraw_when_loaded, first_interval=POLL_SECONDS, persistent=True)
    return started


def stop_timers():
    """Remove this module's timers (the add-on is being disabled)."""
    for fn in (_start_deferred, _redraw_when_loaded):
        if bpy.app.timers.is_registered(fn):
            bpy.app.timers.unregister(fn)


_DEFERRED = {"device": "auto"}


def _start_deferred():
    start(_DEFERRED["device"])
    return None


def loading() -> bool:
    """Whether the background load is still under way."""
    return solver_loading()


def _redraw_when_loaded():
    if solver_loading():
        return POLL_SECONDS
    wm = getattr(bpy.context, "window_manager", None)
    for window in getattr(wm, "windows", ()):
        for area in window.screen.areas:
            if area.type == 'VIEW_3D':
                area.tag_redraw()
    return None
