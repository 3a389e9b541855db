#!/usr/bin/env bash
# The engine's figures on a lent GPU in one run of under 8 minutes, written as JSON under $OUT.
#
# The packaged weights cannot travel (64 MiB), so the models are built there with random weights from configs and
# tokenizers exported here, where the weights are (about 11 MiB each):
#
#   python benchmarks/random_model.py export qwen2.5-coder-0.5b gpu/qwen-0.5b
#   python benchmarks/random_model.py export qwen2.5-coder-1.5b gpu/qwen-1.5b
#   python benchmarks/random_model.py export qwen2.5-coder-0.5b gpu/qwen-7b --shape 7b
#
# then, with the device tool, carrying gpu/ (and .whl/, the wheels of the packages the machine's image lacks:
# ../.library/device/README.md says how), run `bash benchmarks/gpu_check.sh`. What it runs:
#   1. random bfloat16 weights for each model, drawn on the GPU;
#   2. benchmarks/decode_step.py on each: transformers' step, the engine's static step and its compiled one
#      (a CUDA graph) at 1 and 8 rows, and a profiler trace of each on the 0.5B;
#   3. benchmarks/lm_throughput.py on the 0.5B with the compiled step: tokens/s at 1, 4 and 8 rows and DRAG-shaped
#      questions per minute at 1 and 8 threads.
# A rehearsal on a CPU, to find a broken step before device time is spent on it:
#   DEVICE=cpu SHAPES=qwen-0.5b SLOW=4 bash benchmarks/gpu_check.sh
set -euo pipefail
OUT=${OUT:-runs/gpu-check}
PYTHON=${PYTHON:-python3}
MODELS=${MODELS:-gpu}
DEVICE=${DEVICE:-cuda}
SHAPES=${SHAPES:-qwen-0.5b qwen-1.5b qwen-7b}
SLOW=${SLOW:-1}  # a factor on every time limit
mkdir -p "$OUT"
if [ -d .whl ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
# ragscale's folders as the package they are when installed (pyproject.toml maps them)
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/ragscale
export PYTHONPATH=/tmp/pkg${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
fi
for m in $SHAPES; do
  timeout $((150 * SLOW)) $PYTHON benchmarks/random_model.py build "$MODELS/$m" --device "$DEVICE"
done
for m in $SHAPES; do
  profile=()
  if [ "$m" = qwen-0.5b ]; then profile=(--profile "$OUT/profile"); fi
  timeout $((120 * SLOW)) $PYTHON benchmarks/decode_step.py --model "$MODELS/$m" --device "$DEVICE" --rows 1,8 \
    --repeat 32 "${profile[@]}" --json "$OUT/decode-step-${m#qwen-}.json"
done
RAGSCALE_DECODE=compiled timeout $((150 * SLOW)) $PYTHON benchmarks/lm_throughput.py --model "$MODELS/qwen-0.5b" \
  --layouts '' --limit 16 --json "$OUT/lm-throughput-0.5b.json"
