#!/usr/bin/env bash
# Measures llama.cpp's IQ1_M and IQ2_XXS (with an importance matrix) on the
# linear layers of the 6M test models under cortiq's perplexity protocol.
#
# Usage: llamacpp_iq.sh LLAMA_SRC WORK_DIR [convert|quantize|measure|all]
#   LLAMA_SRC  a llama.cpp source tree (its CPU tools are built into WORK_DIR/llama-build)
#   WORK_DIR   scratch folder for GGUFs, importance matrices and model folders
# Environment: LLAMA_BUILD (a build folder of LLAMA_SRC to reuse, default
# WORK_DIR/llama-build, configured and built when it has no CMakeCache.txt), DATA (default ../shared/data from the repository root), CORTIQ
# (default build/tools/cortiq/cortiq), PYTHON (a python3 with numpy), JOBS,
# THREADS.
#
# convert:  float Hugging Face folder -> float32 GGUF (hf_to_gguf.py)
# quantize: llama-imatrix on the calibration text, llama-quantize to Q8_0
#           (round-trip check), IQ2_XXS and IQ1_M
# measure:  dequantise each GGUF's decoder linear layers into a copy of the
#           float folder (gguf_to_hf.py), cortiq ppl of float / Q8_0 / IQ2_XXS /
#           IQ1_M, and cortiq quantize --tune none at each IQ type's linear bpw
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/llamacpp_env.sh"
models=(tiny-llama-6m tiny-qwen3-6m)
types=(Q8_0 IQ2_XXS IQ1_M)
texts=(tinystories-valid austen-heldout kjv-heldout)

convert() {
    for m in "${models[@]}"; do
        "$PYTHON" "$here/hf_to_gguf.py" "$src/gguf-py" "$DATA/models/$m" "$work/$m-f32.gguf"
    done
}

quantize() {
    build_llama llama-imatrix llama-quantize llama-perplexity
    local bin=$LLAMA_BUILD/bin
    for m in "${models[@]}"; do
        # Same calibration text as cortiq quantize --calib; 512-token chunks
        # (the models' context).
        "$bin/llama-imatrix" -m "$work/$m-f32.gguf" -f "$DATA/text/tinystories-calib.txt" -c 512 \
            -t "$THREADS" -o "$work/$m-imatrix.gguf" >"$work/$m-imatrix.log" 2>&1
        for t in "${types[@]}"; do
            "$bin/llama-quantize" --imatrix "$work/$m-imatrix.gguf" "$work/$m-f32.gguf" \
                "$work/$m-$t.gguf" "$t" "$THREADS" >"$work/$m-$t.quantize.log" 2>&1
        done
        # llama.cpp's own perplexity of the float GGUF: a check that the
        # conversion (q/k row order included) runs as the Hugging Face model.
        "$bin/llama-perplexity" -m "$work/$m-f32.gguf" -f "$DATA/text/tinystories-valid.txt" -c 512 \
            --chunks 60 -t "$THREADS" >"$work/$m-f32.perplexity.log" 2>&1
        grep -o "Final estimate: PPL = [0-9.]*" "$work/$m-f32.perplexity.log" | sed "s/^/$m llama.cpp f32: /"
    done
}

ppl_row() {  # model label folder
    local line="$1 $2"
    for x in "${texts[@]}"; do
        local p
        p=$("$CORTIQ" ppl "$3" --text "$DATA/text/$x.txt" --ctx 512 --max-windows 60 --threads "$THREADS" \
            --json --quiet | "$PYTHON" -c "import json,sys; print(round(json.load(sys.stdin)['ppl'], 4))")
        line="$line $x=$p"
    done
    echo "$line" | tee -a "$work/ppl.txt"
}

measure() {
    : >"$work/ppl.txt"
    for m in "${models[@]}"; do
        ppl_row "$m" float "$DATA/models/$m"
        for t in "${types[@]}"; do
            "$PYTHON" "$here/gguf_to_hf.py" "$src/gguf-py" "$work/$m-$t.gguf" "$DATA/models/$m" "$work/$m-$t"
            local bpw
            bpw=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['linear_bpw'])" \
                "$work/$m-$t/gguf_types.json")
            ppl_row "$m" "llama.cpp-$t@${bpw}bpw" "$work/$m-$t"
            [ "$t" = Q8_0 ] && continue
            "$CORTIQ" quantize "$DATA/models/$m" --bpw "$bpw" --calib "$DATA/text/tinystories-calib.txt" \
                --tune none --threads "$THREADS" -o "$work/$m-cortiq-$t.safetensors" >"$work/$m-cortiq-$t.log" 2>&1
            "$CORTIQ" inspect "$work/$m-cortiq-$t.safetensors" >"$work/$m-cortiq-$t.inspect.txt"
            ppl_row "$m" "cortiq-none@$t" "$work/$m-cortiq-$t.safetensors"
        done
    done
}

case $stage in
    convert) convert ;;
    quantize) quantize ;;
    measure) measure ;;
    all) convert && quantize && measure ;;
    *) echo "unknown stage $stage" >&2 && exit 2 ;;
esac
