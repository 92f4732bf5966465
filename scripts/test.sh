#!/usr/bin/env bash
# Builds cortiq and runs every test (GPU tests skip without a GPU; tests that
# need the shared data skip without it, or fail where CORTIQ_REQUIRE_DATA=1).
# No test found is an error, not a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
export OMP_WAIT_POLICY=passive
ctest --output-on-failure --no-tests=error -j"$(nproc)" --timeout 1800
