"""``mixreplay demo``: options, user errors, the --quick run (CI) and the full default run (slow)."""

from __future__ import annotations

import argparse
import io
import re
import sys

import pytest
import torch
from tensordict import TensorDict

from mixreplay.cli import UsageError, main
from mixreplay.demo.cli import DEPENDENCIES, QUICK, add_demo_parser, check_dependencies, run_demo
from mixreplay.demo.config import DEFAULTS
from mixreplay.demo.progress import RunBars, RunLines
from mixreplay.demo.report import COLUMNS, read_csv, summarize
from mixreplay.demo.tasks import TASKS
from mixreplay.errors import MissingDependencyError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mixreplay")
    add_demo_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


def test_parser_defaults():
    args = parse()
    assert args.func is run_demo
    assert (args.utd, args.batch_size, args.hidden) == (1, 128, 128)
    assert args.task == "mountaincar" and args.env is None and args.threshold is None
    assert TASKS["mountaincar"].threshold == 80.0 and TASKS["mountaincar"].env_id == (
        "MountainCarContinuous-v0"
    )


def test_quick_is_shorter_than_the_default_run():
    assert QUICK["seeds"] * QUICK["steps"] < DEFAULTS["seeds"] * DEFAULTS["steps"]
    assert QUICK["eval_every"] == DEFAULTS["eval_every"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["--arms", "online,both"],
            "--arms takes a comma-separated subset of online,mixed,anneal,proportional,gated",
        ),
        (["--arms", ","], "--arms takes"),
        (
            ["--env", "Pendulum-v1", "--quick"],
            r"for --env Pendulum-v1 pass --dataset <prefix>:<id>",
        ),
    ],
)
def test_bad_options(argv, match, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=match):
        run_demo(parse(*argv, "--out", str(out)))
    assert not out.exists()  # refused before anything was written


