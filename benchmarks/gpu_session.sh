#!/usr/bin/env bash
# The checks of one lent GPU session, as one short script: the CUDA tests, then bench_gpu.py (the
# tree factorisation, then the dense normal matrix for comparison).
#
#   bash benchmarks/gpu_session.sh        (repository root; python3 with a CUDA torch; OUT: where logs go)
#
# Each step has its own time limit, so one that hangs leaves the others their turn; the logs are
# written as they go (a run cut short still brings back what it printed).
set -u
OUT="${OUT:-/tmp/neural_ik_gpu}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    "$PY" -c "import sys, numpy, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'numpy', numpy.__version__, 'gpu', torch.cuda.is_available())"
    echo "cpu cores: $(nproc)"
} 2>&1 | tee "$OUT/machine.txt"
timeout "${TEST_SECONDS:-120}" "$PY" -m pytest -q -p no:cacheprovider -rs \
    tests/pure/test_rig_solve_device.py tests/pure/test_inference_device.py tests/pure/test_fk.py \
    tests/pure/test_inference.py tests/pure/test_numpy_solve.py 2>&1 | tee "$OUT/tests.txt"
timeout "${BENCH_SECONDS:-240}" "$PY" benchmarks/bench_gpu.py --device cuda --budget 2 \
    ${BAKE_FRAMES:+--bake-frames "$BAKE_FRAMES"} --json "$OUT/gpu.json" 2>&1 | tee "$OUT/bench.txt"
timeout "${DENSE_SECONDS:-90}" "$PY" benchmarks/bench_gpu.py --device cuda --budget 1 --bake-frames 0 --dense-solve \
    --json "$OUT/gpu_dense.json" 2>&1 | tee "$OUT/bench_dense.txt"
