"""``./neural-ik bake``, ``layouts``, ``rigs`` and argument errors, on files the tests generate.

End-to-end bakes need the network weights (``weights/neural_ik.pt``, or a
file named by the ``NEURAL_IK_WEIGHTS`` environment variable); without them
those tests are skipped and the "weights missing" error is checked instead.
"""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

from _pkg import pkg

REPO = pathlib.Path(__file__).resolve().parents[2]
WEIGHTS = os.environ.get("NEURAL_IK_WEIGHTS") or str(REPO / "weights" / "neural_ik.pt")
needs_weights = pytest.mark.skipif(not os.path.isfile(WEIGHTS), reason="network weights not available yet")

# canonical joint -> BVH joint name (Y-up BVH of the canonical skeleton, CMU/Mixamo-like names)
BVH_NAMES = {
    "pelvis": "Hips", "spine1": "Spine", "spine2": "Spine1", "spine3": "Spine2", "neck": "Neck", "head": "Head",
    "clavicle_l": "LeftShoulder", "upperarm_l": "LeftArm", "forearm_l": "LeftForeArm", "hand_l": "LeftHand",
    "clavicle_r": "RightShoulder", "upperarm_r": "RightArm", "forearm_r": "RightForeArm", "hand_r": "RightHand",
    "thigh_l": "LeftUpLeg", "calf_l": "LeftLeg", "foot_l": "LeftFoot", "toe_l": "LeftToeBase",
    "thigh_r": "RightUpLeg", "calf_r": "RightLeg", "foot_r": "RightFoot", "toe_r": "RightToeBase",
}


def weights_args():
    return ["--weights", WEIGHTS] if os.environ.get("NEURAL_IK_WEIGHTS") else []


def write_walk_npz(path, seconds=2.0, fps=30.0, only=None):
    """The demo walk as a canonical ``.npz`` (optionally only some keypoints)."""
    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints
    from neural_ik.model.skeleton import KEYPOINTS

    kp = walk_keypoints(seconds, fps)
    names = list(KEYPOINTS)
    if only is not None:
        idx = [names.index(n) for n in only]
        kp, names = kp[:, idx], [names[i] for i in idx]
    np.savez(path, positions=kp, joint_names=np.array(names), fps=fps)
    return kp


def write_walk_bvh(path, seconds=2.0, fps=30.0):
    """The demo walk as a Y-up BVH of the canonical skeleton with Mixamo-like names (metres)."""
    pkg()
    from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations
    from neural_ik.model.bvh import frames_from_rotations, write_bvh
    from neural_ik.model.skeleton import END_OFFSETS, END_PARENTS, JOINTS, PARENTS, REST_OFFSETS

    C = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]])  # Blender (x, y, z) -> BVH (x, z, -y)
    rot = walk_rotations(seconds, fps)
    root = walk_keypoints(seconds, fps)[:, 0]
    rot_bvh = C @ rot @ C.T
    offsets = REST_OFFSETS @ C.T
    channels = [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")] + [
        ("Zrotation", "Xrotation", "Yrotation")] * (len(JOINTS) - 1)
    trans = np.broadcast_to(offsets, (rot.shape[0], len(JOINTS), 3)).copy()
    trans[:, 0] = root @ C.T
    motion = frames_from_rotations(channels, rot_bvh, trans)
    ends = [(p, o @ C.T) for p, o in zip(END_PARENTS, END_OFFSETS) if JOINTS[p] in ("head", "hand_l", "hand_r",
                                                                                        "toe_l", "toe_r")]
    write_bvh(path, [BVH_NAMES[j] for j in JOINTS], PARENTS, offsets, channels, motion, frame_time=1.0 / fps,
              end_sites=ends)


def partial_files(folder):
    return [p for p in pathlib.Path(folder).rglob("*") if ".partial" in p.name]


