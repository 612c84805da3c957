"""Shared fixtures: every data root goes to a temp dir (helpers, ted_rows included, are in helpers.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile


def _private_dir(variable: str, prefix: str) -> None:
    """Point ``variable`` at a new temp dir removed at exit, unless a parent process already did."""
    if variable in os.environ:  # a worker process of this test session inherits its parent's
        return
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.environ[variable] = path
    atexit.register(shutil.rmtree, path, True)


# matplotlib reads its config/cache dir once, at import: point it away from the home
# directory before any test (or demo worker, which inherits the environment) imports it.
_private_dir("MPLCONFIGDIR", "mixreplay-tests-mpl-")
# Ray's session files (sockets included) go to a short temp dir: a socket path must stay
# under 107 bytes, which pytest's tmp_path would exceed.
_private_dir("RAY_TMPDIR", "mr-ray-")
# torch's compiler cache, likewise (importing torch and tensordict creates it).
_private_dir("TORCHINDUCTOR_CACHE_DIR", "mixreplay-tests-inductor-")

# Imported after the environment above is set: importing torch and tensordict already
# creates torch's compiler cache directory.
import pytest  # noqa: E402

# ted_rows lives in the helpers module; test modules that import it from here still work
from tests.helpers import ted_rows  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """A private base temp dir per session: pytest's shared ``pytest-of-<user>/pytest-N`` dirs are
    pruned (all but the newest 3) by whichever session starts next, so two test runs at once on
    one machine deleted each other's ``tmp_path`` mid-test. ``--basetemp`` still wins."""
    if config.option.basetemp is None:
        base = tempfile.mkdtemp(prefix="mixreplay-pytest-", dir="/tmp")
        atexit.register(shutil.rmtree, base, True)
        config.option.basetemp = os.path.join(base, "t")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A strict xfail names the exception it expects (``raises=``): without it, any error at
    all, a typo included, would count as the expected failure."""
    default_strict = config.getini("xfail_strict")
    bare = sorted(
        {
            item.nodeid.split("[")[0]
            for item in items
            for mark in item.iter_markers("xfail")
            if mark.kwargs.get("strict", default_strict) and "raises" not in mark.kwargs
        }
    )
    if bare:
        raise pytest.UsageError(
            "a strict xfail without raises= (name the exception the test is expected to "
            "raise): " + ", ".join(bare)
        )


@pytest.fixture(autouse=True)
def _isolated_roots(tmp_path_factory, monkeypatch):
    """Nothing a test does lands in the home directory."""
    root = tmp_path_factory.mktemp("roots")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root / "minari"))
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(root / "mixreplay"))
    monkeypatch.setenv("D4RL_DATASET_DIR", str(root / "d4rl"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # throwaway local test clusters only
    monkeypatch.chdir(root)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory


@pytest.fixture(autouse=True)
def _restored_dataset_registry():
    """Whatever a test registers with register_dataset is forgotten after it (in place: the
    registry dict is TorchRL's ``_DATASET_REGISTRY`` name, which code may hold a reference to)."""
    from mixreplay.datasets.registry import _DATASET_REGISTRY

    saved = dict(_DATASET_REGISTRY)
    yield
    _DATASET_REGISTRY.clear()
    _DATASET_REGISTRY.update(saved)


@pytest.fixture
def make_rows():
    return ted_rows


@pytest.fixture
def eager_thread_switches():
    """Threads switch every 10 µs instead of every 5 ms, so a race shows in a short test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)
