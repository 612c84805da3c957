"""The distributed example runs end to end on a small local cluster of its own."""

from __future__ import annotations

import importlib.util
import pathlib
import tempfile

import pytest

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_distributed_collectors_example_runs(monkeypatch):
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'mixreplay[ray]'")
    pytest.importorskip(
        "gymnasium", reason="the example needs gymnasium: pip install 'mixreplay[demo]'"
    )
    if ray.is_initialized():
        pytest.skip(
            "the example starts its own Ray cluster; one is already running in this process"
        )
    spec = importlib.util.spec_from_file_location(
        "distributed_collectors", ROOT / "examples" / "distributed_collectors.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with tempfile.TemporaryDirectory(prefix="mixreplay-ray-") as ray_tmp:  # short socket paths
        monkeypatch.setenv(
            "RAY_TMPDIR", ray_tmp
        )  # (RAY_AUTH_MODE=disabled comes from tests/conftest.py)
        out = example.main(["--updates", "40", "--offline", "1000", "--round-steps", "20"])
    assert out["updates"] == 40
    assert out["env_steps"] >= 40
    assert out["buffer_rows"] >= 1000 + out["env_steps"]  # the expert rows, and every collected row
    assert not ray.is_initialized()
