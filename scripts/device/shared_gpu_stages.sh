#!/usr/bin/env bash
# On a GPU machine: which stage of a quantize changes its bytes when the GPU
# is shared? For each stage set (untuned, block tuning, distillation, both,
# --plan auto), scripts/device/shared_gpu_bytes.sh: the same command alone,
# then beside a second quantize of another budget on the same GPU, the two
# files compared byte for byte (a differing pair is copied to $OUT).
# Binaries and data from pack_gpu.sh.
#   bash scripts/device/shared_gpu_stages.sh [MODEL_DIR]   (default: tests/golden/tiny-qwen35-6m)
set -u
here=$(cd "$(dirname "$0")" && pwd)
M=${1:-tests/golden/tiny-qwen35-6m}
export KEEP_DIFF=${OUT:-/tmp}
failed=0
run() {  # NAME [FLAGS...]
  local name=$1 out
  shift
  out=$(KEEP_PREFIX=$name. bash "$here/shared_gpu_bytes.sh" "$M" "$@") || failed=1
  echo "$name: $(echo "$out" | tr '\n' ' ')"
}
S="--samples 64 --seqlen 256"
# shellcheck disable=SC2086
{
  run none --tune none
  run block $S --tune block --tune-epochs 2
  run kd $S --tune kd --kd-epochs 2
  run both $S --tune-epochs 2 --kd-epochs 2
  run plan $S --tune none --plan auto
}
exit $failed
