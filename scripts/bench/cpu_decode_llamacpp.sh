#!/usr/bin/env bash
# Measures CPU decode speed of llama.cpp on the float tiny-llama-6m (F32 GGUF)
# beside cortiq generate on the same model compressed by cortiq quantize,
# with the same thread count, prompt length and number of decoded tokens.
#
# Usage: cpu_decode_llamacpp.sh LLAMA_SRC WORK_DIR [build|convert|quantize|measure|all]
#   LLAMA_SRC  a llama.cpp source tree (its llama-bench is built into WORK_DIR/llama-build)
#   WORK_DIR   scratch folder for the GGUF, the compressed model, logs and per-run figures
# Environment: CORTIQ (default build/tools/cortiq/cortiq), DATA (default
# ../shared/data from the repository root), THREADS (default 2), BPW (cortiq
# quantize --bpw, default 1.0), GEN (decoded tokens, default 256), REPS (runs of
# each tool, default 3), PROMPT (prompt text; its token count, BOS included, as
# cortiq's tokenizer counts it, is the context both tools decode after),
# LLAMA_BUILD (a build folder of LLAMA_SRC, default WORK_DIR/llama-build,
# configured when it has no CMakeCache.txt), LLAMA_BENCH_ARGS (extra
# llama-bench options), PYTHON (a python3 with numpy), JOBS.
#
# build:    llama.cpp's CPU llama-bench, Release
# convert:  float Hugging Face folder -> float32 GGUF (../baselines/hf_to_gguf.py)
# quantize: cortiq quantize --bpw BPW --tune none on the calibration text
# measure:  REPS rounds, each one llama.cpp run then one cortiq run, and a table
#           of the medians. Both figures are decode only:
#           - llama.cpp: llama-bench -p 0 -n GEN -d P: GEN single-token
#             llama_decode calls after a P-token context, which is filled
#             outside the timed part; the tokens are random (no sampling).
#           - cortiq: cortiq generate --temp 0 --ignore-eos --json, once with
#             --max-tokens 1 (the prompt's forward pass and the first token) and
#             once with --max-tokens GEN+1 (the same plus GEN single-token
#             forward passes); decode tok/s = GEN / (seconds(GEN+1) - seconds(1)).
#             The tokens_per_second that cortiq generate itself prints (prompt
#             pass included) is listed below the table.
set -euo pipefail

source "$(dirname "$0")/../baselines/llamacpp_env.sh"
BPW=${BPW:-1.0}
GEN=${GEN:-256}
REPS=${REPS:-3}
PROMPT=${PROMPT:-Once upon a time, there was a little girl named Lily. She loved to}
LLAMA_BENCH_ARGS=${LLAMA_BENCH_ARGS:-}
model=tiny-llama-6m
gguf=$work/$model-f32.gguf
packed=$work/$model-cortiq-$BPW.safetensors

build() {
    build_llama llama-bench
}

convert() {
    "$PYTHON" "$root/scripts/baselines/hf_to_gguf.py" "$src/gguf-py" "$DATA/models/$model" "$gguf"
}

quantize() {
    "$CORTIQ" quantize "$DATA/models/$model" --bpw "$BPW" --calib "$DATA/text/tinystories-calib.txt" \
        --tune none --threads "$THREADS" -o "$packed" --force >"$work/$model-cortiq-$BPW.quantize.log" 2>&1
    tail -n 1 "$work/$model-cortiq-$BPW.quantize.log"
}

json_field() {  # file key
    "$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"
}

cortiq_run() {  # max_tokens out.json
    "$CORTIQ" generate "$packed" --prompt "$PROMPT" --max-tokens "$1" --temp 0 --ignore-eos \
        --device cpu --threads "$THREADS" --json >"$2"
}

