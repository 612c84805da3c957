"""``mixreplay demo``: online-only vs mixed vs annealed SAC, several seeds, in parallel.

The default run (3 arms x 3 seeds x 3,000 steps) costs about 260 CPU-seconds,
some 130 s per worker on two cores plus start-up; ``--quick`` (3 x 2 x 500) about
15 CPU-seconds. Wall time depends on what else shares the cores.

Wire it into a parent parser with :func:`add_demo_parser`; or run
``python -m mixreplay.demo``. This is the only module of the demo that prints
or draws progress bars.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

__all__ = ["QUICK", "add_demo_parser", "main", "run_demo"]

log = logging.getLogger(__name__)

DEFAULTS = {"steps": 3000, "seeds": 3, "eval_every": 250, "eval_episodes": 5}
#: ``--quick``: a smoke run of well under a minute (explicit options still win)
QUICK = {"steps": 500, "seeds": 2, "eval_every": 250, "eval_episodes": 2}
DEFAULT_THRESHOLD = 80.0
DESCRIPTION = (
    "SAC on MountainCarContinuous three ways: online replay only, 50/50 offline/online "
    "mixed replay, and the offline share annealed from 0.5 to 0; several seeds in parallel. "
    "Writes results.csv, curves.png and summary.txt and prints the summary."
)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from mixreplay.demo.data import DEFAULT_DATASET_ID, DEFAULT_ENV_ID
    from mixreplay.demo.experiment import ARMS
    from mixreplay.demo.sac import SACConfig

    SAC_DEFAULTS = SACConfig()
    p = parser
    p.add_argument(
        "--env", default=DEFAULT_ENV_ID, help=f"Gymnasium environment (default {DEFAULT_ENV_ID})"
    )
    p.add_argument(
        "--dataset",
        default=None,
        help=f"offline dataset ID for load_dataset (default: minari:{DEFAULT_DATASET_ID}, "
        "a scripted expert generated on first use into $MINARI_DATASETS_PATH)",
    )
    p.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help=f"environment steps per run (default {DEFAULTS['steps']}; --quick {QUICK['steps']})",
    )
    p.add_argument(
        "--seeds",
        type=_positive_int,
        default=None,
        help=f"seeds per arm, 0..N-1 (default {DEFAULTS['seeds']}; --quick {QUICK['seeds']})",
    )
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="output folder (default ./demo-out)"
    )
    p.add_argument(
        "--quick", action="store_true", help="a short smoke run (under a minute on 2 cores)"
    )
    p.add_argument(
        "--utd",
        type=_positive_int,
        default=SAC_DEFAULTS.utd,
        help=f"critic updates per env step (default {SAC_DEFAULTS.utd})",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=SAC_DEFAULTS.batch_size,
        help=f"rows per sampled batch (default {SAC_DEFAULTS.batch_size})",
    )
    p.add_argument(
        "--hidden",
        type=_positive_int,
        default=SAC_DEFAULTS.hidden,
        help=f"hidden width of all networks (default {SAC_DEFAULTS.hidden})",
    )
    p.add_argument(
        "--arms", default=",".join(ARMS), help=f"comma-separated subset of {','.join(ARMS)}"
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"return that counts as solved in the summary (default {DEFAULT_THRESHOLD:g})",
    )
    p.add_argument(
        "--eval-every",
        type=_positive_int,
        default=None,
        help=f"env steps between evaluations (default {DEFAULTS['eval_every']})",
    )
    p.add_argument(
        "--eval-episodes",
        type=_positive_int,
        default=None,
        help=f"episodes per evaluation (default {DEFAULTS['eval_episodes']}; --quick {QUICK['eval_episodes']})",
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes (default: one per core)",
    )
    p.set_defaults(func=run_demo)
    return p


def add_demo_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand to an ``argparse`` subparsers object; ``args.func`` is :func:`run_demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="SAC on MountainCarContinuous: online only vs offline/online mixed replay",
        description=DESCRIPTION,
    )
    return _configure(parser)


def _resolve(args: argparse.Namespace) -> dict:
    base = QUICK if args.quick else DEFAULTS
    return {k: getattr(args, k) if getattr(args, k) is not None else base[k] for k in DEFAULTS}


def build_specs(args: argparse.Namespace) -> list:
    """One :class:`~mixreplay.demo.experiment.RunSpec` per (seed, arm), seeds outermost."""
    from mixreplay.demo.data import DEFAULT_DATASET_ID
    from mixreplay.demo.experiment import ARMS, RunSpec
    from mixreplay.demo.sac import SACConfig

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        raise SystemExit(
            f"mixreplay demo: --arms takes a comma-separated subset of {','.join(ARMS)}, got {args.arms!r}"
        )
    opts = _resolve(args)
    sac = SACConfig(hidden=args.hidden, batch_size=args.batch_size, utd=args.utd)
    dataset = args.dataset or f"minari:{DEFAULT_DATASET_ID}"
    return [
        RunSpec(
            arm=arm,
            seed=seed,
            steps=opts["steps"],
            env_id=args.env,
            dataset_id=dataset,
            eval_every=min(opts["eval_every"], opts["steps"]),
            eval_episodes=opts["eval_episodes"],
            sac=sac,
        )
        for seed in range(opts["seeds"])
        for arm in arms
    ]


def prepare_dataset(args: argparse.Namespace, specs) -> None:
    """Generate the default expert dataset if needed and open it once, before any worker starts."""
    import torch

    from mixreplay.demo.data import DEFAULT_ENV_ID, ensure_expert_dataset
    from mixreplay.demo.experiment import load_offline

    if not any(s.arm != "online" for s in specs):
        return
    if args.dataset is None:
        if args.env != DEFAULT_ENV_ID:
            raise SystemExit(
                f"mixreplay demo: the built-in expert dataset is for {DEFAULT_ENV_ID}; "
                f"for --env {args.env} pass --dataset <prefix>:<id> (e.g. minari:<namespace>/<name>-v0)"
            )
        ensure_expert_dataset()
    # converts it into the mixreplay cache once, here, rather than in every worker
    dataset = load_offline(
        specs[0].dataset_id, batch_size=specs[0].sac.batch_size, generator=torch.Generator()
    )
    log.info("offline dataset %s: %s", specs[0].dataset_id, dataset)


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo as configured by :func:`add_demo_parser`'s options; print the summary."""
    from tqdm import tqdm

    from mixreplay.demo.report import ARM_LABELS, format_summary, plot_curves, summarize, write_csv
    from mixreplay.demo.runner import default_workers, run_specs

    start = time.perf_counter()
    specs = build_specs(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prepare_dataset(args, specs)

    arms = list(dict.fromkeys(s.arm for s in specs))
    seeds = sorted({s.seed for s in specs})
    steps = specs[0].steps
    workers = min(args.workers or default_workers(), len(specs))
    print(
        f"mixreplay demo: {args.env}, arms {', '.join(arms)}, {len(seeds)} seeds x {steps} steps, "
        f"UTD {args.utd}, batch {args.batch_size}, 2x{args.hidden} nets, {workers} worker(s)",
        flush=True,
    )
    bars = {
        arm: tqdm(
            total=steps * len(seeds),
            desc=f"{ARM_LABELS.get(arm, arm):<16}",
            position=i,
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
        )
        for i, arm in enumerate(arms)
    }
    try:
        records = run_specs(
            specs, workers=workers, on_progress=lambda arm, seed, n: bars[arm].update(n)
        )
    finally:
        for bar in bars.values():
            bar.close()

    csv_path = write_csv(records, out / "results.csv")
    png_path = plot_curves(
        records,
        out / "curves.png",
        threshold=args.threshold,
        title=f"{args.env}: SAC, {len(seeds)} seeds, UTD {args.utd}",
    )
    table = format_summary(summarize(records, args.threshold), args.threshold)
    wall = time.perf_counter() - start
    last = {}
    for r in records:
        if r["step"] >= last.get((r["arm"], r["seed"]), {"step": -1})["step"]:
            last[(r["arm"], r["seed"])] = r
    cpu = sum(r["cpu_s"] for r in last.values())
    timing = (
        f"wall time {wall:.0f} s; the runs used {cpu:.0f} CPU-s in all "
        f"({cpu / workers:.0f} s per worker)"
    )
    (out / "summary.txt").write_text(
        f"{table}\nconfig: {dataclasses.asdict(specs[0].sac)}, {len(seeds)} seeds x {steps} steps, "
        f"{workers} worker(s); {timing}\n"
    )
    print(f"\n{table}\n")
    print(f"wrote {csv_path}, {png_path}, {out / 'summary.txt'}\n{timing}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mixreplay.demo [options]``."""
    parser = _configure(
        argparse.ArgumentParser(prog="python -m mixreplay.demo", description=DESCRIPTION)
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return run_demo(args)
