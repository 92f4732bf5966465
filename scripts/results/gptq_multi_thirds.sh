#!/usr/bin/env bash
# exact column search against --gptq-multi 8, tiny models, CPU encoder, untuned,
# 64 windows of one third of tinystories-calib (3 disjoint thirds = 3 paired runs)
set -u
C=${CORTIQ:?path to the cortiq binary}
D=${DATA:?path to shared/data}
mkdir -p "${WORK:-/tmp/gptq_multi}" && cd "${WORK:-/tmp/gptq_multi}"  # holds calib0..2.txt: tinystories-calib cut in thirds at line ends
for model in ${MODELS:-tiny-llama-6m}; do
for bpw in ${BPWS:-0.55 1.0 2.0}; do
for k in 0 1 2; do
for q in 0 8; do
  out=q_${model}_${bpw}_${k}_${q}.safetensors
  tag="$model $bpw part$k Q$q"
  if [ ! -f "$out.done" ]; then
    $C quantize $D/models/$model --bpw $bpw --device cpu --tune none --samples 64 --calib calib$k.txt --gptq-multi $q -o $out --force --quiet --json $out.json > /dev/null 2>&1 || { echo "$tag FAILED"; continue; }
    touch $out.done
  fi
  bits=$(python3 -c "import json; print(round(json.load(open('$out.json'))['linear_bpw'],4))")
  p1=$($C ppl $out --text $D/text/tinystories-valid.txt --ctx 512 --max-windows 60 --json 2>/dev/null | python3 -c "import json,sys; print(round(json.loads(sys.stdin.read().strip().splitlines()[-1])['ppl'],3))")
  p2=$($C ppl $out --text $D/text/austen-heldout.txt --ctx 512 --max-windows 60 --json 2>/dev/null | python3 -c "import json,sys; print(round(json.loads(sys.stdin.read().strip().splitlines()[-1])['ppl'],3))")
  echo "$model $bpw $k $q $bits $p1 $p2" | tee -a results.txt
done; done; done; done
echo finished >> results.txt
