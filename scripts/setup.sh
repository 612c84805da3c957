#!/usr/bin/env bash
# Create .venv and install mixreplay into it: CPU torch first (so pip never pulls a
# multi-GB CUDA build), then the project with the extras named in $1 (default: test).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python="${PYTHON:-python3}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

pip_install() {  # quiet on success, the whole log on failure
  if ! .venv/bin/python -m pip install --quiet "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup.sh: pip install $* failed" >&2
    exit 1
  fi
}

if [ ! -x .venv/bin/python ]; then
  echo "setup.sh: creating .venv"
  "$python" -m venv .venv
fi
echo "setup.sh: installing torch==2.13.0 (CPU), then mixreplay[${extras}]"
pip_install --upgrade pip
pip_install "torch==2.13.0"
pip_install -e ".[${extras}]"
