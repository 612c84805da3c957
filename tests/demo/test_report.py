"""results.csv, curves.png and the summary, from synthetic records."""

from __future__ import annotations

import pytest

from mixreplay.demo.report import (
    COLUMNS,
    format_summary,
    plot_curves,
    read_csv,
    summarize,
    write_csv,
)


def record(arm, seed, step, ret, success=0.0, dataset=None):
    return {
        "arm": arm,
        "dataset": ("" if arm == "online" else "expert") if dataset is None else dataset,
        "seed": seed,
        "step": step,
        "return": ret,
        "eval_success": float(ret > 80),
        "train_success": success,
        "train_return": float("nan"),
        "train_episodes": step // 100,
        "offline_fraction": 0.5,
        "alpha": 0.1,
        "wall_s": step / 100,
        "cpu_s": step / 100,
    }


RECORDS = [
    *(record("online", s, step, 0.0) for s in range(3) for step in (100, 200, 300)),
    record("mixed", 0, 100, 10.0),
    record("mixed", 0, 200, 90.0),
    record("mixed", 0, 300, 95.0, 1.0),
    record("mixed", 1, 100, 85.0),
    record("mixed", 1, 200, 50.0),
    record("mixed", 1, 300, 92.0, 0.5),
    record("mixed", 2, 100, 0.0),
    record("mixed", 2, 200, 0.0),
    record("mixed", 2, 300, 0.0),
]


def test_summary_counts_first_crossing_per_seed():
    by_arm = {s["arm"]: s for s in summarize(RECORDS, threshold=80)}
    assert list(by_arm) == ["online", "mixed"]  # the demo's arm order
    mixed = by_arm["mixed"]
    assert mixed["steps_per_seed"] == {0: 200, 1: 100, 2: None}
    assert mixed["seeds_reaching"] == 2 and mixed["steps_to_threshold"] == 150
    assert mixed["final_return"] == pytest.approx((95 + 92 + 0) / 3)
    assert (mixed["final_return_min"], mixed["final_return_max"]) == (0.0, 95.0)
    assert mixed["final_train_success"] == pytest.approx(0.5)
    assert (
        by_arm["online"]["seeds_reaching"] == 0 and by_arm["online"]["steps_to_threshold"] is None
    )


def test_summary_table_text():
    text = format_summary(summarize(RECORDS, threshold=80), threshold=80)
    lines = text.splitlines()
    assert "steps to 80" in lines[0]
    online = next(line for line in lines if line.startswith("online only"))
    mixed = next(line for line in lines if line.startswith("50/50 mixed"))
    assert "never" in online and "0/3" in online
    assert "150" in mixed and "2/3" in mixed and "0:200, 1:100, 2:-" in mixed


def test_csv_round_trip(tmp_path):
    path = write_csv(RECORDS, tmp_path / "results.csv")
    header = path.read_text().splitlines()[0].split(",")
    assert header == list(COLUMNS) and header[:5] == ["arm", "dataset", "seed", "step", "return"]
    back = read_csv(path)
    assert len(back) == len(RECORDS)
    assert {(r["arm"], r["dataset"], r["seed"], r["step"], r["return"]) for r in back} == {
        (r["arm"], r["dataset"], r["seed"], r["step"], r["return"]) for r in RECORDS
    }


def test_plot_writes_png(tmp_path):
    path = plot_curves(RECORDS, tmp_path / "curves.png", threshold=80, title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
