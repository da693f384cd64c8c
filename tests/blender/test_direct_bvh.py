"""A BVH target baked without Blender (``readers/bvh_armature.py``) against Blender's own import.

``batch --no-blend --export bvh`` (and ``bake --export OUT.bvh`` without
``--out``) onto a BVH skeleton never imports ``bpy``: the target's armature
is built as Blender's BVH importer builds it, the bake runs on it, and the
BVH is written from the keys. Checked here against Blender itself:

- the armature (bone names and order, parents, rest matrices, heads, tails,
  connections, rotation modes, the object's scale) equals the imported one
  for skeletons of several axes, units, rest orientations and edge cases
  (a zero OFFSET, a zero-length End Site, a joint with neither child nor End
  Site, a joint with three children);
- a batch written without Blender equals, value for value, the same batch
  baked in Blender (a ``.blend`` asked for as well, so keys go into an
  action and the BVH is written from it), and its process never imports
  ``bpy``;
- a skeleton the importer would build otherwise (a joint name Blender
  shortens) goes through Blender's importer.
"""

import importlib
import json
import os
import sys

import numpy as np
import pytest

from test_cli_bake import REPO, write_walk_bvh

sys.path.insert(0, str(REPO / "tests"))

EDGE_BVH = """HIERARCHY
ROOT Hips
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
  JOINT Chest
  {
    OFFSET 0 10 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    JOINT Neck
    {
      OFFSET 0 0 0
      CHANNELS 3 Xrotation Yrotation Zrotation
      JOINT Head
      {
        OFFSET 0 8 1
        CHANNELS 3 Yrotation Xrotation Zrotation
        End Site
        {
          OFFSET 0 0 0
        }
      }
    }
    JOINT LeftArm
    {
      OFFSET 5 8 0
      CHANNELS 3 Zrotation Yrotation Xrotation
      JOINT LeftHand
      {
        OFFSET 12 0 0
        CHANNELS 3 Zrotation Xrotation Yrotation
      }
    }
    JOINT RightArm
    {
      OFFSET -5 8 0
      CHANNELS 3 Zrotation Xrotation Yrotation
      End Site
      {
        OFFSET -12 -1 0
      }
    }
  }
  JOINT LeftLeg
  {
    OFFSET 4 -2 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    End Site
    {
      OFFSET 0 -40 2
    }
  }
}
MOTION
Frames: 1
Frame Time: 0.0333333
0 90 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
"""


@pytest.fixture(scope="module")
def mods(ext):
    return {name: importlib.import_module(ext.__name__ + "." + name)
            for name in ("readers.bvh_armature", "model.bvh", "readers.base", "blender_io.targets", "blender_io.rig")}


def _cases(tmp_path):
    from source_fixtures import humanoid_bvh

    cases = []
    for scheme, up, units, orients in (("mixamo", "Y", "cm", "none"), ("studio", "Z", "m", "A"),
                                       ("asf", "-Y", "in", "random"), ("metarig", "-Z", "mm", "none")):
        path = tmp_path / "{}_{}.bvh".format(scheme, up.replace("-", "neg"))
        humanoid_bvh(path, scheme, up, units, orients, frames=2)
        cases.append((path, units, up))
    edge = tmp_path / "edge.bvh"
    edge.write_text(EDGE_BVH)
    cases.append((edge, "cm", "Y"))
    return cases


def test_file_armature_is_blenders_import(mods, tmp_path):
    import bpy

    ba, bvh, base = mods["readers.bvh_armature"], mods["model.bvh"], mods["readers.base"]
    targets, rigmod = mods["blender_io.targets"], mods["blender_io.rig"]
    for path, units, up in _cases(tmp_path):
        target = targets.load_target(str(path), units=units, up_axis=up)
        obj = target.obj
        want = rigmod.rig_description(obj)
        got = ba.bvh_armature(bvh.read_bvh(str(path)), up, base.UNITS[units], path.stem,
                              blender_version=bpy.app.version)
        assert not isinstance(got, str), got
        rig = got.rig
        size = float(np.abs(want.head).max())
        assert rig.names == want.names, path.name
        assert (rig.parents == want.parents).all(), path.name
        assert np.allclose(rig.matrix_local[:, :3, :3], want.matrix_local[:, :3, :3], atol=1e-5), path.name
        for a, b in ((rig.matrix_local[:, :3, 3], want.matrix_local[:, :3, 3]), (rig.head, want.head),
                     (rig.tail, want.tail)):
            assert np.abs(a - b).max() <= 1e-6 * size + 1e-6, path.name
        assert np.allclose(rig.world_matrix, want.world_matrix, atol=1e-7), path.name
        connected = np.array([b.use_connect for b in obj.data.bones])
        assert (got.connected == connected).all(), path.name
        assert got.rotation_modes == [obj.pose.bones[n].rotation_mode for n in want.names], path.name
        assert got.name == obj.name
        if path.name == "edge.bvh":   # the edge cases are there
            assert connected.any() and len(set(got.rotation_modes)) >= 3
            lengths = np.linalg.norm(want.tail - want.head, axis=1)
            assert np.isclose(lengths[want.index("Head")], 0.1, atol=1e-6)   # a zero End Site: 0.1 along Y
        bpy.data.objects.remove(obj)


