"""The network's float32 numpy twin for one frame (:class:`NumpyNet`).

No ``bpy`` here.
"""

from __future__ import annotations

import numpy as np
import torch

from .fk import NUM_JOINTS
from .network import NUM_EFF, IKNet, bone_directions
from .skeleton import Skeleton

__all__ = ["NumpyNet"]


class NumpyNet:
    """Float32 numpy twin of ``IKNet.predict`` for one frame (interactive "current pose" solves).

    For a single sample the torch network spends most of its time in
    per-operation overhead (the encoding alone is ~80 small tensor ops); the
    same arithmetic on small numpy arrays, with the weight matrices cached as
    contiguous float32 arrays, is several times faster. Geometry (heading,
    centre, decoding) runs in float64, the layers in float32 like the torch
    network.
    """

    def __init__(self, net: IKNet):
        from .network import _PAIRS_L, _PAIRS_R, _PAIRS_W, _PELVIS

        sd = {k: v.detach().cpu().float().numpy() for k, v in net.state_dict().items()}
        c = np.ascontiguousarray
        self.mean, self.inv_std = c(sd["feat_mean"]), c(1.0 / sd["feat_std"])
        self.inp = (c(sd["inp.weight"]), c(sd["inp.bias"]))
        self.blocks = []
        for i in range(len(net.blocks)):
            p = f"blocks.{i}."
            self.blocks.append((c(sd[p + "norm.weight"]), c(sd[p + "norm.bias"]), c(sd[p + "fc1.weight"]), c(sd[p + "fc1.bias"]),
                                c(sd[p + "fc2.weight"]), c(sd[p + "fc2.bias"]), float(net.blocks[i].norm.eps)))
        self.norm = (c(sd["norm.weight"]), c(sd["norm.bias"]), float(net.norm.eps))
        self.out = (c(sd["out.weight"]), c(sd["out.bias"]))
        self.pl, self.pr = np.array(_PAIRS_L), np.array(_PAIRS_R)
        self.pw = np.array(_PAIRS_W, dtype=np.float64)
        self.pelvis = _PELVIS
        self.skeleton_input = net.skeleton_input
        self.directions = net.pose_input == "directions"
        self._sk_key = None
        self._sk = None

    def _skeleton(self, sk: Skeleton):
        off = np.asarray(sk.offsets, dtype=np.float64)
        eo = np.asarray(sk.end_offsets, dtype=np.float64)
        key = (off.tobytes(), eo.tobytes())
        if key != self._sk_key:
            from .network import skeleton_features, skeleton_scale

            scale = float(skeleton_scale(torch.as_tensor(off, dtype=torch.float32), torch.as_tensor(eo, dtype=torch.float32)))
            self._sk = (scale, skeleton_features(off, eo, np.asarray(scale), self.skeleton_input))
            self._sk_key = key
        return self._sk

    @staticmethod
    def _ln(x, w, b, eps):
        mu = x.mean()
        d = x - mu
        return d * (w / np.sqrt((d * d).mean() + eps)) + b

    @staticmethod
    def _silu(x):
        return x / (1.0 + np.exp(-x))

    def predict(self, kp, mask, sk: Skeleton, orient=None, orient_mask=None):
        """One frame: ``kp`` (32, 3), ``mask`` (32,) bool -> local rotations (22, 3, 3), root position (3,), float64."""
        scale, lens = self._skeleton(sk)
        m = mask.astype(np.float64)
        kp = np.where(mask[:, None], kp, 0.0)
        cnt = m.sum()
        centre = kp[self.pelvis] if mask[self.pelvis] else kp.sum(0) / max(cnt, 1.0)
        both = m[self.pl] * m[self.pr] * self.pw
        vec = both @ (kp[self.pl, :2] - kp[self.pr, :2])
        if orient is None or orient_mask is None:
            om = np.zeros(NUM_EFF)
            ori = None
        else:
            om = orient_mask.astype(np.float64)
            ori = np.where(orient_mask[:, None, None], orient, np.eye(3))
            vec = vec + 10.0 * om[0] * ori[0, :2, 0]
        ang = np.arctan2(vec[1], vec[0]) if np.hypot(vec[0], vec[1]) >= 1e-6 else 0.0
        ca, sa = np.cos(ang), np.sin(ang)
        rot_h = np.array([[ca, -sa, 0.0], [sa, ca, 0.0], [0.0, 0.0, 1.0]])
        rel = ((kp - centre) @ rot_h) * (m[:, None] / scale)
        if ori is None:
            o6 = np.zeros(NUM_EFF * 6)
        else:
            ro = rot_h.T @ ori  # (6, 3, 3)
            o6 = (np.concatenate([ro[:, :, 0], ro[:, :, 1]], -1) * om[:, None]).reshape(-1)
        parts = [rel.reshape(-1)]
        if self.directions:
            parts.append(bone_directions(rel, m))
        feats = np.concatenate(parts + [m, o6, om, lens]).astype(np.float32)
        x = (feats - self.mean) * self.inv_std
        w, b = self.inp
        x = w @ x + b
        for nw, nb, w1, b1, w2, b2, eps in self.blocks:
            x = x + (w2 @ self._silu(w1 @ self._ln(x, nw, nb, eps) + b1) + b2)
        nw, nb, eps = self.norm
        w, b = self.out
        out = (w @ self._silu(self._ln(x, nw, nb, eps)) + b).astype(np.float64)
        r6 = out[: NUM_JOINTS * 6].reshape(NUM_JOINTS, 6)
        a1 = r6[:, :3] + (1.0, 0.0, 0.0)
        a2 = r6[:, 3:] + (0.0, 1.0, 0.0)
        b1 = a1 / np.maximum(np.linalg.norm(a1, axis=-1, keepdims=True), 1e-8)
        a2 = a2 - (b1 * a2).sum(-1, keepdims=True) * b1
        b2 = a2 / np.maximum(np.linalg.norm(a2, axis=-1, keepdims=True), 1e-8)
        b3 = np.cross(b1, b2)
        local = np.stack([b1, b2, b3], -1)
        local[0] = rot_h @ local[0]
        root = centre + (rot_h @ out[NUM_JOINTS * 6:]) * scale
        return local, root
