"""``d4rl:`` loader on D4RL-layout HDF5 files written with h5py."""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import (
    DatasetError,
    DatasetNotFoundError,
    MissingDependencyError,
    OfflineToOnlineReplayBuffer,
    load_dataset,
)
from mixreplay.datasets import d4rl as d4rl_loader
from mixreplay.datasets.d4rl import d4rl_file_names, resolve_d4rl
from tests.datasets.conftest import d4rl_arrays, write_d4rl


def qlearning_reference(a):
    """D4RL's ``qlearning_dataset`` loop (timeouts given), written out as the spec: rows kept, in order."""
    kept = []
    for i in range(a.observations.shape[0] - 1):
        if a.timeouts[i]:
            continue  # the last step of a timed-out episode is skipped
        kept.append(i)
    return kept


@pytest.fixture
def d4rl_dir():
    return d4rl_loader.d4rl_dataset_dir()


def test_stored_next_observations_keep_every_row(tmp_path):
    a = d4rl_arrays()
    write_d4rl(tmp_path / "x.hdf5", a)
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    td = ds[:]
    assert len(ds) == 20
    assert torch.equal(td["observation"], torch.as_tensor(a.observations))
    assert torch.equal(td["next", "observation"], torch.as_tensor(a.next_observations))
    assert torch.equal(td["action"], torch.as_tensor(a.actions))
    assert torch.equal(
        td["next", "reward"], torch.as_tensor(a.rewards, dtype=torch.float32).unsqueeze(-1)
    )
    assert torch.equal(td["next", "terminated"].squeeze(-1), torch.as_tensor(a.terminals))
    assert torch.equal(td["next", "truncated"].squeeze(-1), torch.as_tensor(a.timeouts))
    assert torch.equal(td["next", "done"].squeeze(-1), torch.as_tensor(a.terminals | a.timeouts))
    assert not td["done"].any() and not td["terminated"].any() and not td["truncated"].any()
    assert ds.episode_starts.tolist() == [0, 4, 9, 12, 16]
    assert (
        ds.metadata["info"]["next_observation"] == "stored"
        and ds.metadata["info"]["dropped_rows"] == 0
    )
    # a timeout is a truncation, never a termination
    assert not (td["next", "terminated"] & torch.as_tensor(a.timeouts).unsqueeze(-1)).any()
    assert ds.schema["next", "reward"].dtype == torch.float32


@pytest.mark.parametrize("chunk_rows", [d4rl_loader.CHUNK_ROWS, 3, 4])
def test_derived_next_observations_follow_qlearning_dataset(tmp_path, monkeypatch, chunk_rows):
    monkeypatch.setattr(d4rl_loader, "CHUNK_ROWS", chunk_rows)  # chunk edges inside episodes
    a = d4rl_arrays(with_next=False)
    write_d4rl(tmp_path / "x.hdf5", a)
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    td = ds[:]
    ref = qlearning_reference(a)
    # every row qlearning_dataset keeps is kept, plus the terminal last row of the file if any;
    # the file's last row here ends no episode, so it is dropped as qlearning_dataset drops it
    assert len(ds) == len(ref) == 17
    src = torch.as_tensor(a.observations)
    assert torch.equal(td["observation"], src[ref])
    assert torch.equal(td["action"], torch.as_tensor(a.actions)[ref])
    assert torch.equal(
        td["next", "reward"].squeeze(-1), torch.as_tensor(a.rewards, dtype=torch.float32)[ref]
    )
    terminal = torch.as_tensor(a.terminals)[ref]
    assert torch.equal(td["next", "terminated"].squeeze(-1), terminal)
    # next observation: the next row of the same episode; zeros after a terminal step
    nxt = src[[i + 1 for i in ref]]
    nxt[terminal] = 0
    assert torch.equal(td["next", "observation"], nxt)
    same_episode = td["next", "observation"][~terminal][:, 0] == td["observation"][~terminal][:, 0]
    assert same_episode.all()
    # the rows before the dropped ones end their stored trajectory as truncations
    ends = td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    assert ends == [3, 7, 10, 13, 16]
    assert td["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist() == [7, 13, 16]
    assert ds.episode_starts.tolist() == [0, 4, 8, 11, 14]
    assert ds.metadata["info"]["dropped_rows"] == 3


def test_terminal_last_row_is_kept_with_zero_next_observation(tmp_path):
    a = d4rl_arrays(with_next=False)
    a.terminals[-1] = True
    write_d4rl(tmp_path / "x.hdf5", a)
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    assert len(ds) == 18
    last = ds[len(ds) - 1]
    assert bool(last["next", "terminated"]) and not last["next", "observation"].any()
    torch.testing.assert_close(last["observation"], torch.as_tensor(a.observations[-1]))


def test_keep_infos_at_the_root(tmp_path):
    a = d4rl_arrays()
    write_d4rl(tmp_path / "x.hdf5", a)
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", keep_infos=True)
    assert ds.schema["info", "qpos"].dtype == torch.float32 and ds.schema["info", "qpos"].shape == (
        4,
    )
    torch.testing.assert_close(ds[:]["info", "qpos"], torch.as_tensor(a.qpos, dtype=torch.float32))
    assert ("info", "qpos") not in load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}").schema
    ds64 = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", keep_infos=True, dtype=None)
    assert ds64.schema["info", "qpos"].dtype == torch.float64
    assert torch.equal(ds64[:]["info", "qpos"], torch.as_tensor(a.qpos))


