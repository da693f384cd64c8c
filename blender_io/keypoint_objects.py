"""Animated keypoint objects: one empty per source joint under one root empty.

An imported keypoint clip becomes a root empty (holding the clip's layout,
frame rate and source path as custom properties) with one child empty per
joint, all in a new collection. Each joint empty gets its own new action with
three location fcurves written by ``foreach_set``. The solver reads the
keypoints back from these empties, so edits the animator makes to them are
respected.
"""

from __future__ import annotations

import bpy
import numpy as np

from .actions import ActionWriter, action_fcurves

__all__ = [
    "ROOT_TAG",
    "create_keypoint_object",
    "read_keypoint_object",
    "read_keypoint_pose",
    "is_keypoint_root",
    "keypoint_roots",
]

#: Custom property that marks a keypoint root empty.
ROOT_TAG = "neural_ik_keypoints"
_JOINT_TAG = "neural_ik_joint"
#: Custom property on a joint empty: scene-frame runs [first, last, ...] without a source point.
_MISSING_TAG = "neural_ik_missing"


def is_keypoint_root(obj) -> bool:
    """True for a root empty made by :func:`create_keypoint_object`."""
    return obj is not None and obj.type == "EMPTY" and bool(obj.get(ROOT_TAG, False))


def keypoint_roots(scene=None):
    """All keypoint roots in ``scene`` (default: every object in the file)."""
    objects = scene.objects if scene is not None else bpy.data.objects
    return [o for o in objects if is_keypoint_root(o)]


def _joint_children(root):
    children = [c for c in root.children if _JOINT_TAG in c]
    order = {name: i for i, name in enumerate(root.get("joint_names", []))}
    children.sort(key=lambda c: order.get(c[_JOINT_TAG], 1 << 30))
    return children


def create_keypoint_object(
    clip,
    *,
    name: str,
    frame_start: int = 1,
    collection=None,
    empty_size: float = 0.03,
    progress=None,
):
    """Create and key the empties for a keypoint clip.

    Parameters
    ----------
    clip : readers.KeypointClip
        ``positions`` (T, J, 3) metres Z up, ``joint_names``, ``fps``,
        ``layout`` and ``source``.
    name : str
        Base name of the collection and the root empty.
    frame_start : int
        Scene frame of the clip's first sample.
    collection : bpy.types.Collection, optional
        Parent collection for the new collection (default: the scene's).
    progress : callable, optional
        ``progress(done, total)`` per joint written.

    Returns
    -------
    bpy.types.Object
        The root empty.
    """
    positions = np.asarray(clip.positions, dtype=np.float64)
    n_frames, n_joints, _ = positions.shape
    frames = np.arange(n_frames, dtype=np.float64) + frame_start
    parent_coll = collection or bpy.context.scene.collection
    coll = bpy.data.collections.new(name)
    parent_coll.children.link(coll)

    root = bpy.data.objects.new(name, None)
    root.empty_display_type = "ARROWS"
    root.empty_display_size = 0.2
    root[ROOT_TAG] = True
    root["layout"] = clip.layout or ""
    root["fps"] = float(clip.fps)
    root["source"] = str(getattr(clip, "source", "") or "")
    root["frame_start"] = int(frame_start)
    root["frame_count"] = int(n_frames)
    root["joint_names"] = list(clip.joint_names)
    coll.objects.link(root)

    for j, joint in enumerate(clip.joint_names):
        empty = bpy.data.objects.new(f"{name}:{joint}", None)
        empty.empty_display_type = "SPHERE"
        empty.empty_display_size = empty_size
        empty[_JOINT_TAG] = joint
        empty.parent = root
        coll.objects.link(empty)
        track = positions[:, j, :]
        finite = np.isfinite(track).all(axis=1)
        runs = _missing_runs(finite, frame_start)
        if runs:
            empty[_MISSING_TAG] = runs
        if finite.any():
            empty.location = track[np.argmax(finite)]
            writer = ActionWriter(empty, f"{name}:{joint}")
            writer.add_vector("location", frames[finite], track[finite], group=joint)
            writer.finish()
        else:
            empty.hide_viewport = True
        if progress is not None:
            progress(j + 1, n_joints)
    return root


def _missing_runs(finite, frame_start):
    """Scene-frame runs ``[first, last]`` where a joint has no point (flat list of pairs)."""
    missing = np.flatnonzero(~finite)
    if missing.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(missing) > 1)
    starts = np.concatenate([missing[:1], missing[breaks + 1]])
    ends = np.concatenate([missing[breaks], missing[-1:]])
    return [int(v) + int(frame_start) for pair in zip(starts, ends) for v in pair]


