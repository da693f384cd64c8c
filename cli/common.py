"""Shared pieces of the ``bake``, ``batch`` and ``demo`` subcommands.

- :func:`add_bake_arguments`: the bake flags, identical for ``bake`` and
  ``batch``, and :func:`bake_options` turning them into a ``BakeOptions``.
- :class:`CliError`: a user error (message naming the file and the problem,
  exit code), printed without a traceback by :func:`guarded`.
- :class:`Progress`: the progress line on stderr (clip i of n, frames per
  second, time left); silent with ``--quiet``.
- :func:`atomic_output`: write to a temporary name next to the output, rename
  when complete; temporary files still pending are removed by
  :func:`remove_pending`.
- :func:`read_source`, :func:`bake_one`: read a keypoint file and bake it onto
  an armature, returning one report row.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import sys
import tempfile
import time

from .names import check_name_length, temp_stem
from .limits import FPS_RANGE, SCALE_RANGE, bounded_float
from .parser import add_device_argument, device_choice

__all__ = [
    "CliError",
    "UsageError",
    "add_bake_arguments",
    "bake_options",
    "parse_frames",
    "resolve_frames",
    "check_output_paths",
    "check_writable_folder",
    "path_inside",
    "FRAME_MIN",
    "FRAME_MAX",
    "Progress",
    "atomic_output",
    "remove_pending",
    "write_json",
    "check_saved_blend",
    "emit_report",
    "read_source",
    "peek_frame_count",
    "check_frame_count",
    "MAX_FRAMES",
    "load_bone_mapping",
    "bake_one",
    "release_motion",
    "summary",
    "guarded",
    "SOURCE_EXTENSIONS",
]

#: Keypoint files ``bake`` and ``batch`` read (FBX and glTF through Blender's importers, a ``.blend``'s
#: animated armature).
SOURCE_EXTENSIONS = (".npz", ".npy", ".json", ".csv", ".trc", ".c3d", ".bvh", ".fbx", ".glb", ".gltf", ".blend")
SMOOTH_CHOICES = ("none", "oneeuro", "savgol", "butter")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Blender's scene frame limits (``MINAFRAME``..``MAXFRAME``).
FRAME_MIN, FRAME_MAX = -1048574, 1048574
#: Default of ``--max-frames``: longer clips are refused before any long work.
MAX_FRAMES = 1_000_000


class CliError(Exception):
    """A user error: printed as ``neural-ik: <message>`` without a traceback.

    Parameters
    ----------
    message : str
        Names the file and the problem.
    code : int
        Exit code (1 failure, 2 bad arguments).
    """

    def __init__(self, message, code=EXIT_FAILED):
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    """Bad arguments (exit code 2)."""

    def __init__(self, message):
        super().__init__(message, EXIT_USAGE)


def guarded(run):
    """Wrap a subcommand's ``run(args)``: a :class:`CliError` prints its message and returns its code.

    Parameters
    ----------
    run : callable
        ``run(args) -> int``.

    Returns
    -------
    callable
    """

    def wrapper(args):
        try:
            return run(args)
        except CliError as ex:
            print("neural-ik {}: error: {}".format(getattr(args, "command", ""), ex), file=sys.stderr)
            return ex.code

    wrapper.__doc__ = run.__doc__
    wrapper.__name__ = run.__name__
    return wrapper


# ---------------------------------------------------------------------------
# arguments


def parse_frames(text):
    """Parse ``A:B`` (source frames A up to B, B excluded; either may be empty).

    Parameters
    ----------
    text : str

    Returns
    -------
    tuple of (int or None, int or None)

    Raises
    ------
    argparse.ArgumentTypeError
    """
    parts = str(text).split(":")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError("expected A:B (e.g. 0:120, 30: or :90), got {!r}".format(text))
    try:
        a = int(parts[0]) if parts[0].strip() else None
        b = int(parts[1]) if parts[1].strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError("frames must be integers A:B, got {!r}".format(text)) from None
    if (a is not None and a < 0) or (b is not None and b < 0):
        raise argparse.ArgumentTypeError("frames must not be negative, got {!r}".format(text))
    if a is not None and b is not None and b <= a:
        raise argparse.ArgumentTypeError("empty frame range {!r} (B must be greater than A)".format(text))
    return a, b


def resolve_frames(frames, n_frames, source):
    """Resolve ``--frames A:B`` (open ends allowed) against a clip of ``n_frames`` frames.

    Parameters
    ----------
    frames : tuple of (int or None, int or None) or None
        As parsed by :func:`parse_frames`.
    n_frames : int
        Frames of the source clip.
    source : str
        The file, for messages.

    Returns
    -------
    tuple of (int, int) or None
        ``(A, B)`` with ``0 <= A < B <= n_frames`` (B excluded), from
        ``pipeline.prepare.resolve_frames``; ``None`` when ``frames`` is ``None``.

    Raises
    ------
    CliError
        The range lies outside the clip (the message names the file and the flag).
    """
    if frames is None:
        return None
    from ..pipeline.options import BakeError
    from ..pipeline.prepare import resolve_frames as _resolve

    given = "{}:{}".format("" if frames[0] is None else frames[0], "" if frames[1] is None else frames[1])
    try:
        return _resolve(frames, int(n_frames))
    except BakeError as ex:
        raise CliError("{}: --frames {}: {}".format(source, given, ex)) from None


def _frame_number(text):
    """A scene frame within Blender's limits."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: {!r}".format(text)) from None
    if not FRAME_MIN <= value <= FRAME_MAX:
        raise argparse.ArgumentTypeError("{} is outside Blender's frame range {}..{}".format(
            value, FRAME_MIN, FRAME_MAX))
    return value


