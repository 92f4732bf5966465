# Sourced by the scripts that build and run llama.cpp beside cortiq
# (baselines/llamacpp_iq.sh, bench/cpu_decode_llamacpp.sh), after
# `set -euo pipefail`, with their arguments LLAMA_SRC WORK_DIR [STAGE]: the
# folders and settings both use, and the build of llama.cpp's CPU tools.
# shellcheck shell=bash
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src=$(cd "$1" && pwd)
work=$(mkdir -p "$2" && cd "$2" && pwd)
stage=${3:-all}
DATA=${DATA:-$root/../shared/data}
CORTIQ=${CORTIQ:-$root/build/tools/cortiq/cortiq}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
THREADS=${THREADS:-2}
LLAMA_BUILD=${LLAMA_BUILD:-$work/llama-build}

# llama.cpp's CPU build (Release, no network or server parts), configured the
# first time, then the targets named built.
build_llama() {
    if [ ! -f "$LLAMA_BUILD/CMakeCache.txt" ]; then
        cmake -S "$src" -B "$LLAMA_BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >"$work/llama-cmake.log"
    fi
    cmake --build "$LLAMA_BUILD" -j"$JOBS" --target "$@" >"$work/llama-build.log"
}
