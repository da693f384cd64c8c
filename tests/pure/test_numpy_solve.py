"""CPU solves without torch: the weights read into numpy, the numpy network and refinement against torch's."""

import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pkg import pkg  # noqa: E402

pkg()
from neural_ik.model import batches as BA, inference as I  # noqa: E402
from neural_ik.model.numpy_net import NumpyNet  # noqa: E402
from neural_ik.model.weights import build_network, load_weights  # noqa: E402
from neural_ik.model.weights_file import read_torch_file  # noqa: E402
from neural_ik.model.skeleton import CANONICAL, KEYPOINTS, keypoints_from_fk_np  # noqa: E402
from training import train as T  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=[("lengths", "positions"), ("offsets", "positions"), ("lengths", "directions")],
                ids=["lengths", "offsets", "directions"])
def weights(request, tmp_path_factory):
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("w") / "tiny.pt"
    net = T.IKNet(48, 2, skeleton_input=request.param[0], pose_input=request.param[1])
    with torch.no_grad():   # (an untrained network's output layer is nearly zero: give it something to say)
        net.out.weight.normal_(0.0, 0.05)
    T.export_weights(net, path, T.TrainConfig(), {})
    return path


@pytest.fixture(scope="module")
def clip():
    d = T.synthetic_pose_data(200, seed=3, sigma_deg=15.0)
    sk = CANONICAL.scaled(0.93)
    return keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), sk), sk


def _same(a, b, path=""):
    if isinstance(b, torch.Tensor):
        ref = b.float().numpy() if b.dtype == torch.bfloat16 else b.numpy()
        assert isinstance(a, np.ndarray) and a.dtype == ref.dtype and a.shape == ref.shape, path
        np.testing.assert_array_equal(a, ref, err_msg=path)
    elif isinstance(b, dict):
        assert set(a) == set(b), path
        for k in b:
            _same(a[k], b[k], f"{path}/{k}")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_weights_file_read_without_torch_as_torch_reads_it(tmp_path):
    _same(read_torch_file(REPO / "weights" / "neural_ik.pt"),
          torch.load(REPO / "weights" / "neural_ik.pt", weights_only=True))
    odd = {"bf16": torch.randn(5, 7).to(torch.bfloat16), "strided": torch.randn(4, 6)[:, 1:5:2],
           "offset": torch.arange(10)[3:], "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(3.5),
           "half": torch.randn(3, 2).half().t(), "nested": [1, (2.5, "x"), {"k": torch.ones(2, dtype=torch.float64)}]}
    torch.save(odd, tmp_path / "odd.pt")
    _same(read_torch_file(tmp_path / "odd.pt"), odd)


def test_weights_file_reader_refuses_code_and_broken_files(tmp_path, weights):
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    # a torch.save archive whose pickle names another global than a tensor's
    data = pickle.dumps({"format": "neural_ik", "x": Boom()}, protocol=2)
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as z:
        z.writestr("evil/data.pkl", data)
        z.writestr("evil/byteorder", "little")
    with pytest.raises(I.WeightsError, match="corrupt or not a weights file.*which a weights file does not"):
        load_weights(tmp_path / "evil.pt")
    raw = Path(weights).read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(I.WeightsError, match="cut.pt: the file is corrupt"):
        load_weights(tmp_path / "cut.pt")
    blob = torch.load(weights, weights_only=True)
    st = dict(blob["state"])
    st["blocks.0.fc1.bias"] = torch.full_like(st["blocks.0.fc1.bias"], float("nan"))
    torch.save(dict(blob, state=st), tmp_path / "nan.pt")
    with pytest.raises(I.WeightsError, match="NaN"):
        load_weights(tmp_path / "nan.pt")
    st = dict(blob["state"])
    del st["out.bias"]
    torch.save(dict(blob, state=st), tmp_path / "missing.pt")
    with pytest.raises(I.WeightsError, match="out.bias"):
        load_weights(tmp_path / "missing.pt")


def test_numpy_network_matches_torch_network(weights, clip):
    kp, sk = clip
    blob = load_weights(weights)
    net, twin = build_network(blob, weights), NumpyNet(blob)
    mask = np.isfinite(kp).all(-1)
    mask[::3, KEYPOINTS.index("hand_l")] = False
    mask[1::4, KEYPOINTS.index("pelvis")] = False
    ori = np.broadcast_to(np.eye(3), (len(kp), 6, 3, 3)).copy()
    omask = np.zeros((len(kp), 6), dtype=bool)
    omask[::2, 0] = omask[::5, 3] = True
    off, eo = (torch.as_tensor(np.asarray(a), dtype=torch.float32) for a in (sk.offsets, sk.end_offsets))
    for o, om in ((None, None), (ori, omask)):
        with torch.no_grad():
            L, root, _ = net.predict(torch.as_tensor(np.where(mask[..., None], kp, 0.0), dtype=torch.float32),
                                     torch.as_tensor(mask), off, eo,
                                     None if o is None else torch.as_tensor(o, dtype=torch.float32),
                                     None if om is None else torch.as_tensor(om))
        Ln, rn = twin.predict(kp, mask, sk, o, om)
        assert Ln.shape == (len(kp), 22, 3, 3) and rn.shape == (len(kp), 3)
        np.testing.assert_allclose(Ln, L.numpy(), atol=2e-5)
        np.testing.assert_allclose(rn, root.numpy(), atol=2e-5)
        one = twin.predict(kp[7:8], mask[7:8], sk, None if o is None else o[7:8], None if om is None else om[7:8])
        np.testing.assert_allclose(one[0][0], Ln[7], atol=1e-6)


