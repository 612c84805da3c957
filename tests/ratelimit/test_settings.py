"""Rate limiters hold and check their settings; every bad setting is refused in one line.

Reverb's meaning (``reverb/rate_limiters.py`` and ``reverb/cc/rate_limiter.cc``):
``SampleToInsertRatio`` centres its band at ``samples_per_insert * min_size_to_sample``;
a row may be inserted while ``(inserts + 1) * spi - samples <= max_diff`` (free below
``min_size_to_sample``), a sample of ``n`` rows may go while ``inserts * spi - samples - n
>= min_diff`` (and the buffer holds ``min_size_to_sample`` rows).
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import (
    FrozenStorage,
    LazyTensorStorage,
    MinSize,
    MixtureReplayBuffer,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SampleToInsertRatio,
)
from mixreplay.errors import CheckpointError
from mixreplay.rate_limit import RateLimiter
from tests.helpers import float_rows as rows

# -- the settings ---------------------------------------------------------------------------


def test_sample_to_insert_ratio_centres_its_band_on_the_rows_needed_to_sample():
    lim = SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=10, error_buffer=8)
    assert (lim.min_diff, lim.max_diff) == (32, 48)  # 4 * 10 -/+ 8
    assert lim.samples_per_insert == 4.0 and lim.min_size_to_sample == 10
    pair = SampleToInsertRatio(4, 10, (0, 100))
    assert (pair.min_diff, pair.max_diff) == (0, 100) and pair.error_buffer == (0, 100)
    assert MinSize(5).min_diff == -math.inf and MinSize(5).max_diff == math.inf


@pytest.mark.parametrize(
    "lim",
    [MinSize(3), SampleToInsertRatio(2.5, 4, 10), SampleToInsertRatio(8, 2, (-5.0, 40.0))],
    ids=repr,
)
def test_limiters_compare_pickle_and_round_trip_their_config(lim):
    assert pickle.loads(pickle.dumps(lim)) == lim
    assert RateLimiter.from_config(lim.config()) == lim
    assert hash(RateLimiter.from_config(lim.config())) == hash(lim)
    assert eval(repr(lim)) == lim  # the repr is the constructor call
    assert lim != SampleToInsertRatio(3.0, 4, 10)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: SampleToInsertRatio(0, 1, 2), ValueError, r"samples_per_insert must be a finite number > 0, got 0\.0; samples_per_insert = UTD x batch_size"),
        (lambda: SampleToInsertRatio(-4, 1, 8), ValueError, r"samples_per_insert must be a finite number > 0, got -4\.0"),
        (lambda: SampleToInsertRatio(float("nan"), 1, 8), ValueError, r"samples_per_insert must be a finite number > 0, got nan"),
        (lambda: SampleToInsertRatio("4", 1, 8), TypeError, r"samples_per_insert must be a finite number > 0, got str '4'"),
        (lambda: SampleToInsertRatio(4, 0, 8), ValueError, r"min_size_to_sample must be a positive int \(online rows\), got 0"),
        (lambda: SampleToInsertRatio(4, 1.5, 8), TypeError, r"min_size_to_sample must be a positive int \(online rows\), got float 1\.5"),
        (lambda: SampleToInsertRatio(4, 1, -1), ValueError, r"error_buffer must be a finite number >= 0, got -1\.0; e\.g\. error_buffer=8, or a \(min_diff, max_diff\) pair"),
        (lambda: SampleToInsertRatio(4, 1, (1, 2, 3)), ValueError, r"error_buffer must be a number or a \(min_diff, max_diff\) pair, got tuple \(1, 2, 3\)"),
        (lambda: SampleToInsertRatio(4, 1, 3), ValueError, r"error_buffer=3 makes a band 6 rows wide, less than 2 \* max\(1, samples_per_insert\) = 8: sampling or inserting could wait for good; use error_buffer >= 4"),
        (lambda: SampleToInsertRatio(0.25, 1, 0.5), ValueError, r"makes a band 1 rows wide, less than 2 \* max\(1, samples_per_insert\) = 2"),
        (lambda: SampleToInsertRatio(4, 1, (10, 20)), ValueError, r"error_buffer=\(10, 20\) puts min_diff=10 above samples_per_insert \* min_size_to_sample = 4, the error once the buffer holds min_size_to_sample rows: sampling would never start; give a band that holds 4"),
        (lambda: MinSize(0), ValueError, r"min_size_to_sample must be a positive int \(online rows\), got 0; e\.g\. MinSize\(1000\)"),
        (lambda: MinSize(True), TypeError, r"min_size_to_sample must be a positive int \(online rows\), got bool True"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_in_one_line(make, error, match):
    with pytest.raises(error, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def test_a_band_above_its_ceiling_at_min_size_is_legal_but_warned_about():
    with pytest.warns(UserWarning, match=r"puts max_diff=20 below samples_per_insert \* min_size_to_sample = 40: inserts wait"):  # fmt: skip
        lim = SampleToInsertRatio(4, 10, (0, 20))
    assert lim.max_diff == 20


def test_a_corrupt_saved_limiter_is_a_checkpoint_error():
    with pytest.raises(CheckpointError, match=r"a rate limiter is saved as a dict with kind one of \['MinSize', 'SampleToInsertRatio'\], got \{'kind': 'Queue'\}"):  # fmt: skip
        RateLimiter.from_config({"kind": "Queue"})
    with pytest.raises(CheckpointError, match=r"the saved rate limiter is invalid: samples_per_insert must be a finite number > 0"):  # fmt: skip
        RateLimiter.from_config(
            {"kind": "SampleToInsertRatio", "samples_per_insert": -1, "min_size_to_sample": 1,
             "error_buffer": 4}
        )  # fmt: skip


# -- the rule, as pure functions --------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    spi=st.sampled_from([0.5, 1.0, 3.0, 7.5, 256.0, 1024.0]),
    m=st.integers(1, 50),
    eb_scale=st.floats(1.0, 8.0),
    inserts=st.integers(0, 10_000),
    samples=st.integers(0, 2_000_000),
    extra=st.integers(0, 60),
    n=st.integers(1, 200),
)
def test_inserts_allowed_is_the_longest_run_of_rows_each_allowed_alone(
    spi, m, eb_scale, inserts, samples, extra, n
):
    lim = SampleToInsertRatio(spi, m, max(1.0, spi) * eb_scale)
    size = min(inserts, m + extra)  # a ring may hold fewer rows than were inserted
    k = lim.inserts_allowed(inserts, samples, size, n)
    assert 0 <= k <= n

    def one_allowed(j: int) -> bool:  # Reverb's CanInsert for the (j+1)-th row
        if size + j + 1 <= m:
            return True
        return (inserts + j + 1) * spi - samples <= lim.max_diff

    expected = 0
    while expected < n and one_allowed(expected):
        expected += 1
    assert k == expected


@settings(max_examples=300, deadline=None)
@given(
    spi=st.sampled_from([0.5, 1.0, 3.0, 256.0]),
    m=st.integers(1, 50),
    inserts=st.integers(0, 10_000),
    samples=st.integers(0, 2_000_000),
    size=st.integers(0, 100),
    n=st.integers(1, 300),
)
def test_sample_allowed_is_reverbs_can_sample(spi, m, inserts, samples, size, n):
    lim = SampleToInsertRatio(spi, m, max(1.0, spi) * 2)
    expected = size >= m and inserts * spi - samples - n >= lim.min_diff
    assert lim.sample_allowed(inserts, samples, size, n) == expected
    assert MinSize(m).sample_allowed(inserts, samples, size, n) == (size >= m)
    assert MinSize(m).inserts_allowed(inserts, samples, size, n) == n


# -- a limiter on a buffer that cannot enforce it ---------------------------------------------


def test_a_limiter_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match=r"rate_limiter must be a mixreplay\.MinSize or mixreplay\.SampleToInsertRatio, got int 4"):  # fmt: skip
        ReplayBuffer(rate_limiter=4)


def test_the_base_rate_limiter_is_refused_at_construction_not_at_the_first_checkpoint():
    from mixreplay.rate_limit import RateLimiter

    with pytest.raises(TypeError, match=r"rate_limiter must be a mixreplay\.MinSize or mixreplay\.SampleToInsertRatio, got RateLimiter .* \(a RateLimiter without config\(\), which every checkpoint saves"):  # fmt: skip
        ReplayBuffer(rate_limiter=RateLimiter(1.0, 1, -10.0, 10.0))

    class Custom(RateLimiter):  # a subclass that can be saved is taken
        def config(self):
            return {"kind": "MinSize", "min_size_to_sample": self.min_size_to_sample}

    rb = ReplayBuffer(rate_limiter=Custom(1.0, 1, -10.0, 10.0))
    assert rb.state_dict()["rate_limiter"]["limiter"]["kind"] == "MinSize"


def test_a_buffer_that_takes_no_inserts_refuses_a_limiter():
    frozen = FrozenStorage.from_tensordict(rows(10))
    with pytest.raises(ValueError, match=r"rate_limiter=MinSize\(min_size_to_sample=1\) on a ReplayBuffer that takes no inserts \(no writable storage\)"):  # fmt: skip
        ReplayBuffer(storage=frozen, rate_limiter=MinSize(1))
    with pytest.raises(ValueError, match=r"on a MixtureReplayBuffer that takes no inserts"):
        MixtureReplayBuffer(
            {"a": ReplayBuffer(storage=frozen)}, {"a": 1.0}, rate_limiter=MinSize(1)
        )


def test_a_min_size_the_buffer_can_never_hold_is_refused():
    with pytest.raises(ValueError, match=r"min_size_to_sample=2000 is more than the 1000 online rows this ReplayBuffer can hold, so sampling would wait for good; use min_size_to_sample <= 1000"):  # fmt: skip
        ReplayBuffer(storage=LazyTensorStorage(1000), rate_limiter=MinSize(2000))
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(rows(100))
    # the offline rows are never inserts: only the online ring's capacity counts
    with pytest.raises(ValueError, match=r"more than the 50 online rows this OfflineToOnlineReplayBuffer can hold"):  # fmt: skip
        OfflineToOnlineReplayBuffer(offline, online_capacity=50, rate_limiter=MinSize(60))


def test_a_batch_the_band_cannot_hold_beside_an_insert_is_refused():
    lim = SampleToInsertRatio(8, 1, 8)  # a band 16 rows wide
    with pytest.raises(ValueError, match=r"SampleToInsertRatio\(samples_per_insert=8, min_size_to_sample=1, error_buffer=8\.0\) cannot limit batches of 16 rows: its band is 16 rows wide, less than samples_per_insert \+ batch_size = 24, so a sample and an insert could both wait for good; widen the band to error_buffer >= 12"):  # fmt: skip
        ReplayBuffer(batch_size=16, rate_limiter=lim)
    rb = ReplayBuffer(rate_limiter=lim)
    rb.extend(rows(1))
    state = rb.state_dict()
    with pytest.raises(ValueError, match=r"cannot limit batches of 9 rows"):
        rb.sample(9, timeout=0)
    assert rb.rate_limiter_counts == (1, 0, 1)  # refused: nothing counted, nothing drawn
    assert torch.equal(rb.generator.get_state(), state["_rng"]["state"])
    assert rb.sample(8, timeout=0).batch_size == (8,)


def test_a_source_with_a_limiter_of_its_own_is_refused():
    online = ReplayBuffer(storage=LazyTensorStorage(10), rate_limiter=MinSize(1))
    with pytest.raises(ValueError, match=r"source 'online' has a rate_limiter of its own \(MinSize\(min_size_to_sample=1\)\), which the MixtureReplayBuffer would draw past; give the rate limiter to the MixtureReplayBuffer instead"):  # fmt: skip
        MixtureReplayBuffer({"online": online}, {"online": 1.0})
    offline = ReplayBuffer(storage=LazyTensorStorage(10), rate_limiter=MinSize(1))
    offline.extend(rows(10))
    with pytest.raises(ValueError, match=r"source 'offline' has a rate_limiter of its own"):
        OfflineToOnlineReplayBuffer(offline, online_capacity=10)


@pytest.mark.parametrize(
    ("timeout", "error", "match"),
    [
        (-1, ValueError, r"timeout must be a finite number >= 0, got -1\.0; e\.g\. timeout=30\.0, or None to wait until allowed"),
        ("1", TypeError, r"timeout must be seconds >= 0 or None, got str '1'"),
        (float("nan"), ValueError, r"timeout must be a finite number >= 0, got nan"),
    ],
)  # fmt: skip
def test_a_bad_timeout_is_refused_and_changes_nothing(timeout, error, match):
    rb = ReplayBuffer(batch_size=2, generator=0, rate_limiter=MinSize(1))
    with pytest.raises(error, match=match):
        rb.extend(rows(3), timeout=timeout)
    assert len(rb) == 0 and rb.rate_limiter_counts == (0, 0, 0)
    rb.extend(rows(3))
    with pytest.raises(error, match=match):
        rb.sample(timeout=timeout)
    assert rb.rate_limiter_counts == (3, 0, 3)


def test_a_buffer_reports_its_limiter_and_counts():
    lim = SampleToInsertRatio(4, 2, 8)
    rb = ReplayBuffer(batch_size=2, generator=0, rate_limiter=lim)
    assert rb.rate_limiter == lim and rb.rate_limiter_counts == (0, 0, 0)
    rb.extend(rows(3))
    rb.sample()
    counts = rb.rate_limiter_counts
    assert counts == (3, 2, 3) and counts.samples_per_insert == pytest.approx(2 / 3)
    plain = ReplayBuffer()
    assert plain.rate_limiter is None and plain.rate_limiter_counts is None
    assert math.isnan(type(counts)(0, 0, 0).samples_per_insert)
