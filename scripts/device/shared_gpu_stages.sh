#!/usr/bin/env bash
# On a GPU machine: which stage of a quantize changes its bytes when the GPU
# is shared? For each stage set (untuned, block tuning, distillation, both,
# --plan auto), the same command alone, then beside a second quantize of
# another budget on the same GPU; the two files compared byte for byte (the
# differing pairs are copied to $OUT). Binaries and data from pack_gpu.sh.
#   bash scripts/device/shared_gpu_stages.sh [MODEL_DIR]   (default: tests/golden/tiny-qwen35-6m)
set -u
source .carry/gpu/env.sh
C=.carry/gpu/bin/cortiq T=.carry/text M=${1:-tests/golden/tiny-qwen35-6m}
OUT=${OUT:-/tmp}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
q() {  # OUT BPW [FLAGS...]
  local out=$1 bpw=$2
  shift 2
  $C quantize "$M" --bpw "$bpw" --device gpu --calib "$T/tinystories-calib.txt" -o "$out" \
    --force -q "$@" > "$out.log" 2>&1
}
run() {  # NAME [FLAGS...]
  local name=$1 t0 t1 t2 a b r
  shift
  t0=$(date +%s)
  q "$d/$name.alone" 0.9 "$@" || { echo "$name alone: failed: $(tail -2 "$d/$name.alone.log")"; return; }
  t1=$(date +%s)
  q "$d/$name.beside" 0.9 "$@" & a=$!
  q "$d/$name.other" 0.55 "$@" & b=$!
  wait $a
  wait $b
  t2=$(date +%s)
  if cmp -s "$d/$name.alone" "$d/$name.beside"; then
    r=identical
  else
    r="DIFFERENT: $(cmp "$d/$name.alone" "$d/$name.beside" | head -1)"
    cp "$d/$name.alone" "$d/$name.beside" "$OUT/"
  fi
  echo "$name: alone $((t1 - t0)) s, beside $((t2 - t1)) s: $r"
}
S="--samples 64 --seqlen 256"
run none --tune none
run block $S --tune block --tune-epochs 2
run kd $S --tune kd --kd-epochs 2
run both $S --tune-epochs 2 --kd-epochs 2
run plan $S --tune none --plan auto
