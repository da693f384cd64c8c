"""FBX keypoint sources, read through Blender's own FBX importer.

The file is imported into the current scene, the world positions of every
bone head (plus the tail of every leaf bone, named ``<bone>_End`` as the BVH
reader names End Sites) are sampled over the armature's action frames with
``frame_set``, and everything the import created is deleted again. The
points then go through the readers' shared finishing step
(:func:`..readers.base.finish_clip`): layout detection from the bone names
(Mixamo, CMU, CC_Base, UE, SMPL...) or ``layout=``, units check, gap filling.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["read_fbx_keypoints"]


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


def read_fbx_keypoints(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read an FBX animation's bone positions as a keypoint clip.

    Parameters
    ----------
    path : str
    layout, units, up_axis, fps, max_gap
        As for :func:`..readers.read_keypoints`. Positions are in Blender's
        world frame after the importer's conversion (metres, Z up) unless
        overridden.

    Returns
    -------
    readers.KeypointClip

    Raises
    ------
    readers.KeypointReadError
    """
    import bpy

    from ..readers.base import KeypointReadError, finish_clip
    from .targets import quiet

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise KeypointReadError(path, "no such file")
    if os.path.getsize(path) == 0:
        raise KeypointReadError(path, "empty file")
    scene = bpy.context.scene
    before = _snapshot()
    saved_frame = scene.frame_current
    saved_fps = (scene.render.fps, scene.render.fps_base)
    try:
        try:
            quiet(bpy.ops.import_scene.fbx, filepath=os.path.abspath(path), use_anim=True)
        except RuntimeError as ex:
            message = " ".join(str(ex).replace("Error:", "").split())
            raise KeypointReadError(path, "Blender's FBX importer failed ({})".format(message[:300])) from None
        arms = [o for o in bpy.data.objects if o not in before["objects"] and o.type == "ARMATURE"]
        if not arms:
            raise KeypointReadError(path, "no armature in the FBX file")
        # the animated armature with the most bones
        arms.sort(key=lambda o: (o.animation_data is not None and o.animation_data.action is not None,
                                 len(o.data.bones)), reverse=True)
        obj = arms[0]
        action = obj.animation_data.action if obj.animation_data else None
        if action is None:
            raise KeypointReadError(path, "the FBX armature {!r} has no animation".format(obj.name))
        start, end = (int(round(v)) for v in action.frame_range)
        file_fps = scene.render.fps / scene.render.fps_base  # the importer sets the scene's rate
        bones = obj.pose.bones
        names = [b.name for b in bones]
        leaves = [i for i, b in enumerate(bones) if not b.children]
        n = len(bones)
        frames = list(range(start, end + 1))
        pos = np.empty((len(frames), n + len(leaves), 3))
        head = np.empty(n * 3, dtype=np.float32)
        tail = np.empty(n * 3, dtype=np.float32)
        for t, frame in enumerate(frames):
            scene.frame_set(frame)
            mw = np.array(obj.matrix_world, dtype=np.float64)
            bones.foreach_get("head", head)
            bones.foreach_get("tail", tail)
            pts = np.concatenate([head.reshape(n, 3), tail.reshape(n, 3)[leaves]]).astype(np.float64)
            pos[t] = pts @ mw[:3, :3].T + mw[:3, 3]
        bone_layout = _bone_layout(obj, names, leaves)
        taken = set(names)
        for i in leaves:
            base = "{}_End".format(names[i])
            name, k = base, 1
            while name in taken:
                k += 1
                name = "{}{}".format(base, k)
            taken.add(name)
            names.append(name)
    finally:
        ids = _new_ids(before)
        if ids:
            bpy.data.batch_remove(ids)
        scene.render.fps, scene.render.fps_base = saved_fps
        scene.frame_set(saved_frame)
    kwargs = dict(fps=fps, file_fps=file_fps, units=units, up_axis=up_axis,
                  file_units="m" if units is None else None, file_up_axis="Z", max_gap=max_gap, ground=ground)
    if layout is not None:
        return finish_clip(path, pos, names, layout=layout, **kwargs)
    # names first (a known layout); the armature's own automatic bone mapping when they do not
    # give the effectors on every frame
    try:
        clip = finish_clip(path, pos, names, **kwargs)
        if _has_effectors(clip):
            return clip
    except KeypointReadError:
        if not bone_layout:
            raise
    if not bone_layout:
        return clip
    clip = finish_clip(path, pos, names, layout=bone_layout, **kwargs)
    clip.warnings.append("layout from the armature's automatic bone mapping ({} joints)".format(len(bone_layout)))
    return clip


def _has_effectors(clip):
    from ..model.skeleton import KEYPOINTS, SPARSE_EFFECTORS
    from ..readers import to_canonical

    _, mask = to_canonical(clip)
    return bool(mask[:, [KEYPOINTS.index(n) for n in SPARSE_EFFECTORS]].all())


def _bone_layout(obj, names, leaves):
    """``{bone name: canonical keypoint}`` from :func:`..retarget.mapping.auto_map` on the armature."""
    try:
        from ..blender_io.rig import rig_description
        from ..retarget.mapping import auto_map

        mapping = auto_map(rig_description(obj))
    except Exception:
        return {}
    layout = {bone: joint for joint, bone in mapping.entries.items() if bone in names}
    head = mapping.entries.get("head")
    if head in names and names.index(head) in leaves:
        layout["{}_End".format(head)] = "head_top"
    return layout
