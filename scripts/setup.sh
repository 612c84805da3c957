#!/usr/bin/env bash
# Create .venv and install mixreplay into it: CPU torch first (so pip never pulls a
# multi-GB CUDA build), then the project with the extras named in $1 (default: test).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[${extras}]"
