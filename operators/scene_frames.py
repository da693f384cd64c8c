"""The scene's frame rate and range against an imported clip's (Import Keypoints).

A clip at 30 fps in a 24 fps scene: Import Keypoints either sets the scene's
rate and range to the clip's (the "Set Scene Frames" option, on by default
while the scene is untouched) or brings the clip to the scene's rate, so the
keypoint empties and a bake always cover the same scene frames: one key per
scene frame from the Start Frame on.
"""

import math

from ..blender_io.keypoint_objects import keypoint_roots


def scene_fps(scene):
    """The scene's frame rate (``fps / fps_base``)."""
    return float(scene.render.fps) / float(scene.render.fps_base or 1.0)


def same_rate(a, b):
    """Whether two frame rates are the same (``fps_base`` is single precision)."""
    return abs(float(a) - float(b)) <= 1e-4 * max(float(a), float(b))


def scene_untouched(scene):
    """True while the scene holds no animation: no animated object and no keypoint object."""
    if any(keypoint_roots(scene)):
        return False
    return not any(o.animation_data is not None and o.animation_data.action is not None for o in scene.objects)


def set_scene_rate(scene, fps):
    """Set ``scene.render.fps`` / ``fps_base`` to ``fps`` (29.97 becomes 30 / 1.001, as Blender's presets)."""
    fps = float(fps)
    whole = round(fps)
    if abs(fps - whole) < 1e-3:
        scene.render.fps, scene.render.fps_base = int(whole), 1.0
        return
    ntsc = round(fps * 1.001)
    if abs(ntsc / 1.001 - fps) < 1e-3:
        scene.render.fps, scene.render.fps_base = int(ntsc), 1.001
        return
    scene.render.fps = max(1, int(math.ceil(fps)))
    scene.render.fps_base = scene.render.fps / fps


def clip_for_scene(clip, scene, set_scene):
    """The clip at the rate it will have in the scene (resampled unless the scene takes the clip's rate).

    Returns
    -------
    clip : readers.KeypointClip
    note : str
        What was resampled, for the report ("" when nothing was).
    """
    from ..readers import resample

    rate = scene_fps(scene)
    if set_scene or same_rate(rate, clip.fps):
        return clip, ""
    out = resample(clip, rate)
    return out, (f"resampled from {clip.fps:g} to the scene's {rate:g} fps ({clip.num_frames} to "
                 f"{out.num_frames} frames); 'Set Scene Frames' keeps the clip's rate instead")


def fit_scene_to_clip(scene, clip, start):
    """Set the scene's rate to the clip's and its range to the clip's frames from ``start``; returns a note."""
    changed = not same_rate(scene_fps(scene), clip.fps)
    if changed:
        set_scene_rate(scene, clip.fps)
    scene.frame_start = int(start)
    scene.frame_end = int(start) + clip.num_frames - 1
    return (f"scene set to {clip.fps:g} fps, frames {scene.frame_start}-{scene.frame_end}" if changed
            else f"scene frames set to {scene.frame_start}-{scene.frame_end}")
