#!/usr/bin/env bash
# Device call: the README's headline rows. Each shared 6M model compressed
# with every default (--device gpu: tuning block+kd, sampled windows) at the
# true bits of llama.cpp's IQ1_M (1.75) and IQ2_XXS (2.0625) and at 0.9, then
# perplexity on the first 60 windows of 512 tokens of the three texts (the
# protocol of docs/quality.md). Binaries and data from .carry
# (scripts/device/pack_gpu.sh). Writes $OUT/headline.jsonl.
#   BPWS="1.75 2.0625" MODELS="tiny-llama-6m" bash scripts/device/headline_gpu.sh
# MODELS names shared models (.carry/models/NAME) or folders of the tree
# (tests/golden/tiny-qwen35-trained); BPWS may hold "float" for the
# uncompressed model's row.
set -euo pipefail
source .carry/gpu/env.sh
cortiq=.carry/gpu/bin/cortiq
for m in ${MODELS:-tiny-llama-6m tiny-qwen3-6m}; do
  src=.carry/models/$m
  [ -d "$m" ] && src=$m
  name=$(basename "$m")
  for b in ${BPWS:-1.75 2.0625}; do
    f=/tmp/$name-$b.safetensors
    if [ "$b" = float ]; then
      f=$src
      line="{\"model\":\"$name\",\"bpw_asked\":\"float\""
    else
      t0=$(date +%s.%N)
      $cortiq quantize "$src" --bpw $b --calib .carry/text/tinystories-calib.txt \
        --device gpu -o $f --force --quiet --json $OUT/$name-$b.json ${QUANTIZE_ARGS:-}
      t1=$(date +%s.%N)
      line="{\"model\":\"$name\",\"bpw_asked\":$b,\"seconds\":$(python3 -c "print(round($t1-$t0,1))")"
      line+=",\"linear_bpw\":$(python3 -c "import json;print(json.load(open('$OUT/$name-$b.json'))['linear_bpw'])")"
    fi
    for t in tinystories-valid austen-heldout kjv-heldout; do
      p=$($cortiq ppl $f --text .carry/text/$t.txt --ctx 512 --max-windows 60 --device gpu --json \
          | tail -1 | python3 -c "import json,sys;print(json.load(sys.stdin)['ppl'])")
      line+=",\"$t\":$p"
    done
    echo "$line}" | tee -a $OUT/headline.jsonl
  done
done