def test_mixes_with_online_rows(tmp_path, make_rows):
    a = d4rl_arrays()
    write_d4rl(tmp_path / "x.hdf5", a)
    rb = OfflineToOnlineReplayBuffer(
        f"d4rl:{tmp_path / 'x.hdf5'}",
        online_capacity=50,
        batch_size=10,
        generator=0,
        source_key="source",
    )
    online = make_rows(5, obs_dim=3, act_dim=2)
    rb.extend(online)
    assert rb.sample()["source"].bincount().tolist() == [5, 5]


# -- names and paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, files",
    [
        ("hopper-medium-v2", ["hopper-medium-v2.hdf5", "hopper_medium-v2.hdf5"]),
        (
            "walker2d-medium-replay-v2",
            ["walker2d-medium-replay-v2.hdf5", "walker2d_medium_replay-v2.hdf5"],
        ),
        (
            "halfcheetah-full-replay-v1",
            ["halfcheetah-full-replay-v1.hdf5", "halfcheetah_full_replay-v1.hdf5"],
        ),
        ("hopper-medium-expert-v0", ["hopper-medium-expert-v0.hdf5", "hopper_medium_expert.hdf5"]),
        ("walker2d-medium-replay-v0", ["walker2d-medium-replay-v0.hdf5", "walker_mixed.hdf5"]),
        ("ant-medium-replay-v0", ["ant-medium-replay-v0.hdf5", "ant_mixed.hdf5"]),
        (
            "antmaze-umaze-v2",
            [
                "antmaze-umaze-v2.hdf5",
                "Ant_maze_u-maze_noisy_multistart_False_multigoal_False_sparse_fixed.hdf5",
            ],
        ),
        # D4RL saves pen-human-v0 and pen-human-v1 under one file name: only <name>.hdf5 is ours
        ("pen-human-v0", ["pen-human-v0.hdf5"]),
        ("not-a-d4rl-name", ["not-a-d4rl-name.hdf5"]),
    ],
)
def test_file_names_d4rl_downloads_to(name, files):
    assert d4rl_file_names(name) == files


def test_name_resolution_order(d4rl_dir):
    write_d4rl(d4rl_dir / "hopper_medium-v2.hdf5", d4rl_arrays())
    assert resolve_d4rl("hopper-medium-v2") == (d4rl_dir / "hopper_medium-v2.hdf5").resolve()
    write_d4rl(d4rl_dir / "hopper-medium-v2.hdf5", d4rl_arrays(with_next=False))
    assert resolve_d4rl("hopper-medium-v2") == (d4rl_dir / "hopper-medium-v2.hdf5").resolve()
    assert len(load_dataset("d4rl:hopper-medium-v2")) == 17


def test_d4rl_dataset_dir_default(monkeypatch):
    monkeypatch.delenv("D4RL_DATASET_DIR")
    assert d4rl_loader.d4rl_dataset_dir() == d4rl_loader.Path("~/.d4rl/datasets").expanduser()


def test_relative_path_and_home(tmp_path, monkeypatch):
    write_d4rl(tmp_path / "data" / "x.h5", d4rl_arrays())
    monkeypatch.chdir(tmp_path)
    assert len(load_dataset("d4rl:data/x.h5")) == 20
    monkeypatch.setenv("HOME", str(tmp_path))
    assert len(load_dataset("d4rl:~/data/x.h5")) == 20


# -- the cache -----------------------------------------------------------------------------------