def test_the_importers_of_42_and_45_differ_on_joints_with_several_children(mods, tmp_path):
    """A hips joint whose three children's OFFSETs cancel: Blender 4.2's importer gives it a long bone
    (its local tail leaves out the joint's OFFSET), 4.5 and later a 0.1 stub; without a version, no
    armature (the CLI then imports the file with Blender)."""
    from source_fixtures import humanoid_bvh

    ba, bvh, base = mods["readers.bvh_armature"], mods["model.bvh"], mods["readers.base"]
    path = tmp_path / "mixamo.bvh"
    humanoid_bvh(path, "mixamo", "Y", "cm", "none", frames=1)
    data = bvh.read_bvh(str(path))
    arms = {v: ba.bvh_armature(data, "Y", base.UNITS["cm"], "mixamo", blender_version=v)
            for v in ((4, 2), (4, 5), (5, 0))}
    hips = {v: float(np.linalg.norm(a.rig.tail[0] - a.rig.head[0])) for v, a in arms.items()}
    assert np.isclose(hips[(4, 5)], 0.1, atol=1e-5) and np.isclose(hips[(5, 0)], 0.1, atol=1e-5)
    assert hips[(4, 2)] > 10.0
    for version in (None, (4, 3)):
        assert isinstance(ba.bvh_armature(data, "Y", base.UNITS["cm"], "mixamo", blender_version=version), str)
    # a skeleton both importers build alike needs no version
    path2 = tmp_path / "edge.bvh"
    path2.write_text(EDGE_BVH)
    assert not isinstance(ba.bvh_armature(bvh.read_bvh(str(path2)), "Y", 0.01, "edge"), str)


def _bvhs(folder):
    return sorted(p.name for p in folder.glob("*.bvh"))


def test_batch_without_blender_writes_blenders_file(run_cli, mods, tmp_path):
    from source_fixtures import humanoid_bvh

    bvh = mods["model.bvh"]
    src = tmp_path / "clips"
    src.mkdir()
    write_walk_bvh(src / "walk.bvh", seconds=2.0)
    write_walk_bvh(src / "short.bvh", seconds=0.5, fps=24.0)
    humanoid_bvh(src / "other.bvh", "asf", "Z", "in", "random", frames=40)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "studio", "Y", "cm", "A", frames=1)     # other names, proportions, units, rest
    common = ["--target", target, "--export", "bvh", "-q"]
    direct, blender = tmp_path / "direct", tmp_path / "blender"
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    r1 = run_cli("batch", src, "--out-dir", direct, "--no-blend", *common, env=env)
    assert r1.returncode == 0, r1.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in r1.stderr.splitlines() if line.startswith("import time:")]
    assert imported and "bpy" not in imported
    r2 = run_cli("batch", src, "--out-dir", blender, *common)      # a .blend: keys go into actions
    assert r2.returncode == 0, r2.stderr
    assert (blender / "batch.blend").is_file() and not (direct / "batch.blend").exists()
    assert _bvhs(direct) == _bvhs(blender) == ["other.bvh", "short.bvh", "walk.bvh"]
    for name in _bvhs(direct):
        a, b = bvh.read_bvh(str(direct / name)), bvh.read_bvh(str(blender / name))
        assert a.names == b.names and a.channels == b.channels and (a.parents == b.parents).all()
        assert np.abs(a.offsets - b.offsets).max() < 1e-4
        assert [i for i, _ in a.end_sites] == [i for i, _ in b.end_sites]
        assert a.num_frames == b.num_frames and abs(a.frame_time - b.frame_time) < 1e-7
        # the same keys: degrees and centimetres agree to what the single-precision rest matrices
        # leave (Blender's are float32): a skeleton file's own rotations within 0.001; a clip
        # through the network and its eight steps of the solve within 0.02 but for a few bones'
        # turns the rows hold weakly, up to 0.25 degrees apart on 1.3 % of the values
        d = np.abs(a.motion - b.motion)
        assert d.max() < 0.5 and np.mean(d > 0.02) < 0.02, (name, d.max(), np.mean(d > 0.02))
    rows = {os.path.basename(r["source"]): r for r in json.loads((direct / "report.json").read_text())["clips"]}
    rows_b = {os.path.basename(r["source"]): r for r in json.loads((blender / "report.json").read_text())["clips"]}
    for name, row in rows.items():
        assert row["status"] == "done" and row["action"] is None
        for key in ("frames", "fps", "knees_backwards"):
            assert row[key] == rows_b[name][key], (name, key)
        # (the figures as the report rounds them: the float32 rest matrices may move the last digit)
        assert abs(row["floor_error_cm"] - rows_b[name]["floor_error_cm"]) <= 0.011, name
        assert abs(row["bone_direction_error_deg"] - rows_b[name]["bone_direction_error_deg"]) <= 0.0011, name


