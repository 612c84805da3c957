"""``mixreplay demo``: online-only vs mixed vs annealed SAC, several seeds, in parallel.

The default run (3 arms x 3 seeds x 3,000 steps) costs about 130 CPU-seconds; ``--quick``
(3 arms x 2 seeds x 2,000 steps) about 60, some 40 s of wall time on two idle cores. Wall
time depends on what else shares the cores (``--quick``: 2 minutes at load average 5-9,
20 minutes at 14).

:func:`add_demo_parser` adds the command to ``mixreplay``'s parser (see
:mod:`mixreplay.cli`); ``python -m mixreplay.demo`` runs it too. This module imports
nothing heavy until the demo runs, so ``mixreplay demo --help`` answers at once; it is
the only module of the demo that prints or draws progress bars.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mixreplay.cli import positive_int
from mixreplay.demo.config import (
    ARMS,
    DEFAULT_DATASET_ID,
    DEFAULT_ENV_ID,
    DEFAULTS,
    QUICK,
    RunSpec,
    SACConfig,
)

__all__ = ["DEPENDENCIES", "QUICK", "add_demo_parser", "main", "run_demo"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 80.0
#: what the demo imports beyond the core, all installed by ``pip install "mixreplay[demo]"``
DEPENDENCIES = ("gymnasium", "minari", "h5py", "matplotlib", "tqdm")
DESCRIPTION = (
    "SAC on MountainCarContinuous three ways: online replay only, 50/50 offline/online "
    "mixed replay, and the offline share annealed from 0.5 to 0; several seeds in parallel. "
    "Writes results.csv, curves.png and summary.txt and prints the summary. "
    'Needs pip install "mixreplay[demo]".'
)
QUICK_NOTE = (
    f"--quick: {QUICK['seeds']} seeds x {QUICK['steps']:,} steps instead of "
    f"{DEFAULTS['seeds']} x {DEFAULTS['steps']:,}: the mixed arms have just reached the goal "
    "and the success rates rest on few episodes"
)


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sac = SACConfig()
    p = parser
    p.add_argument(
        "--env", default=DEFAULT_ENV_ID, help=f"Gymnasium environment (default {DEFAULT_ENV_ID})"
    )
    p.add_argument(
        "--dataset",
        default=None,
        help=f"offline dataset ID for load_dataset (default: minari:{DEFAULT_DATASET_ID}, "
        "a scripted expert generated on first use into Minari's root: $MINARI_DATASETS_PATH, "
        "default ~/.minari/datasets; converted once into $MIXREPLAY_DATA_DIR, default "
        "~/.cache/mixreplay)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help=f"environment steps per run (default {DEFAULTS['steps']}; --quick {QUICK['steps']})",
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=None,
        help=f"seeds per arm, 0..N-1 (default {DEFAULTS['seeds']}; --quick {QUICK['seeds']})",
    )
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="output folder (default ./demo-out)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK['seeds']} seeds x {QUICK['steps']} steps: about 40 s on 2 idle cores (longer "
        "on a busy machine), and the mixed arms already reach the goal",
    )
    p.add_argument(
        "--utd",
        type=positive_int,
        default=sac.utd,
        help=f"critic updates per env step (default {sac.utd})",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=sac.batch_size,
        help=f"rows per sampled batch (default {sac.batch_size})",
    )
    p.add_argument(
        "--hidden",
        type=positive_int,
        default=sac.hidden,
        help=f"hidden width of all networks (default {sac.hidden})",
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
        type=positive_int,
        default=None,
        help=f"env steps between evaluations (default {DEFAULTS['eval_every']})",
    )
    p.add_argument(
        "--eval-episodes",
        type=positive_int,
        default=None,
        help=f"episodes per evaluation (default {DEFAULTS['eval_episodes']})",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="worker processes (default: one per core)",
    )
    p.set_defaults(func=run_demo)
    return p


def add_demo_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``demo`` to ``mixreplay``'s subparsers; ``args.func`` is :func:`run_demo`."""
    parser = subparsers.add_parser(
        "demo",
        help="SAC on MountainCarContinuous: online only vs offline/online mixed replay",
        description=DESCRIPTION,
    )
    return _configure(parser)


def check_dependencies() -> None:
    """Raise :class:`~mixreplay.MissingDependencyError` naming every missing demo dependency.

    Checked before anything runs, so a missing extra costs a second, not a traceback
    after the dataset was generated.
    """
    from mixreplay.errors import MissingDependencyError

    def missing(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):  # a broken install counts as missing
            return True

    absent = [name for name in DEPENDENCIES if missing(name)]
    if absent:
        raise MissingDependencyError(
            f"mixreplay demo needs {', '.join(absent)}, which "
            f"{'is' if len(absent) == 1 else 'are'} not installed; "
            'install the demo extra: pip install "mixreplay[demo]"'
        )


def _resolve(args: argparse.Namespace) -> dict:
    base = QUICK if args.quick else DEFAULTS
    return {k: getattr(args, k) if getattr(args, k) is not None else base[k] for k in DEFAULTS}