def test_cache_hit_and_invalidation(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mixreplay")
    path = tmp_path / "x.hdf5"
    write_d4rl(path, d4rl_arrays())
    first = load_dataset(f"d4rl:{path}")
    load_dataset(f"d4rl:{path}")
    converted = [r for r in caplog.records if r.getMessage().startswith("converting ")]
    assert len(converted) == 1
    a = d4rl_arrays(seed=1)
    write_d4rl(path, a)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a rewrite within the same tick
    second = load_dataset(f"d4rl:{path}")
    assert second.path == first.path
    assert torch.equal(second[:]["action"], torch.as_tensor(a.actions))
    assert "changed since it was cached" in caplog.text


def test_cache_hit_needs_no_h5py(tmp_path, monkeypatch):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    monkeypatch.setitem(sys.modules, "h5py", None)
    assert len(load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")) == 20


# -- errors --------------------------------------------------------------------------------------


def test_missing_h5py(tmp_path, monkeypatch):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(
        MissingDependencyError,
        match=r'needs the optional package \'h5py\'.*pip install "mixreplay\[d4rl\]"',
    ):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")


def test_unknown_name_lists_what_was_tried(d4rl_dir):
    with pytest.raises(
        DatasetNotFoundError,
        match=r"D4RL dataset 'hopper-medium-v2' not found in .*d4rl \(D4RL_DATASET_DIR.*"
        r"looked for hopper-medium-v2.hdf5, hopper_medium-v2.hdf5. Pass download=True",
    ):
        load_dataset("d4rl:hopper-medium-v2", download=False)
    with pytest.raises(
        DatasetNotFoundError,
        match=r"D4RL dataset 'hopper-v9' not found .*looked for hopper-v9.hdf5. D4RL publishes "
        r"no dataset by that name",
    ):
        load_dataset("d4rl:hopper-v9")  # nothing to download


def test_missing_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"no D4RL file at .*nope.hdf5"):
        load_dataset(f"d4rl:{tmp_path / 'nope.hdf5'}")


def test_missing_key(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays(), drop=("timeouts",))
    with pytest.raises(
        DatasetError,
        match=r"is not in the D4RL layout: key 'timeouts' not found in a file with keys \[",
    ):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")


def test_length_mismatch(tmp_path):
    a = d4rl_arrays()
    a.actions = a.actions[:-1]
    write_d4rl(tmp_path / "x.hdf5", a)
    with pytest.raises(
        DatasetError, match=r"one entry per row \(20 observations\), but actions has 19"
    ):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")


def test_not_hdf5(tmp_path):
    (tmp_path / "x.hdf5").write_text("not hdf5")
    with pytest.raises(DatasetError, match=r"x.hdf5 is not a readable HDF5 file"):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")


def test_empty_id():
    with pytest.raises(DatasetError, match="a d4rl: ID needs a dataset name or a file path"):
        resolve_d4rl("")


# -- the row plan, as a property -----------------------------------------------------------------

flags = st.lists(st.sampled_from(["", "terminal", "timeout", "both"]), min_size=1, max_size=40).map(
    lambda xs: (
        np.array([x in ("terminal", "both") for x in xs]),
        np.array([x in ("timeout", "both") for x in xs]),
    )
)


@settings(max_examples=200, deadline=None)
@given(flags)
def test_plan_matches_qlearning_dataset_and_episode_starts(tf):
    terminals, timeouts = tf
    n = terminals.shape[0]
    plan = d4rl_loader._Plan(terminals, timeouts, derive_next=True)
    # the rows qlearning_dataset keeps (it loops to N - 1 and skips timeouts), plus a terminal last row
    expected = [i for i in range(n - 1) if not timeouts[i] or terminals[i]]
    if terminals[-1]:
        expected.append(n - 1)
    assert np.flatnonzero(plan.keep).tolist() == expected
    done = (plan.terminated | plan.truncated)[plan.keep]
    ends = set(np.flatnonzero(done).tolist())
    # every stored trajectory ends with done, and only there
    assert ends == {s - 1 for s in plan.starts[1:]} | ({plan.rows - 1} if plan.rows else set())
    assert not (plan.truncated & ~timeouts & ~plan.keep).any()

    stored = d4rl_loader._Plan(terminals, timeouts, derive_next=False)
    assert stored.rows == n and stored.dropped == 0
    raw_ends = set(np.flatnonzero(terminals | timeouts).tolist())
    assert {s - 1 for s in stored.starts[1:]} == raw_ends - {n - 1}


@pytest.mark.parametrize("name", ["x" * 5000, "/data/" + "y" * 300 + ".hdf5"])
def test_an_id_with_a_name_longer_than_a_file_name_is_a_dataset_error(name, tmp_path, monkeypatch):
    """It used to surface as a bare OSError (File name too long) from the first look."""
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    from mixreplay import load_dataset

    with pytest.raises(DatasetError, match=r"names no dataset: a name in it is \d[\d,]* bytes"):
        load_dataset("d4rl:" + name)
    with pytest.raises(DatasetError, match="longer than a file name may be"):
        resolve_d4rl(name)
