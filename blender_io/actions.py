"""Writing baked animation into new Blender actions.

One code path for both action APIs:

- Blender 4.4+ (layered actions; the only API in 5.0, which removed
  ``Action.fcurves``): a new action gets a slot for the armature object, a
  layer, a keyframe strip and a channelbag that holds the fcurves.
- Blender 4.2 and 4.3: the legacy ``Action.fcurves`` collection.

Every fcurve is written with one ``foreach_set`` of its keyframe coordinates;
there is no Python loop over keyframes. The user's existing actions are never
touched: a bake always makes a new action and only then points the object's
animation data at it.
"""

from __future__ import annotations

import bpy
import numpy as np

__all__ = [
    "is_layered_api",
    "ActionWriter",
    "unique_action_name",
    "action_fcurves",
    "assign_action",
    "push_to_nla",
]


def is_layered_api() -> bool:
    """True on Blender builds with layered actions (4.4+)."""
    props = bpy.types.Action.bl_rna.properties
    return "slots" in props and "layers" in props


def unique_action_name(base: str) -> str:
    """``base`` or ``base.001``-style name that no action uses yet."""
    if base not in bpy.data.actions:
        return base
    i = 1
    while f"{base}.{i:03d}" in bpy.data.actions:
        i += 1
    return f"{base}.{i:03d}"


class ActionWriter:
    """Creates a new action for one object and fills it with fcurves.

    Parameters
    ----------
    obj : bpy.types.Object
        The object the action animates (an armature or an empty).
    name : str
        Wanted action name; made unique among existing actions.
    """

    def __init__(self, obj, name: str):
        self.obj = obj
        self.action = bpy.data.actions.new(unique_action_name(name))
        self.slot = None
        if is_layered_api():
            self.slot = self.action.slots.new(id_type="OBJECT", name=obj.name)
            layer = self.action.layers.new("Neural IK")
            strip = layer.strips.new(type="KEYFRAME")
            self._channels = strip.channelbag(self.slot, ensure=True)
        else:  # Blender 4.2 / 4.3
            self._channels = self.action
        self._groups = {}

    def _group(self, name: str):
        if name is None:
            return None
        group = self._groups.get(name)
        if group is None:
            group = self._channels.groups.new(name)
            self._groups[name] = group
        return group

    def add_fcurve(self, data_path: str, index: int, frames: np.ndarray, values: np.ndarray, group: str | None = None):
        """Add one fcurve with a key on every frame.

        Parameters
        ----------
        data_path, index : str, int
            RNA path and array index (``pose.bones["hand.L"].rotation_quaternion``, 0).
        frames, values : ndarray, shape (T,)
            Key times (scene frames) and values.
        group : str, optional
            Channel group (the bone name for pose channels).
        """
        fcurve = self._channels.fcurves.new(data_path, index=index)
        grp = self._group(group)
        if grp is not None:
            fcurve.group = grp
        co = np.empty((len(frames), 2), dtype=np.float32)
        co[:, 0] = frames
        co[:, 1] = values
        fcurve.keyframe_points.add(len(frames))
        fcurve.keyframe_points.foreach_set("co", co.ravel())
        fcurve.update()
        return fcurve

    def add_vector(self, data_path: str, frames: np.ndarray, values: np.ndarray, group: str | None = None):
        """Add one fcurve per component of ``values`` (T, N)."""
        for i in range(values.shape[1]):
            self.add_fcurve(data_path, i, frames, values[:, i], group)

    def finish(self, assign: bool = True):
        """Point the object's animation data at the new action (and its slot).

        The object's previous action is left in ``bpy.data`` with a fake user
        so that it can never be lost.
        """
        if assign:
            assign_action(self.obj, self.action, self.slot)
        return self.action


def assign_action(obj, action, slot=None):
    """Make ``action`` the active action of ``obj``; keep the previous one safe."""
    ad = obj.animation_data or obj.animation_data_create()
    previous = ad.action
    if previous is not None and previous is not action and not previous.use_fake_user:
        previous.use_fake_user = True
    ad.action = action
    if slot is not None and hasattr(ad, "action_slot"):
        ad.action_slot = slot


def _strip(track, action, start, slot):
    strip = track.strips.new(action.name, int(start), action)
    if slot is not None and hasattr(strip, "action_slot"):
        strip.action_slot = slot
    return strip


def push_to_nla(obj, action, slot, frame_start):
    """Play ``action`` from an NLA strip on a new track above the object's animation (a mutable preview).

    The object's active action, if any, is pushed down first onto a track of
    its own (Blender's Push Down, kept with a fake user): otherwise it would
    play over the strip. No action is changed. Returns the new track.
    """
    ad = obj.animation_data or obj.animation_data_create()
    own = ad.action
    if own is not None:
        track = ad.nla_tracks.new()
        track.name = own.name
        _strip(track, own, own.frame_range[0], getattr(ad, "action_slot", None))
        own.use_fake_user = True
        ad.action = None
    track = ad.nla_tracks.new()
    track.name = action.name
    _strip(track, action, frame_start, slot)
    return track


def action_fcurves(action, obj=None):
    """All fcurves of ``action`` (for ``obj``'s slot on layered actions)."""
    if not is_layered_api():
        return list(action.fcurves)
    out = []
    slot = None
    if obj is not None and obj.animation_data is not None and getattr(obj.animation_data, "action", None) == action:
        slot = obj.animation_data.action_slot
    for layer in action.layers:
        for strip in layer.strips:
            for bag in strip.channelbags:
                if slot is None or bag.slot == slot:
                    out.extend(bag.fcurves)
    return out
