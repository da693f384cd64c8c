"""``demo``: generate a walk, bake it onto Rigify's meta-rig, write every output.

Writes into ``--out-dir`` (default ``./out/demo``):

- ``demo_walk.npz``: the generated input keypoints (canonical layout);
- ``demo.blend``: the meta-rig with the baked action;
- ``demo.bvh``: the bake exported with Blender's BVH exporter;
- ``demo_report.json``: the bake report;
- ``demo_contact_sheet.png``: input keypoints and baked rig side by side at
  several frames, rendered headless with Workbench.

The motion is made procedurally (:mod:`.demo_motion`); nothing is read from
outside the extension.
"""

from __future__ import annotations

import argparse
import os
import time

from ..outputs import atomic_output
from . import arguments, errors, pathcheck
from .errors import CliError, guarded
from .progress import Progress
from .report import emit_report, headline, summary

__all__ = ["add_parser", "run"]

DEFAULT_OUT_DIR = os.path.join("out", "demo")


def add_parser(subparsers):
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="bake a generated walk onto Rigify's meta-rig and render a contact sheet",
        description=(
            "Generate a few seconds of walking with arm swing and a turn, bake it onto Blender's human "
            "meta-rig, and write the .blend, a .bvh, the JSON report and a contact-sheet PNG (input keypoints "
            "and baked rig side by side, rendered headless with Workbench). Prints where everything went."
        ),
    )
    parser.add_argument("--out-dir", metavar="DIR", default=DEFAULT_OUT_DIR,
                        help="output folder (default: {})".format(DEFAULT_OUT_DIR))
    parser.add_argument("--seconds", type=float, default=4.0, help="length of the walk (default: 4)")
    parser.add_argument("--fps", type=float, default=30.0, help="frame rate (default: 30)")
    parser.add_argument("--sheet-frames", type=int, default=6, metavar="N",
                        help="frames on the contact sheet (default: 6)")
    parser.add_argument("--tile", default="320x240", metavar="WxH", help="contact-sheet tile size (default: 320x240)")
    parser.add_argument("--no-refine", dest="refine", action="store_false", help="skip the refinement")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    from .parser import add_device_argument

    add_device_argument(parser)
    parser.add_argument("--weights", metavar="PATH", default=None,
                        help="network weights file (default: weights/neural_ik.pt in the package)")
    return parser


def _bake_args(args, target):
    """A namespace with the bake flags' defaults (as `bake SOURCE --target rigify` would parse)."""
    sub = argparse.ArgumentParser(add_help=False)
    arguments.add_bake_arguments(sub)
    argv = ["--target", target]
    if not args.refine:
        argv.append("--no-refine")
    if args.device:
        argv += ["--device", args.device]
    if args.precision != "auto":
        argv += ["--precision", args.precision]
    if args.quiet:
        argv.append("--quiet")
    if args.weights:
        argv += ["--weights", args.weights]
    ns = sub.parse_args(argv)
    ns.default_device = getattr(args, "default_device", None)
    return ns


def _tile_size(text):
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise errors.UsageError("--tile {}: expected WxH, e.g. 320x240".format(text)) from None
    if not (16 <= w <= 4096 and 16 <= h <= 4096):
        raise errors.UsageError("--tile {}: width and height must be 16..4096".format(text))
    return w, h


@guarded
def run(args):
    """Run the demo; returns 0 (1 when a step fails)."""
    from .bake import bake_file, get_solver, write_outputs
    from ..blender_io.contact_sheet import object_poses, pick_frames, render_contact_sheet
    from .demo_motion import save_npz, walk_keypoints
    from ..blender_io.targets import load_target

    if not (0.5 <= args.seconds <= 60):
        raise errors.UsageError("--seconds must be between 0.5 and 60")
    if not (1 <= args.fps <= 240):
        raise errors.UsageError("--fps must be between 1 and 240")
    tile = _tile_size(args.tile)
    started = time.perf_counter()
    out_dir = os.path.abspath(args.out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise errors.UsageError("--out-dir {}: is a file, not a folder".format(args.out_dir))
    pathcheck.check_writable_folder(out_dir, "--out-dir {}".format(args.out_dir))
    paths = {
        "input": os.path.join(out_dir, "demo_walk.npz"),
        "blend": os.path.join(out_dir, "demo.blend"),
        "bvh": os.path.join(out_dir, "demo.bvh"),
        "report": os.path.join(out_dir, "demo_report.json"),
        "contact_sheet": os.path.join(out_dir, "demo_contact_sheet.png"),
    }
    pathcheck.check_output_paths([("--out-dir " + args.out_dir, p) for p in paths.values()])
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as ex:
        raise errors.UsageError("--out-dir {}: cannot create ({})".format(args.out_dir, ex.strerror or ex)) from None
    keypoints = walk_keypoints(args.seconds, args.fps)
    with atomic_output(paths["input"]) as tmp:
        save_npz(tmp, keypoints, args.fps)

    bake_args = _bake_args(args, "rigify")
    progress = Progress(1, keypoints.shape[0], quiet=args.quiet)
    progress.begin_clip(1, os.path.basename(paths["input"]), keypoints.shape[0])
    t0 = time.perf_counter()
    target = load_target("rigify")
    load_seconds = time.perf_counter() - t0
    solver = get_solver(bake_args)
    row, result = bake_file(paths["input"], target, bake_args, solver=solver, progress=progress,
                            action_name="demo_walk")
    outputs, t_export = write_outputs(target, result, paths["blend"], [paths["bvh"]])
    row["outputs"] = outputs
    row["seconds"]["export"] = round(row["seconds"].get("export", 0.0) + t_export, 4)
    progress.end_clip("done, {} frames: {}".format(row["frames"], headline(row)))

    t0 = time.perf_counter()
    idx = pick_frames(result.frames, args.sheet_frames)
    frames = [int(result.frame_start) + i for i in idx]
    # the bake keys source frame i at scene frame frame_start + i (same rate)
    try:
        size = render_contact_sheet(paths["contact_sheet"], keypoints[idx], object_poses(target.obj, frames), frames,
                                    size=tile)
    except RuntimeError as ex:
        raise CliError("{}: rendering failed ({})".format(paths["contact_sheet"], ex)) from None
    render_seconds = time.perf_counter() - t0
    row["outputs"].append(paths["contact_sheet"])
    row["seconds_total"] = round(sum(row["seconds"].values()), 4)
    row["frames_per_second"] = round(row["frames"] / row["seconds_total"], 2) if row["seconds_total"] else None
    report = {"command": "demo", "clips": [row],
              "summary": summary([row], time.perf_counter() - started, load_target_seconds=round(load_seconds, 3),
                                        render_seconds=round(render_seconds, 3),
                                        contact_sheet={"path": paths["contact_sheet"], "width": size[0],
                                                       "height": size[1], "frames": frames})}
    emit_report(paths["report"], report)
    print("Neural IK demo: {} frames of walking at {:g} fps baked onto Rigify's meta-rig in {:.1f} s: {}".format(
        row["frames"], args.fps, time.perf_counter() - started, headline(row)))
    print("  input keypoints  {}".format(paths["input"]))
    print("  blend            {}  (action {!r})".format(paths["blend"], row["action"]))
    print("  bvh              {}".format(paths["bvh"]))
    print("  report           {}".format(paths["report"]))
    print("  contact sheet    {}  ({}x{}, frames {})".format(paths["contact_sheet"], size[0], size[1],
                                                             ", ".join(map(str, frames))))
    return 0
