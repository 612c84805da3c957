"""The README's two commands exist as written, and CI runs the developer's one.

Running them is the proof on a fresh clone (the report of each release says how long each
took); these checks keep the README, the scripts and CI pointing at one another.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_names_the_demo_and_the_developer_command():
    assert readme_commands() == ["bash scripts/demo.sh --quick", "bash scripts/dev.sh"]
    for command in readme_commands():
        script = ROOT / command.split()[1]
        assert script.is_file() and os.access(script, os.X_OK), script


def test_each_sets_itself_up_first():
    for name, extra in (("demo.sh", "demo"), ("dev.sh", "test")):
        text = (ROOT / "scripts" / name).read_text()
        assert f"bash scripts/setup.sh {extra}" in text, name


def test_ci_runs_the_full_set_which_runs_the_readme_command():
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    full = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/dev.sh" in full
    # and, on top of it, the long-running tests the developer's run leaves out
    assert '-m "heavy and not slow and not docs"' in full


def test_the_readme_says_how_long_each_takes_and_what_ci_adds():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"`demo\.sh --quick` took\s+\d+\s+minutes", section), section
    assert re.search(r"`dev\.sh` after\s+it\s+\d+\s+minutes", section), section
    assert "`.ci/run`" in section and "`bash scripts/test.sh`" in section
