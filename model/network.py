"""The IK network: keypoints (+ mask, optional effector orientations) -> pose.

One network serves both modes; the visibility mask tells it which keypoints
it was given:

- *dense*: all or most of the 32 keypoints (some may be missing);
- *sparse*: the six effectors (pelvis, head, hands, feet), optionally the
  four pole hints (elbows, knees) and optionally effector orientations.

Input encoding (:func:`encode`)
-------------------------------
1. *Centre*: the pelvis keypoint when given, else the mean of the given
   keypoints.
2. *Heading*: a horizontal "body left" direction, the weighted sum of
   ``left - right`` over every mirrored keypoint pair that is given (hips and
   shoulders weigh most), plus the pelvis X axis when the pelvis orientation
   is given. Everything is rotated about Z so that this direction becomes +X
   (the rest pose's left); the predicted root orientation and position are
   rotated back. The whole input is therefore invariant to the character's
   heading and position on the floor.
3. *Scale*: a size derived from the skeleton's bone lengths
   (:func:`skeleton_scale`, 1.0 for the canonical skeleton); positions are
   divided by it.
4. Features: canonical positions of the given keypoints (zeros where
   missing), for a network with ``pose_input`` "directions" every bone's
   direction between its two keypoints (:func:`bone_directions`), the
   mask, the given effector orientations as 6D (zeros where missing) and
   their mask, and the skeleton (:func:`skeleton_features`):
   the bone lengths relative to the scaled canonical skeleton (networks
   with ``skeleton_input`` "lengths") or every offset in its parent's frame,
   divided by the scale, minus the canonical offset ("offsets": where the
   joints sit, not only how far apart, so the rotations answer the
   skeleton they are given). Standardised with stored mean/std.

Output (:func:`decode`): 22 local rotations as 6D (added to the identity's
6D) and the root position relative to the centre, in the canonical frame and
divided by the scale.
"""

from __future__ import annotations

import torch
from torch import nn

from .features import (EFFECTOR_JOINTS, EFFECTOR_KP, HINT_KP, NUM_EFF, NUM_FEATURES, NUM_JOINTS,
                       NUM_OUTPUTS, POSE_INPUTS, SKELETON_INPUTS, _ID6, _PAIRS_L, _PAIRS_R, _PAIRS_W, _PELVIS,
                       bone_directions, num_features, skeleton_features, skeleton_scale)
from .rotations import device_constant, matrix_to_rot6d, rot6d_to_matrix, rot_z

__all__ = [
    "EFFECTOR_KP",
    "HINT_KP",
    "EFFECTOR_JOINTS",
    "NUM_FEATURES",
    "SKELETON_INPUTS",
    "POSE_INPUTS",
    "bone_directions",
    "num_features",
    "skeleton_features",
    "NUM_OUTPUTS",
    "IKNet",
    "TemporalMix",
    "TEMPORAL_MODES",
    "skeleton_scale",
    "estimate_heading",
    "encode",
    "decode",
]


def estimate_heading(kp: torch.Tensor, mask: torch.Tensor, orient=None, orient_mask=None) -> torch.Tensor:
    """Heading angle (radians about +Z) of the body's left direction, shape (B,).

    Parameters
    ----------
    kp : Tensor, shape (B, 32, 3)
    mask : Tensor, shape (B, 32), bool or float
    orient : Tensor, shape (B, 6, 3, 3), optional
        Effector world orientations (row 0 = pelvis).
    orient_mask : Tensor, shape (B, 6), optional
    """
    m = mask.to(kp.dtype)
    w = device_constant(_PAIRS_W, kp.dtype, kp.device)
    both = m[:, _PAIRS_L] * m[:, _PAIRS_R] * w  # (B, P)
    vec = ((kp[:, _PAIRS_L, :2] - kp[:, _PAIRS_R, :2]) * both[..., None]).sum(1)  # (B, 2)
    if orient is not None and orient_mask is not None:
        pm = orient_mask[:, 0].to(kp.dtype)[:, None]
        vec = vec + 10.0 * pm * orient[:, 0, :2, 0]
    degenerate = vec.norm(dim=-1) < 1e-6
    ang = torch.atan2(vec[:, 1], vec[:, 0])
    return torch.where(degenerate, torch.zeros_like(ang), ang)


