"""Train the IK network.

Usage (from the repository root)::

    .venv/bin/python -m training.train --steps 6000 --out .cache/train --device cpu

(``training/`` is not shipped in the extension zip; it imports the model from
the package through :mod:`devpkg`.) Resumes automatically from
``<out>/checkpoint.pt`` unless ``--fresh``; writes ``<out>/final.pt`` (full
precision) and, with ``--export``, the shippable ``weights/neural_ik.pt``.

Data: :func:`.dataset.load_clips` (CMU clips on the canonical skeleton),
subject 6 held out (never seen in training; only logged for information).
Every batch is augmented on the training device, in torch:

- left/right mirroring (p = 0.5);
- limb swapping: arms and/or legs taken from another random frame;
- synthetic poses: every local rotation perturbed by a random rotation with
  per-joint, per-axis scales (:data:`.augment.JOINT_AXIS_SCALE`), then
  projected into the joint limits;
- random bone lengths (per bone, left/right symmetric) and overall scale;
- a random heading (the encoding cancels it, so this only exercises the
  heading estimate) and keypoint noise on the network's input;
- masks: half the batch *dense* (each keypoint dropped with a per-sample
  probability up to ``--max-drop``), half *sparse* (the six effectors,
  random elbow/knee hints, and for some samples the pelvis or all effector
  orientations).

Loss: geodesic angle of local and world rotations (radians) + ``--w-pos``
times the FK keypoint error (metres, with the augmented skeleton) + a joint
limit penalty.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from neural_ik.model import limits as lim
from neural_ik.model.fk import NUM_JOINTS, NUM_KEYPOINTS, fk_keypoints
from neural_ik.model.network import EFFECTOR_JOINTS, EFFECTOR_KP, HINT_KP, NUM_EFF, IKNet, encode
from neural_ik.model.rotations import axis_angle_to_matrix, geodesic_angle, rot_z
from neural_ik.model.skeleton import (CANONICAL, END_PARENTS, END_POINTS, JOINTS, KEYPOINTS, MIRROR_JOINTS,
                                      MIRROR_KEYPOINTS, PARENTS)

from .augment import JOINT_AXIS_SCALE

__all__ = ["TrainConfig", "PoseData", "load_pose_data", "pose_data_from_cache", "synthetic_pose_data", "Augmenter", "train", "export_weights", "FORMAT_VERSION", "main"]

#: Version of the shipped weights format (see :func:`export_weights`): 2 adds the temporal block
#: (``hparams`` ``temporal``, ``temporal_channels``); version 1 was the per-frame network.
FORMAT_VERSION = 2

_ARMS = [JOINTS.index(n) for n in JOINTS if n.startswith(("clavicle", "upperarm", "forearm", "hand"))]
_LEGS = [JOINTS.index(n) for n in JOINTS if n.startswith(("thigh", "calf", "foot", "toe"))]
_END_MIRROR = [END_POINTS.index(KEYPOINTS[k]) for k in MIRROR_KEYPOINTS[NUM_JOINTS:]]
#: The joint each keypoint's offset starts at (its parent joint; -1 -> 0 for the pelvis).
_CARRIER = [max(p, 0) for p in PARENTS] + list(END_PARENTS)


def _segment_table():
    groups = {"spine1": 0, "spine2": 0, "spine3": 0, "neck": 1, "head": 1, "head_top": 1, "nose": 1,
              "clavicle": 2, "upperarm": 2, "forearm": 3, "hand": 4, "hand_tip": 5, "thumb": 5, "thigh": 6,
              "calf": 7, "foot": 8, "toe": 9, "toe_tip": 9, "heel": 9}
    seg, sig = [], []
    place = {"spine1": (12, 4, 4), "spine2": (12, 4, 4), "spine3": (12, 4, 4), "neck": (15, 6, 6), "head": (10, 5, 5),
             "clavicle": (15, 15, 15), "upperarm": (12, 12, 12), "thigh": (12, 12, 12), "head_top": (12, 12, 12),
             "nose": (12, 12, 12), "hand_tip": (8, 8, 8), "thumb": (20, 20, 20), "toe_tip": (10, 10, 10),
             "heel": (15, 15, 15)}
    for n in KEYPOINTS:
        base = n[:-2] if n.endswith(("_l", "_r")) else n
        seg.append(groups.get(base, -1))
        sig.append(float(np.mean(place.get(base, (4, 4, 4)))) if base != "pelvis" else 0.0)
    return seg, sig


#: Body segment of each keypoint's offset for :meth:`Augmenter._skeleton_variety` (-1: none).
_SEGMENT_OF_KP, _PLACEMENT_SIGMA = _segment_table()
_K = {n: i for i, n in enumerate(KEYPOINTS)}
_PELVIS_KP = _K["pelvis"]
#: Keypoint groups whole sources lack, with the probability of hiding each (at ``p_missing`` 0.5).
_MISSING_GROUPS = (
    ([_K["head_top"]], 0.3), ([_K["nose"]], 0.5), ([_K["hand_tip_l"], _K["hand_tip_r"]], 0.35),
    ([_K["thumb_l"], _K["thumb_r"]], 0.5), ([_K["heel_l"], _K["heel_r"]], 0.5),
    ([_K["toe_l"], _K["toe_r"], _K["toe_tip_l"], _K["toe_tip_r"]], 0.15), ([_K["spine2"]], 0.15),
    ([_K["clavicle_l"], _K["clavicle_r"]], 0.15), ([_K["neck"]], 0.1),
)


class TrainConfig:
    """Hyperparameters (all overridable from the command line)."""

    def __init__(self, **kw):
        self.steps = 6000
        self.batch = 512
        self.lr = 1e-3
        self.weight_decay = 0.05
        self.width = 512
        self.blocks = 3
        self.dropout = 0.0
        self.w_local = 1.0
        self.w_world = 1.0
        self.w_pos = 10.0
        self.w_limit = 0.1
        self.p_mirror = 0.5
        self.p_swap = 0.3
        self.p_synth = 0.5
        self.synth_deg = 15.0
        self.bone_sigma = 0.05
        self.scale_sigma = 0.08
        self.noise_m = 0.004
        self.max_drop = 0.3
        self.p_sparse = 0.5
        # skeleton variety (issue 11): per-sample segment proportions, joint placements, missing points
        self.p_variety = 0.0
        self.segment_range = 0.2
        self.placement_deg = 1.0
        self.p_missing = 0.0
        self.p_video = 0.0
        self.video_jitter_m = 0.015
        self.video_depth_m = 0.03
        self.p_fit_skeleton = 0.0
        # share of a dense sample's position loss measured on the skeleton the network is given (the
        # solver's fit, with p_fit_skeleton) instead of the true one: the network's rotations are
        # used on that skeleton, so there they should meet the keypoints
        self.w_pos_given = 0.0
        # how the network reads the skeleton ("lengths" or "offsets": model.network.skeleton_features); with
        # "offsets", a fitted skeleton's measured directions are turned by up to this many degrees (sigma)
        self.skeleton_input = "lengths"
        self.fit_direction_deg = 3.0
        # how the network reads the pose ("positions" or "directions": model.network.POSE_INPUTS)
        self.pose_input = "positions"
        # keypoint noise leaves the pelvis keypoint exact (the whole noisy set shifted onto it): the
        # network places the root from the given pelvis, not from the other keypoints
        self.exact_pelvis = 0
        # temporal context: windows of `window` frames (batch = frames per step), a temporal block reading
        # `temporal` frames (0: none); per step the block is off / centred / causal
        self.window = 1
        self.temporal = 0
        self.temporal_channels = 128
        self.p_temporal_off = 0.25
        self.seed = 0
        self.threads = 2
        self.device = "cpu"
        self.log_every = 100
        self.ckpt_every = 500
        self.eval_every = 1000
        for k, v in kw.items():
            if not hasattr(self, k):
                raise TypeError(f"unknown config key {k}")
            setattr(self, k, v)

    def as_dict(self):
        return dict(vars(self))


class PoseData:
    """Training poses as tensors: local_rot (N,22,3,3), root (N,3), offsets (N,22,3), end_offsets (N,10,3),
    and optionally has_kp (N,32) bool: the keypoints the frame's source really has (default all), and clip
    (N,) int: the clip of each frame (consecutive frames of one clip are consecutive rows)."""

    def __init__(self, local_rot, root_pos, offsets, end_offsets, has_kp=None, clip=None):
        self.local_rot = local_rot
        self.root_pos = root_pos
        self.offsets = offsets
        self.end_offsets = end_offsets
        self.has_kp = has_kp
        self.clip = clip

    def __len__(self):
        return self.local_rot.shape[0]

    def to(self, device):
        return PoseData(*(t.to(device) for t in (self.local_rot, self.root_pos, self.offsets, self.end_offsets)),
                        *(None if t is None else t.to(device) for t in (self.has_kp, self.clip)))


def pose_data_from_cache(path=None):
    """``(PoseData, info)`` from the training cache (:mod:`.cache`)."""
    from .cache import load_cache

    z = load_cache(path)
    c = torch.from_numpy(z["clip"])
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    data = PoseData(t(z["local_rot"]), t(z["root"]), t(z["offsets"])[c], t(z["end_offsets"])[c],
                    torch.from_numpy(z["has_kp"])[c], c)
    return data, dict(z["info"], cache=str(path or ""))


def _clips_to_data(clips) -> PoseData:
    lr = np.concatenate([c.local_rot for c in clips]).astype(np.float32)
    rp = np.concatenate([c.root_pos for c in clips]).astype(np.float32)
    off = np.concatenate([np.broadcast_to(c.skeleton.offsets, (len(c), NUM_JOINTS, 3)) for c in clips]).astype(np.float32)
    eo = np.concatenate([np.broadcast_to(c.skeleton.end_offsets, (len(c), len(END_POINTS), 3)) for c in clips]).astype(np.float32)
    clip = np.concatenate([np.full(len(c), i, dtype=np.int64) for i, c in enumerate(clips)])
    return PoseData(*(torch.from_numpy(np.ascontiguousarray(a)) for a in (lr, rp, off, eo)), None,
                    torch.from_numpy(clip))


def load_pose_data(holdout=(6,), fps=30.0, root=None):
    """``(train PoseData, held-out PoseData, info dict)`` from the CMU clips."""
    from .dataset import load_clips, split_by_subject

    clips = load_clips(root=root, fps=fps)
    tr, te = split_by_subject(clips, holdout=holdout)
    info = {
        "train_clips": len(tr), "train_frames": int(sum(len(c) for c in tr)),
        "heldout_clips": len(te), "heldout_frames": int(sum(len(c) for c in te)),
        "train_subjects": sorted({c.subject for c in tr}), "heldout_subjects": sorted({c.subject for c in te}), "fps": fps,
    }
    return _clips_to_data(tr), (_clips_to_data(te) if te else None), info


def synthetic_pose_data(n: int, seed: int = 0, sigma_deg: float = 20.0) -> PoseData:
    """Random plausible poses: the rest pose perturbed and projected into the joint limits."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.as_tensor(JOINT_AXIS_SCALE, dtype=torch.float32)
    aa = torch.randn(n, NUM_JOINTS, 3, generator=g) * scale * math.radians(sigma_deg)
    lr = lim.project_to_limits(axis_angle_to_matrix(aa))
    head = rot_z(torch.rand(n, generator=g) * 2 * math.pi)
    lr[:, 0] = head @ lr[:, 0]
    root = torch.tensor(CANONICAL.offsets[0], dtype=torch.float32).expand(n, 3).clone()
    root[:, :2] += torch.randn(n, 2, generator=g)
    off = torch.tensor(CANONICAL.offsets, dtype=torch.float32).expand(n, -1, -1).clone()
    eo = torch.tensor(CANONICAL.end_offsets, dtype=torch.float32).expand(n, -1, -1).clone()
    return PoseData(lr, root, off, eo)


