"""The bake pipeline, one for the UI, the CLI and the benchmarks (no ``bpy``).

- :mod:`.options`: :class:`BakeOptions`, :class:`BakeError`, :class:`BakeCancelled`;
- :mod:`.prepare`: checking, slicing, grounding and resampling the source;
- :mod:`.source`: joint rotations read from a source skeleton's motion;
- :mod:`.targets`: what the rig-space solve aims at (directions, effectors, contacts, floor);
- :mod:`.core`: :class:`RigBake`, the stages (solve, fit on the rig, figures);
- :mod:`.cache`: the shared, loaded solver.
"""

from .cache import clear_solver_cache, get_solver
from .core import BakeFigures, RigBake
from .options import BakeCancelled, BakeError, BakeOptions

__all__ = ["BakeOptions", "BakeError", "BakeCancelled", "RigBake", "BakeFigures", "get_solver",
           "clear_solver_cache"]
