"""Six effectors of another body, without its skeleton (a file of trackers or markers): scaled onto the rig."""

import numpy as np
import pytest

import rigs
from _pkg import pkg

pkg()
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS, SPARSE_EFFECTORS  # noqa: E402
from neural_ik.pipeline import BakeOptions, RigBake  # noqa: E402
from neural_ik.retarget.mapping import auto_map  # noqa: E402


def _six(kp):
    out = np.full_like(kp, np.nan)
    keep = [KEYPOINTS.index(e) for e in SPARSE_EFFECTORS]
    out[:, keep] = kp[:, keep]
    return out


@pytest.mark.parametrize("size", [0.7, 1.0])
def test_effectors_of_another_body_are_scaled_onto_the_rig(size):
    rig = rigs.humanoid("mixamo")
    mapping = auto_map(rig)
    walk = walk_keypoints(2.0, 30.0)
    kp = _six(walk * size)                                        # a child-sized walker's six effectors
    job = RigBake(rig, mapping, kp, None, 30.0, BakeOptions(device="cpu", mode="sparse"))
    job.run()
    res = job.full_result()
    f = job.figures
    ratio = job.scale * job.unit
    if size == 1.0:
        assert ratio == pytest.approx(1.0, abs=0.02)             # made for the rig: taken as they are
    else:
        assert ratio == pytest.approx(1.0 / size, rel=0.1)       # scaled by the bodies' hip heights
    assert f.effector_reach_mm[1] < 1.0                           # the (scaled) effectors are met
    pelvis, foot = mapping.entries["pelvis"], mapping.entries["foot_l"]
    legs = res.heads[:, rig.index(pelvis), 2] - res.heads[:, rig.index(foot), 2]
    rest = rig.head[rig.index(pelvis), 2] - rig.head[rig.index(foot), 2]
    assert np.percentile(legs, 90) > 0.9 * rest                   # standing tall on the rig's legs


def test_effectors_with_knees_bent_all_clip_are_the_rig_own():
    """The rig's own body walking crouched (pelvis, head and hands lower, the feet on the floor): its legs never
    straighten, its torso does; taken as made for the rig (scale 1), every effector met.

    From the legs alone the body read 9 % smaller than the rig and its effectors were scaled up, missing their
    own skeleton's (cmu_sl's dances: 3 cm)."""
    rig = rigs.humanoid("mixamo")
    walk = walk_keypoints(2.0, 30.0)
    low = [KEYPOINTS.index(j) for j in ("pelvis", "head", "hand_l", "hand_r")]
    walk[:, low, 2] -= 0.08 * (walk[:, KEYPOINTS.index("pelvis"), 2].max() - walk[:, KEYPOINTS.index("foot_l"), 2].min())
    job = RigBake(rig, auto_map(rig), _six(walk), None, 30.0, BakeOptions(device="cpu", mode="sparse"))
    job.run()
    assert job.scale * job.unit == pytest.approx(1.0, abs=1e-6)
    assert job.figures.effector_reach_mm[1] < 1.0, job.figures.unreachable


def _lying(rig):
    """``rig`` with its whole rest turned to lie along the armature's X axis (a BVH skeleton's rest as some
    studios write it: no standing pose)."""
    from neural_ik.retarget.rig import RigDescription

    R = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])   # Z (up) onto X
    M = np.eye(4)
    M[:3, :3] = R
    return RigDescription(names=list(rig.names), parents=rig.parents.copy(), matrix_local=M @ rig.matrix_local,
                          head=rig.head @ R.T, tail=rig.tail @ R.T, world_matrix=rig.world_matrix, name="lying")


def test_effectors_onto_a_rig_lying_at_rest_keep_their_size():
    """A rig whose rest lies down says nothing of its standing height: the effectors of its own body are
    taken at the rig's size (the rest's pelvis-over-ankle height, nearly nothing, read them as a giant's
    and put the body at the armature's origin, 1.7 m from them), and they are met."""
    rig = _lying(rigs.humanoid("mixamo"))
    mapping = auto_map(rig)
    job = RigBake(rig, mapping, _six(walk_keypoints(2.0, 30.0)), None, 30.0, BakeOptions(device="cpu", mode="sparse"))
    job.run()
    assert job.scale * job.unit == pytest.approx(1.0, abs=0.02)
    assert job.figures.effector_reach_mm[1] < 1.0
    pelvis = job.full_result().heads[:, rig.index(mapping.entries["pelvis"])]
    np.testing.assert_allclose(pelvis, walk_keypoints(2.0, 30.0)[:, KEYPOINTS.index("pelvis")], atol=2e-3)


