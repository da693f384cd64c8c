"""The solver's frames in batches: the network, the refinement and the error per frame, on the CPU or CUDA.

:class:`FrameBatches` is the half of :class:`.inference.Solver` that runs
frames (the other half checks the inputs and fits the skeleton): on the CPU
a clip of up to :data:`NUMPY_MAX_FRAMES` frames, one pose included, through
numpy (:class:`.numpy_net.NumpyNet`, :func:`.refine.refine_numpy`) without
importing torch; longer clips on the CPU in torch batches, and batches on
CUDA overlapped with the host through pinned staging buffers.

No ``bpy`` here; torch is imported by the torch batches only.
"""

from __future__ import annotations

import time

import numpy as np

from .features import EFFECTOR_JOINTS, NUM_EFF, NUM_JOINTS, NUM_KEYPOINTS
from .refine import DEFAULTS as REFINE_DEFAULTS
from .refine import _np_fk, refine_numpy

__all__ = ["FrameBatches", "placed_root", "NUMPY_MAX_FRAMES", "NUMPY_BATCH"]

#: CPU solves of at most this many frames run in numpy: torch's import costs more than its faster
#: layers save up to here (docs/tuning.md#numpy_max_frames).
NUMPY_MAX_FRAMES = 8192

#: Frames per numpy batch: the refinement's normal equations of a batch stay in the CPU's caches
#: (docs/tuning.md#numpy_max_frames).
NUMPY_BATCH = 1024


def placed_root(L, root, kt, mt, off, eo):
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
    from .fk import fk_keypoints

    kpo = fk_keypoints(L, root, off, eo)
    w = mt.to(kpo.dtype)[..., None]
    shift = ((kt - kpo) * w).sum(1) / w.sum(1).clamp_min(1.0)
    return root + shift, kpo + shift[:, None]


def _staging_buffer(rows, has_ori):
    """One pinned upload buffer of ``rows`` frames (``done``: the event of its last upload)."""
    import torch

    pin = dict(pin_memory=True)
    return dict(kp=torch.empty((rows, NUM_KEYPOINTS, 3), dtype=torch.float32, **pin),
                m=torch.empty((rows, NUM_KEYPOINTS), dtype=torch.bool, **pin),
                ori=torch.empty((rows, NUM_EFF, 3, 3), dtype=torch.float32, **pin) if has_ori else None,
                om=torch.empty((rows, NUM_EFF), dtype=torch.bool, **pin) if has_ori else None,
                done=None)


def _download_buffer(rows):
    """One pinned download buffer of ``rows`` frames' results."""
    import torch

    pin = dict(pin_memory=True)
    return dict(L=torch.empty((rows, NUM_JOINTS, 3, 3), dtype=torch.float32, **pin),
                root=torch.empty((rows, 3), dtype=torch.float32, **pin),
                kp=torch.empty((rows, NUM_KEYPOINTS, 3), dtype=torch.float32, **pin),
                err=torch.empty((rows,), dtype=torch.float32, **pin))


def _upload(buf, kp, m, ori, omask, a0, b0, dev):
    """Frames ``a0:b0`` converted into the staging buffer ``buf`` and sent to ``dev`` without waiting.

    Returns ``(keypoints, mask, orientations or None, orientation mask or None)`` on ``dev``.
    """
    ke = b0 - a0
    np.copyto(buf["kp"][:ke].numpy(), kp[a0:b0])
    np.copyto(buf["m"][:ke].numpy(), m[a0:b0])
    ot = omt = None
    kt = buf["kp"][:ke].to(dev, non_blocking=True)
    mt = buf["m"][:ke].to(dev, non_blocking=True)
    if ori is not None:
        np.copyto(buf["ori"][:ke].numpy(), ori[a0:b0])
        np.copyto(buf["om"][:ke].numpy(), omask[a0:b0])
        ot = buf["ori"][:ke].to(dev, non_blocking=True)
        omt = buf["om"][:ke].to(dev, non_blocking=True)
    return kt, mt, ot, omt


