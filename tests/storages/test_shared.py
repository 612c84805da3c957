"""shared=True: rows written by collectors in other processes, sampled here, whole and each once.

Real processes (``spawn``, as TorchRL's collectors start theirs), each under a watchdog: a
process that does not finish in time is killed and the test fails.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SchemaMismatchError,
    SliceSampler,
    TensorDictReplayBuffer,
)

CTX = multiprocessing.get_context("spawn")
DEADLINE_S = 120  # the watchdog: far beyond what the writes take, even on a loaded machine


def rows(start: int, n: int) -> TensorDict:
    """Rows whose every leaf encodes the row's id: a torn row has leaves of two ids."""
    ids = torch.arange(start, start + n)
    f = ids.to(torch.float64).unsqueeze(-1)
    return TensorDict(
        {
            "id": ids,
            "obs": f.expand(n, 6).clone(),
            "next": {"obs": (f + 0.5).expand(n, 6).clone(), "done": (ids % 7 == 6).unsqueeze(-1)},
        },
        [n],
    )


def check_whole(batch: TensorDict) -> None:
    ids = batch["id"].to(torch.float64).unsqueeze(-1)
    assert torch.equal(batch["obs"], ids.expand_as(batch["obs"])), "a torn row"
    assert torch.equal(batch["next", "obs"], (ids + 0.5).expand_as(batch["next", "obs"]))


def collector(rb, start: int, n: int, chunk: int, barrier=None) -> None:
    """A collector process: writes ids ``start .. start + n`` in chunks, as an env loop would
    (all at once with the other processes waiting on ``barrier``)."""
    if barrier is not None:
        barrier.wait(DEADLINE_S)
    for i in range(start, start + n, chunk):
        rb.extend(rows(i, min(chunk, start + n - i)))


def run(processes) -> None:
    """Start ``processes``; return once they all ended well (the watchdog kills late ones)."""
    for p in processes:
        p.start()
    deadline = time.monotonic() + DEADLINE_S
    try:
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
        late = [p for p in processes if p.is_alive()]
        assert not late, f"{len(late)} writer process(es) still running after {DEADLINE_S} s"
        assert [p.exitcode for p in processes] == [0] * len(processes)
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join(10)


def allocated(rb):
    """The buffer with its rows allocated, then emptied (TorchRL's sac-async does this)."""
    rb.extend(rows(-1, 1))
    rb.empty()
    return rb


@pytest.mark.heavy
@pytest.mark.parametrize(("storage", "capacity"), [("tensor", 2000), ("memmap", 300)])
def test_rows_written_by_two_other_processes_are_sampled_whole_and_stored_once(
    storage, capacity, tmp_path
):
    store = (
        LazyTensorStorage(capacity)
        if storage == "tensor"
        else LazyMemmapStorage(capacity, scratch_dir=tmp_path / "rb")
    )
    rb = allocated(ReplayBuffer(storage=store, shared=True, batch_size=64, generator=0))
    barrier = CTX.Barrier(3)  # the two writers and this process start together
    writers = [
        CTX.Process(target=collector, args=(rb, k * 1000, 1000, 1 + 2 * k, barrier)) for k in (0, 1)
    ]
    for p in writers:
        p.start()
    deadline = time.monotonic() + DEADLINE_S
    barrier.wait(DEADLINE_S)
    lengths, draws = [], 0
    try:
        while any(p.is_alive() for p in writers):
            assert time.monotonic() < deadline, "the writer processes did not finish in time"
            lengths.append(len(rb))
            if lengths[-1]:
                check_whole(rb.sample())  # drawn while the other processes write
                draws += 1
        for p in writers:
            p.join(10)
            assert p.exitcode == 0
    finally:
        for p in writers:
            if p.is_alive():
                p.kill()
                p.join(10)
    assert lengths == sorted(lengths), "the length went backwards"
    assert rb.write_count == 2000 and len(rb) == capacity
    stored = rb[:]
    check_whole(stored)
    ids = stored["id"].tolist()
    if capacity >= 2000:
        assert sorted(ids) == list(range(2000))  # each row exactly once
    else:
        assert len(set(ids)) == capacity  # the ring wrapped: each row it holds, once
    assert draws > 0


