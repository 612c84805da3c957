"""TorchRL's ``ndim=2`` storages: a ``[steps, width]`` grid kept as rows, read by its dims.

A collector's ``[n_envs, T]`` batch goes in with ``dim_extend=1`` (TorchRL's default for
``ndim=2``), as ``T`` steps of ``n_envs``; samplers draw over every element, and a slice
sampler finds episodes down each env's column.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    SchemaMismatchError,
    TensorDictReplayBuffer,
    TensorStorage,
)
from mixreplay.samplers import SliceSampler


def collector_batch(n_envs: int, steps: int, start: int = 0) -> TensorDict:
    """``[n_envs, steps]``: ``x`` = 100 * env + step (step counted from ``start``)."""
    env = torch.arange(n_envs).unsqueeze(1)
    t = torch.arange(start, start + steps).unsqueeze(0)
    return TensorDict({"x": env * 100 + t, "env": env.expand(n_envs, steps)}, [n_envs, steps])


@pytest.fixture(params=["memory", "memmap"])
def grid(request, tmp_path):
    def make(max_size: int) -> LazyTensorStorage:
        if request.param == "memmap":
            return LazyMemmapStorage(max_size, ndim=2, scratch_dir=tmp_path / "rows")
        return LazyTensorStorage(max_size, ndim=2)

    return make


def test_a_grid_holds_whole_steps_of_its_width_and_reads_by_its_dims(grid):
    storage = grid(10)  # width 3: ceil(10 / 3) = 4 steps, 12 elements, as TorchRL
    steps = TensorDict({"x": torch.arange(6).view(2, 3)}, [2, 3])
    slots = storage.extend(steps)
    assert slots.tolist() == list(range(6))
    assert (storage.ndim, storage.width, storage.max_size) == (2, 3, 12)
    assert len(storage) == 6 and storage.shape == torch.Size([2, 3])
    assert storage[1]["x"].tolist() == [3, 4, 5]
    assert storage[:, 2]["x"].tolist() == [2, 5]
    assert storage[1, 0]["x"].item() == 3
    assert storage.grid_index(slots)[4].tolist() == [1, 1]
    # three more steps: the ring of 4 steps overwrites its oldest, step 0
    storage.extend(TensorDict({"x": torch.arange(6, 15).view(3, 3)}, [3, 3]))
    assert len(storage) == 12 and storage.cursor == 3
    assert storage[:]["x"].tolist() == [[12, 13, 14], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_a_collector_batch_goes_in_env_major_and_comes_back_as_it_was():
    rb = ReplayBuffer(storage=LazyTensorStorage(40, ndim=2))
    assert rb.dim_extend == 1  # TorchRL's default for ndim=2
    data = collector_batch(4, 5)
    index = rb.extend(data)
    assert index.shape == (20, 2)  # TorchRL's [step, env] of every element
    assert index[:5].tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0]]
    assert len(rb) == 20 and rb.writer._cursor == 5  # steps along dim 0
    assert torch.equal(rb[:]["x"], data["x"])  # [n_envs, T] again
    assert rb[2]["x"].tolist() == data["x"][2].tolist()  # env 2's steps
    assert rb[1, 2:4]["x"].tolist() == [102, 103]
    # add() writes one step of the grid, as it is (TorchRL: dim_extend does not apply)
    step = TensorDict({"x": torch.arange(4) * 100 + 5, "env": torch.arange(4)}, [4])
    with pytest.warns(UserWarning, match="add"):  # TorchRL's warning for a batched add
        assert rb.add(step).tolist() == [[5, 0], [5, 1], [5, 2], [5, 3]]
    assert rb[3]["x"].tolist() == [300, 301, 302, 303, 304, 305]


def test_dim_extend_0_writes_the_data_as_steps():
    rb = ReplayBuffer(storage=LazyTensorStorage(12, ndim=2), dim_extend=0)
    data = collector_batch(3, 2).transpose(1, 0)  # [T, n_envs] already
    rb.extend(data)
    assert rb.storage.width == 3
    assert torch.equal(rb[:]["x"], data["x"])


def test_random_samples_index_the_grid_they_were_drawn_from():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2), generator=0)
    rb.extend(collector_batch(4, 10))
    batch, info = rb.sample(64, return_info=True)
    assert info["index"].shape == (64, 2)
    assert torch.equal(batch["index"], info["index"])
    step, env = info["index"].unbind(-1)
    assert torch.equal(batch["x"], env * 100 + step)
    assert torch.equal(batch["env"], env)
    seen = set(zip(*(c.tolist() for c in rb.sample(4000, return_info=True)[1]["index"].unbind(1))))
    assert seen == {(t, e) for t in range(10) for e in range(4)}  # every element drawn


def test_tensordict_extend_sets_each_elements_place_in_the_grid():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(30, ndim=2))
    data = collector_batch(3, 4)
    rb.extend(data)
    assert data["index"].shape == (3, 4, 2)
    assert data["index"][2, 1].tolist() == [1, 2]  # env 2's step 1: step 1, column 2


@pytest.mark.parametrize("traj_key", ["env", None])
def test_slices_run_down_one_env_column_in_time_order(traj_key):
    # Every env is one episode of the same id (traj_key) or has no end flag at all: only
    # the columns part them, so a slice that crossed envs would be seen.
    n_envs, steps = 3, 8
    data = collector_batch(n_envs, steps)
    data["episode"] = torch.zeros(n_envs, steps, dtype=torch.int64)  # the same id everywhere
    data["next", "done"] = torch.zeros(n_envs, steps, 1, dtype=torch.bool)
    sampler = SliceSampler(4, traj_key=traj_key or "episode")
    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2), sampler=sampler, generator=1)
    rb.extend(data)
    for _ in range(20):
        x = rb.sample(32)["x"].view(8, 4)
        assert (x // 100 == x[:, :1] // 100).all()  # one env per slice
        assert (x.diff(dim=1) == 1).all()  # consecutive steps
    starts = {int(v) for v in rb.sample(4000)["x"].view(-1, 4)[:, 0]}
    assert starts == {100 * e + t for e in range(n_envs) for t in range(steps - 3)}


def test_slices_of_a_wrapped_grid_start_each_column_at_its_oldest_step():
    # TorchRL's test_slice_sampler_at_capacity, with the steps checked: 12 steps into a ring
    # of 10; each column runs from step 2 (the oldest) to step 11, never across the cursor.
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20, ndim=2),
        sampler=SliceSampler(num_slices=4, end_key=("next", "done")),
        generator=2,
    )
    data = collector_batch(2, 12)
    data["next", "done"] = torch.zeros(2, 12, 1, dtype=torch.bool)
    rb.extend(data)
    seen = set()
    for _ in range(200):
        x = rb.sample(12)["x"].view(4, 3)
        assert (x.diff(dim=1) == 1).all() and (x // 100 == x[:, :1] // 100).all()
        seen.update(x[:, 0].tolist())
    assert seen == {100 * e + t for e in range(2) for t in range(2, 10)}


def test_a_grid_is_saved_and_restored_with_its_width(grid, tmp_path):
    rb = ReplayBuffer(storage=grid(10), generator=3)
    rb.extend(collector_batch(3, 5))  # width 3: 4 steps, the first overwritten
    state = rb.state_dict()
    assert state["storage"]["width"] == 3 and state["storage"]["ndim"] == 2
    fresh = ReplayBuffer(storage=grid(10), generator=3)
    fresh.load_state_dict(state)
    assert fresh.storage.max_size == 12 and fresh.writer._cursor == 1
    assert torch.equal(fresh[:]["x"], rb[:]["x"])
    assert torch.equal(fresh.sample(5)["x"], rb.sample(5)["x"])
    rb.dumps(tmp_path / "ckpt")
    again = ReplayBuffer(storage=grid(10), generator=3)
    again.loads(tmp_path / "ckpt")
    assert torch.equal(again[:]["x"], rb[:]["x"])
    with pytest.raises(CheckpointError, match="ndim=2, this one ndim=1"):
        ReplayBuffer(storage=LazyTensorStorage(12)).load_state_dict(state)
    other = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2))
    other.extend(collector_batch(2, 1))
    with pytest.raises(CheckpointError, match="width 3, this one of width 2"):
        other.load_state_dict(state)
    assert other.storage.width == 2 and len(other) == 2  # nothing changed


def test_set_writes_steps_of_dim_0():
    storage = LazyTensorStorage(30, ndim=2)  # TorchRL's set(cursor, data): cursor along dim 0
    storage.set(0, TensorDict({"x": torch.zeros(5)}, [5]), set_cursor=False)
    assert (storage.width, storage.max_size, len(storage)) == (5, 30, 0)
    storage.set(torch.tensor([0, 1]), TensorDict({"x": torch.arange(10.0).view(2, 5)}, [2, 5]))
    assert len(storage) == 10 and storage[1]["x"].tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    with pytest.raises(IndexError, match=r"0\.\.5"):
        storage.set(6, TensorDict({"x": torch.zeros(5)}, [5]))


def test_a_refused_write_fixes_no_width_and_changes_nothing():
    storage = LazyTensorStorage(10, ndim=2)
    with pytest.raises(TypeError):  # a value that cannot be packed
        storage.extend(TensorDict({"x": torch.zeros(2, 3), "s": "text"}, [2, 3]))
    assert storage.width == 0 and storage.max_size == 10 and len(storage) == 0
    storage.extend(TensorDict({"x": torch.zeros(2, 4)}, [2, 4]))
    assert storage.max_size == 12
    with pytest.raises(SchemaMismatchError, match="width 4.*got data of width 3"):
        storage.extend(TensorDict({"x": torch.zeros(2, 3)}, [2, 3]))
    with pytest.raises(ValueError, match=r"\[n, width\] data"):
        storage.extend(TensorDict({"x": torch.zeros(4)}, [4]))
    assert len(storage) == 8 and storage.write_count == 8


def test_what_a_grid_does_not_do_is_refused_naming_the_way(tmp_path):
    with pytest.raises(ValueError, match="dedup_next"):
        LazyTensorStorage(10, ndim=2, dedup_next=True)
    with pytest.raises(ValueError, match=r"LazyTensorStorage\(n, ndim=2\)"):
        TensorStorage(collector_batch(2, 3), ndim=2)
    with pytest.raises(TypeError, match="ndim=2"):
        ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), shared=True)
    with pytest.raises(ValueError, match="PrioritizedSampler does not serve an ndim=2"):
        ReplayBuffer(
            storage=LazyTensorStorage(10, ndim=2), sampler=PrioritizedSampler(alpha=0.6, beta=0.4)
        )
    with pytest.raises(ValueError, match="dim_extend=2 is not a dim"):
        ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), dim_extend=2)
    offline = ReplayBuffer(storage=LazyTensorStorage(4))
    offline.extend(
        TensorDict({"x": torch.arange(4), "env": torch.zeros(4, dtype=torch.int64)}, [4])
    )
    with pytest.raises(ValueError, match=r"mixes rows.*data.reshape\(-1\)"):
        OfflineToOnlineReplayBuffer(
            offline_dataset=offline, online_storage=LazyTensorStorage(10, ndim=2), batch_size=2
        )
