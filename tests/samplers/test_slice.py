import json
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    EmptyBufferError,
    FrozenStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import Sampler, SliceSampler

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def stream(lengths: list[int], *, last_done: bool = True) -> TensorDict:
    """Episodes back to back: ``t`` counts every step written, ``eid`` names the episode.

    With ``last_done=False`` the last episode is still in progress (no done flag).
    """
    eid = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    done = torch.zeros(len(eid), dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    if not last_done:
        done[-1] = False
    n = len(eid)
    return TensorDict(
        {
            "t": torch.arange(n),
            "eid": eid,
            "done_flag": done.clone(),
            "next": {"done": done.unsqueeze(-1)},
        },
        batch_size=[n],
    )


def valid_slices(storage, L: int) -> set[tuple[int, ...]]:
    """Brute force: every run of L retained rows, consecutive in time, inside one episode."""
    t = storage.column("t").tolist()
    eid = storage.column("eid").tolist()
    done = storage.column(("next", "done")).reshape(-1).tolist()
    slot_of = {step: slot for slot, step in enumerate(t)}
    out = set()
    for first in t:
        steps = list(range(first, first + L))
        if not all(s in slot_of for s in steps):
            continue  # runs past the newest row (the write cursor)
        slots = [slot_of[s] for s in steps]
        if len({eid[s] for s in slots}) == 1 and not any(done[s] for s in slots[:-1]):
            out.add(tuple(slots))
    return out


def drawn_slices(index: torch.Tensor, L: int) -> set[tuple[int, ...]]:
    return {tuple(r) for r in index.view(-1, L).tolist()}


# -- properties over the ring ------------------------------------------------------------------


@st.composite
def ring_cases(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=12))
    total = sum(lengths)
    capacity = draw(st.integers(1, 40))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, total - 1)), max_size=6, unique=True)))
    chunks = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True) if b > a]
    L = draw(st.integers(1, 6))
    key_mode = draw(st.sampled_from(["default", "episode_key", "end_key"]))
    last_done = draw(st.booleans())
    notify = draw(st.lists(st.booleans(), min_size=len(chunks), max_size=len(chunks)))
    return lengths, capacity, chunks, L, key_mode, last_done, notify


def make_sampler(L, key_mode):
    if key_mode == "episode_key":
        return SliceSampler(L, episode_key="eid")
    if key_mode == "end_key":
        return SliceSampler(L, end_key="done_flag")
    return SliceSampler(L)


@settings(max_examples=150, deadline=None)
@given(case=ring_cases(), seed=st.integers(0, 2**31))
def test_slices_never_cross_a_boundary_or_the_cursor(case, seed):
    """After every write, in the ring and across wrap-around, every drawn slice is valid,
    and the sampler's starts are exactly the valid slices (also for rows written without
    on_extend)."""
    lengths, capacity, chunks, L, key_mode, last_done, notify = case
    rows = stream(lengths, last_done=last_done)
    storage = LazyTensorStorage(capacity)
    sampler = make_sampler(L, key_mode)
    g = torch.Generator().manual_seed(seed)
    pos = 0
    for k, tell in zip(chunks, notify, strict=True):
        index = storage.extend(rows[pos : pos + k])
        if tell:
            sampler.on_extend(index, storage)
        pos += k
        expected = valid_slices(storage, L)
        if not expected:
            with pytest.raises(EmptyBufferError, match=f"slice_len={L}"):
                sampler.sample(storage, L, g)
            continue
        index = sampler.sample(storage, 8 * L, g)
        assert index.dtype == torch.int64 and index.shape == (8 * L,)
        assert drawn_slices(index, L) <= expected
        starts = sampler._valid_start_slots(storage)
        assert {tuple(((s + torch.arange(L)) % capacity).tolist()) for s in starts} == expected
        assert sampler.available(storage) == len(expected)


def test_the_episode_in_progress_is_usable():
    storage = LazyTensorStorage(100)
    sampler = SliceSampler(4)
    sampler.on_extend(storage.extend(stream([3, 6], last_done=False)), storage)
    index = sampler.sample(storage, 400, torch.Generator().manual_seed(0))
    # the only episode long enough is the one still running (rows 3..8); all 3 starts appear
    assert drawn_slices(index, 4) == {(3, 4, 5, 6), (4, 5, 6, 7), (5, 6, 7, 8)}


