"""``mixreplay demo --task halfcheetah``: options, the dataset recipe, MuJoCo's log file, a tiny run."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
import sys

import minari
import numpy as np
import pytest

from mixreplay.cli import UsageError, main
from mixreplay.demo.cli import add_demo_parser, build_specs, check_dependencies, check_options
from mixreplay.demo.config import ARMS, SACConfig
from mixreplay.demo.envs import make_env
from mixreplay.demo.policy_data import choose_snapshot, make_policy_datasets, missing_datasets
from mixreplay.demo.report import read_csv
from mixreplay.demo.tasks import TASKS, DatasetLevel, PolicyRecipe
from mixreplay.errors import MissingDependencyError

HALFCHEETAH = TASKS["halfcheetah"]
#: the benchmark at a size of seconds: tiny nets, one 1,000-step episode per dataset
TINY = dataclasses.replace(
    HALFCHEETAH,
    datasets=tuple(
        dataclasses.replace(level, dataset_id=level.dataset_id.replace("-v0", "-tiny-v0"))
        for level in HALFCHEETAH.datasets
    ),
    recipe=PolicyRecipe(
        train_steps=300,
        sac=SACConfig(hidden=16, batch_size=32),
        eval_every=150,
        eval_episodes=1,
        num_transitions=1,
    ),
)
TINY_RUN = [
    "demo",
    "--task",
    "halfcheetah",
    *("--steps", "300", "--seeds", "1", "--eval-every", "300", "--eval-episodes", "1"),
    *("--hidden", "16", "--batch-size", "32"),
]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mixreplay")
    add_demo_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


@pytest.fixture
def tiny(monkeypatch):
    """The halfcheetah task with the tiny recipe (workers get the Task itself, pickled)."""
    monkeypatch.setitem(TASKS, "halfcheetah", TINY)
    return TINY


@pytest.fixture
def no_log_file(tmp_path, monkeypatch):
    """Run in an empty directory and check MuJoCo wrote no MUJOCO_LOG.TXT into it."""
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_the_task_and_its_defaults():
    args = parse("--task", "halfcheetah")
    task, arms = check_options(args)
    assert task is HALFCHEETAH and task.env_id == "HalfCheetah-v5"
    assert arms == ["online", "mixed", "anneal", "proportional"]
    assert check_options(parse("--task", "halfcheetah", "--quick"))[1] == ["online", "mixed"]
    # the experimental return-gated arm is asked for by name
    gated = check_options(parse("--task", "halfcheetah", "--arms", "online,gated"))[1]
    assert gated == ["online", "gated"]
    assert [level.name for level in task.datasets] == ["weak", "good"]
    assert all("." not in level.dataset_id for level in task.datasets)  # Minari refuses dots


def test_specs_run_every_data_arm_on_every_dataset_and_online_once_per_seed():
    args = parse("--task", "halfcheetah", "--seeds", "2", "--arms", ",".join(ARMS))
    specs = build_specs(args, {"weak": 900.0, "good": 2500.0})
    assert len(specs) == 2 * (1 + 4 * 2)
    assert [s.seed for s in specs] == sorted(s.seed for s in specs)  # seeds outermost
    online = [s for s in specs if s.arm == "online"]
    assert [(s.dataset, s.dataset_return) for s in online] == [("", None), ("", None)]
    gated = {s.dataset: s.dataset_return for s in specs if s.arm == "gated"}
    assert gated == {"weak": 900.0, "good": 2500.0}
    assert {s.dataset_id for s in specs if s.dataset == "good"} == {
        "minari:mixreplay/halfcheetah-good-v0"
    }
    assert all(s.steps == 20_000 and s.env_id == "HalfCheetah-v5" for s in specs)
    assert {s.arm for s in build_specs(args, {}, online=True)} == {"online"}
    assert "online" not in {s.arm for s in build_specs(args, {"weak": 1, "good": 2}, online=False)}


def test_first_seed_runs_a_later_part_of_the_seeds(capsys):
    """--first-seed 1 --seeds 2: seeds 1 and 2, the same specs as those seeds of a 3-seed run."""
    whole = build_specs(parse("--task", "halfcheetah", "--seeds", "3"), {"weak": 1.0, "good": 2.0})
    part = build_specs(
        parse("--task", "halfcheetah", "--seeds", "2", "--first-seed", "1"),
        {"weak": 1.0, "good": 2.0},
    )
    assert part == [s for s in whole if s.seed >= 1]
    for bad, said in (("-1", "got -1"), ("x", "got 'x'")):
        with pytest.raises(SystemExit):
            parse("--task", "halfcheetah", "--first-seed", bad)
        assert f"--first-seed: expected an integer >= 0, {said}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["--env", "Hopper-v5"],
            r"--task halfcheetah runs HalfCheetah-v5 on the datasets it makes \(weak, good\); "
            r"--env and --dataset are for --task mountaincar",
        ),
        (["--dataset", "minari:mujoco/halfcheetah/expert-v0"], "--env and --dataset are for"),
        (["--arms", "gated,best"], "--arms takes a comma-separated subset of"),
    ],
)
def test_bad_options(argv, match, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=match):
        main_args = parse("--task", "halfcheetah", *argv, "--out", str(out))
        from mixreplay.demo.cli import run_demo

        run_demo(main_args)
    assert not out.exists()


@pytest.mark.parametrize("module", ["mujoco", "minari"])
def test_a_missing_module_names_the_mujoco_extra(module, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a blocked import
    with pytest.raises(
        MissingDependencyError,
        match=rf"mixreplay demo --task halfcheetah needs {module}, which is not installed; "
        r'install the mujoco extra: pip install "mixreplay\[mujoco\]"',
    ):
        check_dependencies(HALFCHEETAH)
    out = tmp_path / "out"
    assert main(["demo", "--task", "halfcheetah", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "mixreplay[mujoco]"' in err
    assert "Traceback" not in err and not out.exists()


def test_choose_snapshot():
    evals = [(1000, -5.0), (2000, 950.0), (3000, 700.0), (4000, 1900.0)]
    weak = DatasetLevel(name="weak", dataset_id="a/weak-v0", min_eval_return=900.0)
    assert choose_snapshot(evals, weak) == 1
    assert choose_snapshot(evals, dataclasses.replace(weak, min_eval_return=None)) == 3
    # no policy reached the level: the best one, and the dataset's return check says so
    assert choose_snapshot(evals, dataclasses.replace(weak, min_eval_return=5000.0)) == 3
    with pytest.raises(ValueError, match="made no evaluation"):
        choose_snapshot([], weak)


def test_mujoco_warnings_go_to_logging_not_to_a_file(no_log_file, caplog):
    with caplog.at_level(logging.DEBUG, logger="mixreplay.demo.mujoco"):
        make_env("HalfCheetah-v5").close()
    assert list(no_log_file.iterdir()) == []
    assert any("settotalmass" in r.getMessage() for r in caplog.records)
    assert all(
        r.levelno == logging.DEBUG for r in caplog.records if "settotalmass" in r.getMessage()
    )


def test_the_recipe_writes_real_minari_datasets_and_checks_their_return(
    demo_roots, no_log_file, caplog
):
    assert missing_datasets(TINY) == list(TINY.datasets)
    with caplog.at_level(logging.WARNING, logger="mixreplay.demo.policy_data"):
        made = make_policy_datasets(TINY)
    assert [m["dataset"] for m in made] == ["weak", "good"]
    for m, level in zip(made, TINY.datasets):
        ds = minari.load_dataset(level.dataset_id)
        returns = [float(np.sum(ep.rewards)) for ep in ds.iterate_episodes()]
        assert m["mean_return"] == pytest.approx(np.mean(returns))
        assert ds.total_steps == m["transitions"] == 1000 and m["episodes"] == 1
        assert (demo_roots["minari"] / level.dataset_id / "data" / "metadata.json").exists()
        # 300 steps of a tiny SAC is far from the levels the recipe states: said, not hidden
        assert m["in_range"] is False
        assert re.search(
            rf"dataset {level.dataset_id} has mean return -?[\d.]+, outside the recipe's range",
            caplog.text,
        )
    assert missing_datasets(TINY) == [] and make_policy_datasets(TINY) == []


@pytest.mark.heavy  # seconds of MuJoCo per arm: out of the default run, in CI
def test_a_tiny_benchmark_end_to_end(tiny, demo_roots, no_log_file, capsys):
    """The whole command at a size of seconds: datasets made, every arm on each, outputs written."""
    out = no_log_file / "bench"
    assert main([*TINY_RUN, "--out", str(out)]) == 0
    records = read_csv(out / "results.csv")
    runs = {(r["dataset"], r["arm"]) for r in records}
    data_arms = ("mixed", "anneal", "proportional")  # the default arms (gated: by name)
    assert runs == {("", "online")} | {(d, a) for d in ("weak", "good") for a in data_arms}
    assert all(r["step"] == 300 for r in records)
    table = (out / "summary.md").read_text().splitlines()
    assert table[0].startswith("| data (mean return) | arm |") and len(table) == 2 + 1 + 2 * len(
        data_arms
    )
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    printed = capsys.readouterr()
    assert "making the datasets mixreplay/halfcheetah-weak-tiny-v0" in printed.out
    assert "OUTSIDE the recipe's range" in printed.out
    assert "proportional on weak, seed 0: 300 steps in" in printed.err
    summary = (out / "summary.txt").read_text()
    assert "made in this run from the policy at step" in summary and "load average" in summary
    # a second run reuses the datasets
    assert main([*TINY_RUN, "--arms", "mixed", "--out", str(out)]) == 0
    assert "making the datasets" not in capsys.readouterr().out
