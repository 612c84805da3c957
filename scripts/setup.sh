#!/usr/bin/env bash
# Install mixreplay into a Python environment: torch first, then the project (editable) with
# the extras named in $1 (default: test). One line per step; pip's own lines as it works.
# `setup.sh --torch-only` installs torch alone (scripts/check_package.sh then installs a built
# wheel beside it).
#
# Where: .venv in the repository, created if missing; or MIXREPLAY_VENV=DIR, any environment
# with DIR/bin/python (a venv, a conda prefix), created as a venv if missing. PYTHON names the
# interpreter that creates it (default python3).
#
# Which torch build, in this order:
#   1. a torch already installed in that environment is kept, whatever its build: install the
#      build you want first (pip install torch --index-url ...) and this script keeps it;
#   2. MIXREPLAY_TORCH_INDEX=URL installs torch==2.13.0 from that wheel index, e.g.
#      https://download.pytorch.org/whl/cu128 ("default": pip's configured index, which on
#      Linux means PyPI's CUDA build);
#   3. with an NVIDIA GPU (nvidia-smi runs): pip's configured index (PyPI's CUDA build);
#   4. otherwise the CPU build, from PyTorch's CPU index; where that index cannot be reached,
#      from pip's configured index instead (the script says so, and which build it got).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
torch_only=0
if [ "$extras" = "--torch-only" ]; then
  torch_only=1
fi
torch_spec="torch==2.13.0"
cpu_index="https://download.pytorch.org/whl/cpu"
venv="${MIXREPLAY_VENV:-.venv}"
py="$venv/bin/python"
log="$(mktemp)"
beat=""
trap 'rm -f "$log"; [ -z "$beat" ] || kill "$beat" 2>/dev/null || true' EXIT

say() { echo "setup.sh: $*"; }

pip_install() {  # pip_install WHAT ARGS...: pip's progress lines as they come, a heartbeat
  local what="$1" start=$SECONDS rc
  shift
  say "$what"
  : >"$log"
  (while sleep 30; do say "  ... still working ($((SECONDS - start)) s)"; done) &
  beat=$!
  set +e
  "$py" -m pip install --progress-bar off "$@" 2>&1 | tee "$log" |
    grep --line-buffered -E '^ *(Collecting|Processing|Downloading|Installing collected|Successfully)' |
    sed -u -E 's/^ */  /'
  rc=${PIPESTATUS[0]}
  set -e
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  beat=""
  if [ "$rc" -ne 0 ]; then
    cat "$log" >&2
    say "pip install $* failed (exit $rc); its whole output is above" >&2
    exit 1
  fi
  say "  done in $((SECONDS - start)) s"
}

reachable() {  # reachable URL: can this machine fetch URL (through any proxy pip would use)?
  "$py" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).close()
EOF
}

torch_build() {  # e.g. "2.13.0+cpu (CPU build)" or "2.13.0 (CUDA 12.8 build)"
  "$py" -W ignore -c 'import torch; c = torch.version.cuda; print(torch.__version__, "(CPU build)" if c is None else f"(CUDA {c} build)")'
}

start=$SECONDS
created=0
if [ ! -x "$py" ]; then
  say "creating the virtual environment $venv"
  "${PYTHON:-python3}" -m venv "$venv"
  created=1
fi
if [ "$created" -eq 1 ]; then
  pip_install "upgrading pip in $venv" --upgrade pip
fi

if "$py" -c "import torch" >/dev/null 2>&1; then
  say "keeping torch $(torch_build), already in $venv"
else
  if [ -n "${MIXREPLAY_TORCH_INDEX:-}" ] && [ "$MIXREPLAY_TORCH_INDEX" != "default" ]; then
    pip_install "installing $torch_spec from MIXREPLAY_TORCH_INDEX=$MIXREPLAY_TORCH_INDEX" \
      "$torch_spec" --index-url "$MIXREPLAY_TORCH_INDEX"
  elif [ -n "${MIXREPLAY_TORCH_INDEX:-}" ]; then
    pip_install "installing $torch_spec from pip's configured index (MIXREPLAY_TORCH_INDEX=default)" \
      "$torch_spec"
  elif nvidia-smi >/dev/null 2>&1; then
    pip_install "installing $torch_spec from pip's configured index (an NVIDIA GPU is present: on Linux that is PyPI's CUDA build)" \
      "$torch_spec"
  elif reachable "$cpu_index/torch/"; then
    pip_install "installing the CPU build of $torch_spec from $cpu_index (no NVIDIA GPU found; MIXREPLAY_TORCH_INDEX=URL chooses another build)" \
      "$torch_spec" --index-url "$cpu_index"
  else
    say "no NVIDIA GPU found, and PyTorch's CPU index ($cpu_index) cannot be reached from here:"
    pip_install "installing $torch_spec from pip's configured index instead" "$torch_spec"
    if "$py" -W ignore -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
      say "note: that is a CUDA build, larger than needed without a GPU; to avoid it, install a CPU build first or set MIXREPLAY_TORCH_INDEX"
    fi
  fi
  say "installed torch $(torch_build)"
fi

if [ "$torch_only" -eq 1 ]; then
  say "ready in $((SECONDS - start)) s: $venv has torch $(torch_build)"
  exit 0
fi
pip_install "installing mixreplay[$extras] (editable) and its dependencies" -e ".[$extras]"
say "ready in $((SECONDS - start)) s: $venv has mixreplay[$extras] with torch $(torch_build)"
