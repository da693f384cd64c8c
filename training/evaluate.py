"""Evaluate the shipped network on held-out motion and print the table.

Usage (from the repository root)::

    .venv/bin/python -m training.evaluate [--weights weights/neural_ik.pt] [--device cpu]
                                       [--holdout 6] [--steps 5] [--threads 2] [--json out.json]

For every frame of the held-out subject (default 6, never seen in training)
the ground-truth keypoints are computed by FK with the subject's skeleton,
then solved:

- **dense**: all 32 keypoints; network alone and with refinement;
- **sparse**: the six effector positions only (no heading given), then with
  the pelvis orientation given, then with the four elbow/knee hints;
- **optimisation only**: the same refinement (same step budget) started from
  the rest pose placed at the pelvis target, for comparison.

Unless ``--fit-skeleton``, the solver gets the subject's skeleton (as a
Blender rig would provide it). Figures:

- ``rot`` : mean geodesic angle between predicted and true *world* joint
  rotations over all 22 joints (deg); ``leaf`` : the same over the leaf joints
  (head, hands, toes);
- ``MPJPE`` : mean distance over the 22 joints after FK (mm);
- ``given`` : mean distance on the keypoints that were given (mm);
- ``ms/frame`` : wall time per frame in batches of 4096.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from neural_ik.model.fk import NUM_JOINTS, forward_kinematics, fk_keypoints
from neural_ik.model.inference import Solver, fit_skeleton
from neural_ik.model.network import EFFECTOR_JOINTS, EFFECTOR_KP, HINT_KP
from neural_ik.model.refine import DEFAULTS as REFINE_DEFAULTS
from neural_ik.model.refine import refine
from neural_ik.model.rotations import geodesic_angle
from neural_ik.model.skeleton import JOINTS, PARENTS

__all__ = ["LEAF_JOINTS", "pose_errors", "evaluate", "format_table", "world_rotations", "body_bones", "quat_angle_deg",
           "evaluate_foreign", "format_foreign", "ISSUE11_TARGETS", "offset_free_angle_deg", "main"]

#: Joints without child joints.
LEAF_JOINTS = tuple(j for j in range(NUM_JOINTS) if j not in PARENTS)
#: A diagnostic row of :func:`evaluate_foreign`: the network's rotations on the skeleton measured in its
#: own frames (:meth:`Solver.measure_skeleton` with ``refine=False``), not the one the solver fits.
NETWORK_FRAMES_ROW = "network alone, dense, skeleton measured in the network's frames (diagnostic)"


def pose_errors(local_rot, root_pos, gt_local, gt_root, offsets, end_offsets, given_mask=None, pred_offsets=None, pred_end=None):
    """Per-frame errors of predicted poses (numpy in, dict of (T,) arrays out).

    Parameters
    ----------
    local_rot, gt_local : ndarray, (T, 22, 3, 3)
    root_pos, gt_root : ndarray, (T, 3)
    offsets, end_offsets : ndarray, (T, 22, 3) / (T, 10, 3) or shared
        True skeleton (ground-truth keypoints).
    given_mask : ndarray (T, 32) bool, optional
        Keypoints that were given to the solver.
    pred_offsets, pred_end : optional
        Skeleton of the prediction (default: the true one).
    """
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    L, r, Lg, rg = t(local_rot), t(root_pos), t(gt_local), t(gt_root)
    off, eo = t(offsets), t(end_offsets)
    po = off if pred_offsets is None else t(pred_offsets)
    pe = eo if pred_end is None else t(pred_end)
    kp, (wr, _) = fk_keypoints(L, r, po, pe, return_world=True)
    kg, (wg, _) = fk_keypoints(Lg, rg, off, eo, return_world=True)
    ang = torch.rad2deg(geodesic_angle(wr, wg, eps=0.0))  # (T, 22)
    d = (kp - kg).norm(dim=-1) * 1000.0  # (T, 32)
    out = {
        "rot_deg": ang.mean(1).numpy(),
        "leaf_deg": ang[:, list(LEAF_JOINTS)].mean(1).numpy(),
        "mpjpe_mm": d[:, :NUM_JOINTS].mean(1).numpy(),
    }
    if given_mask is not None:
        m = torch.as_tensor(np.array(given_mask))
        out["given_mm"] = ((d * m).sum(1) / m.sum(1).clamp_min(1)).numpy()
    return out


def _load_heldout(holdout, fps, root=None):
    from .dataset import load_clips

    clips = load_clips(root=root, fps=fps, subjects=holdout, progress=False)
    if not clips:
        raise SystemExit(f"no clips of subjects {holdout}")
    L = np.concatenate([c.local_rot for c in clips]).astype(np.float64)
    r = np.concatenate([c.root_pos for c in clips]).astype(np.float64)
    off = np.concatenate([np.broadcast_to(c.skeleton.offsets, (len(c), NUM_JOINTS, 3)) for c in clips])
    eo = np.concatenate([np.broadcast_to(c.skeleton.end_offsets, (len(c), c.skeleton.end_offsets.shape[0], 3)) for c in clips])
    return clips, L, r, off, eo


def _rest_start_refine(kp, mask, skeleton, steps, device, orient=None):
    """Optimisation-only IK: the same refinement started from the rest pose at the pelvis target."""
    B = kp.shape[0]
    dev = torch.device(device)
    kt = torch.as_tensor(np.where(mask[..., None], kp, 0.0), dtype=torch.float32, device=dev)
    mt = torch.as_tensor(mask, device=dev).float()
    off = torch.as_tensor(skeleton.offsets, dtype=torch.float32, device=dev)
    eo = torch.as_tensor(skeleton.end_offsets, dtype=torch.float32, device=dev)
    L0 = torch.eye(3, device=dev).expand(B, NUM_JOINTS, 3, 3).clone()
    r0 = kt[:, 0].clone()
    t0 = time.perf_counter()
    outL, outr = [], []
    for a in range(0, B, 4096):
        L, r = refine(L0[a:a + 4096], r0[a:a + 4096], kt[a:a + 4096], mt[a:a + 4096], off, eo, steps=steps)
        outL.append(L)
        outr.append(r)
    sec = time.perf_counter() - t0
    return torch.cat(outL).double().cpu().numpy(), torch.cat(outr).double().cpu().numpy(), sec


def evaluate(weights=None, device="cpu", holdout=(6,), fps=30.0, steps=REFINE_DEFAULTS["steps"], fit=False, data_root=None,
             max_frames=None, log=print):
    """Run every configuration; returns a list of row dicts."""
    clips, gt_L, gt_r, off, eo = _load_heldout(holdout, fps, data_root)
    solver = Solver(weights, device=device)
    rows = []
    # solve clip by clip so that each clip has its own (true or fitted) skeleton; frames are batched
    starts = np.cumsum([0] + [len(c) for c in clips])
    if max_frames:
        keep = [i for i in range(len(clips)) if starts[i] < max_frames]
        clips = clips[: len(keep)]
        n = starts[len(clips)]
        gt_L, gt_r, off, eo = gt_L[:n], gt_r[:n], off[:n], eo[:n]
    T = len(gt_L)
    kp_all = fk_keypoints(torch.as_tensor(gt_L), torch.as_tensor(gt_r), torch.as_tensor(off), torch.as_tensor(eo)).numpy()
    wr_all = forward_kinematics(torch.as_tensor(gt_L), torch.as_tensor(gt_r), torch.as_tensor(off))[0].numpy()

    def run(name, mask, refine_on, orient_given=None, baseline=False):
        L_out = np.empty_like(gt_L)
        r_out = np.empty_like(gt_r)
        po = np.empty_like(off)
        pe = np.empty_like(eo)
        sec = 0.0
        a = 0
        for c in clips:
            b = a + len(c)
            kp = kp_all[a:b].copy()
            m = np.broadcast_to(mask, kp.shape[:2]).copy()
            kp[~m] = np.nan
            sk = None if fit else c.skeleton
            if baseline:
                skel = sk if sk is not None else fit_skeleton(kp, m)
                L, r, s = _rest_start_refine(kp, m, skel, steps, device)
                sec += s
            else:
                ori = None
                if orient_given is not None:
                    ori = np.full((len(c), 6, 3, 3), np.nan)
                    for i in orient_given:
                        ori[:, i] = wr_all[a:b, EFFECTOR_JOINTS[i]]
                res = solver.solve(kp, m, mode="auto", refine=refine_on, refine_steps=steps, orientations=ori, skeleton=sk)
                L, r, skel = res.local_rot, res.root_pos, res.skeleton
                sec += res.seconds["network"] + res.seconds["refine"]
            L_out[a:b], r_out[a:b] = L, r
            po[a:b], pe[a:b] = skel.offsets, skel.end_offsets
            a = b
        e = pose_errors(L_out, r_out, gt_L, gt_r, off, eo, np.broadcast_to(mask, (T, len(mask))), po, pe)
        row = {"name": name, "frames": T, **{k: float(np.mean(v)) for k, v in e.items()}, "ms_per_frame": 1000 * sec / T}
        rows.append(row)
        if log:
            log(f"{name:44s} rot {row['rot_deg']:6.2f} deg  leaf {row['leaf_deg']:6.2f}  MPJPE {row['mpjpe_mm']:7.2f} mm"
                f"  given {row['given_mm']:7.3f} mm  {row['ms_per_frame']:.3f} ms/frame")
        return row

    dense = np.ones(32, dtype=bool)
    sparse = np.zeros(32, dtype=bool)
    sparse[list(EFFECTOR_KP)] = True
    hints = sparse.copy()
    hints[list(HINT_KP)] = True
    run("dense, network alone", dense, False)
    run(f"dense, network + refinement ({steps} steps)", dense, True)
    run(f"dense, optimisation only ({steps} steps)", dense, True, baseline=True)
    run("sparse 6 effectors, network alone", sparse, False)
    run(f"sparse 6 effectors, network + refinement", sparse, True)
    run(f"sparse 6 effectors, optimisation only", sparse, True, baseline=True)
    run("sparse + pelvis orientation, network alone", sparse, False, orient_given=[0])
    run("sparse + pelvis orientation, + refinement", sparse, True, orient_given=[0])
    run("sparse + elbow/knee hints, + refinement", hints, True)
    run("sparse + all 6 orientations, + refinement", sparse, True, orient_given=list(range(6)))
    return rows


def world_rotations(local_rot):
    """World rotations (T, 22, 3, 3) of canonical local rotations (row 0: the root's world orientation)."""
    L = np.asarray(local_rot, dtype=np.float64)
    W = np.empty_like(L)
    W[:, 0] = L[:, 0]
    for j in range(1, NUM_JOINTS):
        W[:, j] = W[:, PARENTS[j]] @ L[:, j]
    return W


def _angle_deg(Ra, Rb):
    """Angle (degrees) between rotation matrices (..., 3, 3)."""
    tr = np.einsum("...ij,...ij->...", Ra, Rb)  # trace(Ra^T Rb)
    return np.degrees(np.arccos(np.clip((tr - 1.0) / 2.0, -1.0, 1.0)))


def offset_free_angle_deg(Rp, Rt):
    """Angle (degrees) between ``Rp`` and ``Rt`` (T, 3, 3) once their constant offset is taken out.

    The offset is the mean of ``Rt^T Rp`` over the frames (the rotation
    nearest the arithmetic mean of the matrices), removed on the right:
    a bone frame defined another way (a convention: where a skeleton puts
    a bone's axes at rest, how it turns a bone that no joint shows turning)
    costs nothing; how the pose moves away from the truth over the clip
    does. A diagnostic beside the plain angle, never instead of it: a pose
    wrong by the same turn in every frame reads zero here too.

    Returns
    -------
    ndarray (T,)
    """
    Rp = np.asarray(Rp, dtype=np.float64)
    Rt = np.asarray(Rt, dtype=np.float64)
    rel = np.swapaxes(Rt, -1, -2) @ Rp
    u, _, vt = np.linalg.svd(rel.mean(0))
    m = u @ vt
    if np.linalg.det(m) < 0:
        m = u @ np.diag([1.0, 1.0, -1.0]) @ vt
    return _angle_deg(Rp @ m.T, Rt)


def quat_angle_deg(qa, qb):
    """Angle (degrees) between unit quaternions (..., 4) (w, x, y, z)."""
    d = np.abs(np.einsum("...i,...i->...", qa, qb))
    return np.degrees(2.0 * np.arccos(np.clip(d, 0.0, 1.0)))


def body_bones(rig, mapping):
    """``(body, with_child)``: bone indices on the paths from the root to the head, hands and toes.

    The bones a body has whatever its convention (fingers, eyes and helpers
    left out); ``with_child`` are those whose child is a body bone too. A foot
    stands in for a missing toe.
    """
    ends = []
    for j in ("head", "hand_l", "hand_r", "toe_l", "toe_r"):
        b = mapping.entries.get(j)
        if (b is None or not rig.has(b)) and j.startswith("toe"):
            b = mapping.entries.get("foot" + j[3:])
        if b is not None and rig.has(b):
            ends.append(rig.index(b))
    body = set()
    for b in ends:
        while b >= 0 and b not in body:
            body.add(b)
            b = int(rig.parents[b])
    body = sorted(body)
    child = [b for b in body if any(int(rig.parents[k]) == b for k in body)]
    return body, child


#: Issue 11's targets on the held-out folders: (row key, figure key, bound, unit).
ISSUE11_TARGETS = (
    ("network alone, dense, fitted skeleton", "mpjpe_mm", 25.0, "mm"),
    ("network alone, dense, fitted skeleton", "rot_deg", 10.0, "deg"),
    ("rig-space solve, dense", "joint_mm", 1.0, "mm"),
    ("rig-space solve, dense", "rot_deg", 5.0, "deg"),
    ("rig-space solve, dense", "rot_child_deg", 3.0, "deg"),
    ("rig-space solve, six effectors", "joint_mm", 20.0, "mm"),
    ("rig-space solve, six effectors", "rot_deg", 20.0, "deg"),
    ("rig-space solve, dense", "jitter_ratio", 1.10, "x source"),
    ("rig-space solve, six effectors", "jitter_ratio", 1.10, "x source"),
    ("network alone, batch 4096", "frames_per_s", -20000.0, "frames/s"),
    ("weights file", "mib", 10.0, "MiB"),
)


def _swapped_reference(src, heads, chain, parts):
    """``(heads, bones)``: the source's bone heads (T, B, 3) with the left and right bones of ``parts``
    exchanged, and those bones (:attr:`neural_ik.pipeline.core.RigBake.swapped`)."""
    ent, rig = src.mapping.entries, src.rig
    perm, gone = np.arange(heads.shape[1]), set()
    for part in parts:
        a, b = ent.get(f"{part}_l"), ent.get(f"{part}_r")
        if a is not None and b is not None and rig.has(a) and rig.has(b):
            ia, ib = rig.index(a), rig.index(b)
            perm[ia], perm[ib] = ib, ia
            gone |= {ia, ib}
    return heads[:, perm], gone


def _bake_own(fc, solver, mode, device, iterations=None):
    """Bake a foreign clip's keypoints onto its own skeleton (network prior, smoothing off).

    Returns
    -------
    dict of frame-weighted sums: ``joint_mm``, ``rot_deg``, ``rot_child_deg``,
    ``jitter`` and ``source_jitter`` (mm/frame^2 of the body's joints) and ``seconds``.
    """
    from neural_ik.pipeline.core import RigBake
    from neural_ik.pipeline.options import BakeOptions
    from neural_ik.model.rotations_np import quat_to_matrix
    from neural_ik.retarget.solve import pose_rig

    src = fc.clip.source_rig
    kp, m = fc.keypoints, fc.mask
    if mode == "sparse":
        m = m & np.isin(np.arange(m.shape[1]), list(EFFECTOR_KP))[None]
        kp = np.where(m[..., None], kp, np.nan)
    opts = BakeOptions(mode=mode, smooth="none", device=device)
    if iterations is not None:
        opts.rig_iterations = int(iterations)
    t0 = time.perf_counter()
    job = RigBake(src.rig, src.mapping, kp, m, fc.fps, opts, source_rig=None, solver=solver, source_name=fc.name)
    job.run()
    sec = time.perf_counter() - t0
    res = job.full_result()
    _, h_src = pose_rig(src.rig, src.quaternions, src.locations)
    _, h_out = pose_rig(src.rig, res.quaternions, res.locations)
    body, child = body_bones(src.rig, src.mapping)
    if job.swapped is not None:
        # a chain whose sides the file swaps, swapped back by the bake: its joints are measured against
        # the other side's, its rotations (the file's turn the chain through the body) not at all
        h_src, gone = _swapped_reference(src, h_src, *job.swapped)
        body, child = [b for b in body if b not in gone], [b for b in child if b not in gone]
    q_src = np.asarray(src.quaternions, dtype=np.float64)
    q_out = np.asarray(res.quaternions, dtype=np.float64)
    q_src = q_src / np.linalg.norm(q_src, axis=-1, keepdims=True)
    ang = quat_angle_deg(q_out, q_src)
    M_src, M_out = quat_to_matrix(q_src[:, body]), quat_to_matrix(q_out[:, body])
    free = np.mean([offset_free_angle_deg(M_out[:, i], M_src[:, i]).mean() for i in range(len(body))])
    jp, js = h_out[:, body], h_src[:, body]

    def jit(p):
        return float(np.mean(np.linalg.norm(p[2:] - 2.0 * p[1:-1] + p[:-2], axis=-1)) * 1000.0)

    return {"joint_mm": float(np.linalg.norm(jp - js, axis=-1).mean() * 1000.0),
            "rot_deg": float(ang[:, body].mean()), "rot_child_deg": float(ang[:, child].mean()),
            "rot_free_deg": float(free),
            "jitter": jit(jp), "source_jitter": jit(js), "seconds": sec}


def evaluate_foreign(weights=None, device="cpu", folders=None, fps=30.0, data_root=None, max_frames=None,
                     bakes=True, log=print, clips=None):
    """Issue 11's figures on held-out folders of ``foreign/`` (whole conventions).

    Parameters
    ----------
    weights : str or Path, optional
    device : str
    folders : sequence of str, optional
        Default :data:`.foreign.HELDOUT_FOLDERS` (``fair1``, ``sfu``).
    fps : float
        Every clip is resampled to this rate (bakes and jitter too).
    data_root : str or Path, optional
        The ``foreign/`` folder.
    max_frames : int, optional
        At most this many frames per clip.
    bakes : bool
        Also bake onto each clip's own skeleton (dense and six effectors).
    clips : list of ForeignClip, optional
        These clips instead of the folders' (``folders`` then only names them):
        the held-out subjects of the CMU database (:func:`.cmu_full.load_heldout`).

    Returns
    -------
    dict
        ``rows``: one dict per configuration (frame-weighted means over the
        clips), ``clips`` (names), ``frames``.

    Figures
    -------
    - *network alone, dense, fitted skeleton*: the network (no refinement)
      given every keypoint the source has, skeleton estimated from them
      (``Solver.solve(skeleton=None)``); ``mpjpe_mm``: distance of the FK
      joints to the source's joints (over the joints it has); ``rot_deg``:
      angle between the network's world rotations and the source skeleton's
      own (over the joints it has a bone for). The root is placed on the
      given keypoints as the solver does (``Solver.place_root``); the row
      *the network's own root* leaves it where the network put it. The row
      :data:`NETWORK_FRAMES_ROW` (a diagnostic, not a target) puts the same
      rotations on the skeleton whose directions are measured in the
      network's own frames (:meth:`Solver.measure_skeleton`, ``refine``
      False): what is left is how the network turns the bones, not where a
      convention places its joints at rest.
    - *rig-space solve*: the keypoints alone (the source skeleton's
      rotations withheld, so the network is the start and prior) baked onto
      the source's own skeleton by :class:`neural_ik.pipeline.core.RigBake`,
      smoothing off; ``joint_mm`` over the body's bones (:func:`body_bones`),
      ``rot_deg`` / ``rot_child_deg``: angle between baked and source pose
      rotations (relative to rest, so independent of bone rolls) over the
      body's bones / those with a child; ``jitter_ratio``: mean second
      difference of the body's joints, baked over the source's.
    - ``rot_free_deg`` (both): the rotation error once each clip's constant
      offset per joint or bone is taken out (:func:`offset_free_angle_deg`):
      how much of ``rot_deg`` is each skeleton's own way of placing bone
      frames, which positions do not show. A diagnostic, not a target.
    - *network alone, batch 4096*: frames per second of
      ``Solver.solve(refine=False)`` on held-out keypoints (with the
      temporal context a bake uses; a network with a temporal block is
      also measured frame by frame, ``per frame`` rows).
    """
    from .foreign import HELDOUT_FOLDERS, load_foreign

    folders = tuple(folders or HELDOUT_FOLDERS)
    source = "foreign/" if clips is None else "the CMU database"
    if clips is None:
        clips = load_foreign(folders, data_root, fps, max_frames, log=log)
    if not clips:
        raise SystemExit(f"no readable clips in {', '.join(folders)}")
    solver = Solver(weights, device=device)
    rows = {}

    def add(row, key, n, **vals):
        r = rows.setdefault(row, {"name": row, "frames": 0})
        r["frames"] += n
        for k, v in vals.items():
            r[k] = r.get(k, 0.0) + v * n

    temporal = solver.net.temporal is not None
    for fc in clips:
        n = len(fc)
        mj = fc.mask[:, :NUM_JOINTS]
        line = f"{fc.name:44s} {n:5d} frames "
        for row, mode, place in (("network alone, dense, fitted skeleton", "auto", True),
                                 ("network alone, dense, fitted skeleton, per frame", "off", True),
                                 ("network alone, dense, fitted skeleton, the network's own root", "auto", False),
                                 (NETWORK_FRAMES_ROW, "auto", True)):
            if mode == "off" and not temporal:
                continue
            was, solver.place_root = solver.place_root, place
            try:
                sk = solver.measure_skeleton(fc.keypoints, fc.mask, refine=False) if row == NETWORK_FRAMES_ROW else None
                res = solver.solve(fc.keypoints, fc.mask, mode="dense", refine=False, temporal=mode, skeleton=sk)
            finally:
                solver.place_root = was
            d = np.linalg.norm(res.keypoints[:, :NUM_JOINTS] - np.nan_to_num(fc.keypoints[:, :NUM_JOINTS]), axis=-1)
            wr = world_rotations(res.local_rot)
            ang = _angle_deg(wr, fc.world_rot)[:, fc.given]
            free = np.mean([offset_free_angle_deg(wr[:, j], fc.world_rot[:, j]).mean() for j in np.flatnonzero(fc.given)])
            add(row, None, n, mpjpe_mm=float(d[mj].mean() * 1000.0), rot_deg=float(ang.mean()),
                rot_free_deg=float(free), seconds=res.seconds["network"] / n)
            tag = "network's frames" if row == NETWORK_FRAMES_ROW else mode + ("" if place else ", own root")
            line += f" network alone ({tag}) {d[mj].mean() * 1000:6.1f} mm {ang.mean():5.1f} deg"
        if bakes:
            for mode, row in (("dense", "rig-space solve, dense"), ("sparse", "rig-space solve, six effectors")):
                b = _bake_own(fc, solver, mode, device)
                add(row, None, n, joint_mm=b["joint_mm"], rot_deg=b["rot_deg"], rot_child_deg=b["rot_child_deg"],
                    rot_free_deg=b["rot_free_deg"], jitter=b["jitter"], source_jitter=b["source_jitter"],
                    seconds=b["seconds"] / n)
                line += f" | {mode} bake {b['joint_mm']:6.2f} mm {b['rot_deg']:5.1f}/{b['rot_child_deg']:4.1f} deg"
                line += f" jitter {b['jitter']:.2f}/{b['source_jitter']:.2f}"
        if log:
            log(line)
    out = []
    for r in rows.values():
        n = r["frames"]
        r2 = {k: (v / n if k not in ("name", "frames") else v) for k, v in r.items()}
        if "jitter" in r2:
            r2["jitter_ratio"] = r2["jitter"] / max(r2["source_jitter"], 1e-12)
        out.append(r2)
    # throughput of the network alone at batch 4096 (held-out keypoints, skeleton given)
    kp = np.concatenate([fc.keypoints for fc in clips])
    m = np.concatenate([fc.mask for fc in clips])
    reps = max(1, int(np.ceil(4096 / len(kp))))
    kp, m = np.tile(kp, (reps, 1, 1))[:4096], np.tile(m, (reps, 1))[:4096]
    sk = solver.solve(kp[:256], m[:256], mode="dense", refine=False).skeleton
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        solver.solve(kp, m, mode="dense", refine=False, skeleton=sk, batch_size=4096)
        ts.append(time.perf_counter() - t0)
    out.append({"name": "network alone, batch 4096", "frames": 4096, "frames_per_s": 4096 / float(np.median(ts)),
                "threads": torch.get_num_threads()})
    try:
        size = Path(solver.weights_path).stat().st_size
    except OSError:
        size = float("nan")
    out.append({"name": "weights file", "mib": size / 2**20, "temporal": int(solver.net.hparams.get("temporal", 0))})
    return {"rows": out, "clips": [fc.name for fc in clips], "frames": int(sum(len(fc) for fc in clips)),
            "folders": list(folders), "fps": fps, "source": source}


def format_foreign(result) -> str:
    """Markdown tables of :func:`evaluate_foreign`: the figures and the issue's targets."""
    rows = {r["name"]: r for r in result["rows"]}
    lines = [f"Held-out {', '.join(result['folders'])} of {result.get('source', 'foreign/')}: {len(result['clips'])} clips, "
             f"{result['frames']} frames at {result['fps']:g} fps", "",
             "| configuration | joints (mm) | rotation (deg) | rotation, joints with a child (deg) | rotation less each clip's constant offset (deg) | jitter (mm/frame^2, baked / source) | ms/frame |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "frames_per_s" in r or "mib" in r:
            continue
        mm = r.get("mpjpe_mm", r.get("joint_mm", float("nan")))
        child = f"{r['rot_child_deg']:.2f}" if "rot_child_deg" in r else ""
        jit = f"{r['jitter']:.2f} / {r['source_jitter']:.2f} ({r['jitter_ratio']:.2f}x)" if "jitter" in r else ""
        free = f"{r['rot_free_deg']:.2f}" if "rot_free_deg" in r else ""
        lines.append(f"| {r['name']} | {mm:.2f} | {r['rot_deg']:.2f} | {child} | {free} | {jit} | {1000 * r['seconds']:.3f} |")
    lines += ["", "| target | measured | |", "|---|---:|---|"]
    for row, key, bound, unit in ISSUE11_TARGETS:
        r = rows.get(row)
        if r is None or key not in r:
            continue
        v = r[key]
        ok = v >= -bound if bound < 0 else v <= bound
        lines.append(f"| {row}: {key} {'>=' if bound < 0 else '<='} {abs(bound):g} {unit} | {v:,.2f} | {'met' if ok else 'missed'} |")
    return "\n".join(lines)


def format_table(rows, title="") -> str:
    """Markdown table of :func:`evaluate` rows."""
    lines = []
    if title:
        lines.append(title)
        lines.append("")
    lines.append("| configuration | rot err (deg, all 22) | rot err (deg, leaf) | MPJPE (mm) | error on given keypoints (mm) | time (ms/frame) |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(f"| {r['name']} | {r['rot_deg']:.2f} | {r['leaf_deg']:.2f} | {r['mpjpe_mm']:.2f} | {r['given_mm']:.3f} | {r['ms_per_frame']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Evaluate Neural IK on held-out motion")
    p.add_argument("--weights", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--holdout", type=int, nargs="+", default=[6])
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--steps", type=int, default=REFINE_DEFAULTS["steps"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fit-skeleton", action="store_true", help="estimate the skeleton from the keypoints instead of using the subject's")
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--data", default=None)
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--foreign", nargs="*", default=None, metavar="FOLDER",
                   help="issue 11's figures on these held-out folders of ../shared/mocap/foreign "
                        "(no folder: fair1 sfu); --data is then the foreign/ folder")
    p.add_argument("--no-bakes", action="store_true", help="with --foreign: the network alone only")
    p.add_argument("--cmu-full", default=None, metavar="DIR",
                   help="the --foreign figures on the held-out subjects (numbers ending in 6) of the whole CMU "
                   "database in this folder of its BVH conversion")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.foreign is not None or a.cmu_full:
        log = lambda s: print(s, file=sys.stderr)  # noqa: E731
        clips = folders = None
        if a.cmu_full:
            from .cmu_full import load_heldout

            clips = load_heldout(a.cmu_full, a.fps, a.max_frames, log=log)
            if not clips:
                p.error(f"no readable takes of the held-out CMU subjects below {a.cmu_full}")
            folders = ["subjects " + ", ".join(sorted({c.name.split("/")[1].split("_")[0] for c in clips}))]
        res = evaluate_foreign(a.weights, a.device, folders or a.foreign or None, a.fps, a.data, a.max_frames,
                               bakes=not a.no_bakes, log=log, clips=clips)
        print(format_foreign(res))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        return 0
    rows = evaluate(a.weights, a.device, tuple(a.holdout), a.fps, a.steps, a.fit_skeleton, a.data, a.max_frames,
                    log=lambda s: print(s, file=sys.stderr))
    title = (f"Held-out subject(s) {', '.join(map(str, a.holdout))}: {rows[0]['frames']} frames at {a.fps:g} fps, "
             f"{'fitted' if a.fit_skeleton else 'true'} skeleton, device {a.device}, {torch.get_num_threads()} threads")
    print(format_table(rows, title))
    if a.json:
        Path(a.json).write_text(json.dumps({"title": title, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
