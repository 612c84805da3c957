"""docs/scaling.md: every Python block runs as written; every shell block names commands that exist.

Each Python block runs in a fresh interpreter, as a user would paste it into a file: it
makes its own dataset and starts and stops its own local Ray cluster. Its temporary files
go to a directory of this test, which must be empty again when the block ends.

The shell blocks set up a cluster on several machines, and ``ray stop`` stops every Ray
process of a node (other users' clusters included), so they are not run: each must parse,
and every ``ray`` subcommand and option and every option of the example it calls must exist.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scaling.md"


def blocks(language: str) -> list[str]:
    """The code blocks of the page in ``language``, dedented (some sit in list items)."""
    found = re.findall(r"^( *)```(\w+)\n(.*?)^\1```", DOC.read_text(), flags=re.S | re.M)
    return [textwrap.dedent(code) for _, lang, code in found if lang == language]


def test_the_page_has_the_blocks_this_test_runs():
    assert len(blocks("python")) == 2 and len(blocks("bash")) == 3
    assert "/data/" not in DOC.read_text()  # no path that exists only on someone's machine


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs_as_written(index, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(blocks("python")[index])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # RAY_AUTH_MODE=disabled and a short RAY_TMPDIR come from tests/conftest.py
    env = {**os.environ, "TMPDIR": str(scratch)}
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # The block cleaned up after itself. (Ray's worker processes, killed by ray.shutdown(),
    # leave the empty pymp-* directories of Python's multiprocessing behind: not the block's.)
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("pymp-")] == []
    if index == 0:
        # the tour: two collectors' rows, the offline rows, a decayed fraction, full batches
        assert re.search(
            r"collected 4000 rows; buffer holds 14000 \(10000 offline \+ 4000 online\); "
            r"offline fraction now 0\.003; last batch \(256,\)",
            out.stdout,
        ), out.stdout
        # rb.kill() at the end is quiet: no call of the dead actor is left for Ray to retry
        # (Ray prints its "(raylet) Task ... failed ... retries remaining" lines on stdout)
        assert "retries remaining" not in out.stdout + out.stderr, out.stdout[-3000:]


def _help(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("index", range(len(blocks("bash"))))
def test_shell_block_parses_and_its_commands_and_options_exist(index):
    code = blocks("bash")[index]
    subprocess.run(["bash", "-n", "-c", code], check=True)
    ray_cli = pathlib.Path(sys.executable).with_name("ray")
    checked = 0
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[0] == "export":
            continue
        if words[0] == "ray":
            usage = _help([str(ray_cli), words[1], "--help"])
        elif words[:2] == ["python", "examples/distributed_collectors.py"]:
            usage = _help([sys.executable, words[1], "--help"])
        else:
            pytest.fail(f"a command this test does not know: {line!r}")
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", usage), (option, line)
        checked += 1
    assert checked >= 1
