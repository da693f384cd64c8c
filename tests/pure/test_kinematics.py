"""The one forward kinematics (``model/kinematics.py``) against a plain loop written here, joint by
joint, for every skeleton that uses it: the canonical one (numpy and torch, shared and per-sample
offsets, broadcast batch dimensions, gradients), Rigify's meta-rig (the rig solve's posed bones, the
bones it leaves unposed, a whole rig posed, from Blender's 4x4 matrices) and a BVH file's joints."""

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from neural_ik.model import fk
from neural_ik.model.bvh import BVHData
from neural_ik.model.kinematics import Tree, level_fk
from neural_ik.model.rotations_np import matrix_to_quat, quat_to_matrix
from neural_ik.model.skeleton import PARENTS, REST_OFFSETS, TREE, forward_kinematics_np
from neural_ik.retarget.mapping import auto_map
from neural_ik.retarget.posed import posed_bones
from neural_ik.retarget.rigfk import RestFK, RigFK
from neural_ik.retarget.rigpose import pose_rig
from neural_ik.retarget.solve import plan_retarget
from rigs import rigify_metarig_description


def _rotations(rng, shape):
    return Rotation.from_rotvec(rng.normal(scale=0.8, size=(int(np.prod(shape)), 3))).as_matrix().reshape(
        tuple(shape) + (3, 3))


def loop_fk(parents, rot, offsets, root_pos=None):
    """Canonical forward kinematics joint by joint, parents first, on numpy or torch arrays alike."""
    done, W, X = set(), {}, {}
    while len(done) < len(parents):
        for j, p in enumerate(parents):
            if j in done or (p >= 0 and p not in done):
                continue
            if p < 0:
                W[j] = rot[..., j, :, :]
                X[j] = offsets[..., j, :] if root_pos is None else root_pos
            else:
                W[j] = W[p] @ rot[..., j, :, :]
                X[j] = X[p] + (W[p] @ offsets[..., j, :, None])[..., 0]
            done.add(j)
    stack = np.stack if isinstance(rot, np.ndarray) else torch.stack
    batch = np.broadcast_shapes(*(tuple(x.shape[:-1]) for x in X.values()))
    Xs = [x if tuple(x.shape[:-1]) == batch else
          (np.broadcast_to(x, batch + (3,)) if isinstance(x, np.ndarray) else x.expand(batch + (3,))) for x in X.values()]
    order = sorted(W)
    return stack([W[j] for j in order], -3), stack([Xs[list(X).index(j)] for j in order], -2)


def rig_loop(rig, quats, locs, bones):
    """Rotations and heads of ``bones`` by Blender's definition in 4x4 matrices: pose matrix = parent's
    pose matrix @ inverse(parent's matrix_local) @ matrix_local @ (location, rotation)."""
    T = quats.shape[0]
    M = {}
    for b in sorted(bones, key=lambda b: rig.depth[b]):
        basis = np.broadcast_to(np.eye(4), (T, 4, 4)).copy()
        basis[:, :3, :3] = quat_to_matrix(quats[:, b])
        basis[:, :3, 3] = locs[:, b]
        p = int(rig.parents[b])
        if p < 0:
            M[b] = _rest(rig, b) @ basis
        else:
            M[b] = M[p] @ np.linalg.inv(_rest(rig, p)) @ _rest(rig, b) @ basis
    return {b: (m[:, :3, :3], m[:, :3, 3]) for b, m in M.items()}


def _rest(rig, b):
    """A bone's rest matrix (``matrix_local`` with its head and orthonormalised rotation: the stored
    file keeps a single-precision copy of both)."""
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = rig.rest_rotation()[b], rig.head[b]
    return m


@pytest.fixture(scope="module")
def meta():
    rig = rigify_metarig_description()
    posed = sorted(posed_bones(plan_retarget(rig, auto_map(rig))), key=lambda b: (rig.depth[b], b))
    return rig, posed


