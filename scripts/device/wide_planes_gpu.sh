#!/usr/bin/env bash
# On a GPU machine: the decode with t's wide planes against the
# four-launch route, the GPU tests (both routes), and the ITQ trace of one
# 4096×11008 tensor. Logs in $OUT (the ≤ 8 files that come back: decode.log,
# bench_blr.log, the variant's bench log, itq_trace.log, all_logs.tgz).
set -u
# the main tables with the wide planes; the four launches as the variant
CORTIQ_T_PLANES=wide TESTS="test_blr_linear_gpu test_forward_gpu test_qwen35_gpu test_calib_gpu" \
  VARIANTS="CORTIQ_T_PLANES=launch" bash scripts/device/decode_gpu.sh > $OUT/decode.log 2>&1
rc=$?
echo "decode_gpu rc=$rc" >> $OUT/decode.log
source .carry/gpu/env.sh
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
for t in test_forward_gpu test_qwen35_gpu; do
  CORTIQ_T_PLANES=launch timeout 200 .carry/gpu/bin/$t > $OUT/launch_$t.log 2>&1
  r=$?; [ $r -ne 0 ] && rc=1
  echo "t launch: $t rc=$r $(grep -E '^\[  (PASSED|FAILED)' $OUT/launch_$t.log | tr '\n' ' ')" >> $OUT/decode.log
done
CORTIQ_ITQ_TRACE=1 timeout ${ITQ_S:-150} .carry/gpu/bin/bench_encode_gpu --sizes 4096x11008 --bpw 1.0 \
  --gptq-group 64 > $OUT/itq_bench.log 2> $OUT/itq_trace.log
echo "itq rc=$?" >> $OUT/decode.log
cd $OUT && tar czf all_logs.tgz *.log && ls | grep -v -E '^(all_logs.tgz|bench_blr.log|decode.log|itq_trace.log|bench_CORTIQ.*log)$' | xargs rm -f
exit $rc
