"""Exporting a baked armature with Blender's own exporters.

``.bvh`` (``export_anim.bvh``), ``.fbx`` (``export_scene.fbx``) and
``.glb``/``.gltf`` (``export_scene.gltf``). The exported skeleton keeps the
target's bone names and rest pose: only the armature is exported, with the
baked action over the baked frame range. Files are written to a temporary
name and renamed when complete (:func:`.common.atomic_output`).

Axes: Blender's BVH exporter writes the armature in Blender's own axes (Z up,
armature space); the FBX and glTF exporters convert to Y up as their formats
expect.
"""

from __future__ import annotations

import os

from .common import CliError, UsageError, atomic_output

__all__ = ["EXPORT_EXTENSIONS", "check_export_path", "export_armature"]

#: File types ``--export`` writes.
EXPORT_EXTENSIONS = (".bvh", ".fbx", ".glb", ".gltf")


def check_export_path(path, flag="--export"):
    """Validate an export path's extension (exit code 2 when unknown)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in EXPORT_EXTENSIONS:
        raise UsageError("{} {}: unknown export type {!r}; use {}".format(
            flag, path, ext or "(none)", ", ".join(EXPORT_EXTENSIONS)))
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError("{} {}: {} is not a folder".format(flag, path, folder))


def _select_only(obj):
    import bpy

    view_layer = bpy.context.view_layer
    for o in view_layer.objects:
        if o.select_get():
            o.select_set(False)
    obj.hide_set(False)
    obj.select_set(True)
    view_layer.objects.active = obj


def _write(obj, tmp, ext, frame_start, frame_end):
    import bpy

    from .targets import quiet

    scene = bpy.context.scene
    if ext == ".bvh":
        quiet(bpy.ops.export_anim.bvh, filepath=tmp, check_existing=False, frame_start=frame_start,
              frame_end=frame_end, global_scale=1.0, rotate_mode="NATIVE", root_transform_only=False)
        return
    saved = (scene.frame_start, scene.frame_end)
    scene.frame_start, scene.frame_end = frame_start, frame_end
    try:
        if ext == ".fbx":
            quiet(bpy.ops.export_scene.fbx, filepath=tmp, check_existing=False, use_selection=True,
                  object_types={"ARMATURE"}, add_leaf_bones=False, bake_anim=True,
                  bake_anim_use_all_actions=False, bake_anim_use_nla_strips=False,
                  bake_anim_force_startend_keying=True, bake_anim_simplify_factor=0.0)
        else:
            quiet(bpy.ops.export_scene.gltf, filepath=tmp, check_existing=False, use_selection=True,
                  export_format="GLB" if ext == ".glb" else "GLTF_EMBEDDED", export_animations=True,
                  export_animation_mode="ACTIVE_ACTIONS", export_force_sampling=True,
                  export_optimize_animation_size=False, export_frame_range=True)
    finally:
        scene.frame_start, scene.frame_end = saved


def export_armature(obj, path, frame_start, frame_end):
    """Export ``obj`` with its active action over ``frame_start..frame_end`` (inclusive).

    Parameters
    ----------
    obj : bpy.types.Object
        The baked armature.
    path : str
        ``.bvh``, ``.fbx``, ``.glb`` or ``.gltf``; written atomically.
    frame_start, frame_end : int
        Scene frames.

    Raises
    ------
    CliError
        The exporter failed (the message names the file).
    """
    ext = os.path.splitext(path)[1].lower()
    check_export_path(path)
    _select_only(obj)
    try:
        with atomic_output(path) as tmp:
            _write(obj, tmp, ext, int(frame_start), int(frame_end))
    except RuntimeError as ex:
        message = " ".join(str(ex).replace("Error:", "").split())
        raise CliError("{}: export failed ({})".format(path, message[:300])) from None


def save_blend(path):
    """Save the current file as ``path`` (a copy; written atomically).

    Parameters
    ----------
    path : str
        ``.blend`` file.

    Raises
    ------
    CliError
    """
    import bpy

    from .targets import quiet

    if not path.lower().endswith(".blend"):
        raise UsageError("--out {}: must be a .blend file".format(path))
    # unassigned baked actions must survive the save
    for action in bpy.data.actions:
        if action.get("neural_ik_source") is not None and not action.use_fake_user:
            action.use_fake_user = True
    try:
        with atomic_output(path) as tmp:
            quiet(bpy.ops.wm.save_as_mainfile, filepath=tmp, copy=True, check_existing=False)
    except RuntimeError as ex:
        message = " ".join(str(ex).replace("Error:", "").split())
        raise CliError("{}: cannot save ({})".format(path, message[:300])) from None
