#!/usr/bin/env bash
# On a GPU machine: the results matrix with the GPU encoder and GPU perplexity,
# continued from an earlier JSONL (.carry/gpu/results_prev.jsonl) so a run that
# runs out of time loses nothing: run it again with the returned file.
#   [CALIB=NAME] [SAMPLES=N] bash scripts/device/run_matrix_gpu.sh "MODELS" "METHODS" "BPWS" [SECONDS]
set -u
source .carry/gpu/env.sh
G=.carry/gpu
export OMP_WAIT_POLICY=passive CORTIQ=$G/bin/cortiq JOBS=${JOBS:-4} THREADS=${THREADS:-4} PPL_DEVICE=gpu
cp .carry/gpu/results_prev.jsonl $OUT/results.jsonl 2>/dev/null || touch $OUT/results.jsonl
texts="tinystories-valid austen-heldout kjv-heldout"
# its own process group, so that the time limit stops every run it started
# (a run cut short appends nothing)
setsid bash scripts/results/run_matrix.sh $OUT/results.jsonl .carry "$1" "$2" "$3" "$texts" gpu "${SAMPLES:-64}" \
  2> $OUT/matrix.log &
pid=$!
timeout "${4:-500}" tail --pid=$pid -f /dev/null || { kill -- -$pid 2>/dev/null; sleep 1; }
tail -5 $OUT/matrix.log
wc -l $OUT/results.jsonl
