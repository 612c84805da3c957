"""The examples of TorchRL's docstrings for the samplers mixreplay exports, run on the target.

The docstrings are TorchRL's, verbatim (torchrl_sampler_docstrings.py: origin and licence in
its header). Each example block runs as a doctest in the namespace TorchRL's own doctests have
(TorchRL's samplers module), with the imports swapped: every name mixreplay exports is rebound
to the target's (_target.py) after each ``from torchrl...`` import line. Only the outputs an
example shows are compared (``ELLIPSIS``, ``NORMALIZE_WHITESPACE``).

SliceSampler's main example shows batches drawn with TorchRL's global RNG; on mixreplay it
runs without comparing them (a buffer draws with the generator it owns). Its first example
prints a batch whose size depends on the RNG's stream, which TorchRL itself does not
reproduce here: it runs on both targets without comparing that output.
"""

from __future__ import annotations

import doctest
import importlib
import re
import textwrap

import _target
import pytest
import torch
from _sampler_marks import (
    LEFT_OUT_DATASET,
    NO_TORCHRL_PRIORITIZED,
    _differs,
)
from tensordict import TensorDict
from torchrl_sampler_docstrings import DOCSTRINGS

EXPORTED = [name for name in _target.__all__ if name[0].isupper()]

DIFF_INFO = _differs(
    "sample(return_info=True) gives a TensorDict ('index', 'weight', and TorchRL's "
    "'priority_weight') where TorchRL gives a dict (the docstring shows NumPy arrays, which "
    "TorchRL 0.14.1 no longer returns either)",
    AssertionError,  # a doctest: its failures are reported as one AssertionError
)

# one test per example block: (docstring, block) -> marks
MARKS = {
    ("PrioritizedSampler", 0): [NO_TORCHRL_PRIORITIZED, DIFF_INFO],
    ("PrioritizedSampler", 1): NO_TORCHRL_PRIORITIZED,
    ("SliceSampler", 3): LEFT_OUT_DATASET,  # RobosetExperienceReplay
}
# (docstring, block) -> {TorchRL name: the mixreplay name run in its place} (mixreplay only)
SUBSTITUTE: dict[tuple[str, int], dict[str, str]] = {}
# blocks whose shown outputs depend on the RNG: TorchRL's global one, seeded by the example's
# torch.manual_seed(0), against the generator a mixreplay buffer owns ("Differences from
# TorchRL": randomness); on mixreplay they run without comparing those outputs
RANDOM_OUTPUT = {("SliceSampler", 2)}
# blocks whose shown outputs TorchRL itself does not reproduce here (strict_length=False
# draws: which slices, and how many rows, a batch holds depend on the RNG's stream): run, not
# compared, anywhere
RANDOM_ANYWHERE = {("SliceSampler", 0), ("SliceSampler", 1)}

_IMPORT = re.compile(r"^(\s*>>> from torchrl[\w.]* import )(.*)$")


def _swap_imports(text: str, substitute: dict[str, str]) -> str:
    """After each ``>>> from torchrl... import names`` line, rebind the exported names."""
    out = []
    for line in text.split("\n"):
        out.append(line)
        m = _IMPORT.match(line)
        if m:
            names = [n.strip(" ()") for n in m.group(2).split(",")]
            # "X as Y" rebinds Y to the target's X
            mine = [n for n in names if n.split(" as ")[0].strip() in EXPORTED]
            indent = line[: line.index(">>>")]
            if mine:
                out.append(f"{indent}>>> from _target import {', '.join(mine)}")
            for name in names:
                if name in substitute:
                    out.append(f"{indent}>>> from _target import {substitute[name]} as {name}")
    return "\n".join(out)


def _blocks(text: str) -> list[str]:
    """The example blocks of a docstring: runs of ``>>>``/``...`` lines and their output."""
    blocks, current, inside = [], [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            inside = True
            current.append(line)
        elif inside and stripped:
            current.append(line)
        elif inside:
            blocks.append("\n".join(current))
            current, inside = [], False
    if current:
        blocks.append("\n".join(current))
    return [textwrap.dedent(b) for b in blocks if ">>>" in b]


def _marks(key):
    marks = MARKS.get(key, [])
    return marks if isinstance(marks, list) else [marks]


CASES = [
    pytest.param(name, i, block, marks=_marks((name, i)), id=f"{name}-{i}")
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


def _namespace() -> dict:
    module = importlib.import_module("torchrl.data.replay_buffers.samplers")
    namespace = {k: v for k, v in vars(module).items() if not k.startswith("__")}
    namespace.update({"torch": torch, "TensorDict": TensorDict})
    namespace.update({k: getattr(_target, k) for k in EXPORTED})
    return namespace


def test_every_docstring_has_its_blocks():
    assert {name: len(_blocks(text)) for name, text in DOCSTRINGS.items()} == {
        "RandomSampler": 1,
        "SamplerWithoutReplacement": 0,
        "PrioritizedSampler": 2,
        "SliceSampler": 4,
    }


@pytest.mark.parametrize("name,block,text", CASES)
def test_docstring_example(name, block, text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything an example writes lands here
    on_mixreplay = _target.ON_MIXREPLAY
    substitute = SUBSTITUTE.get((name, block), {}) if on_mixreplay else {}
    test = doctest.DocTestParser().get_doctest(
        _swap_imports(text, substitute),
        _namespace(),
        f"{name}[{block}]",
        "torchrl_sampler_docstrings.py",
        0,
    )
    runner = doctest.DocTestRunner(
        checker=_ShownOutputs(
            compare=not (
                (name, block) in RANDOM_ANYWHERE
                or (on_mixreplay and (name, block) in RANDOM_OUTPUT)
            )
        ),
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    out = []
    runner.run(test, out=out.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(out)
