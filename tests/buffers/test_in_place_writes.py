"""In-place writes into stored rows (TorchRL's ``rb[index] = ...``, ``write_all``, ``set_at_``,
``set_``, ``update_``): the rows read back are exactly the ones written, nothing else moves
(length, cursor, write count, priorities), what samplers derive from the rows follows, a
prefetching buffer hands out what a buffer without prefetching does, refusals change nothing,
and a concurrent writer never tears a row.
"""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReadOnlyError,
    ReplayBuffer,
    SchemaMismatchError,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

WATCHDOG_S = 60  # far beyond what the threads' work takes, even on a loaded machine


def id_rows(ids: torch.Tensor) -> TensorDict:
    """Rows whose every leaf encodes the row's id: a torn row has leaves of two ids."""
    f = ids.to(torch.float64).unsqueeze(-1)
    return TensorDict(
        {"id": ids.clone(), "obs": f.expand(-1, 5).clone(), "next": {"obs": (f + 0.5).clone()}},
        [ids.numel()],
    )


def check_whole(batch: TensorDict) -> None:
    f = batch["id"].to(torch.float64).unsqueeze(-1)
    assert torch.equal(batch["obs"], f.expand_as(batch["obs"])), "a torn row"
    assert torch.equal(batch["next", "obs"], f + 0.5), "a torn row"


def check_slots(ids: torch.Tensor, slots: torch.Tensor) -> None:
    """Each row in the slot its id says (extend's ids: ``id % 64``; rewritten ones:
    ``-(1 + slot + 64 k)``)."""
    said = torch.where(ids >= 0, ids % 64, (-ids - 1) % 64)
    assert torch.equal(said, slots), "a row read from another slot than the one drawn"


def storages(tmp_path):
    return {
        "memory": LazyTensorStorage(40),
        "memmap": LazyMemmapStorage(40, scratch_dir=tmp_path),
        "items": ListStorage(40),
    }


def counters(rb: ReplayBuffer) -> tuple[int, int, int]:
    return len(rb), rb.writer.cursor, rb.write_count


def stored(rb: ReplayBuffer) -> dict:
    """The rows held, as plain tensors (a copy)."""
    rows = rb[:]
    return {k: v.clone() for k, v in rows.items(include_nested=True, leaves_only=True)}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "memmap", "items"])
@pytest.mark.parametrize(
    "index",
    [3, -1, slice(2, 9, 3), [0, 5, 7], torch.tensor([11, 1]), torch.arange(40) % 4 == 1],
    ids=["int", "negative", "slice", "list", "tensor", "mask"],
)
def test_rows_written_in_place_read_back_exactly_and_nothing_else_moves(kind, index, tmp_path):
    rb = ReplayBuffer(storage=storages(tmp_path)[kind], generator=0)
    rb.extend(id_rows(torch.arange(50)))  # wraps: slots 0..9 hold ids 40..49
    before, expected = counters(rb), rb[:]
    ids = torch.arange(30) + 1000
    new = id_rows(ids[expected["id"][index].reshape(-1) % 30])
    if isinstance(index, int):
        new = new[0]
    rb[index] = new
    expected[index] = new
    assert torch.equal(rb[:]["id"], expected["id"]), "the rows read back differ"
    check_whole(rb[:])
    assert counters(rb) == before, "length, cursor or write count moved"


def test_a_storage_of_items_takes_any_item_in_place():
    rb = ReplayBuffer(storage=ListStorage(10), collate_fn=list)
    rb.extend(["a", "b", "c"])
    rb[1] = {"any": "object"}
    rb[0:1] = ["z"]
    assert rb[:] == ["z", {"any": "object"}, "c"]
    assert counters(rb) == (3, 3, 3)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 19), min_size=1, max_size=30),
    st.integers(0, 10_000),
)
def test_an_in_place_write_is_the_writes_of_its_rows_one_by_one_in_order(slots, seed):
    """The invariant: ``rb[index] = rows`` leaves the storage as writing row ``i`` into slot
    ``index[i]`` one after the other would (a slot named twice keeps its last row); counters
    stay, and the write counts as one in-place write."""
    rb = ReplayBuffer(storage=LazyTensorStorage(20))
    rb.extend(id_rows(torch.arange(20)))
    before = counters(rb)
    revision, rewrites = rb.storage.revision, rb.storage.rewrites
    new = id_rows(
        torch.randint(0, 10**6, (len(slots),), generator=torch.Generator().manual_seed(seed))
    )
    expected = rb[:]["id"].clone()
    for i, slot in enumerate(slots):
        expected[slot] = new["id"][i]
    rb[torch.tensor(slots)] = new
    assert torch.equal(rb[:]["id"], expected)
    check_whole(rb[:])
    assert counters(rb) == before
    assert (rb.storage.revision, rb.storage.rewrites) == (revision + 1, rewrites + 1)


