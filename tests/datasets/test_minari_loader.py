"""``minari:`` loader on datasets written by Minari itself around real Gymnasium envs."""

from __future__ import annotations

import dataclasses
import logging
import sys

import numpy as np
import pytest
import torch

from mixreplay import (
    DatasetError,
    DatasetNotFoundError,
    LazyTensorStorage,
    MissingDependencyError,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReadOnlyError,
    ReplayBuffer,
    load_dataset,
    prefill_replay_buffer,
)
from mixreplay.datasets import minari as minari_loader
from tests.datasets.conftest import (
    DICTOBS,
    MOUNTAINCAR,
    PENDULUM,
    env_ted_rows,
    make_pendulum,
    pendulum_env,
    record,
)

TED_KEYS = {
    ("observation",),
    ("action",),
    ("done",),
    ("terminated",),
    ("truncated",),
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
}


def f32(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float32))


def check_rows(ds, episodes, obs_key=("observation",), leaf=lambda obs: obs):
    """Every converted row against the arrays handed to Minari, episode by episode."""
    td = ds[:]
    starts, row = [], 0
    for ep in episodes:
        n = len(ep.rewards)
        starts.append(row)
        obs = f32(leaf(ep.observations))
        rows = td[row : row + n]
        torch.testing.assert_close(rows.get(obs_key), obs[:-1], rtol=0, atol=0)
        torch.testing.assert_close(rows.get(("next",) + obs_key), obs[1:], rtol=0, atol=0)
        torch.testing.assert_close(rows["action"], f32(ep.actions).reshape(n, -1), rtol=0, atol=0)
        torch.testing.assert_close(
            rows["next", "reward"], f32(ep.rewards).reshape(n, 1), rtol=0, atol=0
        )
        term = torch.as_tensor(ep.terminations).reshape(n, 1)
        trunc = torch.as_tensor(ep.truncations).reshape(n, 1)
        assert torch.equal(rows["next", "terminated"], term)
        assert torch.equal(rows["next", "truncated"], trunc)
        assert torch.equal(rows["next", "done"], term | trunc)
        for flag in ("done", "terminated", "truncated"):
            assert not rows[flag].any()
        row += n
    assert len(ds) == row
    assert ds.episode_starts.tolist() == starts


def test_pendulum_rows_match_the_raw_episodes(minari_root):
    ds = load_dataset(f"minari:{PENDULUM}")
    assert isinstance(ds, OfflineDataset)
    assert set(ds.schema) == TED_KEYS
    for key in ("observation", "action", ("next", "observation"), ("next", "reward")):
        assert ds.schema[key].dtype == torch.float32  # Minari's float64 rewards included
    for key in ("done", ("next", "done"), ("next", "terminated")):
        assert ds.schema[key].dtype == torch.bool and ds.schema[key].shape == (1,)
    check_rows(ds, minari_root[PENDULUM].episodes)
    assert ds.source_id == f"minari:{PENDULUM}"


def test_next_observation_does_not_cross_episodes(minari_root):
    eps = minari_root[PENDULUM].episodes
    ds = load_dataset(f"minari:{PENDULUM}")
    boundary = int(ds.episode_starts[1])
    last, first = ds[boundary - 1], ds[boundary]
    torch.testing.assert_close(last["next", "observation"], f32(eps[0].observations[-1]))
    torch.testing.assert_close(first["observation"], f32(eps[1].observations[0]))
    assert bool(last["next", "truncated"]) and not bool(last["next", "terminated"])


def test_mountaincar_terminations_and_truncations(minari_root):
    eps = minari_root[MOUNTAINCAR].episodes
    assert [ep.terminations[-1] for ep in eps] == [True, True, False]
    assert eps[2].truncations[-1]
    ds = load_dataset(f"minari:{MOUNTAINCAR}")
    check_rows(ds, eps)
    ends = ds.episode_starts[1:].tolist() + [len(ds)]
    td = ds[:]
    assert td["next", "terminated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [
        e - 1 for e in ends[:2]
    ]
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [ends[2] - 1]


