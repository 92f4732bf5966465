#!/usr/bin/env bash
# Here, before a run on a GPU machine: packs the CUDA test and benchmark binaries of
# build/ (built with the CUDA backend, sm_90) and their libraries into
# .carry/gpu, writes .carry/gpu/env.sh (sourced by the device scripts), and
# copies the shared models and texts the GPU tests read into .carry.
#   bash scripts/device/pack_gpu.sh [MODELS...]
#   (default: the three shared models, which the GPU tests read)
# BINS="build/tools/cortiq/cortiq" packs only the binaries named (a smaller
# carry, for runs of the command-line tool alone).
# What travels to the GPU machine is capped at 64 MiB with the tracked tree
# (about 37 MB): every binary (7 MB at xz -9e), the libraries (17 MB) and
# stories260K fit; tiny-llama-6m or tiny-qwen3-6m (14 MB each) do not beside
# the libraries, so their GPU tests skip there (CORTIQ_REQUIRE_DATA=0).
set -euo pipefail
cd "$(dirname "$0")/../.."
data=../shared/data
bins=(build/tools/cortiq/cortiq build/tests/test_cuda_encoder build/tests/test_cuda_knots build/tests/test_forward_gpu
      build/tests/test_calib_gpu build/tests/test_blr_linear_gpu build/tests/test_tune_grad_gpu build/tests/test_tune_delta_grad_gpu
      build/tests/test_qwen35_gpu build/tests/test_decode_gpu build/tests/test_embedding_gpu build/bench/bench_blr_gpu build/bench/bench_decode_gpu
      build/bench/bench_blr_cpu build/bench/bench_encode_gpu build/bench/bench_gemm_align_gpu
      build/bench/bench_launch_floor_gpu build/tests/test_kernels_gpu)
[ -n "${BINS:-}" ] && read -ra bins <<< "$BINS"
# xz -9e: the binaries share most of their code, which a large dictionary finds
export XZ_OPT=${XZ_OPT:--9e}
bash ../shared/tools/device-pack.sh .carry/gpu "${bins[@]}" > /dev/null
# the binaries travel compressed too (the tree that travels is capped at 64 MiB)
tar -cJf .carry/gpu/bin.tar.xz -C .carry/gpu bin && rm -rf .carry/gpu/bin
cat > .carry/gpu/env.sh <<'ENV'
[ -d .carry/gpu/bin ] || tar -xJf .carry/gpu/bin.tar.xz -C .carry/gpu
# once per machine: a second extraction over libraries in use gave a Bus error
[ -f /tmp/lib/.done ] || { mkdir -p /tmp/lib && tar -xJf .carry/gpu/lib.tar.xz -C /tmp/lib && touch /tmp/lib/.done; }
export LD_LIBRARY_PATH=/tmp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ENV
mkdir -p .carry/models .carry/text
rm -rf .carry/models
mkdir -p .carry/models
for m in "${@:-stories260K tiny-llama-6m tiny-qwen3-6m}"; do
  for x in $m; do rm -rf ".carry/models/$x"; cp -r "$data/models/$x" .carry/models/; done
done
cp -f "$data"/text/tinystories-valid.txt "$data"/text/tinystories-calib.txt \
  "$data"/text/austen-heldout.txt "$data"/text/kjv-heldout.txt .carry/text/
du -sh .carry
