#!/usr/bin/env bash
# Device call (issue 14): the fused decode against the three launches.
#   1. bench_launch_floor_gpu: what a chain of launches and a grid barrier
#      cost on this GPU, at 4096×11008's bytes and at a quarter of them;
#   2. test_blr_linear_gpu (the fused decode's bits against the three
#      launches, and the CPU), exits non-zero when it fails;
#   3. bench_blr_gpu at 1 bpw (three shapes, P = 1 and 2, the whole model),
#      then the whole model with each of VARIANTS (environment assignments).
set -u
source .carry/gpu/env.sh
B=$PWD/.carry/gpu/bin
rc=0
timeout 100 $B/bench_launch_floor_gpu --reps 200 | tee $OUT/floor.log
timeout 60 $B/bench_launch_floor_gpu --bytes 1.1e6,0.5e6 --reps 200 > $OUT/floor_small.log 2>&1
tail -13 $OUT/floor_small.log
timeout ${TEST_S:-200} $B/test_blr_linear_gpu > $OUT/test_blr_linear_gpu.log 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED) |Failure|group " $OUT/test_blr_linear_gpu.log | head -20
timeout 200 $B/bench_blr_gpu --shapes 4096x11008,11008x4096,4096x4096 --bpw 1.0 --paths 1,2 \
  --reps 100 --layers 32 --tiles 1024 > $OUT/bench_blr.log 2>&1
grep -E "^\| [0-9]+×[0-9]+ \| 1.00 \| [12] \||packed|fp16 cuBLAS|launched" $OUT/bench_blr.log
for v in ${VARIANTS-CORTIQ_FUSED_BLOCKS=2}; do
  env $v timeout 100 $B/bench_blr_gpu --shapes 4096x11008 --bpw 1.0 --paths 1 --reps 100 \
    --layers 32 --tiles 1024 > $OUT/bench_${v//[^A-Za-z0-9]/_}.log 2>&1
  echo "$v"
  grep -E "^\| [0-9]+×[0-9]+ \| 1.00 \| [12] \||fused|fp16 cuBLAS" $OUT/bench_${v//[^A-Za-z0-9]/_}.log
done
exit $rc
