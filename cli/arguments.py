"""The bake flags, shared by ``bake`` and ``batch``, built from the settings' declarations
(``pipeline/options.py``), and the ``BakeOptions`` they make."""

from __future__ import annotations

import argparse
import json

from .argtypes import FRAME_MAX, FRAME_MIN, frame_number, int_at_least, parse_frames, positive_int, unit_float
from .errors import UsageError
from .limits import FPS_RANGE, SCALE_RANGE, bounded_float
from .parser import add_device_argument, device_choice

__all__ = ["add_target_arguments", "add_bake_arguments", "bake_options", "check_layout_argument",
           "load_bone_mapping", "MAX_FRAMES"]


#: Default of ``--max-frames``: longer clips are refused before any long work.
MAX_FRAMES = 1_000_000


def add_target_arguments(parser):
    """Add ``--target`` and ``--armature``."""
    parser.add_argument(
        "--target", metavar="TARGET", default=None,
        help="rig to bake onto: a .blend, .fbx, .glb/.gltf or .bvh file (a BVH's skeleton in its rest "
             "pose), or 'rigify' (Blender's human meta-rig); required unless Blender was started with a "
             ".blend (blender -b scene.blend -c neural_ik ...), whose scene is then the target",
    )
    parser.add_argument("--armature", metavar="NAME", default=None,
                        help="armature object to use when TARGET holds several")
    from ..pipeline.options import UNIT_CHOICES, UP_AXIS_CHOICES

    parser.add_argument("--target-units", choices=tuple(c.value for c in UNIT_CHOICES), default=None,
                        help="units of a .bvh TARGET (default: guessed from its skeleton's height, as for a "
                             "source); its bones keep them, the armature object is scaled to metres")
    parser.add_argument("--target-up-axis", choices=tuple(c.value for c in UP_AXIS_CHOICES), default=None,
                        help="up axis of a .bvh TARGET (default: detected from its skeleton, as for a source)")


def _add_setting(group, name, *, bake=True, more="", default_text=None, **kwargs):
    """Add the flag of a declared setting (``pipeline/options.py``): its choices, default and help.

    ``more``: what the command line adds to the help; ``default_text``: how the
    help says the default (a ``None`` default is detected or automatic).
    """
    from ..pipeline.options import find_setting

    setting = find_setting(name, bake)
    if setting.choices:
        kwargs.setdefault("choices", setting.values)
    if isinstance(setting.default, bool):
        kwargs.setdefault("action", argparse.BooleanOptionalAction)
    if default_text is None:
        default_text = ("on" if setting.default else "off") if isinstance(setting.default, bool) else setting.default
    help_text = setting.help + (": " + more if more else "")
    group.add_argument(setting.flag, default=setting.default, help="{} (default: {})".format(help_text, default_text),
                       **kwargs)