def test_nested_dict_observations_keep_their_structure(minari_root):
    eps = minari_root[DICTOBS].episodes
    ds = load_dataset(f"minari:{DICTOBS}")
    assert ("observation", "angle") in ds.schema and (
        "observation",
        "extra",
        "velocity",
    ) in ds.schema
    assert ds.schema["observation", "extra", "velocity"].shape == (1,)
    check_rows(ds, eps, ("observation", "angle"), lambda o: o["angle"])
    check_rows(ds, eps, ("observation", "extra", "velocity"), lambda o: o["extra"]["velocity"])
    assert not any(k[:2] == ("next", "info") for k in ds.schema)  # infos dropped by default
    sample = ds.sample(5)
    assert sample["observation", "extra", "velocity"].shape == (5, 1)


def test_keep_infos_puts_step_infos_under_next_info(minari_root):
    eps = minari_root[DICTOBS].episodes
    ds = load_dataset(f"minari:{DICTOBS}", keep_infos=True)
    info = ds[:]["next", "info", "step"]
    # Minari stores T + 1 infos (the reset's first); row t gets the info of step t
    expected = torch.cat([f32(ep.infos["step"][1:]) for ep in eps])
    torch.testing.assert_close(info, expected)
    assert ds.schema["next", "info", "step"].dtype == torch.float32


def test_dtype_none_keeps_minaris_float64_rewards(minari_root):
    ds = load_dataset(f"minari:{PENDULUM}", dtype=None)
    assert ds.schema["next", "reward"].dtype == torch.float64
    assert ds.schema["observation"].dtype == torch.float32
    rewards = np.concatenate([ep.rewards for ep in minari_root[PENDULUM].episodes])
    assert torch.equal(ds[:]["next", "reward"].squeeze(-1), torch.as_tensor(rewards))


def test_keys_rename_and_dtype_mapping(minari_root):
    ds = load_dataset(
        f"minari:{PENDULUM}",
        keys=["observation", "action", "next"],
        rename={"observation": "obs"},
        dtype={("next", "reward"): "float64"},
    )
    assert ("obs",) in ds.schema and ("observation",) not in ds.schema
    assert ("done",) not in ds.schema and ("next", "done") in ds.schema
    assert ds.schema["next", "reward"].dtype == torch.float64
    assert ds.schema["action"].dtype == torch.float32


def test_dataset_api(minari_root):
    g = torch.Generator().manual_seed(0)
    ds = load_dataset(f"minari:{PENDULUM}", batch_size=8, generator=g)
    assert ds.sample().batch_size == (8,) and ds.sample(3).batch_size == (3,)
    assert ds[0].batch_size == () and ds[[0, 5]].batch_size == (2,)
    assert ds.num_episodes == 3
    with pytest.raises(ReadOnlyError, match="read-only"):
        ds.extend(ds[:2])


def test_mixed_sample_with_online_rows_from_the_same_env(minari_root):
    rb = OfflineToOnlineReplayBuffer(
        f"minari:{PENDULUM}", online_capacity=100, batch_size=32, generator=0, source_key="source"
    )
    online = env_ted_rows(pendulum_env(), 20, seed=7)
    assert rb.extend(online).tolist() == list(range(20))
    batch = rb.sample()
    assert batch.batch_size == (32,)
    assert batch["source"].bincount().tolist() == [16, 16]
    offline_rows = load_dataset(f"minari:{PENDULUM}")[:]["observation"]
    for obs, src in zip(batch["observation"], batch["source"]):
        pool = offline_rows if src == 0 else online["observation"]
        assert (pool == obs).all(-1).any()
    assert batch["next", "reward"].dtype == torch.float32


def test_prefill_copies_every_row(minari_root):
    rb = prefill_replay_buffer(
        ReplayBuffer(storage=LazyTensorStorage(100)), f"minari:{PENDULUM}", chunk_size=7
    )
    ds = load_dataset(f"minari:{PENDULUM}")
    assert len(rb) == len(ds)
    assert torch.equal(rb[:]["observation"], ds[:]["observation"])