class Augmenter:
    """Batched torch augmentation and mask sampling on the training device."""

    def __init__(self, data: PoseData, cfg: TrainConfig, device, generator: torch.Generator):
        self.data = data
        self.cfg = cfg
        self.dev = device
        self.g = generator
        self.mirror_mat = torch.tensor([-1.0, 1.0, 1.0], device=device)
        self.axis_scale = torch.as_tensor(JOINT_AXIS_SCALE, dtype=torch.float32, device=device)
        self.mj = torch.as_tensor(MIRROR_JOINTS, device=device)
        self.me = torch.as_tensor(_END_MIRROR, device=device)
        self.mk = torch.as_tensor(MIRROR_KEYPOINTS, device=device)
        sym = torch.as_tensor(MIRROR_JOINTS, device=device)
        self.sym_j = sym
        self.eff = torch.as_tensor(EFFECTOR_KP, device=device)
        self.hint = torch.as_tensor(HINT_KP, device=device)
        self.segment = torch.as_tensor(_SEGMENT_OF_KP, device=device)
        self.place_sigma = torch.as_tensor(_PLACEMENT_SIGMA, dtype=torch.float32, device=device)
        self.carrier = torch.as_tensor(_CARRIER, device=device)
        self.canon_off = torch.as_tensor(CANONICAL.offsets, dtype=torch.float32, device=device)
        self.canon_end = torch.as_tensor(CANONICAL.end_offsets, dtype=torch.float32, device=device)
        self.mk_sign = torch.tensor([1.0, -1.0, -1.0], device=device)
        self._win = 1
        self._start_cache = {}

    def _rand(self, *shape):
        return torch.rand(*shape, generator=self.g, device=self.dev)

    def _randn(self, *shape):
        return torch.randn(*shape, generator=self.g, device=self.dev)

    def _rw(self, *shape):
        """Uniform draws shared by the frames of a window: ``shape[0]`` frames, ``shape[0] / window`` draws."""
        w = self._win
        return torch.rand(shape[0] // w, *shape[1:], generator=self.g, device=self.dev).repeat_interleave(w, 0)

    def _rwn(self, *shape):
        """Normal draws shared by the frames of a window (see :meth:`_rw`)."""
        w = self._win
        return torch.randn(shape[0] // w, *shape[1:], generator=self.g, device=self.dev).repeat_interleave(w, 0)

    def _starts(self, window):
        """Frames that can start a window of ``window`` frames inside one clip."""
        key = int(window)
        if key not in self._start_cache:
            n = len(self.data)
            i = torch.arange(max(n - window + 1, 0), device=self.dev)
            clip = self.data.clip
            if clip is not None and window > 1:
                i = i[clip[i] == clip[i + window - 1]]
            if len(i) == 0:
                raise ValueError(f"no clip has {window} frames")
            self._start_cache[key] = i
        return self._start_cache[key]

    def _frames(self, batch, window):
        """Frame indices (batch * window,): ``batch`` windows of consecutive frames of one clip."""
        st = self._starts(window)
        pick = st[torch.randint(0, len(st), (batch,), generator=self.g, device=self.dev)]
        return (pick[:, None] + torch.arange(window, device=self.dev)).reshape(-1)

    def sample(self, batch: int, augment: bool = True, window: int = 1):
        """One training batch of ``batch`` windows of ``window`` consecutive frames (``batch * window`` rows,
        each window's frames consecutive).

        Everything drawn per sample (limb swaps, mirroring, the synthetic
        perturbation, heading, skeleton, mode, which points are given, noise
        levels) is drawn once per window; keypoint noise and dense dropouts
        per frame.

        Returns
        -------
        dict with ``local`` (N,22,3,3), ``root`` (N,3), ``offsets``, ``end_offsets``,
        ``kp`` (clean targets, N,32,3), ``kp_in`` (noisy input), ``mask`` (N,32),
        ``orient`` (N,6,3,3), ``orient_mask`` (N,6), ``sparse`` (N,) bool, ``offsets_in`` and
        ``end_offsets_in`` (the skeleton the network is given), ``window``.
        """
        cfg, d = self.cfg, self.data
        self._win = w = int(window)
        idx = self._frames(batch, w)
        N = batch * w
        L = d.local_rot[idx].clone()
        root = d.root_pos[idx].clone()
        off = d.offsets[idx].clone()
        eo = d.end_offsets[idx].clone()
        if augment:
            # limb swapping
            for part in (_ARMS, _LEGS):
                sw = self._rw(N) < cfg.p_swap
                if sw.any():
                    other = self._frames(batch, w)
                    L[:, part] = torch.where(sw[:, None, None, None], d.local_rot[other][:, part], L[:, part])
            # mirroring
            mir = self._rw(N) < cfg.p_mirror
            if mir.any():
                M = self.mirror_mat
                Lm = L[:, self.mj] * M[:, None] * M[None, :]  # M R M == elementwise sign flip
                L = torch.where(mir[:, None, None, None], Lm, L)
                root = torch.where(mir[:, None], root * M, root)
                off = torch.where(mir[:, None, None], off[:, self.mj] * M, off)
                eo = torch.where(mir[:, None, None], eo[:, self.me] * M, eo)
            # synthetic perturbation (the same for every frame of a window)
            syn = self._rw(N) < cfg.p_synth
            if syn.any():
                sig = math.radians(cfg.synth_deg) * self._rw(N, 1, 1)
                aa = self._rwn(N, NUM_JOINTS, 3) * self.axis_scale * sig
                aa[:, 0] *= 0.5
                Lp = lim.project_to_limits(L @ axis_angle_to_matrix(aa))
                L = torch.where(syn[:, None, None, None], Lp, L)
            # random heading
            head = rot_z(self._rw(N) * 2 * math.pi)
            L = torch.cat([(head @ L[:, 0])[:, None], L[:, 1:]], 1)
            root = (head @ root[..., None])[..., 0]
            # bone lengths
            f = 1.0 + (self._rwn(N, NUM_JOINTS) * cfg.bone_sigma).clamp(-0.25, 0.25)
            f = 0.5 * (f + f[:, self.sym_j])
            fe = 1.0 + (self._rwn(N, eo.shape[1]) * cfg.bone_sigma).clamp(-0.25, 0.25)
            fe = 0.5 * (fe + fe[:, self.me])
            s = torch.exp(self._rwn(N, 1) * cfg.scale_sigma)
            off = off * (f * s)[..., None]
            eo = eo * (fe * s)[..., None]
            if cfg.p_variety > 0:
                off, eo = self._skeleton_variety(off, eo)
        kp = fk_keypoints(L, root, off, eo)
        # masks
        sparse = self._rw(N) < cfg.p_sparse
        p_drop = self._rw(N, 1) * cfg.max_drop
        dense_mask = self._rand(N, NUM_KEYPOINTS) >= p_drop
        sparse_mask = torch.zeros(N, NUM_KEYPOINTS, dtype=torch.bool, device=self.dev)
        sparse_mask[:, self.eff] = True
        # hints: none (40 %), each with p = 0.5 (30 %), all four (30 %)
        hint_mode = self._rw(N, 1)
        hints = ((self._rw(N, len(HINT_KP)) < 0.5) & (hint_mode >= 0.4)) | (hint_mode >= 0.7)
        sparse_mask[:, self.hint] = hints
        if augment and cfg.p_missing > 0:
            dense_mask = dense_mask & ~self._missing_groups(N)
        if d.has_kp is not None:
            dense_mask = dense_mask & d.has_kp[idx]
        mask = torch.where(sparse[:, None], sparse_mask, dense_mask)
        mask[~mask.any(1), 0] = True
        # orientations (sparse only): none / pelvis only / all six
        omode = self._rw(N)
        omask = torch.zeros(N, NUM_EFF, dtype=torch.bool, device=self.dev)
        omask[:, 0] = sparse & (omode > 0.5)
        omask[:, 1:] = (sparse & (omode > 0.75))[:, None]
        # world orientations of the effector joints
        wr = _world_rot(L)
        orient = wr[:, list(EFFECTOR_JOINTS)]
        kp_in = kp
        if augment and cfg.noise_m > 0:
            kp_in = kp + self._randn(*kp.shape) * cfg.noise_m * self._rw(N, 1, 1)
        if augment and cfg.p_video > 0:
            kp_in = self._video_noise(kp_in, ~sparse)
        if augment and cfg.exact_pelvis and kp_in is not kp:
            kp_in = kp_in - (kp_in[:, _PELVIS_KP] - kp[:, _PELVIS_KP])[:, None]
        off_in, eo_in = off, eo
        if augment and cfg.p_fit_skeleton > 0:
            off_in, eo_in = self._input_skeleton(off, eo, mask, sparse)
        return dict(local=L, root=root, offsets=off, end_offsets=eo, kp=kp, kp_in=kp_in, mask=mask, orient=orient,
                    orient_mask=omask, sparse=sparse, offsets_in=off_in, end_offsets_in=eo_in, window=w)

    def _skeleton_variety(self, off, eo):
        """Other proportions and joint placements, as other bodies and skeleton conventions have.

        For a share ``p_variety`` of the samples: every body segment
        (:data:`_SEGMENT_OF_KP`: torso, neck and head, shoulder width, upper
        arms, forearms, hands, hip width, thighs, shins, feet) scaled by a
        factor uniform in ``1 +- segment_range`` (both sides alike), and
        every offset turned by a random rotation (per-axis sigma
        :data:`_PLACEMENT_SIGMA` degrees times ``placement_deg``, mirrored
        between the sides): spine curvature, where the clavicles and hips
        sit, where the end points are.
        """
        cfg = self.cfg
        B = off.shape[0]
        on = self._rw(B) < cfg.p_variety
        g = 1.0 + (2.0 * self._rw(B, int(self.segment.max()) + 1) - 1.0) * cfg.segment_range
        fac = torch.where(self.segment >= 0, g[:, self.segment.clamp_min(0)], torch.ones((), device=self.dev))
        sig = torch.deg2rad(self.place_sigma) * cfg.placement_deg  # (32,)
        aa = self._rwn(B, NUM_KEYPOINTS, 3) * sig[None, :, None]
        aa = 0.5 * (aa + aa[:, self.mk] * self.mk_sign)   # left/right mirror images
        R = axis_angle_to_matrix(aa)
        allo = torch.cat([off, eo], 1)
        new = (R @ allo[..., None])[..., 0] * fac[..., None]
        new[:, 0] = allo[:, 0]
        allo = torch.where(on[:, None, None], new, allo)
        return allo[:, :NUM_JOINTS].contiguous(), allo[:, NUM_JOINTS:].contiguous()

    def _missing_groups(self, batch):
        """Keypoints that whole sources lack (head top, nose, hand tips, thumbs, heels, toes, a spine,
        the clavicles, the neck), each group hidden with its probability times ``p_missing / 0.5``."""
        hide = torch.zeros(batch, NUM_KEYPOINTS, dtype=torch.bool, device=self.dev)
        k = self.cfg.p_missing / 0.5
        for idx, p in _MISSING_GROUPS:
            hit = self._rw(batch) < min(1.0, p * k)
            hide[:, idx] |= hit[:, None]
        return hide

    def _video_noise(self, kp, dense):
        """Keypoint noise like a video pose estimator's, on a share ``p_video`` of the dense samples:
        per-point jitter (sigma up to ``video_jitter_m``) and a depth error along a random horizontal
        viewing direction (sigma up to ``video_depth_m``)."""
        cfg = self.cfg
        B = kp.shape[0]
        on = (self._rw(B) < cfg.p_video) & dense
        jit = self._randn(B, NUM_KEYPOINTS, 3) * (self._rw(B, 1, 1) * cfg.video_jitter_m)
        ang = self._rw(B) * 2 * math.pi
        view = torch.stack([torch.cos(ang), torch.sin(ang), torch.zeros_like(ang)], -1)
        depth = self._randn(B, NUM_KEYPOINTS, 1) * (self._rw(B, 1, 1) * cfg.video_depth_m) * view[:, None]
        return torch.where(on[:, None, None], kp + jit + depth, kp)

    def _input_skeleton(self, off, eo, mask, sparse):
        """The skeleton the solver would have.

        For a share ``p_fit_skeleton`` of the samples: in dense samples the
        lengths :func:`neural_ik.model.inference.fit_skeleton` measures (the
        true ones where both ends of a bone are given, the canonical ones
        scaled to the body elsewhere) and, for a network reading offsets, the
        directions the solver's re-fit measures (``Solver._refit_directions``:
        the true ones, turned by ``fit_direction_deg`` at random, where both
        ends are given; the canonical ones elsewhere); in sparse samples the
        canonical skeleton scaled by the leg length (what a bake without a
        source skeleton passes). The loss keeps the true skeleton.
        """
        B = off.shape[0]
        on = self._rw(B) < self.cfg.p_fit_skeleton
        allo = torch.cat([off, eo], 1)
        canon = torch.cat([self.canon_off, self.canon_end], 0)
        ln = allo.norm(dim=-1)
        lc = canon.norm(dim=-1).expand(B, -1)
        both = mask & mask[:, self.carrier] & (ln > 1e-4)   # fit_skeleton ignores zero-length bones
        ok = both[:, 1:]
        ratio = torch.where(ok, ln[:, 1:] / lc[:, 1:].clamp_min(1e-6), torch.full_like(ln[:, 1:], float("nan")))
        s = ratio.nanmedian(dim=1).values
        s = torch.where(torch.isfinite(s) & (s > 0.1), s, torch.ones_like(s))
        legs = [KEYPOINTS.index(n) for n in ("calf_l", "foot_l", "calf_r", "foot_r")]
        s_leg = ln[:, legs].sum(1) / lc[:, legs].sum(1)
        s = torch.where(sparse, s_leg, s)
        fit = torch.where(both & ~sparse[:, None], ln, lc * s[:, None])
        w = self._win
        fit = fit[::w].repeat_interleave(w, 0)   # one skeleton per window: its first frame's
        dirs = (canon / lc[:1, :, None].clamp_min(1e-9)).expand(B, -1, -1)
        if self.cfg.skeleton_input == "offsets":
            seen = allo / ln[..., None].clamp_min(1e-9)
            if self.cfg.fit_direction_deg > 0:
                aa = self._rwn(B, seen.shape[1], 3) * math.radians(self.cfg.fit_direction_deg)
                seen = (axis_angle_to_matrix(aa) @ seen[..., None])[..., 0]
            seen = seen[::w].repeat_interleave(w, 0)
            measured = (both & ~sparse[:, None])[::w].repeat_interleave(w, 0)
            dirs = torch.where(measured[..., None], seen, dirs)
        new = dirs * fit[..., None]
        new[:, 0] = allo[:, 0]
        allo = torch.where(on[:, None, None], new, allo)
        return allo[:, :NUM_JOINTS].contiguous(), allo[:, NUM_JOINTS:].contiguous()


def _world_rot(L):
    from neural_ik.model.fk import forward_kinematics

    return forward_kinematics(L, torch.zeros(L.shape[0], 3, dtype=L.dtype, device=L.device),
                              torch.zeros(NUM_JOINTS, 3, dtype=L.dtype, device=L.device))[0]


def compute_loss(net: IKNet, b: dict, cfg: TrainConfig, temporal: str = "off"):
    """Loss and a dict of its parts (floats) for one batch (``temporal``: the mode of the temporal block)."""
    local, root, rot6 = net.predict(b["kp_in"], b["mask"], b["offsets_in"], b["end_offsets_in"], b["orient"],
                                    b["orient_mask"], window=b.get("window", 1), temporal=temporal)
    kp, (wr, _) = fk_keypoints(local, root, b["offsets"], b["end_offsets"], return_world=True)
    wr_gt = _world_rot(b["local"])
    g_local = geodesic_angle(local, b["local"]).mean()
    g_world = geodesic_angle(wr, wr_gt).mean()
    d = (kp - b["kp"]).norm(dim=-1).mean(1)
    if cfg.w_pos_given > 0:
        # dense samples: the given keypoints on the given skeleton (what the solver's network alone returns)
        kg = fk_keypoints(local, root, b["offsets_in"], b["end_offsets_in"])
        m = b["mask"].to(kg.dtype)
        dg = ((kg - b["kp"]).norm(dim=-1) * m).sum(1) / m.sum(1).clamp_min(1.0)
        a = cfg.w_pos_given * (~b["sparse"]).to(kg.dtype)
        d = (1.0 - a) * d + a * dg
    pos = d.mean()
    limit = lim.limit_penalty(local)
    # keep the raw 6D near unit length (well conditioned Gram-Schmidt)
    reg = ((rot6[..., :3].norm(dim=-1) - 1) ** 2).mean() + ((rot6[..., 3:].norm(dim=-1) - 1) ** 2).mean()
    loss = cfg.w_local * g_local + cfg.w_world * g_world + cfg.w_pos * pos + cfg.w_limit * limit + 0.01 * reg
    parts = {"loss": loss.item(), "local_deg": math.degrees(g_local.item()), "world_deg": math.degrees(g_world.item()),
             "pos_mm": 1000 * pos.item(), "limit": limit.item()}
    return loss, parts


class Progress:
    """A minimal progress bar on stderr."""

    def __init__(self, total, start=0, stream=sys.stderr, enabled=True):
        self.total, self.start, self.stream, self.enabled = total, start, stream, enabled
        self.t0 = time.time()

    def update(self, step, text=""):
        if not self.enabled:
            return
        done = step - self.start
        el = time.time() - self.t0
        rate = done / el if el > 0 else 0.0
        eta = (self.total - step) / rate if rate > 0 else 0.0
        frac = step / max(self.total, 1)
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        self.stream.write(f"\r[{bar}] {step}/{self.total} {rate:.1f} it/s ETA {eta / 60:.1f} min {text}   ")
        self.stream.flush()

    def close(self):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


@torch.no_grad()
def quick_eval(net, data: PoseData, device, n=2048, seed=123):
    """Network-only dense / sparse errors on (a fixed subset of) a data set."""
    net.eval()
    g = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randperm(len(data), generator=g)[:n]
    L, root, off, eo = (t[idx].to(device) for t in (data.local_rot, data.root_pos, data.offsets, data.end_offsets))
    kp = fk_keypoints(L, root, off, eo)
    wr_gt = _world_rot(L)
    out = {}
    for mode in ("dense", "sparse"):
        mask = torch.ones(len(idx), NUM_KEYPOINTS, dtype=torch.bool, device=device)
        if mode == "sparse":
            mask[:] = False
            mask[:, list(EFFECTOR_KP)] = True
        lo, ro, _ = net.predict(kp, mask, off, eo)
        kpp, (wr, _) = fk_keypoints(lo, ro, off, eo, return_world=True)
        out[f"{mode}_deg"] = math.degrees(geodesic_angle(wr, wr_gt).mean().item())
        out[f"{mode}_mm"] = 1000 * (kpp[:, :NUM_JOINTS] - kp[:, :NUM_JOINTS]).norm(dim=-1).mean().item()
    net.train()
    return out


def _save_ckpt(path: Path, net, opt, sched, step, gen, cfg, extra):
    tmp = path.with_suffix(".tmp")
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                "gen": gen.get_state(), "cfg": cfg.as_dict(), "extra": extra}, tmp)
    os.replace(tmp, path)


