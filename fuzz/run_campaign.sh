#!/usr/bin/env bash
# A long fuzz campaign: each target of build-fuzz/fuzz (or $FUZZ_BIN) for at
# least $EXECS executions (default 10 million) spread over $JOBS processes,
# from its committed seed corpus; prints, per target, the executions, the
# coverage of the final corpus (cov: edges, ft: features) and the crashes.
#
#   bash fuzz/run_campaign.sh [target ...]      (default: all)
#   EXECS=10000000 JOBS=$(nproc) OUT=/tmp/fuzz-campaign FUZZ_BIN=build-fuzz/fuzz
#   MAX_TIME=S: stop each target after S seconds even short of $EXECS
#
# New corpus entries and crash reproducers are left in $OUT/<target>/.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${FUZZ_BIN:-build-fuzz/fuzz}")
RUNNER=${FUZZ_RUNNER:-}  # e.g. a bundled ld-linux with --library-path
EXECS=${EXECS:-10000000}
JOBS=${JOBS:-$(nproc)}
MAX_TIME=${MAX_TIME:-0}
OUT=$(realpath -m "${OUT:-/tmp/fuzz-campaign}")
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors shard_index tokenizer_load tokenizer_encode config blr journal)
export CORTIQ_SOURCE_DIR=${CORTIQ_SOURCE_DIR:-$PWD}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
per_job=$(( (EXECS + JOBS - 1) / JOBS ))
for t in "${targets[@]}"; do
  case $t in tokenizer_load) max_len=20000 ;; *) max_len=4096 ;; esac
  dict=-dict=$PWD/fuzz/json.dict
  [ "$t" != blr ] || dict=-runs=$per_job  # (no dictionary: a repeated flag instead)
  d=$OUT/$t
  rm -rf "$d"; mkdir -p "$d/corpus" "$d/logs"
  cp fuzz/corpus/$t/* "$d/corpus/"
  start=$(date +%s)
  # $JOBS independent processes on one corpus folder (each reloads what the
  # others add), started here rather than by -jobs so that $RUNNER wraps each.
  for j in $(seq 1 "$JOBS"); do
    $RUNNER "$BIN/fuzz_$t" -runs=$per_job -max_total_time=$MAX_TIME -seed=$j -max_len=$max_len -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$d/" \
      "$dict" "$d/corpus" \
      > "$d/logs/fuzz-$j.log" 2>&1 &
  done
  wait
  secs=$(( $(date +%s) - start ))
  execs=$(cat "$d"/logs/fuzz-*.log | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
  final=$($RUNNER "$BIN/fuzz_$t" -runs=0 -max_len=$max_len "$d/corpus" 2>&1 | grep -E "INITED|DONE" | tail -1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<< "$final")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<< "$final")
  crashes=$(ls "$d" | grep -cE '^(crash|leak|timeout|oom)-')
  slow=$(ls "$d" | grep -cE '^slow-unit-')
  echo "fuzz_$t: execs $execs in ${secs}s over $JOBS jobs, cov $cov ft $ft, corpus $(ls "$d/corpus" | wc -l), crashes $crashes, slow units $slow (a paused run counts as one)"
  for c in $(ls "$d" | grep -E '^(crash|leak|timeout|oom)-'); do
    echo "  $c: $(grep -h -m1 -E 'ERROR|runtime error|terminate|SUMMARY' "$d"/logs/fuzz-*.log | head -1)"
  done
done
