"""A source whose arms' (or legs') left and right are swapped all clip long (a mislabelled skeleton, a
converter's slip): found, and swapped back onto another rig; onto its own skeleton the file is followed."""

import dataclasses

import numpy as np
import pytest

import rigs
from _pkg import pkg
from walks import walk_on as _walk_on

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS, SPARSE_EFFECTORS  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.pipeline.prepare import SIDE_PARTS, swap_sides, swapped_parts, swapped_sides  # noqa: E402
from neural_ik.readers.source_rig import SourceRig  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import target_keypoints  # noqa: E402

FPS = 30.0


def _valid(kp):
    return np.isfinite(kp).all(-1)


def _heads(job, names):
    res = job.full_result()
    m = job.mapping.entries
    return res.heads[:, [job.full_rig.index(m[n]) for n in names]]


def test_the_swapped_chain_is_named():
    """Arms swapped on every frame read "arms" (the feet point the hips' way), legs "legs"; a walk as it
    is, a flip of a few frames (a pose estimator's), effectors alone and feet without toes say nothing."""
    kp = walk_keypoints(2.0, FPS)
    assert swapped_sides(kp, _valid(kp)) is None
    arms = swap_sides(kp, "arms")
    assert swapped_sides(arms, _valid(arms)) == "arms"
    legs = swap_sides(kp, "legs")
    assert swapped_sides(legs, _valid(legs)) == "legs"
    few = kp.copy()
    few[10:22] = arms[10:22]
    assert swapped_sides(few, _valid(few)) is None
    no_toes = arms.copy()
    no_toes[:, [KEYPOINTS.index("toe_l"), KEYPOINTS.index("toe_r")]] = np.nan
    assert swapped_sides(no_toes, _valid(no_toes)) is None
    eff = np.full_like(arms, np.nan)
    keep = [KEYPOINTS.index(n) for n in SPARSE_EFFECTORS]
    eff[:, keep] = arms[:, keep]
    assert swapped_sides(eff, _valid(eff)) is None


@pytest.mark.parametrize("clavicles", [True, False])
def test_swapped_arms_are_baked_as_the_body_moves(clavicles):
    """Onto the meta-rig, a walk whose arms' sides are swapped bakes as the walk itself: the rig's left
    hand where the body's left hand is (before: on its right, the chest turned round), with a warning.
    The clavicles' heads are swapped with the arms (names swapped) or stay on the hips' sides (the
    clavicles turned the arms through the body): either way they come back to their sides."""
    rig = rigs.rigify_metarig_description()
    kp = walk_keypoints(2.0, FPS)
    parts = SIDE_PARTS["arms"] if clavicles else tuple(p for p in SIDE_PARTS["arms"] if p != "clavicle")
    assert swapped_parts(swap_sides(kp, "arms", parts), _valid(kp), "arms") == parts
    jobs = []
    for src in (kp, swap_sides(kp, "arms", parts)):
        job = RigBake(rig, auto_map(rig), src, None, FPS, BakeOptions(device="cpu"))
        job.run()
        jobs.append(job)
    hands = [_heads(j, ("hand_l", "hand_r", "upperarm_l", "clavicle_l")) for j in jobs]
    err = np.linalg.norm(hands[1] - hands[0], axis=-1) * 1000.0
    assert err.max() < 5.0, err.max()
    apart = np.linalg.norm(hands[0][:, 0] - hands[0][:, 1], axis=-1).min() * 1000.0
    assert apart > 100.0, apart     # (the test can fail: the hands are far apart)
    said = [w for w in jobs[1].warnings if "swapped back" in w]
    assert len(said) == 1 and "arms" in said[0], jobs[1].warnings
    assert not any("faces away" in w for w in jobs[1].warnings)


def test_onto_its_own_skeleton_the_file_is_followed():
    """A skeleton whose arm bones' sides are swapped in its mapping (its left arm bones on the body's
    right) baked back onto itself comes back as it was; onto the meta-rig the sides are swapped back
    and the skeleton's rotations left unused."""
    rig = rigs.humanoid("mixamo")
    plan, mapping, truth = _walk_on(rig)
    entries = dict(mapping.entries)
    for part in SIDE_PARTS["arms"]:
        if f"{part}_l" in entries and f"{part}_r" in entries:
            entries[f"{part}_l"], entries[f"{part}_r"] = entries[f"{part}_r"], entries[f"{part}_l"]
    swapped = dataclasses.replace(mapping, entries=entries)
    kp = swap_sides(target_keypoints(plan, truth.quaternions, truth.locations) @ plan.K.T, "arms")
    assert swapped_sides(kp, _valid(kp)) == "arms"
    src = SourceRig(rig, swapped, truth.quaternions, truth.locations)
    own = RigBake(rig, mapping, kp, None, FPS, BakeOptions(device="cpu"), source_rig=src)
    own.run()
    assert any("follows the file" in w for w in own.warnings), own.warnings
    b = [rig.index(n) for n in mapping.entries.values() if rig.has(n)]
    err = np.linalg.norm(own.full_result().heads[:, b] - truth.heads[:, b], axis=-1) * 1000.0
    assert err.max() < 1.0, err.max()
    meta = rigs.rigify_metarig_description()
    other = RigBake(meta, auto_map(meta), kp, None, FPS, BakeOptions(device="cpu"), source_rig=src)
    assert other.source_rig is None
    assert any("swapped back; its skeleton's rotations are not used" in w for w in other.warnings), other.warnings
