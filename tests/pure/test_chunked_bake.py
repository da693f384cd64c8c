"""Bounded memory (issue 12 item 3): a bake computed in chunks of frames equals the bake in one chunk.

The per-frame stages (the source skeleton's pose, its rotations carried onto
the rig, the figures' poses, Euler conversion, quaternion sign continuity)
run ``chunk_frames`` frames at a time; a tiny chunk (7 frames, so every
chunk boundary is crossed many times, continuity included) must give the
rotations, locations, heads and figures of one chunk up to float noise.
"""

import numpy as np
import pytest

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations  # noqa: E402
from neural_ik.model.rotations_np import axis_angle_to_matrix, matrix_to_quat  # noqa: E402
from neural_ik.model.skeleton import CANONICAL  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.readers.source_rig import SourceRig  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import (frame_chunks, plan_retarget, pose_rig, quat_continuity,  # noqa: E402
                                      quats_to_euler_continuous, retarget, target_keypoints)

TINY, WHOLE = 7, 10 ** 9


def _clip(rig, seconds=4.0, fps=30.0, spin=True):
    """The demo walk on ``rig`` (turning about the vertical when ``spin``): plan, mapping, truth, keypoints."""
    mapping = auto_map(rig)
    plan = plan_retarget(rig, mapping)
    local = walk_rotations(seconds, fps).copy()
    root = walk_keypoints(seconds, fps)[:, 0]
    if spin:   # whole turns: Euler angles wrap and quaternion signs flip inside the clip
        t = np.arange(len(local)) / fps
        turn = axis_angle_to_matrix(np.outer(1.7 * t, [0.0, 0.0, 1.0]))
        local[:, 0] = turn @ local[:, 0]
    truth = retarget(plan, local, root, CANONICAL)
    kp = target_keypoints(plan, truth.quaternions, truth.locations) @ plan.K.T
    return plan, mapping, truth, kp


def _bake(rig, mapping, kp, chunk, **kw):
    job = RigBake(rig, mapping, kp, None, 30.0, BakeOptions(**kw.pop("options", {})), chunk_frames=chunk, **kw)
    job.run()
    return job


def _same(a, b, atol=1e-9):
    ra, rb = a.result, b.result
    np.testing.assert_allclose(ra.quaternions, rb.quaternions, atol=atol, rtol=0)
    np.testing.assert_allclose(ra.locations, rb.locations, atol=atol, rtol=0)
    np.testing.assert_allclose(ra.heads, rb.heads, atol=atol, rtol=0)
    np.testing.assert_array_equal(ra.driven, rb.driven)
    fa, fb = a.figures, b.figures
    for name in ("floor_error_cm", "bone_direction_error_deg", "jitter", "foot_sliding_mm", "upright_share"):
        np.testing.assert_allclose(getattr(fa, name), getattr(fb, name), atol=1e-6, rtol=1e-9, err_msg=name)
    np.testing.assert_allclose(fa.joint_error_mm, fb.joint_error_mm, atol=1e-6)
    assert fa.knees_backwards == fb.knees_backwards
    assert a.warnings == b.warnings


def test_frame_chunks_cover_every_frame_once():
    for n, c in ((1, 7), (7, 7), (8, 7), (100, 7), (100, 1), (5, 10 ** 9)):
        got = frame_chunks(n, c)
        assert got[0][0] == 0 and got[-1][1] == n
        assert all(b - a <= c and b > a for a, b in got)
        assert all(got[i][1] == got[i + 1][0] for i in range(len(got) - 1))


@pytest.mark.parametrize("source", ["own skeleton", "other skeleton"])
def test_chunked_bake_of_a_source_skeleton_equals_one_chunk(source):
    """A BVH-style source (its skeleton's motion) onto its own skeleton (rotations copied) and onto
    another (the dense rig-space solve runs): 7-frame chunks give the one-chunk bake."""
    src_rig = rigs.humanoid("mixamo", pose="T")
    plan, mapping, truth, kp = _clip(src_rig)
    src = SourceRig(src_rig, mapping, truth.quaternions, truth.locations)
    if source == "own skeleton":
        target, tmap = src_rig, mapping
    else:
        target = rigs.humanoid("rigify_deform", pose="A", spine=4, proportions=1.15)
        tmap = auto_map(target)
    jobs = [_bake(target, tmap, kp, c, source_rig=src) for c in (TINY, WHOLE)]
    _same(*jobs)
    if source == "own skeleton":   # (and the bake is the clip)
        b = [target.index(x) for x in mapping.entries.values() if target.has(x)]
        assert np.abs(jobs[0].full_result().heads[:, b] - truth.heads[:, b]).max() < 1e-3


