#!/usr/bin/env bash
# Installs the Debian 12 packages cortiq builds with, when they are missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev liblapacke-dev nlohmann-json3-dev
      libcli11-dev libfmt-dev libpcre2-dev libicu-dev libssl-dev libxxhash-dev libgtest-dev googletest libbenchmark-dev libopenmpi-dev openmpi-bin python3
      python3-dev python3-pybind11 pybind11-dev python3-numpy python3-pytest python3-setuptools
      python3-venv python3-torch)
# The sanitizer and fuzz builds (CMakePresets.json "asan", "fuzz"; .ci/run):
# clang, its runtimes (ASan, UBSan, libFuzzer), its OpenMP and llvm-symbolizer.
if [ "${CORTIQ_SANITIZER_DEPS:-0}" = 1 ]; then
  pkgs+=(clang libclang-rt-dev libomp-dev llvm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "cortiq: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
