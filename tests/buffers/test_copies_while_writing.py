"""A copy of a buffer (``pickle``, ``copy.deepcopy``) is one state of it, even while a
collector thread extends it: rows, cursor, length, write count and the sampler's state
(a priority tree) agree, and priorities set before are kept.

The copy is taken under the buffer's state lock (prefetching paused first, as
``state_dict`` does), so the writer waits while it is made.
"""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
)
from tests.helpers import id_rows, run_threads

COPIES = {"pickle": lambda rb: pickle.loads(pickle.dumps(rb)), "deepcopy": copy.deepcopy}
SEEDED = 100  # rows written (and given priority id + 1) before the collector starts


def rows(start: int, n: int) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    return TensorDict({"x": x, "y": x.expand(n, 3).clone()}, [n])


def check_ring(storage, tree=None) -> None:
    """The ring holds ids ``write_count - len .. write_count - 1``, the newest before the
    cursor; with a priority tree, exactly the filled slots have a priority."""
    n, cursor, count, cap = len(storage), storage.cursor, storage.write_count, storage.max_size
    x = storage[:n]["x"].reshape(-1)
    expected = torch.empty(n)
    for k in range(n):
        expected[(cursor - 1 - k) % cap] = count - 1 - k
    assert torch.equal(x, expected), (n, cursor, count)
    assert (storage[:n]["y"] == storage[:n]["x"]).all()
    if tree is not None:
        leaves = tree.leaves[:cap]
        assert (leaves[:n] > 0).all() and (leaves[n:] == 0).all()


def collect(rb, stop: threading.Event, make=rows):
    """A collector: extends ``rb`` with the next 7 ids until ``stop``."""

    def run() -> None:
        written = SEEDED
        while not stop.is_set():
            rb.extend(make(written, 7))
            written += 7

    return run


@pytest.mark.parametrize("prefetch", [None, 2])
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_copy_taken_while_a_collector_extends_is_one_state(how, prioritized, prefetch):
    sampler = PrioritizedSampler(alpha=1.0, beta=0.5, eps=1e-6) if prioritized else None
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20_000),  # never full: the seeded rows are never overwritten
        sampler=sampler,
        batch_size=32,
        generator=0,
        prefetch=prefetch,
    )
    rb.extend(rows(0, SEEDED))
    if prioritized:
        rb.update_priority(torch.arange(SEEDED), torch.arange(SEEDED) + 1.0)
    rb.sample()
    stop = threading.Event()

    def copies() -> None:
        try:
            for _ in range(6):
                twin = COPIES[how](rb)
                tree = twin.sampler.tree if prioritized else None
                check_ring(twin.storage, tree)
                if prioritized:
                    assert twin.sampler._filled == len(twin.storage)
                    kept = tree.leaves[:SEEDED]
                    assert torch.allclose(kept, torch.arange(SEEDED, dtype=kept.dtype) + 1)
                assert twin.sample().batch_size == (32,)  # the copy is usable
                twin.close()
        finally:
            stop.set()

    try:
        run_threads(collect(rb, stop), copies, timeout=120, release=stop.set)
    finally:
        rb.close()


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_mixing_buffer_copied_while_its_online_side_is_written_is_one_state(how):
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(id_rows(0, 40)),
        online_capacity=20_000,
        online_sampler=PrioritizedSampler(alpha=1.0, beta=0.5, eps=1e-6),
        batch_size=16,
        generator=0,
        prefetch=2,
    )
    stop = threading.Event()
    rb.extend(id_rows(0, SEEDED))
    rb.sample()

    def copies() -> None:
        try:
            for _ in range(4):
                twin = COPIES[how](rb)
                online = twin.online_buffer
                n, cursor, count = len(online.storage), online.storage.cursor, online.write_count
                ids = online.storage[:n]["next", "reward"].reshape(-1)
                assert torch.equal(ids, torch.arange(count - n, count, dtype=ids.dtype))
                assert cursor == n
                leaves = online.sampler.tree.leaves[: online.storage.max_size]
                assert (leaves[:n] > 0).all() and (leaves[n:] == 0).all()
                assert twin.sample().batch_size == (16,)
                twin.close()
        finally:
            stop.set()

    try:
        run_threads(collect(rb, stop, id_rows), copies, timeout=120, release=stop.set)
    finally:
        rb.close()
