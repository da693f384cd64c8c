"""Exporting a baked armature: BVH with numpy, FBX and glTF with Blender's exporters.

``.bvh`` is written by :func:`write_armature_bvh` (numpy, no loop over
frames): the same file Blender's exporter (``export_anim.bvh`` with
``rotate_mode="NATIVE"``, ``root_transform_only=False``, scale 1) writes,
i.e. the same hierarchy (bones in the armature's order, a ``__0`` root above
several root bones), joint names, offsets (head minus the parent's head,
armature space), End Sites (tail minus head of leaf bones), channels (six on
root and unconnected bones, three rotations on connected ones, in each
bone's Euler order, ``XYZ`` for quaternion and axis-angle bones) and
values (degrees, Eulers kept continuous from frame to frame), only the
number formatting differs (fields padded with spaces). The values come from
the active action's fcurves (read with ``foreach_get``) and the pose
bones' current values for channels without keys, composed with numpy
with numpy (each bone's channels are its own pose values seen in the
armature's axes, no forward kinematics needed), in chunks of
:data:`BVH_CHUNK_FRAMES` frames, so memory does not grow with the clip.
Where that evaluation would not match Blender's (constraints, drivers, NLA
strips, pose scale, non-default inheritance, fcurves without a key on every
exported frame or with modifiers), Blender's own exporter writes the file
instead; :func:`export_armature` returns which writer was used.

``.fbx`` (``export_scene.fbx``) and ``.glb``/``.gltf`` (``export_scene.gltf``)
go through Blender's exporters. The exported skeleton keeps the target's
bone names and rest pose: only the armature is exported, with the baked
action over the baked frame range. Files are written to a temporary name and
renamed when complete (:func:`.outputs.atomic_output`).

Axes: the BVH is written in Blender's own axes (Z up, armature space), as
Blender's exporter does; the FBX and glTF exporters convert to Y up as their
formats expect.
"""

from __future__ import annotations

import contextlib
import os
import re

import numpy as np

from ..errors import SettingError, UserError, setting, template_of
from ..outputs import atomic_output
from .bvh_writer import (BVH_CHUNK_FRAMES, PoseChannels, bvh_hierarchy, bvh_motion_chunks, read_pose_channels,
                         write_armature_bvh)

__all__ = ["EXPORT_EXTENSIONS", "BVH_CHUNK_FRAMES", "PoseChannels", "check_export_path", "export_armature",
           "bvh_hierarchy", "bvh_motion_chunks", "write_armature_bvh", "write_keys_bvh", "read_pose_channels",
           "save_blend"]

#: File types ``--export`` writes.
EXPORT_EXTENSIONS = (".bvh", ".fbx", ".glb", ".gltf")
def check_export_path(path, name="export"):
    """Validate an export path's extension (exit code 2 when unknown)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in EXPORT_EXTENSIONS:
        raise SettingError("{}: unknown export type {!r}; use {}".format(
            setting(name, path), ext or "(none)", ", ".join(EXPORT_EXTENSIONS)))
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise SettingError("{}: {} is not a folder".format(setting(name, path), folder))


# ---------------------------------------------------------------------------
# numpy BVH (no bpy below this line until read_pose_channels)


# ---------------------------------------------------------------------------
# Blender side


def _select_only(obj):
    import bpy

    view_layer = bpy.context.view_layer
    for o in view_layer.objects:
        if o.select_get():
            o.select_set(False)
    obj.hide_set(False)
    obj.select_set(True)
    view_layer.objects.active = obj


def _write(obj, tmp, ext, frame_start, frame_end, bvh_writer="numpy"):
    """Write one export; returns the writer used (``"numpy"`` or ``"blender"``, plus the reason)."""
    import bpy

    from .calls import quiet

    scene = bpy.context.scene
    if ext == ".bvh":
        reason = "asked for"
        if bvh_writer == "numpy":
            pose = read_pose_channels(obj, frame_start, frame_end)
            if not isinstance(pose, str):
                write_armature_bvh(tmp, pose)
                return "numpy"
            reason = pose
        quiet(bpy.ops.export_anim.bvh, filepath=tmp, check_existing=False, frame_start=frame_start,
              frame_end=frame_end, global_scale=1.0, rotate_mode="NATIVE", root_transform_only=False)
        return "blender ({})".format(reason)
    saved = (scene.frame_start, scene.frame_end)
    scene.frame_start, scene.frame_end = frame_start, frame_end
    try:
        if ext == ".fbx":
            quiet(bpy.ops.export_scene.fbx, filepath=tmp, check_existing=False, use_selection=True,
                  object_types={"ARMATURE"}, add_leaf_bones=False, bake_anim=True,
                  bake_anim_use_all_actions=False, bake_anim_use_nla_strips=False,
                  bake_anim_force_startend_keying=True, bake_anim_simplify_factor=0.0)
        else:
            with gltf_format(ext) as export_format:
                quiet(bpy.ops.export_scene.gltf, filepath=tmp, check_existing=False, use_selection=True,
                      export_format=export_format, export_animations=True,
                      export_animation_mode="ACTIVE_ACTIONS", export_force_sampling=True,
                      export_optimize_animation_size=False, export_frame_range=True)
    finally:
        scene.frame_start, scene.frame_end = saved
    return "blender"


def _gltf_format_items():
    """Identifiers the glTF exporter's ``export_format`` accepts now (its items depend on a preference)."""
    import bpy

    try:
        bpy.ops.export_scene.gltf(export_format="?")
    except TypeError as ex:  # "enum "..." not found in ('GLB', 'GLTF_SEPARATE')": the accepted items
        text = str(ex)
        return set(re.findall(r"'([A-Z_]+)'", text[text.rfind("("):]))
    except Exception:
        pass
    return set()


