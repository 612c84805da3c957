"""Every benchmark script runs once, at tiny sizes, in a fresh process (issue 12: smoke tests).

These check that each script still runs against the current code and prints what it
promises; they assert no timing (the figures of a tiny run on a shared machine mean nothing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# every benchmark script run once at tiny sizes, each in a subprocess: minutes in all
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
#: the fields of a results file, in order (benchmarks/results.py writes them)
FIELDS = ("benchmark", "command", "date", "machine", "versions", "settings", "rows", "notes")
CURVES = ("batch", "capacity", "rowsize", "memory")


def run_bench(script: str, *args: str, tmp: Path, results: Path | None = None) -> str:
    """Run ``benchmarks/<script>`` with ``args``; its stdout. Temp files go under ``tmp``, its
    results file into ``results`` (default ``tmp/results``), never over benchmarks/results/."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "TMPDIR": str(tmp),
        "OMP_NUM_THREADS": "1",
        "MIXREPLAY_RESULTS_DIR": str(results or tmp / "results"),
    }
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, f"{script} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table printed after ``heading`` (header and rule excluded)."""
    block = text.split(heading, 1)[1]
    rows = []
    for line in block.splitlines()[1:]:
        if line.startswith("### "):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]


@pytest.mark.torchrl
def test_bench_curves_quick_draws_every_curve(tmp_path):
    out = tmp_path / "figs" / "perf.png"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    text = run_bench(
        "bench_curves.py", "--quick", "--out", str(out), "--dir", str(scratch), tmp=tmp_path
    )

    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(out).shape
    assert height > 500 and width > 500
    saved = json.loads(out.with_suffix(".json").read_text())
    assert set(saved["curves"]) == set(CURVES)

    expected_x = {
        "batch": ["64", "256", "1,024"],
        "capacity": ["1,000", "10,000"],
        "rowsize": ["100 B", "1,004 B", "9,996 B"],
        "memory": ["1 MiB", "4 MiB"],
    }
    for name in CURVES:
        heading = f"### curve {name}:"
        assert heading in text, f"no table for the {name} curve:\n{text}"
        assert f"command: python benchmarks/bench_curves.py --curve {name} --quick" in text
        rows = table_rows(text, heading)
        assert [r[0] for r in rows] == expected_x[name]
        assert len(saved["curves"][name]["points"]) == len(rows)
        for cells in rows:
            assert "—" not in cells, f"{name}: a value is missing in {cells}"
        if name != "memory":  # both libraries measured; the ratio is theirs
            for cells, point in zip(rows, saved["curves"][name]["points"]):
                assert float(cells[3]) == pytest.approx(1 / point["speedup"], rel=1e-2, abs=1e-3)
                lo, hi = point["speedup_range"]
                assert lo <= point["speedup"] <= hi
                assert re.fullmatch(r"[\d.]+× \([\d.]+–[\d.]+\)", cells[4])
    assert list(scratch.iterdir()) == []  # the memmap datasets were deleted

    # --replot draws the same figure again from the saved numbers, measuring nothing
    out.unlink()
    again = run_bench("bench_curves.py", "--replot", "--out", str(out), tmp=tmp_path)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "measuring" not in again
    for name in CURVES:
        assert table_rows(again, f"### curve {name}:") == table_rows(text, f"### curve {name}:")


def _published() -> bytes | None:
    path = BENCH / "results" / "bench_sampling.json"
    return path.read_bytes() if path.exists() else None


@pytest.mark.torchrl
def test_bench_sampling_tiny(tmp_path):
    published = _published()
    text = run_bench(
        "bench_sampling.py",
        "--rounds",
        "1",
        "--offline",
        "2000",
        "--online",
        "1000",
        "--extras",
        tmp=tmp_path,
    )
    for op in ("mixed sample(256)", "mixed sample(1024)", "extend(1 row)", "extend(1000 rows)"):
        assert re.search(rf"^{re.escape(op)}\s+[\d.]+\s+[\d.]+\s+[\d.]+x", text, re.M), op
    for op in ("3-way mixture", "prioritized sample+update(256)", "slices sample(256"):
        assert op in text
    # its results file: the shared format, each figure beside TorchRL's from the same run
    saved = json.loads((tmp_path / "results" / "bench_sampling.json").read_text())
    assert list(saved) == list(FIELDS)
    assert saved["command"].startswith("python benchmarks/bench_sampling.py --rounds 1 ")
    assert saved["settings"]["offline_rows"] == 2000
    first = saved["rows"][0]
    assert (first["name"], first["peer"], first["better"]) == (
        "mixed sample(256)",
        "torchrl",
        "lower",
    )
    assert first["ratio"] == pytest.approx(first["peer_value"] / first["mixreplay"], rel=1e-3)
    assert _published() == published  # the published results are left alone
    for B in (256, 1024):  # the floor of a batch whose leaves own their memory
        assert re.search(
            rf"^mixed sample\({B}\): the same torch work with each leaf copied out .* "
            r"[\d.]+ µs; mixreplay [\d.]+x it$",
            text,
            re.M,
        ), B


