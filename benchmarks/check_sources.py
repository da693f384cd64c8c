"""Read every source convention and bake it onto Rigify's meta-rig: a table of what was detected.

Sources: every file of ``../shared/mocap/foreign/`` (when present) and generated fixtures of each
convention (BVH naming schemes, Y/Z up, cm/inches/CMU units, joint orients, a floor not at zero,
an FBX whose root bone became the armature object, the project's own BVH export baked back,
nameless SMPL-22 / H36M-17 / COCO-17 arrays, MediaPipe world landmarks, a Plug-in Gait C3D, a studio
rig's joint names, a headerless Kinect v2 CSV, an AMASS SMPL+H motion, MediaPipe image landmarks with --image-size), and bad inputs that must be refused with a clear
message (2D OpenPose keypoints, a frame and a folder, among them).

Each source is read with the CLI's reader (``cli.sources.read_source``: defaults, no flags) and baked
through the CLI's bake path (``cli.bake.bake_file``) at 30 fps over its first ``--seconds`` seconds.
Printed per source: mapped canonical joints, detected units and up axis, the floor shift applied,
the share of baked frames in which the rig stands upright (its head above its pelvis), and the
floor figure of the source and of the baked rig: the median over frames of the lowest foot point's
height (cm; 0 = on the floor; a source standing on a step or jumping reads above 0 too).

    .venv/bin/python benchmarks/check_sources.py [--seconds 10] [--only NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _pkg import REPO, import_package  # the script's folder is on sys.path

sys.path.insert(0, str(REPO / "tests"))

FOREIGN = REPO.parent / "shared" / "mocap" / "foreign"


def cli_args(source, seconds, fps=30.0, extra=()):
    """Parsed ``bake`` flags as a user would give them: none but the target, rate and range (and ``extra``)."""
    from neural_ik.cli.parser import build_parser

    argv = ["bake", str(source), "--target", "rigify", "--fps", str(fps), "-q", *extra]
    args = build_parser().parse_args(argv)
    args.default_device = "cpu"
    args._seconds = seconds
    return args


def bake_source(path, target, solver, seconds, extra=()):
    """Read and bake one source through the CLI path; the one place that bakes (swap for the new pipeline).

    Returns
    -------
    clip : readers.KeypointClip
    result : blender_io.bake.BakeResult
    """
    from neural_ik.cli.bake import bake_file
    from neural_ik.cli.sources import read_source

    args = cli_args(path, seconds, extra=extra)
    clip = read_source(str(path), args)
    n = clip.num_frames
    args.frames = (0, min(n, max(2, int(round(seconds * clip.fps)))))
    _, result = bake_file(str(path), target, args, solver=solver)
    return clip, result


def baked_figures(obj, result):
    """Upright share and floor error (cm) of a baked rig, read back from Blender frame by frame.

    The bones' world heads and tails after ``frame_set`` at every baked frame
    (what the user sees; the bake's own arrays are released once its action
    holds the keys).
    """
    import bpy

    from neural_ik.blender_io.rig import rig_description

    rig = rig_description(obj)
    pbs = obj.pose.bones
    order = [pbs.find(n) for n in rig.names]
    n = len(pbs)
    frames = range(int(result.frame_start), int(result.frame_start) + int(result.frames))
    H = np.empty((len(frames), n, 3))
    tails = np.empty((len(frames), n, 3))
    buf = np.empty(n * 3)
    scene = bpy.context.scene
    for k, f in enumerate(frames):
        scene.frame_set(f)
        pbs.foreach_get("head", buf)
        H[k] = buf.reshape(n, 3)[order]
        pbs.foreach_get("tail", buf)
        tails[k] = buf.reshape(n, 3)[order]
    mw = np.array(obj.matrix_world)
    H = H @ mw[:3, :3].T + mw[:3, 3]
    tails = tails @ mw[:3, :3].T + mw[:3, 3]
    m = result.mapping.entries
    feet = set()
    for j in ("foot_l", "foot_r", "toe_l", "toe_r"):
        if j in m:
            b = rig.index(m[j])
            feet |= {b, *rig.descendants(b)}
    feet = sorted(feet)
    low = np.minimum(H[:, feet, 2], tails[:, feet, 2]).min(1)
    floor_cm = float(np.median(low)) * 100.0
    pel, head = rig.index(m["pelvis"]), rig.index(m["head"])
    up = float(np.mean(H[:, head, 2] > H[:, pel, 2]))  # the head above the pelvis
    return up, floor_cm


def source_floor(clip, frames):
    """The source's own floor figure (cm): median over its first ``frames`` frames of the lowest foot
    point's height (heels and toe tips, else toes and ankles less their rest height, as
    ``readers.floor_height`` picks them), for comparison with the baked rig's."""
    from neural_ik.model.skeleton import KEYPOINTS
    from neural_ik.readers import to_canonical

    kp, mask = to_canonical(clip)
    kp, mask = kp[:frames], mask[:frames]
    for names in ((("heel_l", 0.0), ("heel_r", 0.0), ("toe_tip_l", 0.0), ("toe_tip_r", 0.0)),
                  (("toe_l", 0.03), ("toe_r", 0.03), ("foot_l", 0.08), ("foot_r", 0.08))):
        idx = [KEYPOINTS.index(n) for n, _ in names]
        z = np.where(mask[:, idx], kp[:, idx, 2] - [h for _, h in names], np.inf).min(1)
        z = z[np.isfinite(z)]
        if z.size:
            return float(np.median(z)) * 100.0
    return float("nan")