def test_chunked_bake_with_smoothing_and_in_place_equals_one_chunk():
    """Whole-clip stages (rotation smoothing, foot lock) stay whole-clip: still the same bake."""
    src_rig = rigs.humanoid("unreal", pose="A", axes="random")
    plan, mapping, truth, kp = _clip(src_rig, seconds=3.0)
    src = SourceRig(src_rig, mapping, truth.quaternions, truth.locations)
    target = rigs.humanoid("cmu", pose="T", axes="world")
    opts = dict(smooth="butter", smooth_target="both", in_place=True)
    jobs = [_bake(target, auto_map(target), kp, c, source_rig=src, options=opts) for c in (TINY, WHOLE)]
    _same(*jobs)


def test_chunked_per_frame_functions_equal_whole_clip():
    rig = rigs.humanoid("unreal", pose="A", axes="random")
    plan, mapping, truth, _ = _clip(rig)
    q, loc = truth.quaternions, truth.locations
    for bones in (None, sorted({0} | {rig.index(mapping.entries["hand_l"])}
                               | set(rig.ancestors(rig.index(mapping.entries["hand_l"]))))):
        W1, X1 = pose_rig(rig, q, loc, bones=bones, chunk=TINY)
        W2, X2 = pose_rig(rig, q, loc, bones=bones, chunk=WHOLE)
        sel = slice(None) if bones is None else bones
        # (matrix products of other batch sizes may round the last bit otherwise)
        np.testing.assert_allclose(W1[:, sel], W2[:, sel], atol=1e-12, rtol=0)
        np.testing.assert_allclose(X1[:, sel], X2[:, sel], atol=1e-12, rtol=0)
    np.testing.assert_allclose(target_keypoints(plan, q, loc, chunk=TINY), target_keypoints(plan, q, loc),
                               atol=1e-12, rtol=0)
    # signs flipped at random frames: continuity repairs them the same way across chunk boundaries
    rng = np.random.default_rng(3)
    flipped = q * np.where(rng.random(q.shape[:2]) < 0.3, -1.0, 1.0)[..., None]
    whole = quat_continuity(flipped, chunk=WHOLE)
    tiny = quat_continuity(flipped, chunk=TINY)
    inplace = flipped.copy()
    quat_continuity(inplace, out=inplace, chunk=TINY)
    np.testing.assert_array_equal(tiny, whole)
    np.testing.assert_array_equal(inplace, whole)
    assert (np.sum(whole[1:] * whole[:-1], -1) >= 0).all()
    # Eulers of a spinning root (wrapping past pi many times), every order
    spin = matrix_to_quat(axis_angle_to_matrix(np.outer(np.linspace(0, 20.0, len(q)), [0.3, 0.2, 0.93])))
    qs = np.stack([spin, q[:, 1]], axis=1)
    for order in ("XYZ", "ZXY", "YZX"):
        e_tiny = quats_to_euler_continuous(qs, order, chunk=TINY)
        e_whole = quats_to_euler_continuous(qs, order, chunk=WHOLE)
        np.testing.assert_allclose(e_tiny, e_whole, atol=1e-9, rtol=0)
        assert np.abs(np.diff(e_whole, axis=0)).max() < np.pi    # continuous: no 2 pi jumps


def test_release_keeps_what_is_keyed():
    """After the figures, a bake drops its whole-clip intermediates and keeps the result to key."""
    src_rig = rigs.humanoid("mixamo", pose="T")
    plan, mapping, truth, kp = _clip(src_rig, seconds=1.0, spin=False)
    src = SourceRig(src_rig, mapping, truth.quaternions, truth.locations)
    target = rigs.humanoid("rigify_deform", pose="A", spine=4, proportions=1.15)
    job = _bake(target, auto_map(target), kp, None, source_rig=src)
    quats = job.full_result().quaternions.copy()
    assert job.solved.local_rot is None          # the fit carried it onto the rig
    assert job.source_rig.num_frames == 0 and job.source_rig.rig is src_rig   # its rest stays
    job.release()
    for name in ("kp_body", "src_m", "targets", "residual", "initial"):
        assert getattr(job, name) is None, name
    np.testing.assert_array_equal(job.full_result().quaternions, quats)
    assert np.isfinite(job.figures.bone_direction_error_deg)
    with pytest.raises(RuntimeError, match="solve"):
        job.fit()
