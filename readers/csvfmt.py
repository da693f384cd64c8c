"""``.csv`` keypoints: one row per frame, ``<name>_x,<name>_y,<name>_z[,<name>_visibility]`` columns.

As exported by FreeMoCap (``nose_x, nose_y, nose_z, ...`` in millimetres,
or ``mediapipe_body_0_x`` numbered MediaPipe columns) and by scripts
dumping MediaPipe landmarks. An optional ``frame`` column is ignored; a
``time``/``timestamp`` column (seconds, or milliseconds when named ``*_ms``
or when steps are >= 1) gives the frame rate. Columns may be ``x``/``X``,
separated by ``_``, ``.`` or space; ``_visibility``, ``_confidence``,
``_score``, ``_likelihood`` or ``_presence`` columns give the confidence.
Empty cells and ``nan`` are missing. Units are guessed from the body size
unless given.

The body is parsed by numpy's C reader (``np.loadtxt`` straight from the
file, numpy >= 1.23); files with empty cells go through one
``np.fromstring`` call after turning empty cells into ``nan`` (no per-line
Python in either case), and only a malformed file is walked line by line to
name the bad line.

No ``bpy`` here.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from ..errors import setting
from .base import finish_clip
from .clip import KeypointReadError
from .layouts import LAYOUTS

__all__ = ["read_csv", "parse_numeric_table"]

_COORD = re.compile(r"^(?P<name>.+?)[_. ](?P<c>x|y|z|visibility|confidence|score|likelihood|presence)$", re.I)
_MP_NUMBERED = re.compile(r"^(?:mediapipe_)?(?:body_)?(?:landmark_)?(\d+)$", re.I)
_TIME = ("time", "timestamp", "time_s", "seconds", "t", "timestamp_ms", "time_ms")
_FRAME = ("frame", "frame_number", "frame_index", "frame#", "index", "")


def parse_numeric_table(path, body: str, ncols: int, sep: str = ",", first_line: int = 2) -> np.ndarray:
    """Parse rows of ``ncols`` separated numbers quickly; empty cells become NaN.

    Parameters
    ----------
    path : str
        For messages.
    body : str
        The data lines (no header).
    ncols : int
    sep : str
        ``","`` or ``"\\t"``.
    first_line : int
        File line number of the first body line (for messages).

    Raises
    ------
    KeypointReadError
        Ragged or truncated rows, or text that is not a number; the message
        gives the line.
    """
    body = body.replace("\r", "")
    lines_text = body.strip("\n")
    if "\n\n" in lines_text or "\n \n" in lines_text:  # blank lines inside
        lines_text = re.sub(r"\n[ \t]*(?=\n)", "", lines_text)
    if not lines_text.strip():
        return np.zeros((0, ncols))
    # empty cells -> nan, with plain str.replace (a regex is much slower)
    if (sep + sep) in lines_text or ("\n" + sep) in lines_text or (sep + "\n") in lines_text \
            or lines_text.startswith(sep) or lines_text.endswith(sep):
        dbl, fill = sep + sep, sep + "nan" + sep
        while dbl in lines_text:  # twice covers runs of empty cells
            lines_text = lines_text.replace(dbl, fill)
        lines_text = lines_text.replace("\n" + sep, "\nnan" + sep).replace(sep + "\n", sep + "nan\n")
        if lines_text.startswith(sep):
            lines_text = "nan" + lines_text
        if lines_text.endswith(sep):
            lines_text += "nan"
    flat = lines_text.replace("\n", sep)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(flat, sep=sep)
            ok = True
        except (DeprecationWarning, ValueError):
            ok = False
    nrows = lines_text.count("\n") + 1
    if ok and values.size == nrows * ncols:
        return values.reshape(nrows, ncols)
    # slow path only to say where the problem is
    for i, line in enumerate(lines_text.split("\n")):
        cells = line.split(sep)
        if len(cells) != ncols:
            raise KeypointReadError(path, f"line {first_line + i}: {len(cells)} values, expected {ncols} "
                                    "(ragged or truncated row)")
        for c in cells:
            try:
                float(c)
            except ValueError:
                raise KeypointReadError(path, f"line {first_line + i}: {c.strip()[:30]!r} is not a number") from None
    raise KeypointReadError(path, "unreadable numeric data")


def _read_text(path) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as ex:
        raise KeypointReadError(path, f"cannot read ({ex})") from None
    if b"\x00" in raw[:65536]:
        raise KeypointReadError(path, "binary data where text was expected")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise KeypointReadError(path, "not a text file (invalid UTF-8)") from None


def read_csv(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read a keypoint CSV (columns described in the module docstring)."""
    text = _read_text(path)
    if not text.strip():
        raise KeypointReadError(path, "empty file")
    head_end = text.find("\n")
    header = text if head_end < 0 else text[:head_end]
    body = "" if head_end < 0 else text[head_end + 1:]
    sep = "," if header.count(",") >= header.count("\t") else "\t"
    cols = [c.strip().strip('"').strip() for c in header.rstrip("\r").split(sep)]
    if cols and all(re.fullmatch(r"[-+0-9.eE]+", c) for c in cols if c) and any(cols):
        return _read_headerless(path, text, sep, len(cols), layout, units=units, up_axis=up_axis, fps=fps,
                                max_gap=max_gap, ground=ground)

    joints = {}      # name -> {coord: column}
    order = []
    time_col, time_ms = None, False
    for i, c in enumerate(cols):
        low = c.lower()
        m = _COORD.match(c)
        if m:
            name, coord = m.group("name"), m.group("c").lower()
            if coord not in "xyz":
                coord = "conf"
            slot = joints.setdefault(name, {})
            if name not in order:
                order.append(name)
            if coord in slot:
                raise KeypointReadError(path, f"duplicate column {c!r}")
            slot[coord] = i
        elif low in _TIME and time_col is None:
            time_col, time_ms = i, low.endswith("_ms")
        elif low in _FRAME or low.startswith("unnamed"):
            continue
        elif re.fullmatch(r"[-+0-9.eE]+", c):
            raise KeypointReadError(path, "no header row: the first line must name the columns "
                                    "(<name>_x,<name>_y,<name>_z[,<name>_visibility])")
        # other columns are ignored
    if not joints:
        raise KeypointReadError(path, "no <name>_x,<name>_y,<name>_z columns in the header")
    incomplete = [n for n in order if not all(k in joints[n] for k in "xyz")]
    if incomplete:
        raise KeypointReadError(path, f"missing x, y or z column for {', '.join(incomplete[:5])}")

    data = None
    has_empty = (sep + sep) in body or (sep + "\n") in body or ("\n" + sep) in body or body.startswith(sep)
    if not has_empty and "\"" not in body[:4096]:
        # fast path: numpy's C reader straight from the file; cells that are
        # empty, ragged rows or text fall back to the diagnosing parser
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data = np.loadtxt(path, delimiter=sep, skiprows=1, ndmin=2, dtype=np.float64, encoding="utf-8-sig")
            if data.shape[1] != len(cols):
                data = None
        except (ValueError, IndexError, OSError):
            data = None
    if data is None:
        data = parse_numeric_table(path, body, len(cols), sep)
    if data.shape[0] == 0:
        raise KeypointReadError(path, "header but no data rows")
    xyz = np.array([[joints[n][k] for k in "xyz"] for n in order])
    pos = data[:, xyz]
    conf = None
    if any("conf" in joints[n] for n in order):
        conf = np.full(pos.shape[:2], np.nan)
        for j, n in enumerate(order):
            if "conf" in joints[n]:
                conf[:, j] = data[:, joints[n]["conf"]]

    names = list(order)
    numbered = [_MP_NUMBERED.match(n) for n in names]
    if all(numbered):
        idx = [int(m.group(1)) for m in numbered]
        if len(idx) == 33 and sorted(idx) == list(range(33)):
            names = [LAYOUTS["mediapipe_pose"].joint_names[i] for i in idx]
    # "mediapipe_body_nose" / "body_nose" prefixes
    names = [re.sub(r"^(?:mediapipe_)?body_", "", n, flags=re.I) for n in names]

    file_fps = None
    warns = []
    if time_col is not None and data.shape[0] > 1:
        t = data[:, time_col]
        dt = np.diff(t[np.isfinite(t)])
        dt = dt[dt > 0]
        if dt.size:
            step = float(np.median(dt))
            if time_ms or step >= 1.0:
                step /= 1000.0
            file_fps = 1.0 / step
            if abs(file_fps - round(file_fps)) < 0.01 * file_fps:
                file_fps = float(round(file_fps))
    return finish_clip(path, pos, names, fps=fps, file_fps=file_fps, confidence=conf, layout=layout,
                       units=units, up_axis=up_axis, default_up_axis="Z", max_gap=max_gap, warnings=warns,
                       ground=ground)


