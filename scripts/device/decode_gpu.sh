#!/usr/bin/env bash
# On a GPU machine: the packed decode kernels on the H200.
#   1. test_blr_linear_gpu (exits non-zero when it fails);
#   2. bench_blr_gpu: per-layer decode with the plane (default), row and span
#      kernels side by side, prefill, and the 32-layer model ($OUT/bench_blr.log);
#   3. the plane kernels with other settings (VARIANTS, each an environment
#      assignment; default: at most 4 warps per 16 rows) on the three shapes at
#      1 bpw;
#   4. tiny-llama-6m compressed at 1 bpw on the GPU, then `cortiq generate
#      --device gpu` (512 tokens, greedy) with each decode and with --dequant.
set -u
source .carry/gpu/env.sh
[ -d .carry/models/tiny-llama-6m ] || tar -xJf .carry/models.tar.xz -C .carry
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
export OMP_WAIT_POLICY=passive
B=$PWD/.carry/gpu/bin
rc=0
TESTS="${TESTS:-test_blr_linear_gpu}" bash scripts/device/run_tests_gpu.sh || rc=1
timeout 200 $B/bench_blr_gpu --bpw ${BPW:-0.55,1.0,2.0} --paths 1,2 --reps 100 > $OUT/bench_blr.log 2>&1
grep -E "^\| (4096|11008)×(4096|11008) \| [0-9.]+ \| [12] \||planes|fp16 cuBLAS" $OUT/bench_blr.log
for v in ${VARIANTS-CORTIQ_MMA_SPLIT=4}; do
  env $v timeout 100 $B/bench_blr_gpu --bpw 1.0 --paths 1,2 --shapes 4096x4096,4096x11008,11008x4096 \
    --reps 100 --layers 32 > $OUT/bench_${v//[^A-Za-z0-9]/_}.log 2>&1
  echo "$v"
  grep -E "^\| (4096|11008)×(4096|11008) \| 1.00 \| [12] \||grouped \(the" $OUT/bench_${v//[^A-Za-z0-9]/_}.log
done
q=$OUT/tiny-llama-1bpw.safetensors
timeout 120 $B/cortiq quantize .carry/models/tiny-llama-6m --calib .carry/text/tinystories-calib.txt \
  --bpw 1.0 --device gpu --tune none --samples 32 -o $q > $OUT/quantize.log 2>&1 || echo "quantize failed"
for d in planes rows spans; do
  echo "decode $d: $(CORTIQ_BLR_DECODE=$d timeout 60 $B/cortiq generate $q --device gpu --prompt 'Once upon a time' \
    --max-tokens 512 --ignore-eos --json 2>/dev/null | tr -d '\n' | grep -oE '"(tokens_per_second|weight_bytes|device_bytes|text)": ?[^,]{0,60}' | tr '\n' ' ')"
done
for tp in wide launch; do
echo "decode planes, t $tp: $(CORTIQ_T_PLANES=$tp timeout 60 $B/cortiq generate $q --device gpu --prompt 'Once upon a time' \
  --max-tokens 512 --ignore-eos --json 2>/dev/null | tr -d '\n' | grep -oE '"(tokens_per_second|weight_bytes|device_bytes|text)": ?[^,]{0,60}' | tr '\n' ' ')"
done
echo "dequant: $(timeout 60 $B/cortiq generate $q --device gpu --dequant --prompt 'Once upon a time' --max-tokens 512 \
  --ignore-eos --json 2>/dev/null | tr -d '\n' | grep -oE '"(tokens_per_second|weight_bytes|device_bytes|text)": ?[^,]{0,60}' | tr '\n' ' ')"
rm -f $q
exit $rc