def build_specs(args: argparse.Namespace) -> list[RunSpec]:
    """One :class:`~mixreplay.demo.config.RunSpec` per (seed, arm), seeds outermost.

    Raises:
        UsageError: ``--arms`` names no arm or an unknown one; ``--env`` other than
            MountainCar without ``--dataset`` for an arm that needs offline data.
    """
    from mixreplay.cli import UsageError

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        raise UsageError(
            f"--arms takes a comma-separated subset of {','.join(ARMS)}, got {args.arms!r}"
        )
    if args.dataset is None and args.env != DEFAULT_ENV_ID and arms != ["online"]:
        raise UsageError(
            f"the built-in expert dataset is for {DEFAULT_ENV_ID}; for --env {args.env} "
            "pass --dataset <prefix>:<id> (e.g. minari:<namespace>/<name>-v0)"
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


def prepare_dataset(args: argparse.Namespace, specs: Sequence[RunSpec]) -> None:
    """Generate the default expert dataset if needed and open it once, before any run starts."""
    if not any(s.arm != "online" for s in specs):
        return
    if args.dataset is None:
        from mixreplay.demo.data import dataset_exists, ensure_expert_dataset

        if not dataset_exists():
            print(
                f"generating the offline dataset minari:{DEFAULT_DATASET_ID} (first run only: "
                "a scripted expert, 20,000 transitions)",
                flush=True,
            )
        ensure_expert_dataset()
    import torch

    from mixreplay.demo.experiment import load_offline

    # converts it into the mixreplay cache once, here, rather than in every worker
    dataset = load_offline(
        specs[0].dataset_id, batch_size=specs[0].sac.batch_size, generator=torch.Generator()
    )
    log.info("offline dataset %s: %s", specs[0].dataset_id, dataset)


def _label(spec: RunSpec) -> str:
    from mixreplay.demo.report import ARM_LABELS

    return f"{ARM_LABELS.get(spec.arm, spec.arm)}, seed {spec.seed}"


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo as configured by :func:`add_demo_parser`'s options; print the summary.

    Raises:
        MissingDependencyError: the demo extra is not installed.
        UsageError: options that do not fit together.
    """
    check_dependencies()
    from mixreplay.demo.progress import RunBars, RunLines
    from mixreplay.demo.report import format_summary, plot_curves, summarize, write_csv
    from mixreplay.demo.runner import default_workers, run_specs, start_workers

    start = time.perf_counter()
    specs = build_specs(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = list(dict.fromkeys(s.arm for s in specs))
    seeds = sorted({s.seed for s in specs})
    steps = specs[0].steps
    workers = min(args.workers or default_workers(), len(specs))
    print(
        f"mixreplay demo: {args.env}, arms {', '.join(arms)}, {len(seeds)} seeds x {steps:,} "
        f"steps, UTD {args.utd}, batch {args.batch_size}, 2x{args.hidden} nets, "
        f"{workers} worker(s)",
        flush=True,
    )
    start_workers()  # the workers' imports overlap with the dataset preparation
    prepare_dataset(args, specs)

    # bars on a terminal; in a log (stderr redirected, CI) a line per run start and end
    report = RunBars if sys.stderr.isatty() else RunLines
    with report([_label(s) for s in specs], [s.steps for s in specs]) as bars:
        records = run_specs(
            specs,
            workers=workers,
            on_start=bars.start,
            on_progress=bars.advance,
            on_result=bars.finish,
            on_tick=bars.tick,
        )

    csv_path = write_csv(records, out / "results.csv")
    png_path = plot_curves(
        records,
        out / "curves.png",
        threshold=args.threshold,
        title=f"{args.env}: SAC, {len(seeds)} seeds x {steps:,} steps, UTD {args.utd}",
    )
    table = format_summary(summarize(records, args.threshold), args.threshold)
    wall = time.perf_counter() - start
    last: dict[tuple[str, int], dict] = {}
    for r in records:
        if r["step"] >= last.get((r["arm"], r["seed"]), {"step": -1})["step"]:
            last[(r["arm"], r["seed"])] = r
    cpu = sum(r["cpu_s"] for r in last.values())
    timing = (
        f"wall time {wall:.0f} s; the runs used {cpu:.0f} CPU-s in all "
        f"({cpu / workers:.0f} s per worker)"
    )
    note = f"\n{QUICK_NOTE}" if args.quick else ""
    (out / "summary.txt").write_text(
        f"{table}\nconfig: {dataclasses.asdict(specs[0].sac)}, {len(seeds)} seeds x {steps} steps, "
        f"{workers} worker(s); {timing}{note}\n"
    )
    print(f"\n{table}{note}\n")
    print(f"wrote {csv_path}, {png_path}, {out / 'summary.txt'}\n{timing}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mixreplay.demo [options]``: the same as ``mixreplay demo [options]``."""
    from mixreplay.cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])
