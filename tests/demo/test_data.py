"""The expert dataset: a real Minari dataset in MINARI_DATASETS_PATH, read back through load_dataset."""

from __future__ import annotations

import json

import minari
import numpy as np
import pytest
import torch

from mixreplay import OfflineToOnlineReplayBuffer, load_dataset
from mixreplay.demo.data import DEFAULT_DATASET_ID, ExpertSpec, ensure_expert_dataset, expert_action
from mixreplay.demo.experiment import transition

TEST_ID = "mixreplay/mountaincar-expert-test-v0"
SMALL = ExpertSpec(num_transitions=600)


def test_default_id_is_a_valid_minari_id_without_dots():
    assert "." not in DEFAULT_DATASET_ID
    assert DEFAULT_DATASET_ID.startswith("mixreplay/")


def test_expert_pushes_along_velocity():
    rng = np.random.default_rng(0)
    assert expert_action(np.array([-0.5, 0.01]), rng, noise=0.0).tolist() == [1.0]
    assert expert_action(np.array([-0.5, -0.01]), rng, noise=0.0).tolist() == [-1.0]
    noisy = np.concatenate(
        [expert_action(np.array([0.0, 0.01]), rng, noise=0.5) for _ in range(500)]
    )
    assert noisy.dtype == np.float32 and noisy.min() >= -1 and noisy.max() <= 1


def test_dataset_written_to_minari_root_and_reused(demo_roots):
    path = ensure_expert_dataset(TEST_ID, SMALL)
    assert path == demo_roots["minari"] / TEST_ID
    assert (path / "data" / "metadata.json").exists()
    mtime = (path / "data" / "metadata.json").stat().st_mtime_ns
    assert ensure_expert_dataset(TEST_ID, SMALL) == path  # second call: nothing rewritten
    assert (path / "data" / "metadata.json").stat().st_mtime_ns == mtime
    ds = minari.load_dataset(TEST_ID)
    assert ds.total_steps >= SMALL.num_transitions
    returns = [float(np.sum(ep.rewards)) for ep in ds.iterate_episodes()]
    assert np.mean(returns) > 80, "the scripted expert should solve MountainCar"
    assert all(ep.terminations[-1] for ep in ds.iterate_episodes())
    meta = json.loads((path / "data" / "metadata.json").read_text())
    assert meta["env_spec"] and "MountainCarContinuous" in meta["env_spec"]


def test_incomplete_dataset_folder_is_reported(demo_roots):
    broken = demo_roots["minari"] / TEST_ID
    broken.mkdir(parents=True)
    (broken / "stray").write_text("")
    with pytest.raises(FileExistsError, match="no complete Minari dataset"):
        ensure_expert_dataset(TEST_ID, SMALL)


def test_only_mountaincar_has_a_scripted_expert():
    with pytest.raises(ValueError, match="only knows"):
        ensure_expert_dataset("mixreplay/pendulum-expert-v0", ExpertSpec(env_id="Pendulum-v1"))


def test_online_rows_match_the_loaded_dataset_schema():
    ensure_expert_dataset(TEST_ID, SMALL)
    offline = load_dataset(f"minari:{TEST_ID}", batch_size=32)
    mix = OfflineToOnlineReplayBuffer(
        offline, online_capacity=10, offline_fraction=0.5, batch_size=32, generator=0
    )
    obs = np.array([-0.5, 0.0], dtype=np.float32)
    mix.extend(transition(obs, np.array([0.3], dtype=np.float32), -0.009, obs, False, True))
    batch = mix.sample()
    assert batch["next", "reward"].dtype == torch.float32
    assert batch["next", "terminated"].dtype == torch.bool
    assert batch["next", "truncated"].sum() >= 1  # the online row: truncated, not terminated
