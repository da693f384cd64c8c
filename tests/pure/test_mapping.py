"""Automatic bone mapping, mapping JSON and presets (plain numpy; the Rigify
meta-rig is read once with bpy)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model.skeleton import JOINTS  # noqa: E402
from neural_ik.retarget import presets  # noqa: E402
from neural_ik.retarget.mapping import BoneMapping, auto_map, humanoid_check, parse_name  # noqa: E402
from rigs import CONVENTION_NAMES, humanoid, rigify_metarig_description  # noqa: E402

_SLOT = {"clavicle": "clavicle", "upperarm": "upperarm", "forearm": "forearm", "hand": "hand",
         "thigh": "thigh", "calf": "calf", "foot": "foot", "toe": "toe"}
_SIDE = {"L": {"Side": "Left", "side": "left", "S": "L", "s": "l"},
         "R": {"Side": "Right", "side": "right", "S": "R", "s": "r"}}


def expected(convention, spine=3, neck=1, clavicles=True, toes=True):
    """Expected canonical -> bone mapping from the convention's slot table."""
    names = CONVENTION_NAMES[convention]
    exp = {"pelvis": names["pelvis"], "head": names["head"]}
    sp = names["spine"](spine)
    if spine == 2:
        exp.update(spine1=sp[0], spine3=sp[1])
    elif spine >= 3:
        mid = min(max(int(round((spine - 1) / 3.0)), 1), spine - 2)
        exp.update(spine1=sp[0], spine2=sp[mid], spine3=sp[-1])
    if neck:
        exp["neck"] = names["neck"](neck)[0]
    for S, s in (("L", "l"), ("R", "r")):
        for slot, j in _SLOT.items():
            if (slot == "clavicle" and not clavicles) or (slot == "toe" and not toes):
                continue
            exp[f"{j}_{s}"] = names[slot].format(k=0, **_SIDE[S])
    return exp


@pytest.mark.parametrize("convention", sorted(CONVENTION_NAMES))
def test_auto_map_conventions(convention):
    rig = humanoid(convention)
    m = auto_map(rig)
    assert m.entries == expected(convention)
    assert humanoid_check(m) == []
    assert m.validate(rig) == []
    assert all(0 < m.confidence[j] <= 1 for j in m.entries)
    assert all(m.reasons[j] for j in m.entries)


@pytest.mark.parametrize("convention", ["mixamo", "unreal", "smpl", "vrm_spec", "cc"])
@pytest.mark.parametrize("spine,neck", [(2, 1), (4, 1), (5, 2), (1, 0)])
def test_spine_and_neck_counts(convention, spine, neck):
    rig = humanoid(convention, spine=spine, neck=neck, clavicles=False, toes=False,
                   pose="A", axes="random")
    m = auto_map(rig)
    exp = expected(convention, spine, neck, clavicles=False, toes=False)
    if spine == 1:
        exp["spine3"] = CONVENTION_NAMES[convention]["spine"](1)[0]
    assert m.entries == exp
    assert humanoid_check(m) == []
    n_used = min(spine, 3) + (1 if neck else 0)
    assert len(m.extra_spine) == spine + neck - n_used
    assert set(m.unmapped()) >= {"clavicle_l", "clavicle_r", "toe_l", "toe_r"}


def test_smpl_shoulder_is_upper_arm_but_mixamo_shoulder_is_clavicle():
    smpl = auto_map(humanoid("smpl"))
    assert smpl.entries["upperarm_l"] == "L_Shoulder"
    assert smpl.entries["clavicle_l"] == "L_Collar"
    assert smpl.entries["hand_l"] == "L_Wrist" and smpl.entries["toe_l"] == "L_Foot"
    mix = auto_map(humanoid("mixamo"))
    assert mix.entries["clavicle_l"] == "mixamorig:LeftShoulder"
    assert mix.entries["upperarm_l"] == "mixamorig:LeftArm"
    # no clavicles: SMPL-named shoulder still the upper arm, by position
    smpl2 = auto_map(humanoid("smpl", clavicles=False))
    assert smpl2.entries["upperarm_l"] == "L_Shoulder" and "clavicle_l" not in smpl2.entries


def test_twist_and_helper_bones_reported_not_mapped():
    rig = humanoid("unreal", twist=True, ik=True)
    m = auto_map(rig)
    mapped = set(m.entries.values())
    assert not any(b.startswith("ik_") for b in mapped)
    assert m.twist["upperarm_l"] == ["upperarm_twist_01_l"]
    assert m.twist["forearm_r"] == ["lowerarm_twist_01_r"]
    assert m.twist["thigh_l"] == ["thigh_twist_01_l"]
    # Rigify-style in-chain segments and MMD in-chain twist
    m = auto_map(humanoid("rigify_deform"))
    assert m.entries["forearm_l"] == "DEF-forearm.L"
    assert m.twist["upperarm_l"] == ["DEF-upper_arm.L.001"]
    assert m.twist["forearm_l"] == ["DEF-forearm.L.001"]
    m = auto_map(humanoid("mmd"))
    assert m.entries["upperarm_l"] == "arm_L" and m.twist["upperarm_l"] == ["arm twist_L"]


