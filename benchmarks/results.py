"""The one writer of benchmark results files: ``benchmarks/results/<name>.json``.

Every benchmark that feeds the README or the docs ends with one call::

    from results import row, write_results

    write_results(
        "bench_sampling",
        command_line(),
        [row("mixed sample(256)", "us", 33.1, peer="torchrl", peer_value=320.4)],
        settings={"rounds": 5},
        notes="what the figures mean, what limits them",
    )

The file holds the command, the date (UTC), the machine (with its load average at the start
and at the end of the run), the library versions, the settings and one row per figure with its
peer's figure from the same run. ``ratio`` is the peer's figure over mixreplay's for times
(``better="lower"``) and mixreplay's over the peer's for rates (``better="higher"``): above 1
means mixreplay is ahead. ``scripts/render_results.py`` renders the README's table and the
tables of ``docs/performance.md`` from these files.

``MIXREPLAY_RESULTS_DIR`` redirects the files (the test suite's smoke runs write into a
temporary directory, never over the published results).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: the load average when the benchmark started (this module is imported at its start)
LOAD_AT_START = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
#: the fields of a file, in order (then an optional "detail"), and of each row
FIELDS = ("benchmark", "command", "date", "machine", "versions", "settings", "rows", "notes")
ROW_FIELDS = ("name", "unit", "mixreplay", "peer", "peer_value", "ratio", "better")


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran this benchmark, as typed from the repository root."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0])
    shown = f"benchmarks/{script.name}" if script.suffix == ".py" else str(script)
    return shlex.join(["python", shown, *argv[1:]])


def row(
    name: str,
    unit: str,
    mixreplay: float | None,
    *,
    peer: str | None = None,
    peer_value: float | None = None,
    better: str = "lower",
) -> dict[str, Any]:
    """One figure and its peer's from the same run; ``ratio`` above 1 means mixreplay is ahead."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', got {better!r}")
    ratio = None
    if mixreplay is not None and peer_value is not None and mixreplay > 0 and peer_value > 0:
        ratio = peer_value / mixreplay if better == "lower" else mixreplay / peer_value
    return {
        "name": name,
        "unit": unit,
        "mixreplay": _num(mixreplay),
        "peer": peer,
        "peer_value": _num(peer_value),
        "ratio": _num(ratio, 4),
        "better": better,
    }


def _num(x: float | None, digits: int = 6) -> float | None:
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def machine() -> dict[str, Any]:
    """The platform, the CPU's name, the cores and the load average now (and at the start)."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if LOAD_AT_START is not None:
        out["load_avg_start"] = [round(x, 2) for x in LOAD_AT_START]
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Python, torch, tensordict, torchrl and mixreplay as imported, and mixreplay's commit."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("torch", "tensordict", "torchrl"):
        module = sys.modules.get(dist)
        out[dist] = getattr(module, "__version__", None) or _version(dist)
    import mixreplay

    out["mixreplay"] = mixreplay.__version__
    root = Path(mixreplay.__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "mixreplay"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        out["mixreplay_commit"] = head + ("+modified" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        out["mixreplay_commit"] = None
    return out


def write_results(
    name: str,
    command: str,
    rows: list[dict[str, Any]],
    *,
    settings: dict[str, Any] | None = None,
    notes: str = "",
    detail: dict[str, Any] | None = None,
    directory: str | Path | None = None,
) -> Path:
    """Write ``<directory>/<name>.json`` (default ``benchmarks/results``, or
    ``$MIXREPLAY_RESULTS_DIR``) and return its path. ``name`` is the script's stem, plus a
    suffix for a variant (``bench_samplers_designs``). Rows come from :func:`row`; ``detail``
    (optional, last in the file) holds what a benchmark keeps beyond its rows (distributions,
    per-run records)."""
    for r in rows:
        if tuple(r) != ROW_FIELDS:
            raise ValueError(f"a results row has the fields {ROW_FIELDS}, got {tuple(r)}")
    pairs = [(r["name"], r["peer"]) for r in rows]
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"{name}: two rows share a name and a peer: {pairs}")
    script = next((w for w in shlex.split(command) if w.endswith(".py")), name)
    data = {
        "benchmark": Path(script).stem,  # the script; the file's name adds a variant's suffix
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "versions": versions(),
        "settings": settings or {},
        "rows": rows,
        "notes": notes,
    }
    if detail is not None:
        data["detail"] = detail
    where = Path(directory or os.environ.get("MIXREPLAY_RESULTS_DIR") or RESULTS_DIR)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    print(f"results: {path}")
    return path
