"""Loading a bake TARGET into the current Blender session.

A target is a ``.blend`` file (its scene becomes the current file, so
``--out`` saves the target scene plus the new action), an ``.fbx``,
``.glb``/``.gltf`` or ``.bvh`` file imported with Blender's own importers
into an empty scene (a BVH's animation is removed: its skeleton is used in
its rest pose), or a built-in rig (``rigify``: the human meta-rig of
Blender's bundled Rigify add-on).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .common import CliError, UsageError

__all__ = ["BUILTIN_TARGETS", "TARGET_EXTENSIONS", "Target", "check_target", "load_target", "new_scene",
           "target_label"]

#: Built-in targets: name -> description.
BUILTIN_TARGETS = {
    "rigify": "Blender's human meta-rig (Rigify add-on, bundled with Blender): 'metarig'",
}
#: Target file types.
TARGET_EXTENSIONS = (".blend", ".fbx", ".glb", ".gltf", ".bvh")


@dataclass
class Target:
    """A loaded target.

    Attributes
    ----------
    obj : bpy.types.Object
        The armature to bake onto.
    spec : str
        What was asked for (path or built-in name).
    kind : str
        ``"blend"``, ``"fbx"``, ``"gltf"``, ``"bvh"`` or ``"rigify"``.
    """

    obj: object
    spec: str
    kind: str


def _open_blend():
    """Path of the ``.blend`` Blender has open (``blender -b scene.blend -c ...``), else ``None``."""
    try:
        import bpy
    except ImportError:
        return None
    return bpy.data.filepath or None


def target_label(spec):
    """Name of a target for reports (absolute path of a file, or the built-in name)."""
    if spec is None:
        return _open_blend() or "(open file)"
    if spec.lower() in BUILTIN_TARGETS:
        return spec.lower()
    return os.path.abspath(spec)


def check_target(spec):
    """Validate a TARGET argument without loading it.

    Raises
    ------
    UsageError
        Unknown built-in name, unknown file type or missing file (exit code 2).
    """
    if spec is None:
        if _open_blend() is None:
            raise UsageError("--target is required (or start Blender with a .blend: blender -b scene.blend -c "
                             "neural_ik ...)")
        return
    if spec.lower() in BUILTIN_TARGETS:
        return
    ext = os.path.splitext(spec)[1].lower()
    if ext not in TARGET_EXTENSIONS:
        raise UsageError("--target {}: not a built-in rig ({}) nor a {} file".format(
            spec, ", ".join(BUILTIN_TARGETS), "/".join(TARGET_EXTENSIONS)))
    if not os.path.isfile(spec):
        raise UsageError("--target {}: no such file".format(spec))


def new_scene():
    """Replace the current file with an empty factory scene."""
    import bpy

    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)


def _quiet_call(func, *args, _stderr=False, **kwargs):
    """Call an importer with its console chatter on stdout (and optionally stderr) silenced.

    stdout may carry the report (``--report -``); Blender's C code prints to
    the file descriptors directly, so they are pointed at ``/dev/null``
    meanwhile. Operator errors still arrive as ``RuntimeError``.
    """
    import contextlib
    import io
    import sys

    streams = [sys.stdout] + ([sys.stderr] if _stderr else [])
    fds = []
    for stream in streams:
        try:
            stream.flush()
            fds.append(stream.fileno())
        except (AttributeError, OSError, ValueError):
            pass
    saved = [os.dup(fd) for fd in fds]
    try:
        sink = os.open(os.devnull, os.O_WRONLY)
        for fd in fds:
            os.dup2(sink, fd)
        os.close(sink)
        with contextlib.redirect_stdout(io.StringIO()):
            return func(*args, **kwargs)
    finally:
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, copy in zip(fds, saved):
            os.dup2(copy, fd)
            os.close(copy)


def quiet(func, *args, **kwargs):
    """Run a Blender operator or function with its stdout chatter silenced (``_stderr=True``: stderr too)."""
    return _quiet_call(func, *args, **kwargs)


def _pick_armature(objects, spec, armature):
    arms = [o for o in objects if o.type == "ARMATURE"]
    if armature is not None:
        for o in arms:
            if o.name == armature:
                return o
        names = ", ".join(sorted(o.name for o in arms)) or "none"
        raise UsageError("--target {}: no armature named {!r} (armatures: {})".format(spec, armature, names))
    if not arms:
        raise CliError("--target {}: holds no armature".format(spec), 2)
    if len(arms) > 1:
        raise UsageError("--target {}: holds {} armatures ({}); pick one with --armature NAME".format(
            spec, len(arms), ", ".join(sorted(o.name for o in arms))))
    return arms[0]


def _rest_pose(obj):
    """Drop an imported armature's animation and reset its pose (rest pose)."""
    import bpy

    ad = obj.animation_data
    if ad is not None and ad.action is not None:
        action = ad.action
        ad.action = None
        if action.users == 0:
            bpy.data.actions.remove(action)
    for pb in obj.pose.bones:
        pb.location = (0.0, 0.0, 0.0)
        pb.rotation_quaternion = (1.0, 0.0, 0.0, 0.0)
        pb.rotation_euler = (0.0, 0.0, 0.0)
        pb.scale = (1.0, 1.0, 1.0)


