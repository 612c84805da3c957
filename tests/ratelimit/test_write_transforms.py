"""Write-side transforms under a rate limiter: what is counted, what ``err.written`` means.

Every buffer cuts the *input* of an ``extend`` into parts, runs each part through the
write-side transforms, and reserves the rows the part stores: a transform that drops rows
counts only the rows kept, one that makes more rows waits until they all fit, and
``err.written`` counts input rows, so ``extend(data[err.written:])`` resumes exactly.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RateLimitTimeoutError,
    ReplayBuffer,
    SampleToInsertRatio,
)
from tests.helpers import float_rows as rows
from tests.helpers import run_threads

KINDS = ["replay", "offline_to_online", "mixture"]

# UTD 2 at batch 4: 8 rows sampled per row inserted; 2 rows before the first sample; band [0, 32]
LIMIT = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2, error_buffer=16)


def keep_even(td):
    return td[td["x"] % 2 == 0]


def doubled(td):
    return torch.cat([td, td])


def buffer(kind: str, transform, limiter=LIMIT):
    """A limited buffer whose online rows go through the write side ``transform``."""
    if kind == "replay":
        rb = ReplayBuffer(
            storage=LazyTensorStorage(100), batch_size=4, generator=0, rate_limiter=limiter
        )
        rb.append_transform(transform, invert=True)
        return rb, rb
    offline = OfflineDataset.from_tensordict(TensorDict({"x": -torch.arange(1.0, 51.0)}, [50]))
    if kind == "offline_to_online":
        rb = OfflineToOnlineReplayBuffer(
            offline, online_capacity=100, batch_size=4, generator=0, rate_limiter=limiter
        )
        rb.online_buffer.append_transform(transform, invert=True)
        return rb, rb.online_buffer
    online = ReplayBuffer(storage=LazyTensorStorage(100), generator=0)
    online.append_transform(transform, invert=True)
    rb = MixtureReplayBuffer(
        {"off": offline, "on": online},
        {"off": 0.5, "on": 0.5},
        batch_size=4,
        generator=0,
        rate_limiter=limiter,
    )
    return rb, online


def extend(rb, data, timeout=0):
    if isinstance(rb, MixtureReplayBuffer):
        return rb.extend(data, source="on", timeout=timeout)
    return rb.extend(data, timeout=timeout)


def stored(online) -> list[float]:
    return online[: len(online)]["x"].tolist() if len(online) else []


def in_band(rb, limiter=LIMIT) -> bool:
    i, s, _ = rb.rate_limiter_counts
    return limiter.min_diff <= limiter.error(i, s) <= limiter.max_diff


def sample_while_allowed(rb) -> None:
    for _ in range(100):
        try:
            rb.sample(timeout=0)
        except RateLimitTimeoutError:
            return


# -- a part whose rows are all dropped ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_whose_rows_are_all_dropped_joins_the_slots_of_the_others(kind):
    rb, online = buffer(kind, keep_even)
    # 2 rows fit while filling up, then 2 more in the band: the first part [1, 3, 5, 7]
    # stores nothing, the second [0, 2, 4, 6] all of its rows
    data = TensorDict({"x": torch.tensor([1.0, 3, 5, 7, 0, 2, 4, 6])}, [8])
    index = extend(rb, data)
    assert index.tolist() == [0, 1, 2, 3]  # 1-D slots, the rows the second part wrote
    assert stored(online) == [0.0, 2.0, 4.0, 6.0]
    assert rb.rate_limiter_counts == (4, 0, 4)


@pytest.mark.parametrize("kind", KINDS)
def test_a_timeout_after_a_part_that_stored_nothing_keeps_written_and_index(kind):
    rb, online = buffer(kind, keep_even)
    data = TensorDict({"x": torch.tensor([1.0, 3, 5, 7, 0, 2, 4, 6, 8, 10])}, [10])
    with pytest.raises(RateLimitTimeoutError) as caught:
        extend(rb, data)
    assert caught.value.written == 8  # input rows consumed: the two parts that went in
    assert caught.value.index.tolist() == [0, 1, 2, 3]
    assert stored(online) == [0.0, 2.0, 4.0, 6.0]


# -- err.written counts input rows: the resume recipe is exact ----------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_resuming_from_err_written_writes_every_kept_row_once(kind):
    rb, online = buffer(kind, keep_even)
    data, calls = rows(20), 0
    while True:
        calls += 1
        try:
            extend(rb, data)
            break
        except RateLimitTimeoutError as err:
            assert 0 <= err.written < data.batch_size[0]
            data = data[err.written :]  # the documented recipe
            sample_while_allowed(rb)
            assert in_band(rb)
    assert calls > 1  # the limiter held it at least once
    assert stored(online) == [float(x) for x in range(0, 20, 2)]
    assert rb.rate_limiter_counts.inserts == 10  # the rows kept, each counted once


# -- a transform that makes more rows than it was given -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_an_expanding_transform_keeps_the_counts_in_the_band(kind):
    rb, online = buffer(kind, doubled)
    extend(rb, rows(1))  # 2 rows while filling up: error 16 of [0, 32]
    extend(rb, rows(1, 1))  # 2 more: 32
    assert rb.rate_limiter_counts == (4, 0, 4)
    with pytest.raises(RateLimitTimeoutError) as caught:
        extend(rb, rows(1, 2))  # its 2 rows would take the error to 48
    assert caught.value.written == 0
    assert rb.rate_limiter_counts == (4, 0, 4) and in_band(rb)
    for _ in range(3):
        rb.sample(timeout=0)  # 12 rows sampled: 48 - 12 = 36, still above the band
    with pytest.raises(RateLimitTimeoutError):
        extend(rb, rows(1, 2))  # the part goes in whole or not at all
    rb.sample(timeout=0)  # 16: both rows fit (48 - 16 = 32)
    extend(rb, rows(1, 2))
    assert stored(online) == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert rb.rate_limiter_counts == (6, 16, 6) and in_band(rb)


@pytest.mark.parametrize("kind", KINDS)
def test_an_expanding_transform_after_another_writers_rows_keeps_the_band(kind):
    rb, online = buffer(kind, doubled, SampleToInsertRatio(8, 1, 16))  # band [-8, 24]
    if kind == "mixture":
        other = ReplayBuffer(storage=LazyTensorStorage(100), generator=0)
        rb = MixtureReplayBuffer(
            {"a": online, "b": other},
            {"a": 0.5, "b": 0.5},
            batch_size=4,
            generator=0,
            rate_limiter=SampleToInsertRatio(8, 1, 16),
        )
        rb.extend(rows(2, 10), source="b", timeout=0)  # error 16
        with pytest.raises(RateLimitTimeoutError):
            rb.extend(rows(1), source="a", timeout=0)  # 2 rows: 32 > 24
        assert len(online) == 0
    else:
        extend(rb, rows(1))  # 2 rows: 16
        with pytest.raises(RateLimitTimeoutError):
            extend(rb, rows(1, 1))
    assert rb.rate_limiter_counts.inserts == 2 and in_band(rb, SampleToInsertRatio(8, 1, 16))


@pytest.mark.parametrize("kind", KINDS)
def test_a_part_too_big_for_the_band_ever_is_refused_before_it_is_written(kind):
    # 5 rows take 40 of a band 32 wide: no sample could ever make room for them at once
    rb, online = buffer(kind, lambda td: torch.cat([td] * 5))
    with pytest.raises(ValueError, match=r"extend of 1 rows: a write-side transform made the next rows into 5 rows, more than SampleToInsertRatio\(samples_per_insert=8, min_size_to_sample=2, error_buffer=16.0\) can ever let in at once \(5 rows take 40 of the band, which is 32 wide and must also hold a batch of 4\): a part's rows go in whole; widen the band \(error_buffer >= 22\)"):  # fmt: skip
        # would wait for good: under a watchdog that closes the buffer
        run_threads(lambda: extend(rb, rows(1), timeout=None), timeout=30, release=rb.close)
    assert len(online) == 0 and rb.rate_limiter_counts == (0, 0, 0)


def test_a_part_that_cannot_fit_before_sampling_starts_is_refused_not_waited_for():
    # band [60, 260] holds 24 rows beside a batch of 4 (192 + 4 <= 200), but with 10 rows held
    # of the 20 needed to sample no sample can make room: (10 + 24) * 8 = 272 > 260
    limiter = SampleToInsertRatio(8, 20, 100)

    def expand_big(td):
        return torch.cat([td[td["x"] < 100]] + [td[td["x"] >= 100]] * 24)

    rb, _ = buffer("replay", expand_big, limiter)
    rb.extend(rows(10), timeout=0)
    with pytest.raises(ValueError, match=r"into 24 rows, more than .* can ever let in at once \(10 rows are held, fewer than the 20 needed to sample, so no sample can make room\).* widen the band \(error_buffer >= 112\)"):  # fmt: skip
        run_threads(lambda: rb.extend(rows(1, 100), timeout=None), timeout=30, release=rb.close)
    assert len(rb) == 10 and rb.rate_limiter_counts == (10, 0, 10)


def test_add_with_an_expanding_transform_goes_in_whole_once_its_rows_fit():
    rb, _ = buffer("replay", doubled)
    row = TensorDict({"x": torch.tensor(0.0)}, [])
    assert rb.add(row, timeout=0) == 0
    assert rb.add(row, timeout=0) == 2
    assert rb.rate_limiter_counts == (4, 0, 4)
    with pytest.raises(RateLimitTimeoutError) as caught:
        rb.add(row, timeout=0)  # 2 rows: error 48 > 32
    assert caught.value.written == 0 and len(rb) == 4 and in_band(rb)
