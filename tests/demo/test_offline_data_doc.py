"""docs/offline-data-helps.md: its figure exists and its commands parse (its python blocks, if
any, run in tests/docs/test_pages.py with every page's)."""

from __future__ import annotations

import pathlib
import re
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
