"""TorchRL's replay-buffer tutorial (rb_tutorial.py beside this file), run cell by cell.

Cells are the code between sphinx-gallery's ``#####`` text blocks; they run in order in one
namespace, each as a test, so a failing cell names itself. Cells that use what mixreplay
does not claim are left out (with the cells that only use their results).
"""

from __future__ import annotations

import pathlib

import pytest
from _marks import DIFF_PRIVATE, LEFT_OUT_BUFFER, LEFT_OUT_STORAGE

PATH = pathlib.Path(__file__).with_name("rb_tutorial.py")


def _cells() -> list[tuple[int, str]]:
    """``(first line, code)`` of each cell; line numbers are the file's."""
    cells, start, current = [], 1, []
    for number, line in enumerate(PATH.read_text().split("\n"), start=1):
        if line.startswith("######"):
            cells.append((start, "\n".join(current)))
            start, current = number, []
        current.append(line)
    cells.append((start, "\n".join(current)))
    return cells


CELLS = _cells()

MARKS = {
    4: LEFT_OUT_STORAGE,  # ListStorage of Python objects
    9: DIFF_PRIVATE,  # buffer._storage._storage["a"].filename: TorchRL's private layout
    10: LEFT_OUT_BUFFER,  # TensorDictReplayBuffer
    11: LEFT_OUT_BUFFER,  # the sample of cell 10
    **{i: LEFT_OUT_STORAGE for i in range(23, 28)},  # ListStorage of [1, "foo", None]
    **{i: LEFT_OUT_BUFFER for i in range(28, 45)},  # TensorDictReplayBuffer (with pixels envs)
}


@pytest.fixture(scope="module")
def namespace():
    return {"__name__": "rb_tutorial"}


@pytest.mark.parametrize(
    "cell",
    [pytest.param(i, marks=MARKS.get(i, ()), id=f"cell{i:02d}") for i in range(len(CELLS))],
)
def test_tutorial_cell(cell, namespace):
    first, code = CELLS[cell]
    exec(compile("\n" * (first - 1) + code, str(PATH), "exec"), namespace)
