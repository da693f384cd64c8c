"""Import keypoint files as animated keypoint objects.

File > Import > "Neural IK Keypoints (.npz/.json/.csv/.trc/.c3d/.bvh/.npy/.fbx/.glb/.blend)" and the
Import button of the sidebar's Input panel run ``neural_ik.import_keypoints``:
the file is read with :func:`..readers.read_keypoints` (layout, units, up
axis and frame rate detected unless overridden), then
:func:`..blender_io.keypoint_objects.create_keypoint_object` makes one root
empty and one keyed empty per point in a new collection. The file browser's
side panel previews what was detected (layout, units, up axis, frames, fps),
read once per selected file and cached. Errors are reported and leave
nothing behind; one undo step removes the import.

``neural_ik.armature_input`` ("Armature as Input") does the same with an
animated armature already in the scene: its bones are sampled over its action
(:func:`..blender_io.armature_source.armature_clip`, mapped by the one skeleton mapper)
into a keypoint object that becomes the Input; the root empty remembers the
armature (``source_armature``).
"""

import os
import threading

import bpy
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty, StringProperty
from bpy_extras.io_utils import ImportHelper

from ..blender_io.keypoint_objects import create_keypoint_object
from ..blender_io.sources import SOURCE_EXTENSIONS
from ..pipeline.options import SOURCE_SETTINGS, UNIT_CHOICES, UP_AXIS_CHOICES
from .wording import ui_text
from .scene_frames import clip_for_scene, fit_scene_to_clip, scene_untouched

#: Files larger than this (MB) are not read for the file-browser preview.
PREVIEW_MAX_MB = 50.0
_preview_cache = {}
_preview_jobs = {}   # (file, overrides) -> the thread reading it


_layout_enum = []   # Blender needs Python to keep dynamic enum strings alive


def _layout_items(self, context):
    if not _layout_enum:
        from ..readers import LAYOUTS
        _layout_enum.append(('AUTO', "Detect", "Detect the layout from the point names"))
        _layout_enum.extend((name, _layout_label(lay), lay.description) for name, lay in LAYOUTS.items())
    return _layout_enum


def _layout_label(layout) -> str:
    """The menu's name of a layout: its description up to the first parenthesis."""
    return layout.description.split(" (")[0].strip() or layout.name


_UNIT_ITEMS = ((('AUTO', "Detect", "Detect the unit from the body's height (m, cm, mm, inches, CMU units)"),)
               + tuple((c.value, c.label, c.help) for c in UNIT_CHOICES))
_UP_ITEMS = ((('AUTO', "Detect", "Detect the up axis from the motion (feet to head)"),)
             + tuple((c.value, c.label, c.help) for c in UP_AXIS_CHOICES))
#: The import dialog's settings, declared once with the command line's source flags.
_SOURCE = {s.name: s for s in SOURCE_SETTINGS}


def _read(path, layout, units, up_axis, fps, ground=True):
    """Read the file with the one source dispatch the command line uses too."""
    from ..blender_io.sources import read_source_file

    return read_source_file(path, layout=None if layout == 'AUTO' else layout,
                            units=None if units == 'AUTO' else units, up_axis=None if up_axis == 'AUTO' else up_axis,
                            fps=fps if fps > 0 else None, ground=ground)


def preview(path, layout='AUTO', units='AUTO', up_axis='AUTO', fps=0.0, ground=True, wait=False):
    """Short description lines of a keypoint file (cached per file and overrides).

    The file is read in a background thread (the dialog's draw must not wait
    for a large file): until it is read the lines say so, and the file
    browser is redrawn when they are ready. ``wait``: read it now.

    Returns
    -------
    list of str
        Detected layout, units, up axis, frame count and rate, or the error.
    """
    from ..blender_io.sources import is_armature_file

    if not path or not os.path.isfile(path):
        return ["Select a keypoint file"]
    ext = os.path.splitext(path)[1].lower()
    if is_armature_file(path):
        return ["Armature file: read on import (its animated armature)"]
    if ext not in SOURCE_EXTENSIONS:
        return ["Not a keypoint file (" + ", ".join(SOURCE_EXTENSIONS) + ")"]
    stat = os.stat(path)
    key = (path, stat.st_mtime, stat.st_size, layout, units, up_axis, fps, ground)
    lines = _preview_cache.get(key)
    if lines is not None:
        return lines
    size = stat.st_size / 1e6
    if size > PREVIEW_MAX_MB:
        return _remember(key, [f"{size:.0f} MB: no preview (read on import)"])
    if wait:
        return _read_preview(key)
    if key not in _preview_jobs:
        job = threading.Thread(target=_read_preview, args=(key,), name="neural_ik_preview", daemon=True)
        _preview_jobs[key] = job
        job.start()
        if not bpy.app.timers.is_registered(_redraw_when_read):
            bpy.app.timers.register(_redraw_when_read, first_interval=0.1)
    return [f"Reading {os.path.basename(path)} ({size:.1f} MB)..."]


