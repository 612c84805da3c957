"""The HalfCheetah benchmark's figure and table from the ``results.csv`` of several runs.

``mixreplay demo --task halfcheetah`` writes its own ``curves.png`` and ``summary.md``; this
script joins the ``results.csv`` of several invocations (a run cut off, then the arms it
had not reached, each with ``--arms``; the runs are deterministic per seed, so a run
repeated in two files gives the same rows and the first file's copy is kept) and draws
the same panels (``OUT.png``, small) and Markdown table (printed) from every run that
reached ``--steps``, with their rows in ``OUT.csv``. A run that stopped before is left
out and named. ``docs/offline-data-helps.md`` shows its output::

    python benchmarks/halfcheetah_report.py out/full/results.csv out/full3/results.csv \\
        --out docs/offline_data_helps --dataset-return weak=742.1 --dataset-return good=1283.4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mixreplay.demo.report import format_markdown, plot_panels, read_csv, summarize, write_csv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("csv", nargs="+", type=Path, help="results.csv files of demo runs")
    p.add_argument("--out", type=Path, required=True, help="prefix of the .png and .csv written")
    p.add_argument("--steps", type=int, default=20_000, help="a complete run's last step")
    p.add_argument("--threshold", type=float, default=1500.0)
    p.add_argument("--early-step", type=int, default=5_000)
    p.add_argument("--dpi", type=int, default=80, help="the figure's resolution (docs: small)")
    p.add_argument(
        "--dataset-return",
        action="append",
        default=[],
        metavar="NAME=RETURN",
        help="a dataset's mean episode return, drawn and shown beside its name",
    )
    args = p.parse_args(argv)
    returns = {k: float(v) for k, v in (item.split("=", 1) for item in args.dataset_return)}

    runs: dict[tuple[str, str, int], list[dict]] = {}
    for path in args.csv:
        by_run: dict[tuple[str, str, int], list[dict]] = {}
        for r in read_csv(path):
            by_run.setdefault((r["dataset"], r["arm"], r["seed"]), []).append(r)
        for key, rows in by_run.items():
            if max(r["step"] for r in rows) < args.steps:
                print(f"left out (stopped before step {args.steps:,}): {key} in {path}")
            elif key not in runs:
                runs[key] = rows
    records = [r for rows in runs.values() for r in rows]
    if not records:
        print("no complete run in the files given", file=sys.stderr)
        return 1
    summary = summarize(records, args.threshold, early_step=args.early_step)
    table = format_markdown(summary, args.threshold, returns)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(records, args.out.with_suffix(".csv"))
    seeds = {}
    for dataset, arm, seed in runs:
        seeds.setdefault((dataset, arm), []).append(seed)
    title = f"HalfCheetah-v5: SAC, {args.steps:,} steps, UTD 1, seeds per arm as listed"
    png = plot_panels(
        records,
        args.out.with_suffix(".png"),
        threshold=args.threshold,
        title=title,
        dataset_returns=returns,
    )
    if args.dpi:  # redraw at the requested resolution: the page's copy stays small
        from PIL import Image

        with Image.open(png) as im:
            scale = args.dpi / 110
            im.convert("RGB").resize(
                (round(im.width * scale), round(im.height * scale)), Image.LANCZOS
            ).quantize(colors=64).save(png, optimize=True)
    print(table)
    listed = (f"{d or 'none'}/{a}: seeds {sorted(s)}" for (d, a), s in sorted(seeds.items()))
    print(f"runs: {', '.join(listed)}")
    print(f"wrote {png}, {args.out.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
