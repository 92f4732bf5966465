#!/usr/bin/env bash
# Here, before a device call: packs the CUDA test and benchmark binaries of
# build/ (built with the CUDA backend, sm_90) and their libraries into
# .carry/gpu, writes .carry/gpu/env.sh (sourced by the device scripts), and
# copies the shared models and texts the GPU tests read into .carry.
#   bash scripts/device/pack_gpu.sh [MODELS...]   (default: stories260K tiny-llama-6m)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=../shared/data
bins=(build/tools/cortiq/cortiq build/tests/test_cuda_encoder build/tests/test_forward_gpu
      build/tests/test_calib_gpu build/tests/test_blr_linear_gpu build/bench/bench_blr_gpu
      build/bench/bench_blr_cpu build/bench/bench_encode_gpu)
bash ../shared/tools/device-pack.sh .carry/gpu "${bins[@]}" > /dev/null
cat > .carry/gpu/env.sh <<'ENV'
mkdir -p /tmp/lib && tar -xJf .carry/gpu/lib.tar.xz -C /tmp/lib
export LD_LIBRARY_PATH=/tmp/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ENV
mkdir -p .carry/models .carry/text
for m in "${@:-stories260K tiny-llama-6m}"; do
  for x in $m; do rm -rf ".carry/models/$x"; cp -r "$data/models/$x" .carry/models/; done
done
cp -f "$data"/text/tinystories-valid.txt "$data"/text/tinystories-calib.txt .carry/text/
du -sh .carry
