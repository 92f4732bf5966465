#!/usr/bin/env bash
# The main job on the bundled demo model (models/demo, a small Llama trained on
# the public-domain Jargon File): compress it to 1 bit per weight, compare the
# perplexity before and after, and generate text with the compressed model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cortiq=build/tools/cortiq/cortiq
out=build/demo
mkdir -p "$out"
bpw=${BPW:-1.0}
echo "== compress models/demo to $bpw bits per weight"
$cortiq quantize models/demo --bpw "$bpw" --calib models/demo/calib.txt \
  --samples 64 --seqlen 256 -o "$out/demo-${bpw}bpw.safetensors" --force --json "$out/quantize.json"
$cortiq inspect "$out/demo-${bpw}bpw.safetensors" | tail -n 1
echo "== perplexity on held-out text (plain protocol, ctx 256)"
$cortiq ppl models/demo --text models/demo/heldout.txt --ctx 256
$cortiq ppl "$out/demo-${bpw}bpw.safetensors" --text models/demo/heldout.txt --ctx 256
echo "== generate with the compressed model"
$cortiq generate "$out/demo-${bpw}bpw.safetensors" --prompt "A hacker is" --max-tokens 60
