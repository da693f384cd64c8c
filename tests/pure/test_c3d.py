"""C3D files (optical motion capture): points, rate, first frame, units, Plug-in Gait markers."""

import sys
from pathlib import Path

import numpy as np
import pytest

from _pkg import pkg

pkg()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
pytest.importorskip("c3d")
from c3d_fixtures import plug_in_gait_markers, write_c3d  # noqa: E402
from neural_ik.cli.demo_motion import walk_keypoints  # noqa: E402
from neural_ik.model.skeleton import KEYPOINTS  # noqa: E402
from neural_ik.readers import EXTENSIONS, KeypointReadError, read_keypoints, to_canonical  # noqa: E402

K = {n: i for i, n in enumerate(KEYPOINTS)}


@pytest.fixture(scope="module")
def walk():
    return walk_keypoints(2.0, 100.0)


def test_plug_in_gait_c3d_gives_joint_centres(walk, tmp_path):
    assert ".c3d" in EXTENSIONS
    path = write_c3d(tmp_path / "gait.c3d", plug_in_gait_markers(walk), fps=100.0, first_frame=40,
                     extra={"BLOCK1": np.tile([3.0, 4.0, 0.1], (len(walk), 1))},
                     missing={"LTOE": range(10, 13)})
    clip = read_keypoints(path, ground=False)
    assert clip.fps == 100.0 and clip.num_frames == len(walk) and clip.units == "mm"
    assert clip.up_axis == "Z"
    text = " ".join(clip.warnings)
    assert "starts at frame 40" in text and "not body markers left out" in text and "regressed" in text
    assert "BLOCK1" not in clip.joint_names
    kp, mask = to_canonical(clip)
    for j in ("pelvis", "thigh_l", "thigh_r", "calf_l", "calf_r", "foot_l", "foot_r", "hand_l", "hand_r",
              "neck", "head"):
        assert mask[:, K[j]].all(), j
        err = np.linalg.norm(kp[:, K[j]] - walk[:, K[j]], axis=-1).max()
        assert err < 0.02, (j, err)          # the regressions invert exactly; the pelvis keypoint within 2 cm
    assert not mask[10:13, K["toe_tip_l"]].any() or np.isfinite(kp[10:13, K["toe_tip_l"]]).all()


def test_c3d_errors_name_the_file(tmp_path):
    bad = tmp_path / "broken.c3d"
    bad.write_bytes(b"\x02\x50" + b"\x00" * 100)
    with pytest.raises(KeypointReadError, match="broken.c3d"):
        read_keypoints(bad)
    empty = tmp_path / "empty.c3d"
    empty.write_bytes(b"")
    with pytest.raises(KeypointReadError, match="empty.c3d"):
        read_keypoints(empty)


def test_c3d_without_the_package_says_how_to_install(tmp_path, monkeypatch, walk):
    path = write_c3d(tmp_path / "gait.c3d", plug_in_gait_markers(walk[:20]))
    monkeypatch.setitem(sys.modules, "c3d", None)
    with pytest.raises(KeypointReadError, match="pip install c3d"):
        read_keypoints(path)


def test_marker_names_of_other_labs_are_recognised():
    """Qualisys / ISB-style (L_IAS, L_FLE, CV7...) and lower-case side suffixes (ASISr) name the same roles."""
    from neural_ik.readers.markers import marker_roles

    names = ["L_IAS", "R_IAS", "L_IPS", "R_IPS", "L_FLE", "L_FME", "L_FAL", "L_TAM", "L_FCC", "L_FM1", "L_FM5",
             "L_HLE", "L_HME", "L_RSP", "L_UHE", "L_SAJ", "L_HDF", "L_HDB", "CV7", "SNJ", "SXS", "ASISr", "PSISl",
             "EPICl", "boite:gauche_ext"]
    roles = {k: names[j] for k, j in marker_roles(names).items()}
    assert roles[("asis", "L")] == "L_IAS" and roles[("psis", "R")] == "R_IPS"
    assert roles[("knee_lat", "L")] == "L_FLE" and roles[("knee_med", "L")] == "L_FME"
    assert roles[("ankle_lat", "L")] == "L_FAL" and roles[("ankle_med", "L")] == "L_TAM"
    assert roles[("meta1", "L")] == "L_FM1" and roles[("meta5", "L")] == "L_FM5" and roles[("heel", "L")] == "L_FCC"
    assert roles[("elbow_lat", "L")] == "L_HLE" and roles[("wrist_b", "L")] == "L_UHE"
    assert roles[("shoulder", "L")] == "L_SAJ" and roles[("head_front", "L")] == "L_HDF"
    assert roles[("c7", "C")] == "CV7" and roles[("clav", "C")] == "SNJ" and roles[("strn", "C")] == "SXS"
    assert "EPICl" not in roles.values() and "boite:gauche_ext" not in roles.values()


@pytest.mark.parametrize("rename", ["gait2354", "french"])
def test_marker_sets_of_other_models_and_languages(walk, tmp_path, rename):
    """OpenSim's gait2354 (a sacral marker, lateral knee and ankle markers) and French names
    (EIAS, genou, cheville, gauche/droite) give the hips, knees and ankles."""
    from neural_ik.readers.markers import marker_joint_centres

    m = plug_in_gait_markers(walk)
    if rename == "gait2354":
        m["V.Sacral"] = 0.5 * (m.pop("LPSI") + m.pop("RPSI"))
        names = {"LASI": "L.ASIS", "RASI": "R.ASIS", "LKNE": "L.Knee.Lat", "RKNE": "R.Knee.Lat",
                 "LANK": "L.Ankle.Lat", "RANK": "R.Ankle.Lat", "LHEE": "L.Heel", "RHEE": "R.Heel"}
    else:
        names = {"LASI": "EIAS_G", "RASI": "EIAS_D", "LPSI": "EIPS_G", "RPSI": "EIPS_D", "LKNE": "genou_gauche",
                 "RKNE": "genou_droit", "LANK": "cheville_gauche", "RANK": "cheville_droite", "LHEE": "talon_G",
                 "RHEE": "talon_D"}
    m = {names.get(k, k): v for k, v in m.items()}
    order, centres, _found = marker_joint_centres(list(m), np.stack(list(m.values()), 1))
    got = dict(zip(order, np.moveaxis(centres, 1, 0)))
    for key, joint in (("HJC_L", "thigh_l"), ("KJC_R", "calf_r"), ("AJC_L", "foot_l"), ("HEEL_R", "heel_r")):
        assert key in got, (key, order)
        err = np.linalg.norm(got[key] - walk[:, K[joint]], axis=-1).max()
        assert err < (0.03 if rename == "gait2354" else 1e-6), (key, err)
