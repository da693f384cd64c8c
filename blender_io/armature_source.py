"""Armature sources: FBX and glTF files through Blender's importers, ``.blend`` files, animated armatures.

The file is imported into the current scene, :func:`armature_clip` samples
the armature's bones over its action (world positions of every bone head,
plus the tail of every leaf bone, named ``<bone>_End`` as the BVH reader
names End Sites; and the bones' rest and posed matrices for the clip's
``source_rig``), and everything the import created is deleted again. The
bones are mapped onto the canonical joints by the one skeleton mapper
(:func:`..retarget.mapping.auto_map`, or ``layout=``); the points then go
through the readers' shared finishing step
(:func:`..readers.base.finish_clip`): units check, floor, gap filling.
:func:`armature_clip` also reads an armature already in the scene (the
Input panel's armature source).
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["read_armature_file", "armature_clip", "ARMATURE_SOURCE_EXTENSIONS"]


def _new_ids(before):
    import bpy

    out = []
    for name in ("objects", "armatures", "meshes", "actions", "materials", "images", "textures",
                 "collections", "cameras", "lights", "node_groups", "shape_keys"):
        coll = getattr(bpy.data, name, None)
        if coll is None:
            continue
        out.extend(i for i in coll if i not in before.get(name, ()))
    return out


def _snapshot():
    import bpy

    return {name: set(getattr(bpy.data, name)) for name in
            ("objects", "armatures", "meshes", "actions", "materials", "images", "textures",
             "collections", "cameras", "lights", "node_groups", "shape_keys") if hasattr(bpy.data, name)}


#: Files read as armature sources, by extension.
ARMATURE_SOURCE_EXTENSIONS = (".fbx", ".glb", ".gltf", ".blend")


def read_armature_file(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True,
                       armature=None):
    """Read the animated armature of an FBX, glTF or ``.blend`` file as a keypoint clip with its source rig.

    FBX and glTF go through Blender's importers; a ``.blend`` file's objects
    are appended. The animated armature with the most bones is read (or the
    one named ``armature``), by :func:`armature_clip`; everything the import
    created is removed again and the scene's frame and rate are restored.

    Parameters
    ----------
    path : str
    layout, units, up_axis, fps, max_gap, ground
        As for :func:`..readers.read_keypoints`. Positions are in Blender's
        world frame after the importer's conversion.
    armature : str, optional
        Name of the armature object to read.

    Returns
    -------
    readers.KeypointClip
        With ``source_rig`` (see :func:`armature_clip`).

    Raises
    ------
    readers.KeypointReadError
    """
    import bpy

    from ..readers.clip import KeypointReadError
    from .calls import operator_error, quiet

    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in ARMATURE_SOURCE_EXTENSIONS:
        raise KeypointReadError(path, "not an armature file ({})".format(", ".join(ARMATURE_SOURCE_EXTENSIONS)))
    if not os.path.isfile(path):
        raise KeypointReadError(path, "no such file")
    if os.path.getsize(path) == 0:
        raise KeypointReadError(path, "empty file")
    scene = bpy.context.scene
    before = _snapshot()
    saved_frame = scene.frame_current
    saved_fps = (scene.render.fps, scene.render.fps_base)
    file_fps = None
    try:
        try:
            if ext == ".fbx":
                quiet(bpy.ops.import_scene.fbx, filepath=os.path.abspath(path), use_anim=True)
                file_fps = scene.render.fps / scene.render.fps_base  # the importer sets the scene's rate
            elif ext in (".glb", ".gltf"):
                quiet(bpy.ops.import_scene.gltf, filepath=os.path.abspath(path))
            else:
                texts_before = set(bpy.data.texts.keys())
                with bpy.data.libraries.load(os.path.abspath(path), link=False) as (src, dst):
                    dst.objects = list(src.objects)
                    dst.scenes = list(src.scenes)[:1]
                # nothing appended may run Python (drivers evaluate on frame changes
                # where the user allows auto-run): mute its script drivers, unregister its texts
                from .calls import disarm_scripts
                appended = [o for o in dst.objects if o is not None]
                appended += [o.data for o in appended if o.data is not None] + [sc for sc in dst.scenes if sc]
                disarm_scripts(appended, set(bpy.data.texts.keys()) - texts_before)
                for obj in dst.objects:
                    if obj is not None and obj.type == "ARMATURE":
                        scene.collection.objects.link(obj)
                if dst.scenes and dst.scenes[0] is not None:
                    other = dst.scenes[0].render
                    file_fps = other.fps / other.fps_base
        except (RuntimeError, OSError) as ex:
            message = operator_error(ex)  # the cause alone, not cut
            raise KeypointReadError(path, "Blender could not read the file ({})".format(message)) from None
        arms = [o for o in bpy.data.objects if o not in before["objects"] and o.type == "ARMATURE"]
        if armature is not None:
            arms = [o for o in arms if o.name == armature]
            if not arms:
                raise KeypointReadError(path, "no armature named {!r}".format(armature))
        if not arms:
            raise KeypointReadError(path, "no armature in the file")
        for o in arms:
            _use_first_strip(o)
        # the animated armature with the most bones
        arms.sort(key=lambda o: (_action_of(o) is not None, len(o.data.bones)), reverse=True)
        return armature_clip(arms[0], path, layout=layout, units=units, up_axis=up_axis, fps=fps,
                             file_fps=file_fps, max_gap=max_gap, ground=ground)
    finally:
        ids = _new_ids(before)
        if ids:
            bpy.data.batch_remove(ids)
        scene.render.fps, scene.render.fps_base = saved_fps
        scene.frame_set(saved_frame)


def _use_first_strip(obj):
    """An armature whose animation sits in NLA strips only (glTF): make the first strip's action active."""
    ad = obj.animation_data
    if ad is None or ad.action is not None:
        return
    for track in ad.nla_tracks:
        for strip in track.strips:
            if strip.action is not None:
                ad.action = strip.action
                return


