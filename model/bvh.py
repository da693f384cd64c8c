"""BVH motion files: a numpy reader and writer.

The reader accepts any channel order, 3 or 6 (or any subset of the six)
channels on any joint, position channels on non-root joints, End Sites,
several ``ROOT`` hierarchies in one file, tabs or spaces, CRLF line ends and
blank lines. Rotation channels compose as *intrinsic* rotations in the order
they are listed (``Zrotation Yrotation Xrotation`` gives
``R = Rz @ Ry @ Rx``, scipy's ``from_euler("ZYX", ...)``).

Position channels follow the usual convention by default (they *replace*
the joint's OFFSET, as Blender's importer does); ``position_mode="add"``
adds them to the OFFSET instead.

Any malformed input raises :class:`BVHError` naming the file and the line.
No ``bpy`` here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .bvh_write import frames_from_rotations, write_bvh
from .kinematics import Tree, level_fk
from .rotations_np import euler_to_matrix

__all__ = ["BVHError", "BVHData", "read_bvh", "write_bvh", "frames_from_rotations", "CHANNEL_NAMES"]

#: Valid channel names (case-insensitive in files).
CHANNEL_NAMES = ("Xposition", "Yposition", "Zposition", "Xrotation", "Yrotation", "Zrotation")
_CHANNEL_LOOKUP = {c.lower(): c for c in CHANNEL_NAMES}


class BVHError(ValueError):
    """A malformed or truncated BVH file; the message names the file and line."""

    def __init__(self, path, line, message):
        self.path = str(path)
        self.line = line
        super().__init__(f"{self.path}, line {line}: {message}")


@dataclass
class BVHData:
    """A parsed BVH file.

    Attributes
    ----------
    path : str
        The file it was read from (or ``"<string>"``).
    names : list of str
        Joint names in file (depth-first) order; parents come before children.
    parents : ndarray of int, shape (J,)
        Parent index per joint, -1 for roots.
    offsets : ndarray, shape (J, 3)
        OFFSET of each joint (file units).
    channels : list of tuple of str
        Channel names of each joint, in file order (canonical spelling).
    end_sites : list of tuple (int, ndarray)
        ``(parent joint index, offset)`` of each End Site, in file order.
    rotations : ndarray, shape (T, J, 3, 3), float64
        Local rotation of each joint per frame (identity without rotation channels).
    translations : ndarray, shape (T, J, 3), float64
        Local translation of each joint per frame: the OFFSET, with position
        channels replacing (or added to, see ``position_mode``) its components.
    frame_time : float
        Seconds per frame.
    motion : ndarray, shape (T, C)
        The raw channel values.
    position_mode : str
        ``"replace"`` or ``"add"``.
    """

    path: str
    names: list
    parents: np.ndarray
    offsets: np.ndarray
    channels: list
    end_sites: list
    rotations: np.ndarray
    translations: np.ndarray
    frame_time: float
    motion: np.ndarray
    position_mode: str = "replace"
    _world: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def fps(self) -> float:
        """Frames per second (``1 / frame_time``)."""
        return 1.0 / self.frame_time if self.frame_time > 0 else 0.0

    @property
    def num_frames(self) -> int:
        return int(self.rotations.shape[0])

    @property
    def num_joints(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Index of a joint by name (``KeyError`` when missing)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"joint {name!r} not in {self.path}") from None

    def _world_block(self, a, b):
        """World rotations and positions of frames ``a:b`` (:func:`.kinematics.level_fk`; a root's
        translation is its position)."""
        W, X = level_fk(Tree(self.parents), self.rotations[a:b], self.translations[a:b], joint_major=True)
        return np.swapaxes(W, 0, 1), np.swapaxes(X, 0, 1)

    def world(self) -> tuple[np.ndarray, np.ndarray]:
        """World rotations (T, J, 3, 3) and world positions (T, J, 3) of the joints (not kept; views of
        joint-major arrays)."""
        return self._world_block(0, self.num_frames)

    def world_positions(self) -> np.ndarray:
        """World joint positions, shape (T, J, 3), computed once (in blocks of frames: no (T, J, 3, 3) array)."""
        if self._world is None:
            T, J = self.rotations.shape[:2]
            wp = np.empty((T, J, 3))
            par = np.array([p for p, _ in self.end_sites], dtype=np.int64)
            off = np.array([o for _, o in self.end_sites], dtype=np.float64).reshape(-1, 3)
            ends = np.empty((T, len(par), 3))
            for a in range(0, T, _BLOCK):
                wr, wp[a:a + _BLOCK] = self._world_block(a, a + _BLOCK)
                if len(par):
                    ends[a:a + _BLOCK] = wp[a:a + _BLOCK][:, par] + np.einsum("tkij,kj->tki", wr[:, par], off)
            self._world = (wp, ends)
        return self._world[0]

    def world_rotations(self) -> np.ndarray:
        """World joint rotations, shape (T, J, 3, 3)."""
        return self.world()[0]

    def end_site_positions(self) -> np.ndarray:
        """World positions of the End Sites, shape (T, E, 3)."""
        self.world_positions()
        return self._world[1]


#: Frames per block where whole-clip (T, J, 3, 3) arrays would be large.
_BLOCK = 8192


def _tokenize(lines, start, stop):
    """Tokens with their 1-based line numbers for lines[start:stop]."""
    toks = []
    for i in range(start, stop):
        for t in lines[i].split():
            # allow braces glued to words ("{OFFSET" is rare, but "JOINT a{" happens)
            if len(t) > 1 and ("{" in t or "}" in t):
                buf = ""
                for ch in t:
                    if ch in "{}":
                        if buf:
                            toks.append((buf, i + 1))
                            buf = ""
                        toks.append((ch, i + 1))
                    else:
                        buf += ch
                if buf:
                    toks.append((buf, i + 1))
            else:
                toks.append((t, i + 1))
    return toks


def _parse_hierarchy(path, toks, end_line):
    """``(names, parents, offsets, channels, end_sites)`` of the HIERARCHY tokens ``toks``."""
    return _HierarchyParser(path, toks, end_line).parse()


class _HierarchyParser:
    """A recursive-descent reader of HIERARCHY tokens ``(text, line)``; errors name the line."""

    def __init__(self, path, toks, end_line):
        self.path, self.toks, self.end_line = path, toks, end_line
        self.pos = 0
        self.names, self.parents, self.offsets, self.channels, self.end_sites = [], [], [], [], []

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else (None, self.end_line)

    def take(self, what=None, desc=None):
        if self.pos >= len(self.toks):
            raise BVHError(self.path, self.end_line, f"unexpected end of hierarchy (expected {what or desc or 'more'})")
        tok = self.toks[self.pos]
        self.pos += 1
        if what is not None and tok[0].upper() != what.upper():
            raise BVHError(self.path, tok[1], f"expected {what!r}, found {tok[0]!r}")
        return tok

    def number(self, what):
        tok = self.take(desc=what)
        try:
            v = float(tok[0])
        except ValueError:
            raise BVHError(self.path, tok[1], f"expected a number for {what}, found {tok[0]!r}") from None
        if not np.isfinite(v):
            raise BVHError(self.path, tok[1], f"non-finite number {tok[0]!r} for {what}")
        return v

    def joint_channels(self):
        """The CHANNELS line of a joint, if it has one (canonical spellings)."""
        chans = []
        if self.peek()[0] is not None and self.peek()[0].upper() == "CHANNELS":
            self.take("CHANNELS")
            t = self.take(desc="channel count")
            try:
                cnt = int(t[0])
            except ValueError:
                raise BVHError(self.path, t[1], f"bad channel count {t[0]!r}") from None
            if not 0 <= cnt <= 6:
                raise BVHError(self.path, t[1], f"bad channel count {cnt}")
            for _ in range(cnt):
                c = self.take(desc="channel name")
                canon = _CHANNEL_LOOKUP.get(c[0].lower())
                if canon is None:
                    raise BVHError(self.path, c[1], f"bad channel name {c[0]!r}")
                if canon in chans:
                    raise BVHError(self.path, c[1], f"duplicate channel {canon!r}")
                chans.append(canon)
        return tuple(chans)

    def joint(self, parent):
        # name already consumed by caller -> here we read the body
        self.take("{")
        self.take("OFFSET")
        off = [self.number("OFFSET") for _ in range(3)]
        idx = len(self.offsets)
        self.offsets.append(off)
        self.channels.append(self.joint_channels())
        self.parents.append(parent)
        while True:
            t = self.peek()
            key = (t[0] or "").upper()
            if key == "JOINT":
                self.take()
                nt = self.take(desc="joint name")
                if nt[0] in "{}":
                    raise BVHError(self.path, nt[1], "JOINT without a name")
                self.names.append(nt[0])
                self.joint(idx)
            elif key == "END":
                self.take()
                self.take("Site")
                self.take("{")
                self.take("OFFSET")
                eo = [self.number("End Site OFFSET") for _ in range(3)]
                self.take("}")
                self.end_sites.append((idx, np.array(eo)))
            elif key == "}":
                self.take()
                return
            elif t[0] is None:
                raise BVHError(self.path, self.end_line, f"missing '}}' closing joint {self.names[idx]!r}")
            else:
                raise BVHError(self.path, t[1], f"unexpected {t[0]!r} in joint {self.names[idx]!r}")

    def parse(self):
        self.take("HIERARCHY")
        roots = 0
        names = self.names
        while self.pos < len(self.toks):
            t = self.take()
            if t[0].upper() != "ROOT":
                raise BVHError(self.path, t[1], f"expected ROOT, found {t[0]!r}")
            nt = self.take(desc="root name")
            if nt[0] in "{}":
                raise BVHError(self.path, nt[1], "ROOT without a name")
            names.append(nt[0])
            self.joint(-1)
            roots += 1
        if roots == 0:
            raise BVHError(self.path, self.end_line, "no ROOT in hierarchy")
        if len(set(names)) != len(names):
            dup = next(nm for nm in names if names.count(nm) > 1)
            raise BVHError(self.path, self.end_line, f"duplicate joint name {dup!r}")
        return (names, np.array(self.parents, dtype=np.int64), np.array(self.offsets, dtype=np.float64),
                self.channels, self.end_sites)

def _compose(path, motion, names, offsets, channels, position_mode):
    T = motion.shape[0]
    J = len(names)
    rot = np.empty((T, J, 3, 3))
    rot[:] = np.eye(3)
    trans = np.broadcast_to(offsets, (T, J, 3)).copy()
    # group joints by the sequence of their rotation axes -> one batched product per group
    groups: dict = {}
    col = 0
    for j, chans in enumerate(channels):
        rcols, raxes = [], []
        for c in chans:
            ax = "XYZ".index(c[0])
            if c.endswith("position"):
                if position_mode == "replace":
                    trans[:, j, ax] = motion[:, col]
                else:
                    trans[:, j, ax] += motion[:, col]
            else:
                rcols.append(col)
                raxes.append(ax)
            col += 1
        if raxes:
            g = groups.setdefault(tuple(raxes), ([], []))
            g[0].append(j)
            g[1].append(rcols)
    for axes, (joints, cols) in groups.items():
        for a in range(0, T, _BLOCK):   # (in blocks of frames: the temporaries stay small)
            ang = motion[a:a + _BLOCK, np.array(cols)]  # (n, G, k) degrees
            rot[a:a + _BLOCK, joints] = euler_to_matrix(ang, "".join("XYZ"[ax] for ax in axes))
    return rot, trans


#: Largest rotation channel value read, in degrees: beyond it a float64 angle keeps no useful
#: precision (cos(1e200) is noise), so it can only be a corrupt value.
MAX_ROTATION_DEGREES = 1e6


def _check_rotation_range(path, motion, names, channels, data_start, cum):
    """Refuse a rotation channel beyond :data:`MAX_ROTATION_DEGREES` (naming its line, joint and channel)."""
    cols = [(j, c) for j, chans in enumerate(channels) for c in chans]
    rot = np.array([c.endswith("rotation") for _, c in cols], dtype=bool)
    if not rot.any():
        return
    bad = np.abs(motion[:, rot]) > MAX_ROTATION_DEGREES
    if not bad.any():
        return
    t, k = np.argwhere(bad)[0]
    col = int(np.flatnonzero(rot)[k])
    line = data_start + int(np.searchsorted(cum, int(t) * motion.shape[1] + col, side="right")) + 1
    raise BVHError(path, line, f"corrupt value {motion[t, col]:g} in channel {cols[col][1]} of joint "
                   f"{names[cols[col][0]]!r} (frame {int(t)}): a rotation of more than {MAX_ROTATION_DEGREES:g} degrees")


def _check_numbers(path, body, data_start):
    """Raise :class:`BVHError` naming the line of the first motion token that is not a number."""
    for li, ln in enumerate(body):
        for tok in ln.split():
            try:
                float(tok)
            except ValueError:
                raise BVHError(path, data_start + li + 1, f"non-numeric motion value {tok!r}") from None


def read_bvh(path, position_mode: str = "replace", text: str | None = None) -> BVHData:
    """Read a BVH file.

    Parameters
    ----------
    path : str or Path
        The file (used for messages only when ``text`` is given).
    position_mode : {"replace", "add"}
        Whether position channels replace the joint's OFFSET (standard,
        Blender's importer) or are added to it.
    text : str, optional
        File contents, to parse a string instead of reading ``path``.

    Returns
    -------
    BVHData

    Raises
    ------
    BVHError
        On any malformed or truncated input (message names file and line).
    """
    if position_mode not in ("replace", "add"):
        raise ValueError(f"position_mode must be 'replace' or 'add', got {position_mode!r}")
    path = str(path)
    if text is None:
        try:
            # utf-8-sig: a byte-order mark (Windows editors) is not part of HIERARCHY
            with open(path, "r", encoding="utf-8-sig", errors="replace", newline=None) as fh:
                text = fh.read()
        except OSError as exc:
            raise BVHError(path, 0, f"cannot read: {exc}") from exc
    lines = text.removeprefix("\ufeff").splitlines()
    motion_line = _motion_line(lines)
    hier_end = motion_line if motion_line is not None else len(lines)
    toks = _tokenize(lines, 0, hier_end)
    if not toks:
        raise BVHError(path, 1, "empty file or missing HIERARCHY")
    names, parents, offsets, channels, end_sites = _parse_hierarchy(path, toks, hier_end + 1 if motion_line is not None else len(lines))
    if motion_line is None:
        raise BVHError(path, len(lines), "missing MOTION section")
    nchan = sum(len(c) for c in channels)
    frames, frame_time, data_start = _motion_header(path, lines, motion_line)
    del text    # (the file's text: as large as the motion again)
    motion = _motion_values(path, lines, data_start, frames, nchan, names, channels)
    del lines
    rot, trans = _compose(path, motion, names, offsets, channels, position_mode)
    return BVHData(
        path=path, names=names, parents=parents, offsets=offsets, channels=channels, end_sites=end_sites,
        rotations=rot, translations=trans, frame_time=frame_time, motion=motion, position_mode=position_mode,
    )


def _motion_line(lines):
    """Index of the MOTION line, or None."""
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.upper() == "MOTION":
            return i
        if s.upper().startswith("MOTION") and not s[6:7].isalnum():
            return i
    return None


def _motion_header(path, lines, motion_line):
    """``(frames, frame time, index of the first motion line)`` read from the ``Frames:`` and
    ``Frame Time:`` lines after MOTION."""
    i = motion_line + 1

    def next_nonblank(i):
        while i < len(lines) and not lines[i].strip():
            i += 1
        return i

    i = next_nonblank(i)
    if i >= len(lines):
        raise BVHError(path, len(lines), "missing 'Frames:' line")
    parts = lines[i].replace(":", " : ").split()
    if len(parts) != 3 or parts[0].lower() != "frames" or parts[1] != ":":
        raise BVHError(path, i + 1, f"expected 'Frames: N', found {lines[i].strip()!r}")
    try:
        frames = int(parts[2])
    except ValueError:
        raise BVHError(path, i + 1, f"bad frame count {parts[2]!r}") from None
    if frames < 0:
        raise BVHError(path, i + 1, f"negative frame count {frames}")
    i = next_nonblank(i + 1)
    if i >= len(lines):
        raise BVHError(path, len(lines), "missing 'Frame Time:' line")
    parts = lines[i].replace(":", " : ").split()
    if len(parts) != 4 or parts[0].lower() != "frame" or parts[1].lower() != "time" or parts[2] != ":":
        raise BVHError(path, i + 1, f"expected 'Frame Time: dt', found {lines[i].strip()!r}")
    try:
        frame_time = float(parts[3])
    except ValueError:
        raise BVHError(path, i + 1, f"bad frame time {parts[3]!r}") from None
    if not np.isfinite(frame_time) or frame_time <= 0:
        raise BVHError(path, i + 1, f"frame time must be positive, got {parts[3]!r}")
    return frames, frame_time, i + 1


def _motion_values(path, lines, data_start, frames, nchan, names, channels):
    """The motion (frames, nchan) parsed from ``lines[data_start:]``, every count and value checked."""
    # numbers: fast path, with a per-line count for error positions
    body = lines[data_start:]
    counts = np.fromiter((len(ln.split()) for ln in body), dtype=np.int64, count=len(body))
    cum = np.cumsum(counts)
    total = int(cum[-1]) if len(cum) else 0
    expected = frames * nchan
    if total != expected:
        # a stray token (binary junk, a comma) is the likelier cause: name it first
        _check_numbers(path, body, data_start)
        if total < expected:
            last = int(np.nonzero(counts)[0][-1]) + data_start + 1 if total else data_start
            got_frames = total / nchan if nchan else 0
            raise BVHError(
                path, max(last, 1),
                f"truncated motion: Frames: {frames} x {nchan} channels needs {expected} numbers, "
                f"found {total} (about {got_frames:.1f} frames)",
            )
        k = int(np.searchsorted(cum, expected, side="right"))
        raise BVHError(
            path, data_start + k + 1,
            f"Frames mismatch: more motion data than Frames: {frames} x {nchan} channels ({total} numbers)",
        )
    if not (nchan and frames):
        return np.zeros((frames, nchan))
    # lines must hold whole frames (catches a short line followed by a long one)
    bad_lines = np.nonzero((counts != 0) & (counts != nchan))[0]
    if len(bad_lines) and len(np.nonzero(counts)[0]) == frames:
        ln = int(bad_lines[0])
        raise BVHError(path, data_start + ln + 1, f"expected {nchan} numbers on this frame line, found {counts[ln]}")
    joined = " ".join(body)
    del body
    try:
        # parsed in C without a list of strings (a 100,000-frame file would need a GB);
        # it stops at a bad token: then the count is short and the slow path names it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            values = np.fromstring(joined, dtype=np.float64, sep=" ")
        if values.size != expected:
            raise ValueError("not every motion value is a number")
    except ValueError:
        _check_numbers(path, lines[data_start:], data_start)
        raise
    if not np.all(np.isfinite(values)):
        k = int(np.nonzero(~np.isfinite(values))[0][0])
        li = int(np.searchsorted(cum, k, side="right"))
        raise BVHError(path, data_start + li + 1, "non-finite motion value")
    motion = values.reshape(frames, nchan)
    del joined, values
    _check_rotation_range(path, motion, names, channels, data_start, cum)
    return motion
