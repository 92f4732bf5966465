#!/usr/bin/env bash
# Builds the Python package `cortiq` and installs it into a virtual
# environment (default .venv) made from the system interpreter, so that it
# sees Debian's numpy and torch (--system-site-packages). Offline: nothing is
# downloaded beyond the Debian packages of scripts/setup-deps.sh.
# Usage: bash scripts/install-python.sh [VENV] [CMAKE ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
shift || true
py=/usr/bin/python3
bash scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCORTIQ_PYTHON=ON -DPython_EXECUTABLE="$py" "$@"
cmake --build build -j"$(nproc)" --target cortiq_python
[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
rm -rf "$site/cortiq"
cp -rL build/python/cortiq "$site/cortiq"  # the module and the .py files (links followed)
"$venv/bin/python" -c 'import cortiq; print("cortiq", cortiq.__version__, "in", cortiq.__path__[0])'