def _select_only(obj):
    import bpy

    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def load_target(spec, armature=None):
    """Load TARGET into the current session (replacing the current file).

    Parameters
    ----------
    spec : str
        ``rigify`` or a ``.blend``/``.fbx``/``.glb``/``.gltf``/``.bvh`` path.
    armature : str, optional
        Armature object name when the target holds several.

    Returns
    -------
    Target

    Raises
    ------
    CliError
        The file cannot be loaded or holds no (single) armature.
    """
    import bpy

    check_target(spec)
    if spec is None:  # the file Blender was started with
        obj = _pick_armature(list(bpy.context.scene.objects), _open_blend(), armature)
        _select_only(obj)
        return Target(obj, _open_blend(), "blend")
    key = spec.lower()
    if key == "rigify":
        import addon_utils

        new_scene()
        quiet(addon_utils.enable, "rigify", default_set=True)
        if not hasattr(bpy.ops.object, "armature_human_metarig_add"):
            raise CliError("--target rigify: Blender's Rigify add-on is not available")
        quiet(bpy.ops.object.armature_human_metarig_add)
        obj = bpy.context.active_object
        if armature is not None and armature != obj.name:
            raise UsageError("--target rigify: no armature named {!r} (armatures: {})".format(armature, obj.name))
        _select_only(obj)
        return Target(obj, "rigify", "rigify")

    path = os.path.abspath(spec)
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".blend":
            quiet(bpy.ops.wm.open_mainfile, filepath=path, load_ui=False)
            objects = list(bpy.context.scene.objects)
            kind = "blend"
        else:
            new_scene()
            before = set(bpy.data.objects)
            if ext == ".fbx":
                quiet(bpy.ops.import_scene.fbx, filepath=path)
                kind = "fbx"
            elif ext in (".glb", ".gltf"):
                quiet(bpy.ops.import_scene.gltf, filepath=path)
                kind = "gltf"
            else:
                quiet(bpy.ops.import_anim.bvh, filepath=path, update_scene_fps=False,
                      update_scene_duration=False)
                kind = "bvh"
            objects = [o for o in bpy.data.objects if o not in before]
    except RuntimeError as ex:
        message = " ".join(str(ex).replace("Error:", "").split())
        raise CliError("--target {}: cannot be loaded ({})".format(spec, message[:300])) from None
    obj = _pick_armature(objects, spec, armature)
    if kind == "bvh":
        _rest_pose(obj)
    if kind != "blend":
        bpy.context.scene.frame_set(bpy.context.scene.frame_start)
    _select_only(obj)
    return Target(obj, path, kind)
