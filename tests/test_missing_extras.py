"""A missing extra costs one line naming the pip command, never a traceback: every example
script and every command that needs one, run with that extra hidden from the interpreter."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Runs argv[2:] as `python SCRIPT ARGS` (or `-m mixreplay ARGS`) with the modules named in
# argv[1] hidden: `import name` then raises ModuleNotFoundError and find_spec(name) is None,
# as in an environment where the extra was never installed.
HIDE = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
target, args = sys.argv[2], sys.argv[3:]
if target == "-m":
    sys.argv = ["mixreplay", *args]
    runpy.run_module("mixreplay", run_name="__main__", alter_sys=True)
else:
    sys.argv = [target, *args]
    runpy.run_path(target, run_name="__main__")
"""


def run_hidden(hidden: str, target: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDE, hidden, target, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("hidden", "script", "pip"),
    [
        ("torchrl", "examples/torchrl_sac.py", 'pip install "mixreplay[torchrl,demo]"'),
        ("minari", "examples/torchrl_sac.py", 'pip install "mixreplay[torchrl,demo]"'),
        ("ray", "examples/distributed_collectors.py", 'pip install "mixreplay[ray,demo]"'),
        ("gymnasium", "examples/distributed_collectors.py", 'pip install "mixreplay[ray,demo]"'),
    ],
)
def test_an_example_without_its_extra_says_so_in_one_line(hidden, script, pip):
    out = run_hidden(hidden, script, "--seed", "0")
    assert out.returncode != 0
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"{script}: error: needs {hidden}"), lines[0]
    assert lines[0].endswith(pip), lines[0]


@pytest.mark.parametrize(
    ("hidden", "argv", "pip"),
    [
        ("gymnasium", ["demo", "--quick"], 'pip install "mixreplay[demo]"'),
        ("minari", ["inspect", "minari:x/y-v0"], 'pip install "mixreplay[minari]"'),
        ("h5py", ["inspect", "d4rl:hopper-medium-v2"], 'pip install "mixreplay[d4rl]"'),
    ],
)
def test_a_command_without_its_extra_says_so_in_one_line(hidden, argv, pip):
    out = run_hidden(hidden, "-m", *argv)
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mixreplay: error: "), out.stderr
    assert pip in lines[0], lines[0]
