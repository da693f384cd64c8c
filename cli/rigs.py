"""``rigs``: built-in targets, the bone-naming conventions the automatic mapping knows,
and optionally the mapping it finds on a given target."""

from __future__ import annotations

import json
import sys
import textwrap

from .errors import CliError, guarded

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    """Add the ``rigs`` subcommand."""
    parser = subparsers.add_parser(
        "rigs",
        help="list built-in targets and bone-name conventions; show a target's automatic mapping",
        description=("List the built-in targets and the bone-naming conventions the automatic mapping "
                     "understands. With --target, load that rig and print the canonical joint -> bone "
                     "mapping found (the format --mapping reads)."),
    )
    parser.add_argument("--target", metavar="TARGET", default=None,
                        help="a .blend/.fbx/.glb/.gltf/.bvh file or a built-in name: print its automatic mapping")
    parser.add_argument("--armature", metavar="NAME", default=None, help="armature when TARGET holds several")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _mapping_of(spec, armature):
    from ..blender_io.bake import auto_mapping
    from ..blender_io.rig import rig_description
    from ..blender_io.targets import load_target
    from ..retarget.mapping import humanoid_check

    target = load_target(spec, armature)
    mapping = auto_mapping(rig_description(target.obj))   # (the bake's own: a generated Rigify rig's controls)
    return target, mapping, humanoid_check(mapping)


@guarded
def run(args):
    """Print the listing (or a target's mapping); returns 0, 1 or 2."""
    from ..model.skeleton import JOINTS
    from ..retarget.conventions import CONVENTIONS
    from ..blender_io.targets import BUILTIN_TARGETS, TARGET_EXTENSIONS, check_target

    if args.target is not None:
        check_target(args.target)
        try:
            target, mapping, missing = _mapping_of(args.target, args.armature)
        except (ValueError, RuntimeError) as ex:
            raise CliError("--target {}: {}".format(args.target, ex)) from None
        if args.json:
            data = mapping.to_dict()
            data["armature"] = target.obj.name
            data["humanoid_errors"] = missing
            print(json.dumps(data, indent=2))
        else:
            print("{} (armature {!r}, {} bones)".format(args.target, target.obj.name, len(target.obj.data.bones)))
            width = max(len(j) for j in JOINTS)
            for joint in JOINTS:
                bone = mapping.entries.get(joint)
                conf = mapping.confidence.get(joint)
                print("  {}  {}{}".format(joint.ljust(width), bone if bone else "-",
                                          "  ({:.2f})".format(conf) if bone and conf is not None else ""))
            if mapping.extra_spine:
                print("  extra spine bones: " + ", ".join(mapping.extra_spine))
            if missing:
                print("  not usable as a humanoid: " + "; ".join(map(str, missing)))
        return 1 if missing else 0

    if args.json:
        print(json.dumps({"builtin_targets": BUILTIN_TARGETS, "target_files": list(TARGET_EXTENSIONS),
                          "conventions": CONVENTIONS}, indent=2))
        return 0
    print("Built-in targets (--target NAME):")
    for name, desc in BUILTIN_TARGETS.items():
        print("  {}  {}".format(name, desc))
    print("Target files: " + ", ".join(TARGET_EXTENSIONS) + " (--armature NAME when a file holds several)")
    print()
    print("Bone-name conventions of the automatic mapping (example names):")
    for name, examples in CONVENTIONS.items():
        print(textwrap.fill(", ".join(examples), width=100, initial_indent="  {}: ".format(name),
                            subsequent_indent="      "))
    print()
    print("Override the automatic mapping with --mapping BONES.json ({\"pelvis\": \"hips\", ...}); "
          "`rigs --target FILE --json` writes one to start from.")
    sys.stdout.flush()
    return 0
