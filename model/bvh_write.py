"""Writing BVH motion files: channel values from rotations, the hierarchy, the motion written as it comes.

No ``bpy`` here.
"""

from __future__ import annotations

import os

import numpy as np

from .number_rows import format_rows
from .rotations_np import matrix_to_euler

__all__ = ["write_bvh", "frames_from_rotations"]


def frames_from_rotations(channels, rotations, translations=None, offsets=None, position_mode="replace"):
    """Channel values (T, C) for given local rotations/translations.

    Parameters
    ----------
    channels : sequence of tuple of str
        Channels per joint. Rotation channels must be three distinct axes (or none).
    rotations : ndarray, shape (T, J, 3, 3)
    translations : ndarray, shape (T, J, 3), optional
        Local translations for joints with position channels (defaults to ``offsets``).
    offsets : ndarray, shape (J, 3), optional
        Needed for ``position_mode="add"`` (values written are translation - offset).
    position_mode : {"replace", "add"}

    Returns
    -------
    ndarray, shape (T, C)
    """
    rotations = np.asarray(rotations, dtype=np.float64)
    T, J = rotations.shape[:2]
    if translations is None:
        translations = np.zeros((T, J, 3)) if offsets is None else np.broadcast_to(offsets, (T, J, 3))
    cols = []
    for j, chans in enumerate(channels):
        rot_order = "".join(c[0] for c in chans if c.endswith("rotation"))
        eul = None
        if rot_order:
            if len(rot_order) != 3:
                raise ValueError(f"joint {j}: writing needs 0 or 3 rotation channels, got {rot_order!r}")
            eul = matrix_to_euler(rotations[:, j], rot_order, degrees=True)
        k = 0
        for c in chans:
            ax = "XYZ".index(c[0])
            if c.endswith("position"):
                v = translations[:, j, ax]
                if position_mode == "add":
                    v = v - (0.0 if offsets is None else offsets[j][ax])
                cols.append(np.asarray(v, dtype=np.float64))
            else:
                cols.append(eul[:, k])
                k += 1
    return np.stack(cols, axis=1) if cols else np.zeros((T, 0))


def write_bvh(
    path,
    names,
    parents,
    offsets,
    channels,
    motion,
    frame_time: float = 1.0 / 30.0,
    end_sites=None,
    newline: str = "\n",
    indent: str = "\t",
    precision: int = 6,
    num_frames: int | None = None,
) -> None:
    """Write a BVH file.

    The motion is formatted with one ``%`` operation per block of frames (no
    Python loop over frames or values) and written as it comes, so a motion
    given as chunks is never held whole.

    Parameters
    ----------
    path : str or Path
    names : sequence of str
        Joint names, parents before children (depth-first order is produced
        from ``parents``; several roots give several ``ROOT`` blocks).
    parents : sequence of int
        Parent index per joint (-1 for roots).
    offsets : array-like, shape (J, 3)
    channels : sequence of sequence of str
        Channel names per joint, any order, e.g.
        ``("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")``.
    motion : array-like, shape (T, C), or an iterator of arrays (t, C)
        Channel values in input joint order (reordered here to the written
        depth-first order, which equals the input order when it already is
        depth-first). :func:`frames_from_rotations` builds it from matrices.
        An iterator (a generator of chunks of frames) needs ``num_frames``.
    frame_time : float
    end_sites : sequence of (int, offset), optional
        End Sites; by default one zero-offset End Site is written under
        every joint without children (as most exporters do). Pass ``[]`` for none.
    newline, indent : str
        Line ending and indentation (to produce tricky files in tests).
    precision : int
        Decimals written.
    num_frames : int, optional
        Frame count of an iterator ``motion`` (the header comes first);
        a different number of frames raises ``ValueError``.
    """
    names = list(names)
    parents = [int(p) for p in parents]
    offsets = np.asarray(offsets, dtype=np.float64).reshape(len(names), 3)
    chunked = hasattr(motion, "__next__")
    if chunked:
        if num_frames is None:
            raise ValueError("write_bvh: num_frames is needed when motion is an iterator")
        chunks = motion
    else:
        motion = np.asarray(motion, dtype=np.float64)
        if motion.ndim == 1:
            motion = motion[None]
        num_frames = motion.shape[0]
        chunks = iter((motion,))
    out, order = _hierarchy_lines(names, parents, offsets, channels, end_sites, indent, precision)
    # motion columns are given in input joint order; reorder to the written order
    starts = np.cumsum([0] + [len(c) for c in channels])
    colidx = np.concatenate([np.arange(starts[j], starts[j + 1]) for j in order]) if order else np.zeros(0, int)
    nchan = int(starts[-1])
    if not chunked and motion.shape[1] != nchan:
        raise ValueError(f"motion has {motion.shape[1]} columns, channels need {nchan}")
    if colidx.size and np.array_equal(colidx, np.arange(nchan)):
        colidx = None  # already in written order: no copy
    out.append("MOTION")
    out.append(f"Frames: {int(num_frames)}")
    out.append(f"Frame Time: {frame_time:.8f}")
    with open(os.fspath(path), "w", encoding="utf-8", newline="") as fh:
        fh.write(newline.join(out) + newline)
        written = _write_motion(fh, chunks, nchan, colidx, num_frames, newline, precision)
    if written != num_frames:
        raise ValueError(f"motion has {written} frames, {num_frames} announced")