def add_bake_arguments(parser):
    """Add the bake flags shared by ``bake`` and ``batch``.

    The settings both front ends have take their choices, defaults and help
    from their declarations (``pipeline/options.py``), as the sidebar does.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    add_target_arguments(parser)
    g = parser.add_argument_group("source")
    _add_setting(g, "layout", bake=False, metavar="NAME|MAPPING.json", default_text="detected from the joint names",
                 more="a layout's name (see `layouts`) or a JSON mapping of source names to canonical keypoints")
    _add_setting(g, "units", bake=False, default_text="the file's, or detected from the body's height")
    _add_setting(g, "up_axis", bake=False, default_text="the file's, else detected from the motion: feet to head")
    _add_setting(g, "source_fps", bake=False, type=bounded_float(*FPS_RANGE, "frames per second"), metavar="FPS",
                 default_text="the file's, else 30")
    _add_setting(g, "image_size", bake=False, nargs=2, type=int_at_least(1, "pixels"), metavar=("W", "H"),
                 default_text="they are refused")
    g.add_argument("--frames", type=parse_frames, default=None, metavar="A:B",
                   help="bake source frames A up to B (B excluded; A: or :B for open ends)")
    g = parser.add_argument_group("bake")
    g.add_argument("--mapping", metavar="BONES.json", default=None,
                   help="canonical joint -> bone mapping of the target: a JSON object, or a preset the "
                        "Target panel saved (default: automatic)")
    g.add_argument("--fps", type=bounded_float(*FPS_RANGE, "frames per second"), default=None,
                   help="frame rate of the baked action (default: the source's)")
    g.add_argument("--frame-start", type=frame_number, default=None, metavar="N",
                   help="scene frame of the first baked frame, {}..{} (default: the scene's start frame)".format(
                       FRAME_MIN, FRAME_MAX))
    _add_setting(g, "smooth")
    _add_setting(g, "smooth_strength", type=unit_float, metavar="X")
    _add_setting(g, "smooth_target")
    _add_setting(g, "mode")
    _add_setting(g, "scale", type=bounded_float(*SCALE_RANGE, "armature units per source metre"), metavar="X",
                 default_text="the ratio of the target's leg length to the source's")
    _add_setting(g, "refine")
    _add_setting(g, "in_place", action="store_true")
    # (the file is grounded as it is read, as the import dialog's Ground does: the source's setting)
    _add_setting(g, "ground", bake=False)
    _add_setting(g, "foot_lock")
    _add_setting(g, "rotation_mode")
    g.add_argument("--max-frames", type=positive_int, default=MAX_FRAMES, metavar="N",
                   help="refuse a clip of more than N frames, counted after --frames and after resampling to "
                        "--fps, before any long work (default: {:,}); memory and time grow with the frame "
                        "count".format(MAX_FRAMES))
    add_device_argument(g)
    g.add_argument("--weights", metavar="PATH", default=None,
                   help="network weights file (default: weights/neural_ik.pt in the package)")
    g = parser.add_argument_group("output")
    g.add_argument("--report", metavar="REPORT.json", default=None,
                   help="write the JSON report there ('-' prints it to stdout)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def bake_options(args, action_name=None, fps=None, frames=None):
    """Build a ``BakeOptions`` from parsed bake flags.

    Parameters
    ----------
    args : argparse.Namespace
    action_name : str, optional
    fps : float, optional
        Rate of the baked action when ``--fps`` is not given.
    frames : tuple of (int, int), optional
        ``--frames`` resolved against the clip (:func:`resolve_frames`);
        default ``args.frames``, which must then have no open end.

    Returns
    -------
    blender_io.bake.BakeOptions
    """
    from ..blender_io.bake import BakeOptions

    return BakeOptions(
        frame_start=args.frame_start,
        frames=frames if frames is not None else args.frames,
        fps=fps if fps is not None else args.fps,
        smooth=args.smooth,
        smooth_strength=args.smooth_strength,
        smooth_target=args.smooth_target,
        mode=args.mode,
        scale=args.scale,
        refine=args.refine,
        rotation_mode=args.rotation_mode,
        in_place=args.in_place,
        ground=False,  # the reader already put the clip on the floor (read_source, --ground)
        foot_lock=args.foot_lock,
        device=device_choice(args),
        action_name=action_name,
    )


def check_layout_argument(layout):
    """Validate ``--layout`` early (exit code 2 on an unknown name or unreadable mapping)."""
    if layout is None:
        return None
    from ..readers import get_layout

    try:
        return get_layout(layout)
    except RecursionError:
        raise UsageError("--layout {}: JSON nested too deeply (expected a flat object "
                         "{{\"source name\": \"canonical keypoint\"}})".format(layout)) from None
    except (KeyError, ValueError) as ex:
        raise UsageError("--layout: {}".format(str(ex).strip("'\""))) from None


def load_bone_mapping(path):
    """Read ``--mapping BONES.json`` into a ``BoneMapping``.

    Accepts the ``BoneMapping.to_json`` format, a mapping preset the Target panel saved
    (:mod:`..retarget.presets`) or a flat ``{joint: bone}`` object.

    Raises
    ------
    UsageError
    """
    if path is None:
        return None
    from ..model.skeleton import JOINTS
    from ..retarget.mapping import BoneMapping

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise UsageError("--mapping {}: no such file".format(path)) from None
    except (OSError, UnicodeDecodeError, ValueError) as ex:
        raise UsageError("--mapping {}: not a readable JSON file ({})".format(path, str(ex).split(";")[0])) from None
    except RecursionError:
        raise UsageError("--mapping {}: JSON nested too deeply (expected a flat object "
                         "{{\"canonical joint\": \"bone\"}})".format(path)) from None
    if not isinstance(data, dict):
        raise UsageError("--mapping {}: expected a JSON object".format(path))
    if data.get("format") == "neural_ik.bone_mapping":   # (a preset the Target panel saved)
        data = data.get("mapping")
        if not isinstance(data, dict):
            raise UsageError("--mapping {}: a mapping preset without its 'mapping'".format(path))
    if "entries" not in data:
        data = {"entries": data}
    entries = data.get("entries")
    if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
        raise UsageError("--mapping {}: 'entries' must map canonical joints to bone names".format(path))
    unknown = [j for j in entries if j not in JOINTS]
    if unknown:
        raise UsageError("--mapping {}: unknown canonical joints {} (known: {})".format(
            path, ", ".join(unknown), ", ".join(JOINTS)))
    return BoneMapping.from_dict(data)
