"""``benchmarks/check_sources.py`` (reads sources with no flags, bakes them onto the meta-rig through the
CLI's path, reads the baked pose back from Blender) runs to its table, on one generated source."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_check_sources_runs_on_a_generated_source():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "check_sources.py"), "--only", "mixamo Y-up cm",
                        "--seconds", "0.5"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| bvh mixamo Y-up cm")]
    assert len(rows) == 1, r.stdout[-3000:]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "ok" and cells[2] == "22/22", cells
    # upright on every baked frame, the baked rig's feet on the floor (the figure read back from Blender)
    assert cells[6] == "100.0%" and abs(float(cells[8])) < 3.0, cells


def test_bench_memory_runs_on_short_clips():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_memory.py"), "--base-frames", "60",
                        "--frames", "120", "--output", "none"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| 120 |")]
    assert len(rows) == 1, r.stdout
    assert float(rows[0].split("|")[2]) > 100   # a whole process's peak, in MB
