"""The README and the documentation state what is true now; history lives elsewhere.

The README stays within one or two screens (at most 120 lines). No page of README.md or
docs/ (Markdown and reStructuredText) names

- an issue or pull request by number (``issue 20``, ``issues 18-21``, ``#19``, ``PR 7``);
- a time of day in UTC (``19:04 UTC``, ``19:01–19:09 UTC``, ``2026-12-04T19:04``);
- a commit by its hash: a word of 7 to 40 hexadecimal digits with at least one digit and one
  letter (``46f74ce``; a SHA-256 of 64 digits is not a commit).

Where those belong, and so are not checked: the results files (``benchmarks/results/*.json``:
date, machine, load, commit), ``CHANGELOG.md`` (what changed in which version), ``notes/``
(the maintainers' notebooks) and the tests' own headers (the origin of ported files).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 120
PAGES = [
    ROOT / "README.md",
    *sorted(
        p
        for p in (ROOT / "docs").rglob("*")
        if p.suffix in (".md", ".rst") and "_build" not in p.parts
    ),
]
HISTORY = {
    "an issue or pull request number": re.compile(
        r"(?i)\b(?:issues?|pull requests?|PRs?)\s*#?\s*\d+\b|(?<![\w/&#])#\d+\b"
    ),
    "a UTC time": re.compile(
        r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[–-]\s*\d{1,2}:\d{2}(?::\d{2})?)?\s*(?:UTC|GMT)\b"
        r"|\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"
    ),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
}


def history(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, words) of each mention of history in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in HISTORY.items():
            found += [(number, kind, m.group(0)) for m in pattern.finditer(line)]
    return found


def test_the_readme_fits_on_one_or_two_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_prose_names_no_issue_no_utc_time_no_commit(page):
    assert history(page.read_text()) == []


@pytest.mark.parametrize(
    "text",
    [
        "the target of issue 20 is met",
        "issues 18-21",
        "added in (#19)",
        "see PR 7",
        "at 19:04 UTC",
        "19:01–19:09 UTC",
        "2026-12-04T19:04:00Z",
        "against 46f74ce, then",
        "(b28a130)",
    ],
)
def test_each_kind_of_history_is_found(text):
    assert len(history(text)) == 1, history(text)


@pytest.mark.parametrize(
    "text",
    [
        "a link to [the section](torchrl.md#differences-from-torchrl)",
        "1,000,000 rows, 1e-300 to 1e12, 0.6x, sample(256)",
        "2 minutes, 10:1 odds",  # a time without UTC, a ratio
        "deadbeef and cafe",  # hexadecimal words without a digit
        "sha256 " + "0123456789abcdef" * 4,  # a checksum, not a commit
        "a dataset of 2026-12-04",  # a date alone is no time of day
        "the 4,096 writers",
    ],
)
def test_ordinary_prose_is_not_history(text):
    assert history(text) == []
