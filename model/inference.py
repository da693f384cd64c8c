"""Inference API: keypoints in, canonical skeleton pose out.

Everything above the network (retargeting, Blender operators, the CLI) goes
through :class:`Solver`::

    from neural_ik.model.inference import Solver

    solver = Solver()                      # weights/neural_ik.pt, device "auto"
    res = solver.solve(keypoints)          # (T, 32, 3) metres, Z up, NaN = missing
    res.local_rot                          # (T, 22, 3, 3) float64 (dtype=), row 0 = root orientation
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
avoids torch's per-operation overhead (see docs/tuning.md#single-frames).

Memory does not grow with the clip beyond the outputs: inputs are masked,
converted and sent batch by batch, and the error per frame is computed with
its batch.

Temporal context
----------------
Weights with a temporal block (``hparams["temporal"]`` > 0) read a window
of frames: ``temporal="auto"`` (default) treats a multi-frame solve as
consecutive frames of one clip (centred window; ``"causal"`` reads only past
frames) and every batch's network pass includes the frames its window
needs around the batch, so results do not depend on ``batch_size``. One
frame, and ``temporal="off"``, run the per-frame network. (The halo on
CUDA mirrors the CPU path; no GPU has run it yet.)

Threads and devices
-------------------
``device="auto"`` uses CUDA when available. A solve of at most
:data:`CPU_MAX_FRAMES_ON_CUDA` frames (a single pose: Live Solve, Solve
Frame) runs on the CPU even on a CUDA solver: one pose is mostly kernel
launches on a GPU (docs/tuning.md#cpu_max_frames_on_cuda). On CUDA every batch
stays float32 on the device (network, refinement, forward kinematics and
the per-frame error); inputs go up through pinned (page-locked) staging
buffers and results come down asynchronously, so the GPU computes a batch
while the host fills the next one and converts the previous one; with
``dtype=np.float32`` the results are copied straight into pinned output
arrays (no conversion at all). The solver does not change torch's thread
count; a caller that shares the CPU (Blender) may call
``torch.set_num_threads``. Results are numpy arrays of ``dtype`` (float64
by default) whatever the device; ``SolveResult.device`` says where the
frames were solved.

Errors
------
:class:`WeightsError` (a ``ValueError``) with a readable message when the
weights file is missing, unreadable, of another format version or of the
wrong shape; ``ValueError`` for bad input shapes or an unavailable device.

No ``bpy`` here.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from ..device import PRECISION_CHOICES as PRECISIONS  # (the solver's and --precision's one list)
from ..device import check_precision_choice
from .fk import NUM_JOINTS, NUM_KEYPOINTS, fk_keypoints
from .network import EFFECTOR_JOINTS, NUM_EFF, NUM_OUTPUTS, POSE_INPUTS, SKELETON_INPUTS, IKNet, bone_directions, num_features
from .refine import DEFAULTS as REFINE_DEFAULTS
from .refine import _np_fk, refine_numpy
from .refine import refine as _refine
from .result import _SPARSE_SET, SolveResult, detect_mode
from .skeleton import CANONICAL, END_PARENTS, JOINTS, KEYPOINTS, PARENTS, Skeleton

__all__ = ["WeightsError", "SolveResult", "Solver", "fit_skeleton", "detect_mode", "load_network",
           "format_version_problem", "DEFAULT_WEIGHTS",
           "FORMAT_VERSION", "CPU_MAX_FRAMES_ON_CUDA", "PRECISIONS", "cpu_has_bfloat16", "resolve_precision"]

#: Weights shipped with the extension.
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "neural_ik.pt"
#: Weights format version this code reads (2: the network with a temporal block; 1 was per frame only).
FORMAT_VERSION = 2

#: Solves of at most this many frames run on the CPU even on a CUDA solver: a pose is mostly
#: kernel launches there (docs/tuning.md#cpu_max_frames_on_cuda).
CPU_MAX_FRAMES_ON_CUDA = 16

class WeightsError(ValueError):
    """The weights file is missing, corrupt, of another version or the wrong shape."""


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
    kp = np.asarray(keypoints)
    if kp.dtype not in (np.float32, np.float64):
        kp = kp.astype(np.float64)
    kp = kp.reshape(-1, NUM_KEYPOINTS, 3)
    if mask is None:
        mask = np.isfinite(kp).all(-1)
    mask = np.asarray(mask, dtype=bool).reshape(-1, NUM_KEYPOINTS) & np.isfinite(kp).all(-1)
    ln0, le0 = _canonical_dirs_lengths()
    parent_kp = list(PARENTS[1:]) + list(END_PARENTS)  # parent of keypoints 1..31
    child = np.arange(1, NUM_KEYPOINTS)
    d = np.empty((len(kp), len(child)))  # bone lengths per frame, in chunks (no (T, 31, 3) temporaries)
    for a in range(0, len(kp), 65536):
        c = kp[a:a + 65536].astype(np.float64)
        d[a:a + 65536] = np.linalg.norm(c[:, child] - c[:, parent_kp], axis=-1)
    d[~(mask[:, child] & mask[:, parent_kp])] = np.nan
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


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; torch's own checks).

    Elsewhere bfloat16 is emulated and slower than float32.
    """
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)
        try:
            if check is not None and check():
                return True
        except Exception:  # (a private check that a torch build lacks or that fails: no bfloat16)
            pass
    return False