def test_tree_orders_levels_and_reads_parents_by_slices():
    tree = Tree(PARENTS)
    order = tree.order
    assert sorted(order) == list(range(len(PARENTS))) and np.array_equal(order[tree.inverse], np.arange(22))
    depth = tree.depth[order]
    assert np.all(np.diff(depth) >= 0)
    for start, stop, spec in tree.levels:
        assert np.all(depth[start:stop] == depth[start])
        if spec is None:
            assert np.all(tree.parents[order[start:stop]] < 0)
    kinds = [spec[0] for _, _, spec in tree.levels[1:]]
    assert kinds.count("index") <= 1 and "slice" in kinds and "all" in kinds
    # no joints: empty poses
    W, X, B = level_fk(Tree([]), np.zeros((4, 0, 3, 3)), np.zeros((0, 3)), base=True)
    assert W.shape == B.shape == (4, 0, 3, 3) and X.shape == (4, 0, 3)
    # a depth-sorted order is kept; a cycle is refused
    assert Tree([-1, 0, 0, 1, 2]).order is None
    with pytest.raises(ValueError):
        Tree([1, 0])


@pytest.mark.parametrize("batch", [(), (1,), (7,), (2, 3)])
@pytest.mark.parametrize("own_offsets", [False, True])
def test_canonical_numpy_is_the_loop(batch, own_offsets):
    rng = np.random.default_rng(len(batch) + 10 * own_offsets)
    L = _rotations(rng, batch + (22,))
    root = rng.normal(size=batch + (3,))
    off = REST_OFFSETS * (rng.uniform(0.7, 1.3, size=batch + (22, 1)) if own_offsets else 1.0)
    W, X = forward_kinematics_np(L, root, off)
    Wr, Xr = loop_fk(PARENTS, L, off, root)
    assert W.shape == batch + (22, 3, 3) and X.shape == batch + (22, 3)
    np.testing.assert_allclose(W, Wr, rtol=0, atol=1e-12)
    np.testing.assert_allclose(X, Xr, rtol=0, atol=1e-12)


def test_canonical_numpy_broadcasts_the_root():
    rng = np.random.default_rng(1)
    L = _rotations(rng, (4, 22))
    W, X = forward_kinematics_np(L, np.array([0.1, 0.2, 0.9]))
    Wr, Xr = loop_fk(PARENTS, L, REST_OFFSETS, np.broadcast_to([0.1, 0.2, 0.9], (4, 3)))
    np.testing.assert_allclose(X, Xr, atol=1e-12)
    one = _rotations(rng, (22,))
    _, X1 = forward_kinematics_np(one, np.zeros((5, 3)))   # one pose, five root positions
    assert X1.shape == (5, 22, 3) and np.allclose(X1, X1[:1])


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("own_offsets", [False, True])
def test_canonical_torch_is_the_loop(dtype, tol, own_offsets):
    rng = np.random.default_rng(2)
    L = torch.as_tensor(_rotations(rng, (2, 5, 22)), dtype=dtype)
    root = torch.as_tensor(rng.normal(size=(5, 3)), dtype=dtype)          # broadcast over the first dimension
    off = torch.as_tensor(REST_OFFSETS * (rng.uniform(0.7, 1.3, size=(5, 22, 1)) if own_offsets else 1.0),
                          dtype=dtype)
    W, X = fk.forward_kinematics(L, root, off)
    Wr, Xr = loop_fk(PARENTS, L, off, root)
    assert W.dtype == dtype and W.shape == (2, 5, 22, 3, 3) and X.shape == (2, 5, 22, 3)
    assert (W - Wr).abs().max() < tol and (X - Xr).abs().max() < tol
    kp = fk.fk_keypoints(L, root, off)
    assert (kp[..., :22, :] - Xr).abs().max() < tol


def test_canonical_torch_gradients_are_the_loops():
    rng = np.random.default_rng(3)
    L = torch.as_tensor(_rotations(rng, (3, 22)), dtype=torch.float64).requires_grad_(True)
    root = torch.as_tensor(rng.normal(size=(3, 3)), dtype=torch.float64).requires_grad_(True)
    off = torch.as_tensor(REST_OFFSETS * rng.uniform(0.7, 1.3, size=(3, 22, 1))).requires_grad_(True)
    wW = torch.as_tensor(rng.normal(size=(3, 22, 3, 3)))
    wX = torch.as_tensor(rng.normal(size=(3, 22, 3)))

    def grads(fn):
        W, X = fn(L, root, off)
        return torch.autograd.grad((W * wW).sum() + (X * wX).sum(), (L, root, off))

    for a, b in zip(grads(fk.forward_kinematics), grads(lambda L, root, off: loop_fk(PARENTS, L, off, root))):
        assert (a - b).abs().max() < 1e-12
    small = [t[:1].detach().clone().requires_grad_(True) for t in (L, root, off)]
    assert torch.autograd.gradcheck(fk.forward_kinematics, small, eps=1e-6, atol=1e-7)