def encode(kp, mask, offsets, end_offsets, orient=None, orient_mask=None, skeleton_input: str = "lengths",
           pose_input: str = "positions"):
    """Network features and the frame needed to decode its output.

    Parameters
    ----------
    kp : Tensor, shape (B, 32, 3)
        World keypoints (values where ``mask`` is False are ignored, may be NaN).
    mask : Tensor, shape (B, 32), bool
    offsets : Tensor, shape (B, 22, 3) or (22, 3)
    end_offsets : Tensor, shape (B, 10, 3) or (10, 3)
    orient : Tensor, shape (B, 6, 3, 3), optional
        World orientations of the six effectors (pelvis, head, hands, feet).
    orient_mask : Tensor, shape (B, 6), bool, optional
    skeleton_input : str
        How the skeleton is read (:func:`skeleton_features`).
    pose_input : str
        "directions": the bones' directions (:func:`bone_directions`) follow the positions.

    Returns
    -------
    feats : Tensor, shape (B, num_features(skeleton_input, pose_input))
    frame : tuple (centre (B,3), heading rotation (B,3,3), scale (B,))
    """
    B = kp.shape[0]
    dt, dev = kp.dtype, kp.device
    mask = mask.bool()
    m = mask.to(dt)
    kp = torch.where(mask[..., None], kp, torch.zeros((), dtype=dt, device=dev))
    offsets = offsets.expand(B, NUM_JOINTS, 3)
    end_offsets = end_offsets.expand(B, end_offsets.shape[-2], 3)
    scale = skeleton_scale(offsets, end_offsets)  # (B,)
    mean_vis = (kp * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1.0)
    centre = torch.where(mask[:, _PELVIS, None], kp[:, _PELVIS], mean_vis)
    if orient is None or orient_mask is None:
        orient = torch.eye(3, dtype=dt, device=dev).expand(B, NUM_EFF, 3, 3)
        orient_mask = torch.zeros(B, NUM_EFF, dtype=torch.bool, device=dev)
    orient_mask = orient_mask.bool()
    heading = estimate_heading(kp, mask, orient, orient_mask)
    rot_h = rot_z(heading)  # canonical -> world
    rot_inv = rot_h.transpose(-1, -2)
    rel = ((kp - centre[:, None]) @ rot_inv.transpose(-1, -2)) / scale[:, None, None]
    rel = rel * m[..., None]
    om = orient_mask.to(dt)
    o6 = matrix_to_rot6d(rot_inv[:, None] @ torch.where(orient_mask[..., None, None], orient, torch.eye(3, dtype=dt, device=dev))) * om[..., None]
    sk = skeleton_features(offsets, end_offsets, scale, skeleton_input)
    parts = [rel.reshape(B, -1)]
    if pose_input == "directions":
        parts.append(bone_directions(rel, m))
    elif pose_input != "positions":
        num_features(skeleton_input, pose_input)     # (refuses an unknown kind)
    feats = torch.cat(parts + [m, o6.reshape(B, -1), om, sk], dim=-1)
    return feats, (centre, rot_h, scale)


def decode(out: torch.Tensor, frame):
    """World pose from raw network output.

    Parameters
    ----------
    out : Tensor, shape (B, NUM_OUTPUTS)
    frame : tuple from :func:`encode`

    Returns
    -------
    local_rot : Tensor, shape (B, 22, 3, 3)
        Local rotations; row 0 is the root's world orientation.
    root_pos : Tensor, shape (B, 3)
    rot6 : Tensor, shape (B, 22, 6)
        The raw 6D output (canonical frame), for regularisers.
    """
    centre, rot_h, scale = frame
    B = out.shape[0]
    id6 = device_constant(_ID6, out.dtype, out.device)
    rot6 = out[:, : NUM_JOINTS * 6].reshape(B, NUM_JOINTS, 6) + id6
    local = rot6d_to_matrix(rot6)
    root = rot_h @ local[:, 0]
    local = torch.cat([root[:, None], local[:, 1:]], dim=1)
    t = out[:, NUM_JOINTS * 6:]
    root_pos = centre + (rot_h @ t[..., None])[..., 0] * scale[:, None]
    return local, root_pos, rot6


class ResBlock(nn.Module):
    """Pre-norm residual MLP block."""

    def __init__(self, width: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x):
        return x + self.fc2(self.drop(torch.nn.functional.silu(self.fc1(self.norm(x)))))


#: Temporal modes of :class:`IKNet`: per frame, a window centred on each frame (bakes), past frames only (live).
TEMPORAL_MODES = ("off", "centred", "causal")


