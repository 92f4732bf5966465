#!/usr/bin/env bash
# On a GPU machine: the input-side column search by rounds
# (--gptq-multi Q) against the exact scan on the H200.
#   PHASE=bench:   its GPU tests, then bench_encode_gpu on one 4096×11008
#                  tensor and on a 4096/11008 layer with the searches of
#                  QS (--gptq-multi) × GPTQ_GROUPS (--gptq-group; not GROUPS, which bash keeps for the user's groups) side by side
#                  (logs in $OUT), e.g. QS=0 GPTQ_GROUPS=1,16 TEST_FILTER='CudaKnots.GptqVGroups*';
#   PHASE=quality: both 6M models quantized with each search on three disjoint
#                  thirds of tinystories-calib, 0.55 / 1.0 / 2.0 bpw, perplexity
#                  on tinystories-valid and austen-heldout
#                  (scripts/results/gptq_multi_thirds.sh, $OUT/thirds/results.txt).
# Exits non-zero when a test fails.
set -u
source .carry/gpu/env.sh
[ -d .carry/models/tiny-llama-6m ] || tar -xJf .carry/models.tar.xz -C .carry
B=$PWD/.carry/gpu/bin
export OMP_WAIT_POLICY=passive
rc=0
case "${PHASE:-bench}" in
bench)
  timeout 300 $B/test_cuda_knots --gtest_filter="${TEST_FILTER:-CudaKnots.GptqV*}" > $OUT/test_gptq.log 2>&1 || rc=1
  grep -E '^\[  (PASSED|FAILED) |flips cpu|Failure' $OUT/test_gptq.log | head -30
  timeout ${BENCH_S:-420} $B/bench_encode_gpu --sizes ${SIZES:-4096x11008} --gptq-multi ${QS:-0,8} \
    --gptq-group ${GPTQ_GROUPS:-1} \
    ${LAYER---layer} > $OUT/bench_multi.log 2>&1
  grep -E 'tensor|==|gptq-multi|x|profile' $OUT/bench_multi.log | grep -v "^\s*\[" | tail -30
  ;;
quality)
  CORTIQ=$B/cortiq DATA=$PWD/.carry DEVICE=gpu JOBS=${JOBS:-6} WORK=$OUT/thirds QS="${QS:-0 8}" \
    timeout ${QUALITY_S:-560} bash scripts/results/gptq_multi_thirds.sh > /dev/null 2>&1
  rm -f $OUT/thirds/*.safetensors $OUT/thirds/calib*.txt
  cat $OUT/thirds/results.txt
  ;;
esac
exit $rc
