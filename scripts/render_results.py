"""Render the README's performance table and the tables of docs/performance.md from the
benchmarks' results files (``benchmarks/results/*.json``, written by ``benchmarks/results.py``).

A rendered table sits between two marker comments, which stay in the page::

    <!-- results:readme -->
    ... (rendered: do not edit by hand) ...
    <!-- /results -->

``readme`` is the README's table (the rows of ``README_ROWS``); every other name is a table of
``TABLES``. A figure edited by hand, or a results file changed without rendering again, makes
``python scripts/render_results.py --check`` fail (``tests/docs/test_results.py`` runs it).

    python scripts/render_results.py            # rewrite the tables in README.md and docs/
    python scripts/render_results.py --check    # exit 1 and name each table that differs
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = (ROOT / "README.md", ROOT / "docs" / "performance.md", ROOT / "docs" / "scaling.md")
MARKER = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)

#: The README's table: at most 6 rows, each a ratio against TorchRL from one run.
#: (label, results file (a name, or a glob of names: the newest match), row name).
#: The lead adds "a TorchRL program's buffer work (sac loop)" once
#: benchmarks/results/bench_torchrl_programs*.json is on main, e.g.:
#: ("a TorchRL program's buffer work (sac loop)", "bench_torchrl_programs*", "<its row name>"),
README_ROWS: list[tuple[str, str, str]] = [
    ("mixed `sample(256)`", "bench_sampling", "mixed sample(256)"),
    ("mixed `sample(1024)`", "bench_sampling", "mixed sample(1024)"),
    ("`extend(1 row)`", "bench_sampling", "extend(1 row)"),
    (
        "a training step: `extend(1)` + `sample(256)`",
        "bench_sampling",
        "step: extend(1)+sample(256)",
    ),
    (
        "a SAC learner's step: the buffer's work",
        "bench_sac_step",
        "buffer work per SAC step: extend(1) + sample(256)",
    ),
    (
        "TorchRL's `sac` program, import changed: its buffer's work per step",
        "bench_program_buffer_tensor",
        "sac's buffer work per step (tensor storage)",
    ),
]
README_MAX_ROWS = 6
PEER_NAMES = {"torchrl": "TorchRL", "torchrl ReplayBuffer": "TorchRL"}


@dataclass(frozen=True)
class Table:
    """One table of docs/performance.md: the rows of one results file that ``keep`` selects.

    ``view``: ``speedup`` shows peer ÷ mixreplay (TorchRL comparisons: above 1 mixreplay is
    faster), ``cost`` shows mixreplay ÷ peer (an operation against a cheaper one of the same
    run: how many times its cost). ``peer`` heads the peer's column; with ``against`` each row
    also names its peer; ``peer=None`` shows mixreplay's figures alone. ``pivot``: rows named
    ``"<row>: <column>"`` become one line per ``<row>`` with a column per ``<column>``.
    ``strip``: a prefix every row name of the table shares, left out.
    """

    file: str
    keep: Callable[[dict[str, Any]], bool] = lambda r: True
    view: str = "speedup"
    peer: str | None = "TorchRL"
    ratio: str = "speed-up"
    against: bool = False
    first: str = "operation"
    pivot: bool = False
    strip: str = ""


def _peer_is(*names: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["peer"] in names


def _named(*prefixes: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["name"].startswith(prefixes)


TABLES: dict[str, Table] = {
    "sampling": Table("bench_sampling", _peer_is("torchrl")),
    "sampling-floors": Table(
        "bench_sampling",
        lambda r: (r["peer"] or "").startswith(("raw floor", "bare torch")),
        view="cost", peer="floor", ratio="mixreplay ÷ floor", against=True,
    ),
    "sampling-extras": Table(
        "bench_sampling", _peer_is("uniform mixed sample(256)"), view="cost",
        peer="uniform mixed `sample(256)`", ratio="÷ uniform",
    ),
    "batch-layout": Table("bench_batch_layout", first="buffer and layout"),
    "data-types": Table("bench_data_types", first="data type and operation"),
    "samplers": Table("bench_samplers", view="cost", peer="its peer", ratio="÷ peer", against=True),
    "samplers-designs": Table("bench_samplers_designs", first="structure", pivot=True),
    "samplers-searches": Table(
        "bench_samplers_searches", view="cost", peer="one `searchsorted`",
        ratio="÷ one `searchsorted`", first="search layout (256 new sums)",
    ),
    "samplers-runs": Table(
        "bench_samplers_runs", view="cost", peer="descending every draw", ratio="÷ descending",
        first="per draw",
    ),
    "hugepages": Table(
        "bench_hugepages", view="cost", peer="plain pages", ratio="huge ÷ plain",
        first="operation (on huge pages)",
    ),
    "sac-step": Table("bench_sac_step", against=True, peer="its peer", ratio="peer ÷ mixreplay"),
    "prefetch": Table(
        "bench_prefetch", view="cost", peer="`prefetch=None`", ratio="÷ without",
        first="with `prefetch=2`",
    ),
    "checkpoint": Table("bench_checkpoint", _peer_is("torchrl ReplayBuffer")),
    "checkpoint-threads": Table(
        "bench_checkpoint", _peer_is("sample(256) alone"), view="cost",
        peer="`sample(256)` alone", ratio="÷ alone",
    ),
    "curves-batch": Table("bench_curves", _named("mixed sample(B)"), first="batch size"),
    "curves-capacity": Table("bench_curves", _named("mixed sample(256), ring"), first="ring"),
    "curves-rowsize": Table("bench_curves", _named("mixed sample(256), rows"), first="row size"),
    "curves-memory": Table("bench_curves", _named("memmap"), peer=None, pivot=True,
                           first="memmap dataset on disk"),
    "ray-writes": Table("bench_ray", _named("writes"), peer="its peer", ratio="× the peer",
                        against=True, first="writes", strip="writes, "),
    "ray-latency": Table("bench_ray", _named("latency"), against=True, peer="its peer",
                         first="one call", strip="latency, median: "),
    "ray-learner": Table("bench_ray", _named("learner"), view="cost", peer="prefetch 0",
                         ratio="÷ prefetch 0", first="time waiting",
                         strip="learner's time waiting, "),
    "ray-overhead": Table("bench_ray", _named("actor", "the writer"), view="cost",
                          against=True, peer="its peer", ratio="÷ peer",
                          first="exactly-once writes, per message"),
    "versions": Table(
        "bench_versions", view="cost", peer="baseline", ratio="this ÷ baseline",
        first="operation (in yardsticks)",
    ),
}  # fmt: skip

UNITS = {"us": "µs", "yardsticks": ""}


def load(name: str) -> tuple[dict[str, Any], Path]:
    """The results file ``name`` (a glob: the newest match by its date)."""
    paths = sorted(RESULTS.glob(f"{name}.json"))
    if not paths:
        raise SystemExit(f"render_results: no results file {RESULTS / name}.json")
    found = [(json.loads(p.read_text()), p) for p in paths]
    return max(found, key=lambda f: f[0]["date"])


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}" if unit != "us" else f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.1f}" if unit not in ("s", "yardsticks") else f"{value:.2f}"
    else:
        text = f"{value:.3f}"
    suffix = UNITS.get(unit, unit)
    return f"{text} {suffix}".strip()


def ratio_text(r: dict[str, Any], view: str) -> str:
    if r["ratio"] is None:
        return ""
    x = r["ratio"] if view == "speedup" else 1 / r["ratio"]
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def _code_name(name: str) -> str:
    """An operation named as code where it is a call: ``sample(256)`` ..."""
    call = r"((?:\w+\.)?(?:sample|extend|add|update_priority|dumps|loads)\([^)]*\))"
    return re.sub(r"(?<![\w.`])" + call, r"`\1`", name)


def source_line(files: list[tuple[dict[str, Any], Path]], page: Path) -> str:
    """The command of each run and where its results file is."""
    parts = []
    for data, path in files:
        v, m = data["versions"], data["machine"]
        parts.append(
            f"`{data['command']}` (results: `benchmarks/results/{path.name}`; mixreplay "
            f"{v['mixreplay']}, torch {v['torch']}, TorchRL {v.get('torchrl') or '-'}, "
            f"{m['cores']} cores)"
        )
    return "; ".join(parts)


def render_pivot(spec: Table, rows: list[dict[str, Any]]) -> list[str]:
    table: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for r in rows:
        line, column = r["name"].rsplit(": ", 1)
        table.setdefault(line, {})[column] = fmt(r["mixreplay"], r["unit"])
        columns += [column] if column not in columns else []
    lines = ["| " + " | ".join([spec.first, *map(_code_name, columns)]) + " |"]
    lines.append("|---|" + "---:|" * len(columns))
    for line, cells in table.items():
        lines.append("| " + " | ".join([line, *(cells.get(c, "") for c in columns)]) + " |")
    return lines


def render_table(spec: Table, page: Path) -> str:
    data, path = load(spec.file)
    rows = [r for r in data["rows"] if spec.keep(r)]
    if not rows:
        raise SystemExit(f"render_results: {path.name} has no rows for this table")
    if spec.pivot:
        lines = render_pivot(spec, rows)
        lines += ["", source_line([(data, path)], page) + "."]
        return "\n".join(lines) + "\n"
    if spec.peer is None:
        lines = [f"| {spec.first} | mixreplay |", "|---|---:|"]
        lines += [f"| {_code_name(r['name'])} | {fmt(r['mixreplay'], r['unit'])} |" for r in rows]
        lines += ["", source_line([(data, path)], page) + "."]
        return "\n".join(lines) + "\n"
    head = (
        [spec.first, "mixreplay"] + (["against"] if spec.against else []) + [spec.peer, spec.ratio]
    )
    lines = [
        "| " + " | ".join(head) + " |",
        "|---|---:|" + ("---|" if spec.against else "") + "---:|---:|",
    ]
    for r in rows:
        cells = [_code_name(r["name"].removeprefix(spec.strip)), fmt(r["mixreplay"], r["unit"])]
        if spec.against:
            cells.append(_code_name(PEER_NAMES.get(r["peer"], r["peer"] or "")))
        cells += [fmt(r["peer_value"], r["unit"]), ratio_text(r, spec.view)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(source_line([(data, path)], page) + ".")
    return "\n".join(lines) + "\n"


def render_readme(page: Path) -> str:
    if len(README_ROWS) > README_MAX_ROWS:
        raise SystemExit(f"render_results: the README's table has at most {README_MAX_ROWS} rows")
    lines = ["| operation | mixreplay | TorchRL | speed-up |", "|---|---:|---:|---:|"]
    used: list[tuple[dict[str, Any], Path]] = []
    for label, file, name in README_ROWS:
        data, path = load(file)
        found = [r for r in data["rows"] if r["name"] == name and r["peer"] in PEER_NAMES]
        if len(found) != 1:
            raise SystemExit(f"render_results: {path.name} has no row {name!r} against TorchRL")
        r = found[0]
        lines.append(
            f"| {label} | {fmt(r['mixreplay'], r['unit'])} | {fmt(r['peer_value'], r['unit'])} "
            f"| {ratio_text(r, 'speedup')} |"
        )
        if all(p != path for _, p in used):
            used.append((data, path))
    lines.append("")
    lines.append(
        "Each row is one run with both libraries in one process: "
        + "; ".join(f"`{d['command']}`" for d, _ in used)
        + ". Figures, machine and versions: "
        + ", ".join(f"`benchmarks/results/{p.name}`" for _, p in used)
        + ". More operations, and what limits each figure: [Performance](docs/performance.md)."
    )
    return "\n".join(lines) + "\n"


def render(text: str, page: Path) -> str:
    """``text`` with every marked table rendered again."""

    def one(m: re.Match[str]) -> str:
        name = m.group(2)
        if name == "readme":
            body = render_readme(page)
        elif name in TABLES:
            body = render_table(TABLES[name], page)
        else:
            raise SystemExit(f"render_results: {page.name}: no table named {name!r}")
        return m.group(1) + body + m.group(4)

    return MARKER.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    args = p.parse_args(argv)
    stale = []
    for page in PAGES:
        text = page.read_text()
        new = render(text, page)
        if new == text:
            continue
        if args.check:
            old_tables = {m.group(2): m.group(3) for m in MARKER.finditer(text)}
            for m in MARKER.finditer(new):
                if old_tables.get(m.group(2)) != m.group(3):
                    stale.append(f"{page.relative_to(ROOT)}: table {m.group(2)!r}")
        else:
            page.write_text(new)
            print(f"render_results: rendered {page.relative_to(ROOT)}")
    if stale:
        print(
            "render_results: these tables differ from benchmarks/results/ (edited by hand, or a "
            "results file changed): run `python scripts/render_results.py`\n  "
            + "\n  ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