#: How the columns of a headerless table are read: (leading columns skipped, values per joint).
_HEADERLESS = ((0, 3), (0, 4), (1, 3), (1, 4))


def _read_headerless(path, text, sep, ncols, layout, **kw):
    """A CSV without a header row: joints of a known count and order (Kinect v2, BODY_25, COCO...)."""
    from .layouts import get_layout, recognise_nameless

    data = parse_numeric_table(path, text.rstrip("\n"), ncols, sep=sep, first_line=1)
    tried = []
    for skip, per in _HEADERLESS:
        if (ncols - skip) % per or ncols - skip < 3 * per:
            continue
        J = (ncols - skip) // per
        pos = data[:, skip:].reshape(len(data), J, per)[..., :3]
        if layout is not None:
            lay = get_layout(layout)
            if len(lay.joint_names) != J:
                continue
            names, why = list(lay.joint_names), f"{lay.name}'s {J} points in its order"
        else:
            lay, names, why = recognise_nameless(pos)
            tried.append(f"{J} points of {per} values")
            if lay is None:
                continue
        warn = (f"no header row: read as {why}" + (" (a first column of times or frames skipped)" if skip else "")
                + (", a fourth value per joint (tracking state) ignored" if per == 4 else ""))
        return finish_clip(path, pos, names, layout=lay, warnings=[warn], **kw)
    raise KeypointReadError(
        path, f"no header row, and its {ncols} columns ({'; '.join(tried) or 'no whole number of joints'}) "
        "match no joint layout known by count (Kinect v2, OpenPose BODY_25, COCO-17, H36M-17, SMPL, MediaPipe): "
        "name the columns (<name>_x,<name>_y,<name>_z) or pass " + setting("layout"))