def interrupt_batch(argv, out, first="*.bvh", timeout=300):
    """Run ``./neural-ik batch ARGV``, Ctrl-C it once a file matching ``first`` appears in ``out``.

    Checks what every interrupted batch must leave: exit code 130, no
    traceback, no temporary file, a report that says so, every export it
    lists complete and no other. Returns the report's done rows.
    """
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([str(REPO / "neural-ik"), "batch", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        deadline = time.time() + timeout
        while not any(pathlib.Path(out).glob(first)):
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "no clip finished"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert not partial_files(out)
    report = json.loads((pathlib.Path(out) / "report.json").read_text())
    assert report["summary"]["interrupted"] is True
    done = [r for r in report["clips"] if r["status"] == "done"]
    pkg()
    from neural_ik.model.bvh import read_bvh

    for row in done:  # every export left behind is complete
        for path in row["outputs"]:
            if path.endswith(".bvh"):
                assert read_bvh(path).num_frames == row["frames"]
    left = sorted(p.name for p in pathlib.Path(out).glob("*.bvh"))
    assert left == sorted(os.path.basename(p) for r in done for p in r["outputs"] if p.endswith(".bvh"))
    return done


def check_bvh_against_blend(blend_path, bvh_path, armature=None):
    """The exported BVH's joint positions equal the baked pose in the .blend (armature space)."""
    import bpy

    pkg()
    from neural_ik.model.bvh import read_bvh

    bvh = read_bvh(str(bvh_path))
    pos = bvh.world_positions()
    bpy.ops.wm.open_mainfile(filepath=str(blend_path), load_ui=False)
    arms = [o for o in bpy.context.scene.objects if o.type == "ARMATURE"]
    obj = arms[0] if armature is None else bpy.data.objects[armature]
    assert obj.animation_data and obj.animation_data.action, "no baked action on the armature"
    scene = bpy.context.scene
    start = int(obj.animation_data.action.frame_range[0])
    names = [n for n in bvh.names if n in obj.pose.bones]
    assert len(names) >= 20
    idx = [bvh.names.index(n) for n in names]
    worst = 0.0
    for t in range(0, bvh.num_frames, max(1, bvh.num_frames // 6)):
        scene.frame_set(start + t)
        heads = np.array([obj.pose.bones[n].head for n in names])
        worst = max(worst, float(np.abs(heads - pos[t, idx]).max()))
    assert worst < 2e-3, "exported BVH differs from the baked pose by {:.4f}".format(worst)
    assert set(bvh.names) >= set(b.name for b in obj.data.bones if b.parent is not None) - {"__0"}
    return bvh, obj


# ---------------------------------------------------------------------------
# no weights needed


def test_layouts_lists_names(run_cli):
    result = run_cli("layouts")
    assert result.returncode == 0, result.stderr
    for name in ("canonical", "coco17", "mediapipe_pose", "mixamo"):
        assert name in result.stdout
    assert "left_shoulder" in result.stdout
    data = json.loads(run_cli("layouts", "--json").stdout)
    assert {"name", "joint_names"} <= set(data[0])


def test_rigs_lists_targets_and_conventions(run_cli):
    result = run_cli("rigs")
    assert result.returncode == 0, result.stderr
    assert "rigify" in result.stdout and "mixamo" in result.stdout and "mixamorig:Hips" in result.stdout


def test_rigs_target_mapping(run_cli):
    result = run_cli("rigs", "--target", "rigify", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["entries"]["hand_l"] == "hand.L" and data["entries"]["thigh_r"] == "thigh.R"


@pytest.mark.parametrize("argv, fragment", [
    (["bake", "x.npz", "--target", "rigify", "--bogus"], "unrecognized arguments"),
    (["bake", "x.npz", "--target", "rigify", "--smooth", "wobbly"], "invalid choice"),
    (["bake", "x.npz", "--target", "rigify", "--frames", "9:3"], "empty frame range"),
    (["batch", "in", "--target", "rigify"], "--out-dir"),
    (["demo", "--nope"], "unrecognized arguments"),
    (["layouts", "--nope"], "unrecognized arguments"),
])
def test_bad_flags_exit_2(run_cli, argv, fragment):
    result = run_cli(*argv)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_paths_exit_2_and_name_the_file(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    cases = [
        (["bake", tmp_path / "missing.npz", "--target", "rigify"], "missing.npz: no such file"),
        (["bake", tmp_path / "walk.xyz", "--target", "rigify"], "unknown source type"),
        (["bake", src, "--target", tmp_path / "nope.fbx"], "nope.fbx: no such file"),
        (["bake", src, "--target", "mannequin"], "not a built-in rig"),
        (["bake", src, "--target", "rigify", "--export", tmp_path / "o.obj"], "unknown export type"),
        (["bake", src, "--target", "rigify", "--layout", "nosuchlayout"], "unknown layout"),
        (["batch", tmp_path / "nodir", "--target", "rigify", "--out-dir", tmp_path / "o"], "no such folder"),
    ]
    for argv, fragment in cases:
        result = run_cli(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert fragment in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr


def test_unreadable_source_exits_1_with_report(run_cli, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"this is not an npz archive")
    result = run_cli("bake", bad, "--target", "rigify", "--out", tmp_path / "o.blend", "--report", "-",
                     *weights_args())
    assert result.returncode == 1
    assert "bad.npz" in result.stderr and "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["clips"][0]["status"] == "failed" and "bad.npz" in report["clips"][0]["error"]
    assert report["summary"]["failed"] == 1
    assert not (tmp_path / "o.blend").exists() and not partial_files(tmp_path)


def test_missing_weights_is_a_clear_error(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    out = tmp_path / "o.blend"
    out.write_bytes(b"previous")
    result = run_cli("bake", src, "--target", "rigify", "--out", out, "--weights", tmp_path / "none.pt")
    assert result.returncode == 1
    assert "weights not found" in result.stderr and "none.pt" in result.stderr
    assert "Traceback" not in result.stderr
    assert out.read_bytes() == b"previous"  # an existing output is never clobbered by a failed run
    assert not partial_files(tmp_path)


# ---------------------------------------------------------------------------
# end to end


@needs_weights
def test_bake_npz_onto_rigify_and_reimport_bvh(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=2.0)
    blend, bvh, report_path = tmp_path / "walk.blend", tmp_path / "walk.bvh", tmp_path / "report.json"
    result = run_cli("bake", src, "--target", "rigify", "--out", blend, "--export", bvh, "--report", report_path,
                     *weights_args())
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "clip 1/1" in result.stderr
    assert blend.is_file() and bvh.is_file() and not partial_files(tmp_path)
    report = json.loads(report_path.read_text())
    row = report["clips"][0]
    assert row["status"] == "done" and row["frames"] == 60 and row["fps"] == 30.0
    assert row["target"] == "rigify" and row["mode"] == "dense"
    assert row["start"] == "network"            # keypoints alone: the network ran
    assert row["devices"]["rig_solve"] == row["devices"]["network"] in ("cpu", "cuda")   # (the same device)
    assert set(row["seconds"]) >= {"read", "solve", "fit", "write", "export"}
    assert row["frames_per_second"] > 0
    assert 0 <= row["keypoint_error_mm"]["mean"] <= row["keypoint_error_mm"]["max"]
    assert row["keypoint_error_mm"]["mean"] < 150
    assert row["jitter"] is not None and row["foot_sliding_mm"] is not None
    # proportion-independent fidelity: the meta-rig's bones point like the walker's
    assert 0 <= row["bone_direction_error_deg"] < 10
    assert report["summary"]["bone_direction_error_deg"] == pytest.approx(row["bone_direction_error_deg"], abs=1e-3)
    assert report["summary"]["done"] == 1 and report["summary"]["frames"] == 60
    bvh_data, obj = check_bvh_against_blend(blend, bvh)
    assert bvh_data.num_frames == 60 and abs(bvh_data.frame_time - 1 / 30) < 1e-4
    assert obj.name == "metarig" and "upper_arm.L" in bvh_data.names


@needs_weights
def test_bake_bvh_onto_bvh_target(run_cli, tmp_path):
    src = tmp_path / "walk.bvh"
    write_walk_bvh(src, seconds=2.0)
    target = tmp_path / "rig.bvh"
    write_walk_bvh(target, seconds=0.2)
    out_bvh = tmp_path / "out.bvh"
    result = run_cli("bake", src, "--target", target, "--export", out_bvh, "--out", tmp_path / "out.blend",
                     "--report", "-", "--quiet", *weights_args())
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "" or "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    row = report["clips"][0]
    assert row["status"] == "done" and row["frames"] == 60
    assert row["keypoint_error_mm"]["mean"] < 150
    bvh_data, _ = check_bvh_against_blend(tmp_path / "out.blend", out_bvh)
    # the target's bone names and rest offsets are kept (Blender's exporter writes its Z-up armature space)
    assert bvh_data.names[:3] == ["Hips", "Spine", "Spine1"]
    pkg()
    from neural_ik.model.bvh import read_bvh

    rest = read_bvh(str(target))
    C = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # BVH Y up -> Blender Z up
    for name in ("LeftLeg", "LeftForeArm", "Neck"):
        np.testing.assert_allclose(bvh_data.offsets[bvh_data.index(name)], C @ rest.offsets[rest.index(name)],
                                   atol=1e-4)


@needs_weights
def test_bake_effectors_only_is_sparse(run_cli, tmp_path):
    src = tmp_path / "effectors.npz"
    write_walk_npz(src, seconds=1.0, only=["pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r"])
    result = run_cli("bake", src, "--target", "rigify", "--report", "-", "-q", "--no-refine", *weights_args())
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)["clips"][0]
    assert row["mode"] == "sparse" and row["frames"] == 30


@needs_weights
def test_fbx_source_and_glb_target(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=1.0)
    fbx, glb = tmp_path / "walk.fbx", tmp_path / "walk.glb"
    result = run_cli("bake", src, "--target", "rigify", "--export", fbx, "--export", glb, "-q", *weights_args())
    assert result.returncode == 0, result.stderr
    assert fbx.stat().st_size > 0 and glb.read_bytes()[:4] == b"glTF"
    # the FBX (Blender's importer, bone mapping from the armature) baked onto the glTF rig
    result = run_cli("bake", fbx, "--target", glb, "--report", "-", "-q", *weights_args())
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)["clips"][0]
    assert row["status"] == "done" and row["frames"] == 30


@pytest.mark.parametrize("up,units", [("Z", "in"), ("Y", "cm")])
def test_bvh_target_in_its_own_units_and_axes(run_cli, tmp_path, up, units):
    """A BVH target is read in its units and up axis (as a source is): the rig stands and the feet land.

    Before, a Z-up target was imported lying on its back (knees "backwards" on
    most frames, the feet metres off) and every figure was in file units.
    The exported BVH keeps the target's own offsets (its units).
    """
    from source_fixtures import humanoid_bvh
    from neural_ik.model.bvh import read_bvh

    target, _ = humanoid_bvh(tmp_path / "skeleton.bvh", "studio", up=up, units=units, orients="A", frames=1)
    src, _ = humanoid_bvh(tmp_path / "walk.bvh", "mixamo", up="Y", units="cm", frames=30)
    out, report = tmp_path / "out.bvh", tmp_path / "report.json"
    result = run_cli("bake", src, "--target", target, "--export", out, "--report", report)
    assert result.returncode == 0, result.stderr
    row = json.loads(report.read_text())["clips"][0]
    assert abs(row["floor_error_cm"]) < 3.0 and row["knees_backwards"] == 0, row
    assert row["bone_direction_error_deg"] < 5.0, row
    notes = " ".join(json.loads(report.read_text())["summary"].get("target_warnings", []) + row["warnings"])
    if up != "Y":
        assert f"target BVH with {up} up" in notes, notes
    baked, rest = read_bvh(str(out)), read_bvh(str(target))
    i, k = baked.names.index("LowerArm_L"), rest.names.index("LowerArm_L")
    np.testing.assert_allclose(np.linalg.norm(baked.offsets[i]), np.linalg.norm(rest.offsets[k]), rtol=1e-3)
