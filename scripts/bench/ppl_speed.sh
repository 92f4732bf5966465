#!/usr/bin/env bash
# Tokens per second of `cortiq ppl` side by side in one run: the AVX-512 exp
# kernels against the portable loops (CORTIQ_PORTABLE_EXP=1), for each model
# or compressed file given, on the first WINDOWS windows of a text.
#   scripts/bench/ppl_speed.sh TEXT MODEL... (env: THREADS=0 WINDOWS=40 REPEAT=2)
set -euo pipefail
cd "$(dirname "$0")/../.."
cortiq=${CORTIQ:-build/tools/cortiq/cortiq}
text=$1; shift
threads=${THREADS:-0} windows=${WINDOWS:-40} repeat=${REPEAT:-2}
tps() {  # PORTABLE MODEL -> best tokens/s of REPEAT runs
  local best=0
  for _ in $(seq "$repeat"); do
    t=$(CORTIQ_PORTABLE_EXP=$1 $cortiq ppl "$2" --text "$text" --ctx 512 --max-windows "$windows" \
          --threads "$threads" --quiet --json | python3 -c "import json,sys; print(round(json.load(sys.stdin)['tokens_per_second']))")
    [ "$t" -gt "$best" ] && best=$t
  done
  echo "$best"
}
printf '%-50s %12s %12s %8s\n' model "portable t/s" "simd t/s" speedup
for m in "$@"; do
  p=$(tps 1 "$m"); s=$(tps 0 "$m")
  printf '%-50s %12s %12s %8s\n' "$(basename "$m")" "$p" "$s" "$(python3 -c "print(f'{$s/$p:.2f}x')")"
done
