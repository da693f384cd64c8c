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
the network's answer. On the CPU a solve of up to
:data:`.batches.NUMPY_MAX_FRAMES` frames, one pose included, never touches
torch: the weights are read into numpy (:func:`.weights.load_weights`), the
network's layers run in numpy in float32 (:class:`.numpy_net.NumpyNet`) and
the refinement on float64 numpy arrays (:func:`.refine.refine_numpy`).
Importing torch costs more than such a solve, and for one pose torch's
per-operation overhead would be most of the time
(docs/tuning.md#numpy_max_frames). Longer clips and CUDA run in torch,
imported then.

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

import time
from pathlib import Path

import numpy as np

from .batches import NUMPY_MAX_FRAMES, FrameBatches
from .compute import PRECISIONS, DeviceName, cpu_has_bfloat16, resolve_device_name, resolve_precision
from .features import NUM_EFF, NUM_JOINTS, NUM_KEYPOINTS
from .numpy_net import NumpyNet
from .refine import DEFAULTS as REFINE_DEFAULTS
from .refine import _np_fk
from .result import _SPARSE_SET, SolveResult, detect_mode
from .skeleton import CANONICAL, END_PARENTS, PARENTS, Skeleton
from .skeleton_fit import fit_skeleton
from .weights import (DEFAULT_WEIGHTS, FORMAT_VERSION, WeightsError, build_network, format_version_problem,
                      load_network, load_weights)

__all__ = ["WeightsError", "SolveResult", "Solver", "fit_skeleton", "detect_mode", "load_network", "load_weights",
           "format_version_problem", "DEFAULT_WEIGHTS", "FORMAT_VERSION", "CPU_MAX_FRAMES_ON_CUDA",
           "NUMPY_MAX_FRAMES", "PRECISIONS", "cpu_has_bfloat16", "resolve_precision"]


#: Solves of at most this many frames run on the CPU even on a CUDA solver: a pose is mostly
#: kernel launches there (docs/tuning.md#cpu_max_frames_on_cuda).
CPU_MAX_FRAMES_ON_CUDA = 16


def _checked_keypoints(keypoints):
    """``(keypoints (T, 32, 3) float32 or float64, whether one frame was given)``; raises ValueError on another shape."""
    kp = np.asarray(keypoints)
    if kp.dtype not in (np.float32, np.float64):
        kp = kp.astype(np.float64)
    single = kp.ndim == 2
    if single:
        kp = kp[None]
    if kp.ndim != 3 or kp.shape[1:] != (NUM_KEYPOINTS, 3):
        raise ValueError(f"keypoints must have shape (T, {NUM_KEYPOINTS}, 3) or ({NUM_KEYPOINTS}, 3), got {np.shape(keypoints)}")
    return kp, single


def _given_mask(kp, mask, single):
    """The given keypoints (T, 32): ``mask`` (default all) and finite."""
    T = kp.shape[0]
    finite = np.isfinite(kp).all(-1)
    if mask is None:
        return finite
    m = np.asarray(mask, dtype=bool)
    if single and m.ndim == 1:
        m = m[None]
    if m.shape != (T, NUM_KEYPOINTS):
        raise ValueError(f"mask must have shape ({T}, {NUM_KEYPOINTS}), got {m.shape}")
    return m & finite


def _checked_orientations(orientations, single, T):
    """``(orientations (T, 6, 3, 3) with identities where not given, given (T, 6) bool)``, or ``(None, None)``."""
    if orientations is None:
        return None, None
    ori = np.asarray(orientations, dtype=np.float64)
    if single and ori.ndim == 3:
        ori = ori[None]
    if ori.shape != (T, NUM_EFF, 3, 3):
        raise ValueError(f"orientations must have shape ({T}, {NUM_EFF}, 3, 3), got {ori.shape}")
    omask = np.isfinite(ori).all((-2, -1))
    return np.where(omask[..., None, None], ori, np.eye(3)), omask


class Solver(FrameBatches):
    """Neural IK solver (network + optional Gauss-Newton refinement).

    Parameters
    ----------
    weights : str or Path, optional
        Weights file (default :data:`DEFAULT_WEIGHTS`).
    device : {"auto", "cpu", "cuda"}
        ``"auto"`` picks CUDA when available.
    precision : {"auto", "float32", "bfloat16"}
        What the network's layers compute in for torch batches on the CPU
        (:data:`PRECISIONS`; clips over :data:`NUMPY_MAX_FRAMES` frames).
        ``"auto"``: bfloat16 where the CPU multiplies it natively
        (:func:`cpu_has_bfloat16`: twice the frames a second on the 2-core
        VM, the held-out figures within noise), float32 elsewhere.
        ``"float32"`` gives the same numbers on every CPU. ``"bfloat16"``
        also runs shorter clips in torch (one pose stays in numpy). The
        numpy path and CUDA batches are float32 whatever it says.

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
        self._precision_choice = precision
        self._precision = resolve_precision(precision) if precision != "auto" else None
        self.device = resolve_device_name(device)
        self.weights_path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
        self._blob = load_weights(self.weights_path)
        self.info = self._blob.get("train", {})
        #: Frames the network's temporal block reads (0: none, every frame alone).
        self.temporal_kernel = int(self._blob["hparams"].get("temporal", 0))
        # the numpy network: CPU solves of up to NUMPY_MAX_FRAMES frames, one pose included
        self._np_net = NumpyNet(self._blob)
        self._nets = {}
        self._sk_cache = {}

    @property
    def precision(self) -> str:
        """What the torch CPU batches' layers compute in: "float32" or "bfloat16" (:func:`resolve_precision`)."""
        if self._precision is None:
            self._precision = resolve_precision(self._precision_choice)
        return self._precision

    @property
    def net(self):
        """The torch network on the solver's device (built from the weights when first needed: imports torch)."""
        return self._network_on(self.device)

    def warm_up(self):
        """Solve the canonical rest pose once, sparse and dense, so that a first interactive solve
        pays no first-call costs (the skeleton's features, numpy's and torch's first calls)."""
        kp = CANONICAL.rest_keypoints()[None].astype(np.float64)
        sparse = kp.copy()
        sparse[:, ~_SPARSE_SET] = np.nan
        self.solve(sparse, mode="sparse", refine_steps=2)
        self.solve(kp, mode="dense")

    def _network_on(self, dev):
        """The torch network on ``dev`` (each device's copy built once, when first needed)."""
        net = self._nets.get(str(dev))
        if net is None:
            net = self._nets[str(dev)] = build_network(self._blob, self.weights_path, dev)
        return net

    def _skeleton_tensors(self, sk: Skeleton, dev):
        import torch

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
        kp, single = _checked_keypoints(keypoints)
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        T = kp.shape[0]
        m = _given_mask(kp, mask, single)
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
        if not self.temporal_kernel or T == 1:
            temporal = "off"
        ori, omask = _checked_orientations(orientations, single, T)
        if skeleton is None:
            skeleton = fit_skeleton(kp, m)
            if mode == "dense" and T > 1:
                skeleton = self._refit_directions(kp, m, ori, omask, skeleton, batch_size)
        dev = self.device
        if dev.type == "cuda" and T <= CPU_MAX_FRAMES_ON_CUDA:  # launch overhead: a few frames are faster here
            dev = DeviceName("cpu")
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
        dev = self.device if (self.device.type != "cuda" or T > CPU_MAX_FRAMES_ON_CUDA) else DeviceName("cpu")
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
                    v = _median_offset(loc[ok[:, k], k])
                    if k < NUM_JOINTS:
                        new_off[k] = v
                    else:
                        new_end[k - NUM_JOINTS] = v
            sk = Skeleton(new_off, new_end)
        return sk


def _median_offset(loc):
    """One offset from its measures ``loc`` (T, 3) in its parent's frame: the median's direction at the median
    length (a median of vectors scattered about one direction is shorter than they are: a bone measured
    0.1 % short scaled a whole clip by it)."""
    v = np.median(loc, axis=0)
    n = float(np.linalg.norm(v))
    return v * (float(np.median(np.linalg.norm(loc, axis=-1))) / n) if n > 1e-12 else v

