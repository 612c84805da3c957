"""TorchRL's replay-buffer tutorial (rb_tutorial.py beside this file), run cell by cell.

Cells are the code between sphinx-gallery's ``#####`` text blocks; they run in order in one
namespace, each as a test, so a failing cell names itself. Cells that use what mixreplay
does not claim are left out (with the cells that only use their results).
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from _marks import NEEDS_TORCHVISION, NO_TORCHRL_PRIORITIZED

PATH = pathlib.Path(__file__).with_name("rb_tutorial.py")


def _has_code(code: str) -> bool:
    """Whether a cell does anything (not only comments or the tutorial's docstring)."""
    body = ast.parse(code).body
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


def _cells() -> list[tuple[int, str]]:
    """``(first line, code)`` of each cell that has code; line numbers are the file's."""
    cells, start, current = [], 1, []
    for number, line in enumerate(PATH.read_text().split("\n"), start=1):
        if line.startswith("######"):
            cells.append((start, "\n".join(current)))
            start, current = number, []
        current.append(line)
    cells.append((start, "\n".join(current)))
    return [(first, code) for first, code in cells if _has_code(code)]


CELLS = _cells()

MARKS = {
    **{i: NO_TORCHRL_PRIORITIZED for i in range(22, 32)},  # PrioritizedSampler
    **{i: NEEDS_TORCHVISION for i in range(32, 43)},  # pixels resized by torchvision
}


@pytest.fixture(scope="module")
def namespace():
    return {"__name__": "rb_tutorial"}


def _run(cell: int, namespace: dict) -> None:
    first, code = CELLS[cell]
    exec(compile("\n" * (first - 1) + code, str(PATH), "exec"), namespace)


@pytest.mark.parametrize(
    "cell",
    [pytest.param(i, marks=MARKS.get(i, ()), id=f"cell{i:02d}") for i in range(len(CELLS))],
)
def test_tutorial_cell(cell, namespace):
    # The cells build on one another. Under pytest-xdist a worker may get a cell without the
    # ones before it: those are run first, here, as the tutorial does (a failure among them
    # is their own test's to report).
    ran = namespace.setdefault("__cells_run__", set())
    for earlier in range(cell):
        if earlier not in ran:
            ran.add(earlier)
            try:
                _run(earlier, namespace)
            except Exception:
                pass
    ran.add(cell)
    _run(cell, namespace)
