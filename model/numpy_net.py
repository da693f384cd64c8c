"""The network in numpy, float32 layers (:class:`NumpyNet`): every CPU solve of a clip up to
:data:`.batches.NUMPY_MAX_FRAMES` frames, one pose included, without importing torch.

No ``bpy`` or ``torch`` here.
"""

from __future__ import annotations

import numpy as np

from .features import (NUM_EFF, NUM_JOINTS, _ID6, _PAIRS_L, _PAIRS_R, _PAIRS_W, _PELVIS, bone_directions,
                       skeleton_features, skeleton_scale)
from .skeleton import Skeleton

__all__ = ["NumpyNet"]


class NumpyNet:
    """The per-frame network of a weights file (:func:`.weights.load_weights`) in numpy.

    The same encoding, layers and decoding as ``IKNet.predict``: the
    geometry (heading, centre, decoding) in float64, the layers in float32
    with the weight matrices cached transposed and contiguous. Importing
    torch costs more than a short clip's whole solve, and for one pose
    torch's per-operation overhead is most of the time
    (docs/tuning.md#numpy_max_frames).

    Parameters
    ----------
    blob : dict
        A checked weights file (:func:`.weights.load_weights`): ``"state"``
        (float32 arrays) and ``"hparams"``. A temporal block is not
        computed here (its weights run in torch).
    """

    def __init__(self, blob: dict):
        sd, hp = blob["state"], blob["hparams"]
        c = np.ascontiguousarray
        self.mean, self.inv_std = c(sd["feat_mean"]), c(1.0 / sd["feat_std"])
        self.inp = (c(sd["inp.weight"].T), c(sd["inp.bias"]))
        eps = 1e-5   # (torch's LayerNorm default, which the network uses)
        self.blocks = [(c(sd[f"blocks.{i}.norm.weight"]), c(sd[f"blocks.{i}.norm.bias"]),
                        c(sd[f"blocks.{i}.fc1.weight"].T), c(sd[f"blocks.{i}.fc1.bias"]),
                        c(sd[f"blocks.{i}.fc2.weight"].T), c(sd[f"blocks.{i}.fc2.bias"]), eps)
                       for i in range(int(hp["blocks"]))]
        self.norm = (c(sd["norm.weight"]), c(sd["norm.bias"]), eps)
        self.out = (c(sd["out.weight"].T), c(sd["out.bias"]))
        self.pl, self.pr = np.array(_PAIRS_L), np.array(_PAIRS_R)
        self.pw = np.array(_PAIRS_W, dtype=np.float64)
        self.skeleton_input = hp["skeleton_input"]
        self.directions = hp["pose_input"] == "directions"
        self._sk_key = None
        self._sk = None

    def _skeleton(self, sk: Skeleton):
        """``(scale, skeleton features)`` of ``sk`` (cached: a clip's batches and a drag repeat it)."""
        off = np.asarray(sk.offsets, dtype=np.float64)
        eo = np.asarray(sk.end_offsets, dtype=np.float64)
        key = (off.tobytes(), eo.tobytes())
        if key != self._sk_key:
            scale = float(skeleton_scale(off.astype(np.float32), eo.astype(np.float32)))
            self._sk = (scale, skeleton_features(off, eo, np.asarray(scale), self.skeleton_input))
            self._sk_key = key
        return self._sk

    @staticmethod
    def _ln(x, w, b, eps):
        d = x - x.mean(-1, keepdims=True)
        return d * (1.0 / np.sqrt((d * d).mean(-1, keepdims=True) + eps)) * w + b

    @staticmethod
    def _silu(x):
        return x / (1.0 + np.exp(-x))

    def _frame(self, kp, m, mask, orient, orient_mask):
        """Centre (B, 3), heading rotation (B, 3, 3), effector orientations as 6D (B, 36) and their mask (B, 6)."""
        B = kp.shape[0]
        centre = kp.sum(1) / np.maximum(m.sum(1), 1.0)[:, None]
        centre = np.where(mask[:, _PELVIS, None], kp[:, _PELVIS], centre)
        both = m[:, self.pl] * m[:, self.pr] * self.pw
        vec = np.einsum("bp,bpc->bc", both, kp[:, self.pl, :2] - kp[:, self.pr, :2])
        om = np.zeros((B, NUM_EFF))
        ori = None
        if orient is not None and orient_mask is not None:
            om = orient_mask.astype(np.float64)
            ori = np.where(orient_mask[..., None, None], orient, np.eye(3))
            vec = vec + 10.0 * om[:, :1] * ori[:, 0, :2, 0]
        ang = np.where(np.hypot(vec[:, 0], vec[:, 1]) >= 1e-6, np.arctan2(vec[:, 1], vec[:, 0]), 0.0)
        rot_h = np.zeros((B, 3, 3))
        rot_h[:, 0, 0] = rot_h[:, 1, 1] = np.cos(ang)
        rot_h[:, 1, 0] = np.sin(ang)
        rot_h[:, 0, 1] = -rot_h[:, 1, 0]
        rot_h[:, 2, 2] = 1.0
        o6 = np.zeros((B, NUM_EFF * 6))
        if ori is not None:
            ro = np.swapaxes(rot_h, -1, -2)[:, None] @ ori   # (B, 6, 3, 3) in the heading frame
            o6 = (np.concatenate([ro[..., :, 0], ro[..., :, 1]], -1) * om[..., None]).reshape(B, -1)
        return centre, rot_h, o6, om

    def _layers(self, feats):
        """Raw outputs (B, 135) of float32 features (B, n)."""
        x = (feats - self.mean) * self.inv_std
        w, b = self.inp
        x = x @ w + b
        for nw, nb, w1, b1, w2, b2, eps in self.blocks:
            x += self._silu(self._ln(x, nw, nb, eps) @ w1 + b1) @ w2 + b2
        nw, nb, eps = self.norm
        w, b = self.out
        return self._silu(self._ln(x, nw, nb, eps)) @ w + b

    def predict(self, kp, mask, sk: Skeleton, orient=None, orient_mask=None):
        """Frames ``kp`` (B, 32, 3), ``mask`` (B, 32) bool (orientations (B, 6, 3, 3), (B, 6) optional)
        -> local rotations (B, 22, 3, 3) and root positions (B, 3), float64."""
        scale, lens = self._skeleton(sk)
        B = kp.shape[0]
        m = mask.astype(np.float64)
        kp = np.where(mask[..., None], kp, 0.0).astype(np.float64, copy=False)
        centre, rot_h, o6, om = self._frame(kp, m, mask, orient, orient_mask)
        rel = ((kp - centre[:, None]) @ rot_h) * (m[..., None] / scale)
        parts = [rel.reshape(B, -1)]
        if self.directions:
            parts.append(bone_directions(rel, m))
        parts += [m, o6, om, np.broadcast_to(lens, (B, lens.shape[-1]))]
        out = self._layers(np.concatenate(parts, 1).astype(np.float32)).astype(np.float64)
        r6 = out[:, : NUM_JOINTS * 6].reshape(B, NUM_JOINTS, 6) + _ID6
        b1 = r6[..., :3] / np.maximum(np.linalg.norm(r6[..., :3], axis=-1, keepdims=True), 1e-8)
        a2 = r6[..., 3:] - (b1 * r6[..., 3:]).sum(-1, keepdims=True) * b1
        b2 = a2 / np.maximum(np.linalg.norm(a2, axis=-1, keepdims=True), 1e-8)
        local = np.stack([b1, b2, np.cross(b1, b2)], -1)
        local[:, 0] = rot_h @ local[:, 0]
        root = centre + (rot_h @ out[:, NUM_JOINTS * 6:, None])[..., 0] * scale
        return local, root
