"""Demo tests: data roots in temp dirs (the test extra installs every dependency of the demo)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def demo_roots(tmp_path, monkeypatch):
    """Minari datasets and the mixreplay cache go to this test's temp dir, never the home dir."""
    roots = {"minari": tmp_path / "minari-root", "mixreplay": tmp_path / "mixreplay-root"}
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(roots["minari"]))
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(roots["mixreplay"]))
    return roots


@pytest.fixture(autouse=True)
def one_thread():
    """Small SAC updates are slower with more threads on a shared machine (as in the demo's workers)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