def test_rigify_metarig():
    rig = rigify_metarig_description()
    m = auto_map(rig)
    exp = {"pelvis": "spine", "spine1": "spine.001", "spine2": "spine.002", "spine3": "spine.003",
           "neck": "spine.004", "head": "spine.006"}
    for s, S in (("l", "L"), ("r", "R")):
        exp.update({f"clavicle_{s}": f"shoulder.{S}", f"upperarm_{s}": f"upper_arm.{S}",
                    f"forearm_{s}": f"forearm.{S}", f"hand_{s}": f"hand.{S}",
                    f"thigh_{s}": f"thigh.{S}", f"calf_{s}": f"shin.{S}", f"foot_{s}": f"foot.{S}",
                    f"toe_{s}": f"toe.{S}"})
    assert m.entries == exp
    assert m.extra_spine == ["spine.005"]
    assert humanoid_check(m) == [] and m.validate(rig) == []
    # the stock meta-rig's mapping is right: no joint of it is reported as unsure (< 0.6)
    assert min(m.confidence.values()) >= 0.6, m.confidence
    assert m.confidence["head"] == m.confidence["neck"] == 0.85


@pytest.mark.parametrize("name,side,core", [
    ("mixamorig:LeftForeArm", "L", "forearm"), ("DEF-upper_arm.L.001", "L", "upperarm"),
    ("CC_Base_R_Upperarm", "R", "upperarm"), ("J_Bip_C_UpperChest", "C", "upperchest"),
    ("leftUpperArm", "L", "upperarm"), ("Left arm", "L", "arm"), ("UpperArm_L", "L", "upperarm"),
    ("Bip01 R UpperArm", "R", "upperarm"), ("upperarm_twist_01_l", "L", "upperarmtwist"),
    ("hand.R", "R", "hand"), ("L_Shoulder", "L", "shoulder"), ("LHipJoint", "L", "hipjoint"),
    ("thigh left", "L", "thigh"),
])
def test_parse_name(name, side, core):
    p = parse_name(name)
    assert (p.side, p.core) == (side, core)


@pytest.mark.parametrize("name,kind", [
    ("upperarm_twist_01_l", "twist"), ("ik_hand_l", "helper"), ("LeftHandIndex1", "ignore"),
    ("HeadTop_End", "ignore"), ("heel.02.L", "ignore"), ("MCH-forearm_ik.L", "helper"),
    ("ORG-hand.L", "helper"), ("mixamorig:LeftArm", "body"), ("breast.L", "ignore"),
])
def test_parse_kind(name, kind):
    assert parse_name(name).kind == kind


def test_humanoid_check_and_validate_errors():
    rig = humanoid("mixamo")
    m = auto_map(rig)
    bad = BoneMapping.from_dict(m.to_dict())
    del bad.entries["hand_l"]
    bad.entries["forearm_r"] = bad.entries["forearm_l"]
    bad.entries["head"] = "nope"
    errs = humanoid_check(bad)
    assert any("hand_l" in e for e in errs)
    verrs = bad.validate(rig)
    assert any("nope" in e for e in verrs)
    assert any("mapped to both" in e for e in verrs)
    # non-humanoid: a chain of unnamed bones
    import numpy as np
    from neural_ik.retarget.rig import RigDescription
    n = 4
    heads = np.array([[0, 0, i] for i in range(n)], float)
    junk = RigDescription([f"Bone.{i:03d}" for i in range(n)], [-1, 0, 1, 2],
                          np.tile(np.eye(4), (n, 1, 1)), heads, heads + [0, 0, 1])
    assert len(humanoid_check(auto_map(junk))) >= 10


def test_mapping_json_roundtrip_and_presets(tmp_path):
    rig = humanoid("unreal")
    m = auto_map(rig)
    m2 = BoneMapping.from_json(m.to_json())
    assert m2.to_dict() == m.to_dict()
    path = presets.save_preset(tmp_path / "sub" / "ue.json", m, rig, name="UE")
    m3, warnings = presets.load_preset(path, rig)
    assert m3.entries == m.entries and warnings == []
    other = humanoid("mixamo")
    _, warnings = presets.load_preset(path, other)
    assert warnings and any("not in" in w for w in warnings)
    data = presets.preset_to_dict(m, rig)
    assert presets.preset_fit(data, rig) == 1.0 and presets.preset_fit(data, other) == 0.0
    with pytest.raises(ValueError):
        presets.preset_from_dict({"format": "something else"})
    assert set(m.unmapped()) == set(JOINTS) - set(m.entries)


