"""ListStorage and LazyStackStorage: items of any type, written in ring order, collated when read."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from mixreplay import (
    LazyStackStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
)
from mixreplay.errors import CheckpointError, DataStructureError


def test_python_objects_in_ring_order():
    storage = ListStorage(3)
    rb = ReplayBuffer(storage=storage, collate_fn=list, generator=0)
    assert rb.extend(["a", 0, None]).tolist() == [0, 1, 2]
    assert rb.extend([{"k": 1}, 2.5]).tolist() == [0, 1]  # the oldest two are overwritten
    assert [rb[i] for i in range(3)] == [{"k": 1}, 2.5, None]
    assert (len(rb), storage.cursor, rb.write_count) == (3, 2, 5)
    assert rb.add("z") == 2 and rb[2] == "z" and rb[-1] == "z"
    assert isinstance(rb.sample(9), list)  # the items drawn (collate_fn=list)
    assert set(map(repr, rb.sample(50))) == {"{'k': 1}", "2.5", "'z'"}


def test_a_write_larger_than_the_ring_keeps_the_last_items():
    rb = ReplayBuffer(storage=ListStorage(3))
    assert rb.extend(torch.arange(5)).tolist() == [0, 1, 2, 0, 1]
    assert rb[:].tolist() == [3, 4, 2]


def test_the_default_collate_stacks_tensors_and_tensordicts():
    rb = ReplayBuffer(storage=ListStorage(10), generator=0)
    rb.extend([torch.zeros(2), torch.ones(2)])
    assert rb.sample(3).shape == (3, 2)
    assert rb[0:2].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    tds = ReplayBuffer(storage=ListStorage(10), generator=0)
    tds.extend(TensorDict({"a": torch.arange(4)}, [4]))
    batch = tds.sample(5)
    assert batch.batch_size == (5,) and batch["a"].shape == (5,)
    pytrees = ReplayBuffer(storage=ListStorage(10), generator=0)
    pytrees.extend([{"a": torch.zeros(2)}, {"a": torch.ones(2)}])
    assert pytrees.sample(3)["a"].shape == (3, 2)


def test_the_default_collate_refuses_other_items_naming_collate_fn():
    rb = ReplayBuffer(storage=ListStorage(10), generator=0)
    rb.extend(range(4))
    with pytest.raises(DataStructureError, match="pass collate_fn=list") as err:
        rb.sample(2)
    assert isinstance(err.value, TypeError)  # TorchRL's type for the same call
    assert rb[1] == 1  # one item is never collated


def test_a_written_batch_is_copied_once():
    rb = ReplayBuffer(storage=ListStorage(10))
    data = TensorDict({"a": torch.zeros(3)}, [3])
    tensor = torch.zeros(3, 2)
    rb.extend(data)
    rb.extend(tensor)
    data["a"] += 1
    tensor += 1
    assert rb[0]["a"].item() == 0 and rb[3].tolist() == [0.0, 0.0]


def test_extend_refuses_what_has_no_items_to_split():
    rb = ReplayBuffer(storage=ListStorage(10))
    with pytest.raises(DataStructureError, match="wrap the items in a list"):
        rb.extend({"a": torch.zeros(3)})
    with pytest.raises(DataStructureError, match="use add"):
        rb.extend(torch.tensor(3.0))
    with pytest.raises(ValueError, match="got no item"):
        rb.extend([])
    assert len(rb) == 0


def test_set_follows_torchrls_rules():
    storage = ListStorage(10)
    storage.set(0, "a")
    storage.set([1, 2], ["b", "c"])
    assert storage.get(1) == "b" and storage.get([0, 2]) == ["a", "c"]
    with pytest.raises(RuntimeError, match="more than one item away"):
        storage.set([3, 3 + 2], ["x", "y"])  # slot 5 would leave a hole
    with pytest.raises(RuntimeError, match="maximum capacity is 10"):
        storage.set(10, "x")
    assert len(storage) == 3 and storage.write_count == 3  # the refused sets changed nothing
    storage.set(3, "d", set_cursor=False)
    assert storage.write_count == 3 and storage.get(3) == "d"


def test_a_prioritized_sampler_over_items():
    rb = ReplayBuffer(
        storage=ListStorage(3),
        sampler=PrioritizedSampler(max_capacity=3, alpha=0.8, beta=1.1),
        collate_fn=list,
        generator=0,
    )
    index = rb.extend([1, "foo", None])
    rb.update_priority(index, torch.tensor([0, 1_000, 0.1]))
    sample, info = rb.sample(10, return_info=True)
    assert sample == ["foo"] * 10 and info["index"].tolist() == [1] * 10


def test_epochs_over_items():
    rb = ReplayBuffer(
        storage=ListStorage(10), sampler=SamplerWithoutReplacement(), batch_size=4, generator=0
    )
    rb.extend(torch.arange(10))
    seen = torch.cat(list(rb)).tolist()
    assert sorted(seen) == list(range(10))


def test_a_slice_sampler_refuses_items_as_torchrls_does():
    with pytest.raises(DataStructureError, match="Could not get a tensordict out of the storage"):
        ReplayBuffer(storage=ListStorage(12), sampler=SliceSampler(slice_len=4))


def test_lazy_stack_storage_keeps_ragged_items():
    rb = ReplayBuffer(storage=LazyStackStorage(100), generator=0)
    rb.add(TensorDict(a=torch.zeros(3), b=torch.ones(2)))
    rb.add(TensorDict(a=torch.zeros(5), b=torch.ones(2)))
    batch = rb.sample(4)
    assert isinstance(batch, LazyStackedTensorDict)
    assert batch["b"].shape == (4, 2)
    assert {t["a"].numel() for t in batch.tensordicts} <= {3, 5}
    assert rb[1]["a"].shape == (5,)
    assert isinstance(rb[0:2], LazyStackedTensorDict)
    last = ReplayBuffer(storage=LazyStackStorage(10, stack_dim=-1), generator=0)
    last.extend(TensorDict({"a": torch.zeros(2, 3)}, [2, 3]))
    assert last.sample(4).batch_size == (3, 4)


def test_state_round_trips_tensors_tensordicts_and_json(tmp_path):
    def make():
        return ReplayBuffer(storage=ListStorage(8), collate_fn=list, generator=0)

    rb = make()
    rb.extend(["a", None, 3, 2.5, [1, {"k": "v"}], torch.arange(3)])
    with pytest.warns(UserWarning, match=r"Using `add\(\)` with a TensorDict that has batch_size"):
        rb.add(TensorDict({"x": torch.ones(2), ("n", "y"): torch.zeros(2, 1)}, [2]))
        rb.add(LazyStackedTensorDict(TensorDict(a=torch.zeros(2)), TensorDict(a=torch.zeros(3))))
    rb.dumps(tmp_path / "ckpt")
    twin = make()
    twin.loads(tmp_path / "ckpt")
    assert [twin[i] for i in range(5)] == ["a", None, 3, 2.5, [1, {"k": "v"}]]
    assert twin[5].tolist() == [0, 1, 2]
    assert (twin[6] == rb[6]).all() and twin[6]["n", "y"].shape == (2, 1)
    assert [t["a"].numel() for t in twin[7].tensordicts] == [2, 3]
    assert torch.equal(
        twin.sample(5, return_info=True)[1]["index"], rb.sample(5, return_info=True)[1]["index"]
    )  # the same draws from here on
    assert (twin.write_count, twin.storage.cursor) == (8, 0)


def test_an_item_a_checkpoint_cannot_hold_refuses_the_save_naming_its_slot(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(8), collate_fn=list)
    rb.extend(["a", object()])
    with pytest.raises(CheckpointError, match="slot 1, object"):
        rb.dumps(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


def test_a_list_storage_is_not_shared_with_a_spawned_process():
    storage = ListStorage(4)
    storage.extend(["a"])
    process = multiprocessing.get_context("spawn").Process(target=print, args=(storage,))
    with pytest.raises(RuntimeError, match="Cannot share a storage of type ListStorage"):
        process.start()


def test_device_moves_written_tensors():
    storage = ListStorage(4, device="cpu")
    storage.extend([torch.zeros(1), {"a": torch.ones(1)}, "text"])
    assert storage[0].device.type == "cpu" and storage[2] == "text"


def test_tensordict_items_are_a_source_of_a_mixing_buffer():
    from mixreplay import OfflineToOnlineReplayBuffer

    offline = ReplayBuffer(storage=ListStorage(10))
    offline.extend(TensorDict({"a": torch.zeros(10)}, [10]))
    rb = OfflineToOnlineReplayBuffer(
        offline, online_storage=ListStorage(10), batch_size=4, generator=0
    )
    rb.extend(TensorDict({"a": torch.ones(3)}, [3]))
    assert rb.sample()["a"].tolist() == [0.0, 0.0, 1.0, 1.0]
