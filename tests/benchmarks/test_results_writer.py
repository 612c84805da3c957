"""benchmarks/results.py: the one writer of the benchmarks' results files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_results", ROOT / "benchmarks" / "results.py")
results = importlib.util.module_from_spec(_spec)
sys.modules["bench_results"] = results
_spec.loader.exec_module(results)


def test_a_results_file_has_the_shared_fields_in_order(tmp_path):
    rows = [
        results.row("mixed sample(256)", "us", 33.1, peer="torchrl", peer_value=320.4),
        results.row("writes", "rows/s", 2e6, peer="torchrl", peer_value=5e5, better="higher"),
        results.row("on disk", "MB", 11.2),
    ]
    path = results.write_results(
        "bench_x_variant",
        "python benchmarks/bench_x.py --rounds 5",
        rows,
        settings={"rounds": 5},
        notes="what limits it",
        directory=tmp_path,
    )
    assert path == tmp_path / "bench_x_variant.json"
    data = json.loads(path.read_text())
    assert list(data) == list(results.FIELDS)
    assert data["benchmark"] == "bench_x"  # the script; the file's name carries the variant
    assert data["command"] == "python benchmarks/bench_x.py --rounds 5"
    assert data["settings"] == {"rounds": 5} and data["notes"] == "what limits it"
    assert data["machine"]["cores"] >= 1 and len(data["machine"]["load_avg"]) == 3
    assert data["versions"]["mixreplay"]
    assert [list(r) for r in data["rows"]] == [list(results.ROW_FIELDS)] * 3
    # the ratio is above 1 when mixreplay is ahead, for times and for rates
    assert data["rows"][0]["ratio"] == pytest.approx(320.4 / 33.1, rel=1e-3)
    assert data["rows"][1]["ratio"] == pytest.approx(4.0)
    assert data["rows"][2]["peer"] is None and data["rows"][2]["ratio"] is None
    assert [p.name for p in tmp_path.iterdir()] == ["bench_x_variant.json"]


def test_the_environment_variable_redirects_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXREPLAY_RESULTS_DIR", str(tmp_path / "elsewhere"))
    path = results.write_results("bench_y", "python benchmarks/bench_y.py", [])
    assert path == tmp_path / "elsewhere" / "bench_y.json"


def test_two_rows_with_one_name_and_one_peer_are_refused(tmp_path):
    twice = [results.row("a", "us", 1.0, peer="p", peer_value=2.0)] * 2
    with pytest.raises(ValueError, match="share a name and a peer"):
        results.write_results("bench_z", "python benchmarks/bench_z.py", twice, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="better must be"):
        results.row("a", "us", 1.0, better="faster")


def test_the_command_is_the_one_typed_from_the_repository_root():
    argv = ["/somewhere/benchmarks/bench_sampling.py", "--rounds", "5", "--note", "a b"]
    assert results.command_line(argv) == (
        "python benchmarks/bench_sampling.py --rounds 5 --note 'a b'"
    )
