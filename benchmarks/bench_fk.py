"""Forward kinematics alone: the canonical skeleton (torch and numpy) and Rigify's meta-rig (the rig solve's FK).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_fk.py [--repeats 300] [--threads 1] [--only torch,numpy,rig]

Prints one row per case: the median time of one call over ``--repeats``
samples (each sample a few calls, so that the timer does not dominate), and
the 25th and 75th percentiles. Only public entry points are timed
(``model.fk.forward_kinematics``, ``model.skeleton.forward_kinematics_np``,
``retarget.rigfk.RigFK``, ``RestFK``, ``retarget.rigpose.pose_rig`` and
``model.bvh.BVHData.world``), so the same script times any version of the
code: run it on two checkouts to compare them. The poses are random; FK's
time does not depend on them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from _pkg import import_package  # the script's folder is on sys.path


def _time(fn, repeats):
    """(median, p25, p75) seconds of one call of ``fn``."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    inner = max(1, min(50, int(2e-3 / max(one, 1e-7))))   # samples of at least about 2 ms
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter() - t0) / inner)
    q = statistics.quantiles(ts, n=4)
    return statistics.median(ts), q[0], q[2]


def _rotations(rng, shape):
    from neural_ik.model.rotations_np import axis_angle_to_matrix

    return axis_angle_to_matrix(rng.normal(scale=0.6, size=shape + (3,)))


def canonical_torch(rng, repeats):
    from neural_ik.model.fk import forward_kinematics
    from neural_ik.model.skeleton import REST_OFFSETS

    rows = []
    for T in (1, 200, 4096):
        L = torch.as_tensor(_rotations(rng, (T, 22)), dtype=torch.float32)
        r = torch.as_tensor(rng.normal(size=(T, 3)), dtype=torch.float32)
        off = torch.as_tensor(REST_OFFSETS, dtype=torch.float32)
        off_each = torch.as_tensor(REST_OFFSETS * rng.uniform(0.8, 1.2, size=(T, 1, 1)), dtype=torch.float32)

        def fwd():
            with torch.no_grad():
                forward_kinematics(L, r, off)

        Lg = L.clone().requires_grad_(True)
        rg = r.clone().requires_grad_(True)

        def fwd_bwd():
            W, X = forward_kinematics(Lg, rg, off_each)
            (W.sum() + X.sum()).backward()

        rows.append(("torch canonical FK forward, shared offsets", T, _time(fwd, repeats)))
        rows.append(("torch canonical FK fwd+bwd, own offsets", T, _time(fwd_bwd, repeats)))
    return rows


def canonical_numpy(rng, repeats):
    from neural_ik.model.skeleton import REST_OFFSETS, forward_kinematics_np

    rows = []
    for T in (1, 200):
        L = _rotations(rng, (T, 22))
        r = rng.normal(size=(T, 3))
        rows.append(("numpy canonical FK", T, _time(lambda: forward_kinematics_np(L, r, REST_OFFSETS), repeats)))
    L = _rotations(rng, (22,))
    rows.append(("numpy canonical FK, no batch dim", 1, _time(lambda: forward_kinematics_np(L, np.zeros(3)), repeats)))
    return rows


def _metarig():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import rigs
    from neural_ik.retarget.mapping import auto_map
    from neural_ik.retarget.posed import posed_bones
    from neural_ik.retarget.solve import plan_retarget

    rig = rigs.rigify_metarig_description()
    posed = sorted(posed_bones(plan_retarget(rig, auto_map(rig))), key=lambda b: (rig.depth[b], b))
    return rig, posed


def rig(rng, repeats):
    from neural_ik.model.rotations_np import matrix_to_quat
    from neural_ik.retarget.rigfk import RestFK, RigFK
    from neural_ik.retarget.rigpose import pose_rig

    meta, posed = _metarig()
    unposed = np.setdiff1d(np.arange(len(meta)), posed)
    fk64 = RigFK(meta, posed, None)
    fk32 = RigFK(meta, posed, torch.float32)
    rest = RestFK(meta, {int(b): i for i, b in enumerate(posed)}, unposed)
    n = len(posed)
    rows = []
    for T in (1, 512):
        basis = _rotations(rng, (T, n))
        loc = rng.normal(scale=0.01, size=(T, n, 3))
        bt, lt = torch.as_tensor(basis, dtype=torch.float32), torch.as_tensor(loc, dtype=torch.float32)
        rows.append((f"rig FK numpy, meta-rig's {n} posed bones", T, _time(lambda: fk64.numpy(basis, loc), repeats)))

        def tfk():
            with torch.no_grad():
                fk32(bt, lt)

        rows.append((f"rig FK torch float32, {n} posed bones", T, _time(tfk, repeats)))
        W, X, _ = fk64.numpy(basis, loc)
        quats = matrix_to_quat(_rotations(rng, (T, len(meta))))
        locs = rng.normal(scale=0.01, size=(T, len(meta), 3))
        rows.append((f"rest FK numpy, {len(unposed)} unposed bones", T,
                     _time(lambda: rest.numpy(W, X, quats, locs), repeats)))
        if T > 1:
            rows.append((f"pose_rig, all {len(meta)} bones", T, _time(lambda: pose_rig(meta, quats, locs), repeats)))
    return rows


def bvh(rng, repeats):
    from neural_ik.model.bvh import BVHData
    from neural_ik.model.skeleton import JOINTS, PARENTS, REST_OFFSETS

    T, J = 3000, len(JOINTS)
    trans = np.broadcast_to(REST_OFFSETS, (T, J, 3)).copy()
    trans[:, 0] = rng.normal(size=(T, 3))
    d = BVHData("<bench>", list(JOINTS), np.array(PARENTS), REST_OFFSETS.copy(), [()] * J, [],
                _rotations(rng, (T, J)), trans, 1 / 30, np.zeros((T, 0)))
    return [(f"BVH world(), {J} joints", T, _time(d.world, max(repeats // 10, 20)))]


CASES = {"torch": canonical_torch, "numpy": canonical_numpy, "rig": rig, "bvh": bvh}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    import_package()
    rng = np.random.default_rng(0)
    print(f"{'case':58s} {'frames':>6s} {'median':>10s} {'p25':>10s} {'p75':>10s}")
    for name in a.only.split(","):
        for label, T, (med, p25, p75) in CASES[name](rng, a.repeats):
            print(f"{label:58s} {T:6d} {med * 1e6:8.1f}us {p25 * 1e6:8.1f}us {p75 * 1e6:8.1f}us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
