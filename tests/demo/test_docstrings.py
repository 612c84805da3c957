"""The demo's docstring examples run (the package-wide doctest test skips the demo)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import mixreplay.demo


@pytest.mark.parametrize(
    "name",
    sorted(
        i.name
        for i in pkgutil.walk_packages(mixreplay.demo.__path__, "mixreplay.demo.")
        if not i.name.endswith("__main__")
    ),
)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
