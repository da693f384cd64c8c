"""Render Contact Sheet: the command line's ``--preview`` sheet of the target armature's bake, from the sidebar.

``neural_ik.render_contact_sheet`` renders the baked action of the target
armature (the Neural IK target, else the active armature) at a row of frames
spread over it with :func:`..blender_io.contact_sheet.render_contact_sheet`,
the one renderer the CLI's ``bake --preview`` and ``demo`` use: the input the
bake recorded (:data:`.solve.SOURCE_PROP`: a keypoint object or the effectors)
in orange beside the rig's deform bones in blue, over the floor. It writes a
PNG the user picks and shows it in an Image Editor when one is open. The
open file is left as it was: the frame is set back, the sheet's scene and
what it holds are removed (:mod:`..blender_io.contact_sheet`).
"""

import os
import tempfile

import bpy
import numpy as np
from bpy_extras.io_utils import ExportHelper

from .. import properties
from ..blender_io import contact_sheet as sheet
from ..blender_io.keypoint_objects import is_keypoint_root, read_keypoint_pose
from ..errors import UserError
from ..pipeline.preview import pick_frames
from .solve import SOURCE_PROP, InputError, _canonical_from, effector_keypoints, effector_objects
from .wording import ui_text


class SheetError(UserError, ValueError):
    """The contact sheet cannot be rendered (no armature, no baked action, a path that cannot be written)."""


def baked_clip(obj):
    """``(action, first frame, last frame)`` the armature plays: its active action, else the top
    unmuted NLA strip of a Neural IK bake (Bake Into: NLA Strip); ``None`` without one."""
    ad = getattr(obj, "animation_data", None)
    if ad is None:
        return None
    if ad.action is not None:
        first, last = ad.action.frame_range
        return ad.action, int(round(first)), int(round(last))
    for track in reversed(ad.nla_tracks):
        if track.mute:
            continue
        for strip in track.strips:
            if strip.action is not None and SOURCE_PROP in strip.action:
                return strip.action, int(round(strip.frame_start)), int(round(strip.frame_end))
    return None


def source_reader(action):
    """A function giving the recorded input's canonical keypoints (32, 3) at the current frame, or ``None``
    when the bake recorded none or it is gone from the file."""
    obj = bpy.data.objects.get(str(action.get(SOURCE_PROP, "")))
    if obj is None:
        return None
    if is_keypoint_root(obj):
        fps, layout = float(obj.get("fps", 30.0)), str(obj.get("layout", ""))

        def read():
            pos, names = read_keypoint_pose(obj)
            return _canonical_from(pos, names, fps, layout, obj.name)[0][0]
        return read
    if effector_objects(obj):
        return lambda: effector_keypoints(obj)[0]
    return None


def shown_bones(obj):
    """Which bones the sheet draws: the deform bones (a generated rig's controls and helpers are not the
    body), every bone on a rig that marks none."""
    deform = np.array([b.use_deform for b in obj.data.bones], dtype=bool)
    return deform if deform.any() else np.ones(len(deform), dtype=bool)


def default_path(action):
    """``<action>_contact_sheet.png`` next to the saved .blend, else in the temporary folder."""
    folder = os.path.dirname(bpy.data.filepath) if bpy.data.filepath else tempfile.gettempdir()
    return os.path.join(folder, bpy.path.clean_name(action.name) + "_contact_sheet.png")


def check_path(path):
    """The absolute PNG path to write; :class:`SheetError` when it cannot be written."""
    path = bpy.path.abspath(path or "")
    if not path or os.path.isdir(path) or not os.path.basename(path):
        raise SheetError(f"{path or 'no file'}: pick a file name for the PNG")
    if not path.lower().endswith(".png"):
        raise SheetError(f"{path}: the contact sheet is a PNG, name it .png")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SheetError(f"{path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise SheetError(f"{path}: cannot write there (permission denied)")
    return os.path.abspath(path)


def show_in_image_editor(context, path):
    """Load the PNG (again, if loaded before) and show it in the first open Image Editor; the image or ``None``."""
    spaces = [area.spaces.active for window in context.window_manager.windows
              for area in window.screen.areas if area.type == 'IMAGE_EDITOR']
    if not spaces:
        return None
    image = bpy.data.images.load(path, check_existing=True)
    image.reload()
    spaces[0].image = image
    return image


def render_sheet(context, obj, path, count, progress=None):
    """Render the contact sheet of ``obj``'s baked action to ``path``: ``(width, height, frames, source)``."""
    clip = baked_clip(obj)
    if clip is None:
        raise SheetError(f"{obj.name!r} has no baked action: Bake first")
    action, first, last = clip
    frames = [first + i for i in pick_frames(last - first + 1, count)]
    read = source_reader(action)
    keep = shown_bones(obj)
    poses = [(h[keep], t[keep]) for h, t in sheet.object_poses(obj, frames, context.scene)]
    keypoints = None
    if read is not None:
        try:
            keypoints = np.stack(sheet.at_frames(frames, read, context.scene))
        except InputError:   # (edited into something unreadable: the rig alone)
            read = None
    width, height = sheet.render_contact_sheet(path, keypoints, poses, frames, progress=progress)
    return width, height, frames, action.get(SOURCE_PROP) if read is not None else None


class NEURAL_IK_OT_render_contact_sheet(bpy.types.Operator, ExportHelper):
    """Render the target armature's baked action at a row of frames, its input beside it, to a PNG (as
    --preview on the command line); shown in an Image Editor when one is open"""

    bl_idname = "neural_ik.render_contact_sheet"
    bl_label = "Render Contact Sheet"
    bl_options = {'REGISTER', 'UNDO'}

    filename_ext = ".png"
    filter_glob: bpy.props.StringProperty(default="*.png", options={'HIDDEN'})
    frames: bpy.props.IntProperty(
        name="Sheet Frames", default=sheet.SHEET_FRAMES, min=1, max=24,
        description="Frames on the contact sheet, spread evenly over the baked action (first and last included)")

    def invoke(self, context, event):
        obj = properties.target_armature(context)
        clip = baked_clip(obj) if obj is not None else None
        if not self.filepath and clip is not None:
            self.filepath = default_path(clip[0])
        return ExportHelper.invoke(self, context, event)

    def execute(self, context):
        obj = properties.target_armature(context)
        wm = context.window_manager
        wm.progress_begin(0, max(1, self.frames))
        try:
            if obj is None:
                raise SheetError("no armature: pick the Target armature (or make an armature active)")
            if obj.mode == 'EDIT':
                raise SheetError(f"{obj.name!r} is in Edit Mode: leave it so the pose is up to date")
            path = check_path(self.filepath)
            width, height, frames, source = render_sheet(context, obj, path, self.frames,
                                                         lambda done, _n: wm.progress_update(done))
        except SheetError as ex:
            self.report({'ERROR'}, ui_text(ex))
            return {'CANCELLED'}
        except (RuntimeError, OSError) as ex:
            self.report({'ERROR'}, f"{self.filepath}: rendering failed ({ex})")
            return {'CANCELLED'}
        finally:
            wm.progress_end()
        shown = show_in_image_editor(context, path)
        what = f"input {source!r} and the rig" if source else "the rig (no recorded input in the file)"
        self.report({'INFO'}, f"Contact sheet of {what} at frames {', '.join(map(str, frames))}: {path} "
                              f"({width}x{height})" + (" shown in the Image Editor" if shown else ""))
        return {'FINISHED'}


classes = [NEURAL_IK_OT_render_contact_sheet]
