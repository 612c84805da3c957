"""``ReturnGated``: the offline share lowered as the agent's reported returns pass given levels."""

from __future__ import annotations

import functools
import json
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
from mixreplay.schedules import ReturnGated, Schedule
from tests.helpers import filled_rows

rows = functools.partial(filled_rows, key="observation", width=2)

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
returns = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def gates(draw):
    low = draw(returns)
    high = low + draw(st.floats(min_value=1e-3, max_value=1e6))
    return ReturnGated(
        draw(unit), draw(unit), low, high, window=draw(st.integers(min_value=1, max_value=5))
    )


# -- invariants --------------------------------------------------------------------------------


@settings(deadline=None)  # timings drift on a shared machine
@given(gate=gates(), reports=st.lists(returns, max_size=30), step=st.integers(0, 10**9))
def test_value_stays_between_start_and_end_and_only_moves_towards_end(gate, reports, step):
    a, b = gate.params()["start"], gate.params()["end"]
    lo, hi = min(a, b), max(a, b)
    distance = abs(gate(step) - b)
    assert gate(step) == a  # nothing reported yet
    for r in reports:
        gate.observe(r)
        v = gate(step)
        assert lo <= v <= hi
        assert abs(v - b) <= distance  # a ratchet: never back towards start
        distance = abs(v - b)


@settings(deadline=None)  # timings drift on a shared machine
@given(gate=gates(), reports=st.lists(returns, max_size=30))
def test_nothing_moves_before_a_full_window(gate, reports):
    window = gate.params()["window"]
    for i, r in enumerate(reports[: window - 1]):
        gate.observe(r)
        assert gate.best is None and gate(i) == gate.params()["start"]


@settings(deadline=None)  # timings drift on a shared machine
@given(gate=gates(), reports=st.lists(returns, max_size=30))
def test_best_is_the_best_window_mean(gate, reports):
    for r in reports:
        gate.observe(r)
    window = gate.params()["window"]
    means = [math.fsum(reports[i : i + window]) / window for i in range(len(reports) - window + 1)]
    assert gate.best == (max(means) if means else None)
    assert gate.params()["recent"] == reports[-window:]


@settings(deadline=None)  # timings drift on a shared machine
@given(gate=gates(), first=st.lists(returns, max_size=10), then=st.lists(returns, max_size=10))
def test_a_config_or_pickle_round_trip_carries_the_state(gate, first, then):
    for r in first:
        gate.observe(r)
    via_json = Schedule.from_config(json.loads(json.dumps(gate.to_config())))
    via_pickle = pickle.loads(pickle.dumps(gate))
    for copy in (via_json, via_pickle):
        assert copy == gate and repr(copy) == repr(gate) and copy(0) == gate(0)
    for r in then:  # the copies go on exactly as the original does
        for g in (gate, via_json, via_pickle):
            g.observe(r)
        assert via_json(0) == via_pickle(0) == gate(0) and via_json == gate


@settings(deadline=None)  # timings drift on a shared machine
@given(gate=gates(), reports=st.lists(returns, max_size=10), s1=st.integers(0, 10**9))
def test_the_step_is_ignored(gate, reports, s1):
    for r in reports:
        gate.observe(r)
    assert gate(s1) == gate(0)


# -- known values ------------------------------------------------------------------------------


def test_known_values():
    gate = ReturnGated(0.5, 0.0, low=400.0, high=800.0, window=2)
    assert repr(gate) == (
        "ReturnGated(start=0.5, end=0.0, low=400.0, high=800.0, window=2, best=None, recent=[])"
    )
    values = []
    for r in (300.0, 300.0, 500.0, 700.0, 900.0, 0.0):
        gate.observe(r)
        values.append(gate(0))
    # means of full windows: 300, 400, 600, 800, 450 -> best 300, 400, 600, 800, 800
    assert values == [0.5, 0.5, 0.5, 0.25, 0.0, 0.0]
    assert gate.best == 800.0 and gate.params()["recent"] == [900.0, 0.0]


