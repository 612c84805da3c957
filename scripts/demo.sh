#!/usr/bin/env bash
# Install mixreplay with the demo's dependencies into .venv, then run the demo.
# Extra arguments go to `mixreplay demo` (e.g. --quick, --seeds 5, --out results/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
exec .venv/bin/mixreplay demo "$@"