@pytest.mark.torchrl
def test_bench_checkpoint_tiny(tmp_path):
    scratch = tmp_path / "ckpt"
    scratch.mkdir()
    text = run_bench(
        "bench_checkpoint.py",
        "--rounds",
        "1",
        "--filled",
        "1000",
        "--capacity",
        "10000",
        "--offline",
        "10000",
        "--seconds",
        "0.05",
        "--dir",
        str(scratch),
        tmp=tmp_path,
    )
    assert "torchrl 0.14.1 ReplayBuffer" in text
    assert "mixed sample(256), offline 10,000 rows, online 1,000 rows" in text
    assert "sample(256) alone, again" in text
    assert list(scratch.iterdir()) == []


@pytest.mark.torchrl  # its peers: TorchRL's MinariExperienceReplay
def test_bench_datasets_quick(tmp_path):
    scratch = tmp_path / "data"
    scratch.mkdir()
    text = run_bench("bench_datasets.py", "--quick", "--dir", str(scratch), tmp=tmp_path)
    for what in (
        "| convert Minari (2 episodes of 1000) | 2,000 |",
        "| convert D4RL (with next_observations) | 2,000 |",
        "| open cached d4rl: (2,000 rows) + 1000 sample(256) |",
        "| open cached minari: (2,000 rows) + 1000 sample(256) |",
        "| peer: TensorDict.load_memmap (2,000 rows, one file per key) |",
        "file evicted from the page cache first",
        "↳ peer: TorchRL MinariExperienceReplay | 2,000 |",
    ):
        assert what in text, what
    assert list(scratch.iterdir()) == []


def test_bench_prefetch_tiny(tmp_path):
    text = run_bench(
        "bench_prefetch.py", "--steps", "20", "--rounds", "1", "--work-ms", "0.2", tmp=tmp_path
    )
    assert re.search(r"^prefetch=None\s+[\d.]+%", text, re.M)
    assert re.search(r"^prefetch=2\s+[\d.]+%", text, re.M)
    assert "time in sample(): prefetch=2 is" in text


@pytest.mark.ray
@pytest.mark.torchrl  # its peer: TorchRL's RayReplayBuffer
def test_bench_ray_quick(tmp_path):
    # Ray's socket paths must stay short: its temp dirs go under the session's short RAY_TMPDIR.
    text = run_bench(
        "bench_ray.py",
        "--quick",
        "--seconds",
        "0.3",
        tmp=Path(os.environ["RAY_TMPDIR"]),
        results=tmp_path,
    )
    assert json.loads((tmp_path / "bench_ray.json").read_text())["rows"]
    assert "| mixreplay writer: w.add / w.extend (batched, in flight)" in text
    assert re.search(r"\| torchrl 0\.14 RayReplayBuffer \(blocking\)\s+\|\s+[\d,]+ \|", text)
    assert "| mixreplay rb.sample(256)" in text
    assert "2 collectors at 2,000 rows/s each" in text


def test_bench_versions_tiny(tmp_path):
    # the checkout against itself: the table has every operation, each ratio a number
    text = run_bench(
        "bench_versions.py",
        "--baseline",
        str(ROOT),
        "--rounds",
        "1",
        "--offline",
        "2000",
        "--online",
        "1000",
        tmp=tmp_path,
    )
    for op in ("sample(256)", "extend(1)", "extend(1000)", "dumps", "loads"):
        assert re.search(rf"^{re.escape(op)}(\s+[\d.]+){{5}}x\s+[\d.]+-[\d.]+x$", text, re.M), op


@pytest.mark.torchrl
def test_bench_samplers_tiny(tmp_path):
    text = run_bench(
        "bench_samplers.py",
        "--rounds",
        "1",
        "--number",
        "2",
        "--offline",
        "2000",
        "--online",
        "1000",
        tmp=tmp_path,
    )
    for op in ("prioritized sample(256) + weights", "slices(8) sample(256)", "slices extend(1)"):
        assert re.search(rf"^{re.escape(op)}\s+[\d.]+\s+.*[\d.]+x", text, re.M), op


