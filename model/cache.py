"""One loaded :class:`.inference.Solver` per (device, weights file), shared by every caller."""

from __future__ import annotations

__all__ = ["cached_solver", "clear_solver_cache"]

_SOLVERS: dict = {}


def cached_solver(device, weights=None):
    """The solver for a resolved ``device`` (``"cpu"``, ``"cuda"``) and weights path, loaded once.

    Raises
    ------
    inference.WeightsError
        When the weights are missing or do not load.
    """
    from .inference import Solver

    key = (str(device), None if weights is None else str(weights))
    solver = _SOLVERS.get(key)
    if solver is None:
        solver = Solver(weights=weights, device=device)
        _SOLVERS[key] = solver
    return solver


def clear_solver_cache():
    """Forget the loaded solvers (frees their memory)."""
    _SOLVERS.clear()
