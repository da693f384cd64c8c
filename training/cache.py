"""The compact training cache: every training clip on the canonical skeleton in one small file.

Build it where the motion is (``../shared/mocap``), copy it along to a
machine that has only the repository (a GPU box), and train from it::

    .venv/bin/python -m training.cache                      # -> .cache/training_data.npz
    .venv/bin/python -m training.train --cache .cache/training_data.npz ...

Contents (``numpy.savez_compressed``; float16 rotations, float32 the rest):

- ``rot6`` (N, 22, 6) float16: local rotations as 6D (the first two columns);
- ``root`` (N, 3) float32: root positions (metres, Z up, floor at 0);
- ``clip`` (N,) int16: the clip of each frame; ``offsets`` (C, 22, 3) and
  ``end_offsets`` (C, 10, 3) float32: each clip's skeleton;
- ``has_kp`` (C, 32) bool: keypoints the clip's source really has (the others
  are filled in from the canonical skeleton);
- ``names``, ``sources``, ``fps``: per clip; ``info``: a JSON string.

Sources: the CMU clips (``cmu/``, :func:`.dataset.load_clips`) less the
held-out subject 6, and the training folders of ``foreign/``
(:data:`.foreign.TRAIN_FOLDERS`; ``fair1/`` and ``sfu/`` are held out). A
foreign clip's canonical motion comes from its own skeleton
(:func:`neural_ik.pipeline.source.source_world_rotations`): local rotations
from the world rotations, bone offsets measured in the parent's frame
(median over frames), joints the source lacks filled in from the canonical
skeleton; a clip whose rest is not a standing pose (its rotations would be
meaningless), or whose reconstruction is off by more than
:data:`MAX_RECON_MM`, is skipped with a message. So is any clip that cannot
be read.

No ``bpy`` here; the arrays stay under the git-ignored ``.cache/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import torch

from neural_ik.model.rotations import matrix_to_rot6d, rot6d_to_matrix
from neural_ik.model.skeleton import CANONICAL, END_PARENTS, JOINTS, KEYPOINTS, PARENTS, Skeleton, keypoints_from_fk_np

__all__ = ["DEFAULT_CACHE", "MAX_RECON_MM", "foreign_to_canonical", "build_cache", "load_cache", "main"]

#: Default cache file.
DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "training_data.npz"
#: A foreign clip whose canonical reconstruction is off by more than this (mean over its joints) is skipped.
MAX_RECON_MM = 15.0

_NJ = len(JOINTS)


def _rest_is_standing(source_rig) -> bool:
    """The same test as the bake (:func:`neural_ik.pipeline.source.source_rest_is_human`)."""
    from neural_ik.retarget.solve import plan_retarget

    plan = plan_retarget(source_rig.rig, source_rig.mapping)
    limits = {"thigh_l": 60, "thigh_r": 60, "calf_l": 60, "calf_r": 60, "spine1": 60, "pelvis": 60,
              "upperarm_l": 100, "upperarm_r": 100, "forearm_l": 100, "forearm_r": 100}
    for j, lim in limits.items():
        bone = source_rig.mapping.entries.get(j)
        if bone is None or not source_rig.rig.has(bone):
            continue
        C = plan.offset.get(source_rig.rig.index(bone))
        if C is None:
            continue
        if np.degrees(np.arccos(np.clip((np.trace(C) - 1.0) / 2.0, -1.0, 1.0))) > lim:
            return False
    return True


def foreign_to_canonical(fc):
    """Canonical motion of a :class:`.foreign.ForeignClip`.

    Returns
    -------
    local_rot : ndarray (T, 22, 3, 3)
    root_pos : ndarray (T, 3)
    skeleton : Skeleton
        Offsets measured in the parent joint's frame (median over frames)
        where the source has both ends; the canonical offset scaled to the
        body's size elsewhere (a missing middle joint halves its parent's
        measured span to the next joint).
    has_kp : ndarray of bool (32,)
        Keypoints the source has.
    recon_mm : float
        Mean distance of the reconstruction to the source's joints.
    """
    W = np.asarray(fc.world_rot, dtype=np.float64)
    kp = np.asarray(fc.keypoints, dtype=np.float64)
    m = np.asarray(fc.mask, dtype=bool)
    T = W.shape[0]
    L = np.empty_like(W)
    L[:, 0] = W[:, 0]
    for j in range(1, _NJ):
        L[:, j] = np.swapaxes(W[:, PARENTS[j]], -1, -2) @ W[:, j]
    has = m.mean(0) > 0.9
    carrier = [max(p, 0) for p in PARENTS] + list(END_PARENTS)
    off = np.zeros((_NJ, 3))
    end = np.zeros((len(END_PARENTS), 3))

    def measure(k, base):
        rel = kp[:, k] - kp[:, base]
        loc = np.einsum("tji,tj->ti", W[:, carrier[k]], rel)
        ok = m[:, k] & m[:, base]
        return np.median(loc[ok], axis=0) if ok.sum() >= 3 else None

    # body size from the bones both ends of which are given
    ratios = []
    for k in range(1, len(KEYPOINTS)):
        base = carrier[k]
        if has[k] and has[base]:
            v = measure(k, base)
            c = CANONICAL.offsets[k] if k < _NJ else CANONICAL.end_offsets[k - _NJ]
            if v is not None and np.linalg.norm(c) > 1e-6:
                ratios.append(np.linalg.norm(v) / np.linalg.norm(c))
    s = float(np.median(ratios)) if ratios else 1.0
    for k in range(1, len(KEYPOINTS)):
        base = carrier[k]
        c = (CANONICAL.offsets[k] if k < _NJ else CANONICAL.end_offsets[k - _NJ]) * s
        v = measure(k, base) if (has[k] and has[base]) else None
        if v is None and not has[base] and has[k] and base > 0 and has[carrier[base]]:
            # a missing middle joint (e.g. spine2): the span from its parent, halved between the two bones
            span = measure(k, carrier[base])
            if span is not None:
                v = 0.5 * span
                off[base] = 0.5 * span
        if v is None:
            v = c if not (k < _NJ and off[k].any()) else off[k]
        if k < _NJ:
            off[k] = v
        else:
            end[k - _NJ] = v
    skel = Skeleton(off, end)
    root = kp[:, 0].copy()
    if not m[:, 0].all():
        raise ValueError("the pelvis is missing on some frames")
    rec = keypoints_from_fk_np(L, root, skel)
    d = np.linalg.norm(rec[:, :_NJ] - np.nan_to_num(kp[:, :_NJ]), axis=-1)
    recon = float(d[m[:, :_NJ]].mean() * 1000.0)
    return L, root, skel, has, recon


def _rot6(L):
    return matrix_to_rot6d(torch.as_tensor(np.asarray(L, dtype=np.float32))).numpy()


def build_cache(path=None, cmu_root=None, foreign_root=None, fps=30.0, holdout_subjects=(6,), foreign_folders=None,
                log=None) -> dict:
    """Convert every training clip and write the cache; returns its ``info`` dict.

    Parameters
    ----------
    path : str or Path, optional
        Default :data:`DEFAULT_CACHE`.
    cmu_root, foreign_root : str or Path, optional
        ``../shared/mocap/cmu`` and ``../shared/mocap/foreign`` by default; a
        missing folder is skipped with a message.
    fps : float
    holdout_subjects : sequence of int
        CMU subjects left out.
    foreign_folders : sequence of str, optional
        Default :data:`.foreign.TRAIN_FOLDERS`.
    log : callable, optional
        One line per clip skipped (default stderr).
    """
    from .dataset import DatasetError, load_clips
    from .foreign import TRAIN_FOLDERS, load_foreign

    if log is None:
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    path = Path(path) if path is not None else DEFAULT_CACHE
    clips = []  # (name, source, L, root, skeleton, has_kp)
    all_kp = np.ones(len(KEYPOINTS), dtype=bool)
    try:
        cmu = load_clips(root=cmu_root, fps=fps, progress=False, skip_bad=True, log=log)
        for c in cmu:
            if c.subject in set(holdout_subjects):
                continue
            clips.append(("cmu/" + c.name, "cmu", c.local_rot, c.root_pos, c.skeleton, all_kp))
    except (FileNotFoundError, DatasetError) as ex:
        log(f"skipping the CMU clips: {ex}")
    folders = tuple(foreign_folders or TRAIN_FOLDERS)
    for folder in folders:
        try:
            fcs = load_foreign([folder], foreign_root, fps, log=log)
        except FileNotFoundError as ex:
            log(f"skipping {folder}: {ex}")
            continue
        for fc in fcs:
            try:
                if not _rest_is_standing(fc.clip.source_rig):
                    raise ValueError("its skeleton's rest is not a standing pose (rotations unusable)")
                L, root, skel, has, recon = foreign_to_canonical(fc)
                if recon > MAX_RECON_MM:
                    raise ValueError(f"reconstruction off by {recon:.1f} mm")
            except Exception as ex:
                log(f"skipping {fc.clip.source}: {type(ex).__name__}: {ex}")
                continue
            clips.append((fc.name, folder, L, root, skel, has))
    if not clips:
        raise SystemExit("no training clips could be read")
    n = [len(c[2]) for c in clips]
    info = {"clips": len(clips), "frames": int(sum(n)), "fps": float(fps),
            "sources": {s: int(sum(len(c[2]) for c in clips if c[1] == s)) for s in sorted({c[1] for c in clips})},
            "heldout": {"cmu_subjects": list(holdout_subjects), "foreign_folders": ["fair1", "sfu"]},
            "built": time.strftime("%Y-%m-%d %H:%M:%S")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(
        tmp,
        rot6=np.concatenate([_rot6(np.asarray(c[2], dtype=np.float32)) for c in clips]).astype(np.float16),
        root=np.concatenate([c[3] for c in clips]).astype(np.float32),
        clip=np.concatenate([np.full(k, i, dtype=np.int16) for i, k in enumerate(n)]),
        offsets=np.stack([c[4].offsets for c in clips]).astype(np.float32),
        end_offsets=np.stack([c[4].end_offsets for c in clips]).astype(np.float32),
        has_kp=np.stack([c[5] for c in clips]),
        names=np.array([c[0] for c in clips]), sources=np.array([c[1] for c in clips]),
        fps=np.full(len(clips), fps, dtype=np.float32), info=json.dumps(info))
    os.replace(tmp, path)
    info["bytes"] = path.stat().st_size
    return info


def load_cache(path=None) -> dict:
    """Read a cache file: ``local_rot`` (N, 22, 3, 3) float32, ``root``, ``clip``, ``offsets``,
    ``end_offsets``, ``has_kp``, ``names``, ``sources``, ``info`` (dict).

    Raises
    ------
    FileNotFoundError
        No cache there (build it with ``python -m training.cache``).
    """
    path = Path(path) if path is not None else DEFAULT_CACHE
    if not path.is_file():
        raise FileNotFoundError(f"no training cache at {path}: build it with `.venv/bin/python -m training.cache "
                                f"--out {path}` where ../shared/mocap is")
    z = np.load(path, allow_pickle=False)
    L = rot6d_to_matrix(torch.from_numpy(z["rot6"].astype(np.float32))).numpy()
    return {"local_rot": L, "root": z["root"], "clip": z["clip"].astype(np.int64), "offsets": z["offsets"],
            "end_offsets": z["end_offsets"], "has_kp": z["has_kp"], "names": [str(s) for s in z["names"]],
            "sources": [str(s) for s in z["sources"]], "info": json.loads(str(z["info"]))}


def main(argv=None):
    """``python -m training.cache [--out PATH]``: build the training cache."""
    p = argparse.ArgumentParser(description="Build the compact training cache (CMU + foreign training folders)")
    p.add_argument("--out", default=str(DEFAULT_CACHE))
    p.add_argument("--cmu", default=None, help="CMU folder (default ../shared/mocap/cmu)")
    p.add_argument("--foreign", default=None, help="foreign/ folder (default ../shared/mocap/foreign)")
    p.add_argument("--fps", type=float, default=30.0)
    a = p.parse_args(argv)
    t0 = time.time()
    info = build_cache(a.out, a.cmu, a.foreign, a.fps)
    print(json.dumps(info), file=sys.stderr)
    print(f"wrote {a.out} ({info['bytes'] / 2**20:.1f} MiB, {info['frames']} frames, {info['clips']} clips) "
          f"in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
