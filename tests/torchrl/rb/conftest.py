"""TorchRL's replay-buffer tests, ported (see _target.py for the target switch)."""

from __future__ import annotations

import pathlib
import signal

import pytest

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    marks = None
    for item in items:
        if _HERE not in pathlib.Path(str(item.fspath)).parents:
            continue
        # every test here imports TorchRL (its helpers, writers and transforms)
        item.add_marker(pytest.mark.torchrl)
        # marks of single parametrized items (_marks.ITEM_MARKS)
        marks = _item_marks() if marks is None else marks
        for pattern, mark in marks:
            if pattern.search(item.nodeid):
                item.add_marker(mark)


@pytest.fixture(autouse=True, scope="package")
def _children_feel_sigint():
    """Let the test's child processes be interrupted by SIGINT, as from a terminal.

    A non-interactive shell starts a background job with SIGINT ignored, and a child
    inherits an ignored signal across ``exec``: TorchRL's ``test_cleanup_signal_interrupt``
    then sees its child sleep through the signal. A *handled* signal is reset to the
    default on ``exec``, so with Python's handler restored here (once, for the port's
    tests) the child gets its own.
    """
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_configure(config):
    # TorchRL's own mark for tests that need a GPU (they also skip without CUDA)
    config.addinivalue_line("markers", "gpu: TorchRL's mark for tests that need a GPU")


def _item_marks():
    import re

    from _marks import ITEM_MARKS

    return [(re.compile(pattern), mark) for pattern, mark in ITEM_MARKS]
