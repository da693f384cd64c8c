"""Every ``--export`` type of ``bake`` and ``batch`` on this Blender (issue 35, item 1; in the LTS subset).

``.gltf`` asked for an export format that Blender 5.0 does not offer (a
traceback after the whole bake); an export failing in ``batch`` left the
clip's other exports behind while its row listed none.
"""

import json

from test_cli_bake import needs_weights, partial_files, weights_args, write_walk_npz
from test_cli_hardening import _file_size_limit

pytestmark = needs_weights


def _check_exports(folder, stem, frames):
    import bpy

    from _pkg import pkg

    pkg()
    from neural_ik.model.bvh import read_bvh

    gltf = json.loads((folder / (stem + ".gltf")).read_text())
    assert gltf["animations"] and all(b["uri"].startswith("data:") for b in gltf["buffers"]), "not one file"
    assert not list(folder.glob("*.bin"))
    assert (folder / (stem + ".glb")).read_bytes()[:4] == b"glTF"
    assert (folder / (stem + ".fbx")).read_bytes().startswith(b"Kaydara FBX Binary")
    assert read_bvh(str(folder / (stem + ".bvh"))).num_frames == frames
    # Blender reads its own glTF back with the baked animation
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True, load_ui=False)
    bpy.ops.import_scene.gltf(filepath=str(folder / (stem + ".gltf")))
    assert any(o.type == "ARMATURE" for o in bpy.context.scene.objects) and len(bpy.data.actions) >= 1


def test_bake_writes_gltf_glb_fbx_bvh(run_cli, tmp_path):
    src = tmp_path / "walk.npz"
    write_walk_npz(src, seconds=0.5)
    out = tmp_path / "out"
    exports = [a for ext in ("gltf", "glb", "fbx", "bvh") for a in ("--export", out / ("walk." + ext))]
    result = run_cli("bake", src, "--target", "rigify", *exports, "--report", tmp_path / "r.json", "-q",
                     *weights_args())
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    row = json.loads((tmp_path / "r.json").read_text())["clips"][0]
    assert sorted(row["outputs"]) == sorted(str(out / ("walk." + e)) for e in ("gltf", "glb", "fbx", "bvh"))
    _check_exports(out, "walk", 15)
    assert not partial_files(out)


def test_batch_exports_all_or_none_of_a_clip(run_cli, tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    write_walk_npz(clips / "walk.npz", seconds=0.5)
    out = tmp_path / "out"
    result = run_cli("batch", clips, "--target", "rigify", "--out-dir", out, "--no-blend", "--export", "gltf",
                     "--export", "glb", "--export", "fbx", "--export", "bvh", "-q", *weights_args())
    assert result.returncode == 0, result.stderr
    row = json.loads((out / "report.json").read_text())["clips"][0]
    assert row["status"] == "done" and len(row["outputs"]) == 4
    _check_exports(out, "walk", 15)
    # the .fbx does not fit (a full disk): the .bvh written before it goes too, the row lists none
    out = tmp_path / "out2"
    result = run_cli("batch", clips, "--target", "rigify", "--out-dir", out, "--no-blend", "--export", "bvh",
                     "--export", "fbx", "-q", *weights_args(), preexec_fn=_file_size_limit(400_000))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "walk.fbx" in result.stderr
    row = json.loads((out / "report.json").read_text())["clips"][0]
    assert row["status"] == "failed" and row["outputs"] == [] and "walk.fbx" in row["error"]
    assert not list(out.glob("walk.*")) and not partial_files(out)
