#!/usr/bin/env bash
# The demo's quantize alone and beside two busy loops (another job holding
# the cores), timed side by side: how gracefully cortiq shares a machine.
#   bash scripts/bench/shared_machine.sh [--spin]
# --spin also times spinning waits beside the loops (a thread per core,
# spinning while it waits), stopped after LIMIT seconds (default 900).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/tools/cortiq/cortiq ] || bash scripts/build.sh > /dev/null
cortiq=build/tools/cortiq/cortiq
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
run() {  # THREADS ENV...: prints the seconds the quantize took (or "stopped")
  local threads=$1; shift
  local t0=$(date +%s.%N)
  if timeout "${LIMIT:-900}" env "$@" $cortiq quantize models/demo --bpw 1.0 --threads "$threads" \
       --calib models/demo/calib.txt --samples 64 --seqlen 256 -o "$out/q.safetensors" \
       --force -q > /dev/null 2>&1; then
    awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }'
  else
    echo stopped
  fi
}
busy() { for _ in 1 2; do sh -c 'while :; do :; done' & done; }
echo "cores: $(nproc), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
alone=$(run 0 CORTIQ_X=1)
busy
beside=$(run 0 CORTIQ_X=1)
beside_all=$(run "$(nproc)" CORTIQ_X=1)
spin="-"
if [ "${1:-}" = --spin ]; then spin=$(run "$(nproc)" CORTIQ_WAIT_SET=1 OMP_WAIT_POLICY=active); fi
kill $(jobs -p) 2>/dev/null || true
printf "| quantize of the demo | seconds |\n|---|---|\n"
printf "| alone | %.1f |\n| beside two busy loops | %.1f |\n" "$alone" "$beside"
printf "| beside two busy loops, --threads %s | %.1f |\n" "$(nproc)" "$beside_all"
[ "$spin" != "-" ] && printf "| beside two busy loops, threads spinning (before) | %s |\n" "$spin"
awk -v a="$alone" -v b="$beside" -v c="$beside_all" \
  'BEGIN { printf "ratio beside/alone: %.2f (--threads all: %.2f)\n", b / a, c / a }'
