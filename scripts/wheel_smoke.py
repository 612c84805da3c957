"""Smoke checks of an installed mixreplay wheel or sdist (run by scripts/check_package.sh).

Run with the fresh environment's interpreter in isolated mode (``python -I``) from an empty
directory, so that only the installed wheel can be imported. Checks that the package imported
is the installed one, that its metadata is a published package's (version, licence, extras,
URLs, ``Requires-Python``), that its package data shipped (``py.typed``, the D4RL URL table),
and runs ``mixreplay --help``, ``mixreplay --version``, ``mixreplay example`` and ``import
mixreplay.torchrl`` (the torchrl extra). Prints one line per check; exits non-zero on the first
that fails.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import subprocess
import sys


def check(what: str, ok: bool, detail: object = "") -> None:
    print(f"wheel_smoke: {'ok  ' if ok else 'FAIL'} {what}{f': {detail}' if detail else ''}")
    if not ok:
        sys.exit(1)


def run(venv: pathlib.Path, *argv: str) -> str:
    out = subprocess.run(
        [str(venv / "bin" / "mixreplay"), *argv], capture_output=True, text=True, timeout=600
    )
    check(f"mixreplay {' '.join(argv)} exits 0", out.returncode == 0, out.stderr[-2000:])
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=pathlib.Path, required=True)
    parser.add_argument("--venv", type=pathlib.Path, required=True)
    args = parser.parse_args()
    venv = args.venv.resolve()

    import mixreplay

    where = pathlib.Path(mixreplay.__file__).resolve().parent
    check("mixreplay is imported from the fresh environment", venv in where.parents, where)
    check("the working directory holds no source tree", not pathlib.Path("mixreplay").exists())

    meta = importlib.metadata.metadata("mixreplay")
    version = meta["Version"]
    check("the version is the package's", version == mixreplay.__version__, version)
    check(
        "the wheel or sdist is that version's",
        args.wheel.name.startswith((f"mixreplay-{version}-", f"mixreplay-{version}.tar.gz")),
        args.wheel.name,
    )
    check("licence MIT", meta["License-Expression"] == "MIT", meta["License-Expression"])
    check("Requires-Python", meta["Requires-Python"] == ">=3.10", meta["Requires-Python"])
    extras = set(meta.get_all("Provides-Extra") or [])
    wanted = {"minari", "d4rl", "torchrl", "ray", "demo", "mujoco", "test", "all", "docs"}
    check("every extra is declared", wanted <= extras, sorted(extras))
    urls = meta.get_all("Project-URL") or []
    check("project URLs", len(urls) >= 3 and not any("<" in u for u in urls), urls)
    classifiers = meta.get_all("Classifier") or []
    check("classifiers (typed, Python 3)", "Typing :: Typed" in classifiers, len(classifiers))
    check("the README is the long description", "mixreplay" in (meta.get_payload() or ""))

    check("py.typed ships", (where / "py.typed").is_file())
    from mixreplay.datasets.d4rl_urls import D4RL_PATHS, d4rl_url

    check("the D4RL URL table ships", len(D4RL_PATHS) == 179, len(D4RL_PATHS))
    check("a D4RL URL resolves", (d4rl_url("hopper-medium-v2") or "").endswith(".hdf5"))

    import mixreplay.torchrl as mt

    check("import mixreplay.torchrl (the torchrl extra)", hasattr(mt, "OfflineToOnlineTrainer"))

    usage = run(venv, "--help")
    check("mixreplay --help lists the commands", all(c in usage for c in ("demo", "example")))
    check("mixreplay --version", run(venv, "--version").strip() == f"mixreplay {version}")
    out = run(venv, "example")
    check("mixreplay example splits three batches", out.count("offline rows +") == 3, out)


if __name__ == "__main__":
    main()
