"""MixtureReplayBuffer: N named sources, exact counts, schedules, labels."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import (
    EmptyBufferError,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SchemaMismatchError,
)
from tests.conftest import ted_rows


def three_way(fractions=None, rows=(30, 30, 30), **kw):
    fractions = fractions or {"a": 0.5, "b": 0.3, "c": 0.2}
    mix = MixtureReplayBuffer(
        {name: LazyTensorStorage(100) for name in fractions},
        fractions,
        generator=0,
        source_key="src",
        **kw,
    )
    for i, (name, n) in enumerate(zip(fractions, rows)):
        if n:
            mix.extend(ted_rows(n, tag=float(i)), source=name)
    return mix


@given(b=st.integers(1, 500), w=st.lists(st.floats(0.01, 5.0), min_size=3, max_size=3))
@settings(max_examples=60, deadline=None)
def test_counts_are_within_one_row_of_exact_and_rows_carry_their_source(b, w):
    fr = dict(zip("abc", w))
    mix = three_way(fr)
    for _ in range(3):
        batch = mix.sample(b)
        counts = torch.bincount(batch["src"], minlength=3).tolist()
        assert sum(counts) == b
        for c, x in zip(counts, w):
            quota = b * x / sum(w)
            assert math.floor(quota) <= c <= math.ceil(quota)  # the floor or the ceiling
        # source i was filled with the value i
        assert torch.equal(batch["action"][:, 0], batch["src"].float())
        assert (batch["src"].diff() >= 0).all()  # sources in order


@given(
    w=st.lists(
        st.one_of(st.just(0.0), st.floats(0.001, 10.0), st.integers(1, 7)), min_size=2, max_size=6
    ),
    size=st.sampled_from([1, 2, 3, 5, 10, 64, 256]),
    batches=st.integers(1, 40),
    varying=st.lists(st.sampled_from([1, 2, 3, 5, 10, 64, 256]), min_size=1, max_size=40),
)
@settings(max_examples=80, deadline=None)
def test_the_long_run_share_converges_to_the_weights(w, size, batches, varying):
    """The remainder is carried: at one batch size each source's total stays within one
    row of its quota after any number of batches; when the batch size changes from batch
    to batch, within two (the PD2 bound assumes fixed quotas; 1.5 rows is the worst seen)."""
    if sum(w) == 0:
        w = [1.0] + w[1:]
    names = [f"s{i}" for i in range(len(w))]
    for sizes, bound in (([size] * batches, 1), (varying, 2)):
        mix = MixtureReplayBuffer(
            {n: LazyTensorStorage(8) for n in names},
            dict(zip(names, w)),
            generator=0,
            source_key="src",
        )
        for i, n in enumerate(names):
            mix.extend(ted_rows(3, tag=float(i)), source=n)
        totals = [0] * len(w)
        drawn = 0
        for b in sizes:
            counts = torch.bincount(mix.sample(b)["src"], minlength=len(w)).tolist()
            totals = [t + c for t, c in zip(totals, counts)]
            drawn += b
            for t, x in zip(totals, w):
                assert abs(t - drawn * x / sum(w)) < bound + 1e-9


def test_equal_weights_rotate_the_extra_row():
    """Weights 1:1:1 at B=10 no longer give the first source +33 % for ever (4/3/3 each time)."""
    mix = three_way({"a": 1, "b": 1, "c": 1})
    per_batch = [torch.bincount(mix.sample(10)["src"], minlength=3).tolist() for _ in range(3)]
    assert per_batch == [[4, 3, 3], [3, 4, 3], [3, 3, 4]]
    assert torch.bincount(mix.sample(3000)["src"], minlength=3).tolist() == [1000, 1000, 1000]


def test_the_carry_is_saved_and_restored(tmp_path):
    a = three_way({"a": 1, "b": 1, "c": 1})
    a.sample(10)
    a.dumps(tmp_path / "ck")
    b = three_way({"a": 1, "b": 1, "c": 1})
    b.loads(tmp_path / "ck")
    for _ in range(4):
        assert torch.equal(a.sample(10)["src"], b.sample(10)["src"])


def test_two_source_mixture_agrees_with_offline_to_online_on_exact_splits():
    """Where ``f * B`` is a whole number both give it; otherwise the mixture carries the rest."""
    off = OfflineDataset.from_tensordict(ted_rows(100, tag=0.0))
    for f in [0.1, 0.25, 0.5, 0.75]:
        o2o = OfflineToOnlineReplayBuffer(
            off, online_capacity=50, offline_fraction=f, generator=0, source_key="s"
        )
        o2o.extend(ted_rows(20, tag=1.0))
        mix = MixtureReplayBuffer(
            {"offline": off, "online": LazyTensorStorage(50)},
            {"offline": f, "online": 1 - f},
            generator=0,
            source_key="s",
        )
        mix.extend(ted_rows(20, tag=1.0), source="online")
        for b in [4, 20, 100, 256]:
            if (f * b).is_integer():
                assert torch.equal(o2o.sample(b)["s"], mix.sample(b)["s"])
    # 0.3 of 5 rows: the reference rounds every batch (2 of 5 for ever, 0.4); the mixture carries
    o2o = OfflineToOnlineReplayBuffer(
        off, online_capacity=50, offline_fraction=0.3, generator=0, source_key="s"
    )
    o2o.extend(ted_rows(20, tag=1.0))
    mix = MixtureReplayBuffer(
        {"offline": off, "online": LazyTensorStorage(50)},
        {"offline": 0.3, "online": 0.7},
        generator=0,
        source_key="s",
    )
    mix.extend(ted_rows(20, tag=1.0), source="online")
    assert sum(int((o2o.sample(5)["s"] == 0).sum()) for _ in range(10)) == 20 == 10 * round(0.3 * 5)
    assert sum(int((mix.sample(5)["s"] == 0).sum()) for _ in range(10)) == 15


def test_empty_sources_are_skipped_and_share_redistributed():
    mix = three_way(rows=(30, 0, 30))
    counts = torch.bincount(mix.sample(70)["src"], minlength=3).tolist()
    assert counts == [50, 0, 20]  # 0.5 : 0.2 over the live sources
    assert len(mix) == 60


def test_schedules_move_with_set_step():
    from mixreplay.schedules import Linear

    mix = three_way({"a": Linear(1.0, 0.0, 10), "b": 0.5, "c": 0.5})
    assert torch.bincount(mix.sample(100)["src"], minlength=3).tolist() == [50, 25, 25]
    mix.set_step(10)
    assert mix.fractions == {"a": 0.0, "b": 0.5, "c": 0.5}
    assert torch.bincount(mix.sample(100)["src"], minlength=3).tolist() == [0, 50, 50]


def test_any_buffer_as_source_and_samplers_for_storages():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(ted_rows(10, tag=0.0))
    from mixreplay import RandomSampler

    mix = MixtureReplayBuffer(
        {"a": rb, "b": LazyTensorStorage(10)}, {"a": 1, "b": 1}, samplers={"b": RandomSampler()}
    )
    mix.extend(ted_rows(10, tag=1.0), source="b")
    assert mix.source("a") is rb
    assert mix.sample(4)["action"][:, 0].tolist() == [0.0, 0.0, 1.0, 1.0]


def test_return_info():
    mix = three_way()
    batch, info = mix.sample(10, return_info=True)
    assert info["source"].tolist() == [0] * 5 + [1] * 3 + [2] * 2
    assert torch.equal(info["index"].float(), batch["next", "reward"].squeeze(-1))


@pytest.mark.parametrize(
    "sources, fractions, kw, err, match",
    [
        ({}, {}, {}, TypeError, "sources must be a non-empty mapping"),
        ({"a": LazyTensorStorage(4)}, [0.5], {}, TypeError, "fractions must be a mapping"),
        (
            {"a": LazyTensorStorage(4)},
            {"b": 1.0},
            {},
            ValueError,
            r"fractions must name exactly the sources: sources \['a'\], fractions \['b'\]",
        ),
        (
            {"a": LazyTensorStorage(4)},
            {"a": -1.0},
            {},
            ValueError,
            r"fractions\['a'\] must be a finite number >= 0, got -1.0",
        ),
        (
            {"a": LazyTensorStorage(4)},
            {"a": float("nan")},
            {},
            ValueError,
            "must be a finite number",
        ),
        (
            {"a": LazyTensorStorage(4), "b": LazyTensorStorage(4)},
            {"a": 0, "b": 0},
            {},
            ValueError,
            "fractions sum to 0",
        ),
        (
            {"a": LazyTensorStorage(4)},
            {"a": 1.0},
            {"samplers": {"z": None}},
            ValueError,
            r"samplers name unknown sources \['z'\]",
        ),
        ({"a": 3}, {"a": 1.0}, {}, TypeError, "source 'a' must be a mixreplay ReplayBuffer"),
    ],
)
def test_construction_errors(sources, fractions, kw, err, match):
    with pytest.raises(err, match=match):
        MixtureReplayBuffer(sources, fractions, **kw)


def test_extend_errors():
    mix = three_way()
    with pytest.raises(KeyError, match=r"no source named 'zzz'; sources are \['a', 'b', 'c'\]"):
        mix.extend(ted_rows(2), source="zzz")
    fresh = three_way(rows=(5, 0, 0))
    with pytest.raises(SchemaMismatchError, match=r"a and b rows differ"):
        fresh.extend(ted_rows(2).double(), source="b")


def test_offline_dataset_source_cannot_be_extended():
    off = OfflineDataset.from_tensordict(ted_rows(10))
    mix = MixtureReplayBuffer({"off": off, "on": LazyTensorStorage(5)}, {"off": 1, "on": 1})
    with pytest.raises(TypeError, match="read-only"):
        mix.extend(ted_rows(2), source="off")


def test_all_empty_raises():
    mix = three_way(rows=(0, 0, 0))
    with pytest.raises(EmptyBufferError, match=r"every source is empty \(a, b, c\)"):
        mix.sample(4)


def test_repr_and_reproducibility():
    a, b = three_way(), three_way()
    assert (
        repr(a)
        == "MixtureReplayBuffer(a: 30 rows @ 0.500, b: 30 rows @ 0.300, c: 30 rows @ 0.200, batch_size=None)"
    )
    for _ in range(3):
        assert torch.equal(a.sample(50)["observation"], b.sample(50)["observation"])
