"""``.bvh`` animations from any skeleton: joint positions as keypoints, plus the skeleton itself.

Uses :func:`..model.bvh.read_bvh`. The points are the world positions of
every joint origin (bone heads) plus every End Site, named
``<parent joint>_End``. Which joint is which canonical keypoint is decided
by the one automatic mapping of skeletons (:func:`..retarget.mapping.auto_map`:
hierarchy first, then names), never by a name table; ``layout=`` (a mapping
file) overrides it. The head's and toes' End Sites give ``head_top`` and
the toe tips.

The up axis comes from the motion (feet to head; Y when it is not clear),
units from the body's height (m, cm, mm, inches, CMU units), and the clip is
put on the floor unless ``ground=False``. The clip carries the source
skeleton and its motion as ``clip.source_rig`` (:mod:`.source_rig`).

No ``bpy`` here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.bvh import BVHError, read_bvh as _read_bvh_file
from .base import UNITS, finish_clip
from .clip import KeypointReadError
from .source_rig import bvh_motion, describe_mapping_problem, layout_from_mapping, source_rig_from_bvh

__all__ = ["read_bvh_keypoints"]


def read_bvh_keypoints(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True, bvh=None):
    """Read a BVH file as keypoints (joint origins and End Sites) and its source rig.

    ``bvh``: the file already parsed (:func:`..model.bvh.read_bvh`), so it is not read again.
    """
    from ..retarget.mapping import humanoid_check

    try:
        bvh = _read_bvh_file(path) if bvh is None else bvh
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
    end_of = {}
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
            end_of.setdefault(bvh.names[parent], n)
        pos = np.concatenate([pos, ends], axis=1)
    file_fps = bvh.fps if bvh.fps > 0 else None
    if file_fps is not None and abs(file_fps - round(file_fps)) < 1e-4 * file_fps:
        # "Frame Time: 0.016667" means 60 fps, not 59.9988
        file_fps = float(round(file_fps))
    # the mapping needs only names and hierarchy: map in the file's own axes and units
    draft = source_rig_from_bvh(bvh, "Z", 1.0, motion=False)
    mapping = draft.mapping
    if layout is None:
        errors = humanoid_check(mapping)
        if errors:
            raise KeypointReadError(path, describe_mapping_problem(draft.rig, mapping, errors))
        layout = layout_from_mapping(draft.rig, mapping, end_of)
    # the skeleton's motion, compact, now: the file's per-frame arrays (rotations (T, J, 3, 3),
    # translations, channels) go before the points are checked and converted (a long clip:
    # hundreds of MB less at the reader's peak)
    motion = bvh_motion(bvh)
    bvh = dataclasses.replace(bvh, rotations=None, translations=None, motion=None, _world=None)
    clip = finish_clip(path, pos, names, fps=fps, file_fps=file_fps, layout=layout, units=units,
                       up_axis=up_axis, default_up_axis="Y", max_gap=max_gap, ground=ground)
    src = source_rig_from_bvh(bvh, clip.up_axis, UNITS[clip.units], mapping=mapping, motion=motion,
                              name=str(path).replace("\\", "/").rsplit("/", 1)[-1])
    if clip.floor_shift:
        src = src.translated((0.0, 0.0, clip.floor_shift))
    clip.source_rig = src
    return clip
