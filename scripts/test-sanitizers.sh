#!/usr/bin/env bash
# The reliability builds of CMakePresets.json (clang, CPU only):
#   asan: every test under AddressSanitizer + UndefinedBehaviorSanitizer,
#         except those labelled "slow" (test_ppl: real-model perplexities,
#         minutes each without sanitizers; about 2 minutes in all on 2 cores);
#   fuzz: each libFuzzer target of fuzz/ for $CORTIQ_FUZZ_RUNS executions
#         (default 20000) over its committed seed corpus.
# Any sanitizer report fails the test that triggered it.
set -euo pipefail
cd "$(dirname "$0")/.."
CORTIQ_SANITIZER_DEPS=1 bash scripts/setup-deps.sh
jobs=$(nproc)
cmake --preset asan
cmake --build --preset asan -j"$jobs"
ctest --preset asan -j"$jobs"
cmake --preset fuzz -DCORTIQ_FUZZ_RUNS="${CORTIQ_FUZZ_RUNS:-20000}"
cmake --build --preset fuzz -j"$jobs"
ctest --preset fuzz -j"$jobs"
