"""TorchRL's dataset classes by name (``MinariExperienceReplay``, ``D4RLExperienceReplay``),
opened by mixreplay's loaders, on files written by Minari's own writer and by h5py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    D4RLExperienceReplay,
    DatasetError,
    DatasetNotFoundError,
    MinariExperienceReplay,
    ReadOnlyError,
    SamplerWithoutReplacement,
    TensorStorage,
)
from tests.datasets.conftest import MOUNTAINCAR, PENDULUM, d4rl_arrays, write_d4rl


def test_minari_rows_equal_the_file(minari_root):
    """Every row against the arrays handed to Minari's writer, in the file's dtypes."""
    data = MinariExperienceReplay(PENDULUM, batch_size=4, load_from_local_minari=True)
    rows, row = data[:], 0
    for ep in minari_root[PENDULUM].episodes:
        n = len(ep.rewards)
        got = rows[row : row + n]
        obs = torch.as_tensor(ep.observations)
        assert torch.equal(got["observation"], obs[:-1])
        assert torch.equal(got["next", "observation"], obs[1:])
        assert torch.equal(got["action"], torch.as_tensor(ep.actions).reshape(n, -1))
        # float64, as Minari stores rewards and TorchRL keeps them
        assert got["next", "reward"].dtype == torch.float64
        rewards = torch.as_tensor(np.asarray(ep.rewards, dtype=np.float64)).reshape(n, 1)
        assert torch.equal(got["next", "reward"], rewards)
        assert torch.equal(got["next", "truncated"], torch.as_tensor(ep.truncations).reshape(n, 1))
        row += n
    assert len(data) == row
    assert rows["observation"].abs().sum() > 0


def test_minari_terminations_are_kept(minari_root):
    data = MinariExperienceReplay(MOUNTAINCAR, batch_size=4, download=False)
    eps = minari_root[MOUNTAINCAR].episodes
    terminated = torch.cat([torch.as_tensor(ep.terminations) for ep in eps]).reshape(-1, 1)
    assert terminated.any()
    assert torch.equal(data[:]["next", "terminated"], terminated)


def test_sample_carries_the_index_of_its_rows(minari_root):
    """TorchRL's TensorDictReplayBuffer: the sampled rows' slots under "index"."""
    data = MinariExperienceReplay(PENDULUM, batch_size=5, download=False)
    batch = data.sample()
    assert batch.batch_size == (5,)
    assert batch["index"].dtype == torch.int64
    assert (batch.exclude("index") == data[batch["index"]]).all()
    batch, info = data.sample(3, return_info=True)
    assert torch.equal(batch["index"], info["index"])


def test_sampler_prefetch_and_transform_as_the_programs_pass_them(minari_root):
    """cql's utils.py: SamplerWithoutReplacement(drop_last=True), prefetch=4, DoubleToFloat."""
    pytest.importorskip("torchrl")
    from torchrl.envs import DoubleToFloat

    data = MinariExperienceReplay(
        dataset_id=PENDULUM,
        split_trajs=False,
        batch_size=8,
        sampler=SamplerWithoutReplacement(drop_last=True),
        prefetch=4,
        download=True,
    )
    data.append_transform(DoubleToFloat())
    seen = torch.cat([data.sample()["index"] for _ in range(len(data) // 8)])
    assert sorted(seen.tolist()) == sorted(set(seen.tolist()))  # one epoch: no row twice
    assert data.sample()["next", "reward"].dtype == torch.float32


def test_split_trajs_gives_torchrls_padded_trajectories(minari_root):
    eps = minari_root[PENDULUM].episodes
    data = MinariExperienceReplay(PENDULUM, batch_size=2, download=False, split_trajs=True)
    longest = max(len(ep.rewards) for ep in eps)
    rows = data[:]
    assert rows.batch_size == (len(eps), longest)
    for e, ep in enumerate(eps):
        n = len(ep.rewards)
        assert rows["mask"][e].tolist() == [True] * n + [False] * (longest - n)
        assert (rows["traj_ids"][e, :n] == e).all()
        assert torch.equal(rows["observation"][e, :n], torch.as_tensor(ep.observations[:-1]))
    assert rows["next", "done"][:, -1].all()
    batch = data.sample()
    assert batch.batch_size == (2, longest)
    assert batch["index"].shape == (2, longest)  # expanded to the batch's dims, as TorchRL


def test_d4rl_rows_equal_the_file(tmp_path):
    a = d4rl_arrays()
    path = tmp_path / "x.hdf5"
    write_d4rl(path, a)
    data = D4RLExperienceReplay(
        str(path), batch_size=4, split_trajs=False, direct_download=True, use_truncated_as_done=True
    )
    rows = data[:]
    assert torch.equal(rows["observation"], torch.as_tensor(a.observations))
    assert torch.equal(rows["next", "observation"], torch.as_tensor(a.next_observations))
    assert torch.equal(rows["action"], torch.as_tensor(a.actions))
    assert rows["next", "reward"].dtype == torch.float64  # the file's dtype
    assert torch.equal(rows["next", "reward"], torch.as_tensor(a.rewards).reshape(-1, 1))
    assert torch.equal(rows["next", "terminated"], torch.as_tensor(a.terminals).reshape(-1, 1))
    assert torch.equal(rows["next", "truncated"], torch.as_tensor(a.timeouts).reshape(-1, 1))
    assert data.sample()["index"].shape == (4,)


def test_d4rl_name_in_the_d4rl_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    write_d4rl(tmp_path / "d4rl" / "pendulum-random-v0.hdf5", d4rl_arrays())
    data = D4RLExperienceReplay("pendulum-random-v0", 4, root=tmp_path / "cache")
    assert len(data) == 20
    assert (tmp_path / "cache").is_dir()  # root: where the converted copy is kept
    with pytest.raises(DatasetNotFoundError, match="no-such-v0"):
        D4RLExperienceReplay("no-such-v0", 4, download=False)


def test_d4rl_trajectories_hold_torchrls_root_reward(tmp_path):
    """dt's Reward2GoTransform reads ("next", "reward") and TorchRL's root "reward"."""
    a = d4rl_arrays()
    write_d4rl(tmp_path / "x.hdf5", a)
    data = D4RLExperienceReplay(str(tmp_path / "x.hdf5"), 2, split_trajs=True)
    rows, starts = data[:], data.episode_starts.tolist()
    lengths = np.diff([*starts, len(a.rewards)])
    for e, (start, n) in enumerate(zip(starts, lengths)):
        earned = a.rewards[start : start + n]
        got = rows["reward"][e, :n, 0]
        assert got[0] == 0  # nothing earned before an episode's first step
        assert torch.equal(got[1:], torch.as_tensor(earned[:-1]))
        assert torch.equal(rows["next", "reward"][e, :n, 0], torch.as_tensor(earned))


def test_replacing_the_storage_as_the_decision_transformer_does(tmp_path):
    """dt's utils.py: rows = data[:]; ...; data._storage = TensorStorage(rows)."""
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    data = D4RLExperienceReplay(str(tmp_path / "x.hdf5"), 3, split_trajs=True)
    rows = data[:]
    rows.set("extra", torch.ones(rows.batch_size))
    data._storage = TensorStorage(rows)
    assert len(data) == rows.batch_size[0]
    batch = data.sample()
    assert batch["extra"].eq(1).all()
    assert (batch.exclude("index") == rows[batch["index"][:, 0]]).all()


def test_read_only_and_refused_keywords(minari_root, tmp_path):
    data = MinariExperienceReplay(PENDULUM, batch_size=4, download=False)
    with pytest.raises(ReadOnlyError, match="read-only"):
        data.extend(data[:2])
    with pytest.raises(TypeError, match="writer="):
        MinariExperienceReplay(PENDULUM, 4, download=False, writer=object())
    with pytest.raises(TypeError, match="env_kwargs|unexpected keyword"):
        D4RLExperienceReplay(str(tmp_path / "x.hdf5"), 4, frame_skip=2)
    with pytest.raises(ValueError, match="download"):
        MinariExperienceReplay(PENDULUM, 4, download="sometimes")


@pytest.mark.torchrl
def test_torchrls_minari_class_converts_a_local_dataset_to_zero_rows(minari_root, tmp_path):
    """TorchRL 0.14.1's MinariExperienceReplay (load_from_local_minari=True) on the same file:
    every row zero (it writes its memory-mapped copy with memmap_like, which copies shapes,
    not values). mixreplay's rows are the file's (test above). When this fails, TorchRL
    has fixed it: update docs/torchrl.md's differences."""
    from torchrl.data.datasets.minari_data import MinariExperienceReplay as TorchRLMinari

    ours = MinariExperienceReplay(PENDULUM, 4, download=False)[:]
    theirs = TorchRLMinari(PENDULUM, 4, root=tmp_path / "torchrl", load_from_local_minari=True)[:]
    assert ours["observation"].abs().sum() > 0
    assert theirs.batch_size == ours.batch_size
    for key in ("observation", ("next", "observation"), "action", ("next", "reward")):
        assert not theirs[key].any(), key
    assert not theirs["next", "done"].any() and ours["next", "done"].any()
    np.testing.assert_array_equal(theirs["episode"].numpy(), 0)


def test_episode_starts(minari_root):
    data = MinariExperienceReplay(PENDULUM, 4, download=False)
    lengths = [len(ep.rewards) for ep in minari_root[PENDULUM].episodes]
    assert data.episode_starts.tolist() == np.cumsum([0, *lengths[:-1]]).tolist()
    assert isinstance(data[:2], TensorDict)


def test_download_and_dataset_id_take_torchrls_types_only(tmp_path):
    path = tmp_path / "x.hdf5"
    write_d4rl(path, d4rl_arrays())
    for bad in (1, 0, None, "FORCE"):
        with pytest.raises((TypeError, ValueError), match=r"download must be"):
            D4RLExperienceReplay(str(path), 4, download=bad)
    with pytest.raises(TypeError, match=r"download must be True, False or 'force', got int 1"):
        MinariExperienceReplay("mujoco/hopper/expert-v0", 4, download=1)
    for bad in (None, 123):
        with pytest.raises(TypeError, match=r"dataset_id must be a dataset name or an HDF5 file path \(str or os.PathLike\)"):  # fmt: skip
            D4RLExperienceReplay(bad, 4, download=False)
        with pytest.raises(TypeError, match=r"dataset_id must be a str"):
            MinariExperienceReplay(bad, 4, download=False)
    assert len(D4RLExperienceReplay(path, 4, root=tmp_path / "c")) == 20  # a Path is a path


def test_a_dataset_id_too_long_for_a_file_name_is_a_dataset_error(tmp_path, monkeypatch):
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    with pytest.raises(DatasetError, match=r"\(5,000 characters\) names no dataset: .*longer than a file name may be"):  # fmt: skip
        D4RLExperienceReplay("x" * 5000, 4, download=False)
