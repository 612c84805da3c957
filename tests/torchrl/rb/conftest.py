"""TorchRL's replay-buffer tests, ported (see _target.py for the target switch)."""

from __future__ import annotations

import pathlib

import pytest

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).parents:
            # every test here imports TorchRL (its helpers, writers and transforms)
            item.add_marker(pytest.mark.torchrl)


def pytest_configure(config):
    # TorchRL's own mark for tests that need a GPU (they also skip without CUDA)
    config.addinivalue_line("markers", "gpu: TorchRL's mark for tests that need a GPU")