def test_some_keys_are_written_and_the_others_keep_their_values():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"a": torch.zeros(6), "b": torch.ones(6, 2)}, [6]))
    rb[2:4] = TensorDict({"a": torch.tensor([5.0, 6.0])}, [2])
    assert rb[:]["a"].tolist() == [0, 0, 5, 6, 0, 0]
    assert bool((rb[:]["b"] == 1).all())


def test_a_new_key_is_added_to_every_row_zero_where_not_written():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"a": torch.arange(6)}, [6]))
    rb[[1, 4]] = TensorDict({"v": torch.tensor([[1.5, 2.0], [3.0, 4.0]])}, [2])
    assert rb[:]["v"].tolist() == [[0, 0], [1.5, 2], [0, 0], [0, 0], [3, 4], [0, 0]]
    assert rb[:]["a"].tolist() == list(range(6))
    rb.extend(TensorDict({"a": torch.tensor([9]), "v": torch.ones(1, 2)}, [1]))  # the new layout
    twin = ReplayBuffer(storage=LazyTensorStorage(10))
    twin.load_state_dict(rb.state_dict())
    assert torch.equal(twin[:]["v"], rb[:]["v"])


def test_the_write_side_transforms_run_as_on_extend():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(lambda td: td.apply(lambda x: x * 10), invert=True)
    rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
    rb[1] = TensorDict({"a": torch.tensor(7)}, [])
    assert rb[:]["a"].tolist() == [0, 70, 20, 30]


def test_a_grid_is_written_by_the_dims_of_the_data_as_extended_with_broadcasting():
    rb = ReplayBuffer(storage=LazyTensorStorage(40, ndim=2))  # dim_extend=1: [envs, steps]
    data = TensorDict({"a": torch.arange(20).view(2, 10)}, [2, 10])
    rb.extend(data)
    rb[0] = TensorDict({"a": torch.arange(10) + 50}, [10])  # env 0, as rb[0] reads it
    rb[1:2] = TensorDict({"a": torch.arange(10).view(1, 10) + 70}, [1, 10])
    rb[1, 2:4] = TensorDict({"a": torch.tensor([-1, -2])}, [2])
    rb[:, 8] = TensorDict({"a": torch.tensor(-9)}, [])  # broadcast over both envs
    data["a"][0] = torch.arange(10) + 50
    data["a"][1:2] = torch.arange(10).view(1, 10) + 70
    data["a"][1, 2:4] = torch.tensor([-1, -2])
    data["a"][:, 8] = -9
    assert torch.equal(rb[:]["a"], data["a"])
    assert rb.writer.cursor == 10 * 2 % 40 and len(rb) == 20


def test_a_sampled_batch_is_written_back_without_its_bookkeeping():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, generator=0)
    rb.extend(TensorDict({"v": torch.zeros(10)}, [10]))
    batch = rb.sample()
    batch["v"] += batch["index"].float()
    rb[batch["index"]] = batch
    assert "index" not in rb[:].keys()
    assert rb[:]["v"][batch["index"]].tolist() == batch["index"].float().tolist()


def test_set_at_set_and_update_write_stored_keys_in_place():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict({"a": torch.zeros(5), "b": torch.zeros(5, 2)}, [5]))
    assert rb.set_at_("a", torch.tensor([1.0, 2.0]), torch.tensor([0, 3])) is rb
    assert rb[:]["a"].tolist() == [1, 0, 0, 2, 0]
    rb.set_("b", torch.tensor([7.0, 8.0]))  # broadcast over the rows held
    assert rb[:]["b"].tolist() == [[7, 8]] * 5
    rb.update_({"a": torch.arange(5.0)}, keys_to_update=["a"])
    assert rb[:]["a"].tolist() == [0, 1, 2, 3, 4]
    rb.write_all(rb.read_all_in_order(end=2).apply(lambda x: x + 100), end=2)
    assert rb[:]["a"].tolist() == [100, 101, 2, 3, 4]
    assert counters(rb) == (5, 5, 5)