@pytest.mark.heavy
def test_samplers_here_follow_rows_written_elsewhere():
    """(and rows written before sharing, and prefetching, which TorchRL refuses when shared)"""
    rb = allocated(
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(100),
            sampler=PrioritizedSampler(max_capacity=100, alpha=1.0, beta=1.0),
            shared=True,
            batch_size=10,
            generator=0,
        )
    )
    episodes = allocated(
        ReplayBuffer(
            storage=LazyTensorStorage(100),
            sampler=SliceSampler(slice_len=7, end_key=("next", "done")),
            shared=True,
            batch_size=14,
            prefetch=2,  # (TorchRL refuses prefetching with shared=True; mixreplay draws ahead)
            generator=0,
        )
    )
    early = ReplayBuffer(storage=LazyMemmapStorage(20), generator=0)
    early.extend(rows(0, 3))  # rows written before the buffer is shared move to a shared file
    early.share()
    run(
        [
            CTX.Process(target=collector, args=(rb, 0, 50, 10)),
            CTX.Process(target=collector, args=(episodes, 0, 70, 10)),
            CTX.Process(target=collector, args=(early, 3, 4, 2)),
        ]
    )
    assert early[:]["id"].tolist() == list(range(7))
    check_whole(early[:])
    batch = rb.sample()
    assert set(batch["index"].tolist()) <= set(range(50))
    batch["td_error"] = torch.full((10,), 1000.0)
    rb.update_tensordict_priority(batch)  # priorities of rows written in the other process
    assert set(rb.sample()["index"].tolist()) <= set(batch["index"].tolist())
    for part in episodes.sample()["id"].reshape(2, 7):
        assert part.tolist() == list(range(int(part[0]), int(part[0]) + 7))
    episodes.close()


def rewriter(rb) -> None:
    """A process that rewrites rows in place: episode ends at 4 and 9 become one at 6."""
    done = rb[:]["next", "done"].clone()
    done[:] = False
    done[6] = True
    rb.set_(("next", "done"), done)
    rb[0] = rows(100, 1)[0]


@pytest.mark.heavy
def test_rows_rewritten_in_place_elsewhere_are_seen_here_and_samplers_follow():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(slice_len=3, end_key=("next", "done")),
        shared=True,
        generator=0,
    )
    data = rows(0, 10)
    data["next", "done"][:] = False
    data["next", "done"][[4, 9]] = True
    rb.extend(data)
    assert rb.available() == 6  # starts 0..2 and 5..7
    revision, rewrites = rb.storage.revision, rb.storage.rewrites
    run([CTX.Process(target=rewriter, args=(rb,))])
    assert (rb.storage.revision, rb.storage.rewrites) == (revision + 2, rewrites + 2)
    assert (len(rb), rb.write_count, rb.storage.cursor) == (10, 10, 0)
    assert rb[:]["id"].tolist() == [100, *range(1, 10)]
    assert rb.available() == 5 + 1  # episodes 0..6 and 7..9: starts 0..4 and 7
    # a new key cannot be added to rows other processes map by their layout
    with pytest.raises(SchemaMismatchError, match="adds the key.*shared with other processes"):
        rb[1] = TensorDict({"extra": torch.tensor(1.0)}, [])


def test_a_collector_may_write_the_first_rows():
    # no row written here before the collector starts: its first write allocates the rows,
    # and this process maps them when it next takes the lock (TorchRL's shared_init=True)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), shared=True, generator=0)
    run([CTX.Process(target=collector, args=(rb, 0, 5, 5))])
    assert len(rb) == 5 and rb.write_count == 5
    check_whole(rb[:])
    assert rb[:]["id"].tolist() == [0, 1, 2, 3, 4]
    rb.extend(rows(5, 2))
    assert rb[:]["id"].tolist() == list(range(7))


def test_an_unshared_ring_is_not_sent_to_a_new_process():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(rows(0, 2))
    p = CTX.Process(target=collector, args=(rb, 0, 5, 5))
    with pytest.raises(RuntimeError, match=r"not shared between processes.*shared=True"):
        p.start()
    assert rb.share() is rb and rb.shared  # the fix the error names


