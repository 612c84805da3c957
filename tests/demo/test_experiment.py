"""One run of an arm, end to end but short."""

from __future__ import annotations

import multiprocessing

import gymnasium as gym
import numpy as np
import pytest

from mixreplay import OfflineToOnlineReplayBuffer, ReplayBuffer
from mixreplay.demo.data import ExpertSpec, ensure_expert_dataset
from mixreplay.demo.experiment import ARMS, RunSpec, evaluate, make_buffer, run_arm, transition
from mixreplay.demo.report import COLUMNS
from mixreplay.demo.sac import SAC, SACConfig

TEST_ID = "mixreplay/mountaincar-expert-test-v0"
SMALL_SAC = SACConfig(hidden=16, batch_size=32)


@pytest.fixture
def dataset_id():
    ensure_expert_dataset(TEST_ID, ExpertSpec(num_transitions=600))
    return f"minari:{TEST_ID}"


def spec(arm: str, dataset_id: str, **kw) -> RunSpec:
    base = {"seed": 0, "steps": 300, "dataset_return": 90.0, "learning_starts": 250}
    base.update(eval_every=150, eval_episodes=1, sac=SMALL_SAC)
    return RunSpec(arm=arm, dataset_id=dataset_id, **{**base, **kw})


def test_transition_layout():
    row = transition(np.zeros(2), np.zeros(1), 1.5, np.ones(2), True, False)
    assert row.batch_size == (1,)
    assert row["next", "terminated"].item() and row["next", "done"].item()
    assert not row["next", "truncated"].item() and not row["done"].item()
    assert row["next", "reward"].shape == (1, 1)
    row = transition(np.zeros(2), np.zeros(1), 0.0, np.ones(2), False, True)
    assert row["next", "done"].item() and not row["next", "terminated"].item()


def test_buffers_per_arm(dataset_id):
    import torch

    assert isinstance(make_buffer(spec("online", dataset_id), torch.Generator()), ReplayBuffer)
    for arm in ("mixed", "anneal", "gated"):
        rb = make_buffer(spec(arm, dataset_id), torch.Generator())
        assert isinstance(rb, OfflineToOnlineReplayBuffer) and rb.offline_fraction == 0.5
    rb = make_buffer(spec("proportional", dataset_id), torch.Generator())
    assert rb.offline_fraction == 1.0  # the online ring is empty: every row is offline


@pytest.mark.parametrize("arm", ARMS)
def test_run_arm_records(arm, dataset_id):
    import torch

    calls = []
    records = run_arm(spec(arm, dataset_id, progress_every=100), progress=calls.append)
    assert [r["step"] for r in records] == [150, 300]
    assert set(COLUMNS) <= set(records[0])
    assert all(r["arm"] == arm and r["seed"] == 0 for r in records)
    assert sum(calls) == 300
    fractions = [r["offline_fraction"] for r in records]
    n = len(make_buffer(spec("mixed", dataset_id), torch.Generator()).offline_buffer)
    expected = {
        "online": [0.0, 0.0],
        "mixed": [0.5, 0.5],
        "anneal": [0.25, 0.0],
        # the offline rows' share of all rows after 150 and 300 online steps
        "proportional": [n / (n + 150), n / (n + 300)],
        # the gate hears evaluations (window 2): a full window only at the last one
        "gated": [0.5, 0.5],
    }[arm]
    assert fractions == pytest.approx(expected)
    assert all(r["dataset"] == "" for r in records)


def test_bad_arm():
    with pytest.raises(ValueError, match="unknown arm 'both'"):
        RunSpec(arm="both", seed=0, steps=10)
    with pytest.raises(ValueError, match=r"pass RunSpec\(dataset_return=<the dataset's mean"):
        RunSpec(arm="gated", seed=0, steps=10)


def test_evaluate_counts_successes():
    envs = [gym.make("MountainCarContinuous-v0") for _ in range(2)]
    agent = SAC(
        envs[0].observation_space.low,
        envs[0].observation_space.high,
        envs[0].action_space.low,
        envs[0].action_space.high,
        config=SACConfig(hidden=8),
    )

    class Pump:  # the noiseless expert, through the agent's interface
        def act_batch(self, obs, deterministic=True):
            return np.sign(obs[:, 1:2]).astype(np.float32) + (obs[:, 1:2] == 0)

    mean_return, success = evaluate(Pump(), envs, seed=0)
    assert success == 1.0 and mean_return > 80
    mean_return, success = evaluate(agent, envs, seed=0)  # an untrained policy: cut at 999 steps
    assert 0.0 <= success <= 1.0
    for env in envs:
        env.close()


def test_a_failing_run_raises_in_the_parent():
    from mixreplay import DatasetNotFoundError
    from mixreplay.demo.runner import run_specs

    bad = RunSpec(
        arm="mixed", seed=0, steps=10, dataset_id="minari:mixreplay/missing-v0", sac=SMALL_SAC
    )
    endless = RunSpec(arm="online", seed=0, steps=10_000_000, sac=SMALL_SAC)
    with pytest.raises(DatasetNotFoundError, match="missing"):
        run_specs([endless, bad], workers=2)
    # the endless sibling run was stopped, not waited for: no worker process is left
    assert multiprocessing.active_children() == []


def test_runs_report_their_start_steps_and_end_by_index():
    from mixreplay.demo.runner import run_specs

    specs = [
        RunSpec(arm="online", seed=s, steps=n, eval_every=n, eval_episodes=1, progress_every=10)
        for s, n in ((0, 30), (1, 50), (2, 20))
    ]
    events = []
    records = run_specs(
        specs,
        workers=2,
        on_start=lambda i: events.append(("start", i)),
        on_progress=lambda i, n: events.append(("steps", i, n)),
        on_result=lambda i, rows: events.append(("end", i, len(rows))),
    )
    assert [r["seed"] for r in records] == [0, 1, 2]
    for i, spec in enumerate(specs):
        mine = [e for e in events if e[1] == i]
        assert mine[0] == ("start", i)  # before any of its steps
        assert sum(e[2] for e in mine if e[0] == "steps") == spec.steps
        assert [e for e in mine if e[0] == "end"] == [("end", i, 1)]


def test_the_gated_arm_drops_the_offline_share_once_evaluations_pass_the_dataset(dataset_id):
    """A dataset of return -1000: any MountainCar policy passes it; the share is 0 after the
    first full window of evaluations (two), and the dataset's share before."""
    records = run_arm(spec("gated", dataset_id, steps=450, dataset_return=-1000.0))
    assert [r["step"] for r in records] == [150, 300, 450]
    assert all(r["return"] > -1000 for r in records)
    assert [r["offline_fraction"] for r in records] == [0.5, 0.5, 0.0]
