"""The figures of the README and of docs/performance.md are the results files' figures.

``scripts/render_results.py`` renders each table between its marker comments from
``benchmarks/results/*.json``; these tests fail when a figure was edited by hand or a results
file changed without rendering again, and when a results file leaves the shared format.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
FIELDS = ["benchmark", "command", "date", "machine", "versions", "settings", "rows", "notes"]
ROW_FIELDS = ["name", "unit", "mixreplay", "peer", "peer_value", "ratio", "better"]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


render = _load("render_results", ROOT / "scripts" / "render_results.py")


def test_the_rendered_tables_are_the_results_files(capsys):
    assert render.main(["--check"]) == 0, capsys.readouterr().err


def test_a_figure_edited_by_hand_is_found():
    readme = ROOT / "README.md"
    text = readme.read_text()
    table = re.search(r"<!-- results:readme -->\n(.*?)<!-- /results -->", text, re.S)
    assert table, "the README has no rendered table"
    figure = re.search(r"\| \d+\.\d+×", table.group(1))
    edited = text.replace(figure.group(0), "| 99.9×", 1)
    assert edited != text
    assert render.render(edited, readme) == text


def test_a_changed_results_file_is_found(tmp_path, monkeypatch):
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    data = json.loads((copy / "bench_sampling.json").read_text())
    data["rows"][0]["mixreplay"] *= 2
    data["rows"][0]["ratio"] /= 2
    (copy / "bench_sampling.json").write_text(json.dumps(data))
    monkeypatch.setattr(render, "RESULTS", copy)
    page = ROOT / "docs" / "performance.md"
    text = page.read_text()
    assert render.render(text, page) != text


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_has_the_shared_format(path):
    data = json.loads(path.read_text())
    assert list(data) in (FIELDS, [*FIELDS, "detail"])
    assert path.stem.startswith(data["benchmark"])
    script = data["command"].split()[1]
    assert data["command"].startswith("python ") and (ROOT / script).is_file(), script
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["date"])
    assert {"platform", "cpu", "cores", "load_avg"} <= set(data["machine"])
    assert {"python", "torch", "tensordict", "mixreplay"} <= set(data["versions"])
    assert data["rows"]
    for row in data["rows"]:
        assert list(row) == ROW_FIELDS, row
        assert row["better"] in ("lower", "higher")
        if row["ratio"] is not None:
            mine, theirs = row["mixreplay"], row["peer_value"]
            expected = theirs / mine if row["better"] == "lower" else mine / theirs
            assert row["ratio"] == pytest.approx(expected, rel=1e-3), row


def test_the_readme_table_has_at_most_six_rows_each_against_torchrl():
    assert len(render.README_ROWS) <= 6
    body = render.render_readme(ROOT / "README.md")
    rows = [line for line in body.splitlines() if line.startswith("| ") and "---" not in line]
    assert 1 < len(rows) <= 7  # the header and at most six figures
    assert rows[0] == "| operation | mixreplay | TorchRL | speed-up |"


def test_every_table_is_on_a_page_and_every_marker_names_a_table():
    found = []
    for page in render.PAGES:
        found += [m.group(2) for m in render.MARKER.finditer(page.read_text())]
    assert sorted(found) == sorted(["readme", *render.TABLES])


def test_the_readme_row_list_refuses_a_seventh_row(monkeypatch):
    monkeypatch.setattr(render, "README_ROWS", render.README_ROWS + [render.README_ROWS[0]] * 6)
    with pytest.raises(SystemExit, match="at most 6 rows"):
        render.render_readme(ROOT / "README.md")
