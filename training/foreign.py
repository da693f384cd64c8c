"""Motion of other studios and skeletons (``../shared/mocap/foreign``) for training and evaluation.

Each BVH is read the way users' files are (:func:`neural_ik.readers.read_keypoints`:
the automatic skeleton mapping, units and up axis from the data, on the
floor), resampled, and given

- the canonical keypoints and their mask (the joints and end points the
  source has; most lack nose, thumbs and heels, some hand tips or head top);
- the ground-truth world rotations of the canonical joints the source has,
  read from its own skeleton (:func:`neural_ik.pipeline.source.source_world_rotations`,
  the rotations a bake onto another rig starts from).

Evaluation holds out whole folders (conventions), never clips. A file that
cannot be read or converted is skipped with a message naming it.

No ``bpy`` here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

__all__ = ["ForeignClip", "default_foreign_root", "leading_tpose_frames", "read_foreign_file", "load_foreign",
           "HELDOUT_FOLDERS", "TRAIN_FOLDERS"]

#: Folders of ``foreign/`` held out for validation (whole conventions; never used in training).
HELDOUT_FOLDERS = ("fair1", "sfu")
#: Folders of ``foreign/`` that training may use.
TRAIN_FOLDERS = ("cmu_hahne", "cmu_sl", "cmu_ad", "rokoko")


def default_foreign_root() -> Path:
    """``../shared/mocap/foreign`` relative to the repository root."""
    return (Path(__file__).resolve().parent.parent / ".." / "shared" / "mocap" / "foreign").resolve()


@dataclass
class ForeignClip:
    """One foreign clip read like a user's file.

    Attributes
    ----------
    name : str
        ``folder/stem``.
    folder : str
    clip : KeypointClip
        The reader's clip (with ``source_rig``), resampled.
    keypoints : ndarray (T, 32, 3)
        Canonical keypoints, NaN where missing.
    mask : ndarray of bool (T, 32)
    world_rot : ndarray (T, 22, 3, 3)
        Ground-truth world rotations of the canonical joints (T-pose frames).
    given : ndarray of bool (22,)
        Joints the source has a bone for (``world_rot`` is meaningful there).
    """

    name: str
    folder: str
    clip: object
    keypoints: np.ndarray
    mask: np.ndarray
    world_rot: np.ndarray
    given: np.ndarray

    def __len__(self):
        return int(self.keypoints.shape[0])

    @property
    def fps(self) -> float:
        return float(self.clip.fps)


def _cut(clip, n):
    """The first ``n`` frames of a reader clip (source rig included)."""
    if n is None or clip.num_frames <= n:
        return clip
    return replace(clip, positions=clip.positions[:n],
                   confidence=None if clip.confidence is None else clip.confidence[:n],
                   source_rig=None if clip.source_rig is None else clip.source_rig.frames(0, n))


def leading_tpose_frames(keypoints, max_frames: int = 3) -> int:
    """How many leading frames are a calibration T-pose that the conversion prepended.

    The rule of :mod:`.dataset` (hands further apart than
    :data:`.dataset.TPOSE_HAND_DIST` and a jump larger than
    :data:`.dataset.TPOSE_JUMP` to the next frame), at most ``max_frames``:
    read at the source's rate, where no real motion jumps that far.
    """
    from neural_ik.model.skeleton import JOINTS

    from .dataset import TPOSE_HAND_DIST, TPOSE_JUMP

    kp = np.asarray(keypoints, dtype=np.float64)[:, :len(JOINTS)]
    hl, hr = JOINTS.index("hand_l"), JOINTS.index("hand_r")
    drop = 0
    while drop < min(max_frames, kp.shape[0] - 2):
        hands = np.linalg.norm(kp[drop, hl] - kp[drop, hr])
        jump = np.nanmax(np.abs(kp[drop + 1] - kp[drop]))
        if not (hands > TPOSE_HAND_DIST and jump > TPOSE_JUMP):
            break
        drop += 1
    return drop


def read_foreign_file(path, folder, fps=30.0, max_frames=None, drop_tpose=False, name=None) -> ForeignClip:
    """One BVH read like a user's file, resampled, with its canonical keypoints and rotations.

    ``drop_tpose`` leaves out a leading calibration T-pose
    (:func:`leading_tpose_frames`); training wants it out, evaluation reads
    the file as a user would. Raises on a file that cannot be read or converted.
    """
    from neural_ik.pipeline.source import source_world_rotations
    from neural_ik.readers import read_keypoints, resample, to_canonical

    f = Path(path)
    c = read_keypoints(str(f))
    if drop_tpose:
        n = leading_tpose_frames(to_canonical(c)[0])
        if n:
            c = c.frames(n, c.num_frames)
    c = _cut(resample(c, float(fps)), max_frames)
    if c.source_rig is None:
        raise ValueError("no source skeleton")
    kp, m = to_canonical(c)
    if len(kp) < 3:
        raise ValueError(f"only {len(kp)} frames")
    rot, given, _ = source_world_rotations(c.source_rig)
    if not np.isfinite(rot).all():
        raise ValueError("non-finite rotations")
    return ForeignClip(name or f"{folder}/{f.stem}", folder, c, kp, m, rot, given)


def load_foreign(folders, root=None, fps=30.0, max_frames=None, log=None, drop_tpose=False) -> list:
    """Read every BVH of the given folders of ``foreign/``.

    Parameters
    ----------
    folders : sequence of str
        Sub-folders of ``root`` (e.g. :data:`HELDOUT_FOLDERS`).
    root : str or Path, optional
        Default :func:`default_foreign_root`.
    fps : float
        Output frame rate.
    max_frames : int, optional
        Keep at most this many frames per clip (after resampling).
    log : callable, optional
        Receives one line per skipped file (default: stderr).
    drop_tpose : bool
        Leave out a leading calibration T-pose (:func:`read_foreign_file`).

    Returns
    -------
    list of ForeignClip
        Sorted by folder and name; broken files are left out (and logged).

    Raises
    ------
    FileNotFoundError
        When a folder does not exist.
    """
    if log is None:
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    root = Path(root) if root is not None else default_foreign_root()
    out = []
    for folder in folders:
        d = root / folder
        if not d.is_dir():
            raise FileNotFoundError(f"motion folder not found: {d}")
        for f in sorted(d.glob("*.bvh")):
            try:
                out.append(read_foreign_file(f, folder, fps, max_frames, drop_tpose))
            except Exception as ex:  # a broken clip is skipped, never the run
                log(f"skipping {f}: {type(ex).__name__}: {ex}")
    return out
