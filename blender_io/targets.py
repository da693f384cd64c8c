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
import sys
from dataclasses import dataclass, field

from ..errors import SettingError, UserError, message, setting
from .calls import disarm_scripts, quiet

__all__ = ["BUILTIN_TARGETS", "TARGET_EXTENSIONS", "Target", "check_target", "direct_target", "load_target",
           "new_scene", "target_label"]

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
    obj : bpy.types.Object or readers.bvh_armature.FileArmature
        The armature to bake onto (a file's armature: :func:`direct_target`).
    spec : str
        What was asked for (path or built-in name).
    kind : str
        ``"blend"``, ``"fbx"``, ``"gltf"``, ``"bvh"`` or ``"rigify"``.
    warnings : list of str
        What loading changed (scripts of a ``.blend`` target disabled).
    """

    obj: object
    spec: str
    kind: str
    warnings: list = field(default_factory=list)


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
    SettingError
        Unknown built-in name, unknown file type or missing file (exit code 2).
    """
    if spec is None:
        if _open_blend() is None:
            raise SettingError(f"{setting('target')} is required (or start Blender with a .blend: blender -b "
                               "scene.blend -c neural_ik ...)")
        return
    if spec.lower() in BUILTIN_TARGETS:
        return
    ext = os.path.splitext(spec)[1].lower()
    if ext not in TARGET_EXTENSIONS:
        raise SettingError("{}: not a built-in rig ({}) nor a {} file".format(
            setting("target", spec), ", ".join(BUILTIN_TARGETS), "/".join(TARGET_EXTENSIONS)))
    if not os.path.isfile(spec):
        raise SettingError("{}: no such file".format(setting("target", spec)))


def new_scene():
    """Replace the current file with an empty factory scene."""
    import bpy

    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)


def _pick_armature(objects, spec, armature):
    arms = [o for o in objects if o.type == "ARMATURE"]
    if armature is not None:
        for o in arms:
            if o.name == armature:
                return o
        names = ", ".join(sorted(o.name for o in arms)) or "none"
        raise SettingError("{}: no armature named {!r} (armatures: {})".format(setting("target", spec), armature, names))
    if not arms:
        raise SettingError("{}: holds no armature".format(setting("target", spec)))
    if len(arms) > 1:
        raise SettingError("{}: holds {} armatures ({}); pick one with {}".format(
            setting("target", spec), len(arms), ", ".join(sorted(o.name for o in arms)), setting("armature", "NAME")))
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


def enable_rigify():
    """Enable Blender's bundled Rigify add-on; returns ``""`` when its meta-rig operator is usable, else why not.

    ``hasattr(bpy.ops.object, name)`` is true for any name, so the operator is
    looked up in the registered operators, and the add-on's state is read
    from ``addon_utils``.
    """
    import addon_utils
    import bpy

    try:
        quiet(addon_utils.enable, "rigify", default_set=True)
    except Exception:  # addon_utils reports failures itself; the checks below say what is missing
        pass
    if not addon_utils.check("rigify")[1]:
        return "Blender's Rigify add-on is not available (it did not load in this Blender)"
    try:
        bpy.ops.object.armature_human_metarig_add.get_rna_type()
    except KeyError:
        return "Blender's Rigify add-on is loaded but has no human meta-rig operator"
    return ""


#: Blender's BVH importer axes (forward, up) for a file whose up axis is the key.
_BVH_AXES = {"Y": ("-Z", "Y"), "Z": ("Y", "Z"), "-Y": ("Z", "-Y"), "-Z": ("-Y", "-Z")}


def bvh_target_frame(path, units=None, up_axis=None, bvh=None):
    """Units and up axis of a BVH target: given, or read from its skeleton as a source's are.

    ``bvh``: the file already parsed (not read again).

    Returns
    -------
    (str, str, list of str)
        Units (a key of ``readers.base.UNITS``), up axis and a note for each
        guessed one.

    Raises
    ------
    UserError
        The file cannot be read as a BVH skeleton.
    """
    from ..readers import KeypointReadError, read_keypoints
    from ..readers.base import UNIT_NAMES
    from ..readers.bvh import read_bvh_keypoints

    if units is not None and up_axis is not None:
        return units, up_axis, []
    try:
        if bvh is not None:
            clip = read_bvh_keypoints(path, units=units, up_axis=up_axis, ground=False, bvh=bvh)
        else:
            clip = read_keypoints(path, units=units, up_axis=up_axis, ground=False)
    except KeypointReadError as ex:
        problem = str(getattr(ex, "problem", ex)).replace(str(path) + ", ", "")
        raise UserError("{}: cannot be loaded ({})".format(setting("target", path), problem)) from None
    notes = []
    if units is None:
        notes.append(message("target BVH in {} (guessed from its skeleton's height; {} to say otherwise)".format(
            UNIT_NAMES.get(clip.units, clip.units), setting("target_units"))))
    if up_axis is None and clip.up_axis != "Y":
        notes.append(message("target BVH with {} up (detected; {} to say otherwise)".format(
            clip.up_axis, setting("target_up_axis"))))
    return clip.units, clip.up_axis, notes


