"""results.csv, curves.png and the summary, from synthetic records."""

from __future__ import annotations

import pytest

from mixreplay.demo.report import (
    COLUMNS,
    format_markdown,
    format_summary,
    plot_curves,
    plot_panels,
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


# -- several datasets (the halfcheetah task) ---------------------------------------------------

BENCH = [
    *(record("online", s, step, 100.0 * s + step / 10) for s in range(2) for step in (50, 100)),
    *(
        record("mixed", s, step, ret, dataset=d)
        for d, base in (("weak", 10.0), ("good", 1000.0))
        for s in range(2)
        for step, ret in ((50, base + s), (100, 2 * base + s))
    ),
]


def test_summary_per_dataset_with_the_early_return():
    summary = summarize(BENCH, threshold=1500, early_step=60)
    assert [(s["dataset"], s["arm"]) for s in summary] == [
        ("", "online"),
        ("weak", "mixed"),
        ("good", "mixed"),
    ]
    good = summary[2]
    assert good["early_step"] == 60 and good["early_return"] == pytest.approx(1000.5)
    assert (good["early_return_min"], good["early_return_max"]) == (1000.0, 1001.0)
    assert good["final_return"] == pytest.approx(2000.5) and good["seeds_reaching"] == 2
    assert good["steps_per_seed"] == {0: 100, 1: 100}
    assert summarize(BENCH, threshold=1500, early_step=10)[0]["early_return"] is None


def test_markdown_table():
    text = format_markdown(
        summarize(BENCH, threshold=1500, early_step=50), 1500, {"weak": 12.3, "good": 987.6}
    )
    assert text.splitlines() == [
        "| data (mean return) | arm | return at 50: mean [min, max] | "
        "return at 100: mean [min, max] | steps to 1,500: median (seeds) |",
        "|---|---|---|---|---|",
        "| none | online only | 55 [5, 105] | 60 [10, 110] | never (0/2) |",
        "| weak (12) | 50/50 mixed | 10 [10, 11] | 20 [20, 21] | never (0/2) |",
        "| good (988) | 50/50 mixed | 1,000 [1,000, 1,001] | 2,000 [2,000, 2,001] | 100 (2/2) |",
    ]


def test_text_table_has_a_data_column_with_several_datasets():
    text = format_summary(summarize(BENCH, 1500, early_step=50), 1500, success=False)
    header, _, *rows = text.splitlines()
    assert header.startswith("data     arm") and "return at 50" in header
    assert "train success" not in header
    assert rows[0].startswith("none     online only") and rows[2].startswith("good     50/50 mixed")


def test_panels_plot_writes_png(tmp_path):
    path = plot_panels(
        BENCH, tmp_path / "panels.png", threshold=1500, title="t", dataset_returns={"good": 990.0}
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
