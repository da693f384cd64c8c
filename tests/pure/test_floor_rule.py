"""The floor rule (issue 32): a file that stands on its own floor keeps its heights; a floating or
hips-origin one is moved; a rig standing on its floor at rest gets the source's contacts at its own
rest clearance, whatever height the source's joints had above the source's floor."""

import numpy as np
import pytest

import rigs
from _pkg import pkg
from walks import walk_on as _walk_on

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.pipeline.targets import foot_points, rest_floor_gap  # noqa: E402
from neural_ik.readers import read_keypoints  # noqa: E402
from neural_ik.readers.base import FLOOR_KEPT, contact_floor  # noqa: E402
from neural_ik.readers.source_rig import SourceRig  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402
from neural_ik.retarget.solve import plan_retarget, target_keypoints  # noqa: E402

FPS = 30.0
UP = np.array([0.0, 0.0, 1.0])


def _walk():
    kp = walk_keypoints(4.0, FPS)
    floor = contact_floor(kp, None, FPS)
    assert floor is not None and abs(floor) < 0.01, floor    # (the demo walk stands on z = 0)
    return kp


def _npz(tmp_path, kp, name="walk.npz"):
    path = tmp_path / name
    np.savez(path, positions=kp, joint_names=np.array(KEYPOINTS), fps=FPS, units="m", up_axis="Z")
    return path


def test_a_clip_standing_on_its_floor_keeps_its_heights(tmp_path):
    """Mocap joints sit a few cm above the floor they were captured on: the file's heights are kept
    (before: the lowest foot point was put on z = 0, and a round trip onto the source's own skeleton
    landed that far off)."""
    kp = _walk() + np.array([0.0, 0.0, 0.04])
    assert 0.04 < FLOOR_KEPT
    clip = read_keypoints(_npz(tmp_path, kp))
    assert clip.floor_shift == 0.0
    np.testing.assert_allclose(clip.positions, kp, atol=1e-9)
    assert not any("grounded" in w for w in clip.warnings), clip.warnings


def test_a_toe_through_the_floor_on_a_few_frames_does_not_move_the_clip(tmp_path):
    """One marker dipping 15 cm through the floor on 2% of the frames (before: the 1st percentile of
    the lowest foot point was the floor, and the whole clip rose 15 cm)."""
    kp = _walk()
    bad = np.arange(0, len(kp), 50)
    kp[bad, KEYPOINTS.index("toe_tip_l"), 2] -= 0.15
    clip = read_keypoints(_npz(tmp_path, kp))
    assert clip.floor_shift == 0.0, clip.warnings


@pytest.mark.parametrize("offset", [-0.95, 0.3])
def test_a_hips_origin_or_floating_clip_is_put_on_the_floor(tmp_path, offset):
    """A pose estimator's hips-origin clip (the feet a metre under z = 0) or a clip floating 30 cm:
    moved so that its feet stand on the floor where they touch it, and the message says why."""
    kp = _walk()
    clip = read_keypoints(_npz(tmp_path, kp + np.array([0.0, 0.0, offset])))
    assert clip.floor_shift == pytest.approx(-offset, abs=0.01)
    assert abs(contact_floor(clip.positions, None, FPS)) < 0.005
    msg = next(w for w in clip.warnings if "grounded" in w)
    assert "floating or hips-origin" in msg and f"moved {clip.floor_shift * 100:+.1f} cm" in msg, msg


