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

__all__ = [
    "COLUMNS",
    "datasets_of",
    "format_markdown",
    "format_summary",
    "plot_curves",
    "plot_panels",
    "read_csv",
    "summarize",
    "write_csv",
]

#: ``results.csv`` columns, in order
COLUMNS = (
    "arm",
    "dataset",
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
_TEXT_COLUMNS = {"arm", "dataset"}

ARM_LABELS = {
    "online": "online only",
    "mixed": "50/50 mixed",
    "anneal": "anneal 0.5 -> 0",
    "proportional": "proportional",
    "gated": "return-gated",
}
ARM_COLORS = {
    "online": "tab:gray",
    "mixed": "tab:blue",
    "anneal": "tab:orange",
    "proportional": "tab:green",
    "gated": "tab:red",
}


def write_csv(records: Iterable[dict], path: str | Path) -> Path:
    """One row per (arm, seed, evaluation step), sorted, columns :data:`COLUMNS`."""
    path = Path(path)
    rows = sorted(records, key=lambda r: (r.get("dataset", ""), r["arm"], r["seed"], r["step"]))
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
                k: (v if k in _TEXT_COLUMNS else int(v) if k in _INT_COLUMNS else float(v))
                for k, v in row.items()
            }
            for row in csv.DictReader(f)
        ]


Group = tuple[str, str]  # (dataset, arm); dataset "" for the online arm


