"""A bake holds the posed bones' columns only (retarget/posed.py), and bakes as the whole rig would.

Rigify's meta-rig has 159 bones of which about thirty move: a long clip's
arrays held a column for each. The bake now plans the posed bones (those a
stage can turn, with their ancestors); the bones left out are neither keyed
nor moved, so a bake onto the meta-rig with its face and finger bones cut
off keys the same values.
"""

import numpy as np
import pytest

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.pipeline.preview import preview_pose  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.posed import posed_bones, posed_plan  # noqa: E402
from neural_ik.retarget.solve import plan_retarget, pose_rig  # noqa: E402


class _Exact:
    """A solver giving the walk's own joint rotations (the network's start is not what is tested)."""

    def __init__(self):
        from neural_ik.cli.demo_motion import walk_rotations
        from neural_ik.model.result import SolveResult
        from neural_ik.model.skeleton import CANONICAL

        self.make = lambda kp: SolveResult(walk_rotations(len(kp) / 30.0, 30.0)[:len(kp)], kp[:, 0].copy(),
                                           kp.copy(), CANONICAL, np.zeros(len(kp)), "dense", {})

    def solve(self, kp, *args, **kwargs):
        return self.make(np.asarray(kp, dtype=np.float64))


def _bake(rig, kp):
    job = RigBake(rig, auto_map(rig), kp, None, 30.0, BakeOptions(smooth="none"), solver=_Exact())
    job.run()
    return job


def test_posed_bones_are_closed_under_parents_and_renumbered():
    rig = rigs.rigify_metarig_description()
    plan = plan_retarget(rig, auto_map(rig))
    keep = posed_bones(plan)
    assert 20 < len(keep) < len(rig) // 2, len(keep)
    assert all(rig.parents[b] < 0 or rig.parents[b] in set(keep) for b in keep)
    # a mapped bone's children stay: the end points (head top, hand and toe ends) are read at them
    mapped = [rig.index(b) for b in plan.mapping.entries.values()]
    assert {c for b in mapped for c in rig.children(b)} <= set(keep)
    sub, new = posed_plan(plan)
    assert sub.bone_names == [rig.names[b] for b in keep]
    assert sub.rig.names[sub.root] == rig.names[plan.root]
    for b, d in plan.drivers.items():
        assert sub.drivers[int(new[b])] == d
    # the sub-rig's rest poses the kept bones where the whole rig does
    B = len(rig)
    q = np.tile([1.0, 0.0, 0.0, 0.0], (1, B, 1))
    _, heads = pose_rig(rig, q, np.zeros((1, B, 3)), rotations=False)
    _, sub_heads = pose_rig(sub.rig, q[:, keep], np.zeros((1, len(keep), 3)), rotations=False)
    np.testing.assert_allclose(sub_heads, heads[:, keep], atol=1e-12)
    assert posed_plan(plan)[0] is sub     # (Live Solve asks again on every drag step)


RIGS = {
    "rigify meta-rig": rigs.rigify_metarig_description,
    # end sites, fingers and joint orients: a BVH skeleton's end bones give its hands' and head's turn
    "bvh with ends and fingers": lambda: rigs.humanoid("cmu", axes="world", fingers=True, ends=True),
    "mixamo with twist and ik bones": lambda: rigs.humanoid("mixamo", pose="A", twist=True, ik=True, fingers=True),
}


@pytest.mark.parametrize("shape", sorted(RIGS))
def test_a_bake_of_the_posed_bones_keys_what_a_bake_of_every_bone_keys(monkeypatch, shape):
    rig = RIGS[shape]()
    kp = walk_keypoints(1.0, 30.0)[:24]
    job = _bake(rig, kp)
    res = job.result
    assert res.quaternions.shape[1] <= len(rig)          # the posed bones' columns only
    if shape == "rigify meta-rig":
        assert res.quaternions.shape[1] < len(rig) // 2
    keep = [rig.index(n) for n in res.bone_names]
    import neural_ik.retarget.posed as posed
    monkeypatch.setattr(posed, "posed_plan", lambda plan, *a: (plan, np.arange(len(plan.rig))))
    whole = _bake(rig, kp)
    assert whole.result.bone_names == rig.names
    np.testing.assert_allclose(res.quaternions, whole.result.quaternions[:, keep], atol=1e-9)
    np.testing.assert_allclose(res.heads, whole.result.heads[:, keep], atol=1e-9)
    np.testing.assert_allclose(job.full_result().heads, whole.result.heads, atol=1e-9)
    assert job.figures.joint_error_mm == whole.figures.joint_error_mm
    full = job.full_result()
    assert full.bone_names == rig.names and full.quaternions.shape[1] == len(rig)
    left_out = np.setdiff1d(np.arange(len(rig)), keep)
    np.testing.assert_allclose(full.quaternions[:, left_out], np.tile([1.0, 0, 0, 0], (24, len(left_out), 1)))
    assert not full.driven[left_out].any()
    if shape != "rigify meta-rig":
        return
    # a finger follows its hand: posed anew from the whole rig
    hand = res.bone_names.index(job.mapping.entries["hand_l"])
    finger = rig.index("f_index.01.L")
    moved = np.linalg.norm(full.heads[:, finger] - full.heads[:, rig.index(rig.names[keep[hand]])], axis=-1)
    rest = np.linalg.norm(rig.head[finger] - rig.head[keep[hand]])
    np.testing.assert_allclose(moved, rest, atol=1e-9)
    assert np.ptp(full.heads[:, finger, 0]) > 0.05


def test_the_preview_draws_every_bone_of_the_rig():
    rig = rigs.rigify_metarig_description()
    job = _bake(rig, walk_keypoints(1.0, 30.0)[:24])
    pose = preview_pose(job, 3)
    assert np.asarray(pose.heads).shape == (3, len(rig), 3)
    np.testing.assert_allclose(np.asarray(pose.heads), job.full_result().heads[pose.frames], atol=1e-9)
    assert np.isfinite(np.asarray(pose.keypoints)[:, KEYPOINTS.index("pelvis")]).all()
