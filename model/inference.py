"""Inference API: keypoints in, canonical skeleton pose out.

Everything above the network (retargeting, Blender operators, the CLI) goes
through :class:`Solver`::

    from neural_ik.model.inference import Solver

    solver = Solver()                      # weights/neural_ik.pt, device "auto"
    res = solver.solve(keypoints)          # (T, 32, 3) metres, Z up, NaN = missing
    res.local_rot                          # (T, 22, 3, 3) float64, row 0 = root orientation
    res.root_pos                           # (T, 3)
    res.keypoints                          # (T, 32, 3) FK of the result
    res.error_mm                           # (T,) mean distance to the given keypoints
    res.skeleton                           # the Skeleton used (fitted when not given)

Inputs
------
``keypoints`` : (T, 32, 3) or (32, 3) float array in canonical keypoint order
(:data:`.skeleton.KEYPOINTS`), metres, Z up, the floor at z = 0 (the
position on the floor and the heading are free). Missing entries are NaN or
masked out with ``mask`` (T, 32) bool (default: the finite entries).

``mode``:

- ``"dense"``: all or most keypoints are given (some may be missing);
- ``"sparse"``: only the six effectors (pelvis, head, hands, feet) and
  optionally the elbow/knee hints (:data:`.skeleton.SPARSE_HINTS`) are
  used; everything else in ``keypoints`` is ignored;
- ``"auto"`` (default): sparse when nothing but effectors/hints is given.

``orientations`` (sparse mode, optional): (T, 6, 3, 3) world orientations of
the six effector joints (order of :data:`.skeleton.SPARSE_EFFECTORS`), NaN
where not given. A given pelvis orientation fixes the heading; given hand /
foot / head orientations are also targets of the refinement.

``skeleton``: the subject's :class:`.skeleton.Skeleton`. When None it is
estimated with :func:`fit_skeleton` (median bone lengths over the frames,
canonical proportions scaled to the estimated size for bones that are not
observed) and returned in the result; pass it back in for later calls on the
same character (e.g. an interactive "current pose" solve) to skip the fit.

Pipeline
--------
Frames go through in batches of ``batch_size`` (no Python loop over
frames): the network predicts every joint's rotation and the root
position; then (``refine=True``, the default) ``refine_steps`` (default 3)
batched Levenberg-Marquardt / Gauss-Newton steps (:mod:`.refine`) pull the given keypoints (and given
orientations) onto their targets while a prior keeps the pose close to the
network's answer and soft joint limits keep it human. ``refine=False`` returns
the network's answer. A single frame on the CPU (an interactive "current
pose" solve) never touches torch: a float32 numpy twin of the network
(weights cached as numpy arrays at load) predicts it and the float64 numpy
twin of the refinement (:func:`.refine.refine_numpy`) refines it, which
avoids torch's per-operation overhead (about 2.5 ms in all on 2 CPU cores).

Threads and devices
-------------------
``device="auto"`` uses CUDA when available. The solver does not change
torch's thread count; a caller that shares the CPU (Blender) may call
``torch.set_num_threads``. Results are float64 numpy arrays whatever the
device.

Errors
------
:class:`WeightsError` (a ``ValueError``) with a readable message when the
weights file is missing, unreadable, of another format version or of the
wrong shape; ``ValueError`` for bad input shapes or an unavailable device.

No ``bpy`` here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .fk import NUM_JOINTS, NUM_KEYPOINTS, fk_keypoints
from .network import EFFECTOR_JOINTS, EFFECTOR_KP, HINT_KP, NUM_EFF, NUM_FEATURES, NUM_OUTPUTS, IKNet
from .refine import DEFAULTS as REFINE_DEFAULTS
from .refine import SMALL_BATCH, _np_fk, refine_numpy
from .refine import refine as _refine
from .skeleton import CANONICAL, END_PARENTS, JOINTS, KEYPOINTS, PARENTS, Skeleton

__all__ = ["WeightsError", "SolveResult", "Solver", "fit_skeleton", "detect_mode", "load_network", "DEFAULT_WEIGHTS", "FORMAT_VERSION"]

#: Weights shipped with the extension.
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "neural_ik.pt"
#: Weights format version this code reads.
FORMAT_VERSION = 1

_SPARSE_SET = np.zeros(NUM_KEYPOINTS, dtype=bool)
_SPARSE_SET[list(EFFECTOR_KP) + list(HINT_KP)] = True


class WeightsError(ValueError):
    """The weights file is missing, corrupt, of another version or the wrong shape."""


@dataclass
class SolveResult:
    """Result of :meth:`Solver.solve`.

    Attributes
    ----------
    local_rot : ndarray, shape (T, 22, 3, 3), float64
        Local joint rotations; row 0 is the root's world orientation.
    root_pos : ndarray, shape (T, 3), float64
        World position of the root (pelvis) joint, metres.
    keypoints : ndarray, shape (T, 32, 3), float64
        Forward kinematics of the result with ``skeleton``.
    skeleton : Skeleton
        The skeleton used (given or fitted).
    error_mm : ndarray, shape (T,)
        Mean distance (mm) between the result and the given keypoints (NaN
        for a frame with none given).
    mode : str
        ``"dense"`` or ``"sparse"``.
    seconds : dict
        Wall time of the ``network`` and ``refine`` stages (and ``total``).
    """

    local_rot: np.ndarray
    root_pos: np.ndarray
    keypoints: np.ndarray
    skeleton: Skeleton
    error_mm: np.ndarray
    mode: str = "dense"
    seconds: dict = field(default_factory=dict)


def detect_mode(mask: np.ndarray) -> str:
    """``"sparse"`` when only effectors/hints are given in any frame, else ``"dense"``."""
    mask = np.asarray(mask, dtype=bool).reshape(-1, NUM_KEYPOINTS)
    given = mask.any(0)
    return "sparse" if given.any() and not (given & ~_SPARSE_SET).any() else "dense"


def _canonical_dirs_lengths():
    off = CANONICAL.offsets
    end = CANONICAL.end_offsets
    ln = np.linalg.norm(off, axis=1)
    le = np.linalg.norm(end, axis=1)
    return ln, le


def fit_skeleton(keypoints: np.ndarray, mask: np.ndarray | None = None) -> Skeleton:
    """Estimate a subject skeleton from keypoints.

    Bone lengths are the median over frames of the distance between a
    keypoint and its parent joint where both are given; bones never observed
    take the canonical length times the overall scale, itself the median
    ratio of the observed lengths to the canonical ones or, when no bone is
    observed (sparse effectors only), per body part: the torso from the
    pelvis-to-head distance, the legs from the pelvis-to-foot distances (95th
    percentile over frames, over the canonical ones), the arms from both. Directions are canonical; the root's rest height
    puts the rest pose on the floor.

    Parameters
    ----------
    keypoints : ndarray, shape (T, 32, 3) or (32, 3)
    mask : ndarray, shape (T, 32) bool, optional
        Default: the finite entries.

    Returns
    -------
    Skeleton
    """
    kp = np.asarray(keypoints, dtype=np.float64).reshape(-1, NUM_KEYPOINTS, 3)
    if mask is None:
        mask = np.isfinite(kp).all(-1)
    mask = np.asarray(mask, dtype=bool).reshape(-1, NUM_KEYPOINTS) & np.isfinite(kp).all(-1)
    ln0, le0 = _canonical_dirs_lengths()
    parent_kp = list(PARENTS[1:]) + list(END_PARENTS)  # parent of keypoints 1..31
    child = np.arange(1, NUM_KEYPOINTS)
    both = mask[:, child] & mask[:, parent_kp]
    d = np.linalg.norm(kp[:, child] - kp[:, parent_kp], axis=-1)
    d = np.where(both, d, np.nan)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(d, axis=0) if len(d) else np.full(len(child), np.nan)
    canon = np.concatenate([ln0[1:], le0])
    ok = np.isfinite(med) & (med > 1e-4)
    if ok.any():
        scale = float(np.median(med[ok] / canon[ok]))
    else:  # effectors only: torso and legs scaled separately, arms by their geometric mean
        scale = _segment_scales(kp, mask)
    lengths = np.where(ok, med, canon * scale)
    dirs_j = CANONICAL.offsets[1:] / ln0[1:, None]
    dirs_e = CANONICAL.end_offsets / le0[:, None]
    off = np.zeros((NUM_JOINTS, 3))
    off[1:] = dirs_j * lengths[: NUM_JOINTS - 1, None]
    end = dirs_e * lengths[NUM_JOINTS - 1:, None]
    sk = Skeleton(off, end)
    rest = sk.rest_keypoints()  # root at the origin
    feet = [KEYPOINTS.index(n) for n in ("heel_l", "heel_r", "toe_tip_l", "toe_tip_r")]
    off[0] = [0.0, 0.0, -rest[feet, 2].min()]
    return Skeleton(off, end)


_SEGMENT = None


def _segment_of_keypoints():
    """0 = torso/head, 1 = legs, 2 = arms, for keypoints 1..31 (the bone ending there)."""
    out = []
    for name in KEYPOINTS[1:]:
        if name.startswith(("calf", "foot", "toe", "heel")):
            out.append(1)
        elif name.startswith(("clavicle", "upperarm", "forearm", "hand", "thumb")):
            out.append(2)
        else:
            out.append(0)
    return np.array(out)


def _segment_scales(kp, mask) -> np.ndarray:
    """Per-bone scale (31,) from effector distances when no bone is observed.

    Torso: 95th percentile over frames of the pelvis-head distance over the
    canonical one; legs: the same for pelvis-foot (legs are straight at some
    point of most motions); arms: the geometric mean of both. Missing
    measurements fall back to the other one, or to 1.
    """
    global _SEGMENT
    if _SEGMENT is None:
        _SEGMENT = _segment_of_keypoints()
    rest = CANONICAL.rest_keypoints()
    pel, head = KEYPOINTS.index("pelvis"), KEYPOINTS.index("head")

    def ratio(pairs):
        vals = []
        for a, b in pairs:
            ok = mask[:, a] & mask[:, b]
            if ok.any():
                dist = np.linalg.norm(kp[ok, a] - kp[ok, b], axis=-1)
                vals.append(np.percentile(dist, 95) / np.linalg.norm(rest[a] - rest[b]))
        return float(np.mean(vals)) if vals else None

    torso = ratio([(pel, head)])
    legs = ratio([(pel, KEYPOINTS.index(f)) for f in ("foot_l", "foot_r")])
    torso = torso if torso is not None else (legs if legs is not None else 1.0)
    legs = legs if legs is not None else torso
    arms = float(np.sqrt(torso * legs))
    return np.array([torso, legs, arms])[_SEGMENT]


def _resolve_device(device) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available (use 'auto' or 'cpu')")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}; use 'auto', 'cpu' or 'cuda'")
    return dev


def load_network(path, device="cpu") -> tuple[IKNet, dict]:
    """Load and validate a weights file; returns ``(network in eval mode, file dict)``.

    Raises
    ------
    WeightsError
        Missing, unreadable/corrupt, wrong format version or wrong shapes.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Neural IK weights not found: {path} (reinstall the extension or pass weights=<file>)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as ex:  # pickle / zip errors vary
        raise WeightsError(f"cannot read Neural IK weights {path}: the file is corrupt or not a weights file ({type(ex).__name__}: {ex})") from ex
    if not isinstance(blob, dict) or blob.get("format") != "neural_ik":
        raise WeightsError(f"{path} is not a Neural IK weights file (no 'format': 'neural_ik' entry)")
    ver = blob.get("format_version")
    if ver != FORMAT_VERSION:
        raise WeightsError(f"{path} has weights format version {ver!r}; this version of Neural IK reads version {FORMAT_VERSION}")
    if list(blob.get("keypoints", [])) != list(KEYPOINTS) or list(blob.get("joints", [])) != list(JOINTS):
        raise WeightsError(f"{path} was trained for another skeleton (its keypoint/joint lists differ from this version's)")
    if blob.get("num_features") != NUM_FEATURES or blob.get("num_outputs") != NUM_OUTPUTS:
        raise WeightsError(f"{path}: wrong input/output size ({blob.get('num_features')}/{blob.get('num_outputs')}, "
                           f"expected {NUM_FEATURES}/{NUM_OUTPUTS})")
    hp = blob.get("hparams")
    state = blob.get("state")
    if not isinstance(hp, dict) or not isinstance(state, dict):
        raise WeightsError(f"{path}: missing 'hparams' or 'state'")
    try:
        net = IKNet(int(hp["width"]), int(hp["blocks"]), 0.0)
        state = {k: v.float() for k, v in state.items()}
        net.load_state_dict(state, strict=True)
    except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as ex:
        raise WeightsError(f"{path}: weights do not fit the network (wrong shape or missing tensors): {ex}") from ex
    for t in net.state_dict().values():
        if not torch.isfinite(t).all():
            raise WeightsError(f"{path}: weights contain NaN or infinite values")
    return net.to(device).eval(), blob