# -- counters: what samplers and TorchRL read ---------------------------------------------------


def test_every_write_moves_the_revision_and_only_in_place_writes_the_rewrites():
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    s = rb.storage
    assert (s.revision, s.rewrites, s._last_cursor_index) == (0, 0, None)
    rb.extend(TensorDict({"a": torch.arange(5)}, [5]))
    assert (s.revision, s.rewrites, s._last_cursor_index) == (1, 0, 4)
    rb.add(TensorDict({"a": torch.tensor(5)}, []))
    assert (s.revision, s.rewrites, s._last_cursor_index) == (2, 0, 5)
    rb[0] = TensorDict({"a": torch.tensor(-1)}, [])
    rb.set_("a", torch.arange(6))
    assert (s.revision, s.rewrites, s._last_cursor_index) == (4, 2, 5)
    generation = s.generation
    rb.load_state_dict(rb.state_dict())
    rb.empty()
    assert (s.revision, s.rewrites, s._mutation_revision) == (6, 2, 6)
    assert s.generation == generation + 2


def test_priorities_stay_as_they_were():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), sampler=PrioritizedSampler(alpha=1.0, beta=1.0)
    )
    rb.extend(id_rows(torch.arange(10)))
    rb.update_priority(torch.arange(10), torch.arange(1.0, 11.0))
    before = rb.sampler.state_dict()["priorities"].clone()
    rb[2:5] = id_rows(torch.tensor([7, 8, 9]))
    rb.set_("id", torch.arange(10) + 100)
    rb.sample(4)  # a draw syncs the sampler with its storage
    assert torch.equal(rb.sampler.state_dict()["priorities"], before)


def test_a_slice_sampler_sees_the_new_trajectory_boundaries():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SliceSampler(slice_len=4, end_key="done"),
        generator=0,
    )
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[[9, 19]] = True
    rb.extend(TensorDict({"t": torch.arange(20), "done": done}, [20]))
    assert rb.available() == 14  # starts 0..6 and 10..16
    done[9], done[4] = False, True  # episodes 0..4, 5..19
    rb.set_("done", done)
    assert rb.available() == 2 + 12
    for _ in range(20):
        t = rb.sample(16)["t"].view(4, 4)
        assert bool(((t[:, 0] <= 4) == (t[:, -1] <= 4)).all()), "a slice crosses the new boundary"


def _episodes_buffer() -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(32),
        sampler=SliceSamplerWithoutReplacement(slice_len=2, traj_key="ep"),
        batch_size=2,  # one slice: one episode per batch
        generator=0,
    )
    rb.extend(TensorDict({"ep": torch.arange(8).repeat_interleave(4), "o": torch.zeros(32)}, [32]))
    return rb


def test_an_epoch_of_episodes_survives_an_in_place_write_that_moves_no_boundary():
    """Each episode once per epoch, though a value other than the episode ids was rewritten."""
    rb = _episodes_buffer()
    seen = [int(rb.sample()["ep"][0]) for _ in range(3)]
    rb.set_at_("o", torch.ones(2), [0, 5])
    seen += [int(rb.sample()["ep"][0]) for _ in range(5)]
    assert sorted(seen) == list(range(8))


def test_a_boundary_moved_in_place_starts_a_new_epoch_over_the_new_episodes():
    rb = _episodes_buffer()
    for _ in range(3):
        rb.sample()
    ids = torch.arange(4).repeat_interleave(8)  # four episodes of 8 rows now
    rb.set_("ep", ids)
    seen = [int(rb.sample()["ep"][0]) for _ in range(4)]
    assert sorted(seen) == list(range(4))