def mapped_count(clip):
    from neural_ik.model.skeleton import JOINTS
    from neural_ik.readers import to_canonical

    if clip.source_rig is not None:
        return len(clip.source_rig.mapping.entries)
    _, mask = to_canonical(clip)
    return int(mask[:, : len(JOINTS)].any(0).sum())


# ---------------------------------------------------------------------------
# generated fixtures


def _layout_points(kp, layout_name):
    """Points of a built-in layout placed from canonical keypoints (face points near the nose/head)."""
    from neural_ik.model.skeleton import KEYPOINTS
    from neural_ik.readers import LAYOUTS

    lay = LAYOUTS[layout_name]
    out = np.zeros((kp.shape[0], len(lay.joint_names), 3))
    face = {"left_eye": (0.03, -0.02, 0.03), "right_eye": (-0.03, -0.02, 0.03),
            "left_ear": (0.07, 0.08, -0.02), "right_ear": (-0.07, 0.08, -0.02)}
    for j, n in enumerate(lay.joint_names):
        if n in lay.to_canonical:
            out[:, j] = kp[:, KEYPOINTS.index(lay.to_canonical[n])]
        elif n in face:
            out[:, j] = kp[:, KEYPOINTS.index("nose")] + face[n]
        elif n in ("left_index", "left_pinky", "right_index", "right_pinky"):
            s = n[0]   # MediaPipe's hand knuckles, half way from the wrist to the finger tips
            out[:, j] = 0.5 * (kp[:, KEYPOINTS.index("hand_" + s)] + kp[:, KEYPOINTS.index("hand_tip_" + s)])
        else:
            out[:, j] = kp[:, KEYPOINTS.index("head")]
    return out