def _action_of(obj):
    ad = obj.animation_data
    return ad.action if ad is not None else None


def armature_clip(obj, source, *, frames=None, layout=None, units=None, up_axis=None, fps=None, file_fps=None,
                  max_gap=5, ground=True):
    """An animated armature's motion as a keypoint clip with its source rig.

    The bones' world-space rest and posed matrices are sampled (one
    ``foreach_get`` per frame) over ``frames`` (default: the action's frame
    range, else the scene's), the bone heads and leaf-bone tails
    (``<bone>_End``) become the points, and the bones are mapped onto the
    canonical joints by :func:`..retarget.mapping.auto_map` (the one mapper
    of skeletons). When the armature lacks a pelvis bone because its root
    bone became the armature object (an FBX whose skeleton root is a node,
    imported by Blender), the object itself is the pelvis: a bone named
    after it is put above the root bones, posed by the object's transform.

    Parameters
    ----------
    obj : bpy.types.Object
        An armature.
    source : str
        Name for messages (the file, or the object).
    frames : (int, int), optional
        First and last scene frame (inclusive).
    layout, units, up_axis, fps, max_gap, ground
        As for :func:`..readers.read_keypoints` (the armature's world space
        is taken as metres, Z up).
    file_fps : float, optional
        Default: the scene's rate.

    Returns
    -------
    readers.KeypointClip

    Raises
    ------
    readers.KeypointReadError
    """
    import bpy

    from ..readers.base import UNITS, finish_clip
    from ..readers.clip import KeypointReadError
    from ..readers.source_rig import (axis_matrix, describe_mapping_problem, layout_from_mapping,
                                      source_rig_from_pose)
    from ..retarget.mapping import auto_map, humanoid_check
    from ..retarget.rig import RigDescription

    scene = bpy.context.scene
    if obj is None or obj.type != "ARMATURE":
        raise KeypointReadError(source, "not an armature")
    bones = obj.data.bones
    pbones = obj.pose.bones
    names = [b.name for b in bones]
    if not names:
        raise KeypointReadError(source, "the armature {!r} has no bones".format(obj.name))
    if [b.name for b in pbones] != names:
        raise KeypointReadError(source, "pose bones out of order")
    if frames is None:
        action = _action_of(obj)
        if action is not None:
            frames = tuple(int(round(v)) for v in action.frame_range)
        elif obj.animation_data is None:
            raise KeypointReadError(source, "the armature {!r} has no animation".format(obj.name))
        else:
            frames = (scene.frame_start, scene.frame_end)
    index = {n: i for i, n in enumerate(names)}
    parents = [index[b.parent.name] if b.parent else -1 for b in bones]
    n = len(names)
    ml = np.empty(n * 16, dtype=np.float32)
    tl = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("matrix_local", ml)
    bones.foreach_get("tail_local", tl)
    ml = ml.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)
    tl = tl.reshape(n, 3).astype(np.float64)
    leaves = [i for i in range(n) if not bones[i].children]
    frame_list = list(range(int(frames[0]), int(frames[1]) + 1))
    T = len(frame_list)
    if T == 0:
        raise KeypointReadError(source, "empty frame range {}..{}".format(*frames))
    pose = np.empty((T, n, 4, 4))
    objm = np.empty((T, 4, 4))
    tails = np.empty((T, len(leaves), 3))
    buf = np.empty(n * 16, dtype=np.float32)
    tbuf = np.empty(n * 3, dtype=np.float32)
    saved = scene.frame_current
    try:
        for t, f in enumerate(frame_list):
            scene.frame_set(f)
            mw = np.array(obj.matrix_world, dtype=np.float64)
            objm[t] = mw
            pbones.foreach_get("matrix", buf)
            pbones.foreach_get("tail", tbuf)
            pose[t] = mw @ buf.reshape(n, 4, 4).transpose(0, 2, 1)
            tails[t] = tbuf.reshape(n, 3)[leaves] @ mw[:3, :3].T + mw[:3, 3]
    finally:
        scene.frame_set(saved)
    mw0 = objm[0]
    rest = mw0 @ ml
    rest_tails = tl @ mw0[:3, :3].T + mw0[:3, 3]
    rig_names, rig_parents = list(names), list(parents)
    # hierarchy first: does the armature have a pelvis, or did its root bone become the object?
    draft = RigDescription(rig_names, rig_parents, rest, rest[:, :3, 3], rest_tails)
    mapping = auto_map(draft)
    roots = [i for i in range(n) if parents[i] < 0]
    if "pelvis" not in mapping.entries and len(roots) >= 2:
        root_name = obj.name if obj.name not in index else obj.name + "_object"
        rig_names = [root_name] + names
        rig_parents = [-1] + [0 if p < 0 else p + 1 for p in parents]
        unit = objm / np.cbrt(np.abs(np.linalg.det(objm[:, :3, :3])))[:, None, None]
        unit[:, 3] = objm[:, 3]
        unit[:, :3, 3] = objm[:, :3, 3]
        rest = np.concatenate([unit[:1], rest])
        head0 = objm[0, :3, 3]
        up = np.array([0.0, 0.0, 0.1])
        rest_tails = np.concatenate([(head0 + up)[None], rest_tails])
        pose = np.concatenate([unit[:, None], pose], axis=1)
        leaves = [i + 1 for i in leaves]
        draft = RigDescription(rig_names, rig_parents, rest, rest[:, :3, 3], rest_tails)
        mapping = auto_map(draft)
        mapping.reasons["pelvis"] = "the armature object (its root bone became the object on import)"
    pos = np.concatenate([pose[..., :3, 3], tails], axis=1)
    point_names = list(rig_names)
    end_of = {}
    taken = set(point_names)
    for i in leaves:
        base = "{}_End".format(rig_names[i])
        name, k = base, 1
        while name in taken:
            k += 1
            name = "{}{}".format(base, k)
        taken.add(name)
        point_names.append(name)
        end_of[rig_names[i]] = name
    if layout is None:
        errors = humanoid_check(mapping)
        if errors:
            raise KeypointReadError(source, describe_mapping_problem(draft, mapping, errors))
        layout = layout_from_mapping(draft, mapping, end_of)
    if file_fps is None:
        file_fps = scene.render.fps / scene.render.fps_base
    clip = finish_clip(source, pos, point_names, layout=layout, fps=fps, file_fps=file_fps, units=units,
                       up_axis=up_axis, file_up_axis="Z",
                       max_gap=max_gap, ground=ground)
    # the same conversion for the skeleton: axes, units, floor
    A = np.eye(4)
    A[:3, :3] = axis_matrix(clip.up_axis) * UNITS[clip.units]
    A[2, 3] = clip.floor_shift
    rest_out = A @ rest
    tails_out = rest_tails @ A[:3, :3].T + A[:3, 3]
    clip.source_rig = source_rig_from_pose(rig_names, rig_parents, rest_out, tails_out, A @ pose,
                                           mapping=mapping, name=obj.name)
    return clip
