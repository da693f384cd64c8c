"""The solver for a bake, from the model's cache, with errors a user can act on."""

from __future__ import annotations

from .options import BakeError

import threading

__all__ = ["get_solver", "solve", "clear_solver_cache", "LazySolver", "preload_solver", "solver_loading"]

#: The background load started by :func:`preload_solver`: its thread and what it was asked for.
_PRELOAD = {"thread": None, "args": None}


def get_solver(device: str = "auto", weights=None, precision: str = "auto"):
    """The cached :class:`..model.inference.Solver` for ``device`` (``auto``, ``cpu``, ``cuda``) and ``precision``.

    Raises
    ------
    BakeError
        PyTorch does not import, the device is not available, or the weights
        are missing or do not load.
    """
    from .. import deps
    from .. import device as _device

    _wait_for_preload()
    from ..model import inference
    from ..model.cache import cached_solver, loaded_solver
    try:
        resolved = _device.resolve_device(device)
    except ValueError as ex:
        raise BakeError(str(ex)) from None
    solver = loaded_solver(resolved, weights, precision)
    if solver is not None:   # (a Live Solve tick: no look at the installed packages)
        return solver
    # (torch is imported where a solve needs it: CUDA, a long clip; a short CPU clip runs in numpy)
    if deps.torch_state()[0] in ("missing", "broken"):
        raise BakeError(deps.status_line() + "; install it from the add-on preferences (Install PyTorch)")
    try:
        return cached_solver(resolved, weights, precision)
    except inference.WeightsError as ex:
        raise BakeError(f"cannot load the network weights: {ex}") from None


def solve(solver, *args, **kwargs):
    """``solver.solve(...)``; torch failing to import where the solve needs it (CUDA, a long clip) is a
    :class:`.options.BakeError` that says so and offers the reinstall."""
    import sys

    try:
        return solver.solve(*args, **kwargs)
    except (ImportError, OSError) as ex:
        if sys.modules.get("torch") is not None:   # (torch imported: not its failure)
            raise
        from .. import deps

        deps.note_torch_import(ex)
        raise BakeError(deps.status_line() + "; install it from the add-on preferences (Install PyTorch)") from None


def preload_solver(device: str = "auto", weights=None, precision: str = "auto") -> bool:
    """Load the solver of :func:`get_solver` in a background thread; returns at once.

    Reading the weights and the first solve's set-up take a fraction of a second: started
    when the add-on is enabled or effectors are added, the first Solve Frame
    does not wait for them. A later :func:`get_solver` waits for this load
    instead of starting a second one; a failure is reported by that call.
    Returns ``False`` when a load is already under way.
    """
    if solver_loading():
        return False

    def work():
        try:
            solver = get_solver(device, weights, precision)
            solver.warm_up()
        except Exception:  # get_solver on the caller's side reports it
            pass

    thread = threading.Thread(target=work, name="neural_ik_preload", daemon=True)
    _PRELOAD.update(thread=thread, args=(device, weights, precision))
    thread.start()
    return True


def solver_loading() -> bool:
    """Whether :func:`preload_solver`'s background load is still under way."""
    thread = _PRELOAD["thread"]
    return thread is not None and thread.is_alive()


def _wait_for_preload():
    thread = _PRELOAD["thread"]
    if thread is not None and thread is not threading.current_thread():
        thread.join()


class LazySolver:
    """The solver of :func:`get_solver`, loaded when a bake first needs the network.

    A clip whose source skeleton gives every rotation (BVH, FBX, an
    armature) is baked without the network, and a batch of such clips never
    imports torch (its import is most of a short batch's time). What can be checked without
    torch is checked at once: the device setting's spelling and the weights
    file's presence.

    Parameters
    ----------
    device : str
        ``auto``, ``cpu`` or ``cuda``.
    weights : str, optional
        A weights file (default: the shipped one).
    on_error : callable, optional
        ``on_error(BakeError) -> Exception``: what to raise instead when the
        solver does not load (the CLI's own error type).
    precision : str
        ``auto``, ``float32`` or ``bfloat16`` (:class:`..model.inference.Solver`'s).

    Raises
    ------
    BakeError
        An unknown device or precision, or a missing weights file.
    """

    def __init__(self, device: str = "auto", weights=None, on_error=None, precision: str = "auto"):
        import os

        from .. import device as _device

        try:
            _device.check_device_choice(device)
            self.precision = _device.check_precision_choice(precision)
        except ValueError as ex:
            raise BakeError(str(ex)) from None
        if weights is not None and not os.path.isfile(weights):
            raise BakeError(f"cannot load the network weights: Neural IK weights not found: {weights}")
        self.device = device
        self.weights = weights
        self.on_error = on_error
        self._solver = None

    def load(self):
        """The loaded solver (:func:`get_solver`); a failure's message starts "cannot load"."""
        if self._solver is None:
            try:
                self._solver = get_solver(self.device, self.weights, self.precision)
            except (BakeError, FileNotFoundError, OSError, RuntimeError, ValueError) as ex:
                text = " ".join(str(ex).split())
                err = BakeError(text if text.startswith("cannot load") else "cannot load the network: " + text)
                raise (err if self.on_error is None else self.on_error(err)) from None
        return self._solver

    def solve(self, *args, **kwargs):
        """:meth:`..model.inference.Solver.solve` of the loaded solver (:func:`solve`)."""
        return solve(self.load(), *args, **kwargs)


def clear_solver_cache():
    """Forget cached solvers (frees their memory)."""
    from ..model.cache import clear_solver_cache as _clear

    _clear()