def test_a_prefetching_buffer_hands_out_what_a_buffer_without_prefetching_does():
    def run(prefetch: int) -> list[torch.Tensor]:
        rb = ReplayBuffer(
            storage=LazyTensorStorage(30), batch_size=8, generator=3, prefetch=prefetch
        )
        rb.extend(id_rows(torch.arange(30)))
        out = []
        for step in range(6):
            out.append(rb.sample()["id"])
            rb[torch.arange(step, 30, 6)] = id_rows(torch.arange(step, 30, 6) + 100 * (step + 1))
            out.append(rb.sample()["id"])
            rb.set_at_("id", torch.tensor([-step]), torch.tensor([step]))
        rb.close()
        return out

    plain = run(0)
    for prefetch in (1, 3):
        assert all(torch.equal(a, b) for a, b in zip(run(prefetch), plain, strict=True))


# -- refusals change nothing ------------------------------------------------------------------


def refusals():
    rows = TensorDict({"a": torch.tensor([1.0, 2.0])}, [2])
    return [
        (
            "out of range",
            lambda rb: rb.__setitem__([3, 12], rows),
            IndexError,
            "row index 12 is out of range.*extend",
        ),
        (
            "dtype",
            lambda rb: rb.__setitem__([0, 1], TensorDict({"a": torch.tensor([1, 2])}, [2])),
            SchemaMismatchError,
            "'a': stored float32.*written int64",
        ),
        (
            "shape",
            lambda rb: rb.__setitem__(slice(0, 2), TensorDict({"a": torch.ones(2, 3)}, [2])),
            SchemaMismatchError,
            r"'a'.*\(shape\)",
        ),
        ("count", lambda rb: rb.__setitem__(slice(0, 3), rows), ValueError, "does not broadcast"),
        (
            "set_at_ key",
            lambda rb: rb.set_at_("z", torch.ones(1), [0]),
            KeyError,
            "key 'z' not found",
        ),
        (
            "set_ shape",
            lambda rb: rb.set_("a", torch.ones(3)),
            SchemaMismatchError,
            "does not broadcast",
        ),
        (
            "update_ key",
            lambda rb: rb.update_(TensorDict({"a": torch.ones(10), "q": torch.ones(10)}, [10])),
            KeyError,
            "key 'q' not found",
        ),
    ]


@pytest.mark.parametrize("what, call, error, match", refusals(), ids=[r[0] for r in refusals()])
def test_a_refused_in_place_write_changes_nothing(what, call, error, match):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(12), sampler=PrioritizedSampler(alpha=1.0, beta=1.0)
    )
    rb.extend(TensorDict({"a": torch.arange(10.0), "b": torch.zeros(10, 2)}, [10]))
    before, held, counts = rb.state_dict(), stored(rb), (rb.storage.revision, rb.storage.rewrites)
    with pytest.raises(error, match=match):
        call(rb)
    assert same(stored(rb), held)
    assert (rb.storage.revision, rb.storage.rewrites) == counts
    assert torch.equal(rb.state_dict()["storage"]["rows"], before["storage"]["rows"])


def test_offline_rows_and_mixing_buffers_refuse_in_place_writes_naming_the_way():
    data = TensorDict({"a": torch.arange(8.0)}, [8])
    offline = OfflineDataset.from_tensordict(data.clone())
    fingerprint = offline.fingerprint
    with pytest.raises(ReadOnlyError, match="read-only.*online_buffer"):
        offline[0] = data[0]
    with pytest.raises(ReadOnlyError, match="read-only"):
        offline.set_("a", torch.zeros(8))
    mix = OfflineToOnlineReplayBuffer(offline, online_capacity=10, batch_size=4)
    mix.extend(data[:4].clone())
    with pytest.raises(TypeError, match=r"rb.online_buffer\[index\] = \.\.\."):
        mix[0] = data[0]
    for name, call in [
        ("set_at_", lambda: mix.set_at_("a", torch.zeros(1), [0])),
        ("set_", lambda: mix.set_("a", torch.zeros(4))),
        ("update_", lambda: mix.update_(data[:4])),
        ("write_all", lambda: mix.write_all(data[:4])),
    ]:
        with pytest.raises(
            TypeError, match=rf"{name}: a mixing buffer holds no rows.*online_buffer"
        ):
            call()
    mix.online_buffer[0] = data[5]  # the way named: rows rewritten where they live
    assert mix.online_buffer[:]["a"].tolist() == [5, 1, 2, 3]
    # the mixing buffer draws the online rows by their packed layout: no key added there
    with pytest.raises(SchemaMismatchError, match="adds the key.*'new'.*mixing buffer"):
        mix.online_buffer[1] = TensorDict({"new": torch.tensor(1.0)}, [])
    assert offline.fingerprint == fingerprint
    assert set(mix.online_buffer[:].keys()) == {"a"}


