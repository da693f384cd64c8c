"""``.bvh`` animations from any skeleton: joint world positions become keypoints.

Uses :func:`..model.bvh.read_bvh`. The points are the world positions of
every joint origin (bone heads) plus every End Site, named
``<parent joint>_End`` (so a CMU ``Head`` End Site becomes ``Head_End`` ->
``head_top``). BVH is Y up by convention (Blender's importer converts
(x, y, z) -> (x, -z, y), as done here); units are guessed from the figure's
size (a figure over 3 units tall is in cm, etc.) unless given.

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np

from ..model.bvh import BVHError, read_bvh as _read_bvh_file
from .base import KeypointReadError, finish_clip

__all__ = ["read_bvh_keypoints"]


def read_bvh_keypoints(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5):
    """Read a BVH file as keypoints (joint origins and End Sites)."""
    try:
        bvh = _read_bvh_file(path)
    except BVHError as ex:
        raise KeypointReadError(path, f"bad BVH ({ex})") from None
    except UnicodeDecodeError:
        raise KeypointReadError(path, "not a text file (binary data where BVH was expected)") from None
    except OSError as ex:
        raise KeypointReadError(path, f"cannot read ({ex})") from None
    if bvh.num_frames == 0:
        raise KeypointReadError(path, "no frames in MOTION")
    pos = bvh.world_positions()
    names = list(bvh.names)
    if bvh.end_sites:
        ends = bvh.end_site_positions()
        taken = set(names)
        for parent, _ in bvh.end_sites:
            base = f"{bvh.names[parent]}_End"
            n, i = base, 1
            while n in taken:
                i += 1
                n = f"{base}{i}"
            taken.add(n)
            names.append(n)
        pos = np.concatenate([pos, ends], axis=1)
    file_fps = bvh.fps if bvh.fps > 0 else None
    if file_fps is not None and abs(file_fps - round(file_fps)) < 1e-4 * file_fps:
        # "Frame Time: 0.016667" means 60 fps, not 59.9988
        file_fps = float(round(file_fps))
    return finish_clip(path, pos, names, fps=fps, file_fps=file_fps, layout=layout, units=units,
                       up_axis=up_axis, file_up_axis="Y", max_gap=max_gap)
