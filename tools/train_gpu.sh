#!/usr/bin/env bash
# Train the network on one GPU from the compact training cache, in a fixed wall-clock budget.
#
#   tools/train_gpu.sh CACHE [MINUTES] [WORK]
#
# A short probe run measures this machine's steps per second; the real run then gets as many steps
# as fit in MINUTES (default 7: one device command may run 10 minutes, start-up and probe included)
# with the recipe of the shipped weights, and exports WORK/neural_ik.pt (WORK default
# .cache/train_gpu). Environment:
#   PYTHON       interpreter with torch (default python3, the GPU machine's)
#   DEVICE       torch device (default cuda; cpu for a smoke test)
#   PROBE_STEPS  steps of the probe run (default 300)
#   TRAIN_ARGS   more training.train options (e.g. "--batch 2048 --lr 2e-3")
#   RESULTS      a folder to copy the weights, final checkpoint, log and config into (e.g. $OUT)
set -euo pipefail
cache=${1:?usage: tools/train_gpu.sh CACHE [MINUTES] [WORK]}
minutes=${2:-7}
work=${3:-.cache/train_gpu}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# the recipe of weights/MODEL_CARD.md; the step count comes from the probe
recipe=(--cache "$cache" --blocks 4 --width 512 --weight-decay 0.1 --p-variety 0.8 --p-missing 0.5
        --p-video 0.3 --p-fit-skeleton 0.5 --device "${DEVICE:-cuda}" --no-progress)
# shellcheck disable=SC2206
extra=(${TRAIN_ARGS:-})
probe=${PROBE_STEPS:-300}
"$py" -m training.train "${recipe[@]}" "${extra[@]}" --steps "$probe" --log-every $(( (probe + 2) / 3 )) \
    --eval-every 1000000 --ckpt-every 1000000 --out "$work/probe" --fresh
steps=$("$py" - "$work/probe/log.jsonl" "$minutes" <<'EOF'
import json
import sys

recs = [json.loads(line) for line in open(sys.argv[1])]
a, b = recs[0], recs[-1]
rate = (b["step"] - a["step"]) / max(b["seconds"] - a["seconds"], 1e-6)
print(max(100, int(rate * float(sys.argv[2]) * 60.0 * 0.95) // 100 * 100))
EOF
)
echo "train_gpu: $steps steps in about $minutes minutes on ${DEVICE:-cuda}" >&2
"$py" -m training.train "${recipe[@]}" "${extra[@]}" --steps "$steps" --out "$work" --fresh \
    --export "$work/neural_ik.pt"
if [ -n "${RESULTS:-}" ]; then
    mkdir -p "$RESULTS"
    cp "$work/neural_ik.pt" "$work/final.pt" "$work/log.jsonl" "$work/config.json" "$RESULTS/"
fi
