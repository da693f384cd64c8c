"""Scene and object settings of the Neural IK tab.

- ``Scene.neural_ik`` (:class:`NeuralIKSettings`): target armature, input
  source, keypoint object, frame range, smoothing, solve and bake options.
- ``Object.neural_ik_mapping``: the armature's bone mapping, a collection of
  :class:`NeuralIKBoneMapItem` (canonical joint, bone name, confidence) in
  canonical joint order, filled by "Auto-Map" and editable per joint.

Registered by :mod:`.operators.solve` (``register()`` / ``unregister()``).
"""

import bpy
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty, IntProperty,
                       PointerProperty, StringProperty)

from .blender_io.keypoint_objects import is_keypoint_root
from .pipeline.options import BAKE_SETTINGS

#: The bake's settings, declared once with the command line's flags (``pipeline/options.py``).
_BAKE = {s.name: s for s in BAKE_SETTINGS}


def _declared(name, **kwargs):
    """The property of a declared bake setting: its label, tooltip, default, choices and range."""
    setting = _BAKE[name]
    common = dict(name=setting.label, description=setting.tooltip, default=setting.default, **kwargs)
    if setting.choices:
        return EnumProperty(items=tuple((c.value, c.label, c.help) for c in setting.choices), **common)
    if isinstance(setting.default, bool):
        return BoolProperty(**common)
    bounds = {k: v for k, v in (("min", setting.minimum), ("max", setting.maximum)) if v is not None}
    return FloatProperty(**bounds, **common)


def target_armature(context):
    """The Neural IK target armature, else the active armature, else ``None``."""
    s = getattr(context.scene, "neural_ik", None)
    if s is not None and s.target is not None:
        return s.target
    obj = context.active_object
    return obj if obj is not None and obj.type == 'ARMATURE' else None


def input_frames(settings):
    """Scene frames ``(first, last)`` (inclusive) the Input covers, or ``None`` without an input.

    A keypoint object covers the frames it was imported onto (its Start Frame
    on, one key per scene frame); effectors cover the scene's frame range.
    """
    scene = settings.id_data
    if settings.source == 'EFFECTORS':
        return int(scene.frame_start), int(scene.frame_end)
    root = settings.keypoint_object
    if root is None:
        return None
    start, count = int(root.get("frame_start", 1)), int(root.get("frame_count", 0))
    if count < 1:
        return None
    fps = float(root.get("fps", 0.0)) or 1.0
    rate = float(scene.render.fps) / float(scene.render.fps_base or 1.0)
    return start, start + int(round((count - 1) * rate / fps))


def _use_clip_range_changed(self, context):
    """Unticking Use Clip Range starts the custom range at the whole input: nothing is dropped silently."""
    if not self.use_clip_range:
        frames = input_frames(self)
        if frames is not None:
            self.frame_from, self.frame_to = frames


def _poll_armature(self, obj):
    return obj is not None and obj.type == 'ARMATURE'


def _poll_keypoints(self, obj):
    return is_keypoint_root(obj)


class NeuralIKBoneMapItem(bpy.types.PropertyGroup):
    """One canonical joint and the armature bone that follows it."""

    joint: StringProperty(name="Joint", description="Canonical joint name (pelvis, hand_l, ...)")
    bone: StringProperty(name="Bone", description="Armature bone driven by this joint (empty: unmapped)")
    confidence: FloatProperty(name="Confidence", description="How sure the automatic mapping was (0-1)",
                              min=0.0, max=1.0, default=0.0)