def test_the_oldest_partial_episode_is_usable_from_its_first_retained_step():
    storage = LazyTensorStorage(8)
    sampler = SliceSampler(3)
    rows = stream([10, 2])  # episode 0: t 0..9, episode 1: t 10..11
    sampler.on_extend(storage.extend(rows), storage)  # keeps t 4..11, cursor at slot 4
    assert storage.cursor == 4 and storage.column("t").tolist() == [8, 9, 10, 11, 4, 5, 6, 7]
    index = sampler.sample(storage, 300, torch.Generator().manual_seed(0))
    got = {tuple(storage.column("t")[list(s)].tolist()) for s in drawn_slices(index, 3)}
    # t 4..9 remain of episode 0: runs start at 4..7; across the slot-7/slot-0 seam too
    assert got == {(4, 5, 6), (5, 6, 7), (6, 7, 8), (7, 8, 9)}


def test_slices_are_in_time_order():
    storage = LazyTensorStorage(16)
    sampler = SliceSampler(5)
    sampler.on_extend(storage.extend(stream([7, 20, 4])), storage)  # wraps
    index = sampler.sample(storage, 50, torch.Generator().manual_seed(1))
    t = storage.column("t")[index].view(-1, 5)
    assert (t.diff(dim=1) == 1).all()


# -- reproducibility, caching, other storages --------------------------------------------------


def test_reproducible_under_a_seed_and_global_rng_untouched():
    storage = LazyTensorStorage(200)
    storage.extend(stream([13, 40, 7, 60, 5]))
    before = torch.random.get_rng_state()
    a = SliceSampler(4).sample(storage, 64, torch.Generator().manual_seed(9))
    b = SliceSampler(4).sample(storage, 64, torch.Generator().manual_seed(9))
    c = SliceSampler(4).sample(storage, 64, torch.Generator().manual_seed(10))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(before, torch.random.get_rng_state())


def test_writes_behind_the_samplers_back_are_seen():
    """The cache is keyed by the storage's write count, not only by on_extend."""
    storage = LazyTensorStorage(50)
    sampler = SliceSampler(5)
    storage.extend(stream([5, 5]))
    g = torch.Generator().manual_seed(0)
    assert drawn_slices(sampler.sample(storage, 100, g), 5) == {(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)}
    storage.extend(stream([5, 5, 5])[10:])  # the rest of episode 2, t 10..14
    assert (10, 11, 12, 13, 14) in drawn_slices(sampler.sample(storage, 200, g), 5)


def test_frozen_storage():
    storage = FrozenStorage.from_tensordict(stream([3, 9, 2]))
    index = SliceSampler(8).sample(storage, 32, torch.Generator().manual_seed(0))
    assert drawn_slices(index, 8) <= {(3, 4, 5, 6, 7, 8, 9, 10), (4, 5, 6, 7, 8, 9, 10, 11)}


