"""The Python blocks of docs/datasets.md run as written."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def _blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    # blocks of comments only show calls on data this machine does not have
    return [
        b
        for b in blocks
        if any(line.strip() and not line.lstrip().startswith("#") for line in b.splitlines())
    ]


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_doc_python_blocks_run(index, tmp_path, monkeypatch, registry):
    # in this process (warnings are errors here too); the autouse fixture has already sent
    # every data root to a temp dir, and `registry` forgets what a block registers
    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    exec(
        compile(_blocks()[index], f"{DOC.name} block {index}", "exec"),
        {"__name__": "__doc_block__"},
    )
    assert list(scratch.iterdir()) == []  # the block left no temporary file behind
