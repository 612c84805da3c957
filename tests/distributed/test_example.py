"""The distributed example runs end to end on a small local cluster of its own."""

from __future__ import annotations

import importlib.util
import json
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


@pytest.mark.heavy  # the example end to end (2 short runs), on a Ray cluster of its own
def test_async_sac_example_holds_the_ratio_set_with_the_limiter(monkeypatch, tmp_path):
    import gymnasium  # noqa: F401  (the example steps real environments)
    import ray

    if ray.is_initialized():
        pytest.skip(
            "the example starts its own Ray cluster; one is already running in this process"
        )
    spec = importlib.util.spec_from_file_location("async_sac", ROOT / "examples" / "async_sac.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    plot, out = tmp_path / "utd.png", tmp_path / "utd.json"
    with tempfile.TemporaryDirectory(prefix="mixreplay-ray-") as ray_tmp:  # short socket paths
        monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
        result = example.main(
            ["--seconds", "3", "--speeds", "4", "--collectors", "1", "--offline", "1000",
             "--learner-rate", "100", "--plot", str(plot), "--out", str(out)]
        )  # fmt: skip
    limited, free = result["runs"]
    assert limited["rate_limiter"] and not free["rate_limiter"] and free["updates"] > 0
    # with the limiter, the counts are in the band: samples_per_insert = 4 x 64 = 256 rows,
    # centred at 256 x 32 (the warm-up rows), error_buffer 512
    i, s = limited["limiter_counts"]["inserts"], limited["limiter_counts"]["samples"]
    assert i >= 32 and abs(i * 256 - s - 256 * 32) <= 512
    # so the learner's updates per env step after the warm-up are 4, within the band (8
    # batches), the rows written during the warm-up beyond 32 (2 x 4) and the 2 prefetched
    steps = limited["env_steps_after_warmup"]
    assert steps > 0 and abs(limited["updates"] - 4 * steps) <= 8 + 8 + 2
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(out.read_text())["runs"][0]["utd"] == limited["utd"]
