"""The counts are part of the checkpoint: a resumed run continues the same ratio.

Older checkpoints (no counts) still load, with the counts of a run that kept the ratio
for the rows they hold; so does a state saved with a limiter of other settings.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import pickle
import shutil
import threading
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MinSize,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RateLimitTimeoutError,
    ReplayBuffer,
    SampleToInsertRatio,
)
from mixreplay.errors import CheckpointError
from mixreplay.rate_limit import RateGate
from mixreplay.samplers import PrioritizedSampler
from mixreplay.schedules import Constant
from tests.helpers import float_rows as rows
from tests.helpers import run_threads

FIXTURES = Path(__file__).parents[1] / "fixtures"
OFFLINE = OfflineDataset.from_tensordict(TensorDict({"x": -torch.arange(1.0, 51.0)}, [50]))
LIMIT = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2, error_buffer=16)


def make(kind: str, limiter=LIMIT):
    if kind == "replay":
        return ReplayBuffer(
            storage=LazyTensorStorage(64), batch_size=4, generator=0, rate_limiter=limiter
        )
    if kind == "offline_to_online":
        return OfflineToOnlineReplayBuffer(
            OFFLINE, online_capacity=64, batch_size=4, generator=0, rate_limiter=limiter
        )
    return MixtureReplayBuffer(
        {"off": OFFLINE, "on": LazyTensorStorage(64)},
        {"off": 1.0, "on": 1.0},
        batch_size=4,
        generator=0,
        rate_limiter=limiter,
    )


def write(rb, data):
    if isinstance(rb, MixtureReplayBuffer):
        return rb.extend(data, source="on", timeout=0)
    return rb.extend(data, timeout=0)


def drain(rb) -> list[list[float]]:
    """Every batch the band lets through now, until it holds the next one back."""
    out = []
    while True:
        try:
            out.append(rb.sample(timeout=0)["x"].tolist())
        except RateLimitTimeoutError:
            return out


KINDS = ["replay", "offline_to_online", "mixture"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_buffer_continues_the_same_ratio(kind, tmp_path):
    rb = make(kind)
    write(rb, rows(3))
    for _ in range(5):
        rb.sample()
    rb.dumps(tmp_path / "ckpt")
    meta = json.loads((tmp_path / "ckpt" / "metadata.json").read_text())
    assert meta["state"]["rate_limiter"] == {
        "limiter": LIMIT.config(),
        "inserts": 3,
        "samples": 20,
    }
    twin = make(kind)
    twin.loads(tmp_path / "ckpt")
    assert twin.rate_limiter_counts == rb.rate_limiter_counts == (3, 20, 3)
    # the same batches let through, the same held back, the same inserts allowed after
    let_through = drain(twin)
    assert let_through == drain(rb) and len(let_through) == 1
    with pytest.raises(RateLimitTimeoutError) as a:
        write(rb, rows(10, 3))
    with pytest.raises(RateLimitTimeoutError) as b:
        write(twin, rows(10, 3))
    assert a.value.written == b.value.written == 4  # error 0: room for 4 inserts
    assert twin.rate_limiter_counts == rb.rate_limiter_counts


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_taken_while_a_collector_writes_holds_the_rows_and_their_count(kind):
    rb = make(kind, limiter=MinSize(1))  # never holds inserts back: the writes run flat out
    stop = threading.Event()

    def collector():
        i = 0
        while not stop.is_set():
            write(rb, rows(3, i))
            i += 3

    def saver():
        try:
            for _ in range(300):
                state = rb.state_dict()
                storage = (
                    state["storage"]
                    if kind == "replay"
                    else state["sources"]["online" if kind == "offline_to_online" else "on"][
                        "storage"
                    ]
                )
                # the rows saved are the rows counted: the count is made under the same lock
                assert state["rate_limiter"]["inserts"] == storage["write_count"]
        finally:
            stop.set()

    run_threads(collector, saver, release=rb.close)
    assert rb.rate_limiter_counts.inserts > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_is_counted_under_the_lock_that_guards_its_rows(kind, monkeypatch):
    # what makes the test above hold: a state (taken under the storage locks) sees a write's
    # rows and its count together, or neither
    rb = make(kind)
    online = {
        "replay": lambda: rb.storage,
        "offline_to_online": lambda: rb.online_buffer.storage,
        "mixture": lambda: rb.source("on").storage,
    }[kind]()
    held = []
    commit = RateGate.commit_insert

    def checked(self, *args):
        held.append(online.lock._is_owned())
        return commit(self, *args)

    monkeypatch.setattr(RateGate, "commit_insert", checked)
    write(rb, rows(3))
    with pytest.raises(RateLimitTimeoutError):
        write(rb, rows(10, 3))  # in parts: 1 more row fits
    assert held == [True, True]


def test_state_dict_round_trips_the_counts_and_pickling_keeps_them():
    rb = make("offline_to_online")
    write(rb, rows(4))
    rb.sample()
    state = rb.state_dict()
    twin = make("offline_to_online")
    twin.load_state_dict(state)
    assert twin.rate_limiter_counts == (4, 4, 4)
    copy = pickle.loads(pickle.dumps(rb))
    assert copy.rate_limiter_counts == (4, 4, 4) and copy.rate_limiter == LIMIT
    assert drain(copy) == drain(twin)


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_without_counts_starts_them_as_a_run_at_the_ratio(kind, caplog):
    plain = make(kind, limiter=None)
    write(plain, rows(6))
    state = plain.state_dict()
    assert "rate_limiter" not in state  # a buffer without a limiter saves what it always did
    rb = make(kind)
    with caplog.at_level(logging.INFO, logger="mixreplay.rate_limit"):
        rb.load_state_dict(state)
    # 6 rows held, 2 needed to sample: 6 inserts, and 8 * (6 - 2) samples, the band's centre
    assert rb.rate_limiter_counts == (6, 32, 6)
    assert "counting starts as a run at the ratio holding 6 rows" in caplog.text
    assert len(drain(rb)) == 4  # error 16, floor 0: 4 batches of 4


def test_a_buffer_without_a_limiter_loads_a_state_with_counts():
    rb = make("replay")
    write(rb, rows(4))
    plain = make("replay", limiter=None)
    plain.load_state_dict(rb.state_dict())
    assert len(plain) == 4 and plain.rate_limiter_counts is None


def test_a_state_saved_with_other_settings_restarts_the_counts_at_this_ratio(caplog):
    rb = make("replay", limiter=SampleToInsertRatio(2, 1, 8))
    write(rb, rows(5))
    rb.sample()
    rb.sample()
    twin = make("replay")
    with caplog.at_level(logging.WARNING, logger="mixreplay.rate_limit"):
        twin.load_state_dict(rb.state_dict())
    assert twin.rate_limiter_counts == (5, 24, 5)  # 8 * (5 - 2)
    assert "the state's rate limiter is SampleToInsertRatio(samples_per_insert=2" in caplog.text


@pytest.mark.parametrize(
    ("saved", "match"),
    [
        ([1, 2], r"rate_limiter must be a dict of the limiter and its counts, got \[1, 2\]"),
        ({"limiter": {"kind": "Stack"}, "inserts": 1, "samples": 0}, r"a rate limiter is saved as a dict with kind one of"),
        ({"limiter": LIMIT.config(), "inserts": -1, "samples": 0}, r"rate_limiter inserts must be an int >= 0, got -1; the checkpoint is corrupt"),
        ({"limiter": LIMIT.config(), "inserts": 1, "samples": 2.5}, r"rate_limiter samples must be an int >= 0, got 2\.5"),
        ({"limiter": LIMIT.config(), "inserts": True, "samples": 0}, r"rate_limiter inserts must be an int >= 0, got True"),
    ],
)  # fmt: skip
def test_corrupt_counts_are_refused_and_change_nothing(saved, match):
    rb = make("offline_to_online")
    write(rb, rows(3))
    state = rb.state_dict()
    state["rate_limiter"] = saved
    target = make("offline_to_online")
    write(target, rows(1))
    with pytest.raises(CheckpointError, match=match):
        target.load_state_dict(state)
    assert target.rate_limiter_counts == (1, 0, 1) and len(target.online_buffer) == 1


def test_empty_restarts_the_counts():
    rb = make("replay")
    write(rb, rows(4))
    rb.sample()
    rb.empty()
    assert rb.rate_limiter_counts == (0, 0, 0)
    with pytest.raises(RateLimitTimeoutError, match="0 online rows held of the 2 needed"):
        rb.sample(timeout=0)


def _v2_maker():
    spec = importlib.util.spec_from_file_location(
        "make_v2_fixtures", FIXTURES / "make_v2_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["offline_to_online_annealed", "mixture"])
def test_format_2_checkpoints_load_into_a_limited_buffer(name, tmp_path):
    make_v2 = _v2_maker()
    path = tmp_path / name
    shutil.copytree(FIXTURES / "v2" / name, path)  # a load may clean up: never in the tree
    expected = json.loads((FIXTURES / "v2" / "next_batches.json").read_text())[name]
    # the buffer the fixture was saved from, built with a rate limiter that lets the
    # fixture's 3 batches through (batches of 8 and 10 rows)
    limiter = MinSize(3) if name == "mixture" else SampleToInsertRatio(8, 2, 32)
    rb = _rebuilt_with(make_v2, name, limiter)
    rb.loads(path)
    held = 10 + 7 if name == "mixture" else 5  # the online rows the checkpoint holds
    assert rb.rate_limiter_counts == (*limiter.centre(held), held)
    drawn = make_v2.draw(rb)  # the same batches the old version drew: the limiter only counts
    assert [{k: b[k] for k in e} for b, e in zip(drawn, expected)] == expected


def _rebuilt_with(make_v2, name, limiter):
    """The buffer ``make_v2.build(name)`` makes, with ``rate_limiter=limiter``."""
    if name == "mixture":
        return MixtureReplayBuffer(
            {
                "expert": make_v2.offline(),
                "play": LazyTensorStorage(10),
                "online": LazyTensorStorage(20),
            },
            {"expert": 1.0, "play": 1.0, "online": Constant(1.0)},
            samplers={"play": PrioritizedSampler(alpha=0.5)},
            batch_size=10,
            generator=9,
            rate_limiter=limiter,
        )
    return OfflineToOnlineReplayBuffer(
        make_v2.offline(),
        online_capacity=32,
        offline_fraction=0.5,
        batch_size=8,
        generator=7,
        rate_limiter=limiter,
    )
