"""What a batch's outputs were baked from, stored beside them, so a rerun skips only what would not change.

A clip's outputs are up to date when they are newer than the clip *and*
were baked with the same settings: the flags that change the result, the
target file (its size and SHA-256), the ``--mapping`` and ``--layout``
files, the network weights (SHA-256), the tool's version and Blender's.
The record is ``DIR/.neural_ik_batch.json`` (one entry per clip, by output
name); a clip whose entry differs is baked again, and the report row says
what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

__all__ = ["RECORD_NAME", "RESULT_FLAGS", "settings", "describe_change", "read_record", "write_record",
           "source_identity"]

RECORD_NAME = ".neural_ik_batch.json"
#: Flags whose value changes the baked keys (``--device`` does not; ``--precision`` can).
RESULT_FLAGS = ("layout", "units", "up_axis", "source_fps", "image_size", "frames", "fps", "frame_start", "smooth",
                "smooth_strength", "smooth_target", "mode", "scale", "refine", "in_place", "ground", "foot_lock",
                "rotation_mode", "precision", "armature", "target_units", "target_up_axis", "mapping")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HASHES = {}


def file_identity(path):
    """``{"path", "size", "sha256"}`` of a file (hashed once per run)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return {"path": path, "size": st.st_size, "sha256": _HASHES[key]}


def _version():
    try:
        import tomllib

        with open(os.path.join(_PACKAGE, "blender_manifest.toml"), "rb") as fh:
            version = tomllib.load(fh).get("version")
    except (ImportError, OSError, ValueError):
        version = None
    bpy = sys.modules.get("bpy")
    if bpy is not None and hasattr(bpy, "app"):
        blender = "{}.{}.{}".format(*bpy.app.version)
    else:   # not imported: a bake without Blender must not import it (worker processes are forked then)
        try:
            from importlib.metadata import PackageNotFoundError, version as _dist_version

            blender = _dist_version("bpy")
        except (ImportError, PackageNotFoundError, ValueError):
            blender = None
    return {"neural_ik": version, "blender": blender}


def settings(args):
    """The fingerprint of a run's settings: a JSON-able dict (see the module docstring)."""
    flags = {}
    for name in RESULT_FLAGS:
        value = getattr(args, name, None)
        if name in ("mapping", "layout") and value and os.path.isfile(value):
            value = file_identity(value)["sha256"]
        flags[name] = list(value) if isinstance(value, tuple) else value
    target = args.target
    target = file_identity(target) if target and os.path.isfile(target) else {"name": target}
    weights = getattr(args, "weights", None) or os.path.join(_PACKAGE, "weights", "neural_ik.pt")
    weights = file_identity(weights)["sha256"] if os.path.isfile(weights) else None
    return {"flags": flags, "target": target, "weights": weights, "version": _version()}


def source_identity(path):
    """``{"size", "mtime_ns"}`` of a clip: a clip replaced by one of the same time is still noticed."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def describe_change(old, new):
    """Why ``old`` settings (a record's, or ``None``) differ from ``new`` (``None`` when they do not)."""
    if old is None:
        return "no record of the settings its outputs were baked with ({})".format(RECORD_NAME)
    parts = []
    for name in RESULT_FLAGS:
        a, b = (old.get("flags") or {}).get(name), new["flags"].get(name)
        if a != b:
            parts.append("--{} {} -> {}".format(name.replace("_", "-"), _shown(a), _shown(b)))
    if (old.get("target") or {}).get("sha256", old.get("target")) != new["target"].get("sha256", new["target"]):
        parts.append("the target {} changed".format(new["target"].get("path") or new["target"].get("name")))
    if old.get("weights") != new["weights"]:
        parts.append("the network weights changed")
    if old.get("version") != new["version"]:
        parts.append("the version changed ({} -> {})".format(_shown(old.get("version")), _shown(new["version"])))
    return "; ".join(parts) or None


def _shown(value):
    if isinstance(value, dict):
        return ", ".join("{} {}".format(k, v) for k, v in value.items())
    return "(none)" if value is None else str(value)


def read_record(out_dir):
    """The record of ``out_dir`` (``{}`` when missing or unreadable): output name -> entry."""
    try:
        with open(os.path.join(out_dir, RECORD_NAME), encoding="utf-8") as fh:
            data = json.load(fh)
        return dict(data.get("clips") or {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_record(out_dir, clips):
    """Write the record (``clips``: output name -> ``{"source", "source_file", "settings"}``)."""
    from ..outputs import write_json

    write_json(os.path.join(out_dir, RECORD_NAME), {"format": 1, "clips": clips})
