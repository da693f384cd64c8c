"""The solver for a bake, from the model's cache, with errors a user can act on."""

from __future__ import annotations

from .options import BakeError

__all__ = ["get_solver", "clear_solver_cache"]


def get_solver(device: str = "auto", weights=None):
    """The cached :class:`..model.inference.Solver` for ``device`` (``auto``, ``cpu``, ``cuda``).

    Raises
    ------
    BakeError
        PyTorch does not import, the device is not available, or the weights
        are missing or do not load.
    """
    from .. import deps
    from .. import device as _device

    if deps.import_torch() is None:  # torch found at registration but missing or broken (a shared library)
        raise BakeError(deps.status_line() + "; install it from the add-on preferences (Install PyTorch)")
    from ..model import inference
    from ..model.cache import cached_solver
    try:
        resolved = _device.resolve_device(device)
    except ValueError as ex:
        raise BakeError(str(ex)) from None
    try:
        return cached_solver(resolved, weights)
    except inference.WeightsError as ex:
        raise BakeError(f"cannot load the network weights: {ex}") from None


def clear_solver_cache():
    """Forget cached solvers (frees their memory)."""
    from ..model.cache import clear_solver_cache as _clear

    _clear()
