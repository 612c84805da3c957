"""The hot path keeps a constant schedule's split between batches: the kept
counts are always those a fresh computation gives, whatever happened in between."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer
from tests.helpers import random_rows as rows


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


def test_batches_drawn_through_kept_scratch_are_independent_and_right():
    offline = rows(50)
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(offline),
        online_capacity=100,
        offline_fraction=0.5,
        generator=0,
    )
    online = rows(30, seed=1)
    rb.extend(online)
    first, info = rb.sample(16, return_info=True)
    kept = first.clone()
    for b in (16, 16, 8, 16):  # the same split (scratch reused) and another one
        later, later_info = rb.sample(b, return_info=True)
        assert (first == kept).all()  # an earlier batch never changes
        for name, source in (("offline", offline), ("online", online)):
            mask = later_info["source"] == (0 if name == "offline" else 1)
            expect = source[later_info["index"][mask]]
            assert (later[mask].exclude("index") == expect).all()
    del info


def test_two_threads_sampling_at_once_get_their_own_rows():
    import threading

    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(rows(500)),
        online_capacity=1000,
        offline_fraction=0.5,
        generator=0,
    )
    data = rows(500, seed=1)
    rb.extend(data)
    offline = rows(500)
    bad: list[str] = []

    def work():
        for _ in range(200):
            batch, info = rb.sample(64, return_info=True)
            src = info["source"]
            expect = torch.where(
                (src == 0).unsqueeze(-1),
                offline["observation"][info["index"].clamp(max=499)],
                data["observation"][info["index"].clamp(max=499)],
            )
            if not torch.equal(batch["observation"], expect):
                bad.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


PLAN_OPS = st.one_of(
    st.tuples(st.just("sample"), st.sampled_from([None, 1, 7, 64])),
    st.tuples(st.just("extend"), st.integers(1, 5)),
    st.tuples(st.just("extend the offline side behind its back"), st.integers(1, 5)),
    st.tuples(st.just("empty the offline side behind its back"), st.just(0)),
    st.tuples(st.just("anneal"), st.integers(0, 50)),
    st.tuples(st.just("transform the offline side"), st.just(0)),
    st.tuples(st.just("transform the batches"), st.just(0)),
    st.tuples(st.just("prioritize"), st.just(0)),
)


def _double_reward(td):
    return td.set("reward", td["reward"] * 2)


#: how each buffer of the property below draws: whether sources gather straight into the packed
#: batch (else every source draws its rows as a TensorDict, then packs them), and whether info
#: is asked for (then indices are new tensors, not kept buffers, and weights are read)
WAYS = [(True, False), (True, True), (False, False), (False, True)]


@settings(max_examples=60, deadline=None)
@given(st.lists(PLAN_OPS, max_size=14), st.sampled_from(["offline-to-online", "mixture"]))
def test_every_way_of_drawing_gives_the_same_batches_and_generator_states(ops, kind):
    """One pipeline (DrawPlan): a source gathering straight into the packed batch or drawing
    its rows, with or without info, draws the same rows, leaves the same generator state and
    fails alike, whatever happened in between (writes, writes behind the buffer's back, a
    schedule, transforms on a source or on the batches, priorities)."""
    from mixreplay import LazyTensorStorage, MixtureReplayBuffer, PrioritizedSampler, ReplayBuffer

    buffers = []
    for packed, _ in WAYS:
        offline = ReplayBuffer(storage=LazyTensorStorage(200))
        offline.extend(rows(50))
        online = ReplayBuffer(
            storage=LazyTensorStorage(100), sampler=PrioritizedSampler(100, 0.8, 0.5)
        )
        if kind == "mixture":
            rb = MixtureReplayBuffer(
                {"off": offline, "on": online}, {"off": 1, "on": 2}, batch_size=16, generator=0
            )
        else:
            rb = OfflineToOnlineReplayBuffer(
                offline,
                online_storage=online.storage,
                online_sampler=online.sampler,
                offline_fraction=0.5,
                batch_size=16,
                generator=0,
            )
        rb._draw_packed = packed
        buffers.append((offline, rb))
    for step, (op, arg) in enumerate(ops):
        outcomes = []
        for (offline, rb), (_, info) in zip(buffers, WAYS):
            try:
                if op == "sample":
                    if info:
                        batch, got = rb.sample(arg, return_info=True)
                        outcomes.append((batch, got["index"], got["source"]))
                    else:
                        outcomes.append((rb.sample(arg), None, None))
                elif op == "extend":
                    data = rows(arg, seed=arg)
                    if kind == "mixture":
                        rb.extend(data, source="on")
                    else:
                        rb.extend(data)
                elif op == "extend the offline side behind its back":
                    offline.extend(rows(arg, seed=10 + arg))
                elif op == "empty the offline side behind its back":
                    offline.empty()
                elif op == "anneal":
                    if kind == "mixture":
                        rb.set_step(arg)
                    else:
                        rb.anneal(arg, 25)
                elif op == "transform the offline side":
                    offline.append_transform(_double_reward)
                elif op == "transform the batches":
                    rb.append_transform(_double_reward)
                else:
                    n = len(rb._sources[1])
                    if n:
                        p = torch.arange(1, n + 1, dtype=torch.float64)
                        rb._sources[1].obj.update_priority(torch.arange(n), p)
            except Exception as err:  # noqa: BLE001 - every way must fail alike
                outcomes.append((type(err), str(err)))
            outcomes.append(("generator", rb.generator.get_state()))
        first = outcomes[: len(outcomes) // len(WAYS)]
        for k in range(1, len(WAYS)):
            other = outcomes[k * len(first) : (k + 1) * len(first)]
            for a, b in zip(first, other):
                if a[0] == "generator":
                    assert torch.equal(a[1], b[1]), (step, op, WAYS[k])
                elif isinstance(a[0], type):
                    assert a == b, (step, op, WAYS[k])
                else:
                    assert (a[0] == b[0]).all(), (step, op, WAYS[k])
                    if a[1] is not None and b[1] is not None:
                        assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