def make_fixtures(folder):
    """Generated sources of each convention: list of (name, path, expect_error)."""
    import source_fixtures as sf

    folder = Path(folder)
    out = []
    for name, kw in [
        ("bvh mixamo Y-up cm", dict(scheme="mixamo", up="Y", units="cm")),
        ("bvh studio _L/_R Z-up inches A-pose", dict(scheme="studio", up="Z", units="in", orients="A")),
        ("bvh ASF names Y-up CMU units orients", dict(scheme="asf", up="Y", units="cmu", orients="random")),
        ("bvh mixamo Z-up m floor +40 cm", dict(scheme="mixamo", up="Z", units="m", floor=0.4)),
        ("bvh studio Y-up mm leaning forward", dict(scheme="studio", up="Y", units="mm", lean=1.5)),
    ]:
        p, _ = sf.humanoid_bvh(folder / (name.split()[1] + "_" + str(len(out)) + ".bvh"), frames=90, **kw)
        out.append((name, p, False))
    walk = sf.walk_keypoints(90)
    # nameless arrays
    smpl = walk[:, :22][:, [0, 14, 18, 1, 15, 19, 2, 16, 20, 3, 17, 21, 4, 6, 10, 5, 7, 11, 8, 12, 9, 13]]
    yup = np.stack([smpl[..., 0], smpl[..., 2], -smpl[..., 1]], -1)  # HumanML3D: Y up
    np.save(folder / "smpl22.npy", yup)
    out.append(("npy SMPL-22 nameless Y-up", folder / "smpl22.npy", False))
    np.save(folder / "h36m17.npy", _layout_points(walk, "h36m17"))
    out.append(("npy H36M-17 nameless", folder / "h36m17.npy", False))
    np.save(folder / "coco17.npy", _layout_points(walk, "coco17") * 1000.0)
    out.append(("npy COCO-17 nameless mm", folder / "coco17.npy", False))
    # MediaPipe world landmarks: hips origin, y down (floor far from zero)
    mp = _layout_points(walk, "mediapipe_pose")
    hips = 0.5 * (mp[:, 23] + mp[:, 24])
    mp = mp - hips[:, None]
    mp = np.stack([mp[..., 0], -mp[..., 2], mp[..., 1]], -1)
    frames = [[{"x": float(a), "y": float(b), "z": float(c), "visibility": 0.9} for a, b, c in fr] for fr in mp]
    (folder / "mediapipe_world.json").write_text(json.dumps({"fps": 30, "frames": frames}))
    out.append(("json MediaPipe world landmarks", folder / "mediapipe_world.json", False))
    # markers: OpenCap anatomical marker set (joint centres by regression, no head points)
    markers, _ = sf.opencap_markers(90)
    sf.write_trc(folder / "opencap.trc", markers, units="mm", up="Y")
    out.append(("trc OpenCap anatomical markers Y-up mm", folder / "opencap.trc", False))
    half, _ = sf.opencap_markers(90, drop=("l_knee_study", "l_mknee_study", "l_ankle_study", "l_mankle_study"))
    sf.write_trc(folder / "half_leg.trc", half)
    out.append(("BAD trc marker set missing half a leg", folder / "half_leg.trc", True))
    out += _lab_fixtures(folder, walk)
    # bad inputs: image-normalised landmarks, mixed units, a non-humanoid skeleton
    img = (mp[..., :2] - mp[..., :2].min()) / (np.ptp(mp[..., :2]) * 2.5) + 0.3
    frames = [[{"x": float(a), "y": float(b), "z": 0.0, "visibility": 0.9} for a, b in fr] for fr in img]
    (folder / "mediapipe_image.json").write_text(json.dumps({"fps": 30, "frames": frames}))
    out.append(("BAD json MediaPipe image-normalised", folder / "mediapipe_image.json", True))
    mixed = _layout_points(walk, "coco17")
    mixed[:, 11:] *= 1000.0  # the legs in mm, the rest in m
    np.savez(folder / "mixed.npz", positions=mixed, joint_names=np.array(__import__(
        "neural_ik.readers", fromlist=["LAYOUTS"]).LAYOUTS["coco17"].joint_names), fps=30.0)
    out.append(("BAD npz mixed units", folder / "mixed.npz", True))
    from neural_ik.model.bvh import write_bvh
    write_bvh(folder / "snake.bvh", ["root", "seg1", "seg2", "seg3"], [-1, 0, 1, 2],
              [[0, 0, 0], [0, 10, 0], [0, 10, 0], [0, 10, 0]],
              [("Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation")]
              + [("Zrotation", "Xrotation", "Yrotation")] * 3, np.zeros((3, 15)))
    out.append(("BAD bvh non-humanoid", folder / "snake.bvh", True))
    return out


def _lab_fixtures(folder, walk):
    """C3D (Plug-in Gait), a studio rig's joint names, AMASS, a headerless Kinect v2 CSV, an OpenPose frame."""
    import source_fixtures as sf

    out = []
    try:
        from c3d_fixtures import plug_in_gait_markers, write_c3d
        write_c3d(folder / "plug_in_gait.c3d", plug_in_gait_markers(walk), fps=30.0)
        out.append(("c3d Plug-in Gait markers mm", folder / "plug_in_gait.c3d", False))
    except ImportError:   # no c3d package: the reader's message is what a user gets
        pass
    from neural_ik.model.skeleton import JOINTS, KEYPOINTS
    idx = [KEYPOINTS.index(j) for j in JOINTS]
    np.savez(folder / "unity_names.npz", positions=walk[:, idx], joint_names=np.array([sf.UNITY[j] for j in JOINTS]),
             fps=30.0, units="m")
    out.append(("npz a studio rig's joint names, no parents", folder / "unity_names.npz", False))
    from amass_fixtures import walk as amass_walk, write_amass
    write_amass(folder / "amass_walk.npz", *amass_walk(600, fps=60.0), fps=60.0)
    out.append(("npz AMASS SMPL+H rotations, generic skeleton", folder / "amass_walk.npz", False))
    np.savetxt(folder / "kinect_v2.csv", sf.kinect_points(walk).reshape(len(walk), -1), delimiter=",", fmt="%.5f")
    out.append(("csv Kinect v2 headerless Y-up", folder / "kinect_v2.csv", False))
    (folder / "openpose_000000000000_keypoints.json").write_text(json.dumps(
        {"version": 1.3, "people": [{"pose_keypoints_2d": [320.0, 240.0, 0.9] * 25}]}))
    out.append(("BAD json OpenPose 2D image keypoints", folder / "openpose_000000000000_keypoints.json", True))
    return out + _image_fixtures(folder, walk)


def _image_fixtures(folder, walk):
    """MediaPipe image landmarks lifted with --image-size; an OpenPose output folder (refused as 2D)."""
    from image_fixtures import mediapipe_image, write_mediapipe_json, write_openpose_folder

    write_mediapipe_json(folder / "mediapipe_image_landmarks.json", mediapipe_image(walk))
    return [("json MediaPipe image landmarks --image-size", folder / "mediapipe_image_landmarks.json", False,
             ("--image-size", "1920", "1080")),
            ("BAD folder OpenPose output (2D)", write_openpose_folder(folder / "openpose_output"), True)]


