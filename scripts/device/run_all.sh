#!/usr/bin/env bash
# One run on a GPU machine: CUDA parity tests, GPU benchmarks and the tiny-llama
# results matrix (GPU encoder, CPU forward pass). Logs go to $OUT.
set -u
source .carry/gpu/env.sh
G=.carry/gpu
export OMP_WAIT_POLICY=passive
nvidia-smi -L
timeout 90 $G/bin/test_cuda_encoder > $OUT/test_cuda.log 2>&1; echo "test_cuda_encoder rc=$?"
grep -E "PASSED|FAILED|OK \]|SKIP" $OUT/test_cuda.log | tail -30
timeout 30 $G/bin/cortiq bench --m 512 --n 1536 --bpw 1.0 --device gpu > $OUT/bench_cli.log 2>&1
tail -8 $OUT/bench_cli.log
timeout ${BENCH_S:-170} $G/bin/bench_encode_gpu --sizes ${SIZES:-2048x8192,4096x4096,11008x4096} --layer-dims ${LAYER:-2048,5632} > $OUT/bench_gpu.log 2>&1
echo "bench_encode_gpu rc=$?"; cat $OUT/bench_gpu.log | cut -c1-220 | tail -40
export CORTIQ=$G/bin/cortiq
timeout ${MATRIX_S:-240} bash scripts/results/run_matrix.sh $OUT/results.jsonl .carry "tiny-llama-6m" "nvg" "1.0 2.0 0.55 0.8 1.5" "tinystories-valid" gpu 64
timeout 100 bash scripts/results/run_matrix.sh $OUT/results.jsonl .carry "tiny-llama-6m" "svid rtn-sign nvg-noknots" "1.0 2.0" "tinystories-valid" gpu 64
wc -l $OUT/results.jsonl; cut -c1-300 $OUT/results.jsonl