def _random_pose(rng, T, n):
    """Random rotations (T, n, 4) and small locations (T, n, 3) of ``n`` bones."""
    return matrix_to_quat(_rotations(rng, (T, n))), rng.normal(scale=0.05, size=(T, n, 3))


def test_rig_fk_is_blenders_pose(meta):
    rig, posed = meta
    rng = np.random.default_rng(4)
    T, n = 6, len(rig)
    quats, locs = _random_pose(rng, T, n)
    want = rig_loop(rig, quats, locs, posed)
    basis, loc = quat_to_matrix(quats[:, posed]), locs[:, posed]
    for W, X, B in (RigFK(rig, posed, None).numpy(basis, loc),
                    [t.numpy() for t in RigFK(rig, posed, torch.float64)(torch.as_tensor(basis), torch.as_tensor(loc))]):
        for i, b in enumerate(posed):
            np.testing.assert_allclose(W[:, i], want[b][0], atol=1e-12)
            np.testing.assert_allclose(X[:, i], want[b][1], atol=1e-12)
            np.testing.assert_allclose(B[:, i] @ basis[:, i], W[:, i], atol=1e-12)
    W32, X32, _ = RigFK(rig, posed, None)(torch.as_tensor(basis, dtype=torch.float32),
                                          torch.as_tensor(loc, dtype=torch.float32))
    assert np.abs(X32.numpy() - np.stack([want[b][1] for b in posed], 1)).max() < 1e-5


@pytest.mark.parametrize("frames", [1, 70])
def test_unposed_heads_are_blenders_pose(meta, frames):
    rig, posed = meta
    rng = np.random.default_rng(frames)
    n = len(rig)
    quats = matrix_to_quat(_rotations(rng, (frames, n)))
    locs = rng.normal(scale=0.05, size=(frames, n, 3))
    locs[:, ::3] = 0.0
    want = rig_loop(rig, quats, locs, range(n))
    W, X, _ = RigFK(rig, posed, None).numpy(quat_to_matrix(quats[:, posed]), locs[:, posed])
    unposed = np.setdiff1d(np.arange(n), posed)
    rest = RestFK(rig, {int(b): i for i, b in enumerate(posed)}, unposed)
    assert sorted(rest.bones) == list(unposed)
    heads = rest.numpy(W, X, quats, locs)
    for i, b in enumerate(rest.bones):
        np.testing.assert_allclose(heads[:, i], want[b][1], atol=1e-12)
    still = rest.numpy(W, X, quats, np.zeros_like(locs))   # (no location: no product for them)
    want0 = rig_loop(rig, quats, np.where(np.isin(np.arange(n), posed)[:, None], locs, 0.0), range(n))
    for i, b in enumerate(rest.bones):
        np.testing.assert_allclose(still[:, i], want0[b][1], atol=1e-12)


def test_pose_rig_is_blenders_pose(meta):
    rig, _ = meta
    rng = np.random.default_rng(6)
    T, n = 5, len(rig)
    quats, locs = _random_pose(rng, T, n)
    want = rig_loop(rig, quats, locs, range(n))
    W, X = pose_rig(rig, quats, locs, chunk=2)
    np.testing.assert_allclose(W, np.stack([want[b][0] for b in range(n)], 1), atol=1e-12)
    np.testing.assert_allclose(X, np.stack([want[b][1] for b in range(n)], 1), atol=1e-12)
    some = sorted({0} | set(rig.ancestors(40)) | {40})
    _, Xs = pose_rig(rig, quats, locs, bones=some, rotations=False)
    np.testing.assert_allclose(Xs[:, some], X[:, some], atol=1e-12)


