#!/usr/bin/env bash
# On a GPU machine: does quantize --device gpu write the same bytes when the
# GPU is shared? The same command alone, then again beside a second quantize
# of another budget on the same GPU; the two files compared byte for byte.
# Exits non-zero when they differ (the pair is copied to $KEEP_DIFF when set,
# its names led by $KEEP_PREFIX).
# Binaries and data from pack_gpu.sh.
#   bash scripts/device/shared_gpu_bytes.sh [MODEL [FLAGS...]]   (default: tiny-llama-6m, defaults)
# MODEL: a model of the carry (.carry/models/MODEL) or a folder.
set -u
source .carry/gpu/env.sh
C=.carry/gpu/bin/cortiq T=.carry/text
model=${1:-tiny-llama-6m}
shift || true
[ -d "$model" ] || model=.carry/models/$model
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
q() {  # OUT BPW [FLAGS...]: one quantize with the defaults (tuning on)
  local out=$1 bpw=$2
  shift 2
  $C quantize "$model" --bpw "$bpw" --device gpu --calib "$T/tinystories-calib.txt" \
    -o "$out" --force -q "$@" > "$out.log" 2>&1
}
t0=$(date +%s)
q $d/alone.st 0.9 "$@" || { echo "alone: failed: $(tail -2 $d/alone.st.log)"; exit 1; }
t1=$(date +%s)
q $d/beside.st 0.9 "$@" & a=$!
q $d/other.st 0.55 "$@" & b=$!
wait $a || { echo "beside: failed: $(tail -2 $d/beside.st.log)"; exit 1; }
wait $b
t2=$(date +%s)
echo "alone $((t1 - t0)) s, beside another quantize $((t2 - t1)) s"
if cmp -s $d/alone.st $d/beside.st; then
  echo "identical: $(stat -c %s $d/alone.st) bytes, sha256 $(sha256sum $d/alone.st | cut -c1-16)"
else
  echo "DIFFERENT: $(cmp $d/alone.st $d/beside.st | head -1)"
  if [ -n "${KEEP_DIFF:-}" ]; then
    cp $d/alone.st "$KEEP_DIFF/${KEEP_PREFIX:-}alone.st"
    cp $d/beside.st "$KEEP_DIFF/${KEEP_PREFIX:-}beside.st"
  fi
  exit 1
fi
