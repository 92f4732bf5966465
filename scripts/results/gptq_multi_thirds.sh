#!/usr/bin/env bash
# The exact column search against --gptq-multi Q (or another of its options,
# FLAG=--gptq-group), tiny models, untuned (TUNE=auto: the default tuning),
# 64 windows of one third of tinystories-calib (3
# disjoint thirds = 3 paired runs), perplexity on 60 windows of
# tinystories-valid and austen-heldout.
#   CORTIQ=build/tools/cortiq/cortiq DATA=../shared/data \
#     [DEVICE=cpu|gpu] [JOBS=1] [FLAG=--gptq-multi] [QS="0 8"] [MODELS=...] \
#     [BPWS=...] [TUNE=none|auto] [WORK=dir] bash scripts/results/gptq_multi_thirds.sh
# Appends "model bpw third value true-bpw ppl-valid ppl-austen" lines to
# $WORK/results.txt; runs already done (a .done file) are not redone.
set -u
C=$(realpath "${CORTIQ:?path to the cortiq binary}")
D=$(realpath "${DATA:?path to shared/data}")
DEVICE=${DEVICE:-cpu}
TUNE=${TUNE:-none}
FLAG=${FLAG:---gptq-multi}
WORK=${WORK:-/tmp/gptq_multi}
mkdir -p "$WORK" && cd "$WORK"
if [ ! -f calib2.txt ]; then  # tinystories-calib cut in thirds at line ends
  python3 - "$D/text/tinystories-calib.txt" <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines(keepends=True)
total = sum(len(l) for l in lines)
part, acc, out = 0, 0, [[], [], []]
for l in lines:
    if acc >= (part + 1) * total / 3 and part < 2:
        part += 1
    out[part].append(l)
    acc += len(l)
for k in range(3):
    open(f"calib{k}.txt", "w", encoding="utf-8").write("".join(out[k]))
PY
fi
one() {  # model bpw third Q
  local model=$1 bpw=$2 k=$3 q=$4
  local out=q_${model}_${bpw}_${k}_${FLAG#--}${q}.safetensors
  if [ ! -f "$out.done" ]; then
    "$C" quantize "$D/models/$model" --bpw "$bpw" --device "$DEVICE" --tune "$TUNE" --samples 64 \
      --calib "calib$k.txt" "$FLAG" "$q" -o "$out" --force --quiet --json "$out.json" \
      > "$out.log" 2>&1 || { echo "$model $bpw part$k Q$q FAILED"; return; }
    touch "$out.done"
  fi
  local bits p1 p2
  bits=$(python3 -c "import json; print(round(json.load(open('$out.json'))['linear_bpw'],4))")
  p1=$("$C" ppl "$out" --text "$D/text/tinystories-valid.txt" --ctx 512 --max-windows 60 --json \
    --device "$DEVICE" 2>/dev/null | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['ppl'],3))")
  p2=$("$C" ppl "$out" --text "$D/text/austen-heldout.txt" --ctx 512 --max-windows 60 --json \
    --device "$DEVICE" 2>/dev/null | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['ppl'],3))")
  echo "$model $bpw $k ${FLAG#--}=$q $bits $p1 $p2" | tee -a results.txt
}
export -f one
export C D DEVICE FLAG TUNE
for model in ${MODELS:-tiny-llama-6m tiny-qwen3-6m}; do
  for bpw in ${BPWS:-0.55 1.0 2.0}; do
    for k in 0 1 2; do
      for q in ${QS:-0 8}; do echo "$model $bpw $k $q"; done
    done
  done
done | xargs -P "${JOBS:-1}" -L 1 bash -c 'one "$@"' _
echo finished >> results.txt
