"""``info``: versions, the compute device in use and the weights file."""

import hashlib
import os
import platform
import sys

from .parser import add_device_argument, device_choice, precision_choice

#: Weights file relative to the package root.
WEIGHTS_RELPATH = os.path.join("weights", "neural_ik.pt")


def default_weights_path():
    """Return the weights file shipped with the package (it may be missing).

    Returns
    -------
    str
        ``<package root>/weights/neural_ik.pt``.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, WEIGHTS_RELPATH)


def add_parser(subparsers):
    """Add the ``info`` subcommand."""
    parser = subparsers.add_parser(
        "info",
        help="show versions, the compute device and the weights file",
        description=(
            "Print the Blender, Python, torch and numpy versions, the compute device in use "
            "and the weights file with its size and sha256. Always exits 0; a missing or "
            "corrupt weights file is reported, not raised."
        ),
    )
    add_device_argument(parser)
    parser.add_argument(
        "--weights",
        metavar="PATH",
        default=None,
        help="weights file to check (default: weights/neural_ik.pt in the package)",
    )
    return parser


def _version(module_name):
    try:
        module = __import__(module_name)
    except Exception as ex:
        return "not available ({}: {})".format(type(ex).__name__, ex)
    return str(getattr(module, "__version__", "unknown"))


def blender_version():
    """Return Blender's version string, or a note when ``bpy`` does not import."""
    try:
        import bpy
    except Exception as ex:
        return "not available ({}: {})".format(type(ex).__name__, ex)
    return bpy.app.version_string


def sha256_of(path, chunk_size=1 << 20):
    """Return the hex sha256 of a file.

    Parameters
    ----------
    path : str
    chunk_size : int

    Returns
    -------
    str
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_report(path):
    """Describe a weights file without raising.

    Parameters
    ----------
    path : str

    Returns
    -------
    list of (str, str)
        ``("weights", path)``, then either ``("weights status", "missing")`` or
        size, sha256 and ``("weights status", "ok" | "corrupt: <reason>" | "unusable: <reason>" | ...)``
        ("unusable": a Neural IK weights file of another format version).
    """
    rows = [("weights", path)]
    if not os.path.isfile(path):
        return rows + [("weights status", "missing")]
    try:
        rows.append(("weights size", "{} bytes".format(os.path.getsize(path))))
        rows.append(("weights sha256", sha256_of(path)))
    except OSError as ex:
        return rows + [("weights status", "unreadable: {}".format(ex))]
    import zipfile
    if not zipfile.is_zipfile(path):
        return rows + [("weights status", "corrupt: not a PyTorch checkpoint (expected a zip archive from torch.save)")]
    from ..model.weights import read_with_torch
    from ..model.weights_file import read_torch_file   # (no torch needed to read it)
    try:
        blob = read_torch_file(path)
    except Exception as ex:
        blob = read_with_torch(path)   # (another torch version's file, where torch reads it)
        if blob is None:
            text = " ".join(str(ex).split())
            reason = text.split(". ")[0][:200]
            return rows + [("weights status", "corrupt: {}: {}".format(type(ex).__name__, reason))]
    if isinstance(blob, dict) and blob.get("format") == "neural_ik":
        from ..model.inference import format_version_problem

        problem = format_version_problem(path, blob.get("format_version"))
        if problem:
            return rows + [("weights status", "unusable: " + problem)]
    return rows + [("weights status", "ok")]


def _precision_in_use(args, in_use):
    """``--precision`` and what the network computes in on the CPU with it, e.g. "auto (float32 in numpy up
    to 8192 frames, bfloat16 above on the CPU)"."""
    choice = precision_choice(args)
    if str(in_use).startswith("none"):
        return choice
    from ..model.inference import NUMPY_MAX_FRAMES, resolve_precision

    torch_layers = resolve_precision(choice)
    if choice == "bfloat16":
        return "{} ({} on the CPU)".format(choice, torch_layers)
    return "{} (float32 in numpy up to {} frames, {} above on the CPU)".format(choice, NUMPY_MAX_FRAMES, torch_layers)


def run(args):
    """Print the report; returns 0."""
    import warnings

    from .. import device

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.torch_version() is None:
            in_use = "none (PyTorch is not installed)"
        else:
            in_use = device.resolve_device(device_choice(args))
    rows = [
        ("blender", blender_version()),
        ("python", "{} ({})".format(platform.python_version(), sys.executable)),
        ("torch", _version("torch")),
        ("numpy", _version("numpy")),
        ("device setting", device_choice(args)),
        ("device in use", in_use),
        ("precision", _precision_in_use(args, in_use)),
    ]
    rows += weights_report(os.path.abspath(args.weights) if args.weights else default_weights_path())
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print("{}  {}".format(key.ljust(width), value))
    for warning in caught:
        print("warning: {}".format(warning.message), file=sys.stderr)
    return 0