def test_a_standing_rig_puts_the_sources_contacts_at_its_rest_clearance():
    """A skeleton whose lowest foot joints stand 4 cm above its floor where its feet are planted (the
    CMU database's toe joints do), baked onto a rig standing on its floor at rest: where the source's
    feet are planted, the rig's foot joints stand at their rest heights above the rig's floor (before:
    the source's lowest rest joint was taken to touch the floor, and the rig's feet floated 4 cm)."""
    lift = 0.04
    plan_src, mapping_src, truth = _walk_on(rigs.humanoid("mixamo", pose="T"))
    truth.locations[:, plan_src.root] += np.linalg.inv(plan_src.rig.rest_rotation()[plan_src.root]) @ (UP * lift)
    kp = target_keypoints(plan_src, truth.quaternions, truth.locations) @ plan_src.K.T
    src = SourceRig(plan_src.rig, mapping_src, truth.quaternions, truth.locations)
    feet_kp = [KEYPOINTS.index(j) for j in ("foot_l", "foot_r", "toe_l", "toe_r")]
    planted = np.min(kp[:, feet_kp, 2], 1) < lift + 0.005
    assert planted.sum() > 20
    target = rigs.humanoid("unreal", pose="A", axes="random")     # (stands 3 cm above its floor at rest)
    mapping = auto_map(target)
    plan = plan_retarget(target, mapping)
    sole = rest_floor_gap(plan, np.eye(4))
    assert abs(sole - 0.03) < 1e-6
    job = RigBake(target, mapping, kp, None, FPS, BakeOptions(device="cpu"), source_rig=src)
    job.run()
    res = job.full_result()
    feet = [target.index(mapping.entries[j]) for j in ("foot_l", "foot_r", "toe_l", "toe_r")]
    low = np.min(res.heads[:, feet, 2], 1)
    assert abs(np.median(low[planted]) - sole) < 0.01, np.median(low[planted])
    fp = foot_points(plan, UP)
    assert job.figures.floor_reference == "floor" and abs(job.figures.floor_error_cm) < 1.0, job.figures
    assert fp and not any("float" in w for w in job.warnings), job.warnings


def test_a_knee_folded_past_the_judged_bend_is_not_called_backwards(monkeypatch):
    """Deep in a crouch thigh and shin lie nearly along each other and the hip-ankle line turns with
    their length ratio: a rig of other proportions read as "knee backwards" where the source's, bent
    as far, did not (cmu_hahne/01_14 onto the meta-rig). A hyperextended knee still counts."""
    from neural_ik.pipeline import tuning
    from neural_ik.pipeline.figures import knee_bends_backwards

    def one(*p):
        return [np.array([q], dtype=float) for q in p]

    bend = np.radians(150.0)                     # folded: the thigh forward, the shin back under it
    H, Kn = np.zeros(3), np.array([0.0, 0.5, 0.0])
    A = Kn + 0.45 * np.array([0.0, -np.cos(np.pi - bend), -np.sin(np.pi - bend)])
    F = np.array([0.0, -0.05, -0.15])
    folded = one(H, Kn, A, F)
    assert not knee_bends_backwards(*folded, UP)[0]
    monkeypatch.setattr(tuning, "KNEE_JUDGED_BEND_DEG", 180.0)
    assert knee_bends_backwards(*folded, UP)[0]  # (the premise: the foot's rule alone says backwards)
    monkeypatch.undo()
    straight = one([0.0, 0.0, 1.0], [0.0, -0.06, 0.5], [0.0, 0.0, 0.0], [0.0, 0.15, -0.05])
    assert knee_bends_backwards(*straight, UP)[0]


def test_a_rig_whose_rest_is_no_standing_pose_keeps_the_sources_heights():
    """Keypoints baked onto a skeleton whose rest is no human pose (every bone stacked along one axis,
    as a markerless capture's BVH rests): its rest says nothing of how high its feet stand, so the
    source's heights are kept (before: the rest's foot heights, all zero, sank the body by the
    source's ankle height; Rokoko's own skeleton 23 cm)."""
    import dataclasses

    human = rigs.humanoid("mixamo", pose="T")
    plan_h, mapping, truth = _walk_on(human)
    kp = target_keypoints(plan_h, truth.quaternions, truth.locations) @ plan_h.K.T
    stacked = dataclasses.replace(rigs.straight_line_with_reference("mixamo"), reference_matrix=None)
    job = RigBake(stacked, auto_map(stacked), kp, None, FPS, BakeOptions(device="cpu"))
    job.run()
    assert job.target_info.sole == 0.0
    res = job.full_result()
    for s in "lr":
        ankle = res.heads[:, stacked.index(job.mapping.entries[f"foot_{s}"]), 2]
        assert abs(np.median(ankle - kp[:, KEYPOINTS.index(f"foot_{s}"), 2])) < 0.005, s
    # (the figure against the source's feet: its floor is not known from such a rest)
    assert job.figures.floor_reference == "source", job.figures
