"""tools/train_gpu.sh: a probe run sizes the training run to the time budget (run here on the CPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _pkg import pkg  # noqa: E402

pkg()
import source_fixtures as sf  # noqa: E402
from training import cache as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_script_trains_from_the_cache_in_the_budget_and_copies_the_results(tmp_path):
    (tmp_path / "foreign" / "studio").mkdir(parents=True)
    sf.humanoid_bvh(tmp_path / "foreign" / "studio" / "walk.bvh", scheme="mixamo", frames=30)
    cache = tmp_path / "cache.npz"
    C.build_cache(cache, cmu_root=tmp_path / "no_cmu", foreign_root=tmp_path / "foreign", foreign_folders=["studio"],
                  log=lambda s: None)
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="cpu", PROBE_STEPS="10", RESULTS=str(tmp_path / "results"),
               TRAIN_ARGS="--threads 1 --batch 32 --width 32 --blocks 1")
    r = subprocess.run(["bash", str(ROOT / "tools" / "train_gpu.sh"), str(cache), "0.001", str(tmp_path / "work")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "train_gpu: 100 steps" in r.stderr
    res = tmp_path / "results"
    assert sorted(p.name for p in res.iterdir()) == ["config.json", "final.pt", "log.jsonl", "neural_ik.pt"]
    assert json.loads((res / "log.jsonl").read_text().splitlines()[-1])["step"] == 100
    w = torch.load(res / "neural_ik.pt", weights_only=True)
    assert w["hparams"]["width"] == 32 and w["format_version"] == 2
