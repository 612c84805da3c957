"""The distributed example runs end to end on a small local cluster of its own."""

from __future__ import annotations

import importlib.util
import pathlib
import tempfile

import pytest

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.heavy  # the example end to end, on a Ray cluster of its own
def test_distributed_collectors_example_runs(monkeypatch, capsys):
    import gymnasium  # noqa: F401  (the example steps real environments)
    import ray

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
    # the expert rows (whole episodes: at least 1000) and every collected row, once
    assert out["offline_rows"] >= 1000
    assert out["collected_rows"] == out["env_steps"]
    assert out["buffer_rows"] == out["offline_rows"] + out["collected_rows"]
    assert not ray.is_initialized()
    printed = capsys.readouterr().out
    assert "(every collected row stored once)" in printed
    assert "Learner: 40 SAC updates on 50 % offline / 50 % online batches" in printed
    if not out["eval_reached_goal"]:  # it says what a 40-update run is for, not that it failed
        assert "40 updates check the distributed plumbing, they do not train the policy" in printed
    assert "did not reach" not in printed
