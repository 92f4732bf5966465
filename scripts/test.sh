#!/usr/bin/env bash
# Builds cortiq and runs every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
export OMP_WAIT_POLICY=passive
ctest --output-on-failure -j"$(nproc)" --timeout 1800
