#!/usr/bin/env bash
# The package as a user gets it: build the sdist and the wheel from this checkout, check both
# with twine, install the wheel alone (with its torchrl extra) into a fresh virtual environment,
# and run scripts/wheel_smoke.py there from an empty directory, with no source tree on the path.
#
# Uses .venv (or MIXREPLAY_VENV) for build, twine and pip (the `docs` extra, part of `test`).
# The fresh environment gets .venv's torch (hard-linked, see below), then pip installs the wheel
# and the other dependencies its metadata names, at the versions .venv has (a constraints file:
# pip resolves what the suite ran on, from its cache). Everything it writes stays under build/package/ (git ignores build/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py="${MIXREPLAY_VENV:-.venv}/bin/python"
work="$root/build/package"
start=$SECONDS
say() { echo "check_package.sh: $* [$((SECONDS - start)) s]"; }

rm -rf "$work"
mkdir -p "$work/empty"
say "building the sdist and the wheel (python -m build)"
if ! "$py" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1; then
  cat "$work/build.log"
  exit 1
fi
"$py" -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/*.whl)

# pinned to what the suite runs on; editable and direct-URL lines cannot be constraints
"$py" -m pip freeze --exclude-editable | grep -v ' @ ' >"$work/constraints.txt"

say "a fresh virtual environment, with torch hard-linked from $(dirname "$(dirname "$py")")"
"$py" -m venv --without-pip "$work/venv"
# torch and what it requires, exactly as the suite's environment has them, linked file by file
# (hard links where the filesystem allows, else copies): installing torch's ~800 MB again
# would cost minutes and prove nothing about this package
"$py" - "$work/venv" <<'PY'
import importlib.metadata as md, os, pathlib, re, shutil, subprocess, sys

venv = pathlib.Path(sys.argv[1])
target = pathlib.Path(subprocess.check_output(
    [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    text=True).strip())
seen, todo, files = set(), ["torch"], 0
while todo:
    dist = md.distribution(todo.pop())
    key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    if key in seen:
        continue
    seen.add(key)
    todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or []
             if "extra ==" not in r]
    for f in dist.files or []:
        src = pathlib.Path(dist.locate_file(f)).resolve()
        if not src.is_file() or ".." in f.parts:  # scripts in bin/ are not needed
            continue
        dst = target / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        files += 1
print(f"check_package.sh: linked {files} files of {', '.join(sorted(seen))}")
PY
say "installing $(basename "$wheel")[torchrl] and the dependencies its metadata names"
"$py" -m pip --python "$work/venv/bin/python" install --quiet --progress-bar off \
  -c "$work/constraints.txt" "$wheel[torchrl]"

say "smoke checks, from an empty directory with no source tree on the path"
cd "$work/empty"
env -u PYTHONPATH "$work/venv/bin/python" -I "$root/scripts/wheel_smoke.py" \
  --wheel "$wheel" --venv "$work/venv"
say "the built package works"