class NeuralIKSettings(bpy.types.PropertyGroup):
    """Per-scene settings of the Neural IK tab."""

    target: PointerProperty(
        name="Armature", type=bpy.types.Object, poll=_poll_armature,
        description="Humanoid armature that receives the solved pose and the baked action")
    source: EnumProperty(
        name="Input", description="Where the keypoints come from",
        items=(
            ('KEYPOINTS', "Keypoint Object", "An imported keypoint object (animated empties)"),
            ('EFFECTORS', "Effectors", "Hand, foot, head and pelvis empties the animator moves (sparse mode)"),
        ),
        default='KEYPOINTS')
    keypoint_object: PointerProperty(
        name="Keypoints", type=bpy.types.Object, poll=_poll_keypoints,
        description="Root empty of an imported keypoint clip")
    effector_root: PointerProperty(
        name="Effectors", type=bpy.types.Object,
        description="Parent empty of the effector empties made by Add Effectors")
    use_clip_range: BoolProperty(
        name="Use Clip Range", default=True, update=_use_clip_range_changed,
        description="Bake every frame of the input (the keypoint object's frames, or the scene's range for "
                    "effectors); off: bake the scene frames From-To")
    frame_from: IntProperty(
        name="From",
        description="First scene frame to bake (as the timeline shows it; the keys land on the same frames "
                    "as the input's)")
    frame_to: IntProperty(
        name="To",
        description="Last scene frame to bake (included)")
    smooth: _declared("smooth")
    smooth_strength: _declared("smooth_strength", subtype='FACTOR')
    smooth_target: _declared("smooth_target")
    refine: _declared("refine")
    rotation_mode: _declared("rotation_mode")
    in_place: _declared("in_place")
    ground: _declared("ground")
    foot_lock: _declared("foot_lock")
    auto_scale: BoolProperty(
        name="Auto Scale", default=True,
        description="Scale the root motion by the ratio of the armature's leg length to the source's")
    scale: FloatProperty(
        name=_BAKE["scale"].label, default=1.0, min=_BAKE["scale"].minimum, soft_max=10.0,
        description=_BAKE["scale"].tooltip + " (when Auto Scale is off)")
    mode: _declared("mode")
    effector_rotations: BoolProperty(
        name="Effector Rotations", default=True,
        description="Hands, feet and head turn as their empties do (Solve Frame, Live Solve); an effector "
                    "that did not move keeps its bone's turn either way")
    # where a bake goes: a new action, or a strip to compare before keeping it
    bake_into: EnumProperty(
        name="Bake Into", description="Where the baked keys go; either way no existing action is changed",
        items=(
            ('ACTION', "New Action", "A new action, made the armature's active action (the previous one is kept "
                                     "with a fake user)"),
            ('NLA', "NLA Strip", "A new action played from a strip on a new NLA track above the armature's "
                                 "animation (its active action pushed down onto a track of its own): mute the "
                                 "track to compare"),
        ),
        default='ACTION')
    live_solve: BoolProperty(
        name="Live Solve", default=False, options={'SKIP_SAVE'},
        description="Re-solve the pose whenever an effector empty moves")
    status: StringProperty(
        name="Status", default="", options={'SKIP_SAVE'},
        description="Result of the last solve or bake")


classes = [NeuralIKBoneMapItem, NeuralIKSettings]


def register():
    """Register the property groups and attach them to Scene and Object."""
    for cls in classes:
        bpy.utils.register_class(cls)
    bpy.types.Scene.neural_ik = PointerProperty(type=NeuralIKSettings, name="Neural IK",
                                                description="Settings of the Neural IK tab")
    bpy.types.Object.neural_ik_mapping = CollectionProperty(
        type=NeuralIKBoneMapItem, name="Neural IK Mapping",
        description="Canonical joint -> bone mapping of this armature")


def unregister():
    """Remove everything :func:`register` added."""
    del bpy.types.Object.neural_ik_mapping
    del bpy.types.Scene.neural_ik
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)


def _source_frames(settings, first, last):
    """Scene frames ``first..last`` (inclusive) as the bake's source slice ``(a, b)`` (end exclusive)."""
    span = input_frames(settings)
    scene = settings.id_data
    rate = float(scene.render.fps) / float(scene.render.fps_base or 1.0)
    root = settings.keypoint_object if settings.source == 'KEYPOINTS' else None
    fps = float(root.get("fps", rate)) if root is not None else rate
    a = int(round((first - span[0]) * fps / rate))
    b = int(round((last - span[0]) * fps / rate)) + 1
    return a, b


def bake_options(settings, *, clip_frames=None, device="auto"):
    """:class:`..blender_io.bake.BakeOptions` from the scene settings.

    Parameters
    ----------
    settings : NeuralIKSettings
    clip_frames : int, optional
        Number of frames in the source clip (for the custom range).
    device : str
        The compute-device preference.
    """
    from .blender_io.bake import BakeError, BakeOptions

    frames, frame_start = None, None
    span = input_frames(settings)
    if span is not None:
        frame_start = span[0]  # the keys land on the input's own frames: one Start Frame, the import's
    if not settings.use_clip_range and span is not None:
        first, last = int(settings.frame_from), int(settings.frame_to)
        if not (span[0] <= first <= last <= span[1]):
            raise BakeError(f"the custom range {first}-{last} is outside the input's frames {span[0]}-{span[1]} "
                            "(scene frames, From and To included)")
        frames = _source_frames(settings, first, last)
        frame_start = first
    return BakeOptions(
        frame_start=frame_start,
        frames=frames,
        smooth=settings.smooth,
        smooth_strength=float(settings.smooth_strength),
        smooth_target=settings.smooth_target,
        refine=bool(settings.refine),
        rotation_mode=settings.rotation_mode,
        in_place=bool(settings.in_place),
        ground=bool(settings.ground),
        foot_lock=bool(settings.foot_lock),
        scale=None if settings.auto_scale else float(settings.scale),
        device=device,
        mode=settings.mode,
    )
