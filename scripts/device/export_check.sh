#!/usr/bin/env bash
# `cortiq export` checked against transformers, on a machine with PyTorch and
# transformers (the GPU machine): for each test model, quantize (1 bpw, a few
# calibration windows, no tuning), export to a float32 Hugging Face folder,
# and run scripts/device/export_check.py on it: the folder loads as the
# original architecture with AutoModelForCausalLM and its perplexity by the
# plain protocol equals `cortiq ppl FILE --json`'s to 1e-4 relative, its token
# ids `cortiq tokenize`'s. Models: tiny-llama-6m, tiny-qwen3-6m (shared
# data), tests/golden/tiny-qwen35 (Qwen3.5's multimodal layout, tied, quantized
# with --include-head: the exported config unties the head at both levels)
# and tests/golden/tiny-qwen35-trained (Qwen3_5ForCausalLM).
#   bash scripts/device/export_check.sh [WORK_DIR]
# Environment: CORTIQ (the binary; default .carry/gpu/bin/cortiq after
# sourcing .carry/gpu/env.sh when scripts/device/pack_gpu.sh made it, else
# build/tools/cortiq/cortiq), DATA (a folder with models/ and text/; default
# .carry when it has models/, else ../shared/data), CTX (256), WINDOWS (16),
# RTOL (1e-4), PREMADE (a folder of NAME.safetensors files quantized
# elsewhere, used instead of quantizing here: a smaller carry than the source
# models). Logs to $OUT (or LOG_DIR, default WORK_DIR).
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/gpu/env.sh ] && source .carry/gpu/env.sh
if [ -z "${CORTIQ:-}" ]; then
  CORTIQ=build/tools/cortiq/cortiq
  [ -x .carry/gpu/bin/cortiq ] && CORTIQ=.carry/gpu/bin/cortiq
fi
if [ -z "${DATA:-}" ]; then
  DATA=../shared/data
  [ -d .carry/models ] && DATA=.carry
fi
W=${1:-/tmp/export-check}
LOG=${LOG_DIR:-${OUT:-$W}}
CTX=${CTX:-256}
WINDOWS=${WINDOWS:-16}
TEXT=$DATA/text/tinystories-valid.txt
CALIB=$DATA/text/tinystories-calib.txt
mkdir -p "$W" "$LOG"
export OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1
failed=0

check() {  # NAME MODEL_DIR [QUANTIZE FLAGS...]
  local name=$1 model=$2
  shift 2
  local q=$W/$name.safetensors hf=$W/$name-hf
  echo "== $name ($model)"
  if [ -n "${PREMADE:-}" ] && [ -f "$PREMADE/$name.safetensors" ]; then
    cp "$PREMADE/$name.safetensors" "$q"
  elif ! "$CORTIQ" quantize "$model" --bpw 1 --calib "$CALIB" --samples 16 --seqlen 128 \
      --tune none --device cpu -q --force -o "$q" "$@" > "$LOG/$name.quantize.log" 2>&1; then
    echo "  quantize FAILED"; tail -3 "$LOG/$name.quantize.log"; failed=1; return
  fi
  if ! "$CORTIQ" export "$q" "$hf" --dtype f32 --force > "$LOG/$name.export.log" 2>&1; then
    echo "  export FAILED"; cat "$LOG/$name.export.log"; failed=1; return
  fi
  head -1 "$LOG/$name.export.log"
  "$CORTIQ" ppl "$q" --text "$TEXT" --ctx "$CTX" --max-windows "$WINDOWS" --device cpu --json \
    --quiet > "$W/$name.ppl.json" 2> "$LOG/$name.ppl.log" || { echo "  cortiq ppl FAILED"; failed=1; return; }
  "$CORTIQ" tokenize "$q" --text "$TEXT" --ids > "$W/$name.ids.json" \
    || { echo "  cortiq tokenize FAILED"; failed=1; return; }
  python3 scripts/device/export_check.py "$hf" --text "$TEXT" --ref "$W/$name.ppl.json" \
    --ids "$W/$name.ids.json" --ctx "$CTX" --max-windows "$WINDOWS" --rtol "${RTOL:-1e-4}" \
    2>&1 | tee "$LOG/$name.check.log" | grep -v -i "warn"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
}

check tiny-llama-6m "$DATA/models/tiny-llama-6m"
check tiny-qwen3-6m "$DATA/models/tiny-qwen3-6m"
check tiny-qwen35 tests/golden/tiny-qwen35 --include-head
check tiny-qwen35-trained tests/golden/tiny-qwen35-trained
[ $failed -eq 0 ] && echo "export check: all PASS" || echo "export check: FAILED"
exit $failed