def test_what_cannot_be_shared_is_refused_naming_what_can():
    frozen = FrozenStorage.from_tensordict(rows(0, 3))  # read-only rows of this process
    with pytest.raises(TypeError, match="use a LazyTensorStorage or LazyMemmapStorage"):
        ReplayBuffer(storage=frozen, shared=True)
    items = ReplayBuffer(storage=ListStorage(10), shared=True)  # as TorchRL: refused when sent
    assert items.shared
    with pytest.raises(RuntimeError, match="Cannot share a storage of type ListStorage"):
        CTX.Process(target=collector, args=(items, 0, 1, 1)).start()
    with pytest.raises(TypeError, match="dedup_next"):
        ReplayBuffer(storage=LazyTensorStorage(10, dedup_next=True), shared=True)
    with pytest.raises(TypeError, match="shared must be True or False"):
        ReplayBuffer(storage=LazyTensorStorage(10), shared=1)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    with pytest.raises(TypeError, match="stays shared"):
        rb.share(False)
    assert ReplayBuffer(storage=LazyTensorStorage(10)).share(False).shared is False
    assert LazyMemmapStorage(10, shared_init=True).shared  # TorchRL's spelling, on a storage


def test_transforms_that_keep_write_state_are_shared_or_refused():
    class Counts:  # a write-side transform keeping state across writes
        requires_shared_write_state = True

        def __init__(self):
            self.seen = torch.zeros(1)

        def share_memory_(self):
            self.seen.share_memory_()
            return self

        def __call__(self, td):
            return td

    class Unshareable:
        requires_shared_write_state = True

        def __call__(self, td):
            return td

    counts = Counts()
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=counts)
    assert not counts.seen.is_shared()
    rb.share()
    assert counts.seen.is_shared()
    later = Counts()
    rb.append_transform(later)
    assert later.seen.is_shared()
    with pytest.raises(RuntimeError, match="keeps replay-buffer write state"):
        rb.insert_transform(0, Unshareable())
    with pytest.raises(RuntimeError, match="keeps replay-buffer write state"):
        ReplayBuffer(storage=LazyTensorStorage(10), transform=Unshareable(), shared=True)


def test_an_ordinary_copy_of_a_shared_buffer_is_a_private_one():
    rb = allocated(ReplayBuffer(storage=LazyTensorStorage(10), shared=True, generator=0))
    rb.extend(rows(0, 4))
    copy = pickle.loads(pickle.dumps(rb))
    assert not copy.shared and len(copy) == 4 and copy.write_count == 4
    copy.extend(rows(4, 2))
    assert len(rb) == 4 and len(copy) == 6
    check_whole(copy[:])


def die_holding_the_lock(rb, how: str, holding) -> None:
    """A writer process that dies with the shared lock held: it exits inside the lock, or
    signals and waits there to be killed (a collector SIGKILLed mid-write)."""
    rb.storage.lock.acquire()
    if how == "exit":
        import os

        os._exit(3)
    holding.set()
    time.sleep(DEADLINE_S)


def sample_in_thread(rb, out: list) -> None:
    try:
        out.append(rb.sample())
    except BaseException as err:  # handed to the test
        out.append(err)


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_writer_dying_with_the_lock_held_is_an_error_not_a_hang(how):
    """An OS lock outlives its holder: the other processes' calls used to wait for ever."""
    import threading

    from mixreplay import LockOwnerDiedError

    rb = ReplayBuffer(storage=LazyTensorStorage(100), shared=True, batch_size=4, generator=0)
    rb.extend(rows(0, 10))
    holding = CTX.Event()
    writer = CTX.Process(target=die_holding_the_lock, args=(rb, how, holding))
    writer.start()
    try:
        if how == "sigkill":
            assert holding.wait(DEADLINE_S)
            writer.kill()
        writer.join(DEADLINE_S)
        assert writer.exitcode is not None
        out: list = []
        t = threading.Thread(target=sample_in_thread, args=(rb, out), daemon=True)
        t.start()
        t.join(DEADLINE_S)  # the watchdog: only a hang reaches it
        assert not t.is_alive(), "sample() still waits for the dead writer's lock"
        assert isinstance(out[0], LockOwnerDiedError), out
        assert f"process {writer.pid}, which held the lock" in str(out[0])
        assert len(rb) == 10  # what does not need the lock still answers
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join(10)
