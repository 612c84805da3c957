"""The buffer actor's side of a rate limit, without a Ray cluster: it never waits.

:class:`~mixreplay.distributed.host.BufferHost` is what runs in the actor. With a rate
limiter it asks the buffer with ``timeout=0`` and answers a held call with a
``Blocked``; a chunk of rows held in part is applied in part, recorded, and sent
again applies only the rest; a chunk behind a held one of the same writer waits too.
"""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    BufferClosedError,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RateLimitTimeoutError,
    SampleToInsertRatio,
)
from mixreplay.distributed.chunks import ChunkIds
from mixreplay.distributed.host import BufferHost
from mixreplay.distributed.limited import Blocked, Poll
from mixreplay.distributed.wire import Packer
from mixreplay.rate_limit import RateCounts
from tests.helpers import float_rows as rows

LIMIT = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2, error_buffer=16)


def make_buffer(tmp=None):
    offline = OfflineDataset.from_tensordict(TensorDict({"x": -torch.arange(1.0, 11.0)}, [10]))
    return OfflineToOnlineReplayBuffer(
        offline, online_capacity=100, batch_size=4, generator=0, rate_limiter=LIMIT
    )


def host_and_packer(**kw):
    return BufferHost(make_buffer, (), restarted=False, **kw), Packer()


def send(host, packer, ids, start, data, want_index=True):
    words = packer.pack(data)
    return host.extend_packed(packer.key, words, None, want_index, ids.chunk_id(start))


def online(host) -> list[float]:
    return host.buffer.online_buffer[:]["x"].tolist()


def test_a_held_sample_is_answered_at_once_with_the_counts():
    host, _ = host_and_packer()
    out = host.sample_packed(None, False)
    assert isinstance(out, Blocked)
    assert out.limiter == LIMIT and out.counts == RateCounts(0, 0, 0) and out.written == 0
    err = out.error("sample(4)", 2.0)
    assert isinstance(err, RateLimitTimeoutError)
    assert str(err).startswith("sample(4) waited 2 s for SampleToInsertRatio(")


def test_a_chunk_goes_in_as_the_band_allows_and_its_rest_when_sent_again():
    host, packer = host_and_packer()
    ids = ChunkIds()
    (start,) = ids.take([10])
    held = send(host, packer, ids, start, rows(10))
    assert isinstance(held, Blocked) and held.written == 4  # error 32: the band's ceiling
    assert held.slots.tolist() == [0, 1, 2, 3, -1, -1, -1, -1, -1, -1]
    assert online(host) == [0.0, 1.0, 2.0, 3.0]
    assert send(host, packer, ids, start, rows(10)).written == 4  # nothing new: still held
    for _ in range(8):  # room for 4 more rows
        assert not isinstance(host.sample_packed(None, False), Blocked)
    again = send(host, packer, ids, start, rows(10))
    assert again.written == 8 and online(host) == [float(i) for i in range(8)]
    for _ in range(4):
        host.sample_packed(None, False)
    slots = send(host, packer, ids, start, rows(10))  # the last 2 rows: the chunk is done
    assert slots.tolist() == list(range(10))
    assert online(host) == [float(i) for i in range(10)]  # each row once, in order
    assert host.buffer.rate_limiter_counts == (10, 48, 10)
    ids.done([start])
    assert host.info()["rows_received"] == 10


def test_a_chunk_behind_a_held_one_of_the_same_writer_waits_for_it():
    host, packer = host_and_packer()
    ids, other = ChunkIds(), ChunkIds()
    first, second = ids.take([6, 3])
    assert send(host, packer, ids, first, rows(6)).written == 4
    for _ in range(8):
        host.sample_packed(None, False)
    # the band has room, but the writer's earlier rows are not all in: this one waits
    behind = send(host, packer, ids, second, rows(3, 6))
    assert isinstance(behind, Blocked) and behind.written == 0
    assert online(host) == [0.0, 1.0, 2.0, 3.0]
    # another writer is not held behind it
    (o,) = other.take([1])
    assert send(host, packer, other, o, rows(1, 100)).tolist() == [4]
    # sent again in order: the first chunk's rest, then the second
    assert send(host, packer, ids, first, rows(6)).tolist() == [0, 1, 2, 3, 5, 6]
    ids.done([first])
    for _ in range(8):
        host.sample_packed(None, False)
    assert send(host, packer, ids, second, rows(3, 6)).tolist() == [7, 8, 9]
    assert online(host) == [0.0, 1.0, 2.0, 3.0, 100.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_writes_without_waiting_for_an_answer_count_rows_the_same_way():
    host, packer = host_and_packer()
    ids = ChunkIds()
    (start,) = ids.take([6])
    held = send(host, packer, ids, start, rows(6), want_index=False)
    assert isinstance(held, Blocked) and held.written == 4 and held.slots is None
    for _ in range(8):
        host.sample_packed(None, False)
    assert send(host, packer, ids, start, rows(6), want_index=False) == 6


def test_an_iterator_that_would_wait_inside_the_actor_is_refused():
    host, _ = host_and_packer()
    with pytest.raises(TypeError, match=r"rb\.next\(\) would wait for the rate limiter inside the buffer actor, which serves one call at a time; use rb\.sample\(\)"):  # fmt: skip
        host.call("next")


def test_the_actor_checkpoints_rows_counts_and_chunk_ids_together(tmp_path):
    ckpt = tmp_path / "ckpt"
    host, packer = host_and_packer(checkpoint_dir=ckpt, checkpoint_every=3)
    ids = ChunkIds()
    (start,) = ids.take([10])
    send(host, packer, ids, start, rows(10))  # 4 rows in: a checkpoint inside the write
    assert host.info()["checkpoints_saved"] == 1
    restarted = BufferHost(make_buffer, (), checkpoint_dir=ckpt, restarted=True)
    assert restarted.buffer.rate_limiter_counts == (4, 0, 4)
    for _ in range(8):
        restarted.sample_packed(None, False)
    # the restarted actor applies only the chunk's rows it does not hold
    assert send(restarted, packer, ids, start, rows(10)).written == 8
    assert online(restarted) == [float(i) for i in range(8)]


def test_a_poll_pauses_until_its_deadline_and_wakes_on_kill():
    blocked = Blocked(LIMIT, RateCounts(1, 0, 1))
    killed = threading.Event()
    poll = Poll(0.05, killed)
    with pytest.raises(RateLimitTimeoutError, match=r"^extend of 3 rows waited 0\.05 s .*; 2 of its rows were written"):  # fmt: skip
        while True:
            poll.pause(blocked, "extend of 3 rows", 2)
    killed.set()
    with pytest.raises(BufferClosedError, match=r"the buffer actor was killed while sample\(4\) waited for its rate limiter"):  # fmt: skip
        Poll(None, killed).pause(blocked, "sample(4)")
