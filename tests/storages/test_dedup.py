"""Observations stored once (``dedup_next=True``): every read is the plain layout's, bit for bit.

The property tests feed a plain ring and a dedup ring the same writes (random
episode lengths, glitches where a next value is not the following row's, ring
capacities with wrap-around, write chunk sizes) and compare ``storage[:]``, the
batches of every sampler (in a ReplayBuffer and in both mixing buffers) and the
checkpoint round trip.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    EmptyBufferError,
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SchemaMismatchError,
    TensorStorage,
)
from mixreplay.checkpoint import load_state, save_state
from mixreplay.layout import RowLayout
from mixreplay.samplers import (
    PrioritizedSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
)
from mixreplay.schema import Schema
from mixreplay.storages.dedup import (
    DedupEncoder,
    DedupFrozenStorage,
    DedupLayout,
    dedup_keys,
    dedup_rows,
    expand_ring_state,
)
from tests.helpers import as_bytes, assert_identical, episodes


def chunks(td, sizes):
    i = 0
    for s in sizes:
        if i >= td.batch_size[0]:
            return
        yield td[i : i + s]
        i += s
    if i < td.batch_size[0]:
        yield td[i:]


SAMPLERS = {
    "uniform": lambda: RandomSampler(),
    "prioritized": lambda: PrioritizedSampler(alpha=0.7, beta=0.5),
    "slices": lambda: SliceSampler(2),
    "slices_by_id": lambda: SliceSampler(2, episode_key="eid"),
    "without_replacement": lambda: SamplerWithoutReplacement(),
}


def draw(rb, name, batch, g):
    """One batch; a prioritized buffer also gets new priorities (the same for both twins)."""
    try:
        out = rb.sample(batch, return_info=True)
    except (ValueError, EmptyBufferError) as err:  # too few complete slices in a tiny ring
        return ("error", type(err).__name__, str(err))
    if name == "prioritized":
        b, info = out
        rb.update_priority(info["index"], torch.rand(batch, generator=g) + 0.01)
    return out


episode_lengths = st.lists(st.integers(1, 9), min_size=1, max_size=12)


@given(
    lengths=episode_lengths,
    capacity=st.integers(1, 24),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    passes=st.integers(1, 3),
    glitch=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_dedup_ring_reads_and_batches_equal_the_plain_rings(
    lengths, capacity, sizes, passes, glitch, seed
):
    td = episodes(lengths, seed=seed, glitch=glitch)
    pairs = {
        name: (
            ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=make(), generator=seed),
            ReplayBuffer(
                storage=LazyTensorStorage(capacity, dedup_next=True), sampler=make(), generator=seed
            ),
        )
        for name, make in SAMPLERS.items()
    }
    batch = 4
    for p in range(passes):
        for chunk in chunks(td, sizes):
            for name, (plain, dedup) in pairs.items():
                assert torch.equal(plain.extend(chunk), dedup.extend(chunk))
                ga, gb = (torch.Generator().manual_seed(seed + p) for _ in range(2))
                a, b = draw(plain, name, batch, ga), draw(dedup, name, batch, gb)
                if isinstance(a, tuple) and a[0] == "error":
                    assert a == b
                else:
                    assert_identical(a[0], b[0])
                    assert_identical(a[1], b[1])
    for plain, dedup in pairs.values():
        s, d = plain.storage, dedup.storage
        assert (len(s), s.cursor, s.write_count) == (len(d), d.cursor, d.write_count)
        assert_identical(s[:], d[:])
        assert_identical(s.to_tensordict(), d.to_tensordict())
        assert torch.equal(s.rows, d.rows)  # packed words too, padding included
        assert s.fingerprint == d.fingerprint
        for key in s.schema:
            x, y = s.column(key), d.column(key)
            assert torch.equal(as_bytes(x), as_bytes(y))
        # random access
        idx = torch.randint(len(s), (7,), generator=torch.Generator().manual_seed(seed))
        assert_identical(s[idx], d[idx])
        assert_identical(s[-1], d[-1])


@given(
    lengths=episode_lengths,
    capacity=st.integers(1, 20),
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    glitch=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None)
def test_checkpoint_round_trips_rows_and_exceptions(lengths, capacity, sizes, glitch, seed):
    td = episodes(lengths, seed=seed, glitch=glitch)
    dedup = LazyTensorStorage(capacity, dedup_next=True)
    plain = LazyTensorStorage(capacity)
    for chunk in chunks(td, sizes + sizes):
        dedup.extend(chunk)
        plain.extend(chunk)
    state = dedup.state_dict()
    assert state["dedup_next"] is True and state["type"] == "LazyTensorStorage"
    assert state["rows"].shape[1] < plain.state_dict()["rows"].shape[1]
    twin = LazyTensorStorage(capacity, dedup_next=True)
    twin.extend(td[:1])  # a storage that already holds rows is overwritten
    twin.load_state_dict(state)
    assert twin.exceptions == dedup.exceptions
    # into a plain ring: converted to whole rows; a plain state into a dedup ring: compressed
    as_plain = LazyTensorStorage(capacity)
    as_plain.load_state_dict(state)
    from_plain = LazyTensorStorage(capacity, dedup_next=True)
    from_plain.load_state_dict(plain.state_dict())
    for other in (twin, as_plain, from_plain):
        assert (len(other), other.cursor, other.write_count) == (
            len(plain),
            plain.cursor,
            plain.write_count,
        )
        assert_identical(other[:], plain[:])
    assert from_plain.exceptions == dedup.exceptions
    # and they keep behaving the same: more writes, then the same rows
    more = episodes(lengths[::-1], seed=seed + 1, glitch=glitch)
    for s in (twin, as_plain, from_plain, plain):
        for chunk in chunks(more, sizes):
            s.extend(chunk)
    for s in (twin, as_plain, from_plain):
        assert_identical(s[:], plain[:])


@given(
    lengths=episode_lengths,
    capacity=st.integers(2, 24),
    sizes=st.lists(st.integers(1, 16), min_size=1, max_size=6),
    fraction=st.sampled_from([0.25, 0.5, 0.75]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mixing_buffers_draw_the_same_batches(lengths, capacity, sizes, fraction, seed):
    online = episodes(lengths, seed=seed, glitch=0.2)
    offline_rows = episodes(lengths[::-1] + [3], seed=seed + 7)
    starts = torch.cat(
        [torch.zeros(1, dtype=torch.int64), torch.tensor(lengths[::-1] + [3]).cumsum(0)[:-1]]
    )

    def build(dedup: bool, kind: str):
        frozen = (
            DedupFrozenStorage.from_tensordict(offline_rows, starts)
            if dedup
            else FrozenStorage.from_tensordict(offline_rows)
        )
        offline = OfflineDataset(frozen, episode_starts=starts)
        ring = LazyTensorStorage(capacity, dedup_next=dedup)
        if kind == "o2o":
            return OfflineToOnlineReplayBuffer(
                offline, online_storage=ring, offline_fraction=fraction, generator=seed
            )
        if kind == "o2o_transformed":  # a source transform: the generic (aligning) path
            buf = OfflineToOnlineReplayBuffer(
                offline, online_storage=ring, offline_fraction=fraction, generator=seed
            )
            buf.offline_buffer.append_transform(lambda td: td)
            return buf
        return MixtureReplayBuffer(
            {"off": offline, "on": ring, "on2": LazyTensorStorage(capacity, dedup_next=dedup)},
            {"off": fraction, "on": (1 - fraction) / 2, "on2": (1 - fraction) / 2},
            generator=seed,
            source_key="source",
        )

    for kind in ("o2o", "o2o_transformed", "mixture"):
        a, b = build(False, kind), build(True, kind)
        for chunk in chunks(online, sizes):
            for buf in (a, b):
                if kind == "mixture":
                    buf.extend(chunk, source="on")
                    buf.extend(chunk[: max(1, len(chunk) // 2)], source="on2")
                else:
                    buf.extend(chunk)
            assert_identical(a.sample(8), b.sample(8))
            ba, ia = a.sample(6, return_info=True)
            bb, ib = b.sample(6, return_info=True)
            assert_identical(ba, bb)
            assert_identical(ia, ib)


def test_a_dedup_online_ring_gathers_straight_into_the_batch_beside_a_plain_dataset():
    offline = OfflineDataset.from_tensordict(episodes([5, 5], seed=1))
    rb = OfflineToOnlineReplayBuffer(
        offline, online_storage=LazyTensorStorage(50, dedup_next=True), generator=0
    )
    rb.extend(episodes([4, 6, 3], seed=2))
    rb.sample(4)
    # one packed gather per source, the dedup ring included
    assert rb._drawing_plan().direct == (True, True)


def test_bytes_per_row_halve_for_pixel_rows():
    td = episodes([50] * 4, zeros=False)
    td["pixels"] = torch.randint(0, 255, (200, 84, 84, 3), dtype=torch.uint8)
    td["next", "pixels"] = torch.cat([td["pixels"][1:], td["pixels"][:1]])
    plain, dedup = LazyTensorStorage(200), LazyTensorStorage(200, dedup_next=True)
    plain.extend(td)
    dedup.extend(td)
    assert dedup.exceptions == 4  # each episode's last step (the newest row among them)
    assert dedup.nbytes / plain.nbytes < 0.55
    assert dedup.row_bytes < plain.row_bytes / 2 + 64
    assert_identical(plain[:], dedup[:])


def test_refused_writes_change_nothing():
    s = LazyTensorStorage(8, dedup_next=True)
    s.extend(episodes([3, 2]))
    before = s.state_dict()
    generation = s.generation
    bad = episodes([2])
    bad["pixels"] = bad["pixels"].float()
    with pytest.raises(
        SchemaMismatchError, match=r"'pixels': stored uint8\[2, 3\], written float32"
    ):
        s.extend(bad)
    with pytest.raises(ValueError, match="empty batch"):
        s.extend(episodes([2])[:0])
    after = s.state_dict()
    assert s.generation == generation
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[key]), key
        else:
            assert value == after[key], key


def test_a_refused_first_write_fixes_no_schema():
    s = LazyTensorStorage(8, dedup_next=True)
    bad = episodes([2])
    bad["name"] = torch.zeros(2, dtype=torch.bool)
    bad.set_non_tensor("label", "x")
    with pytest.raises(TypeError, match="holds a"):
        s.extend(bad)
    assert s.schema is None and s.nbytes == 0 and s.write_count == 0


def test_storage_contract_counters_and_generation():
    s = LazyTensorStorage(6, dedup_next=True)
    assert isinstance(s, LazyTensorStorage) and s.dedup_next and s.packed and s.writable
    assert s.extend(episodes([4, 4])).tolist() == [0, 1, 2, 3, 4, 5, 0, 1]
    assert (len(s), s.cursor, s.write_count) == (6, 2, 8)
    g = s.generation
    s.empty()
    assert s.generation != g and len(s) == 0 and s.write_count == 8
    s.extend(episodes([3]))
    assert len(s) == 3 and s.exceptions == 1
    assert_identical(s[:], FrozenStorage.from_tensordict(episodes([3]))[:])
    s.reset_write_count()
    assert s.write_count == 0
    with s.lock:
        with s.lock:
            s.gather_unlocked(torch.tensor([0]))
    assert "dedup_next=True" in repr(s)


def test_the_row_before_an_overwritten_one_keeps_its_true_next_value():
    td = episodes([10], zeros=False)
    s = LazyTensorStorage(4, dedup_next=True)
    for i in range(10):  # one row at a time: the ring wraps twice
        s.extend(td[i : i + 1])
        got = s[:]
        order = [(s.cursor + j) % 4 for j in range(len(s))] if len(s) == 4 else range(len(s))
        want = FrozenStorage.from_tensordict(td)[max(0, i + 1 - len(s)) : i + 1]
        assert_identical(got[torch.tensor(list(order))], want)


def test_memmap_ring_keeps_rows_and_exceptions_in_files(tmp_path):
    s = LazyMemmapStorage(40, scratch_dir=tmp_path, dedup_next=True)
    s.POOL_START = 2  # make the pool grow
    td = episodes([1] * 30, glitch=0.0)
    plain = LazyTensorStorage(40)
    for chunk in chunks(td, [3, 7, 1, 11, 8]):
        s.extend(chunk)
        plain.extend(chunk)
    assert_identical(s[:], plain[:])
    names = sorted(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert names == ["next", "rows"]  # the grown pool replaced the first file
    copy = pickle.loads(pickle.dumps(s))
    assert_identical(copy[:], plain[:])
    copy.extend(episodes([1] * 40, seed=3))  # grows its pool in memory, not beside our files
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == names
    s.close()
    assert list(tmp_path.iterdir()) == []


def test_memmap_checkpoint_round_trip_through_files(tmp_path):
    td = episodes([3, 5, 2, 6], glitch=0.3)
    a = LazyMemmapStorage(9, scratch_dir=tmp_path / "a", dedup_next=True)
    for chunk in chunks(td, [4, 4, 4, 4]):
        a.extend(chunk)
    save_state(tmp_path / "ckpt", a.state_dict(copy=False))
    b = LazyMemmapStorage(9, scratch_dir=tmp_path / "b", dedup_next=True)
    b.load_state_dict(load_state(tmp_path / "ckpt"))
    assert_identical(a[:], b[:])
    assert b.exceptions == a.exceptions
    rb = ReplayBuffer(storage=LazyTensorStorage(9, dedup_next=True), generator=0)
    rb.extend(td)
    rb.dumps(tmp_path / "rb")
    twin = ReplayBuffer(storage=LazyTensorStorage(9, dedup_next=True), generator=1)
    twin.loads(tmp_path / "rb")
    assert_identical(rb.sample(5), twin.sample(5))
    plain = ReplayBuffer(storage=LazyTensorStorage(9), generator=1)
    plain.loads(tmp_path / "rb")  # converted: the same rows, whole
    assert_identical(rb[:], plain[:])
    a.close()
    b.close()


def test_corrupt_dedup_states_are_refused_and_change_nothing():
    s = LazyTensorStorage(6, dedup_next=True)
    s.extend(episodes([2, 3]))
    state = s.state_dict()
    twin = LazyTensorStorage(6, dedup_next=True)
    twin.extend(episodes([1], seed=5))
    before = twin.state_dict()
    bad_slots = dict(state, next_slots=state["next_slots"][:0], next_rows=state["next_rows"][:0])
    with pytest.raises(CheckpointError, match=r"slot 4 \(the newest row.*has no next values saved"):
        twin.load_state_dict(bad_slots)
    unsorted = dict(state, next_slots=state["next_slots"].flip(0))
    if state["next_slots"].numel() > 1:
        with pytest.raises(CheckpointError, match="must increase strictly"):
            twin.load_state_dict(unsorted)
    with pytest.raises(CheckpointError, match=r"the saved next_rows must be an int64\[\d+, \d+\]"):
        twin.load_state_dict(dict(state, next_rows=state["next_rows"][:, :1]))
    with pytest.raises(CheckpointError, match=r"the saved rows must be an int64\[5, \d+\]"):
        twin.load_state_dict(dict(state, rows=state["rows"][:, :1]))
    with pytest.raises(CheckpointError, match="next_keys must be a list of keys"):
        twin.load_state_dict(dict(state, next_keys="pixels"))
    with pytest.raises(
        CheckpointError, match=r"next_keys do not fit the schema: \('next', 'reward'\)"
    ):
        twin.load_state_dict(dict(state, next_keys=[["next", "reward"]]))
    with pytest.raises(CheckpointError, match="the saved ring has max_size 6, this storage 7"):
        LazyTensorStorage(7, dedup_next=True).load_state_dict(state)
    with pytest.raises(CheckpointError, match="the saved ring has max_size 6, this storage 7"):
        LazyTensorStorage(7).load_state_dict(state)  # a plain ring: the same check
    plain = LazyTensorStorage(6)
    with pytest.raises(CheckpointError, match="must increase strictly|has no next values"):
        plain.load_state_dict(bad_slots)
    after = twin.state_dict()
    for key, value in before.items():
        assert (
            torch.equal(value, after[key])
            if isinstance(value, torch.Tensor)
            else value == after[key]
        )


def test_expand_ring_state_of_an_empty_ring():
    s = LazyTensorStorage(3, dedup_next=True)
    state = s.state_dict()
    assert state["rows"] is None
    assert "dedup_next" not in expand_ring_state(state)
    plain = LazyTensorStorage(3)
    plain.load_state_dict(state)
    assert len(plain) == 0
    s2 = LazyTensorStorage(3, dedup_next=True)
    s2.extend(episodes([2]))
    s2.load_state_dict(state)
    assert len(s2) == 0 and s2.exceptions == 0


def test_dedup_next_must_be_a_bool():
    with pytest.raises(TypeError, match="dedup_next must be True or False, got int 1"):
        LazyTensorStorage(4, dedup_next=1)


def test_every_ring_class_has_a_dedup_variant(tmp_path):
    for s in (
        TensorStorage(5, dedup_next=True),
        LazyTensorStorage(5, dedup_next=True),
        LazyMemmapStorage(5, dedup_next=True, scratch_dir=tmp_path),
    ):
        plain = LazyTensorStorage(5)
        for ring in (s, plain):
            ring.extend(episodes([2, 4]))
        assert_identical(s[:], plain[:])
        assert pickle.loads(pickle.dumps(s)).dedup_next

    class MyRing(LazyTensorStorage):
        pass

    mine = MyRing(5, dedup_next=True)
    assert isinstance(mine, MyRing) and mine.dedup_next
    mine.extend(episodes([3]))
    assert_identical(mine[:], FrozenStorage.from_tensordict(episodes([3]))[:])


def test_rows_without_a_shared_key_are_stored_whole(caplog):
    s = LazyTensorStorage(4, dedup_next=True)
    td = TensorDict({"obs": torch.arange(3.0), "next": {"reward": torch.ones(3)}}, [3])
    with caplog.at_level("WARNING"):
        s.extend(td)
    assert "every row is stored whole" in caplog.text
    assert s.exceptions == 0 and s.row_bytes == 8
    assert_identical(s[:], FrozenStorage.from_tensordict(td)[:])


def test_dedup_keys_skip_flags_and_mismatched_pairs():
    td = episodes([2])
    td["next", "action"] = torch.zeros(2, 3)  # a different shape than the root's
    keys = dedup_keys(Schema.from_tensordict(td))
    assert keys == (("next", "pixels"), ("next", "state"), ("next", "step_count"))
    layout = RowLayout(Schema.from_tensordict(td))
    with pytest.raises(ValueError, match=r"\('next', 'action'\) cannot be kept once"):
        DedupLayout(layout, [("next", "action")])
    assert "next kept once" in repr(DedupLayout(layout))


# -- read-only rows (the building blocks of a dedup dataset format) ---------------------------


@given(
    lengths=episode_lengths,
    glitch=st.sampled_from([0.0, 0.3]),
    chunk=st.integers(1, 20),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=25, deadline=None)
def test_frozen_dedup_rows_read_back_exactly(lengths, glitch, chunk, seed):
    td = episodes(lengths, seed=seed, glitch=glitch)
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)[:-1]])
    plain = FrozenStorage.from_tensordict(td)
    frozen = DedupFrozenStorage.from_tensordict(td, starts)
    assert_identical(frozen[:], plain[:])
    assert frozen.fingerprint == plain.fingerprint  # the same data, however it is stored
    assert torch.equal(frozen.rows, plain.rows)
    # written chunk by chunk, as a dataset writer streams rows
    layout = RowLayout(Schema.from_tensordict(td))
    enc = DedupEncoder(layout, episode_starts=starts)
    parts = [enc.push(layout.pack(c)) for c in chunks(td, [chunk] * len(td))]
    last_slot, last_x = enc.finish()
    rows = torch.cat([p[0] for p in parts])
    slots = torch.cat([p[1] for p in parts] + [last_slot])
    x = torch.cat([p[2] for p in parts] + [last_x])
    whole = frozen.parts()
    assert torch.equal(rows, whole.rows) and torch.equal(slots, whole.next_slots)
    assert torch.equal(x, whole.next_rows)
    streamed = DedupFrozenStorage(layout, enc.layout.next_keys, rows, slots, x)
    for name, make in SAMPLERS.items():
        a = OfflineDataset(plain, episode_starts=starts, sampler=make(), generator=seed)
        b = OfflineDataset(streamed, episode_starts=starts, sampler=make(), generator=seed)
        for _ in range(3):
            ga, gb = (torch.Generator().manual_seed(seed) for _ in range(2))
            ra, rb_ = draw(a, name, 4, ga), draw(b, name, 4, gb)
            if isinstance(ra, tuple) and ra[0] == "error":
                assert ra == rb_
            else:
                assert_identical(ra[0], rb_[0])


def test_frozen_dedup_keeps_episode_ends_and_halves_pixels():
    lengths = [10, 20, 5]
    td = episodes(lengths, zeros=False)
    starts = [0, 10, 30]
    parts = dedup_rows(td, starts)
    assert parts.next_slots.tolist() == [9, 29, 34]  # each episode's last step
    assert parts.next_keys == (("next", "pixels"), ("next", "state"), ("next", "step_count"))
    frozen = DedupFrozenStorage(*parts)
    assert frozen.exceptions == 3 and frozen.writable is False
    view = frozen.column("pixels")  # a kept key: a view of the stored rows
    assert view.untyped_storage().data_ptr() == frozen.stored_rows.untyped_storage().data_ptr()
    assert torch.equal(frozen.column(("next", "pixels")), td["next", "pixels"])
    assert frozen.nbytes < FrozenStorage.from_tensordict(td).rows.numel() * 8
    with pytest.raises(KeyError, match="key 'nope' not found in storage with keys"):
        frozen.column("nope")
    ds = OfflineDataset(frozen, episode_starts=torch.tensor(starts))
    state = ds.state_dict()
    assert state["storage"]["reference"] and state["storage"]["fingerprint"] == frozen.fingerprint
    twin = OfflineDataset(FrozenStorage.from_tensordict(td), episode_starts=torch.tensor(starts))
    twin.load_state_dict(state)  # a plain copy of the same rows is the same dataset


def test_frozen_dedup_checks_its_parts():
    parts = dedup_rows(episodes([3, 2]), [0, 3])
    with pytest.raises(ValueError, match=r"stored rows must be int64 \[n, \d+\]"):
        DedupFrozenStorage(parts.layout, parts.next_keys, parts.rows[:, :1], *parts[3:])
    with pytest.raises(ValueError, match=r"next_rows must be int64 \[2, \d+\]"):
        DedupFrozenStorage(*parts[:4], parts.next_rows[:1])
    with pytest.raises(ValueError, match="next_slots must be int64"):
        DedupFrozenStorage(*parts[:3], parts.next_slots.int(), parts.next_rows)
    with pytest.raises(ValueError, match="next_slots must increase strictly"):
        DedupFrozenStorage(*parts[:3], parts.next_slots.flip(0), parts.next_rows)
    with pytest.raises(ValueError, match=r"the last row \(4\) must keep its own next values"):
        DedupFrozenStorage(*parts[:3], parts.next_slots[:1], parts.next_rows[:1])
    with pytest.raises(TypeError, match=r"dedup_rows expects a \[n\] TensorDict of rows, got dict"):
        dedup_rows({"x": torch.zeros(2)})


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_episode_ends_keep_their_own_copy_even_when_equal(chunk):
    # a constant observation: every next value equals the following row's, yet the
    # last step of each episode keeps its own (TED's flags say the episode ended there)
    td = episodes([4, 3, 5], zeros=False)
    td["pixels"].zero_()
    td["next", "pixels"].zero_()
    td["state"].zero_()
    td["next", "state"].zero_()
    td["next", "step_count"] = td["step_count"].roll(-1, 0)
    s = LazyTensorStorage(50, dedup_next=True)
    for c in chunks(td, [chunk] * 12):
        s.extend(c)
    assert s.state_dict()["next_slots"].tolist() == [3, 6, 11]  # two ends and the newest
    assert_identical(s[:], FrozenStorage.from_tensordict(td)[:])


# -- the memory-mapped ring, the exception rule, checkpoints of whole buffers --------------


def ring(kind: str, capacity: int, scratch, *, dedup: bool = True):
    if kind == "memmap":
        return LazyMemmapStorage(capacity, scratch_dir=scratch, dedup_next=dedup)
    return LazyTensorStorage(capacity, dedup_next=dedup)


@given(
    lengths=episode_lengths,
    capacity=st.integers(1, 24),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    passes=st.integers(1, 2),
    glitch=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_memmap_dedup_ring_batches_equal_the_plain_rings(
    tmp_path_factory, lengths, capacity, sizes, passes, glitch, seed
):
    td = episodes(lengths, seed=seed, glitch=glitch)
    scratch = tmp_path_factory.mktemp("memmap-dedup")
    pairs = {
        name: (
            ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=make(), generator=seed),
            ReplayBuffer(
                storage=ring("memmap", capacity, scratch / name), sampler=make(), generator=seed
            ),
        )
        for name, make in SAMPLERS.items()
    }
    for p in range(passes):
        for chunk in chunks(td, sizes):
            for name, (plain, dedup) in pairs.items():
                assert torch.equal(plain.extend(chunk), dedup.extend(chunk))
                ga, gb = (torch.Generator().manual_seed(seed + p) for _ in range(2))
                a, b = draw(plain, name, 4, ga), draw(dedup, name, 4, gb)
                if isinstance(a, tuple) and a[0] == "error":
                    assert a == b
                else:
                    assert_identical(a[0], b[0])
                    assert_identical(a[1], b[1])
    for plain, dedup in pairs.values():
        assert dedup.storage.filename is not None  # rows in a file, not in memory
        assert_identical(plain.storage[:], dedup.storage[:])
        dedup.storage.close()
    assert not any(scratch.rglob("*.bin"))


def differs(td, i: int, keys) -> bool:
    """Whether row ``i``'s next values differ, in any byte, from row ``i + 1``'s root values."""
    return any(
        not torch.equal(as_bytes(td.get(k)[i]), as_bytes(td.get(k[1:])[i + 1])) for k in keys
    )


@given(
    lengths=episode_lengths,
    extra=st.integers(0, 5),
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    glitch=st.sampled_from([0.1, 0.3, 0.6]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_exactly_the_rows_whose_next_values_cannot_be_read_keep_their_own_copy(
    lengths, extra, sizes, glitch, seed
):
    # no wrap-around: the kept copies are the episode ends, the rows whose next values
    # differ from the following row's (in any byte: -0.0, NaN payloads, a flipped pixel
    # bit) and the newest row; a full ring also its last slot (whose following slot is 0)
    td = episodes(lengths, seed=seed, glitch=glitch)
    n = td.batch_size[0]
    s = LazyTensorStorage(n + extra, dedup_next=True)
    for chunk in chunks(td, sizes):
        s.extend(chunk)
    keys = dedup_keys(Schema.from_tensordict(td))
    ends = set((torch.tensor(lengths).cumsum(0) - 1).tolist())
    want = {i for i in range(n - 1) if i in ends or differs(td, i, keys)} | {n - 1}
    got = set(s.state_dict()["next_slots"].tolist())
    assert got == want
    assert s.exceptions == len(want)
    assert set((s._exception_of[:n] >= 0).nonzero().squeeze(1).tolist()) == want
    assert_identical(s[:], FrozenStorage.from_tensordict(td)[:])


@pytest.mark.parametrize("key", ["pixels", "state", "step_count"])
@pytest.mark.parametrize("chunk", [1, 2, 8])
def test_a_next_value_that_differs_from_the_following_rows_keeps_its_own_copy(key, chunk):
    td = episodes([8], zeros=False)
    td["next", "step_count"] = td["step_count"].roll(-1, 0)  # consistent in-episode
    assert not any(differs(td, i, dedup_keys(Schema.from_tensordict(td))) for i in range(7))
    if key == "state":  # equal as floats, not as bytes
        td["state"][4] = 0.0
        td["next", "state"][3] = -0.0
    elif key == "pixels":
        td["next", "pixels"][3, 1, 2] ^= 128
    else:
        td["next", "step_count"][3] = 99
    s = LazyTensorStorage(8, dedup_next=True)
    for c in chunks(td, [chunk] * 8):
        s.extend(c)
    assert s.state_dict()["next_slots"].tolist() == [3, 7]
    got = s[:]
    assert torch.equal(as_bytes(got["next", key][3]), as_bytes(td["next", key][3]))
    assert not torch.equal(as_bytes(got["next", key][3]), as_bytes(got[key][4]))
    assert_identical(got, FrozenStorage.from_tensordict(td)[:])


@given(
    lengths=episode_lengths,
    capacity=st.integers(2, 20),
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    glitch=st.sampled_from([0.0, 0.3]),
    kind=st.sampled_from(["tensor", "memmap"]),
    name=st.sampled_from(sorted(SAMPLERS)),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_buffer_checkpoints_of_a_dedup_ring_draw_the_same_batches(
    tmp_path_factory, lengths, capacity, sizes, glitch, kind, name, seed
):
    """state_dict/load_state_dict, save_state/load_state and dumps/loads of a ReplayBuffer."""
    td = episodes(lengths, seed=seed, glitch=glitch)
    more = episodes(lengths[::-1], seed=seed + 1, glitch=glitch)
    root = tmp_path_factory.mktemp("ckpt")

    def make(dedup=True, gen=seed, where="x"):
        storage = ring(kind, capacity, root / where, dedup=dedup)
        return ReplayBuffer(storage=storage, sampler=SAMPLERS[name](), generator=gen)

    rb, plain = make(), make(dedup=False, where="plain")
    g = torch.Generator().manual_seed(seed)
    for chunk in chunks(td, sizes):
        for buf in (rb, plain):
            buf.extend(chunk)
        gen_state = g.get_state()
        for buf in (rb, plain):
            g.set_state(gen_state)
            draw(buf, name, 3, g)
    state = rb.state_dict()
    assert state["storage"]["dedup_next"] is True
    in_memory = make(gen=seed + 1, where="a")
    in_memory.extend(more[:1])  # a buffer that already holds rows is overwritten
    in_memory.load_state_dict(state)
    save_state(root / "state", rb.state_dict(copy=False))
    from_files = make(gen=seed + 2, where="b")
    from_files.load_state_dict(load_state(root / "state"))
    rb.dumps(root / "dumped")
    loaded = make(gen=seed + 3, where="c")
    loaded.loads(root / "dumped")
    as_plain = make(dedup=False, gen=seed + 4, where="d")  # the rows converted, whole
    as_plain.loads(root / "dumped")
    twins = [in_memory, from_files, loaded, as_plain]
    for buf in twins:
        assert_identical(buf.storage[:], rb.storage[:])
    # the same batches from here on, and after more writes; the plain ring's too
    for step, chunk in enumerate([None, *chunks(more, sizes)]):
        for buf in (rb, plain, *twins):
            if chunk is not None:
                buf.extend(chunk)
        want = draw(rb, name, 5, torch.Generator().manual_seed(step))
        for buf in (plain, *twins):
            got = draw(buf, name, 5, torch.Generator().manual_seed(step))
            if isinstance(want, tuple) and want[0] == "error":
                assert got == want
            else:
                assert_identical(got[0], want[0])
                assert_identical(got[1], want[1])
    for buf in (rb, plain, *twins):
        if kind == "memmap":
            buf.storage.close()
