#!/usr/bin/env bash
# On a GPU machine: does quantize --device gpu write the same bytes when the
# GPU is shared? The same command alone, then again beside a second quantize
# of another budget on the same GPU; the two files compared byte for byte.
# Exits non-zero when they differ. Binaries and data from pack_gpu.sh.
#   bash scripts/device/shared_gpu_bytes.sh [MODEL [FLAGS...]]   (default: tiny-llama-6m, defaults)
set -u
source .carry/gpu/env.sh
C=.carry/gpu/bin/cortiq M=.carry/models T=.carry/text
model=${1:-tiny-llama-6m}
shift || true
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
q() {  # OUT BPW [FLAGS...]: one quantize with the defaults (tuning on)
  local out=$1 bpw=$2
  shift 2
  $C quantize "$M/$model" --bpw "$bpw" --device gpu --calib "$T/tinystories-calib.txt" \
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
  exit 1
fi
