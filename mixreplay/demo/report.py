"""The demo's outputs: ``results.csv``, ``curves.png`` and the summary table.

All pure functions of the records :func:`~mixreplay.demo.experiment.run_arm`
returns (one dict per evaluation); nothing here prints.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["COLUMNS", "format_summary", "plot_curves", "read_csv", "summarize", "write_csv"]

#: ``results.csv`` columns, in order
COLUMNS = (
    "arm",
    "seed",
    "step",
    "return",
    "eval_success",
    "train_success",
    "train_return",
    "train_episodes",
    "offline_fraction",
    "alpha",
    "wall_s",
    "cpu_s",
)
_INT_COLUMNS = {"seed", "step", "train_episodes"}

ARM_LABELS = {
    "online": "online only",
    "mixed": "50/50 mixed",
    "anneal": "anneal 0.5 -> 0",
}
ARM_COLORS = {"online": "tab:gray", "mixed": "tab:blue", "anneal": "tab:orange"}


def write_csv(records: Iterable[dict], path: str | Path) -> Path:
    """One row per (arm, seed, evaluation step), sorted, columns :data:`COLUMNS`."""
    path = Path(path)
    rows = sorted(records, key=lambda r: (r["arm"], r["seed"], r["step"]))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {k: (f"{r[k]:.4g}" if isinstance(r[k], float) else r[k]) for k in COLUMNS}
            )
    return path


def read_csv(path: str | Path) -> list[dict]:
    """The records of a ``results.csv``, numbers parsed."""
    with open(path, newline="") as f:
        return [
            {
                k: (v if k == "arm" else int(v) if k in _INT_COLUMNS else float(v))
                for k, v in row.items()
            }
            for row in csv.DictReader(f)
        ]


def _by_arm_seed(records: Iterable[dict]) -> dict[str, dict[int, list[dict]]]:
    grouped: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        grouped[r["arm"]][r["seed"]].append(r)
    for seeds in grouped.values():
        for rows in seeds.values():
            rows.sort(key=lambda r: r["step"])
    return grouped


def _arm_order(arms: Iterable[str]) -> list[str]:
    known = [a for a in ARM_LABELS if a in arms]
    return known + sorted(set(arms) - set(known))


def summarize(records: Sequence[dict], threshold: float) -> list[dict]:
    """Per arm: final return, steps to ``threshold``, seeds reaching it, final train success.

    A seed reaches the threshold at the first evaluation whose mean return is at
    least ``threshold``. ``steps_to_threshold`` is the median over the seeds that
    reached it (``None`` if none did); ``steps_per_seed`` lists every seed's step or ``None``.
    """
    grouped = _by_arm_seed(records)
    summary = []
    for arm in _arm_order(grouped):
        seeds = grouped[arm]
        finals = [rows[-1]["return"] for rows in seeds.values()]
        reach = {
            seed: next((r["step"] for r in rows if r["return"] >= threshold), None)
            for seed, rows in sorted(seeds.items())
        }
        reached = [s for s in reach.values() if s is not None]
        summary.append(
            {
                "arm": arm,
                "seeds": len(seeds),
                "final_return": statistics.fmean(finals),
                "final_return_min": min(finals),
                "final_return_max": max(finals),
                "final_train_success": statistics.fmean(
                    rows[-1]["train_success"] for rows in seeds.values()
                ),
                "seeds_reaching": len(reached),
                "steps_to_threshold": statistics.median(reached) if reached else None,
                "steps_per_seed": reach,
                "last_step": max(rows[-1]["step"] for rows in seeds.values()),
            }
        )
    return summary


def format_summary(summary: Sequence[dict], threshold: float) -> str:
    """The summary as a fixed-width text table."""
    header = (
        f"{'arm':<17} {'final return (mean [min, max])':<32} {'train success':>13} "
        f"{f'steps to {threshold:g} (median)':>22} {'seeds reaching':>14}  per seed"
    )
    lines = [header, "-" * len(header)]
    for s in summary:
        final = (
            f"{s['final_return']:7.1f} [{s['final_return_min']:.1f}, {s['final_return_max']:.1f}]"
        )
        steps = "never" if s["steps_to_threshold"] is None else f"{s['steps_to_threshold']:g}"
        per_seed = ", ".join(
            f"{seed}:{'-' if step is None else step}" for seed, step in s["steps_per_seed"].items()
        )
        lines.append(
            f"{ARM_LABELS.get(s['arm'], s['arm']):<17} {final:<32} {s['final_train_success']:>13.2f} "
            f"{steps:>22} {s['seeds_reaching']:>9d}/{s['seeds']:<4}  {per_seed}"
        )
    lines.append(
        f"final = last evaluation (step {max((s['last_step'] for s in summary), default=0)}); "
        f"steps to threshold = first evaluation with mean return >= {threshold:g}; "
        "'-' = not reached"
    )
    return "\n".join(lines)


def _band(seeds: dict[int, list[dict]], key: str):
    """Steps, and mean/min/max of ``key`` over seeds at each step all seeds share."""
    steps = sorted(set.intersection(*({r["step"] for r in rows} for rows in seeds.values())))
    values: dict[int, list[float]] = {step: [] for step in steps}
    for rows in seeds.values():
        for r in rows:
            if r["step"] in values and not math.isnan(r[key]):
                values[r["step"]].append(r[key])
    steps = [s for s in steps if values[s]]
    mean = [statistics.fmean(values[s]) for s in steps]
    return steps, mean, [min(values[s]) for s in steps], [max(values[s]) for s in steps]


def plot_curves(
    records: Sequence[dict], path: str | Path, *, threshold: float, title: str = ""
) -> Path:
    """Evaluation return and training success rate against env steps, mean and range over seeds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    grouped = _by_arm_seed(records)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_ret, ax_succ = fig.subplots(1, 2)
    for arm in _arm_order(grouped):
        seeds = grouped[arm]
        label = f"{ARM_LABELS.get(arm, arm)} ({len(seeds)} seeds)"
        color = ARM_COLORS.get(arm)
        for ax, key in ((ax_ret, "return"), (ax_succ, "train_success")):
            steps, mean, lo, hi = _band(seeds, key)
            ax.plot(steps, mean, color=color, label=label, linewidth=2)
            ax.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
    ax_ret.axhline(
        threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}"
    )
    ax_ret.set(
        xlabel="environment steps",
        ylabel="evaluation return (deterministic)",
        title="evaluation return: mean, range over seeds",
    )
    ax_succ.set(
        xlabel="environment steps",
        ylabel="success rate",
        ylim=(-0.05, 1.05),
        title="training episodes reaching the goal (last 10)",
    )
    ax_ret.legend(loc="best", fontsize="small")
    for ax in (ax_ret, ax_succ):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110)
    return path
