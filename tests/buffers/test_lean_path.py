"""The hot path keeps a constant schedule's split between batches (issue 20 item 5): the kept
counts are always those a fresh computation gives, whatever happened in between."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer


def rows(n: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {"observation": torch.randn(n, 3, generator=g), "reward": torch.randn(n, 1, generator=g)},
        batch_size=[n],
    )


def fresh(rb: OfflineToOnlineReplayBuffer, batch_size: int) -> list[int]:
    return rb._split_counts(batch_size, [s.available() for s in rb._sources])


OPS = st.one_of(
    st.tuples(st.just("sample"), st.sampled_from([1, 7, 64, 256])),
    st.tuples(st.just("extend"), st.integers(1, 5)),
    st.tuples(st.just("fraction"), st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0])),
    st.tuples(st.just("anneal"), st.integers(0, 50)),
    st.tuples(st.just("set_step"), st.integers(0, 50)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, max_size=12))
def test_kept_counts_equal_fresh_counts(ops):
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(rows(50)),
        online_capacity=100,
        offline_fraction=0.5,
        generator=0,
    )
    for op, arg in ops:
        if op == "sample":
            batch, info = rb.sample(arg, return_info=True)
            counts = torch.bincount(info["source"], minlength=2).tolist()
            assert counts == fresh(rb, arg)
            assert batch.batch_size == torch.Size([arg])
        elif op == "extend":
            rb.extend(rows(arg, seed=arg))
        elif op == "fraction":
            rb._offline_fraction = arg
        elif op == "anneal":
            rb.anneal(arg, 25)
        else:
            rb.set_step(arg)
        for b in (1, 7, 64, 256):
            assert rb._counts(b) == fresh(rb, b)


def test_a_source_that_comes_alive_gets_its_share_at_once():
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(rows(50)),
        online_capacity=100,
        offline_fraction=0.25,
        generator=0,
    )
    assert rb._counts(8) == [8, 0]  # online empty: all offline (and kept)
    assert rb._counts(8) == [8, 0]
    rb.extend(rows(3))
    assert rb._counts(8) == [2, 6]
    rb.set_step(5)  # a constant fraction: the same split at any step
    assert rb._counts(8) == [2, 6]
    rb._offline_fraction = 0.5
    assert rb._counts(8) == [4, 4]


def test_an_annealed_split_follows_the_step():
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(rows(50)),
        online_capacity=100,
        offline_fraction=0.5,
        generator=0,
    )
    rb.extend(rows(20))
    rb.anneal(0, 100)
    assert rb._counts(100) == [50, 50]
    rb.set_step(50)  # the same schedule object at another step
    assert rb._counts(100) == [25, 75]
    rb.set_step(100)
    assert rb._counts(100) == [0, 100]