class _NumpyNet:
    """Float32 numpy twin of ``IKNet.predict`` for one frame (interactive "current pose" solves).

    For a single sample the torch network spends most of its time in
    per-operation overhead (the encoding alone is ~80 small tensor ops); the
    same arithmetic on small numpy arrays, with the weight matrices cached as
    contiguous float32 arrays, is several times faster. Geometry (heading,
    centre, decoding) runs in float64, the layers in float32 like the torch
    network.
    """

    def __init__(self, net: IKNet):
        from .network import _PAIRS_L, _PAIRS_R, _PAIRS_W, _PELVIS, _REST_END_LEN, _REST_LEN

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
        self.rest_len, self.rest_end_len = _REST_LEN[1:], _REST_END_LEN
        self._sk_key = None
        self._sk = None

    def _skeleton(self, sk: Skeleton):
        off = np.asarray(sk.offsets, dtype=np.float64)
        eo = np.asarray(sk.end_offsets, dtype=np.float64)
        key = (off.tobytes(), eo.tobytes())
        if key != self._sk_key:
            from .network import skeleton_scale

            scale = float(skeleton_scale(torch.as_tensor(off, dtype=torch.float32), torch.as_tensor(eo, dtype=torch.float32)))
            bl = np.linalg.norm(off[1:], axis=-1) / self.rest_len / scale - 1.0
            el = np.linalg.norm(eo, axis=-1) / self.rest_end_len / scale - 1.0
            self._sk = (scale, np.concatenate([bl, el]))
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
        feats = np.concatenate([rel.reshape(-1), m, o6, om, lens]).astype(np.float32)
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