class TemporalMix(nn.Module):
    """Residual mixing of per-frame hidden states over neighbouring frames.

    ``h + up(silu(conv_t(down(norm(h)))))``: a projection to ``channels``, a
    depthwise convolution over time with ``kernel`` taps (a centred kernel,
    or a causal one that reads only the current and past frames; sequence
    ends are padded by repeating the end frame), SiLU and a projection back
    (zero-initialised, so an untrained block is the identity).

    Parameters
    ----------
    width : int
        Hidden width of the network.
    channels : int
        Width of the temporal projection.
    kernel : int
        Frames the convolution reads (odd).
    """

    def __init__(self, width: int, channels: int = 128, kernel: int = 9):
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"temporal kernel must be odd and positive, got {kernel}")
        self.kernel = int(kernel)
        self.norm = nn.LayerNorm(width)
        self.down = nn.Linear(width, channels)
        self.k_centred = nn.Parameter(torch.randn(channels, 1, kernel) / kernel)
        self.k_causal = nn.Parameter(torch.randn(channels, 1, kernel) / kernel)
        self.up = nn.Linear(channels, width)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor, window: int, mode: str) -> torch.Tensor:
        """``h`` (B * window, width), frames of each sequence consecutive; ``mode`` "centred" or "causal"."""
        n, width = h.shape
        B = n // window
        x = self.down(self.norm(h)).reshape(B, window, -1).transpose(1, 2)  # (B, C, T)
        K = self.kernel
        if mode == "centred":
            x = nn.functional.pad(x, (K // 2, K // 2), mode="replicate")
            w = self.k_centred
        elif mode == "causal":
            x = nn.functional.pad(x, (K - 1, 0), mode="replicate")
            w = self.k_causal
        else:
            raise ValueError(f"unknown temporal mode {mode!r}")
        y = nn.functional.conv1d(x, w, groups=w.shape[0])  # (B, C, T)
        y = torch.nn.functional.silu(y).transpose(1, 2).reshape(n, -1)
        return h + self.up(y)


class IKNet(nn.Module):
    """Residual MLP from encoded features to raw pose output, with optional temporal context.

    Every frame goes through the same per-frame layers; with ``temporal`` >
    0 a :class:`TemporalMix` block after the first half of the residual
    blocks mixes each frame's hidden state with its neighbours' when the
    frames come as sequences (``window`` frames each) and a temporal mode is
    asked for. Mode ``"off"`` (a single pose) skips it: the network is then
    the per-frame MLP (trained that way for part of the batches).

    Parameters
    ----------
    width : int
        Hidden width.
    blocks : int
        Number of residual blocks.
    dropout : float
        Dropout inside the blocks (training only).
    temporal : int
        Frames the temporal block reads (odd); 0: no temporal block.
    temporal_channels : int
        Width of the temporal block.
    skeleton_input : str
        How the skeleton is read (:func:`skeleton_features`): "lengths" or "offsets".
    pose_input : str
        How the pose is read (:data:`POSE_INPUTS`): "positions" or "directions".
    """

    def __init__(self, width: int = 512, blocks: int = 3, dropout: float = 0.0, temporal: int = 0,
                 temporal_channels: int = 128, skeleton_input: str = "lengths", pose_input: str = "positions"):
        super().__init__()
        n_in = num_features(skeleton_input, pose_input)
        self.skeleton_input = skeleton_input
        self.pose_input = pose_input
        self.hparams = {"width": int(width), "blocks": int(blocks), "dropout": float(dropout),
                        "temporal": int(temporal), "temporal_channels": int(temporal_channels),
                        "skeleton_input": skeleton_input, "pose_input": pose_input}
        self.inp = nn.Linear(n_in, width)
        self.blocks = nn.Sequential(*[ResBlock(width, dropout) for _ in range(blocks)])
        #: the temporal block runs after this many residual blocks
        self.temporal_at = (blocks + 1) // 2
        self.temporal = TemporalMix(width, temporal_channels, temporal) if temporal > 0 else None
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, NUM_OUTPUTS)
        nn.init.normal_(self.out.weight, std=1e-3)
        nn.init.zeros_(self.out.bias)
        self.register_buffer("feat_mean", torch.zeros(n_in))
        self.register_buffer("feat_std", torch.ones(n_in))

    @property
    def context(self) -> int:
        """Frames on each side a centred temporal output depends on (0 without a temporal block)."""
        return 0 if self.temporal is None else self.temporal.kernel - 1

    def set_normalisation(self, feats: torch.Tensor):
        """Set the feature mean/std from a sample of encoded features."""
        mean = feats.mean(0)
        std = feats.std(0).clamp_min(1e-2)
        self.feat_mean.copy_(mean)
        self.feat_std.copy_(std)

    def forward(self, feats: torch.Tensor, window: int = 1, temporal: str = "off") -> torch.Tensor:
        """Raw output (N, NUM_OUTPUTS) of features (N, :func:`num_features`).

        With ``temporal`` "centred" or "causal" (and a temporal block), the
        N rows are N / ``window`` sequences of ``window`` consecutive frames.
        """
        if temporal not in TEMPORAL_MODES:
            raise ValueError(f"temporal must be one of {TEMPORAL_MODES}, got {temporal!r}")
        x = self.inp((feats - self.feat_mean) / self.feat_std)
        use = self.temporal is not None and temporal != "off"
        for i, blk in enumerate(self.blocks):
            if use and i == self.temporal_at:
                x = self.temporal(x, window, temporal)
            x = blk(x)
        if use and self.temporal_at >= len(self.blocks):
            x = self.temporal(x, window, temporal)
        return self.out(torch.nn.functional.silu(self.norm(x)))

    def predict(self, kp, mask, offsets, end_offsets, orient=None, orient_mask=None, window: int = 1,
                temporal: str = "off", compute_dtype=None):
        """Encode, run and decode: ``(local_rot, root_pos, rot6)``, see :func:`decode`.

        ``compute_dtype`` (e.g. ``torch.bfloat16``): the layers run in it
        (``torch.autocast`` on the features' device); encoding and decoding
        stay in float32, and so do the outputs.
        """
        feats, frame = encode(kp, mask, offsets, end_offsets, orient, orient_mask, self.skeleton_input, self.pose_input)
        if compute_dtype is None:
            return decode(self(feats, window, temporal), frame)
        with torch.autocast(feats.device.type, dtype=compute_dtype):
            y = self(feats, window, temporal)
        return decode(y.float(), frame)