def _fcurve_keys(fc):
    """Keyframe coordinates of ``fc`` as (K, 2) float64 (one ``foreach_get``)."""
    n = len(fc.keyframe_points)
    co = np.empty(n * 2, dtype=np.float32)
    fc.keyframe_points.foreach_get("co", co)
    return co.reshape(n, 2).astype(np.float64)


def _missing_mask(child, frames, keys_by_index):
    """True where the clip had no point and the animator has not keyed one since.

    The fcurves interpolate across a gap (and hold their value before the first
    key), which would invent points the source never had; frames inside a
    stored missing run stay missing unless a key now sits on them.
    """
    missing = np.zeros(len(frames), dtype=bool)
    runs = list(child.get(_MISSING_TAG, []))
    if not runs:
        return missing
    keyed = np.unique(np.concatenate([np.round(co[:, 0]) for co in keys_by_index.values()] or [[]]))
    for first, last in zip(runs[0::2], runs[1::2]):
        missing |= (frames >= first) & (frames <= last)
    if keyed.size:
        missing &= ~np.isin(np.round(frames), keyed)
    return missing


def _fcurve_samples(fcurves_by_index, keys_by_index, frames, skip):
    """Location (T, 3) over ``frames``: key values where a key sits on the frame,
    ``FCurve.evaluate`` only on the other frames that are not ``skip``ped."""
    out = np.full((len(frames), 3), np.nan)
    for axis in range(3):
        fc = fcurves_by_index.get(axis)
        if fc is None:
            continue
        co = keys_by_index[axis]
        hit = np.zeros(len(frames), dtype=bool)
        if len(co) and np.all(np.diff(co[:, 0]) > 0):
            idx = np.minimum(np.searchsorted(co[:, 0], frames), len(co) - 1)
            hit = co[idx, 0] == frames
            out[hit, axis] = co[idx[hit], 1]
        rest = np.flatnonzero(~hit & ~skip)
        if rest.size:  # keys were edited or thinned: sample the curve in between
            out[rest, axis] = [fc.evaluate(f) for f in frames[rest]]
    return out


def read_keypoint_object(root, frames=None):
    """Read a keypoint object's joint positions over frames.

    Parameters
    ----------
    root : bpy.types.Object
        A keypoint root (see :func:`is_keypoint_root`).
    frames : array_like of float, optional
        Scene frames to read; default: the clip's own frame range.

    Returns
    -------
    positions : ndarray, shape (T, J, 3)
        World positions (metres), NaN where a joint has no keys.
    joint_names : list of str
    fps : float
    layout : str
    """
    if frames is None:
        start = int(root.get("frame_start", 1))
        frames = np.arange(start, start + int(root.get("frame_count", 1)), dtype=np.float64)
    frames = np.asarray(frames, dtype=np.float64)
    children = _joint_children(root)
    names = [c[_JOINT_TAG] for c in children]
    local = np.full((len(frames), len(children), 3), np.nan)
    for j, child in enumerate(children):
        ad = child.animation_data
        if ad is None or ad.action is None:
            if not child.hide_viewport:
                local[:, j] = np.asarray(child.location)
            continue
        curves = {fc.array_index: fc for fc in action_fcurves(ad.action, child) if fc.data_path == "location"}
        keys = {axis: _fcurve_keys(fc) for axis, fc in curves.items()}
        missing = _missing_mask(child, frames, keys)
        local[:, j] = _fcurve_samples(curves, keys, frames, missing)
        local[missing, j] = np.nan
    # children are parented with an identity parent inverse: world = root @ local
    m = np.array(root.matrix_world)
    world = local @ m[:3, :3].T + m[:3, 3]
    return world, names, float(root.get("fps", 30.0)), str(root.get("layout", ""))


def read_keypoint_pose(root):
    """Current world positions of the joint empties, shape (1, J, 3), plus names.

    Reads the evaluated ``matrix_world`` of each empty: what the animator sees
    in the viewport right now, including unkeyed drags.
    """
    children = _joint_children(root)
    pos = np.array([np.array(c.matrix_world.translation) for c in children], dtype=np.float64)
    for j, c in enumerate(children):
        if c.hide_viewport and (c.animation_data is None or c.animation_data.action is None):
            pos[j] = np.nan
    return pos[None], [c[_JOINT_TAG] for c in children]
