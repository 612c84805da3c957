"""The asynchronous fine-tuning page quotes its figures from the files that measured them.

``docs/async_sac.json`` (``examples/async_sac.py``) and
``benchmarks/results/bench_rate_limiter.json`` (``benchmarks/bench_rate_limiter.py``).
"""

from __future__ import annotations

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "async.md"


def table(heading_text: str) -> list[list[str]]:
    """The cells of the first table after the line holding ``heading_text``."""
    lines = PAGE.read_text().split(heading_text, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[2:]  # header and rule left out


def test_the_example_table_is_the_example_s_measurement():
    saved = json.loads((ROOT / "docs" / "async_sac.json").read_text())
    rows = table("![Updates per environment step over time")
    assert len(rows) == len(saved["runs"]) == 4
    for cells, run in zip(rows, saved["runs"]):
        speed = "4× slower" if run["collector_speed"] < 1 else "4× faster"
        w = run["window_utd"]
        assert cells == [
            speed,
            "yes" if run["rate_limiter"] else "no",
            f"{run['updates']:,}",
            f"{run['env_steps_after_warmup']:,}",
            f"{run['utd']:.2f}",
            f"{w['mean']:.2f} ({w['min']:.2f}–{w['max']:.2f})",
        ]
    assert saved["settings"]["seconds"] == 20 and saved["settings"]["utd"] == 4
    assert (ROOT / "docs" / "async_utd.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cost_table_is_the_benchmark_s_results():
    saved = json.loads((ROOT / "benchmarks" / "results" / "bench_rate_limiter.json").read_text())
    rows = table("## What it costs")
    assert rows == [
        [r["name"], f"{r['mixreplay']:g}", f"{r['peer_value']:g}", f"{r['ratio']:g}"]
        for r in saved["rows"]
    ]
    assert saved["settings"]["rounds"] == 9 and saved["settings"]["clock"] == "thread"