@contextlib.contextmanager
def gltf_format(ext):
    """The ``export_format`` writing one self-contained file for ``ext`` (``.glb`` or ``.gltf``).

    A single ``.gltf`` is ``GLTF_EMBEDDED``, which Blender 4.2-5.0 offer only
    while the glTF add-on's "allow embedded format" preference is on: it is
    turned on for the export and restored after (``GLTF_SEPARATE`` would
    leave a ``.bin`` named after the temporary file).
    """
    import bpy

    if ext == ".glb":
        yield "GLB"
        return
    addon = bpy.context.preferences.addons.get("io_scene_gltf2")
    prefs = getattr(addon, "preferences", None)
    saved = getattr(prefs, "allow_embedded_format", None)
    try:
        if saved is False:
            prefs.allow_embedded_format = True
        if "GLTF_EMBEDDED" not in _gltf_format_items():
            raise UserError("the glTF exporter of Blender {} cannot write a single .gltf file (no embedded "
                           "format); export .glb instead".format(bpy.app.version_string))
        yield "GLTF_EMBEDDED"
    finally:
        if saved is False:
            prefs.allow_embedded_format = False


def export_armature(obj, path, frame_start, frame_end, *, bvh_writer="numpy"):
    """Export ``obj`` with its active action over ``frame_start..frame_end`` (inclusive).

    Parameters
    ----------
    obj : bpy.types.Object
        The baked armature.
    path : str
        ``.bvh``, ``.fbx``, ``.glb`` or ``.gltf``; written atomically.
    frame_start, frame_end : int
        Scene frames.
    bvh_writer : {"numpy", "blender"}
        ``"blender"`` forces Blender's BVH exporter (for comparisons); the
        numpy writer falls back to it by itself where it would differ.

    Returns
    -------
    str
        The writer used: ``"numpy"``, or ``"blender"`` (for BVH with the
        reason in parentheses).

    Raises
    ------
    UserError
        The exporter failed (the message names the file).
    """
    ext = os.path.splitext(path)[1].lower()
    check_export_path(path)
    if bvh_writer not in ("numpy", "blender"):
        raise ValueError("bvh_writer must be 'numpy' or 'blender', got {!r}".format(bvh_writer))
    _select_only(obj)
    try:
        with atomic_output(path) as tmp:
            return _write(obj, tmp, ext, int(frame_start), int(frame_end), bvh_writer)
    except (RuntimeError, OSError, TypeError) as ex:  # (TypeError: an operator's argument this Blender refuses)
        message = " ".join(str(ex).split())  # a RuntimeError holds the cause alone (targets.quiet)
        raise UserError("{}: export failed ({})".format(path, message)) from None
    except UserError as ex:
        raise UserError("{}: export failed ({})".format(path, template_of(ex))) from None