def test_one_pose_takes_its_own_rig_solve_iterations(monkeypatch):
    """A pose's rig solve runs SPARSE_POSE_ITERATIONS, not the dense bakes' RIG_ITERATIONS (a Live
    Solve tick's largest part); an explicit rig_iterations still counts, at least that many."""
    from neural_ik.pipeline import tuning
    from neural_ik.retarget import rigsolve

    rig = rigs.humanoid("mixamo")
    mapping = auto_map(rig)
    kp = _six(walk_keypoints(1.0, 30.0)[10:11])
    kp[0, KEYPOINTS.index("hand_l")] += (0.05, -0.2, 0.15)
    asked = []
    real = rigsolve.solve_rig

    def spy(*a, **k):
        asked.append(k["iterations"])
        return real(*a, **k)

    monkeypatch.setattr(rigsolve, "solve_rig", spy)
    for given, expected in ((None, tuning.SPARSE_POSE_ITERATIONS), (12, 12), (2, tuning.SPARSE_POSE_ITERATIONS)):
        asked.clear()
        job = RigBake(rig, mapping, kp, None, 30.0, BakeOptions(device="cpu", mode="sparse", rig_iterations=given))
        job.run()
        assert asked and asked[0] == expected, (given, asked)
        assert job.figures.effector_reach_mm[1] < 1.0
    assert tuning.SPARSE_POSE_ITERATIONS < tuning.RIG_ITERATIONS["network"]


def _low_ankles(rig, drop):
    """``rig`` with its ankles ``drop`` lower (longer shins, flatter feet), as some mocap skeletons have them."""
    from neural_ik.retarget.rig import RigDescription

    d = rig.to_dict()
    for s in ("Left", "Right"):
        f, c = d["names"].index(f"mixamorig:{s}Foot"), d["names"].index(f"mixamorig:{s}Leg")
        d["head"][f][2] -= drop
        d["tail"][c][2] -= drop
        for i in (f, c):
            d["matrix_local"][i] = rigs.bone_matrix(np.array(d["head"][i]), np.array(d["tail"][i])).tolist()
    return RigDescription.from_dict(d)


def test_file_effectors_from_low_ankles_are_reached_on_the_meta_rig():
    """A file's six effectors (its skeleton known) whose ankles sit as low as its balls, onto Rigify's meta-rig
    (ankles high over the balls): scaled by the pelvis' heights over the ankles, every effector is reached.

    Scaled by the heights over the lowest foot point, the pelvis stood as high as the rig's hips over its balls,
    the legs could not span the pelvis-to-ankle distance: the feet and pelvis missed on a third of the frames.
    """
    from neural_ik.readers.source_rig import SourceRig
    from neural_ik.retarget.solve import target_keypoints
    from walks import walk_on

    plan_src, mapping_src, truth = walk_on(_low_ankles(rigs.humanoid("mixamo", pose="T"), 0.05))
    kp = target_keypoints(plan_src, truth.quaternions, truth.locations) @ plan_src.K.T
    src = SourceRig(plan_src.rig, mapping_src, truth.quaternions, truth.locations)
    target = rigs.rigify_metarig_description()
    job = RigBake(target, auto_map(target), _six(kp), None, 30.0, BakeOptions(device="cpu", mode="sparse"),
                  source_rig=src)
    job.run()
    assert not job.figures.unreachable, job.figures.unreachable
    assert job.figures.effector_reach_mm[1] < 0.5, job.figures.effector_reach_mm


def _sunk_walk(depth):
    """The walk's six effectors ``depth`` metres lower: a body whose ankle joints stand that much lower than
    the rig's when its feet stand (a CMU skeleton's against the meta-rig's)."""
    walk = walk_keypoints(3.0, 30.0)
    walk[..., 2] -= depth
    return _six(walk)


def _bake_sunk(depth, placed=False, cm=False):
    """The sunk walk baked onto the Mixamo-style rig; ``cm``: its bones in centimetres, the object scaled 0.01."""
    rig = rigs.humanoid("mixamo", scale=100.0 if cm else 1.0)
    M = np.diag([0.01, 0.01, 0.01, 1.0]) if cm else None
    job = RigBake(rig, auto_map(rig), _sunk_walk(depth), None, 30.0, BakeOptions(device="cpu", mode="sparse"),
                  object_matrix=M)
    job.placed_effectors = placed
    job.run()
    return job