def test_a_dedup_ring_refuses_in_place_writes():
    rb = ReplayBuffer(storage=LazyTensorStorage(10, dedup_next=True))
    rb.extend(TensorDict({"o": torch.arange(4.0), "next": {"o": torch.arange(1.0, 5.0)}}, [4]))
    with pytest.raises(TypeError, match="dedup_next=True.*build the storage without dedup_next"):
        rb[0] = rb[1]
    assert rb[:]["o"].tolist() == [0, 1, 2, 3]


# -- threads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("new_key", [False, True], ids=["same-keys", "adding-a-key"])
def test_a_writer_thread_and_an_in_place_writer_never_tear_a_row(new_key, eager_thread_switches):
    rb = ReplayBuffer(storage=LazyTensorStorage(64), generator=0)
    rb.extend(id_rows(torch.arange(64)))
    errors: list[BaseException] = []

    def extend() -> None:
        try:
            for i in range(64, 3000, 7):
                rows = id_rows(torch.arange(i, i + 7))
                if "extra" in rb.storage.schema:  # the other thread added it meanwhile
                    rows["extra"] = torch.zeros(7)
                try:
                    rb.extend(rows)
                except SchemaMismatchError:  # added between the look and the write
                    rows["extra"] = torch.zeros(7)
                    rb.extend(rows)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    def rewrite() -> None:
        g = torch.Generator().manual_seed(1)
        try:
            for i in range(400):
                slots = torch.randint(0, 64, (5,), generator=g)
                # an id that says its slot: -(1 + slot + 64 k), as extend's say theirs (id % 64)
                rows = id_rows(-1 - slots - 64 * i)
                if new_key and i == 200:
                    rows["extra"] = torch.ones(5)
                rb[slots] = rows
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=extend), threading.Thread(target=rewrite)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            batch, info = rb.sample(5, return_info=True)  # the rewriter's gather size too
            check_whole(batch)
            check_slots(batch["id"], info["index"])
            check_whole(rb[:])
    finally:
        for t in threads:
            t.join(WATCHDOG_S)
    assert not any(t.is_alive() for t in threads), "a writer thread hung"
    assert not errors, errors
    check_whole(rb[:])
    assert rb.write_count == 64 + len(range(64, 3000, 7)) * 7


def _tensor_rows_buffer() -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.zeros(4, 2))  # rows of tensors: the storage's fields are fixed
    return rb


def _items_buffer() -> ReplayBuffer:
    rb = ReplayBuffer(storage=ListStorage(10), collate_fn=list)
    rb.extend(["a", "b"])
    return rb


def _td_buffer(n: int = 4) -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    if n:
        rb.extend(TensorDict({"a": torch.zeros(n)}, [n]))
    return rb


def _emptying_transform_buffer() -> ReplayBuffer:
    rb = _td_buffer()
    rb.append_transform(lambda td: td[:0], invert=True)
    return rb


def _first_row_transform_buffer() -> ReplayBuffer:
    rb = _td_buffer()
    rb.append_transform(lambda td: td[:1], invert=True)  # keeps one row of those written
    return rb


def snapshot(rb: ReplayBuffer):
    """The rows held, comparable with ``==`` (a copy)."""
    if len(rb) == 0:
        return None
    rows = rb[:]
    if isinstance(rows, list):
        return list(rows)
    if isinstance(rows, torch.Tensor):
        return rows.tolist()
    return {k: v.tolist() for k, v in rows.items(include_nested=True, leaves_only=True)}


ROW = TensorDict({"a": torch.ones(1)}, [1])


