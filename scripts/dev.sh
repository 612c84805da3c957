#!/usr/bin/env bash
# The developer's command: set up .venv with the test extra (scripts/setup.sh test: creates
# .venv, or completes the one scripts/demo.sh made, keeping its torch), then run the
# developer's tests: pyproject's default selection (long-running `heavy`, `slow` and `docs`
# tests deselected), spread over one worker process per core. A few minutes on 2 idle cores.
# Extra arguments go to pytest (e.g. -k mixing, -x, tests/samplers).
# Everything CI runs on top of this: bash scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MIXREPLAY_SETUP_DONE:-}" ]; then  # scripts/test.sh has set it up already
  bash scripts/setup.sh test
fi
venv="${MIXREPLAY_VENV:-.venv}"
echo "dev.sh: running $venv/bin/python -m pytest -q -p no:cacheprovider $*"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