def root_as_object_fbx(folder):
    """An FBX whose root bone is the armature object (no pelvis bone; the object moves)."""
    import bpy

    import source_fixtures as sf

    p, _ = sf.humanoid_bvh(Path(folder) / "rootobj.bvh", "mixamo", up="Y", units="m", frames=90)
    bpy.ops.import_anim.bvh(filepath=str(p), global_scale=1.0)
    obj = bpy.context.active_object
    # the object's origin goes where the root bone was (as an FBX root node is): bones move down by its head
    hips = np.array(obj.data.bones["Hips"].head_local)
    bpy.ops.object.mode_set(mode='EDIT')
    eb = obj.data.edit_bones
    for b in eb:
        b.head = np.array(b.head) - hips
        b.tail = np.array(b.tail) - hips
    eb.remove(eb["Hips"])
    bpy.ops.object.mode_set(mode='OBJECT')
    obj.name = "Hips"
    for f in range(1, 91, 5):
        obj.location = hips + np.array([0.0, -0.03 * f, 0.0])
        obj.keyframe_insert("location", frame=f)
    fbx = Path(folder) / "root_as_object.fbx"
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.ops.export_scene.fbx(filepath=str(fbx), use_selection=True, bake_anim=True, add_leaf_bones=False)
    bpy.data.objects.remove(obj)
    return fbx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of each source to bake (default 10)")
    ap.add_argument("--only", default=None, help="only sources whose name contains this")
    ap.add_argument("--json", default=None, help="write the rows there")
    args = ap.parse_args()
    import_package()
    import bpy  # noqa: F401

    from neural_ik.cli.bake import get_solver
    from neural_ik.errors import UserError
    from neural_ik.blender_io.export import export_armature
    from neural_ik.blender_io.targets import load_target
    from neural_ik.readers import KeypointReadError

    tmp = tempfile.mkdtemp(prefix="check_sources_")
    sources = []
    for f in sorted(glob.glob(str(FOREIGN / "*" / "*.bvh"))):
        sources.append((os.path.relpath(f, FOREIGN), Path(f), False))
    if not sources:
        print(f"({FOREIGN} not found: generated fixtures only)")
    fbx = root_as_object_fbx(tmp)
    sources += make_fixtures(tmp)
    sources.append(("fbx root bone as the armature object", fbx, False))
    sources.append(("bvh the project's own export of the meta-rig", None, False))
    if args.only:
        sources = [s for s in sources if args.only in s[0]]
    target = load_target("rigify")
    solver = get_solver(cli_args("x.npz", 0))
    rows = []
    own = Path(tmp) / "own_export.bvh"
    t0 = time.perf_counter()
    print(HEADER)
    for name, path, bad, *flags in sources:
        if path is None:  # the project's own BVH export of the first baked clip, baked back
            if not own.exists():
                continue
            path = own
        row = {"source": name}
        try:
            target = load_target("rigify")
            clip, result = bake_source(path, target, solver, args.seconds, extra=flags[0] if flags else ())
            up, floor = baked_figures(target.obj, result)
            src_floor = source_floor(clip, int(round(args.seconds * clip.fps)))
            row.update(status="REFUSED?" if bad else "ok", mapped=mapped_count(clip), units=clip.units,
                       up_axis=clip.up_axis, shift_cm=round(clip.floor_shift * 100, 1),
                       upright=round(up, 3), source_floor_cm=round(src_floor, 1), floor_cm=round(floor, 1),
                       frames=int(result.frames))
            if not bad and not own.exists():
                start = int(result.frame_start)
                export_armature(target.obj, str(own), start, start + int(result.frames) - 1)
        except (KeypointReadError, UserError) as ex:
            row.update(status="refused" if bad else "FAILED", error=str(ex).split(": ", 1)[-1][:300])
        rows.append(row)
        print(_line(row), flush=True)
    print(f"\n{len(rows)} sources in {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


HEADER = ("| source | status | mapped joints | units | up | floor shift (cm) | upright | source floor (cm) "
          "| baked floor (cm) |\n|---|---|---:|---|---|---:|---:|---:|---:|")


def _line(r):
    if "mapped" in r:
        return (f"| {r['source']:<46} | {r['status']:<7} | {r['mapped']:>2}/22 | {r['units']:>3} | {r['up_axis']:>2} "
                f"| {r['shift_cm']:+7.1f} | {r['upright'] * 100:5.1f}% | {r['source_floor_cm']:+6.1f} "
                f"| {r['floor_cm']:+6.1f} |")
    return f"| {r['source']:<46} | {r['status']:<7} | {r.get('error', '')} |"


if __name__ == "__main__":
    main()