@pytest.mark.parametrize("frames", [8, 200], ids=["dense-normal-matrix", "tree-solve"])
def test_numpy_clip_solve_matches_torch_solve(monkeypatch, frames):
    d = T.synthetic_pose_data(frames, seed=11, sigma_deg=20.0)
    sk = CANONICAL.scaled(1.1)
    kp = keypoints_from_fk_np(d.local_rot.numpy(), d.root_pos.numpy(), sk)
    sparse = np.full_like(kp, np.nan)
    eff = [KEYPOINTS.index(n) for n in ("pelvis", "head", "hand_l", "hand_r", "foot_l", "foot_r")]
    sparse[:, eff] = kp[:, eff]
    s = I.Solver(device="cpu", precision="float32")
    results = {}
    for path in ("numpy", "torch"):
        monkeypatch.setattr(BA, "NUMPY_MAX_FRAMES", frames if path == "numpy" else 1)
        results[path] = [s.solve(x, skeleton=sk) for x in (kp, sparse)]
    for x, a, b in zip((kp, sparse), results["numpy"], results["torch"]):
        assert a.mode == b.mode
        # (float64 against float32 steps from the same start: three steps leave a few frames short of
        # their keypoints, and there the two stop up to a few millimetres apart; most meet)
        diff = np.linalg.norm(a.keypoints - b.keypoints, axis=-1)
        assert np.median(diff) < 1e-4 and diff.max() < 5e-3
        assert abs(np.nanmean(a.error_mm) - np.nanmean(b.error_mm)) < 0.05
        assert np.nanmean(a.error_mm) < 1.0


_SOLVE_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
import devpkg
devpkg.import_package()
from neural_ik.model import batches, inference
from neural_ik.model.skeleton import CANONICAL
batches.NUMPY_MAX_FRAMES = 100
kp = np.repeat(CANONICAL.rest_keypoints()[None], {frames}, 0)
kp[:, :, 0] += np.linspace(0.0, 1.0, {frames})[:, None]
res = inference.Solver(device="auto").solve(kp)
assert res.device == "cpu" and np.nanmean(res.error_mm) < 1.0, (res.device, res.error_mm)
print("torch imported" if "torch" in sys.modules else "no torch")
"""


@pytest.mark.parametrize("frames,expected", [(100, "no torch"), (101, "torch imported")])
def test_a_short_cpu_solve_never_imports_torch(frames, expected):
    if torch.cuda.is_available():
        pytest.skip("device auto picks CUDA here")
    out = subprocess.run([sys.executable, "-c", _SOLVE_SCRIPT.format(repo=str(REPO), frames=frames)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


def test_the_cli_help_and_the_user_guide_name_the_numpy_limit():
    limit = BA.NUMPY_MAX_FRAMES
    assert f"clips over {limit} frames" in (REPO / "cli" / "parser.py").read_text()
    assert f"up to {limit:,} frames" in (REPO / "docs" / "user-guide.md").read_text()


def test_a_bake_s_modules_import_no_scipy_linalg():
    """scipy's LAPACK wrappers serve one pose's solve only; importing them cost a bake a tenth of a second."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import devpkg; devpkg.import_package(); "
            "import neural_ik.model.inference, neural_ik.retarget.rigsolve, neural_ik.pipeline.core; "
            "print('scipy.linalg' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_file_the_reader_does_not_know_is_read_by_torch(monkeypatch, weights):
    """A weights file whose pickle names something the reader does not know (another torch version's
    way of saving) is read through torch.load where torch is installed; the same weights come out."""
    from neural_ik.model import weights as W

    want = load_weights(weights)

    def unknown(path):
        raise ValueError("the file holds torch._utils._rebuild_tensor_v9, which a weights file does not")

    monkeypatch.setattr(W, "read_torch_file", unknown)
    got = W.load_weights(weights)
    assert set(got["state"]) == set(want["state"])
    for k, v in want["state"].items():
        np.testing.assert_array_equal(got["state"][k], v)
    bad = Path(weights).with_name("bad.pt")
    with zipfile.ZipFile(bad, "w") as z:   # (an archive torch cannot read either)
        z.writestr("bad/data.pkl", b"not a pickle")
    with pytest.raises(I.WeightsError, match="rebuild_tensor_v9"):
        W.load_weights(bad)