@pytest.mark.parametrize(
    "make, call, error, match",
    [
        (_td_buffer, lambda rb: rb.storage.rewrite(torch.tensor([0]), torch.ones(1)), TypeError,
         "takes a TensorDict of rows"),
        (_td_buffer, lambda rb: rb.storage.rewrite(torch.tensor([0, 1]), ROW), ValueError,
         "got 1 rows for 2 slots"),
        (_td_buffer, lambda rb: rb.storage.rewrite(torch.tensor([4]), ROW), IndexError,
         "slot 4 holds no row.*extend"),
        (lambda: _td_buffer(0), lambda rb: rb.__setitem__(0, ROW[0]), IndexError,
         "holds no rows yet.*extend"),
        (lambda: _td_buffer(0), lambda rb: rb.storage.rewrite(torch.tensor([0]), ROW), IndexError,
         "holds no rows yet.*extend"),
        (_td_buffer, lambda rb: rb.__setitem__((0, 1), ROW), IndexError, "takes one index"),
        (_tensor_rows_buffer,
         lambda rb: rb.storage.rewrite(torch.tensor([0]), TensorDict({"z": torch.ones(1)}, [1])),
         SchemaMismatchError, "adds the key.*'z'.*whose fields are fixed"),
        (_items_buffer, lambda rb: rb.__setitem__([1, 5], ["x", "y"]), IndexError,
         "row index 5 is out of range"),
        (_items_buffer, lambda rb: rb.storage.rewrite(torch.tensor([1, 5]), ["x", "y"]),
         IndexError, "slot 5 holds no item"),
        (_items_buffer, lambda rb: rb.storage.rewrite(torch.tensor([1]), ["x", "y"]), ValueError,
         "2 items for 1 slots"),
        (_items_buffer, lambda rb: rb.set_("a", torch.ones(2)), TypeError,
         "holds items: write whole rows with rb"),
        (_emptying_transform_buffer, lambda rb: rb.__setitem__(0, ROW[0]), ValueError,
         "write-side transforms left nothing"),
        (_first_row_transform_buffer,
         lambda rb: rb.__setitem__(slice(0, 3), TensorDict({"a": torch.ones(3)}, [3])),
         ValueError, r"turned the \[3\] rows written into \[1\]; an in-place write replaces rows"),
        (_items_buffer, lambda rb: rb.storage.__setitem__(2, "c"), IndexError,
         r"storage\[2\] = \.\.\.: row index 2 is out of range.*write new ones with extend"),
        (_tensor_rows_buffer, lambda rb: rb.storage.__setitem__(7, torch.ones(2)), IndexError,
         r"storage\[7\] = \.\.\.: row index 7 is out of range.*write new ones with extend"),
        (lambda: _td_buffer(0), lambda rb: rb.storage.__setitem__(0, ROW[0]), IndexError,
         "out of range for a storage with 0 rows"),
        (_td_buffer, lambda rb: rb.__setitem__(0, TensorDict({("a", "x"): torch.ones(())}, [])),
         SchemaMismatchError, r"adds the key \('a', 'x'\) under a stored value that is a tensor"),
        (_td_buffer, lambda rb: rb.update_({"a": torch.ones(3)}), ValueError,
         r"update_ takes one value per row held \(\[4\] rows\)"),
    ],
    ids=[
        "not-rows", "count", "slot", "empty", "empty-storage", "tuple", "fixed-fields",
        "items-slot", "items-storage-slot", "items-count", "items-keys", "transforms-empty",
        "transforms-count", "items-storage-append", "storage-unheld-slot", "empty-storage-set",
        "key-under-a-leaf", "update-count",
    ],
)  # fmt: skip
def test_each_refusal_names_the_way_and_changes_nothing(make, call, error, match):
    rb = make()
    before = (snapshot(rb), rb.storage.revision, rb.storage.rewrites)
    with pytest.raises(error, match=match):
        call(rb)
    assert (snapshot(rb), rb.storage.revision, rb.storage.rewrites) == before


def test_one_slot_takes_one_row_with_or_without_its_batch_dim():
    rb = _td_buffer()
    rb[1] = TensorDict({"a": torch.tensor(5.0)}, [])
    rb[2] = TensorDict({"a": torch.tensor([7.0])}, [1])  # one row, as a batch of one
    assert rb[:]["a"].tolist() == [0, 5, 7, 0]
    with pytest.raises(ValueError, match="does not broadcast"):
        rb[3] = TensorDict({"a": torch.tensor([1.0, 2.0])}, [2])
    assert rb[:]["a"].tolist() == [0, 5, 7, 0]