class Solver:
    """Neural IK solver (network + optional Gauss-Newton refinement).

    Parameters
    ----------
    weights : str or Path, optional
        Weights file (default :data:`DEFAULT_WEIGHTS`).
    device : {"auto", "cpu", "cuda"}
        ``"auto"`` picks CUDA when available.

    Raises
    ------
    WeightsError
        When the weights cannot be used (see :func:`load_network`).
    ValueError
        When ``device`` is unavailable.
    """

    def __init__(self, weights=None, device="auto"):
        self.device = _resolve_device(device)
        self.weights_path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
        self.net, blob = load_network(self.weights_path, self.device)
        self.info = blob.get("train", {})
        self._sk_key = None
        self._sk_t = None
        # single CPU frames: numpy float32 twin of the network (weights cached here)
        self._np_net = _NumpyNet(self.net) if self.device.type == "cpu" else None

    def _skeleton_tensors(self, sk: Skeleton):
        key = (np.asarray(sk.offsets, dtype=np.float64).tobytes(), np.asarray(sk.end_offsets, dtype=np.float64).tobytes())
        if key != self._sk_key:
            self._sk_t = (
                torch.as_tensor(np.asarray(sk.offsets), dtype=torch.float32, device=self.device),
                torch.as_tensor(np.asarray(sk.end_offsets), dtype=torch.float32, device=self.device),
            )
            self._sk_key = key
        return self._sk_t

    def solve(self, keypoints, mask=None, *, mode="auto", refine=True, refine_steps=REFINE_DEFAULTS["steps"],
              orientations=None, batch_size=4096, skeleton=None, progress=None, limits=True) -> SolveResult:
        """Solve poses for a sequence of keypoint frames.

        Parameters
        ----------
        keypoints : array_like, shape (T, 32, 3) or (32, 3)
            Canonical keypoints, metres, Z up; NaN = missing.
        mask : array_like, shape (T, 32) bool, optional
            Given keypoints (default: finite entries); combined with finiteness.
        mode : {"auto", "dense", "sparse"}
        refine : bool
            Run the Gauss-Newton refinement (default True).
        refine_steps : int
            Number of refinement steps.
        orientations : array_like, shape (T, 6, 3, 3), optional
            Effector world orientations (sparse mode), NaN where not given.
        batch_size : int
            Frames per batch.
        skeleton : Skeleton, optional
            Subject skeleton; fitted from the keypoints when None.
        progress : callable, optional
            ``progress(done_frames, total_frames)`` after every batch.
        limits : bool
            Soft joint limits in the refinement.

        Returns
        -------
        SolveResult
        """
        t_start = time.perf_counter()
        kp = np.asarray(keypoints, dtype=np.float64)
        single = kp.ndim == 2
        if single:
            kp = kp[None]
        if kp.ndim != 3 or kp.shape[1:] != (NUM_KEYPOINTS, 3):
            raise ValueError(f"keypoints must have shape (T, {NUM_KEYPOINTS}, 3) or ({NUM_KEYPOINTS}, 3), got {np.shape(keypoints)}")
        T = kp.shape[0]
        finite = np.isfinite(kp).all(-1)
        if mask is None:
            m = finite
        else:
            m = np.asarray(mask, dtype=bool)
            if single and m.ndim == 1:
                m = m[None]
            if m.shape != (T, NUM_KEYPOINTS):
                raise ValueError(f"mask must have shape ({T}, {NUM_KEYPOINTS}), got {m.shape}")
            m = m & finite
        if mode == "auto":
            mode = detect_mode(m)
        if mode not in ("dense", "sparse"):
            raise ValueError(f"mode must be 'auto', 'dense' or 'sparse', got {mode!r}")
        if mode == "sparse":
            m = m & _SPARSE_SET
        ori = omask = None
        if orientations is not None:
            ori = np.asarray(orientations, dtype=np.float64)
            if single and ori.ndim == 3:
                ori = ori[None]
            if ori.shape != (T, NUM_EFF, 3, 3):
                raise ValueError(f"orientations must have shape ({T}, {NUM_EFF}, 3, 3), got {ori.shape}")
            omask = np.isfinite(ori).all((-2, -1))
            ori = np.where(omask[..., None, None], ori, np.eye(3))
        kp0 = np.where(m[..., None], kp, 0.0)
        if skeleton is None:
            skeleton = fit_skeleton(kp, m)
            if mode == "dense" and T > 1:
                skeleton = self._refit_directions(kp0, m, ori, omask, skeleton, batch_size)
        off, eo = self._skeleton_tensors(skeleton)

        out_L = np.empty((T, NUM_JOINTS, 3, 3))
        out_root = np.empty((T, 3))
        out_kp = np.empty((T, NUM_KEYPOINTS, 3))
        timers = [0.0, 0.0]
        dev = self.device
        bs = max(int(batch_size), 1)
        # a single frame on the CPU: one torch thread (thread hand-off costs more than it saves)
        n_threads = torch.get_num_threads()
        one_thread = dev.type == "cpu" and T <= SMALL_BATCH and n_threads > 1 and self._np_net is None
        if one_thread:
            torch.set_num_threads(1)
        try:
            self._run_batches(kp0, m, ori, omask, off, eo, skeleton, refine, refine_steps, limits, bs, progress,
                              out_L, out_root, out_kp, timers)
        finally:
            if one_thread:
                torch.set_num_threads(n_threads)
        t_net, t_ref = timers
        err = np.linalg.norm(out_kp - np.where(m[..., None], kp, np.nan), axis=-1)
        cnt = m.sum(1)
        with np.errstate(invalid="ignore"):
            err_mm = np.where(cnt > 0, np.nansum(np.where(m, err, 0.0), axis=1) / np.maximum(cnt, 1) * 1000.0, np.nan)
        return SolveResult(out_L, out_root, out_kp, skeleton, err_mm, mode,
                           {"network": t_net, "refine": t_ref, "total": time.perf_counter() - t_start})

    #: At most this many frames (evenly spread over the clip) are solved to re-measure bone directions.
    REFIT_FRAMES = 256

    def _refit_directions(self, kp0, m, ori, omask, skeleton, batch_size, rounds=2, max_frames=None):
        """Bone directions of a fitted skeleton from the solved poses.

        :func:`fit_skeleton` measures lengths only. Here each keypoint's offset
        is re-measured in its parent joint's frame (median over frames) using
        the world rotations of a network + refinement solve, ``rounds`` times.
        Long clips are subsampled: at most ``max_frames`` (default
        :attr:`REFIT_FRAMES`) evenly spread frames are solved (a median over a
        few hundred frames is as good as over thousands, and this pre-pass
        would otherwise cost two full solves with refinement).
        """
        T = kp0.shape[0]
        n_max = int(self.REFIT_FRAMES if max_frames is None else max_frames)
        if T > n_max:
            idx = np.unique(np.linspace(0, T - 1, n_max).round().astype(np.int64))
            kp0, m = kp0[idx], m[idx]
            if ori is not None:
                ori, omask = ori[idx], omask[idx]
            T = len(idx)
        sk = skeleton
        for _ in range(rounds):
            off, eo = self._skeleton_tensors(sk)
            L = np.empty((T, NUM_JOINTS, 3, 3))
            R0 = np.empty((T, 3))
            KP = np.empty((T, NUM_KEYPOINTS, 3))
            self._run_batches(kp0, m, ori, omask, off, eo, sk, True, REFINE_DEFAULTS["steps"], True,
                              max(int(batch_size), 1), None, L, R0, KP, [0.0, 0.0])
            W, P, _ = _np_fk(L, R0, np.asarray(sk.offsets, dtype=np.float64), np.asarray(sk.end_offsets, dtype=np.float64))
            carrier = np.array([max(p, 0) for p in PARENTS] + list(END_PARENTS))  # frame each keypoint's offset lives in
            base = np.array([max(p, 0) for p in PARENTS] + list(END_PARENTS))  # joint the offset starts at
            rel = kp0 - kp0[:, base]  # (T, 32, 3) world offsets from the start joint
            loc = np.einsum("tkji,tkj->tki", W[:, carrier], rel)  # into the carrier's frame
            ok = m & m[:, base]
            new_off = np.array(sk.offsets, dtype=np.float64)
            new_end = np.array(sk.end_offsets, dtype=np.float64)
            for k in range(1, NUM_KEYPOINTS):
                if ok[:, k].sum() >= 3:
                    v = np.median(loc[ok[:, k], k], axis=0)
                    if k < NUM_JOINTS:
                        new_off[k] = v
                    else:
                        new_end[k - NUM_JOINTS] = v
            sk = Skeleton(new_off, new_end)
        return sk

    def _single_numpy(self, kp0, m, ori, omask, skeleton, refine, refine_steps, limits, a, out_L, out_root, out_kp):
        """Frame ``a`` with the numpy network and the numpy LM refinement; returns (network s, refine s)."""
        t0 = time.perf_counter()
        o = om = None
        if ori is not None:
            o, om = ori[a], omask[a]
        Ln, rn = self._np_net.predict(kp0[a], m[a], skeleton, o, om)
        Ln, rn = Ln[None], rn[None]
        t1 = time.perf_counter()
        off = np.asarray(skeleton.offsets, dtype=np.float64)
        eo = np.asarray(skeleton.end_offsets, dtype=np.float64)
        kpo = None
        if refine and refine_steps > 0:
            Ln, rn, kpo = refine_numpy(
                Ln, rn, kp0[a:a + 1], m[a:a + 1].astype(np.float64), off, eo,
                steps=int(refine_steps), orient_targets=None if ori is None else ori[a:a + 1],
                orient_weights=None if omask is None else omask[a:a + 1] * REFINE_DEFAULTS["orient_weight"],
                orient_joints=EFFECTOR_JOINTS, limits=limits, return_keypoints=True)
        t2 = time.perf_counter()
        out_L[a], out_root[a] = Ln[0], rn[0]
        out_kp[a] = (kpo if kpo is not None else _np_fk(Ln, rn, off, eo)[2])[0]
        return t1 - t0, t2 - t1

    def _run_batches(self, kp0, m, ori, omask, off, eo, skeleton, refine, refine_steps, limits, bs, progress,
                     out_L, out_root, out_kp, timers):
        T = kp0.shape[0]
        dev = self.device
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        t_net = t_ref = 0.0
        with torch.inference_mode():
            for a in range(0, T, bs):
                b = min(a + bs, T)
                t0 = time.perf_counter()
                if b - a == 1 and self._np_net is not None:  # one CPU frame: all numpy
                    t_n, t_r = self._single_numpy(kp0, m, ori, omask, skeleton, refine, refine_steps, limits, a,
                                                  out_L, out_root, out_kp)
                    t_net += t_n
                    t_ref += t_r
                    if progress is not None:
                        progress(b, T)
                    continue
                kt = torch.as_tensor(kp0[a:b], dtype=torch.float32, device=dev)
                mt = torch.as_tensor(m[a:b], device=dev)
                ot = omt = None
                if ori is not None:
                    ot = torch.as_tensor(ori[a:b], dtype=torch.float32, device=dev)
                    omt = torch.as_tensor(omask[a:b], device=dev)
                L, root, _ = self.net.predict(kt, mt, off, eo, ot, omt)
                sync()
                t1 = time.perf_counter()
                t_net += t1 - t0
                small = dev.type == "cpu" and (b - a) <= SMALL_BATCH
                if small:  # one frame: the numpy twin has far less per-operation overhead
                    Ln, rn = L.double().numpy(), root.double().numpy()
                    if refine and refine_steps > 0:
                        Ln, rn = refine_numpy(
                            Ln, rn, kp0[a:b], m[a:b].astype(np.float64), skeleton.offsets, skeleton.end_offsets,
                            steps=int(refine_steps), orient_targets=None if ori is None else ori[a:b],
                            orient_weights=None if omask is None else omask[a:b] * REFINE_DEFAULTS["orient_weight"],
                            orient_joints=EFFECTOR_JOINTS, limits=limits)
                    t_ref += time.perf_counter() - t1
                    out_L[a:b], out_root[a:b] = Ln, rn
                    out_kp[a:b] = _np_fk(Ln, rn, np.asarray(skeleton.offsets, dtype=np.float64),
                                         np.asarray(skeleton.end_offsets, dtype=np.float64))[2]
                else:
                    if refine and refine_steps > 0:
                        L, root = _refine(L, root, kt, mt.float(), off, eo, steps=int(refine_steps), orient_targets=ot,
                                          orient_weights=None if omt is None else omt.float() * REFINE_DEFAULTS["orient_weight"],
                                          orient_joints=EFFECTOR_JOINTS, limits=limits)
                        sync()
                    t_ref += time.perf_counter() - t1
                    kpo = fk_keypoints(L, root, off, eo)
                    out_L[a:b] = L.double().cpu().numpy()
                    out_root[a:b] = root.double().cpu().numpy()
                    out_kp[a:b] = kpo.double().cpu().numpy()
                if progress is not None:
                    progress(b, T)
        timers[0], timers[1] = t_net, t_ref
