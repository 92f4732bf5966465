#!/usr/bin/env bash
# Perplexity of every (model, method, bpw) on the held-out texts, appended to
# a JSONL file that scripts/results/make_results.py turns into docs/results.md.
#   run_matrix.sh OUT.jsonl DATA_DIR "MODELS" "METHODS" "BPWS" "TEXTS" [DEVICE] [SAMPLES]
# e.g. run_matrix.sh docs/results.jsonl ../shared/data "tiny-llama-6m" "nvg svid" "1.0 2.0" "tinystories-valid"
# Environment:
#   CORTIQ      the binary (default build/tools/cortiq/cortiq)
#   JOBS        (model, method, bpw) runs at once (default 1); each gets THREADS host threads
#   THREADS     host threads per run (default 0: all cores)
#   PPL_DEVICE  device of the perplexity runs (default: DEVICE)
#   CALIB       calibration text, DATA_DIR/text/CALIB.txt (default tinystories-calib;
#               scripts/calib/make_calib_mix.py builds calib-mix, a sample of the 6M models' training mix)
#   MATCH       original (default) or layer: quantize --match (entries with original say so)
# Entries already in OUT.jsonl are skipped, so an interrupted matrix continues.
set -euo pipefail
out=$1 data=$2 models=$3 methods=$4 bpws=$5 texts=$6 device=${7:-cpu} samples=${8:-128}
cortiq=${CORTIQ:-build/tools/cortiq/cortiq}
jobs=${JOBS:-1} threads=${THREADS:-0} ppl_device=${PPL_DEVICE:-$device} calib=${CALIB:-tinystories-calib}
match=${MATCH:-original}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$out"

ppl_json() {  # MODEL_OR_FILE TEXT
  $cortiq ppl "$1" --text "$data/text/$2.txt" --ctx 512 --json --quiet --threads "$threads" \
    --device "$ppl_device" 2>"$tmp/ppl.$BASHPID.err" || { cat "$tmp/ppl.$BASHPID.err" >&2; return 1; }
}

entry_key() {  # MODEL METHOD BPW: the start of the run's entries
  local k="\"model\": \"$1\", \"method\": \"$2\", \"bpw_target\": $3, \"calib\": \"$calib\","
  [ "$match" = layer ] || k+=" \"match\": \"$match\","
  # payload version 2: every bpw is 8 × stored bytes / weights (version-1
  # entries, without this field, reported the ideal count)
  k+=" \"payload\": 2,"
  printf '%s' "$k"
}

run_one() {  # MODEL METHOD BPW
  local model=$1 method=$2 bpw=$3
  local key
  key=$(entry_key "$model" "$method" "$bpw")
  local q=$tmp/$model.$method.$bpw.$calib.$match.safetensors js=$tmp/$model.$method.$bpw.$calib.$match.json lines=""
  if ! $cortiq quantize "$data/models/$model" --bpw "$bpw" --method "$method" \
      --calib "$data/text/$calib.txt" --samples "$samples" --device "$device" --match "$match" \
      --threads "$threads" -o "$q" --force -q --json "$js" >/dev/null 2>"$js.err"; then
    echo "FAILED quantize $model $method $bpw: $(tail -1 "$js.err")" >&2
    return 0
  fi
  local summary
  summary=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ['linear_bpw','seconds','encode_seconds','calib_seconds','file_bytes']}))" "$js")
  for text in $texts; do
    local ppl
    ppl=$(ppl_json "$q" "$text") || { echo "FAILED ppl $model $method $bpw $text" >&2; continue; }
    lines+="{$key \"text\": \"$text\", \"device\": \"$device\", \"samples\": $samples, \"quantize\": $summary, \"ppl\": $ppl}"$'\n'
  done
  rm -f "$q"
  # one append per run: concurrent runs do not interleave their lines
  printf '%s' "$lines" >> "$out"
  echo "done $model $method $bpw ($calib, match $match)" >&2
}

for model in $models; do
  for text in $texts; do  # the original model first
    if ! grep -q "\"model\": \"$model\", \"method\": \"fp\", \"bpw_target\": 16, \"text\": \"$text\"" "$out"; then
      ppl=$(ppl_json "$data/models/$model" "$text")
      echo "{\"model\": \"$model\", \"method\": \"fp\", \"bpw_target\": 16, \"text\": \"$text\", \"linear_bpw\": 16, \"ppl\": $ppl}" >> "$out"
    fi
  done
done
for model in $models; do
  for method in $methods; do
    for bpw in $bpws; do
      grep -qF "$(entry_key "$model" "$method" "$bpw") \"text\"" "$out" && continue
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
      run_one "$model" "$method" "$bpw" &
    done
  done
done
wait
