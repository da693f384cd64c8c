"""The ``neural_ik`` argparse parser and its subcommand registry.

Adding a subcommand is a one-line change: create ``cli/<name>.py`` with

``add_parser(subparsers)``
    Add the subcommand with ``subparsers.add_parser("<name>", help=..., description=...)``
    and its arguments; return the new parser.
``run(args) -> int``
    Do the work and return the exit code (0 success, 1 failure, 2 usage error).

then append ``"<name>"`` to :data:`SUBCOMMANDS`. Keep heavy imports (torch,
bpy) inside ``run`` so ``--help`` stays fast.
"""

import argparse
import importlib
import sys
import traceback

from ..device import DEVICE_CHOICES, PRECISION_CHOICES

#: Subcommand modules of this package, in the order ``--help`` lists them.
SUBCOMMANDS = [
    "info",
    "bake",
    "batch",
    "layouts",
    "rigs",
    "demo",
]

#: Program name in usage messages when run inside Blender.
PROG_BLENDER = "blender --command neural_ik"
#: Program name in usage messages when run through the launcher.
PROG_STANDALONE = "neural-ik"


def add_device_argument(parser):
    """Add the shared ``--device {auto,cpu,cuda}`` and ``--precision {auto,float32,bfloat16}`` options.

    When omitted, the add-on preferences decide inside Blender and ``auto``
    is used by ``./neural-ik``; read the result with :func:`device_choice`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    parser.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default=None,
        help="compute device (default: the add-on preference in Blender, auto otherwise)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="auto",
        help="what the network's layers compute in on the CPU for clips over 8192 frames (torch; shorter "
             "clips run in numpy in float32): auto (bfloat16 where the CPU multiplies it natively, twice as "
             "fast; float32 elsewhere), float32 (the same numbers on every CPU) or bfloat16 (also for "
             "shorter clips) (default: auto)",
    )


def precision_choice(args):
    """The ``--precision`` of a parsed command line (``"auto"`` when it has none)."""
    return getattr(args, "precision", None) or "auto"


def device_choice(args):
    """Return the compute-device setting for a parsed command line.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    """
    return getattr(args, "device", None) or getattr(args, "default_device", None) or "auto"


#: Options whose values start with a dash (``-Z``): argparse would read the value as an option.
DASH_VALUE_OPTIONS = ("--up-axis", "--target-up-axis")


def join_negative_values(argv):
    """``--up-axis -Z`` as ``--up-axis=-Z``, so that argparse does not take ``-Z`` for an option."""
    out = []
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":  # everything after it is positional
            out.extend(argv[i:])
            break
        if arg in DASH_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].upper() in ("-X", "-Y", "-Z"):
            out.append("{}={}".format(arg, argv[i + 1]))
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def build_parser(prog=PROG_STANDALONE):
    """Build the parser with every subcommand in :data:`SUBCOMMANDS`.

    Parameters
    ----------
    prog : str
        Program name shown in usage messages.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Neural IK: inverse kinematics for humanoid armatures solved by a neural network.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module("." + name, __package__)
        sub = module.add_parser(subparsers)
        sub.set_defaults(run=module.run)
    return parser


def main(argv=None, prog=PROG_STANDALONE, default_device="auto"):
    """Parse ``argv`` and run the subcommand.

    Parameters
    ----------
    argv : list of str, optional
        Arguments after the program name; defaults to ``sys.argv[1:]``.
    prog : str
        Program name shown in usage messages.
    default_device : str
        Compute device used when ``--device`` is not given.

    Returns
    -------
    int
        Exit code: 0 success, 1 failure, 2 usage error (argparse's convention).
    """
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(prog)
    try:
        args = parser.parse_args(join_negative_values(argv))
    except SystemExit as ex:  # --help (0) or a usage error (2)
        return ex.code if isinstance(ex.code, int) else 2
    args.default_device = default_device
    try:
        code = args.run(args)
    except KeyboardInterrupt as ex:   # (a SIGTERM handled as Ctrl-C: 143, see cli/signals.py)
        return 143 if type(ex).__name__ == "Terminated" else 130
    except Exception:
        traceback.print_exc()
        print("{}: {} failed".format(prog, args.command), file=sys.stderr)
        return 1
    return int(code or 0)