def _by_group_seed(records: Iterable[dict]) -> dict[Group, dict[int, list[dict]]]:
    grouped: dict[Group, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        grouped[(r.get("dataset", ""), r["arm"])][r["seed"]].append(r)
    for seeds in grouped.values():
        for rows in seeds.values():
            rows.sort(key=lambda r: r["step"])
    return grouped


def _arm_order(arms: Iterable[str]) -> list[str]:
    known = [a for a in ARM_LABELS if a in arms]
    return known + sorted(set(arms) - set(known))


def _group_order(groups: Iterable[Group]) -> list[Group]:
    """Arms without data first, then each dataset (in order of appearance) by arm order."""
    groups = list(groups)
    datasets = list(dict.fromkeys(d for d, _ in groups))
    datasets.sort(key=lambda d: d != "")
    return [(d, arm) for d in datasets for arm in _arm_order([a for dd, a in groups if dd == d])]


def datasets_of(records: Iterable[dict]) -> list[str]:
    """The dataset names in the records, in order of appearance ("" left out)."""
    return [d for d in dict.fromkeys(r.get("dataset", "") for r in records) if d]


def _at_step(rows: list[dict], step: int) -> float | None:
    """The return of the last evaluation at or before ``step``."""
    before = [r for r in rows if r["step"] <= step]
    return before[-1]["return"] if before else None


def summarize(
    records: Sequence[dict], threshold: float, *, early_step: int | None = None
) -> list[dict]:
    """Per dataset and arm: final return, early return, steps to ``threshold``, train success.

    A seed reaches the threshold at the first evaluation whose mean return is at
    least ``threshold``. ``steps_to_threshold`` is the median over the seeds that
    reached it (``None`` if none did); ``steps_per_seed`` lists every seed's step or ``None``.
    With ``early_step``, ``early_return`` (and its min and max over seeds) is the return of
    each seed's last evaluation at or before that step. Rows come online arm first, then
    each dataset's arms.
    """
    grouped = _by_group_seed(records)
    summary = []
    for dataset, arm in _group_order(grouped):
        seeds = grouped[(dataset, arm)]
        finals = [rows[-1]["return"] for rows in seeds.values()]
        early = []
        if early_step is not None:
            at = (_at_step(rows, early_step) for rows in seeds.values())
            early = [v for v in at if v is not None]
        reach = {
            seed: next((r["step"] for r in rows if r["return"] >= threshold), None)
            for seed, rows in sorted(seeds.items())
        }
        reached = [s for s in reach.values() if s is not None]
        summary.append(
            {
                "arm": arm,
                "dataset": dataset,
                "seeds": len(seeds),
                "early_step": early_step,
                "early_return": statistics.fmean(early) if early else None,
                "early_return_min": min(early, default=None),
                "early_return_max": max(early, default=None),
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


def _range(mean: float | None, lo: float | None, hi: float | None) -> str:
    return "-" if mean is None else f"{mean:,.0f} [{lo:,.0f}, {hi:,.0f}]"


def format_summary(summary: Sequence[dict], threshold: float, *, success: bool = True) -> str:
    """The summary as a fixed-width text table.

    A ``data`` column appears with more than one dataset, a ``return at N`` column when
    :func:`summarize` was given ``early_step``; ``success=False`` leaves out the training
    success rate (for tasks with no goal state).
    """
    data = len({s.get("dataset") for s in summary} - {"", None}) > 1
    early = next((s["early_step"] for s in summary if s.get("early_step") is not None), None)
    columns = [("arm", 17, "<")]
    if data:
        columns.insert(0, ("data", 8, "<"))
    if early is not None:
        columns.append((f"return at {early:,} (mean [min, max])", 34, "<"))
    columns.append(("final return (mean [min, max])", 32, "<"))
    if success:
        columns.append(("train success", 13, ">"))
    columns += [(f"steps to {threshold:g} (median)", 22, ">"), ("seeds reaching", 14, ">")]

    def line(cells: Sequence[str]) -> str:
        return " ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, columns))

    header = line([name for name, _, _ in columns]) + "  per seed"
    lines = [header, "-" * len(header)]
    for s in summary:
        cells = [ARM_LABELS.get(s["arm"], s["arm"])]
        if data:
            cells.insert(0, s.get("dataset") or "none")
        if early is not None:
            cells.append(_range(s["early_return"], s["early_return_min"], s["early_return_max"]))
        cells.append(
            f"{s['final_return']:7.1f} [{s['final_return_min']:.1f}, {s['final_return_max']:.1f}]"
        )
        if success:
            cells.append(f"{s['final_train_success']:.2f}")
        steps = "never" if s["steps_to_threshold"] is None else f"{s['steps_to_threshold']:g}"
        cells += [steps, f"{s['seeds_reaching']:d}/{s['seeds']:<4}"]
        per_seed = ", ".join(
            f"{seed}:{'-' if step is None else step}" for seed, step in s["steps_per_seed"].items()
        )
        lines.append(f"{line(cells)}  {per_seed}")
    lines.append(
        f"final = last evaluation (step {max((s['last_step'] for s in summary), default=0)}); "
        f"steps to threshold = first evaluation with mean return >= {threshold:g}; "
        "'-' = not reached"
    )
    return "\n".join(lines)


def format_markdown(
    summary: Sequence[dict], threshold: float, dataset_returns: dict[str, float] | None = None
) -> str:
    """The summary as a Markdown table (the docs page's): one row per dataset and arm.

    ``dataset_returns`` maps a dataset's name to its mean episode return, shown beside it.
    """
    dataset_returns = dataset_returns or {}
    early = next((s["early_step"] for s in summary if s.get("early_step") is not None), None)
    last = max((s["last_step"] for s in summary), default=0)
    head = ["data (mean return)", "arm"]
    if early is not None:
        head.append(f"return at {early:,}: mean [min, max]")
    head += [f"return at {last:,}: mean [min, max]", f"steps to {threshold:,g}: median (seeds)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        name = s.get("dataset") or ""
        data = "none" if not name else name
        if name in dataset_returns:
            data = f"{name} ({dataset_returns[name]:,.0f})"
        cells = [data, ARM_LABELS.get(s["arm"], s["arm"]).replace("->", "→")]
        if early is not None:
            cells.append(_range(s["early_return"], s["early_return_min"], s["early_return_max"]))
        cells.append(_range(s["final_return"], s["final_return_min"], s["final_return_max"]))
        steps = "never" if s["steps_to_threshold"] is None else f"{s['steps_to_threshold']:,.0f}"
        cells.append(f"{steps} ({s['seeds_reaching']}/{s['seeds']})")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


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
    grouped = _by_group_seed(records)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_ret, ax_succ = fig.subplots(1, 2)
    for group in _group_order(grouped):
        seeds, arm = grouped[group], group[1]
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


def plot_panels(
    records: Sequence[dict],
    path: str | Path,
    *,
    threshold: float,
    title: str = "",
    dataset_returns: dict[str, float] | None = None,
) -> Path:
    """One column per dataset: evaluation return (top) and offline share (bottom) per arm.

    Each arm is drawn as its mean over seeds (thick) and each seed's curve (thin); the
    online-only arm, which uses no dataset, appears in every column. A dashed line marks
    the dataset's mean return (from ``dataset_returns``), a dotted one the threshold.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    dataset_returns = dataset_returns or {}
    grouped = _by_group_seed(records)
    datasets = datasets_of(records) or [""]
    fig = Figure(figsize=(5.2 * len(datasets), 6.4), layout="constrained", dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(datasets), sharex=True, sharey="row", squeeze=False)
    for col, dataset in enumerate(datasets):
        ax_ret, ax_frac = axes[0][col], axes[1][col]
        for group in _group_order(g for g in grouped if g[0] in ("", dataset)):
            seeds, arm = grouped[group], group[1]
            color = ARM_COLORS.get(arm)
            for rows in seeds.values():
                ax_ret.plot(
                    [r["step"] for r in rows],
                    [r["return"] for r in rows],
                    color=color,
                    linewidth=0.8,
                    alpha=0.35,
                )
            steps, mean, _, _ = _band(seeds, "return")
            label = f"{ARM_LABELS.get(arm, arm)} ({len(seeds)} seeds)"
            ax_ret.plot(steps, mean, color=color, linewidth=2.2, label=label)
            steps, mean, _, _ = _band(seeds, "offline_fraction")
            ax_frac.plot(steps, mean, color=color, linewidth=2, marker=".", label=label)
        if dataset in dataset_returns:
            ax_ret.axhline(
                dataset_returns[dataset],
                color="black",
                linestyle="--",
                linewidth=1,
                label=f"dataset mean return {dataset_returns[dataset]:,.0f}",
            )
        ax_ret.axhline(
            threshold, color="black", linestyle=":", linewidth=1, label=f"threshold {threshold:,g}"
        )
        ax_ret.set(title=f"{dataset} data" if dataset else "online only")
        ax_frac.set(xlabel="environment steps", ylim=(-0.03, 1.03))
        ax_ret.legend(loc="upper left", fontsize="x-small")
        for ax in (ax_ret, ax_frac):
            ax.grid(alpha=0.3)
    axes[0][0].set(ylabel="evaluation return (deterministic)\nmean: thick; each seed: thin")
    axes[1][0].set(ylabel="offline share of each batch\n(mean over seeds)")
    if title:
        fig.suptitle(title)
    fig.savefig(path)
    return path