def blender_version():
    """``(major, minor)`` of the Blender the CLI runs on (``None``: unknown), without importing ``bpy``.

    Inside Blender or once ``bpy`` is loaded, ``bpy.app.version``; else the
    installed PyPI ``bpy`` package's version.
    """
    bpy = sys.modules.get("bpy")
    if bpy is not None:
        return tuple(int(x) for x in bpy.app.version[:2])
    # the package's ``bpy-X.Y.Z.dist-info`` folder on the path (importing importlib.metadata
    # alone is a noticeable part of a batch's start)
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("bpy-") and name.endswith(".dist-info"):
                parts = name[4:-10].split(".")
                if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                    return int(parts[0]), int(parts[1])
    try:
        from importlib.metadata import version

        major, minor = version("bpy").split(".")[:2]
        return int(major), int(minor)
    except Exception:   # not installed as a package, or an odd version string
        return None


def direct_target(spec, armature=None, *, units=None, up_axis=None):
    """A BVH target's armature built without Blender, when it can be (else ``None``).

    :func:`..readers.bvh_armature.bvh_armature` gives the armature that
    :func:`load_target` makes of the file with Blender's importer; a bake
    onto it that writes only BVH files needs no Blender scene (``batch
    --no-blend --export bvh``, ``bake --export OUT.bvh`` without ``--out``).

    Returns
    -------
    Target or None
        ``obj`` is a :class:`..readers.bvh_armature.FileArmature`; ``None``
        for another kind of target, or a BVH file the importer would build
        otherwise (see :func:`..readers.bvh_armature.bvh_armature`).

    Raises
    ------
    UserError
        The file cannot be read as a BVH skeleton, or ``armature`` is not its name.
    """
    if spec is None or os.path.splitext(spec)[1].lower() != ".bvh":
        return None
    from ..model.bvh import BVHError, read_bvh
    from ..readers.base import UNITS
    from ..readers.bvh_armature import bvh_armature

    check_target(spec)
    path = os.path.abspath(spec)
    try:
        bvh = read_bvh(path)
    except (BVHError, OSError, ValueError) as ex:
        raise UserError("{}: cannot be loaded ({})".format(setting("target", spec), ex)) from None
    units, up_axis, notes = bvh_target_frame(path, units, up_axis, bvh=bvh)
    # Blender names the armature after the file (bpy.path.display_name_from_filepath)
    name = os.path.splitext(os.path.basename(path))[0]
    arm = bvh_armature(bvh, up_axis, UNITS[units], name, blender_version=blender_version())
    if isinstance(arm, str):
        return None
    if armature is not None and armature != name:
        raise SettingError("{}: no armature named {!r} (armatures: {})".format(setting("target", spec), armature, name))
    return Target(arm, path, "bvh", notes)


def load_target(spec, armature=None, *, units=None, up_axis=None):
    """Load TARGET into the current session (replacing the current file).

    Parameters
    ----------
    spec : str
        ``rigify`` or a ``.blend``/``.fbx``/``.glb``/``.gltf``/``.bvh`` path.
    armature : str, optional
        Armature object name when the target holds several.
    units, up_axis : str, optional
        A BVH target's units and up axis (default: read from its skeleton,
        as a source's are). Its bones keep the file's units (an exported BVH
        has the target's offsets); the armature object is scaled to metres
        and stands Z up, so bakes and their figures are in metres.

    Returns
    -------
    Target

    Raises
    ------
    UserError
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
        new_scene()
        problem = enable_rigify()
        if problem:
            raise UserError(setting("target", "rigify") + ": " + problem)
        quiet(bpy.ops.object.armature_human_metarig_add)
        obj = bpy.context.active_object
        if armature is not None and armature != obj.name:
            raise SettingError("{}: no armature named {!r} (armatures: {})".format(setting("target", "rigify"), armature,
                                                                                    obj.name))
        _select_only(obj)
        return Target(obj, "rigify", "rigify")

    path = os.path.abspath(spec)
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".blend":
            # never run the file's scripts (text blocks, Python drivers), whatever the user's auto-run setting
            quiet(bpy.ops.wm.open_mainfile, filepath=path, load_ui=False, use_scripts=False)
            warnings = disarm_scripts()
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
                from ..readers.base import UNITS

                units, up_axis, notes = bvh_target_frame(path, units, up_axis)
                forward, up = _BVH_AXES[up_axis]
                quiet(bpy.ops.import_anim.bvh, filepath=path, update_scene_fps=False,
                      update_scene_duration=False, axis_forward=forward, axis_up=up, global_scale=1.0)
                kind = "bvh"
            objects = [o for o in bpy.data.objects if o not in before]
            warnings = disarm_scripts()
            if kind == "bvh":
                warnings = notes + warnings
    except RuntimeError as ex:  # quiet() leaves the cause alone in the message
        raise UserError("{}: cannot be loaded ({})".format(setting("target", spec), ex)) from None
    obj = _pick_armature(objects, spec, armature)
    if kind == "bvh":
        _rest_pose(obj)
        obj.scale = (UNITS[units],) * 3   # file units -> metres
    if kind != "blend":
        bpy.context.scene.frame_set(bpy.context.scene.frame_start)
    _select_only(obj)
    return Target(obj, path, kind, warnings)
