#!/usr/bin/env bash
# On the GPU machine (PyTorch, transformers 5.17), from the repository root:
# trains tiny-qwen35-6m with scripts/golden/train_qwen35.py --preset 6m on the
# corpus that scripts/device/pack_train_qwen35.sh packed into the carry folder,
# then writes its golden logits and reference perplexities.
#   bash scripts/device/train_qwen35_6m.sh
# Environment: CARRY (default .carry/qwen35-train), TRAIN_SECONDS (the training
# time cap, default 390), WORK (default /tmp/qwen35-6m), OUT (where the results
# go; default WORK/out).
# $OUT/: tiny-qwen35-6m.tar.gz (the model folder, ready for tests/golden:
# config.json, generation_config.json, model.safetensors BF16, tokenizer,
# golden.json, golden.logits.f32, ref_ppl.json, train_log.json,
# train_log.txt), and beside it run.log, ref_ppl.json and train_log.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=${CARRY:-.carry/qwen35-train}
work=${WORK:-/tmp/qwen35-6m}
out=${OUT:-$work/out}
name=tiny-qwen35-6m
for f in tok/tokenizer.json corpus.jsonl.gz text/tinystories-valid.txt text/austen-heldout.txt \
         text/kjv-heldout.txt; do
  [ -f "$carry/$f" ] || { echo "train_qwen35_6m: $carry/$f missing (run scripts/device/pack_train_qwen35.sh here and carry $carry)"; exit 2; }
done
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$out/run.log"
python3 scripts/golden/train_qwen35.py --preset 6m --name "$name" "$work" "$carry/tok" \
  "${TRAIN_SECONDS:-390}" "$carry/corpus.jsonl.gz" -- "$carry/text/tinystories-valid.txt" \
  "$carry/text/austen-heldout.txt" "$carry/text/kjv-heldout.txt" 2>&1 | tee -a "$out/run.log"
rc=${PIPESTATUS[0]}
if [ -d "$work/$name" ]; then
  tar -czf "$out/$name.tar.gz" -C "$work" "$name"
  for f in ref_ppl.json train_log.json; do
    [ -f "$work/$name/$f" ] && cp "$work/$name/$f" "$out/"
  done
  ls -l "$work/$name" "$out"
fi
echo "train_qwen35_6m: exit $rc"
exit "$rc"
