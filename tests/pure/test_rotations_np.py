"""The numpy rotation helpers against scipy and against plain stacked products.

``euler_to_matrix`` composes closed forms entry by entry, ``quat_to_matrix``
folds the normalisation into one factor and ``matmul_each`` runs one 2-D
product per stack entry: each must give what the textbook formula gives.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model.rotations_np import (  # noqa: E402
    QUAT_BLOCK, euler_to_matrix, matmul_each, matrix_to_quat, quat_to_matrix,
)

ORDERS = ["XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX", "XYX", "ZXZ", "ZX", "YZ", "X", "Y", "Z"]


@pytest.mark.parametrize("order", ORDERS)
def test_euler_to_matrix_is_scipys_intrinsic_rotation(order):
    rng = np.random.default_rng(len(order) * 7 + ord(order[0]))
    ang = rng.uniform(-180.0, 180.0, size=(5, 4, len(order)))
    got = euler_to_matrix(ang, order)
    want = Rotation.from_euler(order.upper(), ang.reshape(-1, len(order)), degrees=True).as_matrix()
    assert got.shape == (5, 4, 3, 3)
    np.testing.assert_allclose(got.reshape(-1, 3, 3), want, atol=1e-12)
    # radians, one angle set, and the product of the axis rotations in order
    one = euler_to_matrix(np.deg2rad(ang[2, 1]), order, degrees=False)
    np.testing.assert_allclose(one, got[2, 1], atol=1e-12)


def test_euler_to_matrix_without_axes_is_the_identity():
    out = euler_to_matrix(np.zeros((3, 0)), "")
    np.testing.assert_array_equal(out, np.broadcast_to(np.eye(3), (3, 3, 3)))


def test_quat_to_matrix_normalises_and_round_trips():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(200, 4)) * rng.uniform(0.1, 5.0, size=(200, 1))   # not unit
    m = quat_to_matrix(q)
    want = Rotation.from_quat(q[:, [1, 2, 3, 0]]).as_matrix()   # scipy: (x, y, z, w), normalised there
    np.testing.assert_allclose(m, want, atol=1e-12)
    np.testing.assert_allclose(m @ np.swapaxes(m, -1, -2), np.broadcast_to(np.eye(3), m.shape), atol=1e-12)
    back = matrix_to_quat(m)
    unit = q / np.linalg.norm(q, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.abs((back * unit).sum(-1)), 1.0, atol=1e-12)
    np.testing.assert_allclose(quat_to_matrix(np.array([1.0, 0, 0, 0])), np.eye(3), atol=0)


def test_quat_to_matrix_in_blocks_is_each_alone():
    """More quaternions than one block (and a last, shorter block, and a non-contiguous input):
    every matrix equals the one of its quaternion alone, bit for bit."""
    rng = np.random.default_rng(4)
    q = rng.normal(size=(5, 2 * QUAT_BLOCK + 7, 4))[:, ::2]
    m = quat_to_matrix(q)
    assert m.shape == q.shape[:-1] + (3, 3)
    for i, j in [(0, 0), (2, QUAT_BLOCK // 2 - 1), (3, QUAT_BLOCK // 2), (4, q.shape[1] - 1)]:
        assert np.array_equal(m[i, j], quat_to_matrix(q[i, j]))


@pytest.mark.parametrize("rows", [1, 5, 300])   # the stacked product below 64 rows, one 2-D product per entry above
def test_matmul_each_is_the_stacked_product(rows):
    rng = np.random.default_rng(rows)
    A = rng.normal(size=(4, rows, 3, 3))
    C = rng.normal(size=(4, 3, 3))
    np.testing.assert_allclose(matmul_each(A, C), A @ C[:, None], atol=1e-12)
    v = rng.normal(size=(4, 3, 1))   # matrix times one vector per entry
    np.testing.assert_allclose(matmul_each(A, v), A @ v[:, None], atol=1e-12)
    assert matmul_each(A[:0], C[:0]).shape == (0, rows, 3, 3)


def test_matrix_to_quat_is_scipys_with_w_not_negative():
    """Each matrix by the best conditioned of the four formulas (chosen by comparisons, the first of
    equal candidates as ``argmax`` takes it): half-turns, where ``w`` is 0 and one formula divides
    by it, and turns that tie two candidates among them."""
    rng = np.random.default_rng(5)
    q = rng.normal(size=(3, 400, 4))
    half = np.zeros((3, 4))
    half[:, 1:] = np.eye(3)                                   # half-turns about x, y, z
    ties = np.array([[0.5, 0.5, 0.5, 0.5], [0.0, 0.5 ** 0.5, 0.5 ** 0.5, 0.0], [0.5 ** 0.5, 0.0, 0.0, 0.5 ** 0.5]])
    q[0, :6] = np.concatenate([half, ties])
    m = quat_to_matrix(q)
    got = matrix_to_quat(m)
    assert got.shape == (3, 400, 4)
    want = Rotation.from_matrix(m.reshape(-1, 3, 3)).as_quat()[:, [3, 0, 1, 2]]
    want *= np.where(want[:, :1] < 0, -1.0, 1.0)
    flat = got.reshape(-1, 4)
    assert (flat[:, 0] >= 0).all()
    np.testing.assert_allclose(np.linalg.norm(flat, axis=-1), 1.0, atol=1e-15)
    # (with w = 0 both signs are the same turn)
    same = np.minimum(np.abs(flat - want).max(-1), np.abs(flat + want).max(-1))
    assert same.max() < 1e-12, same.max()
    np.testing.assert_allclose(quat_to_matrix(got), m, atol=1e-12)


def test_vector_norm_is_numpys_norm_to_the_bit():
    """vector_norm stands in for np.linalg.norm(v, axis=-1) on the bake's arrays: same values, shapes, types."""
    from neural_ik.model.rotations_np import vector_norm

    rng = np.random.default_rng(3)
    for shape in [(300, 32, 3), (5, 4), (7, 2), (3,), (10, 1), (4, 0)]:
        v = rng.normal(size=shape) * 10.0 ** rng.uniform(-8, 8, size=shape)
        ref = np.linalg.norm(v, axis=-1)
        got = vector_norm(v)
        assert np.array_equal(got, ref) and np.shape(got) == np.shape(ref) and type(got) is type(ref)
        assert np.array_equal(vector_norm(v, keepdims=True), np.linalg.norm(v, axis=-1, keepdims=True))
    odd = np.array([[np.nan, 1.0, 2.0], [np.inf, 0.0, 0.0], [-0.0, 0.0, 0.0]])
    assert np.array_equal(vector_norm(odd), np.linalg.norm(odd, axis=-1), equal_nan=True)