def test_chunks_hold_whole_episodes(minari_root, monkeypatch):
    monkeypatch.setattr(minari_loader, "CHUNK_ROWS", 5)  # every episode flushes a chunk
    chunks = []
    ds = load_dataset(f"minari:{MOUNTAINCAR}", progress=chunks.append)
    assert chunks == [len(ep.rewards) for ep in minari_root[MOUNTAINCAR].episodes]
    check_rows(ds, minari_root[MOUNTAINCAR].episodes)


# -- the cache -----------------------------------------------------------------------------------


def _conversions(caplog) -> int:
    return sum(r.getMessage().startswith("converting ") for r in caplog.records)


def test_second_load_opens_the_cache(minari_root, caplog):
    caplog.set_level(logging.INFO, logger="mixreplay")
    first = load_dataset(f"minari:{PENDULUM}")
    rows_file = first.path / "rows.bin"
    mtime = rows_file.stat().st_mtime_ns
    assert _conversions(caplog) == 1
    second = load_dataset(f"minari:{PENDULUM}")
    assert _conversions(caplog) == 1
    assert second.path == first.path and rows_file.stat().st_mtime_ns == mtime
    assert torch.equal(second[:]["observation"], first[:]["observation"])


def test_options_that_change_rows_get_their_own_cache(minari_root):
    a = load_dataset(f"minari:{PENDULUM}")
    b = load_dataset(f"minari:{PENDULUM}", dtype=None)
    c = load_dataset(f"minari:{PENDULUM}", keys=["observation"])
    assert len({a.path, b.path, c.path}) == 3
    assert a.schema["next", "reward"].dtype == torch.float32  # still the float32 copy


def test_changed_source_is_converted_again(caplog):
    caplog.set_level(logging.INFO, logger="mixreplay")
    recorded = make_pendulum(n_episodes=2)
    first = load_dataset(f"minari:{PENDULUM}")
    assert len(first) == 24
    more = record(recorded.env, 1, seed=11, first_id=2)
    import minari

    minari.load_dataset(PENDULUM).update_dataset_from_buffer(more)
    second = load_dataset(f"minari:{PENDULUM}")
    assert _conversions(caplog) == 2
    assert "changed since it was cached" in caplog.text
    check_rows(second, recorded.episodes + more)
    assert len(first) == 24  # the open dataset still reads its own mapping


def test_refresh_converts_again(minari_root, caplog):
    caplog.set_level(logging.INFO, logger="mixreplay")
    load_dataset(f"minari:{PENDULUM}")
    load_dataset(f"minari:{PENDULUM}", refresh=True)
    assert _conversions(caplog) == 2


def test_damaged_cache_is_converted_again(minari_root, caplog):
    ds = load_dataset(f"minari:{PENDULUM}")
    with open(ds.path / "rows.bin", "r+b") as f:
        f.truncate(8)
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(f"minari:{PENDULUM}")
    assert "is damaged" in caplog.text and len(again) == len(ds)


def test_cache_dir_option(minari_root, tmp_path):
    ds = load_dataset(f"minari:{PENDULUM}", cache_dir=tmp_path / "elsewhere")
    assert ds.path.is_relative_to(tmp_path / "elsewhere")


# -- download and errors -------------------------------------------------------------------------


def test_missing_dataset_names_the_root_and_the_option(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "empty"))
    with pytest.raises(
        DatasetNotFoundError,
        match=r"'test/absent-v0' not found: searched .*empty.*test/absent-v0 "
        r"in the Minari root .*empty \(set by MINARI_DATASETS_PATH.*download=True",
    ):
        load_dataset("minari:test/absent-v0")