def resolve_precision(choice="auto") -> str:
    """What the network's CPU batches compute in for a ``precision`` setting: "float32" or "bfloat16".

    Raises
    ------
    ValueError
        When ``choice`` is not one of :data:`PRECISIONS`.
    """
    check_precision_choice(choice)
    return "bfloat16" if choice == "bfloat16" or (choice == "auto" and cpu_has_bfloat16()) else "float32"


def _resolve_device(device) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available (use 'auto' or 'cpu')")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}; use 'auto', 'cpu' or 'cuda'")
    return dev


def format_version_problem(path, version) -> str:
    """What is wrong with a weights file of format ``version`` ("" when this code reads it)."""
    if version == FORMAT_VERSION:
        return ""
    older = isinstance(version, int) and version < FORMAT_VERSION
    return (f"{path} has weights format version {version!r}; this version of Neural IK reads version {FORMAT_VERSION}"
            + (" (the old per-frame network)" if version == 1 else "")
            + (": re-train the network (python -m training.train, see weights/MODEL_CARD.md) or download the "
               "weights of this version (reinstall the extension)" if older else
               ": this file is newer than the extension; update Neural IK or use the weights it ships with"))


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
    problem = format_version_problem(path, blob.get("format_version"))
    if problem:
        raise WeightsError(problem)
    if list(blob.get("keypoints", [])) != list(KEYPOINTS) or list(blob.get("joints", [])) != list(JOINTS):
        raise WeightsError(f"{path} was trained for another skeleton (its keypoint/joint lists differ from this version's)")
    hp = blob.get("hparams")
    state = blob.get("state")
    if not isinstance(hp, dict) or not isinstance(state, dict):
        raise WeightsError(f"{path}: missing 'hparams' or 'state'")
    kind = hp.get("skeleton_input", "lengths")   # (format-2 files without the key read lengths)
    if kind not in SKELETON_INPUTS:
        raise WeightsError(f"{path}: unknown skeleton input {kind!r} (this version reads "
                           f"{', '.join(SKELETON_INPUTS)}): update Neural IK or use the weights it ships with")
    pose = hp.get("pose_input", "positions")     # (format-2 files without the key read positions)
    if pose not in POSE_INPUTS:
        raise WeightsError(f"{path}: unknown pose input {pose!r} (this version reads "
                           f"{', '.join(POSE_INPUTS)}): update Neural IK or use the weights it ships with")
    n_in = num_features(kind, pose)
    if blob.get("num_features") != n_in or blob.get("num_outputs") != NUM_OUTPUTS:
        raise WeightsError(f"{path}: wrong input/output size ({blob.get('num_features')}/{blob.get('num_outputs')}, "
                           f"expected {n_in}/{NUM_OUTPUTS})")
    try:
        net = IKNet(int(hp["width"]), int(hp["blocks"]), 0.0, int(hp.get("temporal", 0)),
                    int(hp.get("temporal_channels", 128)), kind, pose)
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