def test_a_skeleton_blender_would_rename_goes_through_blender(run_cli, mods, tmp_path):
    from source_fixtures import humanoid_bvh

    long_name = "Hips_" + "x" * 70          # Blender keeps 63 bytes of a bone name
    target = tmp_path / "long_names.bvh"
    humanoid_bvh(target, frames=1)
    target.write_text(target.read_text().replace("ROOT Hips", "ROOT " + long_name))
    bvh, ba, base = mods["model.bvh"], mods["readers.bvh_armature"], mods["readers.base"]
    reason = ba.bvh_armature(bvh.read_bvh(str(target)), "Y", base.UNITS["cm"], "long_names")
    assert isinstance(reason, str) and "longer than Blender's bone names" in reason
    assert mods["blender_io.targets"].direct_target(str(target), units="cm", up_axis="Y") is None
    src = tmp_path / "clips"
    src.mkdir()
    write_walk_bvh(src / "walk.bvh", seconds=0.5)
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    out = tmp_path / "out"
    r = run_cli("batch", src, "--target", target, "--out-dir", out, "--no-blend", "--export", "bvh", "-q", env=env)
    assert r.returncode == 0, r.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    assert "bpy" in imported
    written = bvh.read_bvh(str(out / "walk.bvh"))
    assert written.names[0] == long_name[:63] and written.num_frames == 15


def test_bake_without_blender_when_it_writes_bvh_only(run_cli, mods, tmp_path):
    from source_fixtures import humanoid_bvh

    bvh = mods["model.bvh"]
    write_walk_bvh(tmp_path / "walk.bvh", seconds=1.0)
    target = tmp_path / "rig.bvh"
    humanoid_bvh(target, "asf", "Z", "in", "none", frames=1)
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    runs = {}
    for label, extra in (("direct", []), ("blend", ["--out", tmp_path / "scene.blend"]),
                         ("fbx", ["--export", tmp_path / "also.fbx"])):
        out = tmp_path / "{}.bvh".format(label)
        r = run_cli("bake", tmp_path / "walk.bvh", "--target", target, "--export", out, *extra,
                    "--report", tmp_path / "{}.json".format(label), env=env)
        assert r.returncode == 0, r.stderr
        imported = [ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")]
        runs[label] = (bvh.read_bvh(str(out)), "bpy" in imported)
    assert runs["direct"][1] is False and runs["blend"][1] is True and runs["fbx"][1] is True
    assert (tmp_path / "scene.blend").is_file() and (tmp_path / "also.fbx").is_file()
    a = runs["direct"][0]
    for label in ("blend", "fbx"):
        b = runs[label][0]
        assert a.names == b.names and a.channels == b.channels
        assert np.abs(a.motion - b.motion).max() < 0.02
    row = json.loads((tmp_path / "direct.json").read_text())["clips"][0]
    assert row["status"] == "done" and row["action"] is None and row["outputs"] == [str(tmp_path / "direct.bvh")]
    assert row["start"] == "source"             # the source skeleton's rotations: no network
    assert row["devices"] == {"network": None, "rig_solve": "cpu"}