def test_bad_options_print_one_line_and_exit_2(tmp_path, capsys):
    assert main(["demo", "--arms", "both", "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "mixreplay: error: --arms takes a comma-separated subset of "
        "online,mixed,anneal,proportional,gated, got 'both'\n"
    )


def test_nonpositive_steps_rejected(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--steps", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "mixreplay demo: error: argument --steps: expected a positive integer, got 0; "
        "see mixreplay demo --help\n"
    )


@pytest.mark.parametrize("module", DEPENDENCIES)
def test_a_missing_dependency_names_the_extra(module, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a blocked import
    with pytest.raises(
        MissingDependencyError,
        match=rf"mixreplay demo needs {module}, which is not installed; install the demo extra: "
        r'pip install "mixreplay\[demo\]"',
    ):
        check_dependencies()
    out = tmp_path / "out"
    assert main(["demo", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "mixreplay[demo]"' in err
    assert "Traceback" not in err and not out.exists()


def test_a_missing_dataset_is_one_line(tmp_path, capsys):
    argv = ["demo", "--arms", "mixed", "--dataset", "minari:mixreplay/absent-v0"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"mixreplay: error: [^\n]*absent-v0[^\n]*\n", err)
    # the demo has no --download: the message names the command that fetches it
    assert err.endswith(
        "or run `mixreplay inspect minari:mixreplay/absent-v0 --download` to fetch it with Minari\n"
    )


def test_a_dataset_of_another_environment_is_refused_before_training(tmp_path, monkeypatch, capsys):
    """Pendulum's transitions given to the MountainCar demo: one line naming both
    environments and their shapes, before any run starts and before --out is made."""
    from tests.datasets.conftest import make_pendulum

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    make_pendulum("test/pendulum-v0")
    runs = []
    monkeypatch.setattr("mixreplay.demo.cli._run_jobs", lambda *a, **k: runs.append(a) or [])
    out = tmp_path / "out"
    argv = ["demo", "--quick", "--dataset", "minari:test/pendulum-v0", "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "mixreplay: error: --dataset minari:test/pendulum-v0 is recorded in Pendulum-v1 "
        "(observation [3], action [1]), but the demo runs MountainCarContinuous-v0 (observation "
        "[2], action [1]): its transitions cannot mix with MountainCarContinuous-v0's; pass "
        "--env Pendulum-v1 to train there, or give a dataset recorded in "
        "MountainCarContinuous-v0\n"
    )
    assert runs == [] and not out.exists()


def test_the_environment_check_reads_shapes_and_the_recorded_name(monkeypatch, caplog):
    from mixreplay import Schema
    from mixreplay.demo import cli as demo_cli

    car = Schema.from_tensordict(
        TensorDict(observation=torch.zeros(1, 2), action=torch.zeros(1, 1), batch_size=[1])
    )
    monkeypatch.setattr(demo_cli, "recorded_env", lambda dataset_id: None)
    demo_cli.check_dataset_env("memmap:logs", car, "MountainCarContinuous-v0")  # shapes match
    with pytest.raises(
        UsageError,
        match=r"is from another environment \(observation \[2\], "
        r"action \[1\]\), but the demo runs Pendulum-v1 \(observation \[3\]",
    ):
        demo_cli.check_dataset_env("memmap:logs", car, "Pendulum-v1")
    # recorded elsewhere with the same shapes: it runs, and the log says so
    monkeypatch.setattr(demo_cli, "recorded_env", lambda dataset_id: "MyCar-v0")
    with caplog.at_level("WARNING", logger="mixreplay.demo.cli"):
        demo_cli.check_dataset_env("minari:me/car-v0", car, "MountainCarContinuous-v0")
    assert "was recorded in MyCar-v0, but the demo runs MountainCarContinuous-v0" in caplog.text


def test_bars_show_each_run_its_own_time():
    """Two runs side by side and one that never starts: each bar charges to its run the
    readings of the clock between that run's start and finish.

    No real time is read: the bars take an injected clock whose readings this test sets by
    hand (the constants below), so what is checked is the bookkeeping between readings."""
    a_starts, b_starts, a_ends, redraw, b_ends, demo_ends = 100, 102, 105, 109, 109, 200
    reading = [float(a_starts)]
    out = io.StringIO()
    bars = RunBars(["a", "b", "c"], [10, 10, 10], file=out, clock=lambda: reading[0])
    a, b, c = bars.bars
    assert a.span == b.span == c.span == (None, None)  # no reading taken before a start
    assert "queued" in str(a) and "0/10 [00:00<?" in str(b)
    bars.start(0)
    reading[0] = b_starts
    bars.start(1)
    bars.advance(0, 10)
    reading[0] = a_ends
    bars.finish(0)
    bars.advance(1, 4)
    reading[0] = redraw
    bars.tick()
    assert b.span == (b_starts, None)  # running: counted from its own start reading, not a's
    assert "4/10 [00:07<" in str(b)  # redraw - b_starts readings shown, not redraw - a_starts
    bars.advance(1, 6)
    bars.finish(1)
    reading[0] = demo_ends  # the demo ends much later: finished bars stop at their finish
    assert (a.span, b.span, c.span) == ((a_starts, a_ends), (b_starts, b_ends), (None, None))
    lines = [str(bar) for bar in bars.bars]
    # tqdm shows the charged span (5 and 7 readings) and a's rate over it (10 steps / 5)
    assert "10/10 [00:05<00:00" in lines[0] and "2.00 steps/s" in lines[0]
    assert "10/10 [00:07<00:00" in lines[1]
    assert "0/10 [00:00<?" in lines[2]
    bars.close()


def test_lines_in_a_log_show_each_run_its_own_time():
    """The log lines read an injected clock set by hand: the seconds shown are its readings."""
    now = [0.0]
    out = io.StringIO()
    lines = RunLines(["a, seed 0", "b, seed 0"], [10, 10], file=out, clock=lambda: now[0])
    lines.start(0)
    now[0] = 3.0
    lines.start(1)
    lines.advance(0, 10)
    now[0] = 8.0
    lines.finish(0)
    lines.advance(1, 10)
    now[0] = 20.0
    lines.finish(1)
    lines.close()
    assert out.getvalue().splitlines() == [
        "[   0 s] a, seed 0: started",
        "[   3 s] b, seed 0: started",
        "[   8 s] a, seed 0: 10 steps in 8 s",
        "[  20 s] b, seed 0: 10 steps in 17 s",
    ]


def test_a_finished_runs_line_gives_its_final_return():
    out = io.StringIO()
    lines = RunLines(["a, seed 0"], [10], file=out, clock=lambda: 0.0)
    lines.start(0)
    lines.advance(0, 10)
    lines.finish(0, [{"step": 5, "return": 1.0}, {"step": 10, "return": 1234.56}])
    assert out.getvalue().splitlines()[-1] == (
        "[   0 s] a, seed 0: 10 steps in 0 s, final return 1,234.6"
    )


def test_a_finished_runs_line_counts_steps_whose_reports_are_still_queued():
    """A worker's last progress reports can reach the parent after its result (the queue's
    feeder thread, a loaded machine): the line says the step the run's records reached."""
    out = io.StringIO()
    lines = RunLines(["a, seed 0"], [2000], file=out, clock=lambda: 0.0)
    lines.start(0)
    lines.advance(0, 1750)  # the last 250 steps' report not drained yet
    lines.finish(0, [{"step": 1000, "return": 1.0}, {"step": 2000, "return": 2.0}])
    assert (
        out.getvalue().splitlines()[-1]
        == "[   0 s] a, seed 0: 2,000 steps in 0 s, final return 2.0"
    )


def check_outputs(out, *, seeds: int, steps: int, eval_every: int):
    records = read_csv(out / "results.csv")
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == list(COLUMNS)
    evals = list(range(eval_every, steps + 1, eval_every))
    if evals[-1] != steps:
        evals.append(steps)
    arms = TASKS["mountaincar"].arms
    expected = {(arm, seed, step) for arm in arms for seed in range(seeds) for step in evals}
    assert {(r["arm"], r["seed"], r["step"]) for r in records} == expected
    assert len(records) == len(expected)
    for r in records:
        assert 0.0 <= r["train_success"] <= 1.0 and 0.0 <= r["eval_success"] <= 1.0
        assert -1000 < r["return"] <= 100
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "steps to 80" in (out / "summary.txt").read_text()
    return records


@pytest.mark.heavy  # the --quick demo: 2 seeds x 2 arms x 2,000 SAC steps, in worker processes
def test_quick_run_shows_the_offline_data_deciding_success(tmp_path, capsys, demo_roots):
    """--quick is short, and already shows the effect: mixed arms reach the goal, online-only not."""
    out = tmp_path / "quick"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    records = check_outputs(
        out, seeds=QUICK["seeds"], steps=QUICK["steps"], eval_every=QUICK["eval_every"]
    )
    by_arm = {s["arm"]: s for s in summarize(records, threshold=80)}
    assert by_arm["online"]["seeds_reaching"] == 0
    for arm in ("mixed", "anneal"):
        assert by_arm[arm]["seeds_reaching"] >= 1, by_arm[arm]
        assert by_arm[arm]["final_return"] > by_arm["online"]["final_return"] + 50, by_arm
        assert by_arm[arm]["final_train_success"] > by_arm["online"]["final_train_success"]
    captured = capsys.readouterr()
    for label in ("online only", "50/50 mixed", "anneal 0.5 -> 0", "wall time", "--quick: "):
        assert label in captured.out
    # stderr is not a terminal here: one line per run start and end, no bars
    for label in ("online only", "50/50 mixed", "anneal 0.5 -> 0"):
        for seed in range(QUICK["seeds"]):
            assert f"{label}, seed {seed}: started" in captured.err
            assert f"{label}, seed {seed}: 2,000 steps in " in captured.err
    assert "%|" not in captured.err
    assert "--quick: 2 seeds x 2,000 steps" in (out / "summary.txt").read_text()
    # the dataset went to the test's Minari root, the conversion cache to its mixreplay root
    assert (
        demo_roots["minari"] / "mixreplay" / "mountaincar-expert-v0" / "data" / "metadata.json"
    ).exists()
    assert any(demo_roots["mixreplay"].rglob("metadata.json"))
    assert {r["offline_fraction"] for r in records if r["arm"] == "mixed"} == {0.5}


@pytest.mark.slow
def test_default_run_shows_the_gap(tmp_path, capsys):
    """The issue's target: mixed reaches 80 on a majority of seeds, online-only on none."""
    out = tmp_path / "default"
    assert run_demo(parse("--out", str(out))) == 0
    records = check_outputs(out, seeds=3, steps=3000, eval_every=250)
    by_arm = {s["arm"]: s for s in summarize(records, threshold=80)}
    assert by_arm["mixed"]["seeds_reaching"] >= 2
    assert by_arm["online"]["seeds_reaching"] == 0
