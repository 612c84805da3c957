#!/usr/bin/env bash
# Install everything the tests need into .venv, then run the test suite.
# Extra arguments go to pytest (e.g. -m "not slow", -k mixing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -m "not slow" -p no:cacheprovider "$@"
