"""``layouts``: the keypoint layouts the readers know, with their joint names."""

from __future__ import annotations

import json
import textwrap

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    """Add the ``layouts`` subcommand."""
    parser = subparsers.add_parser(
        "layouts",
        help="list the keypoint layouts of source files",
        description=("List the keypoint layouts (joint naming schemes) the readers recognise, with their "
                     "joint names. Pass one with `bake --layout NAME`, or a JSON mapping file."),
    )
    parser.add_argument("name", nargs="?", default=None, help="show only this layout")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    return parser


def run(args):
    """Print the layouts; returns 0 (2 for an unknown name)."""
    import sys

    from ..readers import layout_table

    rows = layout_table()
    if args.name is not None:
        rows = [r for r in rows if r["name"].lower() == args.name.lower()]
        if not rows:
            names = ", ".join(r["name"] for r in layout_table())
            print("neural-ik layouts: error: unknown layout {!r}; known: {}".format(args.name, names),
                  file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print("{}  ({} joints) {}".format(row["name"], row["joints"], row["description"]))
        print(textwrap.fill("joints: " + ", ".join(row["joint_names"]), width=100,
                            initial_indent="  ", subsequent_indent="    "))
        print(textwrap.fill("gives: {} of 32 canonical keypoints".format(len(row["canonical"])), width=100,
                            initial_indent="  ", subsequent_indent="    "))
        if row.get("notes"):
            print(textwrap.fill("notes: " + row["notes"], width=100, initial_indent="  ",
                                subsequent_indent="    "))
        print()
    return 0
