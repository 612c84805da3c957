"""``mixreplay demo``: online-only vs mixed vs annealed SAC, several seeds, in parallel.

The default run (3 arms x 3 seeds x 3,000 steps) costs about 130 CPU-seconds; ``--quick``
(3 arms x 2 seeds x 2,000 steps) about 60, some 40 s of wall time on two idle cores. Wall
time depends on what else shares the cores (``--quick``: 2 minutes at load average 5-9,
20 minutes at 14).

``--task halfcheetah`` runs the MuJoCo benchmark instead (:mod:`mixreplay.demo.tasks`):
datasets of two qualities made on first use (:mod:`mixreplay.demo.policy_data`), every
schedule arm on each, and a plot with one panel per dataset.

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
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mixreplay.cli import nonnegative_int, positive_int
from mixreplay.demo.config import (
    ARMS,
    DEFAULT_DATASET_ID,
    DEFAULT_ENV_ID,
    DEFAULTS,
    QUICK,
    RunSpec,
    SACConfig,
)
from mixreplay.demo.tasks import DEFAULT_TASK, TASKS, Task

__all__ = ["DEPENDENCIES", "QUICK", "add_demo_parser", "main", "run_demo"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = TASKS[DEFAULT_TASK].threshold
#: what the demo imports beyond the core, all installed by ``pip install "mixreplay[demo]"``
DEPENDENCIES = ("gymnasium", "minari", "h5py", "matplotlib", "tqdm")
DESCRIPTION = (
    "SAC on MountainCarContinuous three ways: online replay only, 50/50 offline/online "
    "mixed replay, and the offline share annealed from 0.5 to 0; several seeds in parallel. "
    "Writes results.csv, curves.png and summary.txt and prints the summary. "
    'Needs pip install "mixreplay[demo]". '
    "--task halfcheetah: the MuJoCo benchmark of when offline data helps (HalfCheetah-v5, "
    "weak and good datasets made on first use; arms online, mixed, anneal, proportional, "
    "and the experimental gated when named in --arms; "
    'needs pip install "mixreplay[mujoco]").'
)


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sac = SACConfig()
    p = parser
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        default=DEFAULT_TASK,
        help=f"{DEFAULT_TASK} (default): {TASKS[DEFAULT_TASK].title}; halfcheetah: "
        f"{TASKS['halfcheetah'].title}, every arm on each dataset "
        "(docs/offline-data-helps.md)",
    )
    p.add_argument(
        "--env",
        default=None,
        help=f"Gymnasium environment, --task {DEFAULT_TASK} only (default {DEFAULT_ENV_ID})",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help=f"offline dataset ID for load_dataset, --task {DEFAULT_TASK} only (default: "
        f"minari:{DEFAULT_DATASET_ID}, a scripted expert generated on first use into Minari's "
        "root: $MINARI_DATASETS_PATH, default ~/.minari/datasets; converted once into "
        "$MIXREPLAY_DATA_DIR, default ~/.cache/mixreplay; the halfcheetah datasets go to the "
        "same places)",
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
        "--first-seed",
        type=nonnegative_int,
        default=0,
        help="seeds FIRST..FIRST+N-1 instead of 0..N-1: a long benchmark in parts (a run is "
        "deterministic per seed, so the parts' results.csv join into the whole run's)",
    )
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="output folder (default ./demo-out)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK['seeds']} seeds x {QUICK['steps']} steps: about 40 s on 2 idle cores (longer "
        "on a busy machine), and the mixed arms already reach the goal (halfcheetah: "
        f"{TASKS['halfcheetah'].quick['seeds']} seeds x {TASKS['halfcheetah'].quick['steps']:,} "
        f"steps, arms {','.join(TASKS['halfcheetah'].quick_arms)})",
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
        "--arms",
        default=None,
        help=f"comma-separated subset of {','.join(ARMS)} (default: the task's, "
        f"{','.join(TASKS[DEFAULT_TASK].arms)} for {DEFAULT_TASK})",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help=f"return that counts as solved in the summary (default {DEFAULT_THRESHOLD:g}; "
        f"halfcheetah {TASKS['halfcheetah'].threshold:g})",
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


def check_dependencies(task: Task | None = None) -> None:
    """Raise :class:`~mixreplay.MissingDependencyError` naming every missing dependency.

    Checked before anything runs, so a missing extra costs a second, not a traceback
    after the dataset was generated. A task with its own extra (``halfcheetah``:
    ``mujoco``, which brings the demo's dependencies too) names that extra.
    """
    from mixreplay.errors import MissingDependencyError

    def missing(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except (ImportError, ValueError):  # a broken install counts as missing
            return True

    task = task or TASKS[DEFAULT_TASK]
    absent = [name for name in (*DEPENDENCIES, *task.modules) if missing(name)]
    if absent:
        command = (
            "mixreplay demo" if task.name == DEFAULT_TASK else f"mixreplay demo --task {task.name}"
        )
        raise MissingDependencyError(
            f"{command} needs {', '.join(absent)}, which "
            f"{'is' if len(absent) == 1 else 'are'} not installed; "
            f'install the {task.extra} extra: pip install "mixreplay[{task.extra}]"'
        )


def _resolve(args: argparse.Namespace) -> dict:
    task = TASKS[args.task]
    base = task.quick if args.quick else task.defaults
    return {k: getattr(args, k) if getattr(args, k) is not None else base[k] for k in DEFAULTS}


def check_options(args: argparse.Namespace) -> tuple[Task, list[str]]:
    """The task and the arms the options ask for; nothing is run or written.

    Raises:
        UsageError: ``--arms`` names no arm or an unknown one; ``--env`` other than
            MountainCar without ``--dataset`` for an arm that needs offline data;
            ``--env`` or ``--dataset`` with a task that makes its own datasets.
    """
    from mixreplay.cli import UsageError

    task = TASKS[args.task]
    text = (
        ",".join(task.quick_arms if args.quick else task.arms) if args.arms is None else args.arms
    )
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        raise UsageError(f"--arms takes a comma-separated subset of {','.join(ARMS)}, got {text!r}")
    if task.recipe is not None and (args.env is not None or args.dataset is not None):
        raise UsageError(
            f"--task {task.name} runs {task.env_id} on the datasets it makes "
            f"({', '.join(level.name for level in task.datasets)}); --env and --dataset "
            f"are for --task {DEFAULT_TASK}"
        )
    env = args.env or task.env_id
    if args.dataset is None and env != task.env_id and arms != ["online"]:
        raise UsageError(
            f"the built-in expert dataset is for {task.env_id}; for --env {env} "
            "pass --dataset <prefix>:<id> (e.g. minari:<namespace>/<name>-v0)"
        )
    return task, arms


def build_specs(
    args: argparse.Namespace,
    dataset_returns: dict[str, float] | None = None,
    *,
    online: bool | None = None,
) -> list[RunSpec]:
    """One :class:`~mixreplay.demo.config.RunSpec` per (seed, arm, dataset), seeds outermost.

    The ``online`` arm uses no dataset and runs once per seed; every other arm runs on
    each of the task's datasets. ``dataset_returns`` maps a dataset's name to its mean
    episode return (the ``gated`` arm needs it). ``online=True`` builds the ``online``
    arm's runs only, ``online=False`` the others only.

    Raises:
        UsageError: as :func:`check_options`.
    """
    task, arms = check_options(args)
    opts = _resolve(args)
    sac = SACConfig(hidden=args.hidden, batch_size=args.batch_size, utd=args.utd)
    returns = dataset_returns or {}
    common = {
        "steps": opts["steps"],
        "env_id": args.env or task.env_id,
        "eval_every": min(opts["eval_every"], opts["steps"]),
        "eval_episodes": opts["eval_episodes"],
        "sac": sac,
    }
    specs = []
    first = getattr(args, "first_seed", 0)
    for seed in range(first, first + opts["seeds"]):
        for arm in arms:
            if online is not None and online != (arm == "online"):
                continue
            if arm == "online":
                specs.append(RunSpec(arm=arm, seed=seed, **common))
                continue
            for name, dataset_id in _datasets(args, task):
                specs.append(
                    RunSpec(
                        arm=arm,
                        seed=seed,
                        dataset_id=dataset_id,
                        dataset=name,
                        dataset_return=returns.get(name),
                        **common,
                    )
                )
    return specs


def _datasets(args: argparse.Namespace, task: Task) -> list[tuple[str, str]]:
    """``(name, load_dataset ID)`` of each offline dataset the run uses."""
    if args.dataset is not None:
        return [("offline", args.dataset)]
    return [(level.name, f"minari:{level.dataset_id}") for level in task.datasets]


def prepare_datasets(args: argparse.Namespace) -> dict[str, float]:
    """Make the MountainCar expert if needed, open each dataset once; return their mean returns.

    A task's recipe datasets are made by :func:`run_demo` (beside the online runs) before
    this is called.
    """
    task, arms = check_options(args)
    if arms == ["online"]:
        return {}
    if args.dataset is None and task.recipe is None:
        from mixreplay.demo.data import dataset_exists, ensure_expert_dataset

        if not dataset_exists():
            print(
                f"generating the offline dataset minari:{DEFAULT_DATASET_ID} (first run only: "
                "a scripted expert, 20,000 transitions)",
                flush=True,
            )
        ensure_expert_dataset()
    import torch

    from mixreplay.cli.datasets import episode_returns, flags_in_errors
    from mixreplay.demo.experiment import load_offline

    returns = {}
    for name, dataset_id in _datasets(args, task):
        # converts it into the mixreplay cache once, here, rather than in every worker
        with flags_in_errors(inspect_id=dataset_id):  # the demo has no --download of its own
            dataset = load_offline(
                dataset_id, batch_size=args.batch_size, generator=torch.Generator()
            )
        if args.dataset is not None:  # a user's dataset: is it from the environment we run?
            check_dataset_env(dataset_id, dataset.schema, args.env or task.env_id)
        returns[name] = float(episode_returns(dataset).mean())
        log.info("offline dataset %s: %s, mean return %.1f", dataset_id, dataset, returns[name])
    return returns


def recorded_env(dataset_id: str) -> str | None:
    """The environment a ``minari:`` dataset says it was recorded in (its ``env_spec``), or
    ``None`` (another prefix, or a dataset that names none)."""
    prefix, _, name = dataset_id.partition(":")
    if prefix != "minari":
        return None
    import minari

    try:
        spec = minari.load_dataset(name).spec.env_spec
    except Exception:  # noqa: BLE001 - the data has loaded; a metadata it lacks is not an error
        return None
    return None if spec is None else spec.id


def check_dataset_env(dataset_id: str, schema, env_id: str) -> None:
    """Refuse, before any training, an offline dataset whose transitions cannot mix with the
    ones ``env_id`` makes: its ``observation`` and ``action`` must have the environment's
    shapes (the demo writes float32 rows of those two and TorchRL's flags). A dataset that
    says it was recorded in another environment with the same shapes is run, with a warning.

    Raises:
        UsageError: naming the dataset's environment (where it records one), both shapes, and
            the ``--env`` that would run it.
    """
    import gymnasium as gym

    from mixreplay.cli import UsageError

    recorded = recorded_env(dataset_id)
    env = gym.make(env_id)
    try:
        wanted = {
            "observation": tuple(env.observation_space.shape or ()),
            "action": tuple(env.action_space.shape or ()),
        }
    finally:
        env.close()
    have = {key: tuple(schema[key].shape) if key in schema else None for key in wanted}
    where = f"recorded in {recorded}" if recorded else "from another environment"
    fix = (
        f"pass --env {recorded} to train there" if recorded and recorded != env_id
        else "pass --env with the environment it was recorded in"
    )  # fmt: skip
    if have != wanted:

        def shapes(d):
            return ", ".join(f"{k} {'missing' if v is None else list(v)}" for k, v in d.items())

        raise UsageError(
            f"--dataset {dataset_id} is {where} ({shapes(have)}), but the demo runs {env_id} "
            f"({shapes(wanted)}): its transitions cannot mix with {env_id}'s; {fix}, or give "
            f"a dataset recorded in {env_id}"
        )
    if recorded and recorded != env_id:
        log.warning(
            "--dataset %s was recorded in %s, but the demo runs %s (same observation and "
            "action shapes, so it runs); pass --env %s if that is what you meant",
            dataset_id, recorded, env_id, recorded,
        )  # fmt: skip


def _recipe_to_run(args: argparse.Namespace, task: Task, arms: list[str]) -> bool:
    """Whether this run must make the task's datasets first."""
    if task.recipe is None or args.dataset is not None or arms == ["online"]:
        return False
    from mixreplay.demo.policy_data import missing_datasets

    return bool(missing_datasets(task))


def _run_jobs(
    jobs: Sequence, workers: int, report, target=None, on_records=None
) -> list[list[dict]]:
    """Run ``jobs`` in worker processes with a progress display; each job's records.

    ``on_records(records)``, when given, hears each job's records as it finishes.
    """
    from mixreplay.demo.policy_data import recipe_steps
    from mixreplay.demo.runner import run_specs

    labels = [
        f"making the {job.name} datasets" if isinstance(job, Task) else _label(job) for job in jobs
    ]
    totals = [recipe_steps(job) if isinstance(job, Task) else job.steps for job in jobs]
    results: dict[int, list[dict]] = {}

    def finished(i: int, records: list[dict]) -> None:
        results[i] = records
        bars.finish(i, records)
        if on_records is not None:
            on_records(records)

    with report(labels, totals) as bars:
        run_specs(
            jobs,
            workers=min(workers, len(jobs)),
            on_start=bars.start,
            on_progress=bars.advance,
            on_result=finished,
            on_tick=bars.tick,
            target=target,
        )
    return [results[i] for i in range(len(jobs))]


def _say_made(made: list[dict]) -> None:
    for m in made:
        verdict = "in" if m["in_range"] else "OUTSIDE"
        print(
            f"  {m['dataset']}: {m['dataset_id']}, snapshot at step {m['snapshot_step']:,} "
            f"(evaluation return {m['snapshot_eval_return']:,.0f}), mean return "
            f"{m['mean_return']:,.0f} over {m['episodes']} episodes, {verdict} the recipe's "
            f"range [{m['expected_low']:,.0f}, {m['expected_high']:,.0f}]; made in "
            f"{m['wall_s']:.0f} s wall, {m['cpu_s']:.0f} CPU-s",
            flush=True,
        )


def _label(spec: RunSpec) -> str:
    from mixreplay.demo.report import ARM_LABELS

    data = f" on {spec.dataset}" if spec.dataset and spec.dataset != "expert" else ""
    return f"{ARM_LABELS.get(spec.arm, spec.arm)}{data}, seed {spec.seed}"


def _quick_note(task: Task) -> str:
    q, d = task.quick, task.defaults
    arms = "" if task.quick_arms == task.arms else f", arms {','.join(task.quick_arms)}"
    return (
        f"--quick: {q['seeds']} seeds x {q['steps']:,} steps{arms} instead of "
        f"{d['seeds']} x {d['steps']:,}: {task.quick_caveat}"
    )


def _load() -> str:
    try:
        return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    except OSError:  # pragma: no cover - platforms without it
        return "load average n/a"


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo as configured by :func:`add_demo_parser`'s options; print the summary.

    Raises:
        MissingDependencyError: the demo extra (or the task's) is not installed.
        UsageError: options that do not fit together.
    """
    check_dependencies(TASKS[args.task])
    from mixreplay.demo.progress import RunBars, RunLines
    from mixreplay.demo.report import (
        format_markdown,
        format_summary,
        plot_curves,
        plot_panels,
        summarize,
        write_csv,
    )
    from mixreplay.demo.runner import default_workers, start_workers

    start, load_before = time.perf_counter(), _load()
    task, arms = check_options(args)
    opts = _resolve(args)
    threshold = task.threshold if args.threshold is None else args.threshold
    env_id = args.env or task.env_id
    out = Path(args.out)  # made once the datasets are checked: a refused run writes nothing
    seeds, steps = opts["seeds"], opts["steps"]
    n_datasets = len(_datasets(args, task))
    n_runs = seeds * sum(1 if arm == "online" else n_datasets for arm in arms)
    workers = min(args.workers or default_workers(), n_runs)
    print(
        f"mixreplay demo: {env_id}, arms {', '.join(arms)}, {seeds} seeds x {steps:,} "
        f"steps, UTD {args.utd}, batch {args.batch_size}, 2x{args.hidden} nets, "
        f"{workers} worker(s)",
        flush=True,
    )
    start_workers()  # the workers' imports overlap with the dataset preparation
    # bars on a terminal; in a log (stderr redirected, CI) a line per run start and end
    report = RunBars if sys.stderr.isatty() else RunLines
    records: list[dict] = []
    made: list[dict] = []

    def keep(rows: list[dict]) -> None:
        """results.csv grows run by run, so a long benchmark can be read while it runs."""
        if rows and "arm" not in rows[0]:  # the dataset recipe's report, not a run's
            return
        records.extend(rows)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(records, out / "results.csv")

    if _recipe_to_run(args, task, arms):
        from mixreplay.demo.policy_data import missing_datasets, run_job

        recipe = task.recipe
        assert recipe is not None  # _recipe_to_run checked
        print(
            f"making the datasets {', '.join(lv.dataset_id for lv in missing_datasets(task))} "
            f"(first run only: {recipe.train_steps:,} steps of SAC at UTD {recipe.sac.utd}, then "
            f"{recipe.num_transitions:,} noisy steps of a snapshot per dataset), the online "
            "runs beside it",
            flush=True,
        )
        jobs = [task, *build_specs(args, online=True)]
        first = _run_jobs(jobs, workers, report, run_job, on_records=keep)
        made = first[0]
        _say_made(made)
        specs = build_specs(args, prepare_datasets(args), online=False)
    else:
        specs = build_specs(args, prepare_datasets(args))
    out.mkdir(parents=True, exist_ok=True)
    returns = {s.dataset: s.dataset_return for s in specs if s.dataset_return is not None}
    prepared = time.perf_counter()
    _run_jobs(specs, workers, report, on_records=keep)

    csv_path = write_csv(records, out / "results.csv")
    title = f"{env_id}: SAC, {seeds} seeds x {steps:,} steps, UTD {args.utd}"
    early = task.early_step if task.early_step < steps else None
    summary = summarize(records, threshold, early_step=early)
    if task.recipe is None:
        png_path = plot_curves(records, out / "curves.png", threshold=threshold, title=title)
        table = format_summary(summary, threshold)
    else:
        png_path = plot_panels(
            records, out / "curves.png", threshold=threshold, title=title, dataset_returns=returns
        )
        table = format_summary(summary, threshold, success=False)
        (out / "summary.md").write_text(format_markdown(summary, threshold, returns) + "\n")
    wall = time.perf_counter() - start
    last: dict[tuple[str, str, int], dict] = {}
    for r in records:
        key = (r["dataset"], r["arm"], r["seed"])
        if r["step"] >= last.get(key, {"step": -1})["step"]:
            last[key] = r
    cpu = sum(r["cpu_s"] for r in last.values())
    timing = (
        f"wall time {wall:.0f} s ({prepared - start:.0f} s until the runs on offline data "
        f"started); the runs used {cpu:.0f} CPU-s in all ({cpu / workers:.0f} s per worker: "
        f"about their wall time on {workers} idle core(s))"
    )
    if made:
        timing += (
            f"; making the datasets took {made[-1]['wall_s']:.0f} s wall and "
            f"{made[-1]['cpu_s']:.0f} CPU-s, beside the online runs"
        )
    timing += f"; {load_before} at the start, {_load()} at the end"
    made_by_name = {m["dataset"]: m for m in made}
    data = ""
    for name, dataset_id in _datasets(args, task):
        if name not in returns:
            continue
        data += f"\ndataset {name}: {dataset_id}, mean episode return {returns[name]:.1f}"
        m = made_by_name.get(name)
        if m is not None:
            verdict = "inside" if m["in_range"] else "OUTSIDE"
            data += (
                f" (made in this run from the policy at step {m['snapshot_step']}; {verdict} "
                f"the recipe's range [{m['expected_low']:g}, {m['expected_high']:g}])"
            )
    note = f"\n{_quick_note(task)}" if args.quick else ""
    (out / "summary.txt").write_text(
        f"{table}{data}\nconfig: {dataclasses.asdict(specs[0].sac)}, {seeds} seeds x {steps} "
        f"steps, {workers} worker(s); {timing}{note}\n"
    )
    print(f"\n{table}{data}{note}\n")
    written = [csv_path, png_path, out / "summary.txt"]
    if task.recipe is not None:
        written.append(out / "summary.md")
    print(f"wrote {', '.join(str(w) for w in written)}\n{timing}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mixreplay.demo [options]``: the same as ``mixreplay demo [options]``."""
    from mixreplay.cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])
