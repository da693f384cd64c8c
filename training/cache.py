"""The compact training cache: every training clip on the canonical skeleton in one small file.

Build it where the motion is (``../shared/mocap``), copy it along to a
machine that has only the repository (a GPU box), and train from it::

    .venv/bin/python -m training.cache                      # -> .cache/training_data.npz
    .venv/bin/python -m training.cache --cmu-full DIR --workers 2   # plus the whole CMU database
    .venv/bin/python -m training.train --cache .cache/training_data.npz ...

Contents (``numpy.savez_compressed``):

- ``rotq``, ``rootq``, ``codec``, ``codec_steps``: the local rotations and
  the root positions (metres, Z up, floor at 0) of every frame, quantised and
  compressed by :mod:`.cache_codec` (so that a cache of the whole CMU
  database travels to a GPU machine); a cache of an earlier
  version holds ``rot6`` (N, 22, 6) float16 and ``root`` (N, 3) float32
  instead, and is read as well;
- ``clip`` (N,) int16: the clip of each frame; ``offsets`` (C, 22, 3) and
  ``end_offsets`` (C, 10, 3) float32: each clip's skeleton;
- ``has_kp`` (C, 32) bool: keypoints the clip's source really has (the others
  are filled in from the canonical skeleton);
- ``names``, ``sources``, ``fps``: per clip; ``info``: a JSON string.

Sources: the CMU clips (``cmu/``, :func:`.dataset.load_clips`) less the
held-out subject 6, the training folders of ``foreign/``
(:data:`.foreign.TRAIN_FOLDERS`; ``fair1/`` and ``sfu/`` are held out) and,
with ``--cmu-full DIR``, the whole CMU database in its BVH conversion
(:mod:`.cmu_full`). CMU subjects whose number ends in 6
(:data:`.cmu_full.HELDOUT_CMU_SUBJECTS`) are held out of every CMU source;
a leading calibration T-pose is left out of every BVH. A
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

from neural_ik.model.rotations import rot6d_to_matrix
from neural_ik.model.skeleton import CANONICAL, END_PARENTS, JOINTS, KEYPOINTS, PARENTS, Skeleton, keypoints_from_fk_np

from .cache_codec import decode, encode, quantise_root, quantise_rotations

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


def _packed(name, source, L, root, skel, has):
    """A cache entry, its motion quantised straight away (a whole database stays small in memory)."""
    return (name, source, quantise_rotations(L), quantise_root(root), skel, has)


def _convert(fc, source):
    """The cache entry of a :class:`.foreign.ForeignClip`; raises ValueError on a clip unfit for training."""
    if not _rest_is_standing(fc.clip.source_rig):
        raise ValueError("its skeleton's rest is not a standing pose (rotations unusable)")
    L, root, skel, has, recon = foreign_to_canonical(fc)
    if recon > MAX_RECON_MM:
        raise ValueError(f"reconstruction off by {recon:.1f} mm")
    return _packed(fc.name, source, L, root, skel, has)


def _cmu_full_job(job):
    """One take of the CMU database: ``(entry, None)`` or ``(None, message)`` (a worker process runs it)."""
    from .foreign import read_foreign_file

    path, name, fps = job
    try:
        return _convert(read_foreign_file(path, "cmu_full", fps, drop_tpose=True, name=name), "cmu_full"), None
    except Exception as ex:  # a broken take is skipped, never the run
        return None, f"skipping {path}: {type(ex).__name__}: {ex}"


def _load_cmu_full(root, fps, holdout, workers, log):
    """Entries of every take of the CMU database below ``root`` less the held-out subjects, and the
    ``(subject, trial)`` pairs used."""
    from .cmu_full import find_takes

    jobs, used = [], set()
    for path, subject, trial in find_takes(root):
        if subject in holdout:
            continue
        if (subject, trial) in used:
            log(f"skipping {path}: take {subject:02d}_{trial:02d} already read from another file")
            continue
        used.add((subject, trial))
        jobs.append((str(path), f"cmu_full/{subject:02d}_{trial:02d}", float(fps)))
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawned, not forked: a child forked after torch started its threads can hang in its first op
        with ProcessPoolExecutor(int(workers), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=torch.set_num_threads, initargs=(1,)) as ex:
            results = list(ex.map(_cmu_full_job, jobs, chunksize=4))
    else:
        results = [_cmu_full_job(j) for j in jobs]
    out = []
    for entry, msg in results:
        if msg:
            log(msg)
        else:
            out.append(entry)
    return out, used


def _foreign_entries(folders, foreign_root, fps, holdout, duplicates, log):
    """Entries of the training folders of ``foreign/``: held-out CMU subjects and takes already in the
    database (``duplicates``, for :data:`.cmu_full.DUPLICATE_FOLDERS`) left out."""
    from .cmu_full import DUPLICATE_FOLDERS, take_of
    from .foreign import load_foreign

    out = []
    for folder in folders:
        try:
            fcs = load_foreign([folder], foreign_root, fps, log=log, drop_tpose=True)
        except FileNotFoundError as ex:
            log(f"skipping {folder}: {ex}")
            continue
        for fc in fcs:
            take = take_of(fc.name.split("/")[-1]) if folder.startswith("cmu_") else None
            if take is not None and take[0] in holdout:
                continue
            if take is not None and folder in DUPLICATE_FOLDERS and take in duplicates:
                continue
            try:
                out.append(_convert(fc, folder))
            except Exception as ex:
                log(f"skipping {fc.clip.source}: {type(ex).__name__}: {ex}")
    return out


def build_cache(path=None, cmu_root=None, foreign_root=None, fps=30.0, holdout_subjects=None, foreign_folders=None,
                log=None, cmu_full=None, workers=1) -> dict:
    """Convert every training clip and write the cache; returns its ``info`` dict.

    Parameters
    ----------
    path : str or Path, optional
        Default :data:`DEFAULT_CACHE`.
    cmu_root, foreign_root : str or Path, optional
        ``../shared/mocap/cmu`` and ``../shared/mocap/foreign`` by default; a
        missing folder is skipped with a message.
    fps : float
    holdout_subjects : sequence of int, optional
        CMU subjects left out of every CMU source (default
        :data:`.cmu_full.HELDOUT_CMU_SUBJECTS`).
    foreign_folders : sequence of str, optional
        Default :data:`.foreign.TRAIN_FOLDERS`.
    log : callable, optional
        One line per clip skipped (default stderr).
    cmu_full : str or Path, optional
        A folder of the whole CMU database in its BVH conversion
        (:mod:`.cmu_full`); its takes are added as source ``cmu_full``.
    workers : int
        Processes converting the database's takes.
    """
    from .cmu_full import HELDOUT_CMU_SUBJECTS
    from .dataset import DatasetError, load_clips
    from .foreign import HELDOUT_FOLDERS, TRAIN_FOLDERS

    if log is None:
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    path = Path(path) if path is not None else DEFAULT_CACHE
    holdout = {int(s) for s in (HELDOUT_CMU_SUBJECTS if holdout_subjects is None else holdout_subjects)}
    clips = []  # (name, source, quantised rotations, quantised root, skeleton, has_kp)
    all_kp = np.ones(len(KEYPOINTS), dtype=bool)
    try:
        cmu = load_clips(root=cmu_root, fps=fps, progress=False, skip_bad=True, log=log)
        for c in cmu:
            if c.subject in holdout:
                continue
            clips.append(_packed("cmu/" + c.name, "cmu", c.local_rot, c.root_pos, c.skeleton, all_kp))
    except (FileNotFoundError, DatasetError) as ex:
        log(f"skipping the CMU clips: {ex}")
    used = set()
    if cmu_full is not None:
        full, used = _load_cmu_full(cmu_full, fps, holdout, workers, log)
        clips.extend(full)
    folders = TRAIN_FOLDERS if foreign_folders is None else tuple(foreign_folders)
    clips.extend(_foreign_entries(folders, foreign_root, fps, holdout, used, log))
    if not clips:
        raise SystemExit("no training clips could be read")
    n = [len(c[2]) for c in clips]
    info = {"clips": len(clips), "frames": int(sum(n)), "fps": float(fps),
            "sources": {s: int(sum(len(c[2]) for c in clips if c[1] == s)) for s in sorted({c[1] for c in clips})},
            "heldout": {"cmu_subjects": sorted(holdout), "foreign_folders": list(HELDOUT_FOLDERS)},
            "built": time.strftime("%Y-%m-%d %H:%M:%S")}
    if cmu_full is not None:
        info["cmu_full"] = {"takes": sum(c[1] == "cmu_full" for c in clips),
                            "subjects": sorted({s for s, _ in used})}
    _write(path, clips, n, fps, info)
    info["bytes"] = path.stat().st_size
    return info


def _write(path, clips, n, fps, info):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    clip = np.concatenate([np.full(k, i, dtype=np.int16) for i, k in enumerate(n)])
    np.savez_compressed(
        tmp,
        **encode(np.concatenate([c[2] for c in clips]), np.concatenate([c[3] for c in clips]), clip),
        clip=clip,
        offsets=np.stack([c[4].offsets for c in clips]).astype(np.float32),
        end_offsets=np.stack([c[4].end_offsets for c in clips]).astype(np.float32),
        has_kp=np.stack([c[5] for c in clips]),
        names=np.array([c[0] for c in clips]), sources=np.array([c[1] for c in clips]),
        fps=np.full(len(clips), fps, dtype=np.float32), info=json.dumps(info))
    os.replace(tmp, path)


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
    if "rot6" in z:
        L, root = rot6d_to_matrix(torch.from_numpy(z["rot6"].astype(np.float32))).numpy(), z["root"]
    else:
        L, root = decode(z, z["clip"])
    return {"local_rot": L, "root": root, "clip": z["clip"].astype(np.int64), "offsets": z["offsets"],
            "end_offsets": z["end_offsets"], "has_kp": z["has_kp"], "names": [str(s) for s in z["names"]],
            "sources": [str(s) for s in z["sources"]], "info": json.loads(str(z["info"]))}


def main(argv=None):
    """``python -m training.cache [--out PATH] [--cmu-full DIR]``: build the training cache."""
    p = argparse.ArgumentParser(description="Build the compact training cache (CMU + foreign training folders, "
                                "optionally the whole CMU database)")
    p.add_argument("--out", default=str(DEFAULT_CACHE))
    p.add_argument("--cmu", default=None, help="CMU folder (default ../shared/mocap/cmu)")
    p.add_argument("--foreign", default=None, help="foreign/ folder (default ../shared/mocap/foreign)")
    p.add_argument("--cmu-full", default=None, metavar="DIR",
                   help="also pack the whole CMU database from this folder of its BVH conversion (takes named "
                   "SS_TT.bvh anywhere below it); subjects whose number ends in 6 stay held out")
    p.add_argument("--workers", type=int, default=1, help="processes converting the --cmu-full takes")
    p.add_argument("--fps", type=float, default=30.0)
    a = p.parse_args(argv)
    t0 = time.time()
    info = build_cache(a.out, a.cmu, a.foreign, a.fps, cmu_full=a.cmu_full, workers=a.workers)
    print(json.dumps(info), file=sys.stderr)
    print(f"wrote {a.out} ({info['bytes'] / 2**20:.1f} MiB, {info['frames']} frames, {info['clips']} clips) "
          f"in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
