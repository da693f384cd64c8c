"""One loaded :class:`.inference.Solver` per (device, weights file), shared by every caller."""

from __future__ import annotations

__all__ = ["cached_solver", "loaded_solver", "clear_solver_cache"]

_SOLVERS: dict = {}


def _key(device, weights, precision):
    return (str(device), None if weights is None else str(weights), str(precision))


def loaded_solver(device, weights=None, precision="auto"):
    """The solver :func:`cached_solver` has already loaded for these arguments, or ``None``."""
    return _SOLVERS.get(_key(device, weights, precision))


def cached_solver(device, weights=None, precision="auto"):
    """The solver for a resolved ``device`` (``"cpu"``, ``"cuda"``), weights path and ``precision``, loaded once.

    Raises
    ------
    inference.WeightsError
        When the weights are missing or do not load.
    """
    from .inference import Solver

    key = _key(device, weights, precision)
    solver = _SOLVERS.get(key)
    if solver is None:
        solver = Solver(weights=weights, device=device, precision=precision)
        _SOLVERS[key] = solver
    return solver


def clear_solver_cache():
    """Forget the loaded solvers (frees their memory)."""
    _SOLVERS.clear()