def test_download_only_when_asked(monkeypatch):
    import minari

    calls = []

    def fake_download(dataset_id, *args, **kwargs):
        calls.append(dataset_id)
        make_pendulum(dataset_id, n_episodes=1)

    monkeypatch.setattr(minari, "download_dataset", fake_download)
    with pytest.raises(DatasetNotFoundError):
        load_dataset(f"minari:{PENDULUM}")
    assert calls == []
    ds = load_dataset(f"minari:{PENDULUM}", download=True)
    assert calls == [PENDULUM] and len(ds) == 12
    load_dataset(f"minari:{PENDULUM}", download=True)  # local now: no second download
    assert calls == [PENDULUM]


def test_failed_download_is_a_dataset_error(monkeypatch):
    import minari

    def broken(dataset_id, *args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(minari, "download_dataset", broken)
    with pytest.raises(
        DatasetError, match="Minari could not download 'test/absent-v0': no network"
    ):
        load_dataset("minari:test/absent-v0", download=True)


@pytest.mark.parametrize("bad", ["test/pendulum.v0", "no version", "a//b-v0"])
def test_malformed_id(bad):
    with pytest.raises(
        DatasetError, match=r"is not a Minari dataset ID: write it as \(namespace/\)name-vN"
    ):
        load_dataset(f"minari:{bad}")


def test_missing_minari_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)
    with pytest.raises(
        MissingDependencyError,
        match=r'needs the optional package \'minari\'.*pip install "mixreplay\[minari\]"',
    ):
        load_dataset(f"minari:{PENDULUM}")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"keys": ["obs"]},
            r"key 'obs' not found in minari:test/pendulum-v0 with keys \['observation', 'action'",
        ),
        (
            {"rename": {"reward": "r"}},
            r"cannot rename 'reward': not found in minari:test/pendulum-v0",
        ),
        (
            {"rename": {"observation": "action"}},
            r"rename maps both 'observation' and 'action' to 'action'|"
            r"rename maps both 'action' and 'observation' to 'action'",
        ),
        (
            {"rename": {"action": ("observation", "a")}},
            r"'observation' is both a leaf and the parent of",
        ),
        (
            {"dtype": {"reward": "float64"}},
            r"dtype names key 'reward', not found in minari:test/pendulum-v0",
        ),
        ({"dtype": "int64"}, r"must be a floating dtype; cast other keys with a mapping"),
        (
            {"dtype": "float33"},
            r"dtype must be a dtype such as 'float32' or torch.float32, got 'float33'",
        ),
    ],
)
def test_policy_errors(minari_root, kwargs, match):
    with pytest.raises(DatasetError, match=match):
        load_dataset(f"minari:{PENDULUM}", **kwargs)


def test_string_infos_are_rejected_with_keep_infos(monkeypatch):
    env = pendulum_env()
    eps = record(env, 1)
    eps = [dataclasses.replace(eps[0], infos={"label": np.array([b"x"] * 13)})]
    from tests.datasets.conftest import make_minari

    make_minari(PENDULUM, env, eps)
    assert len(load_dataset(f"minari:{PENDULUM}")) == 12  # dropped by default
    with pytest.raises(
        DatasetError,
        match=r"key \('next', 'info', 'label'\) holds \|S1 values, not numbers.*keep_infos",
    ):
        load_dataset(f"minari:{PENDULUM}", keep_infos=True)


def test_sampler_and_transform_are_forwarded(minari_root):
    from mixreplay import Sampler

    class FirstRows(Sampler):
        def sample(self, storage, n, generator):
            return torch.arange(n)

    seen = []

    def transform(td):
        seen.append(td.batch_size)
        return td.exclude("done")

    ds = load_dataset(f"minari:{PENDULUM}", sampler=FirstRows(), transform=transform, batch_size=4)
    batch = ds.sample()
    assert seen == [(4,)] and "done" not in batch.keys()
    assert torch.equal(batch["observation"], ds[:4]["observation"])


def test_download_without_minaris_remote_package_names_it(monkeypatch):
    # Minari downloads through huggingface_hub (minari[hf]); without it, Minari's own hint
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"Minari cannot download 'mujoco/hopper/expert-v0' without its remote's package: "
        r'.*pip install "minari\[hf\]"',
    ):
        load_dataset("minari:mujoco/hopper/expert-v0", download=True)
