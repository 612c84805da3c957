"""OfflineToOnlineReplayBuffer: the reference semantics, exactly, and what mixreplay adds."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import (
    EmptyBufferError,
    LazyMemmapStorage,
    LazyTensorStorage,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SchemaMismatchError,
)
from tests.conftest import ted_rows

OFFLINE_TAG, ONLINE_TAG = 7.0, -3.0


def offline_dataset(n=200):
    return OfflineDataset.from_tensordict(ted_rows(n, tag=OFFLINE_TAG))


def mixed(f=0.5, batch_size=64, online_rows=50, generator=0, **kw):
    rb = OfflineToOnlineReplayBuffer(
        offline_dataset(),
        online_capacity=1000,
        offline_fraction=f,
        batch_size=batch_size,
        generator=generator,
        **kw,
    )
    if online_rows:
        rb.extend(ted_rows(online_rows, tag=ONLINE_TAG))
    return rb


def tags(batch):
    return batch["action"][:, 0]


@given(f=st.floats(0.001, 0.999), b=st.integers(1, 700))
@settings(max_examples=150, deadline=None)
def test_exact_split_offline_rows_first(f, b):
    rb = mixed(f)
    batch = rb.sample(b)
    n_off = round(f * b)
    t = tags(batch)
    assert batch.batch_size == torch.Size([b])
    assert (t == OFFLINE_TAG).sum().item() == n_off
    assert (t[:n_off] == OFFLINE_TAG).all() and (t[n_off:] == ONLINE_TAG).all()


def test_all_offline_while_online_is_empty():
    rb = mixed(0.1, online_rows=0)
    assert (tags(rb.sample()) == OFFLINE_TAG).all()
    assert len(rb) == 200


def test_all_offline_when_offline_count_reaches_batch():
    rb = mixed(0.99, batch_size=10)  # round(9.9) == 10
    assert (tags(rb.sample()) == OFFLINE_TAG).all()


def test_all_online_when_offline_count_rounds_to_zero():
    rb = mixed(0.04, batch_size=10)  # round(0.4) == 0
    assert (tags(rb.sample()) == ONLINE_TAG).all()
    rb.anneal(10, 10)
    assert rb.offline_fraction == 0.0
    assert (tags(rb.sample()) == ONLINE_TAG).all()


def test_anneal_follows_the_reference_formula():
    rb = mixed(0.6)
    for step, total in [(0, 100), (25, 100), (99, 100), (100, 100), (250, 100)]:
        rb.anneal(step, total)
        assert rb.offline_fraction == pytest.approx(0.6 * max(0.0, 1 - step / total))
    rb.anneal(30, 100)
    assert (tags(rb.sample(100)) == OFFLINE_TAG).sum() == round(0.42 * 100)


@pytest.mark.parametrize(
    "step, total, err, match",
    [
        (5, 0, ValueError, "total_steps must be a finite number > 0 .*got 0"),
        (5, -3, ValueError, "total_steps must be a finite number > 0 .*got -3"),
        (-1, 10, ValueError, "step must be a number >= 0, got -1"),
        (float("nan"), 10, ValueError, "step must be a finite number >= 0, got nan"),
        ("1", 10, TypeError, "step must be a number >= 0, got str '1'"),
        (1, "10", TypeError, "total_steps must be a number > 0, got str '10'"),
    ],
)
def test_anneal_rejects_bad_steps(step, total, err, match):
    rb = mixed()
    with pytest.raises(err, match=match):
        rb.anneal(step, total)
    assert rb.offline_fraction == 0.5


def test_len_and_repr():
    rb = mixed(0.25, batch_size=32, online_rows=10)
    assert len(rb) == 210
    assert repr(rb) == (
        "OfflineToOnlineReplayBuffer(offline=OfflineDataset, offline_fraction=0.250, "
        "online_size=10, batch_size=32)"
    )


def test_extend_writes_online_only_and_returns_indices():
    rb = mixed(online_rows=0)
    idx = rb.extend(ted_rows(5, tag=ONLINE_TAG))
    assert idx.tolist() == [0, 1, 2, 3, 4]
    assert len(rb.offline_buffer) == 200 and len(rb.online_buffer) == 5
    assert rb.add(ted_rows(1, tag=ONLINE_TAG)[0]) == 5


def test_properties():
    off = offline_dataset()
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10)
    assert rb.offline_buffer is off
    assert isinstance(rb.online_buffer, ReplayBuffer)
    assert rb.online_buffer.storage.max_size == 10
    assert rb.offline_fraction == 0.5


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(), ValueError, "Provide one of online_storage or online_capacity"),
        (dict(online_capacity=10, online_storage=LazyTensorStorage(10)), ValueError, "not both"),
        (
            dict(online_capacity=10, offline_fraction=0.0),
            ValueError,
            r"offline_fraction must be in \(0, 1\) \(exclusive\), got 0.0",
        ),
        (dict(online_capacity=10, offline_fraction=1.0), ValueError, r"must be in \(0, 1\)"),
        (
            dict(online_capacity=10, offline_fraction=float("nan")),
            ValueError,
            "must be a finite number",
        ),
        (
            dict(online_capacity=10, offline_fraction=float("inf")),
            ValueError,
            "must be a finite number",
        ),
        (
            dict(online_capacity=10, offline_fraction="0.5"),
            TypeError,
            "offline_fraction must be a float, got str",
        ),
        (
            dict(online_capacity=0),
            ValueError,
            "online_capacity must be a positive number of rows, got 0",
        ),
        (
            dict(online_capacity=2.5),
            TypeError,
            "online_capacity must be a positive number of rows, got float",
        ),
        (
            dict(online_capacity=10, batch_size=0),
            ValueError,
            "batch_size must be a positive int, got 0",
        ),
        (
            dict(online_capacity=10, batch_size=-4),
            ValueError,
            "batch_size must be a positive int, got -4",
        ),
        (
            dict(online_capacity=10, generator="seed"),
            TypeError,
            "generator must be a torch.Generator or an int seed",
        ),
        (dict(online_capacity=10, transform=3), TypeError, "transform must be callable"),
        (
            dict(online_capacity=10, root="/data"),
            ValueError,
            r"dataset_kwargs are only forwarded when offline_dataset is a string; got \['root'\]",
        ),
        (
            dict(online_capacity=10, online_sampler="uniform"),
            TypeError,
            "sampler must be a mixreplay Sampler",
        ),
        (
            dict(online_storage=[1, 2]),
            TypeError,
            "storage must be a mixreplay storage .* or a TorchRL Storage, got list",
        ),
    ],
)
def test_construction_errors(kwargs, err, match):
    with pytest.raises(err, match=match):
        OfflineToOnlineReplayBuffer(offline_dataset(), **kwargs)


def test_offline_must_be_a_source_with_rows():
    with pytest.raises(
        TypeError, match="source 'offline' must be a mixreplay ReplayBuffer .* got int"
    ):
        OfflineToOnlineReplayBuffer(5, online_capacity=10)
    empty = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(ValueError, match="the offline dataset .* holds no rows"):
        OfflineToOnlineReplayBuffer(empty, online_capacity=10)


def test_string_id_needs_batch_size():
    with pytest.raises(
        ValueError, match="batch_size must be provided when offline_dataset is a string"
    ):
        OfflineToOnlineReplayBuffer("memmap:/nowhere", online_capacity=10)


def test_sample_needs_a_batch_size():
    rb = mixed(batch_size=None)
    with pytest.raises(
        ValueError,
        match=r"batch_size must be provided either in __init__ or sample\(\): pass sample\(batch_size\)",
    ):
        rb.sample()
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        rb.sample(0)
    with pytest.raises(TypeError, match="batch_size must be a positive int, got float"):
        rb.sample(2.0)


def test_schema_mismatch_names_every_key_and_writes_nothing():
    rb = mixed(online_rows=0)
    bad = ted_rows(4, tag=ONLINE_TAG)
    bad["next", "reward"] = bad["next", "reward"].double()
    bad["info"] = torch.zeros(4, 2)
    del bad["action"]
    with pytest.raises(SchemaMismatchError) as info:
        rb.extend(bad)
    msg = str(info.value)
    assert "offline and online rows differ in 3 key(s)" in msg
    assert "('next', 'reward'): offline float32[1], online float64[1] (dtype)" in msg
    assert "'action': in offline (float32[2]), missing in online" in msg
    assert "'info': in online (float32[2]), missing in offline" in msg
    assert "Fix:" in msg
    assert len(rb.online_buffer) == 0


def test_float64_offline_is_never_upcast_silently():
    off = OfflineDataset.from_tensordict(ted_rows(50).double())
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10, batch_size=8)
    with pytest.raises(
        SchemaMismatchError, match=r"'observation': offline float64\[3\], online float32\[3\]"
    ):
        rb.extend(ted_rows(4))


def test_later_writes_are_checked_against_the_first():
    rb = mixed()
    with pytest.raises(SchemaMismatchError, match="stored and written rows differ"):
        rb.extend(ted_rows(2, obs_dim=5))


def test_bookkeeping_index_key_does_not_break_mixing():
    off_td = ted_rows(100, tag=OFFLINE_TAG)
    off_td["index"] = torch.arange(100)  # what TorchRL datasets add
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(off_td), online_capacity=50, batch_size=20, generator=0
    )
    rb.extend(ted_rows(10, tag=ONLINE_TAG))
    batch = rb.sample()
    assert "index" not in batch.keys()
    assert (tags(batch) == OFFLINE_TAG).sum() == 10


def test_same_seed_same_batches_and_global_rng_untouched():
    a, b = mixed(generator=123), mixed(generator=123)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    for _ in range(5):
        x, y = a.sample(), b.sample()
        assert torch.equal(x["observation"], y["observation"])
        assert torch.equal(x["next", "reward"], y["next", "reward"])
    assert torch.equal(torch.get_rng_state(), state)
    c = mixed(generator=124)
    assert not torch.equal(
        c.sample()["next", "reward"], mixed(generator=123).sample()["next", "reward"]
    )


def test_offline_rows_drawn_uniformly():
    """Seeded chi-squared: each of 20 offline rows equally likely."""
    off = OfflineDataset.from_tensordict(ted_rows(20, tag=OFFLINE_TAG))
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10, generator=7)
    rb.extend(ted_rows(10, tag=ONLINE_TAG))
    counts = torch.zeros(20)
    for _ in range(200):
        r = rb.sample(100)["next", "reward"][:50].squeeze(-1).long()
        counts += torch.bincount(r, minlength=20)
    expected = counts.sum() / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 43.8  # 99.9th percentile of chi2 with 19 degrees of freedom


def test_sampled_batch_is_fresh_memory():
    rb = mixed()
    batch = rb.sample()
    batch["observation"].fill_(1e9)
    batch["next", "done"].fill_(True)
    assert float(rb.offline_buffer.storage.column("observation").max()) < 1e6
    assert float(rb.online_buffer.storage.column("observation").max()) < 1e6


def test_transform_is_applied_last():
    seen = []

    def transform(td):
        seen.append(td.batch_size)
        return td.set("scaled", td["observation"] * 2)

    rb = mixed(transform=transform, source_key="src")
    batch = rb.sample(10)
    assert seen == [torch.Size([10])] and "scaled" in batch.keys() and "src" in batch.keys()


def test_empty_everywhere_raises():
    offline = ReplayBuffer(storage=LazyTensorStorage(3))
    offline.extend(offline_dataset().sample(3))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10)
    assert rb.sample(4).batch_size == (4,)  # the fast path decided, the split remembered
    offline.empty()  # the offline side emptied behind the mixing buffer's back
    with pytest.raises(EmptyBufferError, match="every source is empty"):
        rb.sample(4)


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_online_storage_variants(kind, tmp_path):
    storage = (
        LazyTensorStorage(100) if kind == "memory" else LazyMemmapStorage(100, scratch_dir=tmp_path)
    )
    rb = OfflineToOnlineReplayBuffer(
        offline_dataset(), online_storage=storage, batch_size=30, offline_fraction=0.3, generator=0
    )
    rb.extend(ted_rows(40, tag=ONLINE_TAG))
    assert (tags(rb.sample()) == OFFLINE_TAG).sum() == 9
    assert rb.online_buffer.storage is storage


def test_offline_side_can_be_any_native_buffer():
    off = ReplayBuffer(storage=LazyMemmapStorage(300))
    off.extend(ted_rows(300, tag=OFFLINE_TAG))
    rb = OfflineToOnlineReplayBuffer(
        off, online_capacity=50, offline_fraction=0.75, batch_size=8, generator=0
    )
    rb.extend(ted_rows(10, tag=ONLINE_TAG))
    assert tags(rb.sample()).tolist() == [OFFLINE_TAG] * 6 + [ONLINE_TAG] * 2


def test_return_info_labels_sources_and_rows():
    rb = mixed(0.5, batch_size=10)
    batch, info = rb.sample(return_info=True)
    assert info["source"].tolist() == [0] * 5 + [1] * 5
    rewards = batch["next", "reward"].squeeze(-1)
    assert torch.equal(
        rewards, info["index"].float()
    )  # reward encodes the row number in both sources
    assert "weight" not in info.keys()


def test_unit_fraction_after_anneal_is_exactly_zero():
    rb = mixed(0.5)
    rb.anneal(10**9, 1)
    assert rb.offline_fraction == 0.0
