"""docs/offline-data-helps.md: its python blocks run, and its figure and command exist."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from mixreplay.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "offline-data-helps.md"
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", flags=re.S | re.M)


def blocks(lang: str) -> list[str]:
    return [
        textwrap.dedent(code) for _, kind, code in FENCE.findall(PAGE.read_text()) if kind == lang
    ]


@pytest.mark.parametrize("code", blocks("python"))
def test_python_blocks_run(code, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


def test_the_figure_is_committed_and_linked():
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", PAGE.read_text())
    assert links and all((PAGE.parent / link).is_file() for link in links)


def test_the_commands_shown_parse(capsys):
    commands = [
        line.split("#")[0].split()
        for code in blocks("bash")
        for line in code.splitlines()
        if line.startswith("mixreplay demo")
    ]
    assert ["mixreplay", "demo", "--task", "halfcheetah"] in commands
    for argv in commands:  # each parses: --help after it exits 0 without running anything
        with pytest.raises(SystemExit) as exit_info:
            main([*argv[1:], "--help"])
        assert exit_info.value.code == 0
    capsys.readouterr()