@pytest.mark.torchrl
def test_bench_dedup_tiny(tmp_path):
    text = run_bench(
        "bench_dedup.py", "--capacity", "600", "--rounds", "1", "--number", "2", tmp=tmp_path
    )
    assert re.search(r"bytes per transition: plain [\d,]+, dedup [\d,]+ \([\d.]+x\)", text)
    for op in ("sample(256)", "extend(1 row)", "extend(1000 rows)"):
        assert re.search(rf"^{re.escape(op)}\s+[\d.]+\s+[\d.]+\s+[\d.]+x$", text, re.M), op
    assert "dedup/torchrl" in text


@pytest.mark.torchrl
def test_bench_data_types_tiny(tmp_path):
    text = run_bench(
        "bench_data_types.py", "--capacity", "500", "--rounds", "1", "--number", "3", tmp=tmp_path
    )
    for kind in ("tensordict", "tensorclass", "pytree", "tensor"):
        for op in ("extend(1)", "extend(1000)", "sample(256)"):
            assert re.search(rf"^{kind} +{re.escape(op)} +[\d.]+ +[\d.]+ +[\d.]+x$", text, re.M), (
                text
            )


def test_halfcheetah_report_joins_complete_runs(tmp_path):
    """Two results.csv (a cut-off run, then the missing arms): one table and figure of the
    runs that reached the last step; a repeated run counts once, a stopped one is named."""
    from mixreplay.demo.report import COLUMNS, read_csv, write_csv

    def rows(dataset, arm, seed, last, ret):
        base = dict.fromkeys(COLUMNS, 0.0)
        return [
            {**base, "arm": arm, "dataset": dataset, "seed": seed, "step": s, "return": ret + s}
            for s in range(1_000, last + 1, 1_000)
        ]

    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    write_csv(rows("", "online", 0, 4_000, 0.0) + rows("weak", "mixed", 0, 2_000, 0.0), first)
    write_csv(rows("weak", "mixed", 0, 4_000, 500.0) + rows("", "online", 0, 4_000, 9e3), second)
    text = run_bench(
        "halfcheetah_report.py", str(first), str(second), "--out", str(tmp_path / "r" / "hc"),
        "--steps", "4000", "--early-step", "2000", "--threshold", "4000",
        "--dataset-return", "weak=742", tmp=tmp_path,
    )  # fmt: skip
    assert f"left out (stopped before step 4,000): ('weak', 'mixed', 0) in {first}" in text
    assert "runs: none/online: seeds [0], weak/mixed: seeds [0]" in text
    assert "| none | online only | 2,000 [2,000, 2,000] | 4,000 [4,000, 4,000] |" in text
    assert "| weak (742) | 50/50 mixed | 2,500 [2,500, 2,500] | 4,500 [4,500, 4,500] |" in text
    assert len(read_csv(tmp_path / "r" / "hc.csv")) == 8  # the first file's online run only
    assert (tmp_path / "r" / "hc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.torchrl
def test_bench_program_buffer_tiny(tmp_path):
    out = tmp_path / "result.json"
    text = run_bench(
        "bench_program_buffer.py",
        *("--batches", "2", "--frames-per-batch", "50", "--capacity", "1000", "--prefill", "200"),
        *("--storage", "memmap", "--out", str(out)),
        tmp=tmp_path,
    )
    assert "ratio (TorchRL / mixreplay)" in text
    result = json.loads(out.read_text())
    assert result["benchmark"] == "bench_program_buffer"
    (row,) = result["rows"]
    assert row["peer"] == "torchrl" and row["mixreplay"] > 0 and row["peer_value"] > 0
    assert {"python", "torch", "tensordict", "torchrl", "mixreplay"} <= set(result["versions"])


def test_bench_rate_limiter_tiny_writes_its_results(tmp_path):
    out = tmp_path / "bench_rate_limiter.json"
    text = run_bench(
        "bench_rate_limiter.py",
        "--rounds", "1", "--calls", "20", "--offline", "2000", "--out", str(out),
        tmp=tmp_path,
    )  # fmt: skip
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "bench_rate_limiter"
    names = [r["name"] for r in saved["rows"]]
    assert "OfflineToOnline mixed sample(256)" in names and len(names) == 6
    for row in saved["rows"]:
        assert row["peer"] == "no limiter" and row["unit"] == "us" and row["better"] == "lower"
        assert row["ratio"] == pytest.approx(row["peer_value"] / row["mixreplay"], rel=0.01)
        assert f"| {row['name']} |" in text
    assert set(saved["versions"]) == {"python", "torch", "tensordict", "torchrl", "mixreplay"}
