#!/usr/bin/env bash
# The engine's figures on a lent GPU in one run of about 5 minutes on an H100 (the compiled step's two buckets
# about 40 s each of it), written as JSON under $OUT.
#
# The packaged weights cannot travel (64 MiB), so the models are built there with random weights from configs and
# tokenizers exported here, where the weights are (about 11 MiB each):
#
#   python benchmarks/random_model.py export qwen2.5-coder-0.5b gpu/qwen-0.5b
#   python benchmarks/random_model.py export qwen2.5-coder-1.5b gpu/qwen-1.5b
#   python benchmarks/random_model.py export qwen2.5-coder-0.5b gpu/qwen-7b --shape 7b
#   mkdir -p gpu/data/hotpotqa && cp ../shared/datasets/hotpotqa/dev.jsonl gpu/data/hotpotqa/
#   rm gpu/qwen-1.5b/tokenizer.json gpu/qwen-7b/tokenizer.json   # one tokenizer for the three: 22 MiB less to carry
#
# then, with the device tool, carrying gpu/ (and .whl/, the wheels of the packages the machine's image lacks:
# ../.library/device/README.md says how; at the versions .venv holds: dspy gepa json_repair jsonschema
# jsonschema-specifications referencing rpds-py orjson pydantic pydantic_core annotated-types typing-inspection dill
# transformers tokenizers typing_extensions, 21 MiB; the image's torch, 2.11, stays), run
# `bash benchmarks/gpu_check.sh`. What it runs:
#   0. the GPU tests (tests/programs/lm/test_step_cuda.py: the step replayed as CUDA graphs gives the eager step's
#      logits, which are transformers');
#   1. random bfloat16 weights for each model, drawn on the GPU;
#   2. benchmarks/decode_step.py on each: transformers' step, the engine's static step launched kernel by kernel
#      and replayed as CUDA graphs, and on the 0.5B its compiled step replayed (whose buckets take about 40 s each
#      to compile), at 1 and 8 rows, with a profiler trace of each way on the 0.5B;
#   3. benchmarks/lm_throughput.py on the 0.5B: the engine's tokens/s with transformers' step and with its own, side
#      by side, then with its default (DECODE, else auto) tokens/s at 1, 4 and 8 rows and questions per minute at 1
#      and 8 threads;
#   4. with CONTINUOUS=1, benchmarks/continuous_batching.py on the 0.5B: transformers' own continuous batching
#      against the engine.
# At most eight files come back (the device tool's limit): four profiles, a decode step a shape, a throughput.
# A rehearsal on a CPU, to find a broken step before device time is spent on it:
#   DEVICE=cpu SHAPES=qwen-0.5b SLOW=4 bash benchmarks/gpu_check.sh
set -euo pipefail
OUT=${OUT:-runs/gpu-check}
PYTHON=${PYTHON:-python3}
MODELS=${MODELS:-gpu}
DEVICE=${DEVICE:-cuda}
SHAPES=${SHAPES:-qwen-0.5b qwen-7b}  # qwen-1.5b too where there is time: its step cost the 0.5B's
SLOW=${SLOW:-1}  # a factor on every time limit
mkdir -p "$OUT"
if [ -d .whl ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
# ragscale's folders as the package they are when installed (pyproject.toml maps them)
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/ragscale
export PYTHONPATH=/tmp/pkg${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -d "$MODELS/data" ]; then export RAGSCALE_DATA_DIR=$MODELS/data; fi
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  timeout $((240 * SLOW)) $PYTHON -m pytest -q -p no:cacheprovider tests/programs/lm/test_step_cuda.py \
    || echo "THE GPU TESTS FAILED"
fi
first=${SHAPES%% *}
for m in $SHAPES; do
  if [ ! -f "$MODELS/$m/tokenizer.json" ]; then cp "$MODELS/$first/tokenizer.json" "$MODELS/$m/"; fi
  timeout $((150 * SLOW)) $PYTHON benchmarks/random_model.py build "$MODELS/$m" --device "$DEVICE"
done
for m in $SHAPES; do
  extra=() steps=hf,static-nograph,static
  if [ "$m" = qwen-0.5b ]; then extra=(--profile "$OUT/profile") steps=$steps,compiled; fi
  timeout $((150 * SLOW)) $PYTHON benchmarks/decode_step.py --model "$MODELS/$m" --device "$DEVICE" --rows 1,8 \
    --steps "$steps" --repeat 32 "${extra[@]}" --json "$OUT/decode-step-${m#qwen-}.json"
done
layout=$([ "$DEVICE" = cuda ] && echo dense || echo fp32)
RAGSCALE_DECODE=${DECODE:-auto} timeout $((200 * SLOW)) $PYTHON benchmarks/lm_throughput.py \
  --model "$MODELS/qwen-0.5b" --weights "$layout" --layouts "$layout:hf,$layout:static" --limit 16 \
  --json "$OUT/lm-throughput-0.5b.json"
if [ "${CONTINUOUS:-0}" = 1 ]; then
  timeout $((180 * SLOW)) $PYTHON benchmarks/continuous_batching.py --model "$MODELS/qwen-0.5b" --device "$DEVICE" \
    --limit 8 --max-batch-tokens 512,2048 --json "$OUT/continuous-batching-0.5b.json"
fi
