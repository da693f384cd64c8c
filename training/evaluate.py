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

__all__ = ["LEAF_JOINTS", "pose_errors", "evaluate", "format_table", "main"]

#: Joints without child joints.
LEAF_JOINTS = tuple(j for j in range(NUM_JOINTS) if j not in PARENTS)


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
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
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
