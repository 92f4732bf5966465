#!/usr/bin/env bash
# The main job on the bundled demo model (models/demo, a small Llama trained on
# the public-domain Jargon File): compress it to 1 bit per weight twice, as
# encoded and tuned against the original model (a short block + distillation
# schedule, about two minutes on two cores), then print the float, encoded
# and tuned models side by side (held-out perplexity, true bits, file size)
# and generate text with the tuned one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cortiq=build/tools/cortiq/cortiq
out=build/demo
mkdir -p "$out"
bpw=${BPW:-1.0}
common=(--bpw "$bpw" --calib models/demo/calib.txt --samples 64 --seqlen 256 --force -q)
echo "== compress models/demo to $bpw bits per weight, encoded only"
$cortiq quantize models/demo "${common[@]}" --tune none \
  -o "$out/demo-${bpw}bpw.safetensors" --json "$out/encoded.json"
echo "== the same, tuned (--tune block+kd: 2 block epochs, 3 distillation epochs)"
$cortiq quantize models/demo "${common[@]}" --tune block+kd --tune-epochs 2 --kd-epochs 3 \
  -o "$out/demo-${bpw}bpw-tuned.safetensors" --json "$out/tuned.json"
echo "== perplexity on held-out text (plain protocol, ctx 256)"
for m in models/demo "$out/demo-${bpw}bpw.safetensors" "$out/demo-${bpw}bpw-tuned.safetensors"; do
  $cortiq ppl "$m" --text models/demo/heldout.txt --ctx 256 --json --quiet | tail -n 1
done > "$out/ppl.jsonl"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
ppl = [json.loads(l)["ppl"] for l in open(os.path.join(out, "ppl.jsonl"))]
enc, tun = (json.load(open(os.path.join(out, f))) for f in ("encoded.json", "tuned.json"))
float_bytes = os.path.getsize("models/demo/model.safetensors")
rows = [("float (BF16)", 16.0, float_bytes, ppl[0], None),
        ("cortiq, encoded", enc["linear_bpw"], enc["file_bytes"], ppl[1], enc["seconds"]),
        ("cortiq, tuned", tun["linear_bpw"], tun["file_bytes"], ppl[2], tun["seconds"])]
print(f"{'model':<18}{'linear bpw':>11}{'file MB':>9}{'ppl':>9}{'x float':>9}{'seconds':>9}")
for name, bpw, size, p, s in rows:
    print(f"{name:<18}{bpw:>11.3f}{size / 1e6:>9.2f}{p:>9.2f}{p / ppl[0]:>9.2f}"
          + (f"{s:>9.0f}" if s else f"{'':>9}"))
print("linear bpw: 8 x stored bytes / weights of the decoder's linear layers "
      "(float: their BF16); the files keep the embedding and norms in BF16")
PY
echo "== generate with the tuned model"
$cortiq generate "$out/demo-${bpw}bpw-tuned.safetensors" --prompt "A hacker is" --max-tokens 60