def test_fallback_to_the_root_done_key():
    rows = stream([4, 4]).exclude("next").rename_key_("done_flag", "done")
    storage = FrozenStorage.from_tensordict(rows)
    index = SliceSampler(4).sample(storage, 40, torch.Generator().manual_seed(0))
    assert drawn_slices(index, 4) == {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_slice_len_one_is_uniform_over_rows():
    storage = FrozenStorage.from_tensordict(stream([1, 1, 1]))
    for uniform_over in ("trajectories", "starts"):
        sampler = SliceSampler(1, uniform_over=uniform_over)
        index = sampler.sample(storage, 300, torch.Generator().manual_seed(0))
        assert torch.bincount(index).tolist() == pytest.approx([100, 100, 100], abs=30)


def test_config_repr_equality_pickle():
    s = SliceSampler(8, episode_key=("traj", "id"))
    assert isinstance(s, Sampler) and s.unit == 8 and s.weight(torch.arange(8), None) is None
    assert s.config() == {
        "slice_len": 8,
        "episode_key": ("traj", "id"),
        "end_key": None,
        "uniform_over": "trajectories",
    }
    assert SliceSampler(**json.loads(json.dumps(s.config()))) == s
    assert (
        repr(SliceSampler(4, end_key="done"))
        == "SliceSampler(slice_len=4, episode_key=None, end_key='done', uniform_over='trajectories')"
    )
    assert pickle.loads(pickle.dumps(s)) == s
    every = SliceSampler(
        num_slices=2,
        strict_length=False,
        pad_output=True,
        span=(True, 1),
        truncated_key=None,
        init_key=("a", "b"),
    )
    assert every.config() == {
        "num_slices": 2,
        "episode_key": None,
        "end_key": None,
        "strict_length": False,
        "pad_output": True,
        "span": [True, 1],
        "truncated_key": None,
        "init_key": ("a", "b"),
        "uniform_over": "trajectories",
    }
    assert SliceSampler(**json.loads(json.dumps(every.config()))) == every
    assert pickle.loads(pickle.dumps(every)) == every


# -- errors ------------------------------------------------------------------------------------


def test_n_must_be_a_multiple_of_slice_len():
    storage = FrozenStorage.from_tensordict(stream([10]))
    with pytest.raises(
        ValueError, match=r"n=10 is not a multiple of slice_len=4; ask for a multiple of 4, e.g. 8"
    ):
        SliceSampler(4).sample(storage, 10, torch.Generator())


def test_no_episode_long_enough():
    storage = LazyTensorStorage(20)
    storage.extend(stream([3, 2, 3]))
    with pytest.raises(
        EmptyBufferError,
        match=r"cannot draw slices of slice_len=4: no episode among the 8 rows is that long \(longest: 3 steps\); "
        r"collect more steps, lower slice_len, or pass strict_length=False",
    ):
        SliceSampler(4).sample(storage, 8, torch.Generator())
    tiny = LazyTensorStorage(20)
    tiny.extend(stream([1]))
    with pytest.raises(
        EmptyBufferError, match=r"among the 1 rows is that long \(longest: 1 steps\)"
    ):
        SliceSampler(2).sample(tiny, 2, torch.Generator())
    with pytest.raises(EmptyBufferError, match=r"the source holds no rows"):
        SliceSampler(2).sample(LazyTensorStorage(5), 2, torch.Generator())


def test_missing_boundary_keys():
    storage = LazyTensorStorage(20)
    storage.extend(TensorDict({"obs": torch.zeros(10, 2)}, [10]))
    with pytest.raises(
        KeyError,
        match=r"needs episode boundaries: none of the keys \[\('collector', 'traj_ids'\), "
        r"'episode', \('next', 'done'\), 'done'\] is in the storage \(keys: \['obs'\]\)\. "
        r"Pass traj_key= \(an episode id per row\) or end_key= \(a done flag per row\)",
    ):
        SliceSampler(2).sample(storage, 4, torch.Generator())
    with pytest.raises(
        KeyError,
        match=r"none of the keys \[\('collector', 'traj_ids'\), 'episode', 'terminal'\] is in",
    ):
        SliceSampler(2, end_key="terminal").sample(storage, 4, torch.Generator())
    with pytest.raises(
        KeyError, match=r"none of the keys \['eid', \('next', 'done'\), 'done'\] is in the storage"
    ):
        SliceSampler(2, episode_key="eid").sample(storage, 4, torch.Generator())


def test_episode_ids_of_any_real_dtype_and_one_per_row():
    """TorchRL's own examples use float episode ids (``torch.zeros(100)``)."""
    storage = LazyTensorStorage(20)
    storage.extend(TensorDict({"eid": torch.tensor([0.0] * 5 + [1.5] * 5)}, [10]))
    index = SliceSampler(5, traj_key="eid").sample(storage, 40, torch.Generator().manual_seed(0))
    assert drawn_slices(index, 5) == {(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)}
    for column, message in (
        (
            torch.zeros(10, dtype=torch.complex64),
            r"traj_key 'eid' must hold real episode ids, got torch.complex64",
        ),
        (torch.zeros(10, 2), r"traj_key 'eid' must hold one id per row, got shape \[2\] per row"),
    ):
        storage = LazyTensorStorage(20)
        storage.extend(TensorDict({"eid": column}, [10]))
        with pytest.raises(TypeError, match=message):
            SliceSampler(2, traj_key="eid").sample(storage, 4, torch.Generator())


def test_end_flags_are_one_per_row():
    """TorchRL refuses a multi-element end signal; mixreplay did OR it silently."""
    storage = LazyTensorStorage(20)
    storage.extend(TensorDict({("next", "done"): torch.zeros(10, 5, 1, dtype=torch.bool)}, [10]))
    with pytest.raises(
        TypeError,
        match=r"end key \('next', 'done'\) must hold one flag per row, got shape \[5, 1\] per row",
    ):
        SliceSampler(2).sample(storage, 4, torch.Generator())


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: SliceSampler(0), ValueError, r"slice_len must be an int >= 1, got 0"),
        (lambda: SliceSampler(2.0), TypeError, r"slice_len must be an int >= 1, got float 2.0"),
        (lambda: SliceSampler(True), TypeError, r"slice_len must be an int >= 1, got bool True"),
        (lambda: SliceSampler(num_slices=0), ValueError, r"num_slices must be an int >= 1, got 0"),
        (
            lambda: SliceSampler(2, episode_key=3),
            TypeError,
            r"episode_key must be a key \(a str or a tuple of str\), got 3",
        ),
        (
            lambda: SliceSampler(2, end_key=()),
            TypeError,
            r"end_key must be a key \(a str or a tuple of str\), got \(\)",
        ),
    ],
)
def test_invalid_config(make, error, message):
    with pytest.raises(error, match=message):
        make()


