#!/usr/bin/env bash
# The package as a user gets it: build the sdist and the wheel from this checkout, check that
# both carry the version of mixreplay/_version.py and that CHANGELOG.md has a dated section for
# it, check both with twine, install each alone (with its torchrl extra) into a fresh virtual
# environment, and run scripts/wheel_smoke.py there from an empty directory, with no source tree
# on the path.
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
version=$("$py" -c 'import runpy; print(runpy.run_path("mixreplay/_version.py")["__version__"])')
wheel="$work/dist/mixreplay-$version-py3-none-any.whl"
sdist="$work/dist/mixreplay-$version.tar.gz"
if [ ! -f "$wheel" ] || [ ! -f "$sdist" ]; then
  say "the built files do not carry version $version: $(ls "$work/dist")"
  exit 1
fi
if ! grep -qE "^## \[$version\] - [0-9]{4}-[0-9]{2}-[0-9]{2}\$" CHANGELOG.md; then
  say "CHANGELOG.md has no dated section '## [$version] - YYYY-MM-DD' for the version being built"
  exit 1
fi
say "version $version: $(basename "$wheel"), $(basename "$sdist"), a CHANGELOG section"

# pinned to what the suite runs on; editable and direct-URL lines cannot be constraints
"$py" -m pip freeze --exclude-editable | grep -v ' @ ' >"$work/constraints.txt"

# torch and what it requires, exactly as the suite's environment has them, linked file by file
# (hard links where the filesystem allows, else copies) into the fresh environment $1:
# installing torch's ~800 MB again would cost minutes and prove nothing about this package
fresh_venv() {
"$py" -m venv --without-pip "$1"
"$py" - "$1" <<'PY'
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
}

for artefact in "$wheel" "$sdist"; do
  venv="$work/venv-$(basename "$artefact" | sed -E 's/.*\.(whl|tar\.gz)$/\1/; s/tar\.gz/sdist/')"
  say "a fresh virtual environment for $(basename "$artefact"), torch hard-linked from $(dirname "$(dirname "$py")")"
  fresh_venv "$venv"
  say "installing $(basename "$artefact")[torchrl] and the dependencies its metadata names"
  "$py" -m pip --python "$venv/bin/python" install --quiet --progress-bar off \
    -c "$work/constraints.txt" "$artefact[torchrl]"
  say "smoke checks of $(basename "$artefact"), from an empty directory with no source tree on the path"
  (cd "$work/empty" && env -u PYTHONPATH "$venv/bin/python" -I "$root/scripts/wheel_smoke.py" \
    --wheel "$artefact" --venv "$venv")
done
say "the built package works, installed from the wheel and from the sdist"
