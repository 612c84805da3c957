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
    # the floor of the same torch ops, against the buffer and a bare uniform draw
    for name in (
        "bare torch: prioritized draw + weights",
        "bare torch: the same, fixed search sums",
    ):
        assert re.search(rf"^{re.escape(name)}\s+[\d.]+\s+one source: uniform", text, re.M), name
    assert re.search(
        r"^one source: prioritized sample \+ weights\s+[\d.]+\s+bare torch: prioritized", text, re.M
    )


def test_bench_samplers_search_layouts_find_the_same_slots(tmp_path):
    # each layout is checked against one searchsorted inside the benchmark (it raises if one
    # finds another slot); the tiny tree still has a group, a node and a slot level
    text = run_bench(
        "bench_samplers.py",
        *("--skip-mixed", "--searches", "--rounds", "1", "--number", "2", "--online", "5000"),
        tmp=tmp_path,
    )
    for name in (
        "one searchsorted over every prefix sum",
        "node, then slot (two searches)",
        "group, node, slot (three searches)",
        "group, node, slot (compare and count)",
        "one searchsorted, fixed sums",
        "node search alone (every node's last sum)",
    ):
        assert re.search(rf"^{re.escape(name)}\s+[\d.]+\s+[\d.]+x$", text, re.M), name


def test_bench_samplers_times_draws_per_change_of_the_tree(tmp_path):
    text = run_bench(
        "bench_samplers.py",
        *("--skip-mixed", "--runs", "--rounds", "1", "--number", "8", "--online", "5000"),
        tmp=tmp_path,
    )
    for draws in (1, 2, 3, 4, 6, 10):
        assert re.search(rf"^\s+{draws}(\s+[\d.]+){{3}}\s+[\d.]+x$", text, re.M), draws