# -- through the buffers -----------------------------------------------------------------------


def test_mixed_buffer_with_slices_on_both_sides():
    offline = ReplayBuffer(
        storage=FrozenStorage.from_tensordict(stream([30, 30])), sampler=SliceSampler(8)
    )
    online = LazyTensorStorage(64)
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_storage=online,
        online_sampler=SliceSampler(8),
        offline_fraction=0.25,
        batch_size=32,
        generator=0,
        source_key="source",
    )
    rb.extend(stream([20, 20]))
    batch = rb.sample()
    assert batch["source"].tolist() == [0] * 8 + [1] * 24
    for k in range(4):
        s = batch[k * 8 : (k + 1) * 8]
        assert (s["t"].diff() == 1).all() and (s["eid"] == s["eid"][0]).all()


@pytest.mark.parametrize("device", devices)
def test_device(device):
    storage = LazyTensorStorage(32, device=device)
    storage.extend(stream([10, 30]))
    index = SliceSampler(4).sample(storage, 16, torch.Generator().manual_seed(0))
    t = storage.column("t")[index].view(-1, 4)
    assert (t.diff(dim=1) == 1).all()


# -- issue 11.9: every restore of the rows invalidates the index --------------------------------


def slices_buffer(lengths, capacity=20, **kwargs) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(capacity), sampler=SliceSampler(4, **kwargs), generator=0
    )
    rb.extend(stream(lengths))
    return rb


@pytest.mark.parametrize("key_mode", ["default", "episode_key"])
@pytest.mark.parametrize("how", ["buffer", "storage", "checkpoint"])
def test_a_restore_with_the_same_counters_rebuilds_the_index(key_mode, how, tmp_path):
    """Issue 11.9: the restored rows have the write count, length and cursor of the old ones
    but other episode boundaries; no slice may cross them."""
    kwargs = {"episode_key": "eid"} if key_mode == "episode_key" else {}
    rb = slices_buffer([10, 10], **kwargs)
    rb.sample(40)  # builds the index of the two long episodes
    other = slices_buffer([3, 5, 4, 3, 5], **kwargs)
    for a, b in (("write_count", "write_count"), ("cursor", "cursor")):
        assert getattr(rb.storage, a) == getattr(other.storage, b)
    if how == "buffer":
        rb.load_state_dict(other.state_dict())
    elif how == "storage":
        rb.storage.load_state_dict(other.storage.state_dict())
    else:
        other.dumps(tmp_path / "ck")
        rb.loads(tmp_path / "ck")
    expected = valid_slices(rb.storage, 4)
    assert drawn_slices(rb.sample(400)["t"].long(), 4) <= expected
    assert rb.available() == len(expected) == 5  # 2 + 1 + 2 starts in [3, 5, 4, 3, 5]


