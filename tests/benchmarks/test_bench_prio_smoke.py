"""Smoke runs of the issue-20 benchmarks (SAC step, huge pages, one prioritized source), at
tiny sizes in a fresh process; they assert what each prints, never a timing."""

from __future__ import annotations

import re

import pytest

from tests.benchmarks.test_bench_smoke import run_bench

pytestmark = pytest.mark.heavy  # each starts a process that imports torch and TorchRL (> 5 s)


@pytest.mark.torchrl
def test_bench_sac_step_tiny(tmp_path):
    text = run_bench(
        "bench_sac_step.py",
        *("--offline", "2000", "--online", "500", "--capacity", "1000"),
        *("--steps", "2", "--rounds", "1", "--warmup", "1", "--hidden", "16", "--batch", "16"),
        tmp=tmp_path,
    )
    for name in ("mixreplay", "mixreplay prioritized", "TorchRL"):
        row = re.search(rf"^{re.escape(name)}\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)%", text, re.M)
        assert row, name
        buffer, learner, total, share = (float(x) for x in row.groups())
        assert 0.0 < share < 100.0 and buffer + learner == pytest.approx(total, abs=2)


def test_bench_hugepages_tiny(tmp_path):
    text = run_bench(
        "bench_hugepages.py",
        *("--capacities", "1000", "30000", "--rounds", "1", "--number", "2"),
        tmp=tmp_path,
    )
    assert "huge pages offered:" in text
    for op in ("gather", "sample"):
        assert re.search(rf"^\s+30,000\s+\d+\s+\d+\s+{op}\s+[\d.]+\s+[\d.]+\s+[\d.]+", text, re.M)


@pytest.mark.torchrl
def test_bench_samplers_reports_one_prioritized_source_and_torchrl(tmp_path):
    text = run_bench(
        "bench_samplers.py",
        *("--rounds", "1", "--number", "2", "--offline", "2000", "--online", "1000"),
        tmp=tmp_path,
    )
    assert re.search(r"^one source: prioritized sample \+ weights\s+[\d.]+.*<= 2.5x", text, re.M)
    assert re.search(r"^one source: prioritized sample \+ update\s+[\d.]+", text, re.M)
    assert re.search(r"^one source: the same, descending each time\s+[\d.]+", text, re.M)
    assert "TorchRL's PrioritizedReplayBuffer" in text  # runs, or says why not