def _placed_root(L, root, kt, mt, off, eo):
    """The root translation that puts a pose's keypoints, as a whole, on the given ones.

    The rotations are kept; the root moves by the mean difference between
    the given keypoints and the pose's (the least-squares translation). A
    frame with none given keeps its root.

    Parameters
    ----------
    L : Tensor (B, 22, 3, 3)
    root : Tensor (B, 3)
    kt : Tensor (B, 32, 3)
        Keypoints, zero where not given.
    mt : Tensor (B, 32) bool
    off, eo : Tensor
        The skeleton's offsets and end offsets.

    Returns
    -------
    root : Tensor (B, 3)
    keypoints : Tensor (B, 32, 3)
        The pose's keypoints at that root (the forward kinematics once: a
        translation moves them all alike).
    """
    kpo = fk_keypoints(L, root, off, eo)
    w = mt.to(kpo.dtype)[..., None]
    shift = ((kt - kpo) * w).sum(1) / w.sum(1).clamp_min(1.0)
    return root + shift, kpo + shift[:, None]


class Solver:
    """Neural IK solver (network + optional Gauss-Newton refinement).

    Parameters
    ----------
    weights : str or Path, optional
        Weights file (default :data:`DEFAULT_WEIGHTS`).
    device : {"auto", "cpu", "cuda"}
        ``"auto"`` picks CUDA when available.
    precision : {"auto", "float32", "bfloat16"}
        What the network's layers compute in for batches on the CPU
        (:data:`PRECISIONS`). ``"auto"``: bfloat16 where the CPU multiplies
        it natively (:func:`cpu_has_bfloat16`: twice the frames a second
        on the 2-core VM, the held-out figures within noise), float32
        elsewhere. ``"float32"`` gives the same numbers on every CPU. Inputs,
        outputs, the refinement, single frames (the numpy twin) and CUDA
        batches are float32 whatever it says.

    Raises
    ------
    WeightsError
        When the weights cannot be used (see :func:`load_network`).
    ValueError
        When ``device`` is unavailable or ``precision`` unknown.
    """

    #: At most this many frames (evenly spread over the clip) are solved to re-measure bone directions:
    #: more measure the same at more cost (docs/tuning.md#refit_frames).
    REFIT_FRAMES = 64

    #: After the network, its root is moved so that the pose's keypoints, as a whole, sit on the
    #: given ones (least squares for a translation; its rotations kept): the network misplaces the
    #: root on other studios' data even where the pelvis is given (docs/tuning.md#place_root).
    #: ``False``: the network's own root (``training.evaluate`` measures both).
    place_root = True

    def __init__(self, weights=None, device="auto", precision="auto"):
        #: What the CPU batches' layers compute in: "float32" or "bfloat16" (:func:`resolve_precision`).
        self.precision = resolve_precision(precision)
        self.device = _resolve_device(device)
        self.weights_path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
        self.net, blob = load_network(self.weights_path, self.device)
        self.info = blob.get("train", {})
        self._sk_cache = {}
        # single frames run on the CPU whatever the device: numpy twin of the network (weights cached here)
        self._np_net = _NumpyNet(self.net)
        self._cpu_net = self.net if self.device.type == "cpu" else None

    def warm_up(self):
        """Solve the canonical rest pose once, sparse and dense, so that a first interactive solve
        pays no first-call costs (the skeleton's features, numpy's and torch's first calls)."""
        kp = CANONICAL.rest_keypoints()[None].astype(np.float64)
        sparse = kp.copy()
        sparse[:, ~_SPARSE_SET] = np.nan
        self.solve(sparse, mode="sparse", refine_steps=2)
        self.solve(kp, mode="dense")

    def _network_on(self, dev: torch.device):
        """The network on ``dev`` (a CPU copy of a CUDA solver's network is made once, when first needed)."""
        if dev.type == self.device.type:
            return self.net
        if self._cpu_net is None:
            self._cpu_net = copy.deepcopy(self.net).to("cpu").eval()
        return self._cpu_net

    def _skeleton_tensors(self, sk: Skeleton, dev: torch.device):
        off = np.asarray(sk.offsets, dtype=np.float64)
        eo = np.asarray(sk.end_offsets, dtype=np.float64)
        key = (off.tobytes(), eo.tobytes(), str(dev))
        hit = self._sk_cache.get(key)
        if hit is None:
            if len(self._sk_cache) > 8:
                self._sk_cache.clear()
            hit = (torch.as_tensor(off, dtype=torch.float32, device=dev),
                   torch.as_tensor(eo, dtype=torch.float32, device=dev))
            self._sk_cache[key] = hit
        return hit

    def solve(self, keypoints, mask=None, *, mode="auto", refine=True, refine_steps=REFINE_DEFAULTS["steps"],
              orientations=None, batch_size=4096, skeleton=None, progress=None, limits=True,
              dtype=np.float64, temporal="auto") -> SolveResult:
        """Solve poses for a sequence of keypoint frames.

        Parameters
        ----------
        keypoints : array_like, shape (T, 32, 3) or (32, 3)
            Canonical keypoints, metres, Z up; NaN = missing. Float32 input
            is used as it is (no float64 copy).
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
            Frames per batch (on a GPU, larger batches are faster: 65,536 or more).
        skeleton : Skeleton, optional
            Subject skeleton; fitted from the keypoints when None.
        progress : callable, optional
            ``progress(done_frames, total_frames)`` after every batch.
        limits : bool
            Soft joint limits in the refinement.
        dtype : numpy dtype
            Of ``local_rot``, ``root_pos`` and ``keypoints`` in the result:
            float64 (default) or float32 (half the memory; the batched solve
            computes in float32 anyway; on CUDA the results then arrive in
            pinned memory without any conversion).
        temporal : {"auto", "off", "centred", "causal"}
            Temporal context of the network (weights with a temporal block):
            the frames are consecutive frames of one clip and each frame's
            answer reads its neighbours' keypoints (``"centred"``: before and
            after, for bakes; ``"causal"``: only the frames before, for a
            stream that has no future frames); ``"off"``: every frame alone.
            ``"auto"``: centred for more than one frame, off for one. The
            network was trained at 30 frames per second.

        Returns
        -------
        SolveResult
        """
        t_start = time.perf_counter()
        kp = np.asarray(keypoints)
        if kp.dtype not in (np.float32, np.float64):
            kp = kp.astype(np.float64)
        single = kp.ndim == 2
        if single:
            kp = kp[None]
        if kp.ndim != 3 or kp.shape[1:] != (NUM_KEYPOINTS, 3):
            raise ValueError(f"keypoints must have shape (T, {NUM_KEYPOINTS}, 3) or ({NUM_KEYPOINTS}, 3), got {np.shape(keypoints)}")
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
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
        del finite
        if mode == "auto":
            mode = detect_mode(m)
        if mode not in ("dense", "sparse"):
            raise ValueError(f"mode must be 'auto', 'dense' or 'sparse', got {mode!r}")
        if mode == "sparse":
            m = m & _SPARSE_SET
        if temporal not in ("auto", "off", "centred", "causal"):
            raise ValueError(f"temporal must be 'auto', 'off', 'centred' or 'causal', got {temporal!r}")
        if temporal == "auto":
            temporal = "centred" if T > 1 else "off"
        if self.net.temporal is None or T == 1:
            temporal = "off"
        ori = omask = None
        if orientations is not None:
            ori = np.asarray(orientations, dtype=np.float64)
            if single and ori.ndim == 3:
                ori = ori[None]
            if ori.shape != (T, NUM_EFF, 3, 3):
                raise ValueError(f"orientations must have shape ({T}, {NUM_EFF}, 3, 3), got {ori.shape}")
            omask = np.isfinite(ori).all((-2, -1))
            ori = np.where(omask[..., None, None], ori, np.eye(3))
        if skeleton is None:
            skeleton = fit_skeleton(kp, m)
            if mode == "dense" and T > 1:
                skeleton = self._refit_directions(kp, m, ori, omask, skeleton, batch_size)
        dev = self.device
        if dev.type == "cuda" and T <= CPU_MAX_FRAMES_ON_CUDA:  # launch overhead: a few frames are faster here
            dev = torch.device("cpu")
        out = self._solve_frames(kp, m, ori, omask, skeleton, refine, refine_steps, limits, batch_size, progress,
                                 dtype, dev, temporal)
        return SolveResult(out["L"], out["root"], out["kp"], skeleton, out["err"], mode,
                           {"network": out["seconds"][0], "refine": out["seconds"][1],
                            "total": time.perf_counter() - t_start}, dev.type)

    def measure_skeleton(self, keypoints, mask=None, *, refine=True, batch_size=4096) -> Skeleton:
        """The skeleton :meth:`solve` fits to a clip's dense keypoints when it is given none.

        Lengths from :func:`fit_skeleton`, then every offset's direction
        measured in its parent's frame over up to :attr:`REFIT_FRAMES` frames
        solved by the network and the refinement (``refine`` True, what
        :meth:`solve` does: rotations stay turns from the canonical T-pose) or
        by the network alone (``refine`` False: the skeleton on which the
        network's own rotations meet the keypoints as well as they can, a
        diagnostic of how much of the network's joint error is where a
        convention places its joints rather than how the network turns the
        bones; ``training.evaluate`` prints it).

        Parameters
        ----------
        keypoints : array_like, shape (T, 32, 3)
        mask : array_like, shape (T, 32) bool, optional
        refine : bool
        batch_size : int

        Returns
        -------
        Skeleton
        """
        kp = np.asarray(keypoints, dtype=np.float64)
        if kp.ndim != 3 or kp.shape[1:] != (NUM_KEYPOINTS, 3):
            raise ValueError(f"keypoints must have shape (T, {NUM_KEYPOINTS}, 3), got {kp.shape}")
        m = np.isfinite(kp).all(-1)
        if mask is not None:
            m &= np.asarray(mask, dtype=bool)
        return self._refit_directions(kp, m, None, None, fit_skeleton(kp, m), batch_size, refine=refine)

    def _refit_directions(self, kp, m, ori, omask, skeleton, batch_size, rounds=1, max_frames=None, refine=True):
        """Bone directions of a fitted skeleton from the solved poses.

        :func:`fit_skeleton` measures lengths only. Here each keypoint's offset
        is re-measured in its parent joint's frame (median over frames) using
        the world rotations of a network + refinement solve, ``rounds`` times:
        where the canonical directions cannot meet the keypoints (two points
        that coincide, as a CMU skeleton's upper spine and neck) the offset
        takes what the keypoints show, and elsewhere the directions stay
        nearly canonical (the refinement has bent the rotations onto them), so
        the rotations stay turns from the canonical T-pose, as a bake onto
        another rig needs them. With ``refine`` False the poses are the
        network's own (:meth:`measure_skeleton`). Long clips are subsampled:
        at most ``max_frames`` (default :attr:`REFIT_FRAMES`) evenly spread
        frames are solved (a median over a few dozen frames is as good as over
        thousands, and this pre-pass would otherwise cost a full solve with
        refinement).
        """
        T = kp.shape[0]
        n_max = int(self.REFIT_FRAMES if max_frames is None else max_frames)
        if T > n_max:
            idx = np.unique(np.linspace(0, T - 1, n_max).round().astype(np.int64))
            kp, m = kp[idx], m[idx]
            if ori is not None:
                ori, omask = ori[idx], omask[idx]
        T = kp.shape[0]
        kp0 = np.where(m[..., None], kp, 0.0)
        dev = self.device if (self.device.type != "cuda" or T > CPU_MAX_FRAMES_ON_CUDA) else torch.device("cpu")
        sk = skeleton
        carrier = np.array([max(p, 0) for p in PARENTS] + list(END_PARENTS))  # frame each keypoint's offset lives in
        base = carrier  # joint the offset starts at
        for _ in range(rounds):
            out = self._solve_frames(kp0, m, ori, omask, sk, bool(refine), REFINE_DEFAULTS["steps"], True, batch_size,
                                     None, np.float64, dev, "off")  # evenly spread frames: no temporal context
            W, P, _ = _np_fk(out["L"], out["root"], np.asarray(sk.offsets, dtype=np.float64),
                             np.asarray(sk.end_offsets, dtype=np.float64))
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

    def _single_numpy(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, a):
        """Frame ``a`` with the numpy network and the numpy LM refinement.

        Returns ``(local (22, 3, 3), root (3,), keypoints (32, 3), network s, refine s)``.
        """
        t0 = time.perf_counter()
        o = om = None
        if ori is not None:
            o, om = ori[a], omask[a]
        kp0 = np.where(m[a][:, None], kp[a], 0.0).astype(np.float64)
        Ln, rn = self._np_net.predict(kp0, m[a], skeleton, o, om)
        Ln, rn = Ln[None], rn[None]
        off = np.asarray(skeleton.offsets, dtype=np.float64)
        eo = np.asarray(skeleton.end_offsets, dtype=np.float64)
        if self.place_root and m[a].any():   # (as :func:`_placed_root`)
            w = m[a][None, :, None]
            rn = rn + ((kp0[None] - _np_fk(Ln, rn, off, eo)[2]) * w).sum(1) / w.sum(1)
        t1 = time.perf_counter()
        kpo = None
        if refine and refine_steps > 0:
            Ln, rn, kpo = refine_numpy(
                Ln, rn, kp0[None], m[a:a + 1].astype(np.float64), off, eo,
                steps=int(refine_steps), orient_targets=None if ori is None else ori[a:a + 1],
                orient_weights=None if omask is None else omask[a:a + 1] * REFINE_DEFAULTS["orient_weight"],
                orient_joints=EFFECTOR_JOINTS, limits=limits, return_keypoints=True)
        kpo = (kpo if kpo is not None else _np_fk(Ln, rn, off, eo)[2])[0]
        return Ln[0], rn[0], kpo, t1 - t0, time.perf_counter() - t1

    @staticmethod
    def _host_array(shape, dtype, pinned):
        """``(numpy array, torch view or None)``: page-locked when ``pinned`` (and possible)."""
        if pinned:
            try:
                t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.float64, pin_memory=True)
                return t.numpy(), t
            except RuntimeError:  # no page-locked memory to be had: pageable arrays
                pass
        return np.empty(shape, dtype), None

    def _solve_frames(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, batch_size, progress, dtype,
                      dev, temporal="off"):
        """Network (+ refinement) for every frame on ``dev``; dict of outputs ``L``, ``root``, ``kp``, ``err``
        (mm per frame) and ``seconds`` (network, refine).

        With ``temporal`` on, each batch's network pass also reads the
        frames its temporal block needs around the batch (:meth:`_halo`), so
        batches join without a seam."""
        T = kp.shape[0]
        direct = dev.type == "cuda" and dtype == np.float32  # results copied straight into pinned arrays
        out = {}
        views = {}
        for key, shape in (("L", (T, NUM_JOINTS, 3, 3)), ("root", (T, 3)), ("kp", (T, NUM_KEYPOINTS, 3))):
            out[key], views[key] = self._host_array(shape, dtype, direct)
        out["err"], views["err"] = self._host_array((T,), np.float32 if direct else np.float64, direct)
        seconds = [0.0, 0.0]
        bs = max(int(batch_size), 1)
        if dev.type == "cpu" and T == 1:  # one frame: the numpy twins, no torch
            L, r, k, tn, tr = self._single_numpy(kp, m, ori, omask, skeleton, refine, refine_steps, limits, 0)
            out["L"][0], out["root"][0], out["kp"][0] = L, r, k
            cnt = m[0].sum()
            err = np.linalg.norm(k - np.where(m[0][:, None], kp[0], 0.0), axis=-1)
            out["err"][0] = (err[m[0]].sum() / cnt * 1000.0) if cnt else np.nan
            if progress is not None:
                progress(1, 1)
            out["seconds"] = (tn, tr)
            return out
        with torch.inference_mode():
            if dev.type == "cuda":
                with torch.cuda.device(dev):  # events and streams of this device
                    self._batches_cuda(kp, m, ori, omask, skeleton, refine, refine_steps, limits, bs, progress, out,
                                       views, seconds, temporal)
            else:
                self._batches_cpu(kp, m, ori, omask, skeleton, refine, refine_steps, limits, bs, progress, out,
                                  seconds, temporal)
        out["seconds"] = tuple(seconds)
        return out

    def _halo(self, temporal):
        """Frames ``(before, after)`` a batch's temporal network pass reads beyond the batch."""
        if temporal == "off" or self.net.temporal is None:
            return 0, 0
        k = self.net.temporal.kernel
        return (k // 2, k // 2) if temporal == "centred" else (k - 1, 0)

    def _batch_network(self, net, kt, mt, ot, omt, off, eo, temporal="off", crop=None):
        """Masked keypoints (zeros where not given) and the network's pose for one batch, on its device.

        With ``temporal`` on, the rows are consecutive frames read as one
        sequence, and ``crop`` ``(start, count)`` the rows whose keypoints and
        pose are returned (the others are the temporal context around them).
        The root is placed on the given keypoints (:attr:`place_root`).
        Returns ``(kt, L, root, keypoints)``: the pose's keypoints where the
        placement computed them, else ``None``.
        """
        kt = torch.where(mt[..., None], kt, torch.zeros((), dtype=kt.dtype, device=kt.device))
        low = torch.bfloat16 if self.precision == "bfloat16" and kt.device.type == "cpu" else None
        L, root, _ = net.predict(kt, mt, off, eo, ot, omt, window=kt.shape[0], temporal=temporal, compute_dtype=low)
        if crop is not None:
            o, k = crop
            kt, L, root, mt = kt[o:o + k], L[o:o + k], root[o:o + k], mt[o:o + k]
        kpo = None
        if self.place_root:
            root, kpo = _placed_root(L, root, kt, mt, off, eo)
        return kt, L, root, kpo

    @staticmethod
    def _batch_refine(L, root, kt, mt, ot, omt, off, eo, refine_steps, limits, active):
        return _refine(L, root, kt, mt.float(), off, eo, steps=int(refine_steps), orient_targets=ot,
                       orient_weights=None if omt is None else omt.float() * REFINE_DEFAULTS["orient_weight"],
                       orient_joints=EFFECTOR_JOINTS, limits=limits, active=active)

    @staticmethod
    def _batch_output(L, root, kt, mt, off, eo, kpo=None):
        """Keypoints of the pose (``kpo`` where already known) and the mean distance (mm) to the given ones, per frame."""
        if kpo is None:
            kpo = fk_keypoints(L, root, off, eo)
        w = mt.to(kpo.dtype)
        cnt = w.sum(1)
        err = ((kpo - kt).norm(dim=-1) * w).sum(1) / cnt.clamp_min(1.0) * 1000.0
        return kpo, torch.where(cnt > 0, err, torch.full_like(err, float("nan")))

    @staticmethod
    def _active(m, ori, omask, a, b):
        """Keypoints (and orientations) given in frames ``a:b``, from the host mask (no device sync)."""
        return (m[a:b].any(0), None if omask is None else omask[a:b].any(0))

    def _batches_cpu(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, bs, progress, out, seconds,
                     temporal="off"):
        T = kp.shape[0]
        net = self._network_on(torch.device("cpu"))
        off, eo = self._skeleton_tensors(skeleton, torch.device("cpu"))
        hb, ha = self._halo(temporal)
        for a in range(0, T, bs):
            b = min(a + bs, T)
            t0 = time.perf_counter()
            if b - a == 1 and temporal == "off":  # a lone frame: the numpy twins
                L, r, k, tn, tr = self._single_numpy(kp, m, ori, omask, skeleton, refine, refine_steps, limits, a)
                out["L"][a], out["root"][a], out["kp"][a] = L, r, k
                cnt = m[a].sum()
                err = np.linalg.norm(k - np.where(m[a][:, None], kp[a], 0.0), axis=-1)
                out["err"][a] = (err[m[a]].sum() / cnt * 1000.0) if cnt else np.nan
                seconds[0] += tn
                seconds[1] += tr
            else:
                a0, b0 = max(a - hb, 0), min(b + ha, T)
                kt = torch.from_numpy(np.ascontiguousarray(kp[a0:b0])).float()
                mt = torch.from_numpy(np.ascontiguousarray(m[a0:b0]))
                ot = omt = None
                if ori is not None:
                    ot = torch.from_numpy(np.ascontiguousarray(ori[a0:b0])).float()
                    omt = torch.from_numpy(np.ascontiguousarray(omask[a0:b0]))
                kt, L, root, kpo = self._batch_network(net, kt, mt, ot, omt, off, eo, temporal, (a - a0, b - a))
                mt = mt[a - a0:b - a0]
                if ot is not None:
                    ot, omt = ot[a - a0:b - a0], omt[a - a0:b - a0]
                t1 = time.perf_counter()
                seconds[0] += t1 - t0
                if refine and refine_steps > 0:
                    L, root = self._batch_refine(L, root, kt, mt, ot, omt, off, eo, refine_steps, limits,
                                                 self._active(m, ori, omask, a, b))
                    kpo = None
                seconds[1] += time.perf_counter() - t1
                kpo, err = self._batch_output(L, root, kt, mt, off, eo, kpo)
                out["L"][a:b] = L.numpy()
                out["root"][a:b] = root.numpy()
                out["kp"][a:b] = kpo.numpy()
                out["err"][a:b] = err.numpy()
            if progress is not None:
                progress(b, T)

    def _batches_cuda(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, bs, progress, out, views,
                      seconds, temporal="off"):
        """Batches on the GPU, float32 throughout, overlapped with the host.

        Per batch: the host converts the inputs into one of two pinned
        staging buffers (waiting only for that buffer's previous upload), the
        upload, the network, the refinement, the forward kinematics and the
        error run on the GPU's stream, and the results are copied back
        asynchronously: straight into the pinned outputs (``views``, when
        the result dtype is float32) or into one of two pinned download
        buffers that the host converts into the outputs while the GPU works
        on the next batch. The refinement gets the active keypoints from the
        host mask, so nothing waits on the GPU inside a batch.
        """
        dev = self.device
        T = kp.shape[0]
        n = min(bs, T)
        hb, ha = self._halo(temporal)
        ne = min(n + hb + ha, T)  # staging rows: the batch and its temporal context
        net = self.net
        off, eo = self._skeleton_tensors(skeleton, dev)
        has_ori = ori is not None
        pin = dict(pin_memory=True)
        up = [dict(kp=torch.empty((ne, NUM_KEYPOINTS, 3), dtype=torch.float32, **pin),
                   m=torch.empty((ne, NUM_KEYPOINTS), dtype=torch.bool, **pin),
                   ori=torch.empty((ne, NUM_EFF, 3, 3), dtype=torch.float32, **pin) if has_ori else None,
                   om=torch.empty((ne, NUM_EFF), dtype=torch.bool, **pin) if has_ori else None,
                   done=None) for _ in range(2)]
        direct = views["L"] is not None
        down = None
        if not direct:
            down = [dict(L=torch.empty((n, NUM_JOINTS, 3, 3), dtype=torch.float32, **pin),
                         root=torch.empty((n, 3), dtype=torch.float32, **pin),
                         kp=torch.empty((n, NUM_KEYPOINTS, 3), dtype=torch.float32, **pin),
                         err=torch.empty((n,), dtype=torch.float32, **pin)) for _ in range(2)]
        timing = []
        pending = []  # (slot, a, b, done event) copied back but not yet converted / reported

        def finish(item):
            slot, a0, b0, done = item
            done.synchronize()
            if not direct:
                k = b0 - a0
                for key in ("L", "root", "kp", "err"):
                    out[key][a0:b0] = down[slot][key][:k].numpy()
            if progress is not None:
                progress(b0, T)

        for i, a in enumerate(range(0, T, bs)):
            b = min(a + bs, T)
            k = b - a
            slot = i % 2
            buf = up[slot]
            if buf["done"] is not None:
                buf["done"].synchronize()  # its previous upload has finished: the buffer may be refilled
            a0, b0 = max(a - hb, 0), min(b + ha, T)
            ke, o = b0 - a0, a - a0
            np.copyto(buf["kp"][:ke].numpy(), kp[a0:b0])
            np.copyto(buf["m"][:ke].numpy(), m[a0:b0])
            ot = omt = None
            kt = buf["kp"][:ke].to(dev, non_blocking=True)
            mt = buf["m"][:ke].to(dev, non_blocking=True)
            if has_ori:
                np.copyto(buf["ori"][:ke].numpy(), ori[a0:b0])
                np.copyto(buf["om"][:ke].numpy(), omask[a0:b0])
                ot = buf["ori"][:ke].to(dev, non_blocking=True)
                omt = buf["om"][:ke].to(dev, non_blocking=True)
            buf["done"] = torch.cuda.Event()
            buf["done"].record()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
            kt, L, root, kpo = self._batch_network(net, kt, mt, ot, omt, off, eo, temporal, (o, k))
            mt = mt[o:o + k]
            if has_ori:
                ot, omt = ot[o:o + k], omt[o:o + k]
            ev[1].record()
            if refine and refine_steps > 0:
                L, root = self._batch_refine(L, root, kt, mt, ot, omt, off, eo, refine_steps, limits,
                                             self._active(m, ori, omask, a, b))
                kpo = None
            ev[2].record()
            kpo, err = self._batch_output(L, root, kt, mt, off, eo, kpo)
            timing.append(ev)
            if direct:
                dst = {key: views[key][a:b] for key in ("L", "root", "kp", "err")}
            else:
                if len(pending) == 2:  # this download buffer's previous batch must be converted first
                    finish(pending.pop(0))
                dst = {key: down[slot][key][:k] for key in ("L", "root", "kp", "err")}
            dst["L"].copy_(L, non_blocking=True)
            dst["root"].copy_(root, non_blocking=True)
            dst["kp"].copy_(kpo, non_blocking=True)
            dst["err"].copy_(err, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            pending.append((slot, a, b, done))
            if len(pending) == 2:  # convert / report the previous batch while this one runs
                finish(pending.pop(0))
        while pending:
            finish(pending.pop(0))
        torch.cuda.synchronize(dev)
        for ev in timing:
            seconds[0] += ev[0].elapsed_time(ev[1]) / 1000.0
            seconds[1] += ev[1].elapsed_time(ev[2]) / 1000.0