def test_loading_the_sampler_state_drops_its_index():
    rb = slices_buffer([10, 10])
    rb.sample(8)
    sampler = rb.sampler
    assert sampler._indexes
    sampler.load_state_dict(sampler.state_dict())
    assert not sampler._indexes


@st.composite
def ring_histories(draw):
    """Writes, restores of other rows (same counters or not) and emptying, interleaved."""
    capacity = draw(st.integers(2, 30))
    L = draw(st.integers(2, 5))
    steps = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("extend"), st.lists(st.integers(1, 9), min_size=1, max_size=4)),
                st.tuples(st.just("restore"), st.lists(st.integers(1, 9), min_size=1, max_size=6)),
                st.tuples(st.just("empty"), st.just([])),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return capacity, L, draw(st.sampled_from(["default", "episode_key"])), steps


@settings(max_examples=120, deadline=None)
@given(case=ring_histories(), seed=st.integers(0, 2**31))
def test_the_index_follows_writes_restores_and_emptying(case, seed):
    capacity, L, key_mode, steps = case
    sampler = make_sampler(L, key_mode)
    storage = LazyTensorStorage(capacity)
    g = torch.Generator().manual_seed(seed)
    written = 0
    for op, lengths in steps:
        if op == "extend":
            rows = stream(lengths)
            rows["t"] += written  # steps keep counting across writes
            rows["eid"] += 1000 * written
            storage.extend(rows)
            written += rows.batch_size[0]
        elif op == "restore":
            twin = LazyTensorStorage(capacity)
            rows = stream(lengths)
            rows["t"] += written
            twin.extend(rows)
            written += rows.batch_size[0]
            storage.load_state_dict(twin.state_dict())
        else:
            storage.empty()
        expected = valid_slices(storage, L) if len(storage) else set()
        assert sampler.available(storage) == len(expected)
        starts = sampler._valid_start_slots(storage)
        assert {tuple(((s + torch.arange(L)) % capacity).tolist()) for s in starts} == expected
        if expected:
            assert drawn_slices(sampler.sample(storage, 4 * L, g), L) <= expected


# -- issue 10.6: TorchRL's spelling ---------------------------------------------------------------


