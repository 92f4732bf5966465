#!/usr/bin/env bash
# On a GPU machine: the whole `cortiq quantize --device gpu` of a random
# Llama-7B-shaped model of LAYERS decoder layers (scripts/bench/make_llama_7b_shape.py:
# 4096 wide, 11008 MLP, vocabulary 32,000), so that the projection of a
# 32-layer model counts calibration and tuning, not the encoder alone.
# Each quantize in RUNS ("name:flags;name:flags", default the defaults and
# --gptq-group auto) writes its --json summary and log to $OUT; the phases'
# seconds are printed per run. tiny-llama-6m's tokenizer (ids below 32,000)
# tokenizes the calibration text.
#   bash scripts/device/llama7b_quantize_gpu.sh
# Environment: BIN (the binaries, .carry/gpu/bin), LAYERS (2), SHAPE (llama2-7b, or llama3-8b), QUANT_S (each run's time limit, 280), RUNS: runs
# separated by ';', each "name:flags" or "name:flags:VAR=value ..." (an
# environment for that run, e.g. "drift-host::CORTIQ_DRIFT_HOST=1").
set -u
here=$(cd "$(dirname "$0")" && pwd)
source .carry/gpu/env.sh
[ -d .carry/models ] || [ ! -f .carry/models.tar.xz ] || tar -xJf .carry/models.tar.xz -C .carry
BIN=${BIN:-.carry/gpu/bin}
CALIB=.carry/text/tinystories-calib.txt
LOG=${OUT:-/tmp}
W=/tmp/llama7b
export OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 "$here/../bench/make_llama_7b_shape.py" "$W/model" --layers "${LAYERS:-2}" --shape "${SHAPE:-llama2-7b}" \
  > "$LOG/make_model.log" 2>&1 || { cat "$LOG/make_model.log"; exit 1; }
cp -f .carry/models/tiny-llama-6m/tokenizer.json .carry/models/tiny-llama-6m/tokenizer_config.json \
  "$W/model/"
echo "model: $(tail -1 "$LOG/make_model.log") in $(( $(date +%s) - t0 )) s"
# each finished line (a tensor's, a phase's) prefixed with the seconds since the start
stamp='import sys, time
t0 = time.time()
for line in sys.stdin.buffer:
    sys.stdout.write("[%7.1f s] " % (time.time() - t0) + line.decode(errors="replace").split("\r")[-1])
    sys.stdout.flush()'
failed=0
IFS=';' read -ra runs <<< "${RUNS:-default:;auto:--gptq-group auto}"
for run in "${runs[@]}"; do
  IFS=':' read -r name flags envs <<< "$run"
  t1=$(date +%s)
  env ${envs:-} timeout "${QUANT_S:-280}" "$BIN/cortiq" quantize "$W/model" --bpw 1.0 --calib "$CALIB" \
    -o "$W/q_$name.safetensors" --device gpu --force --json "$LOG/quantize_$name.json" $flags \
    2>&1 | python3 -c "$stamp" > "$LOG/quantize_$name.log"
  rc=${PIPESTATUS[0]}
  [ $rc -ne 0 ] && failed=1
  echo "quantize [$name] $flags ${envs:-}: rc=$rc, $(( $(date +%s) - t1 )) s wall"
  tail -n 14 "$LOG/quantize_$name.log" | cut -c1-200
  [ -f "$LOG/quantize_$name.json" ] && python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
print({k: round(j[k], 1) for k in ('seconds', 'calib_seconds', 'encode_seconds', 'tune_seconds')},
      'linear_bpw %.4f' % j['linear_bpw'])
print('parts:', {k: round(v, 1) for k, v in j.get('parts', {}).items()})
print('calibration parts:', {k: round(v, 1) for k, v in j.get('calib_parts', {}).items()})
print('tuning stages:', {k: round(v, 1) for k, v in j.get('tune_stages', {}).items()},
      'peak host %.1f GB, GPU pools %.1f GB' % (j.get('peak_host_bytes', 0) / 1e9, j.get('peak_gpu_pool_bytes', 0) / 1e9))
print('block tuning:', [round(b['seconds'], 1) for b in j.get('tuned_blocks', [])],
      'distillation:', round(j['distilled']['seconds'], 1) if j.get('distilled') else None)" "$LOG/quantize_$name.json"
  rm -f "$W/q_$name.safetensors"
done
exit $failed
