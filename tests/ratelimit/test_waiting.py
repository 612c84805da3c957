"""What waits, for how long, what wakes it, and what goes on meanwhile.

Every call that may wait runs in a thread under a watchdog (``run_threads``): a hang
fails the test after closing the buffer, never the suite.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    BufferClosedError,
    LazyTensorStorage,
    MinSize,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RateLimitTimeoutError,
    ReplayBuffer,
    SampleToInsertRatio,
)
from mixreplay.samplers import PrioritizedSampler
from tests.helpers import float_rows as rows
from tests.helpers import run_threads

OFFLINE = OfflineDataset.from_tensordict(
    TensorDict({"x": -torch.arange(1.0, 101.0)}, [100])
)  # offline rows are negative, online ones count from 0


# UTD 2 at batch 4: 8 rows sampled per row inserted; 2 rows before the first sample
LIMIT = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2, error_buffer=16)


def buffer(kind: str, limiter=LIMIT, **kw):
    if kind == "replay":
        return ReplayBuffer(
            storage=LazyTensorStorage(100), batch_size=4, generator=0, rate_limiter=limiter, **kw
        )
    if kind == "offline_to_online":
        return OfflineToOnlineReplayBuffer(
            OFFLINE, online_capacity=100, batch_size=4, generator=0, rate_limiter=limiter, **kw
        )
    return MixtureReplayBuffer(
        {"off": OFFLINE, "on": LazyTensorStorage(100)},
        {"off": 0.5, "on": 0.5},
        batch_size=4,
        generator=0,
        rate_limiter=limiter,
        **kw,
    )


def write(rb, data, **kw):
    if isinstance(rb, MixtureReplayBuffer):
        return rb.extend(data, source="on", **kw)
    return rb.extend(data, **kw)


KINDS = ["replay", "offline_to_online", "mixture"]


# -- timeouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_sample_below_min_size_times_out_naming_the_limiter_and_counts(kind):
    rb = buffer(kind)
    write(rb, rows(1))
    generator = rb.generator.get_state()
    with pytest.raises(RateLimitTimeoutError, match=r"^sample\(4\) waited 0\.05 s for SampleToInsertRatio\(samples_per_insert=8, min_size_to_sample=2, error_buffer=16\.0\): 1 inserts, 0 samples, 1 online rows held of the 2 needed to sample; inserts are behind: the collectors must write more rows before the learner samples again \(or pass a longer timeout=\)$") as info:  # fmt: skip
        rb.sample(timeout=0.05)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert (err.limiter, err.inserts, err.samples, err.size, err.written) == (LIMIT, 1, 0, 1, 0)
    # a refused sample changes nothing: no count, no draw
    assert rb.rate_limiter_counts == (1, 0, 1)
    assert torch.equal(rb.generator.get_state(), generator)


@pytest.mark.parametrize("kind", KINDS)
def test_a_sample_past_the_band_times_out_and_draws_nothing(kind):
    rb = buffer(kind)
    write(rb, rows(4))  # error 32: room for 8 batches of 4
    for _ in range(8):
        rb.sample(timeout=0)
    generator = rb.generator.get_state()
    with pytest.raises(RateLimitTimeoutError, match=r"4 inserts, 32 samples, error inserts \* samples_per_insert - samples = 0, band \[0, 32\]; inserts are behind"):  # fmt: skip
        rb.sample(timeout=0)
    assert torch.equal(rb.generator.get_state(), generator)
    assert rb.rate_limiter_counts == (4, 32, 4)


@pytest.mark.parametrize("kind", KINDS)
def test_an_extend_goes_in_as_the_band_allows_and_says_how_much_went_in(kind):
    rb = buffer(kind)
    with pytest.raises(RateLimitTimeoutError, match=r"^extend of 10 rows waited 0\.02 s for SampleToInsertRatio.*: 4 inserts, 0 samples, error inserts \* samples_per_insert - samples = 32, band \[0, 32\]; samples are behind: the learner must sample more before more rows go in \(or pass a longer timeout=\); 4 of its rows were written \(extend the rest\)$") as info:  # fmt: skip
        write(rb, rows(10), timeout=0.02)
    err = info.value
    assert err.written == 4 and err.index.tolist() == [0, 1, 2, 3]
    assert rb.rate_limiter_counts == (4, 0, 4)
    online = rb if kind == "replay" else rb.online_buffer if kind != "mixture" else rb.source("on")
    assert online[:]["x"].tolist() == [0.0, 1.0, 2.0, 3.0]  # the first rows, in order
    # the rest goes in once samples make room: 6 batches (24 rows) for 3 inserts
    for _ in range(6):
        rb.sample()
    assert write(rb, rows(6, 4)[:3], timeout=0).tolist() == [4, 5, 6]


@pytest.mark.parametrize("kind", KINDS)
def test_an_extend_waits_until_samples_make_room_then_returns_every_slot(kind):
    rb = buffer(kind)

    def learner():
        n = 0
        while rb.rate_limiter_counts.inserts < 30:
            try:
                rb.sample(timeout=0.01)
                n += 1
            except RateLimitTimeoutError:
                pass
        return n

    index, batches = run_threads(lambda: write(rb, rows(30), timeout=30), learner, release=rb.close)
    assert index.tolist() == list(range(30))  # one call, in parts, every slot in order
    assert rb.rate_limiter_counts.inserts == 30 and batches >= (30 - 4) * 2


def test_a_write_whose_rows_all_fit_counts_them_at_once():
    rb = buffer("replay", limiter=MinSize(3))
    assert rb.extend(rows(50), timeout=0).tolist() == list(range(50))  # MinSize never holds inserts
    assert rb.add(rows(1, 50)[0], timeout=0) == 50
    assert rb.rate_limiter_counts == (51, 0, 51)


# -- close and kill -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prefetch", [None, 2])
def test_close_wakes_every_waiter_with_an_error(kind, prefetch):
    rb = buffer(kind, prefetch=prefetch)
    write(rb, rows(4))
    for _ in range(8):
        rb.sample()
    # the band is at its floor: samples wait for inserts
    woken: list[str] = []
    started = threading.Barrier(3)

    def sampler():
        started.wait()
        with pytest.raises(BufferClosedError, match=r"the buffer was closed: its rate limiter \(SampleToInsertRatio.*\) lets no call through any more"):  # fmt: skip
            rb.sample(timeout=None)
        woken.append("sample")

    def closer():
        started.wait()
        while not rb._gate._cond._waiters:
            time.sleep(0.005)
        rb.close()

    run_threads(sampler, sampler, closer, timeout=60, release=rb.close)
    assert woken == ["sample", "sample"]
    with pytest.raises(BufferClosedError):  # and every later call
        write(rb, rows(1))
    with pytest.raises(BufferClosedError):
        rb.sample(timeout=0)


def test_close_wakes_a_waiting_extend():
    rb = buffer("offline_to_online")

    def collector():
        with pytest.raises(BufferClosedError):
            rb.extend(rows(100), timeout=None)  # 4 rows go in, then it waits for samples
        return len(rb.online_buffer)

    def closer():
        while rb.rate_limiter_counts.inserts < 4 or not rb._gate._cond._waiters:
            time.sleep(0.005)
        rb.close()

    written, _ = run_threads(collector, closer, release=rb.close)
    assert written == 4


# -- nothing else waits behind a waiting call -----------------------------------------------


def test_while_a_sample_waits_every_other_call_goes_on(tmp_path):
    rb = OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=100,
        batch_size=4,
        generator=0,
        online_sampler=PrioritizedSampler(alpha=0.6, beta=0.4),
        rate_limiter=LIMIT,
    )
    rb.extend(rows(4))
    for _ in range(8):
        rb.sample()
    got = []

    def learner():
        got.append(rb.sample(timeout=60))  # waits: the band is at its floor

    def others():
        while not rb._gate._cond._waiters:
            time.sleep(0.005)
        # the learner waits holding no lock: these go on
        assert len(rb) == 104
        state = rb.state_dict()
        assert state["rate_limiter"]["samples"] == 32
        rb.dumps(tmp_path / "ckpt")
        rb.online_buffer.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 6.0]))
        assert got == []  # still waiting
        rb.add(rows(1, 4)[0], timeout=5)  # the insert it waits for

    run_threads(learner, others, release=rb.close)
    assert got[0].batch_size == (4,)
    assert rb.rate_limiter_counts == (5, 36, 5)


def test_while_an_extend_waits_samples_and_checkpoints_go_on(tmp_path):
    rb = buffer("offline_to_online")

    def collector():
        return rb.extend(rows(8), timeout=60)  # 4 go in now, 4 once samples make room

    def learner():
        while not rb._gate._cond._waiters:
            time.sleep(0.005)
        assert len(rb.online_buffer) == 4
        rb.dumps(tmp_path / "ckpt")
        for _ in range(8):  # room for 4 more rows
            rb.sample(timeout=5)

    index, _ = run_threads(collector, learner, release=rb.close)
    assert index.tolist() == list(range(8))


# -- prefetching: the worker never waits; a batch counts when it is handed out ---------------


def test_a_prefetched_batch_counts_when_sample_hands_it_out(tmp_path):
    rb = buffer("offline_to_online", prefetch=3)
    rb.extend(rows(4))
    rb.sample()
    assert rb.prefetch == 3 and rb._prefetcher.ready == 3
    assert rb.rate_limiter_counts.samples == 4  # only the batch handed out counts
    rb.dumps(tmp_path / "ckpt")  # discards the batches drawn ahead: they never count
    assert rb.rate_limiter_counts.samples == 4
    for _ in range(7):
        rb.sample(timeout=0)
    with pytest.raises(RateLimitTimeoutError):  # batches are ready, but the band holds them
        rb.sample(timeout=0)
    assert rb.rate_limiter_counts == (4, 32, 4)


def test_a_prefetching_learner_waiting_for_inserts_never_blocks_the_writes():
    # every write waits for the worker's pending draws: a worker waiting for inserts would
    # deadlock here
    rb = buffer("offline_to_online", prefetch=2)
    rb.extend(rows(2))

    def learner():
        for _ in range(200):
            rb.sample(timeout=30)

    def collector():
        for i in range(2, 102):  # 102 rows in all: what 200 batches of 4 need, and more
            rb.add(rows(1, i)[0], timeout=30)

    run_threads(learner, collector, release=rb.close)
    i, s, _ = rb.rate_limiter_counts
    assert s == 800 and LIMIT.min_diff <= LIMIT.error(i, s) <= LIMIT.max_diff


# -- iteration ------------------------------------------------------------------------------


def test_iterating_a_limited_buffer_waits_for_the_band_too():
    rb = buffer("replay")
    rb.extend(rows(2))
    it = iter(rb)
    for _ in range(4):  # 2 inserts, error 16: 4 batches of 4
        next(it)
    assert rb.rate_limiter_counts == (2, 16, 2)
    rb.close()
    with pytest.raises(BufferClosedError):
        next(it)
