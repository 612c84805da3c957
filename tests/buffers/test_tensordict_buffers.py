"""TensorDictReplayBuffer, TensorDictPrioritizedReplayBuffer, PrioritizedReplayBuffer: TorchRL's
meaning (batches carry their slots; priorities read from the rows and from sampled batches)."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    RandomSampler,
    RateLimitTimeoutError,
    ReplayBuffer,
    SampleToInsertRatio,
    SliceSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from mixreplay.errors import CheckpointError, DataStructureError, PriorityError


def rows(n: int, start: int = 0) -> TensorDict:
    """Rows whose ``"id"`` is the order they were written in."""
    return TensorDict({"id": torch.arange(start, start + n), "x": torch.zeros(n, 2)}, [n])


def priorities(rb) -> list[float]:
    """The raw priority each held row has now (``(p ** (1 / alpha)) - eps``)."""
    sampler = rb.sampler
    p = sampler.tree.leaves[: len(rb)]
    return (p ** (1 / sampler.alpha) - sampler.eps).tolist()


def prioritized(capacity: int = 10, **kwargs) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=PrioritizedSampler(max_capacity=capacity, alpha=1.0, beta=1.0),
        generator=0,
        **kwargs,
    )


# -- sampled batches carry their slots and the sampler's entries -------------------------------


@pytest.mark.parametrize("storage", [LazyTensorStorage, ListStorage])
def test_a_sampled_batch_carries_its_slots(storage):
    rb = TensorDictReplayBuffer(storage=storage(8), batch_size=16, generator=0)
    rb.extend(rows(5))
    rb.extend(rows(5, start=5))  # slots 0, 1 now hold ids 8, 9
    batch = rb.sample()
    assert sorted(batch.keys()) == ["id", "index", "x"]
    slot_of_id = {i: i % 8 for i in range(2, 10)}
    assert batch["index"].dtype == torch.int64
    assert batch["index"].tolist() == [slot_of_id[int(i)] for i in batch["id"]]


def test_prioritized_batches_carry_priority_weight_but_not_mixreplays_weight():
    rb = prioritized(batch_size=6)
    rb.extend(rows(10))
    batch, info = rb.sample(return_info=True)
    assert sorted(batch.keys()) == ["id", "index", "priority_weight", "x"]
    assert "weight" in info.keys()  # mixreplay's name stays in the info only
    assert torch.equal(batch["priority_weight"], info["priority_weight"])


def test_slice_sampler_entries_go_into_the_batch():
    data = rows(20)
    data["episode"] = torch.arange(20) // 5
    data["next", "truncated"] = torch.zeros(20, 1, dtype=torch.bool)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SliceSampler(slice_len=5, traj_key="episode"),
        batch_size=10,
        generator=0,
    )
    rb.extend(data)
    batch = rb.sample()
    # TorchRL's slice entries: the last step of each slice is truncated
    assert batch["next", "truncated"].reshape(2, 5)[:, -1].all()
    assert not batch["next", "truncated"].reshape(2, 5)[:, :-1].any()
    assert batch["index"].tolist() == batch["id"].tolist()


@pytest.mark.parametrize("how", ["prefetch", "iter"])
def test_prefetched_and_iterated_batches_carry_their_slots(how):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=4, generator=0, prefetch=2 if how else None
    )
    rb.extend(rows(10))
    with rb:
        batch = rb.sample() if how == "prefetch" else next(iter(rb))
    assert batch["index"].tolist() == batch["id"].tolist()


def test_include_info_false_leaves_the_entries_out():
    rb = prioritized(batch_size=3)
    rb.extend(rows(10))
    assert sorted(rb.sample(include_info=False).keys()) == ["id", "x"]
    assert sorted(rb.sample(include_info=True).keys()) == ["id", "index", "priority_weight", "x"]


# -- extend: "index" into the data, priorities from it -----------------------------------------


def test_extend_sets_index_into_the_tensordict_written():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    data = rows(3)
    rb.extend(data)
    more = TensorDict(
        {"id": torch.arange(3).unsqueeze(-1).expand(3, 2), "x": torch.zeros(3, 2, 2)}, [3, 2]
    )
    rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    rb2.extend(more)
    assert data["index"].tolist() == [0, 1, 2]
    assert more["index"].tolist() == [[0, 0], [1, 1], [2, 2]]  # expanded over the row's dims


def test_a_tensordict_written_twice_stores_no_index_even_in_a_new_buffer():
    # the index set by one buffer's extend is not a field of the rows in the next buffer
    data = rows(3)
    TensorDictReplayBuffer(storage=LazyTensorStorage(4)).extend(data)
    assert "index" in data.keys()
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
    other.extend(data)
    assert sorted(other.storage[:].keys()) == ["id", "x"]
    assert "index" in other.sample().keys()  # set by the sample, as ever


def test_a_state_saves_the_batch_size_under_torchrls_key_and_restores_it():
    source = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=3)
    source.extend(rows(3))
    state = source.state_dict()
    assert state["_batch_size"] == 3
    restored = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
    restored.load_state_dict(state)
    assert restored.batch_size == 3 and restored.sample().shape == (3,)
    # a state saved without a batch size keeps the loading buffer's
    unsized = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    unsized.extend(rows(3))
    restored.load_state_dict(unsized.state_dict())
    assert restored.batch_size == 3


def test_a_saved_batch_size_that_is_not_one_is_refused_changing_nothing():
    source = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=3)
    source.extend(rows(3))
    state = source.state_dict()
    state["_batch_size"] = 0
    target = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
    with pytest.raises(CheckpointError, match=r"_batch_size.*the checkpoint is corrupt"):
        target.load_state_dict(state)
    assert target.batch_size == 2 and len(target) == 0


def test_a_state_whose_rows_lack_a_key_names_it_when_refused():
    source = ReplayBuffer(storage=LazyTensorStorage(4))
    source.extend(rows(2))
    state = source.state_dict()
    target = ReplayBuffer(storage=LazyTensorStorage(4))
    target.extend(rows(2).set("index", torch.zeros(2, dtype=torch.int64)))
    with pytest.raises(
        CheckpointError, match=r"'index': in storage \(int64\[\]\), missing in state"
    ):
        target.load_state_dict(state)


def test_add_sets_a_rows_index_and_priority():
    rb = prioritized()
    data = rows(3)
    data["td_error"] = torch.ones(3)
    rb.extend(data)
    row = TensorDict({"id": torch.tensor(3), "x": torch.zeros(2), "td_error": torch.tensor(7.0)})
    assert rb.add(row) == 3
    assert row["index"].item() == 3
    assert priorities(rb)[3] == pytest.approx(7.0)


def test_extend_with_the_priority_key_sets_the_rows_priorities():
    rb = prioritized()
    data = rows(4)
    data["td_error"] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    rb.extend(data)
    assert priorities(rb) == pytest.approx([1.0, 2.0, 3.0, 4.0])
    skipped = rows(2, start=4)
    skipped["td_error"] = torch.tensor([9.0, 9.0])
    rb.extend(skipped, update_priority=False)
    assert priorities(rb)[4:] == pytest.approx([4.0, 4.0])  # new rows: the largest so far


def test_a_priority_entry_that_does_not_fit_writes_nothing():
    rb = prioritized()
    rb.extend(rows(2))
    bad = rows(3, start=2)
    bad["td_error"] = torch.tensor([1.0, float("nan"), 1.0])
    with pytest.raises(PriorityError, match="NaN or infinite"):
        rb.extend(bad)
    wide = rows(3, start=2)
    wide["td_error"] = torch.ones(3, 2)
    with pytest.raises(PriorityError, match=r"shape \[3, 2\].*give it shape \[3\]"):
        rb.extend(wide)
    assert len(rb) == 2 and rb.write_count == 2


def test_a_priority_entry_is_ignored_by_a_sampler_without_priorities():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5), sampler=RandomSampler())
    data = rows(3)
    data["td_error"] = torch.ones(3)
    rb.extend(data)
    assert len(rb) == 3


def test_extend_refuses_what_is_not_a_tensordict():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5))
    with pytest.raises(DataStructureError, match="only accepts TensorDictBase") as err:
        rb.extend(torch.zeros(3))
    assert isinstance(err.value, ValueError)  # TorchRL's type
    assert len(rb) == 0


# -- update_tensordict_priority and the one-argument update_priority ---------------------------


def test_update_tensordict_priority_reads_index_and_priority_key():
    rb = prioritized(batch_size=4)
    rb.extend(rows(10))
    batch = rb.sample()
    batch["td_error"] = batch["id"].float() + 100
    rb.update_tensordict_priority(batch)
    got = priorities(rb)
    for slot in batch["index"].tolist():
        assert got[slot] == pytest.approx(slot + 100)


@pytest.mark.parametrize(("reduction", "expected"), [("max", 3.0), ("min", 1.0), ("mean", 2.0)])
def test_several_values_per_row_are_reduced_by_the_samplers_reduction(reduction, expected):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(4), reduction=reduction, generator=0
    )
    rb.extend(rows(4))
    batch = rb[:2]
    batch["index"] = torch.tensor([0, 1])
    batch["td_error"] = torch.tensor([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0]])
    rb.update_tensordict_priority(batch)
    assert priorities(rb)[:2] == pytest.approx([expected, expected])


def test_a_batch_without_the_priority_key_gets_the_new_rows_priority():
    rb = prioritized()
    data = rows(3)
    data["td_error"] = torch.tensor([1.0, 5.0, 1.0])
    rb.extend(data)
    batch = rb[:1].exclude("td_error")
    batch["index"] = torch.tensor([0])
    rb.update_tensordict_priority(batch)
    assert priorities(rb)[0] == pytest.approx(5.0)  # TorchRL's default_priority: the largest


def test_update_priority_with_one_sampled_tensordict_is_update_tensordict_priority():
    rb = prioritized(batch_size=4)
    rb.extend(rows(10))
    batch = rb.sample()
    batch["td_error"] = torch.full((4,), 50.0)
    rb.update_priority(batch)  # what TorchRL's sac.py, td3.py, ddpg.py ... call
    assert all(priorities(rb)[s] == pytest.approx(50.0) for s in batch["index"].tolist())
    with pytest.raises(TypeError, match=r"takes \(index, priority\), or one sampled TensorDict"):
        rb.update_priority(torch.tensor([0]))


def test_without_priorities_update_tensordict_priority_does_nothing():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, generator=0)
    rb.extend(rows(5))
    batch = rb.sample()
    batch["td_error"] = torch.ones(2)
    rb.update_tensordict_priority(batch)
    rb.update_priority(batch)


# -- the prioritized recipes and the default storage -------------------------------------------


def test_torchrls_default_storage_is_a_list_storage_of_1000():
    for rb in (
        TensorDictReplayBuffer(),
        TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5),
        PrioritizedReplayBuffer(alpha=0.7, beta=0.5),
    ):
        assert type(rb.storage) is ListStorage and rb.storage.max_size == 1000
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, batch_size=4, generator=0)
    rb.extend(rows(10))
    assert sorted(rb.sample().keys()) == ["id", "index", "priority_weight", "x"]


def test_the_prioritized_recipes_build_torchrls_sampler():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=1.1, eps=1e-3, storage=LazyTensorStorage(20), priority_key="loss"
    )
    sampler = rb.sampler
    assert isinstance(sampler, PrioritizedSampler)
    assert (sampler.alpha, sampler.beta, sampler.eps, sampler.max_size) == (0.7, 1.1, 1e-3, 20)
    assert rb.priority_key == "loss"
    prb = PrioritizedReplayBuffer(alpha=0.5, beta=0.4, storage=LazyTensorStorage(7), sync=False)
    assert prb.sampler.max_size == 7 and prb.sampler.eps == 1e-8
    with pytest.raises(TypeError, match="sampler_device cannot be passed when sampler is"):
        PrioritizedReplayBuffer(alpha=0.5, beta=0.4, sampler=RandomSampler(), sampler_device="cpu")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sampler'"):
        TensorDictPrioritizedReplayBuffer(alpha=0.5, beta=0.4, sampler=RandomSampler())


def test_prioritized_replay_of_items_with_return_info():
    rb = PrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=ListStorage(3), collate_fn=list, generator=0
    )
    index = rb.extend([1, "foo", None])
    rb.update_priority(index, torch.tensor([0.0, 1000.0, 0.0]))
    items, info = rb.sample(10, return_info=True)
    assert items == ["foo"] * 10 and info["index"].tolist() == [1] * 10


def test_an_unbounded_storage_cannot_be_prioritized():
    with pytest.raises(ValueError, match=r"unbounded size.*ListStorage\(1_000_000\)"):
        PrioritizedReplayBuffer(alpha=0.5, beta=0.5, storage=ListStorage())


def test_priority_key_must_name_an_entry():
    with pytest.raises(TypeError, match="priority_key must name an entry"):
        TensorDictReplayBuffer(priority_key=3)


# -- a plain ReplayBuffer with priorities refuses TorchRL's trainer question -------------------


def test_a_plain_prioritized_buffer_refuses_update_tensordict_priority_naming_the_fix():
    rb = ReplayBuffer(storage=LazyTensorStorage(5), sampler=PrioritizedSampler())
    with pytest.raises(TypeError, match="TensorDictPrioritizedReplayBuffer"):
        hasattr(rb, "update_tensordict_priority")
    plain = ReplayBuffer(storage=LazyTensorStorage(5))
    assert not hasattr(plain, "update_tensordict_priority")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hasattr(prioritized(), "update_tensordict_priority")


# -- with a rate limiter: a timeout part-way loses nothing ---------------------------------------


def test_a_limited_extend_timing_out_part_way_keeps_priorities_and_sets_index():
    limiter = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2, error_buffer=16)
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(20), batch_size=4, generator=0,
        rate_limiter=limiter,
    )  # fmt: skip
    td = rows(8)
    td["td_error"] = torch.arange(1.0, 9.0) * 10
    with pytest.raises(RateLimitTimeoutError) as caught:
        rb.extend(td, timeout=0)  # 4 rows fit (2 filling up, 2 in the band)
    assert caught.value.written == 4
    assert priorities(rb) == pytest.approx([10.0, 20.0, 30.0, 40.0])
    assert td["index"].tolist() == [0, 1, 2, 3, -1, -1, -1, -1]  # -1: not written
    for _ in range(8):
        rb.sample(timeout=0)
    rest = td[caught.value.written :]
    rb.extend(rest, timeout=0)  # the documented resume: the rest, with their priorities
    assert priorities(rb) == pytest.approx([10.0 * i for i in range(1, 9)])
    assert rest["index"].tolist() == [4, 5, 6, 7]


def test_update_tensordict_priority_without_index_names_the_key():
    rb = prioritized()
    rb.extend(rows(4))
    batch = rb.sample(4).exclude("index")
    batch["td_error"] = torch.ones(4)
    with pytest.raises(KeyError, match=r"update_tensordict_priority needs the batch's 'index' entry .* call update_priority\(index, priority\)"):  # fmt: skip
        rb.update_tensordict_priority(batch)


def test_an_empty_priority_key_is_refused():
    with pytest.raises(ValueError, match=r"priority_key='' holds an empty name"):
        TensorDictReplayBuffer(priority_key="")
    with pytest.raises(ValueError, match=r"priority_key=\('a', ''\) holds an empty name"):
        TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, priority_key=("a", ""))


def test_info_index_is_the_batchs_index_as_in_torchrl():
    # TorchRL sets info["index"] itself into the batch (the same tensor): kept as it is
    rb = prioritized(capacity=50)
    rb.extend(rows(50))
    batch, info = rb.sample(4, return_info=True)
    assert batch["index"] is info["index"]