def train(cfg: TrainConfig, data: PoseData, out_dir=None, heldout: PoseData | None = None, resume=True, progress=True,
          log=None, info=None):
    """Train an :class:`IKNet` and return it (in eval mode) with a history list.

    Parameters
    ----------
    cfg : TrainConfig
    data : PoseData
        Training poses (any device; moved to ``cfg.device``).
    out_dir : str or Path, optional
        Where ``checkpoint.pt`` / ``final.pt`` / ``log.jsonl`` go; no files when None.
    heldout : PoseData, optional
        Only logged (never used for selection).
    resume : bool
        Continue from ``out_dir/checkpoint.pt`` when it exists.
    """
    dev = torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    if dev.type == "cpu" and cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = data.to(dev)
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    aug = Augmenter(data, cfg, dev, gen)
    net = IKNet(cfg.width, cfg.blocks, cfg.dropout, cfg.temporal, cfg.temporal_channels, cfg.skeleton_input,
                cfg.pose_input).to(dev)
    window = max(1, int(cfg.window)) if cfg.temporal > 0 else 1
    if window > 1 and cfg.batch % window:
        raise ValueError(f"batch ({cfg.batch} frames) must be a multiple of window ({window})")
    # normalisation statistics from augmented batches (fixed seed)
    with torch.no_grad():
        feats = []
        for _ in range(4):
            b = aug.sample(max(256, min(2048, cfg.batch * 2)))
            feats.append(encode(b["kp_in"], b["mask"], b["offsets_in"], b["end_offsets_in"], b["orient"],
                                b["orient_mask"], cfg.skeleton_input, cfg.pose_input)[0])
        net.set_normalisation(torch.cat(feats))
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        (decay if p.dim() == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.99))
    warm = min(300, max(cfg.steps // 20, 1))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps))))
    start = 0
    history = []
    out = Path(out_dir) if out_dir is not None else None
    t_used = 0.0
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        ck = out / "checkpoint.pt"
        if resume and ck.exists():
            st = torch.load(ck, map_location=dev, weights_only=False)
            net.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            sched.load_state_dict(st["sched"])
            gen.set_state(st["gen"].cpu())  # generator states are CPU byte tensors
            start = st["step"]
            t_used = st.get("extra", {}).get("seconds", 0.0)
            print(f"resumed from {ck} at step {start}", file=sys.stderr)
        (out / "config.json").write_text(json.dumps(cfg.as_dict(), indent=1))
    logf = open(out / "log.jsonl", "a") if out is not None else None
    bar = Progress(cfg.steps, start, enabled=progress)
    net.train()
    t0 = time.time()
    for step in range(start, cfg.steps):
        mode = "off"
        if window > 1:
            u = float(torch.rand((), generator=gen, device=dev))
            mode = "off" if u < cfg.p_temporal_off else ("centred" if u < 0.5 + cfg.p_temporal_off / 2 else "causal")
        b = aug.sample(cfg.batch // window, window=window)
        loss, parts = compute_loss(net, b, cfg, mode)
        opt.zero_grad(set_to_none=True)
        if not math.isfinite(parts["loss"]):  # one bad batch must not poison the weights
            print(f"step {step + 1}: non-finite loss, batch skipped", file=sys.stderr)
            sched.step()
            continue
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        s = step + 1
        if s % cfg.log_every == 0 or s == cfg.steps:
            rec = {"step": s, "lr": sched.get_last_lr()[0], "seconds": t_used + time.time() - t0, **parts}
            if heldout is not None and (s % cfg.eval_every == 0 or s == cfg.steps):
                rec.update({"heldout_" + k: v for k, v in quick_eval(net, heldout, dev).items()})
            history.append(rec)
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
            if log:
                log(rec)
        bar.update(s, f"loss {parts['loss']:.3f} {parts['world_deg']:.1f}deg {parts['pos_mm']:.1f}mm")
        if out is not None and (s % cfg.ckpt_every == 0 or s == cfg.steps):
            _save_ckpt(out / "checkpoint.pt", net, opt, sched, s, gen, cfg, {"seconds": t_used + time.time() - t0})
    bar.close()
    seconds = t_used + time.time() - t0
    net.eval()
    if out is not None:
        torch.save({"model": net.state_dict(), "cfg": cfg.as_dict(), "seconds": seconds, "info": info or {}}, out / "final.pt")
    if logf:
        logf.close()
    net.train_seconds = seconds
    return net, history


def export_weights(net: IKNet, path, cfg: TrainConfig | None = None, info: dict | None = None, half: bool = True):
    """Write the shippable weights file.

    The file is a plain dict (loadable with ``torch.load(weights_only=True)``)::

        {"format": "neural_ik", "format_version": 2,
         "keypoints": [...32 names...], "joints": [...22 names...],
         "num_features": int, "num_outputs": int,
         "hparams": {"width", "blocks", "dropout", "temporal", "temporal_channels", "skeleton_input",
                     "pose_input"},
         "state": {parameter name: tensor (float16 for weight matrices)},
         "feat_mean": tensor, "feat_std": tensor,   # normalisation stats
         "train": {...primitives: config, data, time...}}
    """
    from neural_ik.model.network import NUM_OUTPUTS, num_features

    state = {}
    for k, v in net.state_dict().items():
        v = v.detach().cpu()
        if half and v.dim() == 2:
            v = v.half()
        else:
            v = v.float()
        state[k] = v.contiguous()
    payload = {
        "format": "neural_ik",
        "format_version": FORMAT_VERSION,
        "keypoints": list(KEYPOINTS),
        "joints": list(JOINTS),
        "num_features": num_features(net.skeleton_input, net.pose_input),
        "num_outputs": NUM_OUTPUTS,
        "hparams": dict(net.hparams),
        "state": state,
        "feat_mean": net.feat_mean.detach().cpu().float().clone(),
        "feat_std": net.feat_std.detach().cpu().float().clone(),
        "train": json.loads(json.dumps({"config": cfg.as_dict() if cfg else {}, **(info or {})})),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def export_checkpoint(ckpt, path, info=None):
    """Export the network of a checkpoint (``checkpoint.pt`` or ``final.pt``) as shippable weights."""
    st = torch.load(ckpt, map_location="cpu", weights_only=False)
    cfg = TrainConfig(**st["cfg"])
    net = IKNet(cfg.width, cfg.blocks, cfg.dropout, cfg.temporal, cfg.temporal_channels, cfg.skeleton_input,
                cfg.pose_input)
    net.load_state_dict(st["model"])
    extra = {"step": st.get("step", cfg.steps), "seconds": round(st.get("seconds", st.get("extra", {}).get("seconds", 0.0)), 1)}
    return export_weights(net.eval(), path, cfg, dict(st.get("info", {}), **extra, **(info or {})))


def main(argv=None):
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Train the Neural IK network", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = TrainConfig()
    for k, v in defaults.as_dict().items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v) if not isinstance(v, bool) else int, default=v)
    p.add_argument("--out", default=".cache/train", help="checkpoint / log folder")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--export", default=None, help="also write shippable weights here (e.g. weights/neural_ik.pt)")
    p.add_argument("--data", default=None, help="BVH folder (default ../shared/mocap/cmu)")
    p.add_argument("--cache", default=None, help="train from this training cache (python -m training.cache) "
                   "instead of --data; held-out CMU subject 6 is logged when ../shared/mocap/cmu is there")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--synthetic", type=int, default=0, help="train on N synthetic poses instead of the mocap")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--export-from", default=None, help="only export this checkpoint to --export and exit")
    a = p.parse_args(argv)
    if a.export_from:
        if not a.export:
            p.error("--export-from needs --export")
        export_checkpoint(a.export_from, a.export)
        print(f"wrote {a.export}", file=sys.stderr)
        return 0
    cfg = TrainConfig(**{k: getattr(a, k) for k in defaults.as_dict()})
    if cfg.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda requested but CUDA is not available")
    if a.synthetic:
        data, held, info = synthetic_pose_data(a.synthetic, cfg.seed), synthetic_pose_data(1024, cfg.seed + 1), {"synthetic": a.synthetic}
    elif a.cache:
        data, info = pose_data_from_cache(a.cache)
        try:
            _, held, _ = load_pose_data(fps=a.fps, root=a.data)
        except (FileNotFoundError, OSError, ValueError):
            held = None
    else:
        data, held, info = load_pose_data(fps=a.fps, root=a.data)
    print(f"training on {len(data)} poses ({json.dumps(info)})", file=sys.stderr)
    net, hist = train(cfg, data, a.out, heldout=held, resume=not a.fresh, progress=not a.no_progress, info=info)
    info = dict(info, seconds=round(getattr(net, "train_seconds", 0.0), 1), steps=cfg.steps,
                hardware=f"{torch.get_num_threads()} CPU threads" if cfg.device == "cpu" else cfg.device,
                command="python -m training.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    if a.export:
        export_weights(net.cpu(), a.export, cfg, info)
        print(f"wrote {a.export}", file=sys.stderr)
    if hist:
        print(json.dumps(hist[-1]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