class FrameBatches:
    """Runs a solve's frames; mixed into :class:`.inference.Solver`, whose ``device``, ``precision``,
    ``_precision_choice``, ``temporal_kernel``, ``place_root``, ``_np_net``, ``_network_on`` and
    ``_skeleton_tensors`` it uses."""

    def _in_numpy(self, T, dev, temporal) -> bool:
        """Whether a solve of ``T`` frames on ``dev`` runs in numpy (no torch): on the CPU, per frame,
        up to :data:`NUMPY_MAX_FRAMES` frames, and not when bfloat16 layers were asked for (one pose
        always)."""
        if dev.type != "cpu" or temporal != "off":
            return False
        return T == 1 or (T <= NUMPY_MAX_FRAMES and self._precision_choice != "bfloat16")

    def _numpy_batch(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, a, b):
        """Frames ``a:b`` with the numpy network and refinement.

        Returns ``(local (n, 22, 3, 3), root (n, 3), keypoints (n, 32, 3), error mm (n,), network s, refine s)``.
        """
        t0 = time.perf_counter()
        mk = m[a:b]
        o = om = None
        if ori is not None:
            o, om = ori[a:b], omask[a:b]
        kp0 = np.where(mk[..., None], kp[a:b], 0.0).astype(np.float64, copy=False)
        L, root = self._np_net.predict(kp0, mk, skeleton, o, om)
        off = np.asarray(skeleton.offsets, dtype=np.float64)
        eo = np.asarray(skeleton.end_offsets, dtype=np.float64)
        w = mk[..., None]
        cnt = mk.sum(1)
        kpo = None
        if self.place_root:   # (as :func:`placed_root`)
            kpo = _np_fk(L, root, off, eo)[2]
            shift = ((kp0 - kpo) * w).sum(1) / np.maximum(cnt, 1)[:, None]
            root, kpo = root + shift, kpo + shift[:, None]
        t1 = time.perf_counter()
        if refine and refine_steps > 0:
            L, root, kpo = refine_numpy(
                L, root, kp0, mk.astype(np.float64), off, eo, steps=int(refine_steps), orient_targets=o,
                orient_weights=None if om is None else om * REFINE_DEFAULTS["orient_weight"],
                orient_joints=EFFECTOR_JOINTS, limits=limits, return_keypoints=True)
        if kpo is None:
            kpo = _np_fk(L, root, off, eo)[2]
        err = (np.linalg.norm(kpo - kp0, axis=-1) * w[..., 0]).sum(1) / np.maximum(cnt, 1) * 1000.0
        err = np.where(cnt > 0, err, np.nan)
        return L, root, kpo, err, t1 - t0, time.perf_counter() - t1

    def _batches_numpy(self, kp, m, ori, omask, skeleton, refine, refine_steps, limits, bs, progress, out, seconds):
        T = kp.shape[0]
        for a in range(0, T, bs):
            b = min(a + bs, T)
            L, r, k, err, tn, tr = self._numpy_batch(kp, m, ori, omask, skeleton, refine, refine_steps, limits, a, b)
            out["L"][a:b], out["root"][a:b], out["kp"][a:b], out["err"][a:b] = L, r, k, err
            seconds[0] += tn
            seconds[1] += tr
            if progress is not None:
                progress(b, T)

    @staticmethod
    def _host_array(shape, dtype, pinned):
        """``(numpy array, torch view or None)``: page-locked when ``pinned`` (and possible)."""
        if pinned:
            import torch

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
        if self._in_numpy(T, dev, temporal):
            self._batches_numpy(kp, m, ori, omask, skeleton, refine, refine_steps, limits, min(bs, NUMPY_BATCH),
                                progress, out, seconds)
            out["seconds"] = tuple(seconds)
            return out
        import torch

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
        if temporal == "off" or not self.temporal_kernel:
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
        import torch

        kt = torch.where(mt[..., None], kt, torch.zeros((), dtype=kt.dtype, device=kt.device))
        low = torch.bfloat16 if self.precision == "bfloat16" and kt.device.type == "cpu" else None
        L, root, _ = net.predict(kt, mt, off, eo, ot, omt, window=kt.shape[0], temporal=temporal, compute_dtype=low)
        if crop is not None:
            o, k = crop
            kt, L, root, mt = kt[o:o + k], L[o:o + k], root[o:o + k], mt[o:o + k]
        kpo = None
        if self.place_root:
            root, kpo = placed_root(L, root, kt, mt, off, eo)
        return kt, L, root, kpo

    @staticmethod
    def _batch_refine(L, root, kt, mt, ot, omt, off, eo, refine_steps, limits, active):
        from .refine import refine as _refine

        return _refine(L, root, kt, mt.float(), off, eo, steps=int(refine_steps), orient_targets=ot,
                       orient_weights=None if omt is None else omt.float() * REFINE_DEFAULTS["orient_weight"],
                       orient_joints=EFFECTOR_JOINTS, limits=limits, active=active)

    @staticmethod
    def _batch_output(L, root, kt, mt, off, eo, kpo=None):
        """Keypoints of the pose (``kpo`` where already known) and the mean distance (mm) to the given ones, per frame."""
        import torch

        from .fk import fk_keypoints

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
        import torch

        T = kp.shape[0]
        net = self._network_on("cpu")
        off, eo = self._skeleton_tensors(skeleton, "cpu")
        hb, ha = self._halo(temporal)
        for a in range(0, T, bs):
            b = min(a + bs, T)
            t0 = time.perf_counter()
            if b - a == 1 and temporal == "off":  # a lone frame: numpy
                L, r, k, err, tn, tr = self._numpy_batch(kp, m, ori, omask, skeleton, refine, refine_steps, limits,
                                                         a, b)
                out["L"][a:b], out["root"][a:b], out["kp"][a:b], out["err"][a:b] = L, r, k, err
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
        import torch

        dev = self.device
        T = kp.shape[0]
        n = min(bs, T)
        hb, ha = self._halo(temporal)
        ne = min(n + hb + ha, T)  # staging rows: the batch and its temporal context
        net = self.net
        off, eo = self._skeleton_tensors(skeleton, dev)
        has_ori = ori is not None
        up = [_staging_buffer(ne, has_ori) for _ in range(2)]
        direct = views["L"] is not None
        down = None if direct else [_download_buffer(n) for _ in range(2)]
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
            o = a - a0
            kt, mt, ot, omt = _upload(buf, kp, m, ori, omask, a0, b0, dev)
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
