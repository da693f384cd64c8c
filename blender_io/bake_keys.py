"""A bake's keys written into a NEW action (:func:`write_action`), one ``foreach_set`` per fcurve;
on any failure the armature is left as it was.
"""

from __future__ import annotations

import numpy as np

from ..errors import setting
from ..pipeline import BakeError
from .rigify import channel_path

__all__ = ["write_action", "finite_keys"]


def write_action(obj, action_name, frames, channels, constant_keys, mode_changes, into, frame_start, progress=None):
    """The keys of ``channels`` (``(bone, property, values())``) and ``constant_keys`` at ``frames`` as a new
    action of ``obj``: assigned (``into`` ``"ACTION"``) or played from a strip on a new NLA track
    (``"NLA"``: :func:`.actions.push_to_nla`); the bones in ``mode_changes`` turn to quaternions.

    Returns ``(the new action, the action that was active or None)``. On an error nothing
    half-made is left behind and the error is raised.
    """
    import bpy

    from .actions import ActionWriter, push_to_nla

    before = _AnimationState(obj, mode_changes)
    writer = None
    try:
        writer = ActionWriter(obj, action_name)
        for i, (name, prop, values) in enumerate(channels):
            path = f'pose.bones["{bpy.utils.escape_identifier(name)}"].{prop}'
            writer.add_vector(path, frames, finite_keys(np.asarray(values(), dtype=np.float64), name, prop),
                              group=name)
            if progress is not None:
                progress((i + 1) / len(channels), "write")
        for name, prop, value in constant_keys:
            writer.add_vector(channel_path(name, prop), frames,
                              np.broadcast_to(np.asarray(value, dtype=np.float64), (len(frames), len(value))),
                              group=name)
        for name in mode_changes:
            obj.pose.bones[name].rotation_mode = "QUATERNION"
        writer.finish(assign=into == "ACTION")
        if into == "NLA":
            push_to_nla(obj, writer.action, writer.slot, frame_start)
    except Exception:
        before.restore(writer)   # leave nothing half-made behind
        raise
    return writer.action, before.previous


class _AnimationState:
    """What a new action changes on an armature: its action, slot, NLA tracks and rotation modes."""

    def __init__(self, obj, mode_changes):
        ad = obj.animation_data
        self.obj = obj
        self.previous = ad.action if ad is not None else None
        self.previous_slot = getattr(ad, "action_slot", None) if ad is not None else None
        self.previous_fake = self.previous.use_fake_user if self.previous is not None else None
        self.had_ad = ad is not None
        self.n_tracks = len(ad.nla_tracks) if ad is not None else 0
        self.old_modes = {name: obj.pose.bones[name].rotation_mode for name in mode_changes}

    def restore(self, writer):
        """Back as it was; ``writer``'s action (if one was made) removed."""
        import bpy

        obj = self.obj
        for name, mode in self.old_modes.items():
            obj.pose.bones[name].rotation_mode = mode
        if writer is None:
            return
        tracks = obj.animation_data.nla_tracks if obj.animation_data is not None else ()
        while len(tracks) > self.n_tracks:
            tracks.remove(tracks[len(tracks) - 1])
        if self.had_ad:
            obj.animation_data.action = self.previous
            if self.previous_slot is not None and hasattr(obj.animation_data, "action_slot"):
                try:
                    obj.animation_data.action_slot = self.previous_slot
                except Exception:
                    pass
        elif obj.animation_data is not None:
            obj.animation_data_clear()
        if self.previous is not None:
            self.previous.use_fake_user = self.previous_fake
        bpy.data.actions.remove(writer.action)


def finite_keys(values, bone, prop):
    """``values``, or :class:`BakeError` where one is inf/NaN in float32 (as Blender stores keys): no key Blender
    cannot draw is ever written."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(values) <= np.finfo(np.float32).max)   # (NaN compares false)
    if bad.any():
        t = int(np.argwhere(bad)[0][0])
        n = int(bad.reshape(len(values), -1).any(axis=1).sum())
        raise BakeError(f"the bake gave a non-finite {prop} on bone {bone!r} at frame {t} ({n} frames): check "
                        f"{setting('scale')}, {setting('units')} and the source's values")
    return values