def _read_preview(key):
    from ..readers import KeypointReadError

    path, _mtime, _size, layout, units, up_axis, fps, ground = key
    try:
        clip = _read(path, layout, units, up_axis, fps, ground)
        lines = [f"Layout: {clip.layout or 'unknown'}",
                 f"Units: {clip.units}, up axis: {clip.up_axis}",
                 f"{clip.num_frames} frames at {clip.fps:g} fps ({clip.duration:.1f} s)",
                 f"{clip.num_joints} points"]
        lines += [ui_text(w)[:60] for w in clip.warnings[:3]]
    except (KeypointReadError, OSError, ValueError, RecursionError) as ex:
        lines = ["Error: " + ui_text(ex)[-120:]]
    _preview_jobs.pop(key, None)
    return _remember(key, lines)


def _remember(key, lines):
    if len(_preview_cache) > 32:
        _preview_cache.clear()
    _preview_cache[key] = lines
    return lines


def _redraw_when_read():
    if any(job.is_alive() for job in list(_preview_jobs.values())):
        return 0.1
    wm = getattr(bpy.context, "window_manager", None)
    for window in getattr(wm, "windows", ()):
        for area in window.screen.areas:
            area.tag_redraw()
    return None


class NEURAL_IK_OT_import_keypoints(bpy.types.Operator, ImportHelper):
    """Import a keypoint clip (motion capture or pose estimation) as animated empties"""

    bl_idname = "neural_ik.import_keypoints"
    bl_label = "Import Keypoints"
    bl_options = {'REGISTER', 'UNDO'}

    filename_ext = ".npz"
    filter_glob: StringProperty(default=";".join("*" + ext for ext in SOURCE_EXTENSIONS), options={'HIDDEN'})
    layout_name: EnumProperty(name=_SOURCE["layout"].label, items=_layout_items,
                              description=_SOURCE["layout"].tooltip)
    units: EnumProperty(name=_SOURCE["units"].label, items=_UNIT_ITEMS, default='AUTO',
                        description=_SOURCE["units"].tooltip)
    up_axis: EnumProperty(name=_SOURCE["up_axis"].label, items=_UP_ITEMS, default='AUTO',
                          description=_SOURCE["up_axis"].tooltip)
    fps: FloatProperty(name=_SOURCE["source_fps"].label, default=0.0, min=0.0, soft_max=240.0,
                       description=_SOURCE["source_fps"].tooltip + " (0: from the file, else 30)")
    frame_start: IntProperty(name="Frame Start", default=-1,
                             description="Scene frame of the clip's first sample (-1: the scene's start frame)")
    ground: BoolProperty(name=_SOURCE["ground"].label, default=_SOURCE["ground"].default,
                         description=_SOURCE["ground"].tooltip)
    set_scene_frames: BoolProperty(
        name="Set Scene Frames", default=True,
        description="Set the scene's frame rate to the clip's and its frame range to the clip's frames "
                    "(default: on while the scene holds no animation); off: the clip is resampled to the "
                    "scene's frame rate. Either way the empties and a bake cover the same scene frames")

    def invoke(self, context, event):
        if not self.properties.is_property_set("set_scene_frames"):
            self.set_scene_frames = scene_untouched(context.scene)
        return ImportHelper.invoke(self, context, event)

    def check(self, context):
        return True   # redraw the preview when the selection or an override changes

    def draw(self, context):
        layout = self.layout
        layout.use_property_split = True
        layout.prop(self, "layout_name")
        layout.prop(self, "units")
        layout.prop(self, "up_axis")
        layout.prop(self, "fps")
        layout.prop(self, "frame_start")
        layout.prop(self, "set_scene_frames")
        layout.prop(self, "ground")
        box = layout.box()
        box.label(text="Preview", icon='INFO')
        for line in preview(self.filepath, self.layout_name, self.units, self.up_axis, self.fps, self.ground):
            box.label(text=line)

    def execute(self, context):
        from ..readers import KeypointReadError

        try:
            clip = _read(self.filepath, self.layout_name, self.units, self.up_axis, self.fps, self.ground)
        except (KeypointReadError, OSError, ValueError) as ex:   # (too deep a JSON too: read_source_file)
            self.report({'ERROR'}, f"cannot import keypoints: {ui_text(ex)}")
            return {'CANCELLED'}
        name = os.path.splitext(os.path.basename(self.filepath))[0] or "Keypoints"
        start = self.frame_start if self.frame_start >= 0 else context.scene.frame_start
        set_scene = (self.set_scene_frames if self.properties.is_property_set("set_scene_frames")
                     else scene_untouched(context.scene))
        clip, note = clip_for_scene(clip, context.scene, set_scene)
        result = _make_input(self, context, clip, name, start)
        if result == {'FINISHED'}:
            note = fit_scene_to_clip(context.scene, clip, start) if set_scene else note
            if note:
                self.report({'INFO'}, note)
        return result


