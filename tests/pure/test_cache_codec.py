"""The training cache's compact motion storage (training/cache_codec.py) and the older 6D float16 caches."""

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _pkg import pkg  # noqa: E402

pkg()
import source_fixtures as sf  # noqa: E402
from neural_ik.model.rotations import matrix_to_rot6d  # noqa: E402
from neural_ik.model.rotations_np import axis_angle_to_matrix  # noqa: E402
from training import cache as C  # noqa: E402
from training import cache_codec as K  # noqa: E402


def _angle_deg(A, B):
    c = (np.einsum("...ij,...ij->...", A, B) - 1.0) / 2.0
    return np.degrees(np.arccos(np.clip(c, -1.0, 1.0)))


def _motion():
    """Two clips: the walk, and a joint turning through half a turn and beyond (the rotation vector flips)."""
    walk, walk_root = sf.walk_rotations(40)
    T = 30
    turn = np.broadcast_to(np.eye(3), (T, 22, 3, 3)).copy()
    ang = np.linspace(2.9, 3.5, T)
    turn[:, 0] = axis_angle_to_matrix(np.stack([np.zeros(T), np.zeros(T), ang], -1))
    turn[:, 5] = axis_angle_to_matrix(np.stack([ang, 0.3 * np.ones(T), np.zeros(T)], -1))
    root = np.c_[np.linspace(-40.0, 40.0, T), np.zeros(T), np.full(T, 0.9)]
    L = np.concatenate([walk, turn])
    R = np.concatenate([walk_root, root])
    clip = np.r_[np.zeros(len(walk), dtype=np.int16), np.ones(T, dtype=np.int16)]
    return L, R, clip


def test_round_trip_is_within_a_twentieth_of_a_degree_and_a_tenth_of_a_millimetre():
    L, R, clip = _motion()
    z = K.encode(K.quantise_rotations(L), K.quantise_root(R), clip)
    L2, R2 = K.decode(z, clip)
    assert L2.dtype == np.float32 and L2.shape == L.shape
    assert _angle_deg(L2.astype(np.float64), L).max() < 0.05
    assert np.abs(R2 - R).max() < 1e-4


def test_smooth_motion_takes_far_fewer_bytes_than_float16_6d():
    L, R, clip = sf.walk_rotations(300)[0], sf.walk_rotations(300)[1], np.zeros(300, dtype=np.int16)
    z = K.encode(K.quantise_rotations(L), K.quantise_root(R), clip)
    packed = z["rotq"].nbytes + z["rootq"].nbytes
    assert packed < 0.5 * (L.shape[0] * 22 * 6 * 2), packed


def test_a_cache_of_the_earlier_6d_format_is_still_read(tmp_path):
    L, R, clip = _motion()
    n = int(clip.max()) + 1
    path = tmp_path / "old.npz"
    np.savez_compressed(
        path, rot6=matrix_to_rot6d(torch.as_tensor(L, dtype=torch.float32)).numpy().astype(np.float16),
        root=R.astype(np.float32), clip=clip, offsets=np.zeros((n, 22, 3), np.float32),
        end_offsets=np.zeros((n, 10, 3), np.float32), has_kp=np.ones((n, 32), bool), names=np.array(["a", "b"]),
        sources=np.array(["x", "x"]), fps=np.full(n, 30.0, np.float32), info=json.dumps({"clips": n}))
    z = C.load_cache(path)
    assert _angle_deg(z["local_rot"].astype(np.float64), L).max() < 0.2
    np.testing.assert_allclose(z["root"], R, atol=1e-5)