def int_at_least(minimum, meaning=""):
    """An argparse type: a whole number of at least ``minimum`` (``meaning`` said in the message)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a whole number: {!r}".format(text)) from None
        if value < minimum:
            raise argparse.ArgumentTypeError("must be at least {}{}, got {!r}".format(
                minimum, " ({})".format(meaning) if meaning else "", text))
        return value

    return parse


_positive_int = int_at_least(1)


def _unit_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: {!r}".format(text)) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1, got {!r}".format(text))
    return value


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
    parser.add_argument("--target-units", choices=("m", "cm", "mm", "in", "cmu"), default=None,
                        help="units of a .bvh TARGET (default: guessed from its skeleton's height, as for a "
                             "source); its bones keep them, the armature object is scaled to metres")
    parser.add_argument("--target-up-axis", choices=("Z", "Y", "-Y", "-Z"), default=None,
                        help="up axis of a .bvh TARGET (default: detected from its skeleton, as for a source)")


def add_bake_arguments(parser):
    """Add the bake flags shared by ``bake`` and ``batch``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    add_target_arguments(parser)
    g = parser.add_argument_group("source")
    g.add_argument("--layout", metavar="NAME|MAPPING.json", default=None,
                   help="keypoint layout of the source (see `layouts`) or a JSON mapping of source names to "
                        "canonical keypoints (default: detected from the joint names)")
    g.add_argument("--units", default=None, choices=("m", "cm", "mm", "in", "cmu"),
                   help="units of the source: metres, centimetres, millimetres, inches or CMU units "
                        "(1/0.45 inch) (default: the file's, or detected from the body's height)")
    g.add_argument("--up-axis", default=None, choices=("Z", "Y", "-Y", "-Z"),
                   help="up axis of the source (default: the file's, else detected from the motion: "
                        "feet to head)")
    g.add_argument("--source-fps", type=bounded_float(*FPS_RANGE, "frames per second"), default=None, metavar="FPS",
                   help="frame rate of the source when the file has none or a wrong one")
    g.add_argument("--image-size", nargs=2, type=int_at_least(1, "pixels"), default=None, metavar=("W", "H"),
                   help="width and height in pixels of the video that MediaPipe image landmarks (.json, x and y "
                        "between 0 and 1) were taken from: lifts them to 3D (default: they are refused)")
    g.add_argument("--frames", type=parse_frames, default=None, metavar="A:B",
                   help="bake source frames A up to B (B excluded; A: or :B for open ends)")
    g = parser.add_argument_group("bake")
    g.add_argument("--mapping", metavar="BONES.json", default=None,
                   help="canonical joint -> bone mapping of the target (default: automatic)")
    g.add_argument("--fps", type=bounded_float(*FPS_RANGE, "frames per second"), default=None,
                   help="frame rate of the baked action (default: the source's)")
    g.add_argument("--frame-start", type=_frame_number, default=None, metavar="N",
                   help="scene frame of the first baked frame, {}..{} (default: the scene's start frame)".format(
                       FRAME_MIN, FRAME_MAX))
    g.add_argument("--smooth", choices=SMOOTH_CHOICES, default="none", help="temporal smoothing (default: none)")
    g.add_argument("--smooth-strength", type=_unit_float, default=0.5, metavar="X",
                   help="smoothing strength between 0 and 1 (default: 0.5)")
    g.add_argument("--smooth-target", default="both", choices=("keypoints", "rotations", "both"),
                   help="what --smooth filters: the input keypoints, the baked rotations or both (default: both)")
    g.add_argument("--mode", default="auto", choices=("auto", "dense", "sparse"),
                   help="solve mode: dense (most keypoints), sparse (pelvis, head, hands, feet) or auto "
                        "(sparse when the source holds only effectors; default)")
    g.add_argument("--scale", type=bounded_float(*SCALE_RANGE, "armature units per source metre"), default=None,
                   metavar="X",
                   help="armature units per source metre for the root motion (default: the ratio of the "
                        "target's leg length to the source's)")
    g.add_argument("--refine", action=argparse.BooleanOptionalAction, default=True,
                   help="refine the network's solve by optimisation (default: on)")
    g.add_argument("--in-place", action="store_true", help="remove the root's horizontal travel")
    g.add_argument("--ground", action=argparse.BooleanOptionalAction, default=True,
                   help="move the clip vertically so its lowest foot point touches the floor (z = 0) and "
                        "report the shift (default: on; --no-ground keeps the file's heights)")
    g.add_argument("--foot-lock", action=argparse.BooleanOptionalAction, default=True,
                   help="keep the feet planted where the source's are (two-bone IK on the legs; "
                        "default: on)")
    g.add_argument("--rotation-mode", default="BONE", choices=("QUATERNION", "BONE"),
                   help="rotation channels written: QUATERNION (bones switched to quaternions) or BONE "
                        "(each bone's own rotation mode, the rig's settings untouched); default BONE")
    g.add_argument("--max-frames", type=_positive_int, default=MAX_FRAMES, metavar="N",
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

    Accepts the ``BoneMapping.to_json`` format or a flat ``{joint: bone}`` object.

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


# ---------------------------------------------------------------------------
# progress


def _duration(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return "{}h{:02d}m".format(seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return "{}m{:02d}s".format(seconds // 60, seconds % 60)
    return "{}s".format(seconds)


class Progress:
    """Progress line on stderr: clip i of n, frames per second, time left.

    On a terminal the line is rewritten in place; otherwise one line is
    written per update, at most every ``interval`` seconds.

    Parameters
    ----------
    total_clips : int
    total_frames : int
        Frames of all clips (for the time left).
    quiet : bool
        Write nothing.
    stream : file, optional
        Default ``sys.stderr``.
    """

    def __init__(self, total_clips, total_frames=0, quiet=False, stream=None, interval=1.0):
        self.total_clips = total_clips
        self.total_frames = max(int(total_frames), 0)
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.interval = interval
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.frames_done = 0
        self.clip_index = 0
        self.clip_name = ""
        self.clip_frames = 0
        self._last = 0.0
        self._open = False

    def begin_clip(self, index, name, frames):
        """Start clip ``index`` (1-based) named ``name`` with ``frames`` frames."""
        self.clip_index, self.clip_name, self.clip_frames = index, name, int(frames)
        self.update(0, 1, force=True)

    def update(self, done, total, stage="", force=False):
        """Report ``done`` of ``total`` work units of the current clip."""
        if not self._due(force):
            return
        frac = (done / total) if total else 0.0
        self._write("clip {}/{} {}: {}{:3.0f}%".format(self.clip_index, self.total_clips, self.clip_name,
                                                      (stage + " ") if stage else "", 100 * frac),
                    self.frames_done + frac * self.clip_frames)

    def update_many(self, done_clips, baking, frames_now, force=False):
        """Report clips baked at once: ``baking`` names them with their stage, ``frames_now`` counts
        the batch's frames so far (finished clips plus the baked share of those in progress)."""
        if self._due(force):
            self._write("clips {}/{} done, baking {}".format(done_clips, self.total_clips, baking or "-"),
                        frames_now)

    def _due(self, force):
        """Whether a progress line is due (one a second, five a second on a terminal)."""
        if self.quiet:
            return False
        now = time.perf_counter()
        if not force and now - self._last < (0.2 if self.tty else self.interval):
            return False
        self._last = now
        return True

    def _write(self, head, frames_now):
        """``head``, the rate over the run so far and the time left; in place on a terminal."""
        elapsed = time.perf_counter() - self.start
        rate = frames_now / elapsed if elapsed > 0 and frames_now > 0 else 0.0
        left = ""
        if rate > 0 and self.total_frames:
            left = ", {} left".format(_duration(max(self.total_frames - frames_now, 0) / rate))
        line = "{}, {:.0f} frames/s{}".format(head, rate, left)
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self._open = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end_clip(self, status=""):
        """Finish the current clip (counts its frames as done)."""
        self.frames_done += self.clip_frames
        self.message("clip {}/{} {}: {}".format(self.clip_index, self.total_clips, self.clip_name, status))

    def message(self, text):
        """Write a whole line (clears an in-place line first)."""
        if self.quiet:
            return
        if self._open:
            self.stream.write("\r\033[K")
            self._open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def callback(self, stage=""):
        """A ``progress(done, total)`` callable for the bake pipeline."""
        return lambda fraction, name=stage: self.update(float(fraction), 1.0, name or stage)


# ---------------------------------------------------------------------------
# output paths, checked before any work


def _same_key(path):
    """Comparison key of a path: resolved links, case folded where the file system folds it."""
    return os.path.normcase(os.path.realpath(os.path.abspath(path)))


def path_inside(path, folder):
    """Whether ``path`` is ``folder`` or lies below it (after resolving links)."""
    path, folder = _same_key(path), _same_key(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_writable_folder(folder, what):
    """Check that files can be created in ``folder`` (or in the nearest existing folder above it).

    A file is created there and removed again: permission bits say nothing
    for root or on a read-only mount.

    Parameters
    ----------
    folder : str
    what : str
        ``"--out x.blend"``, for messages.

    Raises
    ------
    UsageError
        A parent is a file, or the folder is not writable.
    """
    folder = os.path.abspath(folder)
    existing = folder
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        raise UsageError("{}: {} is a file, not a folder".format(what, existing))
    try:
        fd, probe = tempfile.mkstemp(prefix=".neural_ik-write-check-", dir=existing)
    except OSError as ex:
        raise UsageError("{}: cannot write in the folder {} ({})".format(
            what, existing, ex.strerror or ex)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_paths(outputs, inputs=()):
    """Check every output path before any work.

    Parameters
    ----------
    outputs : list of (str, str)
        ``(flag, path)`` pairs, e.g. ``("--out", "walk.blend")``; a path of
        ``"-"`` (stdout) is skipped.
    inputs : iterable of str
        Files the run reads (source, target, mapping); no output may replace one.

    Raises
    ------
    UsageError
        An output is a folder or not a regular file, its folder is not
        writable or a parent is a file, two outputs are the same file, or an
        output is one of the inputs.
    """
    seen = {}
    input_keys = {_same_key(p): p for p in inputs if p}
    checked = set()
    for flag, path in outputs:
        if path is None or path == "-":
            continue
        what = "{} {}".format(flag, path)
        if os.path.isdir(path):
            raise UsageError("{}: is a folder; give a file name".format(what))
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError("{}: exists and is not a regular file".format(what))
        too_long = check_name_length(path)
        if too_long:
            raise UsageError("{}: {}".format(what, too_long))
        key = _same_key(path)
        if key in seen:
            raise UsageError("{}: the same file as {}; give each output its own name".format(what, seen[key]))
        seen[key] = what
        if key in input_keys:
            raise UsageError("{}: would replace the input {}".format(what, input_keys[key]))
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in checked:
            check_writable_folder(folder, what)
            checked.add(folder)


# ---------------------------------------------------------------------------
# atomic outputs

_PENDING = set()
#: Temporary names of :func:`atomic_output` (``.walk.x8k2.partial.bvh`` for ``walk.bvh``).
_PARTIAL_PREFIX, _PARTIAL_SUFFIX = ".{}.", ".partial{}"


@contextlib.contextmanager
def atomic_output(path):
    """Yield a temporary path next to ``path``; rename it to ``path`` on success.

    The temporary name keeps the extension (exporters check it) and starts
    with a dot. On any exception (including ``KeyboardInterrupt``) the
    temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str
    """
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    stem, ext = os.path.splitext(os.path.basename(path))
    stem = temp_stem(stem)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_PARTIAL_PREFIX.format(stem), suffix=_PARTIAL_SUFFIX.format(ext),
                                   dir=folder)
    except OSError as ex:
        raise CliError("{}: cannot write ({})".format(path, ex.strerror or ex)) from None
    os.close(fd)
    os.unlink(tmp)  # exporters create it themselves
    _PENDING.add(tmp)
    try:
        try:
            yield tmp
            if not os.path.isfile(tmp):
                raise CliError("{}: the writer produced no file".format(path))
            os.replace(tmp, path)
        except OSError as ex:  # a full disk, a file too large, a folder removed meanwhile
            raise CliError("{}: cannot write ({}); the previous file, if any, is unchanged".format(
                path, ex.strerror or ex)) from None
    finally:
        _PENDING.discard(tmp)
        _unlink_temporary(tmp)


def check_saved_blend(tmp, path):
    """Check that a ``.blend`` Blender just wrote to ``tmp`` reads back whole.

    Blender's (compressed) ``.blend`` writer does not notice a short write:
    on a full disk or past the process's file-size limit it reports
    success and leaves a truncated file. Reading the file's data-block list
    back catches that before the file replaces ``path``.

    Parameters
    ----------
    tmp : str
        The temporary file written.
    path : str
        The output it will become (for messages).

    Raises
    ------
    CliError
        The file is incomplete; the message gives the likely cause (a full
        disk, the file-size limit) when it can be told.
    """
    import errno

    import bpy

    try:
        with bpy.data.libraries.load(tmp, link=False) as (data_from, _data_to):
            list(data_from.actions)
        return
    except (OSError, RuntimeError) as ex:
        problem = " ".join(str(ex).replace(tmp, os.path.basename(path)).split())
    size = os.path.getsize(tmp) if os.path.isfile(tmp) else 0
    cause = "the written file is incomplete ({})".format(problem)
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and size >= soft:
            cause = "{}: the file stops at this process's file-size limit of {} bytes".format(
                os.strerror(errno.EFBIG), soft)
    except (ImportError, OSError, ValueError):  # pragma: no cover (Windows)
        pass
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(tmp)))
        if st.f_bavail * st.f_frsize < max(size, 1 << 20):
            cause = "{}: the written file is incomplete".format(os.strerror(errno.ENOSPC))
    except (AttributeError, OSError):  # pragma: no cover
        pass
    raise CliError("{}: cannot save ({}); the previous file, if any, is unchanged".format(path, cause))


def remove_pending():
    """Remove temporary output files not renamed yet (on an interrupted run)."""
    for tmp in list(_PENDING):
        _unlink_temporary(tmp)
        _PENDING.discard(tmp)


def remove_partials(path):
    """Remove the temporary files :func:`atomic_output` made for ``path`` in another process (one killed
    before it could remove them: ``remove_pending`` only knows this process's)."""
    folder = os.path.dirname(os.path.abspath(path))
    stem, ext = os.path.splitext(os.path.basename(path))
    stem = temp_stem(stem)
    pattern = glob.escape(_PARTIAL_PREFIX.format(stem)) + "*" + glob.escape(_PARTIAL_SUFFIX.format(ext))
    for left in glob.glob(os.path.join(glob.escape(folder), pattern)):
        _unlink_temporary(left)


def _unlink_temporary(tmp):
    """Remove a temporary output and Blender's backup / save-in-progress names of it, where they exist."""
    for leftover in (tmp, tmp + "1", tmp + "@"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def write_json(path, data):
    """Write JSON atomically (temporary name, then rename)."""
    text = json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n"
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)


def _json_default(value):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None:
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def emit_report(destination, report):
    """Write the report to a file, or print it to stdout when ``destination`` is ``-``.

    Parameters
    ----------
    destination : str or None
        Nothing is written when ``None``.
    report : dict
    """
    if destination is None:
        return
    if destination == "-":
        sys.stdout.write(json.dumps(report, indent=2, default=_json_default) + "\n")
        sys.stdout.flush()
        return
    write_json(destination, report)


# ---------------------------------------------------------------------------
# reading and baking


def check_source_path(path):
    """Validate a SOURCE argument (exit code 2 when missing or of an unknown type; 1 for a folder of 2D frames)."""
    from ..readers.image2d import openpose_frames

    if openpose_frames(path):   # an OpenPose output folder: named and refused as 2D image keypoints
        from ..readers import KeypointReadError, read_keypoints

        try:
            read_keypoints(path)
        except KeypointReadError as ex:
            raise CliError(str(ex)) from None
    ext = os.path.splitext(path)[1].lower()
    if ext not in SOURCE_EXTENSIONS:
        raise UsageError("{}: unknown source type {!r}; readable: {}".format(
            path, ext or "(none)", ", ".join(SOURCE_EXTENSIONS)))
    from .pathcheck import not_a_file

    why = not_a_file(path)
    if why is not None:
        raise UsageError("{}: {}".format(path, why))


def peek_frame_count(path):
    """Frame count of a ``.npz`` (keypoints, AMASS), ``.npy`` or ``.bvh`` file from its header only, else ``None``.

    Lets ``--max-frames`` refuse a huge file before it is loaded. Anything
    unexpected returns ``None`` (the reader reports bad files).
    """
    import zipfile

    import numpy as np

    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".npy", ".npz"):
            with contextlib.ExitStack() as stack:
                if ext == ".npz":   # keypoints, or an AMASS motion's rotations
                    archive = stack.enter_context(zipfile.ZipFile(path))
                    member = next((m for m in ("positions.npy", "poses.npy", "root_orient.npy")
                                   if m in archive.namelist()), None)
                    if member is None:
                        return None
                    handle = stack.enter_context(archive.open(member))
                else:
                    handle = stack.enter_context(open(path, "rb"))
                version = np.lib.format.read_magic(handle)
                shape = (np.lib.format.read_array_header_1_0(handle) if version == (1, 0)
                         else np.lib.format.read_array_header_2_0(handle))[0]
                return int(shape[0]) if len(shape) else None
        if ext == ".bvh":
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    parts = line.replace(":", " : ").split()
                    if len(parts) == 3 and parts[0].lower() == "frames" and parts[1] == ":":
                        return int(parts[2])
    except (OSError, ValueError, zipfile.BadZipFile, IndexError, TypeError):
        return None
    return None


def check_frame_count(source, n_source, max_frames, *, n_baked=None, source_fps=None, fps=None):
    """Refuse a clip longer than ``--max-frames`` (:class:`CliError` naming the file, the count and the flag).

    Parameters
    ----------
    source : str
    n_source : int
        Source frames (after ``--frames``).
    max_frames : int
    n_baked, source_fps, fps : optional
        Frames after resampling from ``source_fps`` to ``fps``.
    """
    if max_frames is None:
        return
    if n_source > max_frames:
        raise CliError("{}: {:,} frames, more than --max-frames {:,} (raise --max-frames to bake it, or bake a "
                       "part with --frames A:B)".format(source, n_source, max_frames))
    if n_baked is not None and n_baked > max_frames:
        raise CliError("{}: {:,} frames at {:g} fps resample to {:,} frames at {:g} fps, more than --max-frames "
                       "{:,} (lower --fps or raise --max-frames)".format(source, n_source, source_fps, n_baked,
                                                                         fps, max_frames))


def read_source(path, args):
    """Read a keypoint file into a ``KeypointClip``.

    Parameters
    ----------
    path : str
    args : argparse.Namespace
        ``layout``, ``units``, ``up_axis``, ``source_fps``, ``ground``.

    Returns
    -------
    readers.KeypointClip

    Raises
    ------
    readers.KeypointReadError
    """
    from ..readers import KeypointReadError, read_keypoints

    kwargs = dict(layout=getattr(args, "layout", None), units=getattr(args, "units", None),
                  up_axis=getattr(args, "up_axis", None), fps=getattr(args, "source_fps", None),
                  ground=getattr(args, "ground", True))
    try:
        if path.lower().endswith((".fbx", ".glb", ".gltf", ".blend")):
            from ..blender_io.armature_source import read_armature_file

            return read_armature_file(path, **kwargs)
        return read_keypoints(path, image_size=getattr(args, "image_size", None), **kwargs)
    except RecursionError:  # json's decoder on thousands of nested brackets
        raise KeypointReadError(path, "nested too deeply to be read (thousands of nested brackets: not a "
                                "keypoint file?)") from None


def _rounded(value, digits=3):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return value
    return round(value, digits) if math.isfinite(value) else None


def result_row(result, clip, source, target, seconds):
    """Turn a ``BakeResult`` into a report row.

    Parameters
    ----------
    result : blender_io.bake.BakeResult
    clip : readers.KeypointClip
    source, target : str
    seconds : dict
        Stage timings measured here (``read``, ``export``...), merged with
        the pipeline's own (``solve``, ``fit``, ``write``).

    Returns
    -------
    dict
    """
    stages = {"read": 0.0, "solve": 0.0, "fit": 0.0, "write": 0.0, "export": 0.0}
    for key, value in dict(getattr(result, "seconds", {}) or {}).items():
        stages[key] = float(value)
    for key, value in seconds.items():
        stages[key] = stages.get(key, 0.0) + float(value)
    total = sum(stages.values())
    frames = int(result.frames)
    err = getattr(result, "keypoint_error_mm", None) or (None, None)
    fig = getattr(result, "figures", None)
    warnings = list(getattr(clip, "warnings", []) or []) + list(getattr(result, "warnings", []) or [])
    return {
        "source": source,
        "target": target,
        "status": "done",
        "action": result.action.name if getattr(result, "action", None) is not None else None,
        "frames": frames,
        "fps": _rounded(result.fps),
        "frame_start": getattr(result, "frame_start", None),
        "layout": getattr(clip, "layout", None),
        "mode": getattr(result, "mode", None),
        "start": getattr(result, "start", None) or None,
        "seconds": {k: round(v, 4) for k, v in stages.items()},
        "seconds_total": round(total, 4),
        "frames_per_second": round(frames / total, 2) if total > 0 else None,
        "effector_reach_mm": {"mean": _rounded(fig.effector_reach_mm[0], 3),
                              "max": _rounded(fig.effector_reach_mm[1], 3)} if fig else None,
        "floor_error_cm": _rounded(fig.floor_error_cm, 2) if fig else None,
        "joint_error_mm": {"mean": _rounded(fig.joint_error_mm[0], 2),
                           "max": _rounded(fig.joint_error_mm[1], 2)} if fig else None,
        "upright_share": _rounded(fig.upright_share, 4) if fig else None,
        "source_upright_share": _rounded(fig.source_upright_share, 4) if fig else None,
        "knees_backwards": int(fig.knees_backwards) if fig else None,
        "source_jitter": _rounded(fig.source_jitter, 4) if fig else None,
        "keypoint_error_mm": {"mean": _rounded(err[0], 2), "max": _rounded(err[1], 2)},
        "bone_direction_error_deg": _rounded(getattr(result, "bone_direction_error_deg", None), 3),
        "jitter": _rounded(getattr(result, "jitter", None), 4),
        "foot_sliding_mm": _rounded(getattr(result, "foot_sliding_mm", None), 3),
        "warnings": warnings,
        "outputs": [],
    }


def headline(row) -> str:
    """The figures that matter for a done clip row, in one line (floor, reach, directions)."""
    parts = []
    if row.get("floor_error_cm") is not None:
        parts.append("floor {:+.1f} cm".format(row["floor_error_cm"]))
    reach = (row.get("effector_reach_mm") or {}).get("max")
    if reach is not None and row.get("mode") == "sparse":   # (a keypoint bake has no effectors to reach)
        parts.append("effectors within {:.1f} mm".format(reach))
    if row.get("bone_direction_error_deg") is not None:
        parts.append("bone directions {:.1f}\u00b0".format(row["bone_direction_error_deg"]))
    if row.get("knees_backwards"):
        parts.append("knees backwards on {} frames".format(row["knees_backwards"]))
    return ", ".join(parts)


def bake_one(obj, clip, options, *, source_name, mapping=None, solver=None, progress=None, cancel=None,
             after_keys=None, preview=0):
    """Convert a clip to canonical keypoints and bake it onto ``obj``.

    The clip's motion is released (:func:`release_motion`) once the bake
    has taken what it reads, and the result's pose arrays
    (``result.retarget``) once the action holds them.

    Parameters
    ----------
    obj : bpy.types.Object
        The target armature.
    clip : readers.KeypointClip
    options : blender_io.bake.BakeOptions
    source_name : str
    mapping : retarget.mapping.BoneMapping, optional
    solver : model.inference.Solver, optional
    progress, cancel : callable, optional
    after_keys : callable, optional
        See :meth:`..blender_io.bake.BakeJob.run` (a file's armature: the
        exports, written while the figures are measured).
    preview : int
        Frames kept for a contact sheet (the result's ``preview``).

    Returns
    -------
    blender_io.bake.BakeResult
    """
    from ..blender_io.bake import BakeJob
    from ..readers import to_canonical

    keypoints, mask = to_canonical(clip)
    job = BakeJob(obj, keypoints, mask, clip.fps, options, source_name=source_name, mapping=mapping,
                  solver=solver, source_rig=getattr(clip, "source_rig", None))
    # the job holds what it reads (prepared, in the armature's axes): the clip's motion goes now
    # (hundreds of MB for a long clip), so that the bake's peak does not carry it
    del keypoints, mask
    release_motion(clip)
    result = job.run(progress, cancel, keep_pose=False, after_keys=after_keys, preview=preview)
    result.retarget = None   # the action holds the keys: the arrays go before the exports read it
    return result


def release_motion(clip):
    """Drop a read clip's per-frame arrays (``positions``, ``confidence``, ``source_rig``) once a bake took them.

    Its source, rate, layout, units, up axis and warnings stay (the report
    row reads them); it has no frames left.
    """
    import numpy as np

    clip.positions = np.zeros((0,) + tuple(np.shape(clip.positions)[1:]))
    clip.confidence = None
    clip.source_rig = None


def summary(rows, seconds, **extra):
    """The report's summary over clip rows.

    Parameters
    ----------
    rows : list of dict
    seconds : float
        Wall time of the whole run.

    Returns
    -------
    dict
    """
    done = [r for r in rows if r.get("status") == "done"]
    failed = [r for r in rows if r.get("status") == "failed"]
    skipped = [r for r in rows if r.get("status") == "skipped"]
    frames = sum(int(r.get("frames") or 0) for r in done)
    stages = {}
    for r in done:
        for key, value in (r.get("seconds") or {}).items():
            stages[key] = round(stages.get(key, 0.0) + float(value), 4)
    errs = [r["keypoint_error_mm"]["mean"] for r in done if (r.get("keypoint_error_mm") or {}).get("mean") is not None]
    maxs = [r["keypoint_error_mm"]["max"] for r in done if (r.get("keypoint_error_mm") or {}).get("max") is not None]
    dirs = [r["bone_direction_error_deg"] for r in done if r.get("bone_direction_error_deg") is not None]
    floors = [abs(r["floor_error_cm"]) for r in done if r.get("floor_error_cm") is not None]
    reach = [r["effector_reach_mm"]["max"] for r in done
             if (r.get("effector_reach_mm") or {}).get("max") is not None]
    out = {
        "clips": len(rows),
        "done": len(done),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_clips": [{"source": r["source"], "error": r.get("error")} for r in failed],
        "frames": frames,
        "seconds": round(seconds, 3),
        "seconds_by_stage": stages,
        "frames_per_second": round(frames / seconds, 2) if seconds > 0 and frames else None,
        "keypoint_error_mm": {
            "mean": round(sum(errs) / len(errs), 2) if errs else None,
            "max": round(max(maxs), 2) if maxs else None,
        },
        "bone_direction_error_deg": round(sum(dirs) / len(dirs), 3) if dirs else None,
        "floor_error_cm_max": round(max(floors), 2) if floors else None,
        "effector_reach_mm_max": round(max(reach), 3) if reach else None,
    }
    out.update(extra)
    return out
