#!/usr/bin/env bash
# Perplexity of every (model, method, bpw) on the held-out texts, appended to
# a JSONL file that scripts/results/make_results.py turns into docs/results.md.
#   run_matrix.sh OUT.jsonl DATA_DIR "MODELS" "METHODS" "BPWS" "TEXTS" [DEVICE] [SAMPLES]
# e.g. run_matrix.sh docs/results.jsonl ../shared/data "tiny-llama-6m" "nvg svid" "1.0 2.0" "tinystories-valid"
set -euo pipefail
out=$1 data=$2 models=$3 methods=$4 bpws=$5 texts=$6 device=${7:-cpu} samples=${8:-128}
cortiq=${CORTIQ:-build/tools/cortiq/cortiq}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in $models; do
  mdir=$data/models/$model
  for text in $texts; do  # the original model first
    if ! grep -q "\"model\": \"$model\", \"method\": \"fp\", \"bpw_target\": 16, \"text\": \"$text\"" "$out" 2>/dev/null; then
      ppl=$($cortiq ppl "$mdir" --text "$data/text/$text.txt" --ctx 512 --json 2>/dev/null)
      echo "{\"model\": \"$model\", \"method\": \"fp\", \"bpw_target\": 16, \"text\": \"$text\", \"linear_bpw\": 16, \"ppl\": $ppl}" >> "$out"
    fi
  done
  for method in $methods; do
    for bpw in $bpws; do
      key="\"model\": \"$model\", \"method\": \"$method\", \"bpw_target\": $bpw,"
      if grep -q "$key" "$out" 2>/dev/null; then continue; fi
      q=$tmp/q.safetensors
      $cortiq quantize "$mdir" --bpw "$bpw" --method "$method" --calib "$data/text/tinystories-calib.txt" \
        --samples "$samples" --device "$device" -o "$q" --force -q --json "$tmp/q.json" >/dev/null
      summary=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ['linear_bpw','seconds','encode_seconds','calib_seconds','file_bytes']}))" "$tmp/q.json")
      for text in $texts; do
        ppl=$($cortiq ppl "$q" --text "$data/text/$text.txt" --ctx 512 --json 2>/dev/null)
        echo "{$key \"text\": \"$text\", \"device\": \"$device\", \"samples\": $samples, \"quantize\": $summary, \"ppl\": $ppl}" >> "$out"
      done
      echo "done $model $method $bpw" >&2
    done
  done
done
