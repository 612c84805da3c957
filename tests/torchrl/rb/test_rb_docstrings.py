"""The examples of TorchRL's docstrings for the names mixreplay exports, run on the target.

The docstrings are TorchRL's, verbatim (torchrl_rb_docstrings.py: origin and licence in its
header). Each runs as a doctest in the namespace TorchRL's own doctests have (the module
that defines the class), with the imports swapped: every name mixreplay exports is
rebound to the target's (_target.py), at the start and after each ``from torchrl...``
import line of an example. Outputs are compared with ``ELLIPSIS`` and
``NORMALIZE_WHITESPACE``.
"""

from __future__ import annotations

import doctest
import importlib
import re
import textwrap

import _target
import pytest
import torch
from _marks import (
    BROKEN_EXAMPLE,
    BROKEN_EXAMPLE_UNDEFINED,
    DIFF_DOCTEST_STORAGE_REPR,
    DIFF_DUMPS_INTO_SCRATCH,
    REFERENCE_EXAMPLE_FAILS,
)
from tensordict import TensorDict
from torchrl_rb_docstrings import DOCSTRINGS

EXPORTED = [name for name in _target.__all__ if name[0].isupper()]

# the installed TorchRL module whose namespace each docstring's examples see
MODULES = {
    "ReplayBuffer": "torchrl.data.replay_buffers.replay_buffers",
    "TensorStorage": "torchrl.data.replay_buffers.storages",
    "LazyTensorStorage": "torchrl.data.replay_buffers.storages",
    "LazyMemmapStorage": "torchrl.data.replay_buffers.storages",
}

# one test per example block (a docstring can hold several): (docstring, block) -> marks
MARKS = {
    ("ReplayBuffer", 1): REFERENCE_EXAMPLE_FAILS,  # ints from a ListStorage, default collate
    ("ReplayBuffer", 3): BROKEN_EXAMPLE,  # ">>>     assert ..." inside a def
    ("ReplayBuffer.dumps", 0): BROKEN_EXAMPLE_UNDEFINED,  # saves a buffer `rb` never built
    ("LazyMemmapStorage", 0): DIFF_DUMPS_INTO_SCRATCH,  # dumps("dump"), scratch "dump/storage"
    ("LazyMemmapStorage", 1): DIFF_DOCTEST_STORAGE_REPR,  # MemoryMappedTensor
    ("LazyMemmapStorage", 2): DIFF_DOCTEST_STORAGE_REPR,  # MemoryMappedTensor
}

# blocks whose shown outputs are draws of TorchRL's global RNG (seeded by the example),
# against the generator a mixreplay buffer owns ("Differences from TorchRL": randomness): on
# mixreplay they run without comparing those outputs
RANDOM_OUTPUT = {("ReplayBuffer", 2)}

_IMPORT = re.compile(r"^(\s*>>> from torchrl[\w.]* import )(.*)$")


def _swap_imports(text: str) -> str:
    """After each ``>>> from torchrl... import names`` line, rebind the exported names."""
    out = []
    for line in text.split("\n"):
        out.append(line)
        m = _IMPORT.match(line)
        if m:
            names = [n.strip(" ()") for n in m.group(2).split(",")]
            # "X as Y" rebinds Y to the target's X
            mine = [n for n in names if n.split(" as ")[0].strip() in EXPORTED]
            if mine:
                indent = line[: line.index(">>>")]
                out.append(f"{indent}>>> from _target import {', '.join(mine)}")
    return "\n".join(out)


def _blocks(text: str) -> list[str]:
    """The example blocks of a docstring: runs of ``>>>``/``...`` lines and their output."""
    blocks, current, inside = [], [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            inside = True
            current.append(line)
        elif inside and stripped and not stripped.startswith(("Examples:", "..")):
            current.append(line)
        elif inside and stripped.startswith("..."):
            current.append(line)
        elif inside and not stripped:
            blocks.append("\n".join(current))
            current, inside = [], False
    if current:
        blocks.append("\n".join(current))
    # a block continues while its lines are indented like its first ">>>" line
    return [b for b in blocks if ">>>" in b]


CASES = [
    pytest.param(name, i, block, marks=MARKS.get((name, i), ()), id=f"{name}-{i}")
    for name, text in DOCSTRINGS.items()
    for i, block in enumerate(_blocks(text))
]


class _ShownOutputs(doctest.OutputChecker):
    """Compares only the outputs an example shows (all of them, unless told not to)."""

    def __init__(self, compare: bool = True):
        self.compare = compare

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        if not self.compare or not want.strip():
            return True
        return super().check_output(want, got, optionflags)


def _namespace(name: str) -> dict:
    module = importlib.import_module(MODULES[name.split(".")[0]])
    namespace = {k: v for k, v in vars(module).items() if not k.startswith("__")}
    namespace.update({"torch": torch, "TensorDict": TensorDict})
    namespace.update({k: getattr(_target, k) for k in EXPORTED})
    return namespace


@pytest.mark.parametrize("name,block,text", CASES)
def test_docstring_example(name, block, text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write ("dump/storage") write here
    parser = doctest.DocTestParser()
    test = parser.get_doctest(
        textwrap.dedent(_swap_imports(text)),
        _namespace(name),
        f"{name}[{block}]",
        "torchrl_rb_docstrings.py",
        0,
    )
    runner = doctest.DocTestRunner(
        checker=_ShownOutputs(
            compare=not (_target.ON_MIXREPLAY and (name, block) in RANDOM_OUTPUT)
        ),
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    out = []
    runner.run(test, out=out.append)
    failed = runner.summarize(verbose=False).failed
    assert failed == 0, "".join(out)