def _hierarchy_lines(names, parents, offsets, channels, end_sites, indent, precision):
    """``(lines from HIERARCHY to the last joint's closing brace, joints in the written order)``."""
    children = {j: [c for c, p in enumerate(parents) if p == j] for j in range(len(names))}
    if end_sites is None:
        end_sites = [(j, np.zeros(3)) for j in range(len(names)) if not children[j]]
    ends = {}
    for p, o in end_sites:
        ends.setdefault(int(p), []).append(np.asarray(o, dtype=np.float64))
    order = []
    fmt = f"{{:.{precision}f}}"
    out = ["HIERARCHY"]

    def emit(j, depth):
        order.append(j)
        pad = indent * depth
        kw = "ROOT" if parents[j] < 0 else "JOINT"
        out.append(f"{pad}{kw} {names[j]}")
        out.append(pad + "{")
        out.append(f"{pad}{indent}OFFSET " + " ".join(fmt.format(v) for v in offsets[j]))
        ch = list(channels[j])
        out.append(f"{pad}{indent}CHANNELS {len(ch)}" + "".join(" " + c for c in ch))
        for c in children[j]:
            emit(c, depth + 1)
        for o in ends.get(j, []):
            out.append(f"{pad}{indent}End Site")
            out.append(pad + indent + "{")
            out.append(f"{pad}{indent}{indent}OFFSET " + " ".join(fmt.format(v) for v in o))
            out.append(pad + indent + "}")
        out.append(pad + "}")

    for j in range(len(names)):
        if parents[j] < 0:
            emit(j, 0)
    return out, order


def _write_motion(fh, chunks, nchan, colidx, num_frames, newline, precision) -> int:
    """The motion lines of every chunk (columns reordered by ``colidx``) written to ``fh``; the frame count."""
    row = " ".join([f"%.{precision}f"] * nchan) + newline
    written = 0
    for chunk in chunks:
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim == 1:
            chunk = chunk[None]
        if chunk.shape[1] != nchan:
            raise ValueError(f"motion has {chunk.shape[1]} columns, channels need {nchan}")
        if colidx is not None:
            chunk = chunk[:, colidx]
        written += chunk.shape[0]
        if written > num_frames:
            raise ValueError(f"motion has more than the {num_frames} frames announced")
        # blocks of frames (bounded text size), each formatted without a loop over values
        step = max(1, (1 << 20) // max(nchan, 1))
        for a in range(0, chunk.shape[0], step):
            block = chunk[a:a + step]
            text = format_rows(block, precision) if newline == "\n" and nchan else None
            if text is None:
                fh.write((row * block.shape[0]) % tuple(block.ravel().tolist()))
            else:
                fh.write(text.decode("ascii"))
    return written
