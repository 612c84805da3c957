#!/usr/bin/env bash
# Install everything the tests need into .venv, then run the test suite.
# Extra arguments go to pytest (e.g. -k mixing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/python -m pytest -m "not slow" -p no:cacheprovider "$@"

# tensordict 0.15 compatibility: TorchRL 0.14.1 pins tensordict<0.15, so the main run uses
# 0.14.x; the core suite runs again with tensordict 0.15 shadowing it (TorchRL-free tests only).
.venv/bin/python -m pip install --quiet --no-deps --upgrade --target .deps/tensordict-0.15 "tensordict>=0.15,<0.16"
PYTHONPATH=.deps/tensordict-0.15 .venv/bin/python -m pytest -q -m "not slow" -p no:cacheprovider \
  tests/test_split.py tests/test_storage.py tests/test_mixing.py tests/test_mixture.py \
  tests/test_prefill.py tests/test_registry.py tests/test_reference_examples.py