def test_mmd_center_hierarchy():
    """MMD: lower body (legs) and upper body both hang from "center"."""
    from neural_ik.retarget.rig import RigDescription
    rig = humanoid("mmd")
    parents = rig.parents.copy()
    parents[rig.index("upper body")] = rig.index("center")
    mmd = RigDescription(rig.names, parents, rig.matrix_local, rig.head, rig.tail)
    m = auto_map(mmd)
    assert m.entries["pelvis"] == "center"
    assert m.entries["spine1"] == "upper body" and m.entries["thigh_l"] == "leg_L"
    assert humanoid_check(m) == [] and m.validate(mmd) == []


def test_rig_description_basics():
    import numpy as np
    from neural_ik.retarget.rig import RigDescription
    rig = humanoid("mixamo")
    back = RigDescription.from_dict(rig.to_dict())
    assert back.names == rig.names and np.allclose(back.matrix_local, rig.matrix_local)
    # foreach_get buffers are column-major
    flat = rig.matrix_local.transpose(0, 2, 1).reshape(-1)
    parents = [rig.names[p] if p >= 0 else None for p in rig.parents]
    f = RigDescription.from_foreach(rig.names, parents, flat, rig.head.reshape(-1), rig.tail.reshape(-1))
    assert np.allclose(f.matrix_local, rig.matrix_local)
    # Blender's attribute name is accepted too
    w = RigDescription(rig.names, rig.parents, rig.matrix_local, rig.head, rig.tail,
                       matrix_world=np.diag([2.0, 2.0, 2.0, 1.0]))
    assert w.world_matrix[0, 0] == 2.0
    hips, hand = rig.index("mixamorig:Hips"), rig.index("mixamorig:LeftHand")
    assert rig.is_ancestor(hips, hand) and rig.lca(hand, rig.index("mixamorig:RightHand")) == \
        rig.index("mixamorig:Spine2")
    assert all(rig.parents[i] < 0 or rig.order.index(rig.parents[i]) < rig.order.index(i) for i in range(len(rig)))


def test_root_bone_became_the_object_is_explained():
    """A rig whose legs and spine are separate root bones: no pelvis, and the message says why."""
    from neural_ik.retarget.rig import RigDescription

    rig = humanoid("mixamo")
    keep = [i for i, n in enumerate(rig.names) if n != "mixamorig:Hips"]
    old = {i: k for k, i in enumerate(keep)}
    hips = rig.index("mixamorig:Hips")
    parents = [-1 if rig.parents[i] in (hips, -1) else old[rig.parents[i]] for i in keep]
    cut = RigDescription([rig.names[i] for i in keep], parents, rig.matrix_local[keep], rig.head[keep],
                         rig.tail[keep])
    m = auto_map(cut)
    assert "pelvis" not in m.entries and m.entries["thigh_l"] == "mixamorig:LeftUpLeg"
    assert any("became the armature object" in e for e in humanoid_check(m))


@pytest.mark.parametrize("preset,convention", [("MIXAMO", "mixamo"), ("UE_MANNEQUIN", "unreal"),
                                               ("CHARACTER_CREATOR", "cc"), ("VROID", "vrm")])
def test_builtin_presets_are_what_auto_map_finds(preset, convention):
    """A built-in preset maps a rig of its naming scheme as Auto-Map does, and fits it."""
    rig = humanoid(convention)
    mapping, missing = presets.builtin_mapping(preset, rig)
    assert missing == [] and mapping.validate(rig) == [] and humanoid_check(mapping) == []
    assert mapping.entries == auto_map(rig).entries


def test_builtin_preset_on_another_scheme_lists_the_missing_bones():
    mapping, missing = presets.builtin_mapping("VROID", humanoid("mixamo"))
    assert mapping.entries == {} and "J_Bip_C_Hips" in missing and "J_Bip_L_Hand" in missing
    meta, missing = presets.builtin_mapping("RIGIFY_METARIG", rigify_metarig_description())
    assert missing == [] and len(meta.entries) == len(JOINTS) and meta.validate(rigify_metarig_description()) == []


def test_the_cli_reads_a_preset_the_target_panel_saved(tmp_path):
    """``--mapping`` takes the UI's saved preset file as it takes a plain mapping (one file, both front ends)."""
    from neural_ik.cli.arguments import load_bone_mapping
    from neural_ik.errors import UserError

    rig = rigify_metarig_description()
    mapping = auto_map(rig)
    path = tmp_path / "meta.json"
    presets.save_preset(path, mapping, rig, name="meta")
    assert load_bone_mapping(str(path)).entries == mapping.entries
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "neural_ik.bone_mapping", "version": 1}')
    with pytest.raises(UserError, match="without its 'mapping'"):
        load_bone_mapping(str(broken))
