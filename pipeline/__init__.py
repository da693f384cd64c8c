"""The bake pipeline, one for the UI, the CLI and the benchmarks (no ``bpy``).

- :mod:`.options`: :class:`BakeOptions`, :class:`BakeError`, :class:`BakeCancelled`;
- :mod:`.prepare`: checking, slicing, grounding and resampling the source;
- :mod:`.core`: :class:`RigBake`, the orchestrator of the stages;
- :mod:`.start`, :mod:`.fit`, :mod:`.figures`: the stages (start pose, fit on the rig, figures);
- :mod:`.paths`, :mod:`.sparse`: what differs between dense keypoints, a source's rotations and effectors;
- :mod:`.source`: joint rotations read from a source skeleton's motion;
- :mod:`.targets`: what the rig-space solve aims at (directions, effectors, contacts, floor), by family;
- :mod:`.tuning`: every tuning constant, each with its reason (measurements: ``docs/tuning.md``);
- :mod:`.plans`, :mod:`.filters`, :mod:`.memory`: the rig's plan, low-passes, memory bookkeeping;
- :mod:`.cache`: the shared, loaded solver.
"""

from .cache import clear_solver_cache, get_solver
from .core import BakeFigures, RigBake
from .options import BakeCancelled, BakeError, BakeOptions

__all__ = ["BakeOptions", "BakeError", "BakeCancelled", "RigBake", "BakeFigures", "get_solver",
           "clear_solver_cache"]