def _make_input(op, context, clip, name, start):
    """Create the keypoint object of a clip, make it the Input, report; nothing is left on failure."""
    from ..readers import LAYOUTS

    if clip.num_frames == 0:
        op.report({'ERROR'}, f"{clip.source}: no frames")
        return {'CANCELLED'}
    before = (set(bpy.data.objects), set(bpy.data.collections), set(bpy.data.actions))
    try:
        root = create_keypoint_object(clip, name=name, frame_start=start)
        if clip.mapping is not None and clip.layout not in LAYOUTS:
            # a mapping made for this clip (a skeleton's bones, regressed marker centres): keep all of it
            root["layout"] = clip.mapping.to_json()
    except Exception as ex:
        for obj in set(bpy.data.objects) - before[0]:
            bpy.data.objects.remove(obj)
        for coll in set(bpy.data.collections) - before[1]:
            bpy.data.collections.remove(coll)
        for act in set(bpy.data.actions) - before[2]:
            bpy.data.actions.remove(act)
        op.report({'ERROR'}, f"cannot create the keypoint object: {ex}")
        return {'CANCELLED'}
    if getattr(clip, "source_rig", None) is not None:
        from .solve import remember_source_rig

        remember_source_rig(root, clip.source_rig)
    settings = getattr(context.scene, "neural_ik", None)
    if settings is not None:
        settings.keypoint_object = root
        settings.source = 'KEYPOINTS'
    for w in clip.warnings:
        op.report({'WARNING'}, ui_text(w))
    if not clip.layout:
        op.report({'WARNING'}, "unknown layout: choose one on import to solve these keypoints")
    op.report({'INFO'}, f"Imported {clip.num_frames} frames of {clip.num_joints} points "
                        f"({clip.layout or 'unknown layout'}) as {root.name!r}")
    return {'FINISHED'}


def _armature_items(self, context):
    items = [(o.name, o.name, "Animated armature") for o in context.scene.objects
             if o.type == 'ARMATURE' and o.animation_data is not None and o.animation_data.action is not None]
    _armature_enum[:] = items or [('NONE', "(no animated armature)", "")]
    return _armature_enum


_armature_enum = []


class NEURAL_IK_OT_armature_input(bpy.types.Operator):
    """Use an animated armature in the scene as the Input: its bones' motion becomes keypoints"""

    bl_idname = "neural_ik.armature_input"
    bl_label = "Armature as Input"
    bl_options = {'REGISTER', 'UNDO'}

    armature: EnumProperty(name="Armature", items=_armature_items,
                           description="Animated armature whose motion is the source (mapped by its bones)")
    ground: BoolProperty(name="Ground", default=True,
                         description="Move the motion vertically so that its lowest foot point touches the floor")

    def invoke(self, context, event):
        obj = context.active_object
        if obj is not None and obj.type == 'ARMATURE' and obj.animation_data and obj.animation_data.action:
            self.armature = obj.name
        return context.window_manager.invoke_props_dialog(self)

    def execute(self, context):
        from ..blender_io.armature_source import armature_clip
        from ..readers import KeypointReadError

        obj = context.scene.objects.get(self.armature)
        if obj is None or obj.type != 'ARMATURE':
            self.report({'ERROR'}, "choose an animated armature in the scene ('Armature')")
            return {'CANCELLED'}
        action = obj.animation_data.action if obj.animation_data else None
        if action is None:
            self.report({'ERROR'}, f"the armature {obj.name!r} has no animation to use as input")
            return {'CANCELLED'}
        try:
            clip = armature_clip(obj, obj.name, ground=self.ground)
        except (KeypointReadError, ValueError) as ex:
            self.report({'ERROR'}, f"cannot use {obj.name!r} as input: {ui_text(ex)}")
            return {'CANCELLED'}
        start = int(round(action.frame_range[0]))
        result = _make_input(self, context, clip, f"{obj.name} motion", start)
        if result == {'FINISHED'}:
            root = context.scene.neural_ik.keypoint_object if hasattr(context.scene, "neural_ik") else None
            if root is not None:
                root["source_armature"] = obj.name  # the source rig can be read again from it
        return result


def menu_import(self, context):
    self.layout.operator(NEURAL_IK_OT_import_keypoints.bl_idname,
                         text="Neural IK Keypoints (.npz/.json/.csv/.trc/.c3d/.bvh/.npy/.fbx/.glb/.blend)")


classes = [NEURAL_IK_OT_import_keypoints, NEURAL_IK_OT_armature_input]


def register():
    bpy.types.TOPBAR_MT_file_import.append(menu_import)


def unregister():
    bpy.types.TOPBAR_MT_file_import.remove(menu_import)
    _preview_cache.clear()
