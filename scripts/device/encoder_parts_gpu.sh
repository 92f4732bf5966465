#!/usr/bin/env bash
# On a GPU machine: where the time of a 4096×11008 tensor goes, stage by
# stage and by the parts of ITQ and ALS ("stage/part"), for tuning variants
# side by side in one run (VARIANTS, default "default,fp32-big"), at column
# groups G (default 64); LAYER=1 adds a 4096/11008 layer. With TESTS="test_cuda_encoder ..." those run first.
# Logs in $OUT.
set -u
source .carry/gpu/env.sh
[ -d .carry/models ] || [ ! -f .carry/models.tar.xz ] || tar -xJf .carry/models.tar.xz -C .carry
export CORTIQ_SHARED_DATA=$PWD/.carry CORTIQ_SOURCE_DIR=$PWD CORTIQ_CLI=$PWD/.carry/gpu/bin/cortiq
rc=0
for t in ${TESTS:-}; do
  timeout ${TEST_S:-300} .carry/gpu/bin/$t > $OUT/$t.log 2>&1
  r=$?; [ $r -ne 0 ] && rc=1
  echo "$t rc=$r $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')" >> $OUT/summary.log
done
timeout ${BENCH_S:-400} .carry/gpu/bin/bench_encode_gpu --sizes "" --bpw 1.0 \
  --gptq-group ${G:-64} --variants ${SIZE:-4096x11008} \
  --variant-names ${VARIANTS:-default,fp32-big} --profile-variants > $OUT/parts.log 2>&1
r=$?; [ $r -ne 0 ] && rc=1
echo "bench rc=$r" >> $OUT/summary.log
if [ -n "${LAYER:-}" ]; then  # LAYER=1: the seven tensors of a 4096/11008 layer (encode_many)
  timeout ${LAYER_S:-300} .carry/gpu/bin/bench_encode_gpu --sizes "" --bpw 1.0 --layer \
    --gptq-group ${G:-64} > $OUT/layer.log 2>&1
  r=$?; [ $r -ne 0 ] && rc=1
  echo "layer rc=$r" >> $OUT/summary.log
fi
exit $rc