def test_matrix_to_quat_matches_the_four_formulas_in_each_case():
    """Each of the four cases (w, x, y or z largest) gives the unit quaternion with w >= 0 of its matrix."""
    from neural_ik.model.rotations_np import matrix_to_quat, quat_to_matrix

    rng = np.random.default_rng(4)
    q = rng.normal(size=(4000, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    q[q[:, 0] < 0] *= -1.0
    got = matrix_to_quat(quat_to_matrix(q))
    largest = np.argmax(np.abs(q), axis=-1)
    for k in range(4):   # every case is exercised
        assert (largest == k).sum() > 500
        np.testing.assert_allclose(got[largest == k], q[largest == k], atol=1e-12)
    assert (got[:, 0] >= 0).all()


def test_a_few_matrices_take_the_block_formulas_number_for_number():
    """matrix_to_quat's Python-float path (up to FEW_MATRICES) gives the block path's very numbers:
    any turn, half turns about each axis (the other formulas), a non-finite matrix, and both sides
    of the size where it switches."""
    from neural_ik.model import rotations_np as RN

    rng = np.random.default_rng(3)
    m = RN.axis_angle_to_matrix(rng.normal(size=(300, 3)) * 2.0)
    for k, axis in enumerate(np.eye(3)):
        m[10 + k] = RN.axis_angle_to_matrix(np.pi * axis)
    m[20] = np.nan
    np.testing.assert_array_equal(RN._matrix_to_quat_few(m), RN._matrix_to_quat_block(m))
    for n in (1, RN.FEW_MATRICES, RN.FEW_MATRICES + 1):
        np.testing.assert_array_equal(RN.matrix_to_quat(m[:n]), RN._matrix_to_quat_block(m[:n]))
    assert RN.matrix_to_quat(m[0]).shape == (4,) and RN.matrix_to_quat(m[:6].reshape(2, 3, 3, 3)).shape == (2, 3, 4)
