#!/usr/bin/env bash
# On a GPU machine: quantize --device gpu runs (the defaults unless flags are
# given) and their perplexity on 60 windows of three texts, for the tuning
# tables of docs/tuning.md. Binaries and data from scripts/device/pack_gpu.sh.
#   bash scripts/device/tune_runs_gpu.sh "NAME MODEL BPW [FLAGS...]" ... [-- "NAME ..." ...]
# MODEL names a shared model (.carry/models/MODEL) or a folder of the tree
# (tests/golden/tiny-qwen35-6m).
# Runs inside a group (between '--') run at once on the GPU; groups run one
# after another (time a run alone by giving it a group of its own). Prints a
# line per run (wall seconds, true bpw, the three perplexities) and leaves
# each run's --json summary, log and ppl lines in $OUT/tune_runs.tgz.
set -u
source .carry/gpu/env.sh
C=.carry/gpu/bin/cortiq M=.carry/models T=.carry/text R=$OUT/r
mkdir -p "$R"
export OMP_WAIT_POLICY=passive
one() {
  local name=$1 model=$2 bpw=$3
  shift 3
  local t0 t1 p="" v src="$M/$model"
  [ -d "$model" ] && src=$model
  t0=$(date +%s.%N)
  if ! $C quantize "$src" --bpw "$bpw" --device gpu --calib "$T/tinystories-calib.txt" \
      -o "/tmp/$name.st" --force --json "$R/$name.json" "$@" > "$R/$name.log" 2>&1; then
    echo "FAILED $name: $(tail -2 "$R/$name.log")"
    return
  fi
  t1=$(date +%s.%N)
  for t in tinystories-valid austen-heldout kjv-heldout; do
    v=$($C ppl "/tmp/$name.st" --text "$T/$t.txt" --ctx 512 --max-windows 60 --device gpu --json \
        --quiet 2>> "$R/$name.log")
    echo "$v" >> "$R/$name.ppl"
    p+=" $(python3 -c 'import json,sys;print(round(json.loads(sys.argv[1])["ppl"],3))' "$v")"
  done
  echo "$name $model $bpw [$*] wall $(python3 -c "print(round($t1-$t0,1))")" \
    "bpw $(python3 -c "import json;print(json.load(open('$R/$name.json'))['linear_bpw'])") ppl$p"
}
group=()
flush() {
  local g
  for g in "${group[@]}"; do one $g & done
  wait
  group=()
}
for g in "$@"; do
  if [ "$g" = "--" ]; then flush; else group+=("$g"); fi
done
flush
tar -czf "$OUT/tune_runs.tgz" -C "$OUT" r && rm -rf "$R"