@pytest.mark.parametrize("cm", [False, True])
def test_another_body_effectors_stand_at_the_rig_ankle_height(monkeypatch, cm):
    """Another body's effectors whose ankles stand 4 cm lower than the rig's: raised as one so that the feet
    stand on the rig's floor where they stand (the bake's own floor figure within 5 mm), every effector met,
    the shift named (in centimetres of the world, on a rig in centimetres too). Kept at their heights (the
    shift switched off), the same feet sink 4 cm."""
    from neural_ik.pipeline import tuning

    job = _bake_sunk(0.04, cm=cm)
    f = job.figures
    assert job.path.lift * job.unit == pytest.approx(0.04, abs=0.01)
    assert abs(f.floor_error_cm) < 0.5, f.floor_error_cm
    assert f.effector_reach_mm[1] < 1.0
    assert any(f"moved {job.path.lift * job.unit * 100:+.1f} cm vertically" in w for w in job.warnings), job.warnings
    monkeypatch.setattr(tuning, "SPARSE_LIFT_MIN", 1.0)
    kept = _bake_sunk(0.04, cm=cm).figures
    assert kept.floor_error_cm < -3.0, kept.floor_error_cm


def test_placed_effectors_keep_their_heights():
    """An animator's empties (Add Effectors) are met where they are, the floor figure saying how far the feet
    sink; one pose is never moved either."""
    job = _bake_sunk(0.04, placed=True)
    assert job.path.lift == 0.0
    assert job.figures.floor_error_cm < -3.0
    assert not any("vertically" in w for w in job.warnings)
    one = RigBake(job.full_rig, job.mapping, _sunk_walk(0.04)[:1], None, 30.0, BakeOptions(device="cpu", mode="sparse"))
    one.run()
    assert one.path.lift == 0.0 and one.figures.effector_reach_mm[1] < 1.0


def test_ankles_standing_high_keep_their_heights_unless_the_stances_lie_apart(monkeypatch):
    """Another body's ankles standing 25 cm up on every stance (tiptoe, or in the air): kept where they
    are, with a warning. Where the clip's stances lie far apart in height (raised ground, a markerless
    capture's drift: stance_spread over STANCE_SPREAD_WARN), no height is its floor: the ankles go to the
    rig's standing height where they stand most, as a dense clip's feet do."""
    from neural_ik.pipeline import stances

    job = _bake_sunk(-0.25)
    assert job.path.lift == 0.0
    assert any("on tiptoe or in the air" in w for w in job.warnings), job.warnings
    monkeypatch.setattr(stances, "stance_spread", lambda *a, **k: 0.2)
    apart = _bake_sunk(-0.25)
    assert apart.path.lift * apart.unit == pytest.approx(-0.25, abs=0.02)
    assert not any("on tiptoe" in w for w in apart.warnings), apart.warnings
    assert abs(apart.figures.floor_error_cm) < 0.5, apart.figures.floor_error_cm


def test_a_lifted_body_is_posed_as_on_the_ground(monkeypatch):
    """The walk's six effectors 25 cm up, lowered as one onto the rig's standing height (its stances
    taken to lie apart): posed as the walk on the ground, every joint moved by the lift's residual
    alone. The start pose's knees and elbows (weak pole targets) and its chain roots (the reach of a
    far effector) go with the effectors: left where the start pose had them, the elbows ended up to
    86 mm off."""
    from neural_ik.pipeline import stances

    monkeypatch.setattr(stances, "stance_spread", lambda *a, **k: 0.2)
    rig = rigs.humanoid("mixamo")
    mapping = auto_map(rig)
    walk = walk_keypoints(3.0, 30.0)
    idx = [rig.index(mapping.entries[j]) for j in ("pelvis", "calf_l", "calf_r", "forearm_l", "forearm_r")]
    heads = []
    for dz in (0.0, 0.25):
        kp = walk.copy()
        kp[..., 2] += dz
        job = RigBake(rig, mapping, _six(kp), None, 30.0, BakeOptions(device="cpu", mode="sparse"))
        job.run()
        heads.append(job.full_result().heads[:, idx])
        if dz:
            assert job.path.lift * job.unit == pytest.approx(-0.25, abs=0.02)
    moved = heads[1] - heads[0]
    off = np.linalg.norm(moved - moved[:, :1], axis=-1) * 1000.0     # (less the pelvis' shift: the residual)
    assert off.max() < 2.0, off.max(axis=0)