def test_torchrl_spelling():
    storage = FrozenStorage.from_tensordict(stream([6, 6, 6]))
    g = torch.Generator().manual_seed(0)
    by_len = SliceSampler(slice_len=3, traj_key="eid")
    assert by_len == SliceSampler(3, episode_key="eid") and by_len.unit == 3
    by_count = SliceSampler(num_slices=2, end_key=("next", "done"))
    assert by_count.unit == 2 and by_count.config()["num_slices"] == 2
    for n in (4, 8, 12):  # two slices of n // 2 steps
        t = storage.column("t")[by_count.sample(storage, n, g)].view(2, n // 2)
        assert (t.diff(dim=1) == 1).all()
        assert (t // 6 == t[:, :1] // 6).all()  # each inside one episode
    with pytest.raises(EmptyBufferError, match=r"cannot draw slices of 7 steps"):
        by_count.sample(storage, 14, g)
    with pytest.raises(ValueError, match=r"num_slices=2 slices of n // 2 steps: n=5 is not"):
        by_count.sample(storage, 5, g)
    tolerated = SliceSampler(
        slice_len=3,
        strict_length=True,
        cache_values=True,
        compile=False,
        span=False,
        use_gpu=False,
        truncated_key=("next", "truncated"),
        init_key="is_init",
        pad_output=False,
        step_key="step_count",
        fragmented=False,
        replacement=True,
    )
    assert tolerated == SliceSampler(3)  # TorchRL's defaults, passed explicitly


def test_end_keys_are_or_ed_and_absent_ones_skipped():
    rows = stream([4, 4])
    truncated = torch.zeros(8, 1, dtype=torch.bool)
    truncated[1] = True  # the first episode was cut after its second step
    rows["next", "truncated"] = truncated
    storage = FrozenStorage.from_tensordict(rows)
    sampler = SliceSampler(
        2, end_keys=[("next", "done"), ("next", "truncated"), ("next", "terminated")]
    )
    assert sampler.config()["end_keys"] == [
        ("next", "done"),
        ("next", "truncated"),
        ("next", "terminated"),
    ]
    starts = sampler._valid_start_slots(storage).tolist()
    assert starts == [0, 2, 4, 5, 6]  # never from step 1 to step 2
    with pytest.raises(
        KeyError, match=r"none of the keys \[\('collector', 'traj_ids'\), 'episode', 'x'\] is in"
    ):
        SliceSampler(2, end_keys=["x"]).sample(storage, 2, torch.Generator())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SliceSampler(), r"needs exactly one of slice_len= .* and num_slices="),
        (lambda: SliceSampler(4, num_slices=2), r"needs exactly one of slice_len="),
        (lambda: SliceSampler(4, episode_key="a", traj_key="b"), r"the same argument"),
        (lambda: SliceSampler(4, end_keys="done"), r"end_keys must be a list of keys, got 'done'"),
        (lambda: SliceSampler(4, end_keys=[]), r"end_keys must be a non-empty list of keys"),
        (lambda: SliceSampler(4, fragmented=True), r"extend each env's steps consecutively"),
        (
            lambda: type("Slices", (SliceSampler,), {})(4, replacement=False),
            r"TorchRL's replacement=False .*SliceSampler\(replacement=False\) builds a "
            r"SliceSamplerWithoutReplacement; a subclass draws with replacement",
        ),
        (lambda: SliceSampler(4, ends=torch.ones(3)), r"boundaries are read from the rows"),
        (lambda: SliceSampler(4, slices=2), r"got an unexpected keyword argument 'slices'"),
        (
            lambda: SliceSampler(4, strict_length=0),
            r"strict_length must be True or False, got int 0",
        ),
        (
            lambda: SliceSampler(4, span=(1, 2, 3)),
            r"span must be a bool, an int or \(left, right\)",
        ),
        (
            lambda: SliceSampler(4, span=-1),
            r"span's left side must be a bool or an int >= 0, got -1",
        ),
        (lambda: SliceSampler(4, truncated_key=3), r"truncated_key must be a key"),
    ],
)
def test_torchrl_arguments_mixreplay_lacks_are_refused(make, message):
    with pytest.raises(TypeError, match=message):
        make()


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: SliceSampler(4, end_key="a", end_keys=["b"]),
            RuntimeError,  # TorchRL's exception
            r"end_key and end_keys are exclusive arguments",
        ),
        (
            lambda: SliceSampler(4, traj_key="traj", pad_output=True),
            ValueError,
            r"pad_output=True is incompatible with strict_length=True: padding only happens when "
            r"short trajectories are kept, which requires strict_length=False",
        ),
        (
            lambda: SliceSampler(4, span=(0, 4)),
            ValueError,
            r"span's right side 4 must be lower than slice_len=4",
        ),
        (
            lambda: SliceSampler(4, uniform_over="steps"),
            ValueError,
            r"uniform_over must be 'trajectories' \(TorchRL's: each episode long enough equally "
            r"likely\) or 'starts' \(each valid start equally likely\), got 'steps'",
        ),
        (
            lambda: SliceSampler(4, uniform_over="starts", strict_length=False),
            ValueError,
            r"uniform_over='starts'\) draws whole slices only",
        ),
    ],
)
def test_conflicting_torchrl_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.torchrl
def test_every_torchrl_slice_sampler_argument_is_handled():
    import inspect

    from torchrl.data.replay_buffers import SliceSampler as TorchRLSliceSampler

    from mixreplay.samplers.slice import _TORCHRL

    ours = set(inspect.signature(SliceSampler.__init__).parameters) | set(_TORCHRL)
    theirs = set(inspect.signature(TorchRLSliceSampler.__init__).parameters)
    assert theirs - {"self"} <= ours
