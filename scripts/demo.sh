#!/usr/bin/env bash
# Install mixreplay with the demo's dependencies (scripts/setup.sh: into .venv, or the
# environment named by MIXREPLAY_VENV; torch as setup.sh chooses it), then run the demo.
# Extra arguments go to `mixreplay demo` (e.g. --quick, --seeds 5, --out results/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
venv="${MIXREPLAY_VENV:-.venv}"
echo "demo.sh: running $venv/bin/mixreplay demo $*"
exec "$venv/bin/mixreplay" demo "$@"
