#!/usr/bin/env bash
# Every check CI runs (.ci/run calls this), in phases: install everything the tests need into
# .venv, then lint, types, the developer's tests (the README's command, scripts/dev.sh), the
# long-running tests, the TorchRL-free suite on tensordict 0.15, the package, the docs site.
# Every phase runs even when an earlier one fails; a summary at the end lists each phase's
# result, and the script exits non-zero if any failed. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test || exit 1
export MIXREPLAY_SETUP_DONE=1  # scripts/dev.sh below: .venv is ready
py=.venv/bin/python

names=()
results=()
phase() {  # phase NAME COMMAND...: run one phase, remember how it ended
  local name="$1"
  shift
  printf '\n=== %s ===\n' "$name"
  local start=$SECONDS
  "$@"
  local rc=$?
  names+=("$name")
  if [ "$rc" -eq 0 ]; then
    results+=("passed ($((SECONDS - start)) s)")
  else
    results+=("FAILED, exit $rc ($((SECONDS - start)) s)")
  fi
}

phase "ruff check" "$py" -m ruff check mixreplay tests benchmarks examples scripts
phase "ruff format --check" "$py" -m ruff format --check mixreplay tests benchmarks examples scripts
phase "mypy" "$py" -m mypy mixreplay
# The developer's tests exactly as the README runs them (pyproject's addopts: not slow, not
# heavy, not docs; one worker per core), then the long-running (heavy) tests, which CI adds:
# -n 0, one at a time, since they start Ray clusters and subprocesses that must not share the
# cores. Together they are the whole suite but `slow` (the full demo, ~20 min here, and the
# racing-process cache test: pytest -m slow) and `docs` (a phase of its own below).
phase "the developer's tests (scripts/dev.sh; tensordict 0.14, torchrl 0.14.1)" \
  bash scripts/dev.sh "$@"
phase "the long-running tests (-m heavy, one at a time)" \
  "$py" -m pytest -q -m "heavy and not slow and not docs" -n 0 -p no:cacheprovider "$@"

# tensordict 0.15: TorchRL 0.14.1 pins tensordict<0.15, so the main run uses 0.14.x; the whole
# TorchRL-free suite runs again with tensordict 0.15 shadowing it (tests marked `torchrl` are
# the ones that import TorchRL, and are deselected here, as are the heavy ones: Ray faults,
# subprocesses and benchmark smoke runs, which the first phase runs and which test no data path
# that the tensordict version changes).
td015() {
  "$py" -m pip install --quiet --no-deps --upgrade --target .deps/tensordict-0.15 \
    "tensordict>=0.15,<0.16" || return 1
  PYTHONPATH=.deps/tensordict-0.15 "$py" -m pytest -q -m "not slow and not heavy and not torchrl and not docs" \
    -n 0 -p no:cacheprovider "$@"
}
phase "test suite again on tensordict 0.15 (TorchRL-free tests)" td015 "$@"

# The package as users get it: sdist and wheel built, twine-checked, the wheel installed alone
# into a fresh venv (torch hard-linked from .venv) and smoke-tested with no source tree on the path.
phase "package: version, build, twine check, the wheel and the sdist in fresh venvs" bash scripts/check_package.sh
# The documentation site, built from docs/ with warnings as errors; every public name indexed.
phase "documentation site (sphinx -W)" \
  "$py" -m pytest -m docs -n 0 -p no:cacheprovider -q tests/docs/test_site.py

printf '\n=== summary ===\n'
failed=0
for i in "${!names[@]}"; do
  printf '%-60s %s\n' "${names[$i]}" "${results[$i]}"
  case "${results[$i]}" in FAILED*) failed=1 ;; esac
done
exit "$failed"