def save_blend(path):
    """Save the current file as ``path`` (a copy; written atomically).

    Parameters
    ----------
    path : str
        ``.blend`` file.

    Raises
    ------
    UserError
    """
    import bpy

    from .calls import quiet

    if not path.lower().endswith(".blend"):
        raise SettingError("{}: must be a .blend file".format(setting("out", path)))
    # unassigned baked actions must survive the save
    for action in bpy.data.actions:
        if action.get("neural_ik_source") is not None and not action.use_fake_user:
            action.use_fake_user = True
    try:
        with atomic_output(path) as tmp:
            quiet(bpy.ops.wm.save_as_mainfile, filepath=tmp, copy=True, check_existing=False)
            check_saved_blend(tmp, path)  # Blender does not notice a short write (full disk)
    except RuntimeError as ex:
        message = str(ex)  # the cause alone (targets.quiet)
        raise UserError("{}: cannot save ({})".format(path, message)) from None


def check_saved_blend(tmp, path):
    """Check that a ``.blend`` Blender just wrote to ``tmp`` reads back whole.

    Blender's (compressed) ``.blend`` writer does not notice a short write:
    on a full disk or past the process's file-size limit it reports
    success and leaves a truncated file. Reading the file's data-block list
    back catches that before the file replaces ``path``.

    Parameters
    ----------
    tmp : str
        The temporary file written.
    path : str
        The output it will become (for messages).

    Raises
    ------
    UserError
        The file is incomplete; the message gives the likely cause (a full
        disk, the file-size limit) when it can be told.
    """
    import errno

    import bpy

    try:
        with bpy.data.libraries.load(tmp, link=False) as (data_from, _data_to):
            list(data_from.actions)
        return
    except (OSError, RuntimeError) as ex:
        problem = " ".join(str(ex).replace(tmp, os.path.basename(path)).split())
    size = os.path.getsize(tmp) if os.path.isfile(tmp) else 0
    cause = "the written file is incomplete ({})".format(problem)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and size >= soft:
            cause = "{}: the file stops at this process's file-size limit of {} bytes".format(
                os.strerror(errno.EFBIG), soft)
    except (ImportError, OSError, ValueError):  # pragma: no cover (Windows)
        pass
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(tmp)))
        if st.f_bavail * st.f_frsize < max(size, 1 << 20):
            cause = "{}: the written file is incomplete".format(os.strerror(errno.ENOSPC))
    except (AttributeError, OSError):  # pragma: no cover
        pass
    raise UserError("{}: cannot save ({}); the previous file, if any, is unchanged".format(path, cause))


def write_keys_bvh(armature, result, path, frame_time, chunk_frames=BVH_CHUNK_FRAMES):
    """Write the BVH of a bake onto a file's armature from its keys (no ``bpy``).

    The pose channels are what Blender would hold after the bake: the keys
    (``result.keys``, float32 as in fcurves), the rest pose elsewhere (the
    imported armature's pose is cleared), each bone's rotation mode after
    the bake; written by :func:`write_armature_bvh` as in Blender.

    Parameters
    ----------
    armature : readers.bvh_armature.FileArmature
    result : blender_io.bake.BakeResult
        With ``keys`` and ``rotation_modes``.
    path : str
        ``.bvh``; written atomically.
    frame_time : float
        Seconds per frame (the scene's: :func:`.bake.scene_frame_time`).

    Raises
    ------
    UserError
        The file cannot be written (the message names it).
    """
    check_export_path(path)
    if os.path.splitext(path)[1].lower() != ".bvh":
        raise SettingError("{}: a bake without Blender writes BVH only".format(setting("export", path)))
    n = len(armature.rig.names)
    static = {"location": np.zeros((n, 3)), "rotation_quaternion": np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)),
              "rotation_euler": np.zeros((n, 3)), "rotation_axis_angle": np.tile([0.0, 0.0, 1.0, 0.0], (n, 1)),
              "scale": np.ones((n, 3))}
    pose = PoseChannels(rig=armature.rig, connected=np.asarray(armature.connected, dtype=bool),
                        rotation_modes=list(result.rotation_modes), static=static, keyed=dict(result.keys),
                        num_frames=int(result.frames), frame_time=float(frame_time))
    with atomic_output(path) as tmp:   # (an OSError becomes a UserError naming the file)
        write_armature_bvh(tmp, pose, chunk_frames)