def test_bvh_world_is_the_loop():
    """A BVH's tree in file order (depth first: not level by level), a root translated per frame,
    another joint with its own position channels."""
    rng = np.random.default_rng(7)
    parents = np.array([-1, 0, 1, 2, 1, 4, 0, 6, 7])
    T, J = 4, len(parents)
    trans = np.broadcast_to(rng.normal(size=(J, 3)), (T, J, 3)).copy()
    trans[:, 0] = rng.normal(size=(T, 3))
    trans[:, 4] += rng.normal(scale=0.1, size=(T, 3))
    rot = _rotations(rng, (T, J))
    d = BVHData("<test>", [f"j{i}" for i in range(J)], parents, trans[0].copy(), [()] * J, [], rot, trans,
                1 / 30, np.zeros((T, 0)))
    W, X = d.world()
    Wr, Xr = loop_fk(list(parents), rot, trans)
    np.testing.assert_allclose(W, Wr, atol=1e-12)
    np.testing.assert_allclose(X, Xr, atol=1e-12)


def test_level_fk_options_are_the_general_recurrence():
    """Rest rotations, locations, parent frames, ``base`` and the joint-major layout on a tree whose
    levels need a gather, against the recurrence written out joint by joint."""
    rng = np.random.default_rng(8)
    parents = [-1, -1, 0, 1, 0, 2, 3, 2, 4, 1]
    n, T = len(parents), 3
    rot, rest = _rotations(rng, (T, n)), _rotations(rng, (n,))
    off, loc = rng.normal(size=(n, 3)), rng.normal(size=(T, n, 3))
    Wf, Xf = _rotations(rng, (T, 2)), rng.normal(size=(T, 2, 3))
    B, W, X = {}, {}, {}
    for j, p in enumerate(parents):   # (parents come first here)
        Wp, Xp = (Wf[:, j], Xf[:, j]) if p < 0 else (W[p], X[p])
        B[j] = Wp @ rest[j]
        W[j] = B[j] @ rot[:, j]
        X[j] = Xp + Wp @ off[j] + (B[j] @ loc[:, j, :, None])[..., 0]
    tree = Tree(parents)
    assert tree.order is not None and any(spec and spec[0] == "index" for _, _, spec in tree.levels)
    for out in (level_fk(tree, rot, off, rest_rot=rest, loc=loc, parent_frames=(Wf, Xf), base=True),
                [torch.as_tensor(a).numpy() for a in level_fk(tree, *(torch.as_tensor(a) for a in (rot, off)),
                 rest_rot=torch.as_tensor(rest), loc=torch.as_tensor(loc),
                 parent_frames=(torch.as_tensor(Wf), torch.as_tensor(Xf)), base=True)]):
        for got, want in zip(out, (W, X, B)):
            np.testing.assert_allclose(got, np.stack([want[j] for j in range(n)], 1), atol=1e-12)
    Wj, Xj = level_fk(tree, rot, off, rest_rot=rest, loc=loc, parent_frames=(Wf, Xf), joint_major=True)
    np.testing.assert_allclose(np.swapaxes(Xj, 0, 1), np.stack([X[j] for j in range(n)], 1), atol=1e-12)
    _, Xn = level_fk(tree, None, off, rest_rot=rest, loc=loc, parent_frames=(Wf, Xf))   # heads need no own rotation
    roots_only = [j for j, p in enumerate(parents) if p < 0]
    np.testing.assert_allclose(Xn[:, roots_only], np.stack([X[j] for j in roots_only], 1), atol=1e-12)


def test_many_frames_take_the_per_joint_products():
    """numpy with many frames multiplies by each joint's constants over all its frames at once: the
    same poses as a few frames at a time."""
    rng = np.random.default_rng(9)
    L, root = _rotations(rng, (300, 22)), rng.normal(size=(300, 3))
    W, X = forward_kinematics_np(L, root)
    Wr, Xr = loop_fk(PARENTS, L, REST_OFFSETS, root)
    np.testing.assert_allclose(W, Wr, atol=1e-12)
    np.testing.assert_allclose(X, Xr, atol=1e-12)
    assert TREE.n == 22
