#!/usr/bin/env bash
# Device call: CUDA tests, then the tiny-llama results matrix continued from
# an earlier JSONL (.carry/results_prev.jsonl) with the GPU encoder.
set -u
source .carry/gpu/env.sh
G=.carry/gpu
export OMP_WAIT_POLICY=passive CORTIQ=$G/bin/cortiq
timeout 40 $G/bin/test_cuda_encoder > $OUT/test_cuda.log 2>&1; grep -E "OK \]|PASSED|FAILED" $OUT/test_cuda.log
cp .carry/results_prev.jsonl $OUT/results.jsonl 2>/dev/null
d=.carry; m=tiny-llama-6m; t=tinystories-valid
timeout ${NVG_S:-100} bash scripts/results/run_matrix.sh $OUT/results.jsonl $d $m "nvg" "1.0 2.0" $t gpu 64
timeout ${RTN_S:-70} bash scripts/results/run_matrix.sh $OUT/results.jsonl $d $m "rtn-sign" "1.0" $t gpu 64
cut -c1-330 $OUT/results.jsonl