measure() {
    tmp=$(mktemp -d "$work/measure.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    cortiq_run 1 "$tmp/probe.json"
    local p
    p=$(json_field "$tmp/probe.json" prompt_tokens)
    local runs=$work/decode-runs.tsv
    printf 'round\ttool\tprompt_tokens\tgenerated_tokens\tdecode_tok_s\tprinted_tok_s\n' >"$runs"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for r in $(seq 1 "$REPS"); do
        # shellcheck disable=SC2086  # LLAMA_BENCH_ARGS is a list of options
        "$LLAMA_BUILD/bin/llama-bench" -m "$gguf" -p 0 -n "$GEN" -d "$p" -t "$THREADS" -r 1 \
            $LLAMA_BENCH_ARGS -o json >"$tmp/llama-$r.json" 2>"$tmp/llama-$r.err"
        "$PYTHON" - "$tmp/llama-$r.json" "$r" "$p" "$GEN" >>"$runs" <<'EOF'
import json, sys
row = json.load(open(sys.argv[1]))[0]
assert row["n_gen"] == int(sys.argv[4]) and row["n_depth"] == int(sys.argv[3]), row
print(f"{sys.argv[2]}\tllama.cpp\t{sys.argv[3]}\t{row['n_gen']}\t{row['samples_ts'][0]}\t")
EOF
        cortiq_run 1 "$tmp/cortiq-$r-1.json"
        cortiq_run $((GEN + 1)) "$tmp/cortiq-$r-n.json"
        "$PYTHON" - "$tmp/cortiq-$r-1.json" "$tmp/cortiq-$r-n.json" "$r" "$GEN" >>"$runs" <<'EOF'
import json, sys
one, full = (json.load(open(f)) for f in sys.argv[1:3])
gen = int(sys.argv[4])
assert full["generated_tokens"] == gen + 1 and one["prompt_tokens"] == full["prompt_tokens"], full
decode = gen / (full["seconds"] - one["seconds"])
print(f"{sys.argv[3]}\tcortiq\t{full['prompt_tokens']}\t{gen}\t{decode}\t{full['tokens_per_second']}")
EOF
    done
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$PYTHON" - "$runs" "$tmp/llama-1.json" "$work/$model-cortiq-$BPW.quantize.log" "$model" \
        "$THREADS" "$BPW" <<'EOF'
import json, re, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])][1:]
ll = json.load(open(sys.argv[2]))[0]
log = open(sys.argv[3]).read()
model, threads, bpw = sys.argv[4:7]
linear = re.search(r"linear layers ([0-9.]+) bpw", log).group(1)
file_bits = re.search(r"= ([0-9.]+) bits per parameter", log).group(1)
bits = {
    "llama.cpp": ("32 (F32)", f"{ll['model_size'] * 8 / ll['model_n_params']:.2f}", f"{model} F32 GGUF"),
    "cortiq": (linear, file_bits, f"{model} cortiq quantize --bpw {bpw} --tune none"),
}
med = {}
for tool in ("llama.cpp", "cortiq"):
    med[tool] = statistics.median(float(r[4]) for r in rows if r[1] == tool)
print(f"\nCPU decode, {threads} threads; median of {len(rows) // 2} runs each, alternating\n")
print("| tool | model | linear bpw | file bits/param | prompt tokens | generated tokens "
      "| decode tok/s (median) | runs (tok/s) | ratio to llama.cpp |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for tool in ("llama.cpp", "cortiq"):
    mine = [r for r in rows if r[1] == tool]
    runs = ", ".join(f"{float(r[4]):.0f}" for r in mine)
    print(f"| {tool} | {bits[tool][2]} | {bits[tool][0]} | {bits[tool][1]} | {mine[0][2]} | {mine[0][3]} "
          f"| {med[tool]:.1f} | {runs} | {med[tool] / med['llama.cpp']:.3f} |")
printed = statistics.median(float(r[5]) for r in rows if r[1] == "cortiq")
print(f"\ncortiq generate's own tokens_per_second (prompt pass included, "
      f"{int(rows[0][3]) + 1} tokens), median: {printed:.1f}")
fa = {-1: "auto", 0: "off", 1: "on"}.get(ll["flash_attn"], ll["flash_attn"])
print(f"llama.cpp {ll['build_commit']}, KV cache {ll['type_k']}/{ll['type_v']}, flash_attn {fa}, "
      f"poll {ll['poll']}, cpu {ll['cpu_info']}")
EOF
}

case $stage in
    build) build ;;
    convert) convert ;;
    quantize) quantize ;;
    measure) measure ;;
    all) build; convert; quantize; measure ;;
    *) echo "unknown stage $stage" >&2 && exit 2 ;;
esac