def test_a_rising_gate_and_negative_returns():
    gate = ReturnGated(0.1, 0.9, low=-300.0, high=-100.0)
    gate.observe(-200.0)
    assert gate(0) == pytest.approx(0.5)


def test_numpy_and_torch_numbers_are_accepted():
    gate = ReturnGated(np.float32(0.5), torch.tensor(0.0), np.int64(0), torch.tensor(10.0))
    gate.observe(np.float64(5.0))
    gate.observe(torch.tensor(7.5))
    assert gate(0) == pytest.approx(0.125) and type(gate.best) is float


def test_not_hashable_since_observing_changes_it():
    with pytest.raises(TypeError, match="unhashable"):
        hash(ReturnGated(0.5, 0.0, 0.0, 1.0))


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"start": 1.5},
            ValueError,
            r"ReturnGated start must be a finite number in \[0, 1\], got 1.5",
        ),
        ({"end": -0.1}, ValueError, r"ReturnGated end must be a finite number in \[0, 1\]"),
        ({"low": float("nan")}, ValueError, "ReturnGated low must be a finite number, got nan"),
        ({"high": "800"}, TypeError, "ReturnGated high must be a finite return, got str '800'"),
        (
            {"low": 800.0, "high": 800.0},
            ValueError,
            r"ReturnGated high must be greater than low, got low=800.0, high=800.0",
        ),
        ({"window": 0}, ValueError, "ReturnGated window must be an int >= 1, got 0"),
        ({"window": 2.0}, TypeError, "ReturnGated window must be an int >= 1, got float 2.0"),
        ({"best": float("inf")}, ValueError, "ReturnGated best must be a finite number, got inf"),
        ({"recent": 5.0}, TypeError, "ReturnGated recent must be a list of returns, got float"),
        (
            {"recent": [1.0, 2.0, 3.0], "window": 2},
            ValueError,
            "ReturnGated recent holds at most window=2 returns, got 3",
        ),
        ({"recent": [1.0, None]}, TypeError, r"ReturnGated recent\[1\] must be a number"),
    ],
)
def test_bad_parameters(kwargs, error, message):
    args = {"start": 0.5, "end": 0.0, "low": 400.0, "high": 800.0, "window": 3, **kwargs}
    with pytest.raises(error, match=message):
        ReturnGated(**args)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (float("nan"), ValueError, "episode_return must be a finite number, got nan"),
        ("12", TypeError, "ReturnGated.observe episode_return must be a finite return, got str"),
        (None, TypeError, "ReturnGated.observe episode_return must be a finite return"),
    ],
)
def test_a_refused_report_changes_nothing(value, error, message):
    gate = ReturnGated(0.5, 0.0, 0.0, 10.0, window=2)
    gate.observe(4.0)
    gate.observe(6.0)
    before = gate.to_config()
    with pytest.raises(error, match=message):
        gate.observe(value)
    assert gate.to_config() == before


# -- in a buffer -------------------------------------------------------------------------------


def test_drives_the_buffer_and_survives_its_checkpoint(tmp_path):
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(rows(100, 0.0))
    gate = ReturnGated(0.5, 0.0, low=0.0, high=100.0)
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=100,
        offline_fraction=gate,
        batch_size=20,
        generator=0,
        source_key="source",
    )
    rb.extend(rows(10, 1.0))
    assert rb.sample()["source"].bincount(minlength=2).tolist() == [10, 10]
    gate.observe(75.0)
    rb.set_step(1)  # the buffer reads the schedule at its next step
    assert rb.offline_fraction == 0.125
    assert rb.sample()["source"].bincount(minlength=2).tolist() == [2, 18]

    path = tmp_path / "ckpt"
    rb.dumps(path)
    fresh = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=100,
        offline_fraction=ReturnGated(0.5, 0.0, low=0.0, high=100.0),
        batch_size=20,
        generator=1,
    )
    fresh.loads(path)
    restored = fresh.schedule
    assert isinstance(restored, ReturnGated) and restored == gate and restored.best == 75.0
    assert fresh.offline_fraction == 0.125
    restored.observe(100.0)  # the restored schedule is the one to report to
    fresh.set_step(2)
    assert fresh.offline_fraction == 0.0
