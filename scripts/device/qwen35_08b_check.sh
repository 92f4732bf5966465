#!/usr/bin/env bash
# On a GPU machine: the Qwen3.5-0.8B-shaped check on the GPU machine.
#   1. scripts/golden/qwen35_08b_ref.py makes a random-initialised model with
#      the real 0.8B text configuration (BF16, tied embeddings, vocab 248320)
#      and transformers' float32 logits of a few hundred tokens, on the GPU;
#   2. test_qwen35_gpu (RealSizedModelMatchesTransformers, with
#      CORTIQ_Q35_CHECK_DIR) compares cortiq's CUDA logits with them (1e-3
#      relative) and times a decode step and a DeltaNet block;
#   3. `cortiq quantize --device gpu --bpw 1.0` on the model, timed (the tiny
#      model's tokenizer: its ids are valid in the larger vocabulary), then
#      `cortiq ppl --device gpu` on the output.
# Binaries from scripts/device/pack_gpu.sh (its .carry/gpu/env.sh, or GPU_ENV,
# is sourced); logs to $OUT (or LOG_DIR).
#   bash scripts/device/qwen35_08b_check.sh [WORK_DIR]
# Environment: BIN (the packed binaries' folder, default .carry/gpu/bin), CALIB
# (calibration text, default .carry/text/tinystories-calib.txt), TOKENS (300),
# QUANT_S (the quantize run's time limit in seconds, default 1200),
# QUANT_ARGS (more quantize flags).
set -u
here=$(cd "$(dirname "$0")" && pwd)
env_sh=${GPU_ENV:-.carry/gpu/env.sh}
[ -f "$env_sh" ] && source "$env_sh"
BIN=${BIN:-.carry/gpu/bin}
CALIB=${CALIB:-.carry/text/tinystories-calib.txt}
LOG=${LOG_DIR:-${OUT:-/tmp}}
W=${1:-/tmp/q35-08b}
mkdir -p "$W" "$LOG"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive
failed=0

t0=$(date +%s)
python3 "$here/../golden/qwen35_08b_ref.py" "$W/model" "${TOKENS:-300}" > "$LOG/q35_ref.log" 2>&1 \
  || { echo "reference model: FAILED (see q35_ref.log)"; tail -20 "$LOG/q35_ref.log"; exit 1; }
echo "reference model and logits: $(( $(date +%s) - t0 )) s"
cp -f tests/golden/tiny-qwen35/tokenizer.json tests/golden/tiny-qwen35/tokenizer_config.json \
  "$W/model/"

CORTIQ_Q35_CHECK_DIR="$W/model" timeout 300 "$BIN/test_qwen35_gpu" \
  --gtest_filter='*RealSizedModelMatchesTransformers*' > "$LOG/q35_check.log" 2>&1 || failed=1
grep -E "0.8B-shaped|FAILED|Failure|PASSED" "$LOG/q35_check.log"

t1=$(date +%s)
timeout "${QUANT_S:-1200}" "$BIN/cortiq" quantize "$W/model" --bpw 1.0 --calib "$CALIB" \
  -o "$W/q.safetensors" --device gpu --force ${QUANT_ARGS:-} > "$LOG/q35_quantize.log" 2>&1
rc=$?
echo "quantize --device gpu --bpw 1.0: rc=$rc, $(( $(date +%s) - t1 )) s"
tail -c 1500 "$LOG/q35_quantize.log" | tr '\r' '\n' | tail -4
if [ $rc -eq 0 ]; then
  timeout 120 "$BIN/cortiq" ppl "$W/q.safetensors" --text "$CALIB" --ctx 512 --max-windows 8 \
    --device gpu --quiet > "$LOG/q35_ppl.log" 2>&1 || failed=1
  tail -2 "$LOG/q35_ppl.log"
else
  failed=1
fi
exit $failed
