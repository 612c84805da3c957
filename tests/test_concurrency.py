"""A collector thread extends while a learner thread samples (and updates priorities, and saves).

Every key of a row encodes the same write id, so a row assembled from two writes
(a torn row) shows up as keys that disagree; the slot a row was drawn from must
hold exactly the id the ring semantics put there.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
)
from mixreplay.samplers import PrioritizedSampler

OFFLINE_BASE = -100_000
CAPACITY = 997  # prime: slot = id % CAPACITY wraps at a different place every pass
TOTAL_ROWS = 30_000


def id_rows(start: int, n: int) -> TensorDict:
    wid = torch.arange(start, start + n)
    f = wid.to(torch.float32).unsqueeze(-1)  # exact: |id| < 2**24
    odd = (wid % 2 == 1).unsqueeze(-1)
    return TensorDict(
        {
            "wid": wid.clone(),
            "observation": f.expand(n, 11).clone(),
            "action": f.expand(n, 3).clone(),
            "done": odd.clone(),
            "next": {
                "observation": (f + 0.5).expand(n, 11).clone(),
                "reward": f.clone(),
                "done": odd.clone(),
            },
        },
        batch_size=[n],
    )


OFFLINE = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, 5000))


def check_rows(
    batch, info, online_source: int | None, written_before: int, written_after: int
) -> None:
    wid = batch["wid"]
    f = wid.to(torch.float32).unsqueeze(-1)
    for key in ("observation", "action", ("next", "reward")):
        assert bool((batch[key] == f).all()), f"torn row: {key} disagrees with wid"
    assert bool((batch["next", "observation"] == f + 0.5).all()), "torn row: next observation"
    odd = (wid % 2 == 1).unsqueeze(-1)
    assert bool((batch["done"] == odd).all()) and bool((batch["next", "done"] == odd).all()), (
        "torn row: flags"
    )
    index = info["index"]
    online = wid >= 0 if online_source is None else info["source"] == online_source
    offline = ~online
    # offline rows: slot i holds id OFFLINE_BASE + i
    assert bool((wid[offline] == index[offline] + OFFLINE_BASE).all())
    w, slot = wid[online], index[online]
    # online rows: a row that was written, still in the ring, in the slot ring order puts it
    assert bool((w >= 0).all()) and bool((w < written_after).all())
    assert bool((w >= written_before - CAPACITY).all()), "a row older than the ring sampled"
    assert bool((w % CAPACITY == slot).all()), "a row in the wrong slot"


def run_collector(extend, errors: list, seed: int, written: list) -> None:
    """Write ids 1, 2, ... (id 0 is written before the threads start) in chunks of random size."""
    rng = random.Random(seed)
    n = 1
    try:
        while n < TOTAL_ROWS:
            k = rng.choice([1, 1, 2, 7, 64, 300])
            extend(id_rows(n, k))
            n += k
    except BaseException as err:  # noqa: BLE001 - reported by the test
        errors.append(err)
    written.append(n)


def make(kind: str, tmp_path):
    storage = (
        LazyMemmapStorage(CAPACITY, scratch_dir=tmp_path)
        if "memmap" in kind
        else LazyTensorStorage(CAPACITY)
    )
    sampler = PrioritizedSampler(alpha=0.6) if "prioritized" in kind else None
    if kind.startswith("replay"):
        return ReplayBuffer(storage=storage, sampler=sampler, generator=0)
    if kind.startswith("mixture"):
        return MixtureReplayBuffer(
            {"off": OFFLINE, "on": storage},
            {"off": 1, "on": 3},
            samplers={"on": sampler} if sampler else None,
            generator=0,
        )
    return OfflineToOnlineReplayBuffer(
        OFFLINE, online_storage=storage, online_sampler=sampler, offline_fraction=0.25, generator=0
    )


KINDS = [
    "replay-memory",
    "replay-memmap",
    "o2o-memory",
    "o2o-memmap",
    "mixture-memory",
    "replay-prioritized",
    "o2o-prioritized-memmap",
    "mixture-prioritized",
]


@pytest.mark.parametrize("kind", KINDS)
def test_extend_while_sampling_never_tears_a_row(kind, tmp_path):
    rb = make(kind, tmp_path)
    mixture = isinstance(rb, MixtureReplayBuffer)
    online = rb.source("on") if mixture else getattr(rb, "online_buffer", rb)
    storage = online.storage
    extend = (lambda td: rb.extend(td, source="on")) if mixture else rb.extend
    extend(id_rows(0, 1))  # the learner starts once there is a row
    errors: list = []
    written: list = []
    collector = threading.Thread(target=run_collector, args=(extend, errors, 1, written))
    rng = torch.Generator().manual_seed(0)
    batches, last_len = 0, 0
    collector.start()
    try:
        while collector.is_alive() or batches < 20:
            before = storage.write_count
            batch, info = rb.sample(128, return_info=True)
            after = storage.write_count
            check_rows(batch, info, None if isinstance(rb, ReplayBuffer) else 1, before, after)
            if "prioritized" in kind:
                p = torch.rand(128, generator=rng) + 0.01
                if isinstance(rb, ReplayBuffer):
                    rb.update_priority(info["index"], p)
                else:
                    rb.update_priority(info, p)
            n = len(storage)
            assert last_len <= n <= CAPACITY  # lengths only grow, never past the capacity
            last_len = n
            batches += 1
    finally:
        collector.join()
    assert not errors, errors
    assert storage.write_count == written[0] and len(storage) == CAPACITY
    assert batches >= 20
    if "prioritized" in kind:  # the sum tree still matches its leaves after the races
        tree = online.sampler.tree
        assert float(tree.total()) == pytest.approx(float(tree.leaves.sum()), rel=1e-9)
        assert int((tree.leaves > 0).sum()) == CAPACITY


def test_dumps_while_extending_saves_one_consistent_snapshot(tmp_path):
    rb = OfflineToOnlineReplayBuffer(OFFLINE, online_capacity=CAPACITY, generator=0)
    rb.extend(id_rows(0, 1))
    errors: list = []
    collector = threading.Thread(target=run_collector, args=(rb.extend, errors, 2, []))
    collector.start()
    saved = 0
    try:
        while collector.is_alive() or saved < 3:
            rb.dumps(tmp_path / "ck")
            twin = OfflineToOnlineReplayBuffer(OFFLINE, online_capacity=CAPACITY, generator=0)
            twin.loads(tmp_path / "ck")
            storage = twin.online_buffer.storage
            written = storage.write_count
            slots = torch.arange(len(storage))
            newest = (
                written - 1 - ((written - 1 - slots) % CAPACITY)
            )  # the last id written to each slot
            assert torch.equal(storage.column("wid"), newest)
            saved += 1
    finally:
        collector.join()
    assert not errors, errors


class _Auditor(RandomSampler):
    """A uniform sampler that checks it was told about every row before each draw or update."""

    def __init__(self):
        super().__init__()
        self.told = 0
        self.draws = 0
        self.stale = 0

    def on_extend(self, index, storage) -> None:
        time.sleep(0.0002)  # bookkeeping that takes a while (a sum tree update releases the GIL)
        self.told += index.numel()

    def sample(self, storage, n, generator):
        self.draws += 1
        self.stale += storage.write_count != self.told
        return super().sample(storage, n, generator)

    def update_priority(self, index, priority) -> None:
        self.stale += self._storage.write_count != self.told


@pytest.mark.parametrize("kind", ["replay", "o2o"])
def test_samplers_are_told_of_a_write_before_anyone_draws_from_it(kind):
    """``extend`` writes the rows and tells the sampler under one lock (a prioritized sampler
    that saw rows before ``on_extend`` would give them the wrong priorities)."""
    auditor = _Auditor()
    storage = LazyTensorStorage(CAPACITY)
    auditor._storage = storage
    if kind == "replay":
        rb = ReplayBuffer(storage=storage, sampler=auditor, generator=0)
    else:
        rb = OfflineToOnlineReplayBuffer(
            OFFLINE, online_storage=storage, online_sampler=auditor, generator=0
        )
    rb.extend(id_rows(0, 1))
    errors: list = []
    collector = threading.Thread(target=run_collector, args=(rb.extend, errors, 3, []))
    collector.start()
    try:
        while collector.is_alive():
            batch, info = rb.sample(16, return_info=True)
            if kind == "replay":
                rb.update_priority(info["index"], torch.ones(16))
            else:
                rb.update_priority(info, torch.ones(16))
    finally:
        collector.join()
    assert not errors, errors
    assert auditor.draws > 10 and auditor.stale == 0


# -- importance weights while a collector writes ---------------------------------------------


def small_prioritized(kind: str):
    """A prioritized ring of 64 behind each buffer kind, and its extend."""
    sampler = PrioritizedSampler(64, alpha=1.0, beta=1.0)
    storage = LazyTensorStorage(64)
    if kind == "replay":
        rb = ReplayBuffer(storage=storage, sampler=sampler, generator=0)
        return rb, rb.extend
    if kind == "mixture":
        rb = MixtureReplayBuffer(
            {"off": OFFLINE, "on": storage},
            {"off": 1, "on": 3},
            samplers={"on": sampler},
            generator=0,
        )
        return rb, lambda td: rb.extend(td, source="on")
    rb = OfflineToOnlineReplayBuffer(
        OFFLINE, online_storage=storage, online_sampler=sampler, offline_fraction=0.25, generator=0
    )
    return rb, rb.extend


@pytest.mark.parametrize("kind", ["replay", "offline-to-online", "mixture"])
def test_importance_weights_stay_in_0_1_while_a_collector_extends(kind, eager_thread_switches):
    """A weight is ``(min_j p_j / p_i) ** beta``: read with the row's priority from the draw and
    the smallest one after a collector's write (which can overwrite the row of the smallest) it
    exceeded 1 (188 seen)."""
    rb, extend = small_prioritized(kind)
    extend(id_rows(0, 64))
    errors: list = []
    stop = threading.Event()

    def collector():
        n = 64
        try:
            while not stop.is_set():
                extend(id_rows(n, 16))  # a quarter of the ring: new rows, of the largest priority
                n += 16
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    writer = threading.Thread(target=collector, daemon=True)
    rng = torch.Generator().manual_seed(0)
    writer.start()
    worst = 0.0
    try:
        for _ in range(1000):
            _, info = rb.sample(8, return_info=True)
            w = info["weight"]
            assert bool((w > 0).all()) and bool(torch.isfinite(w).all())
            worst = max(worst, float(w.max()))
            # close priorities, so that the row of the smallest is drawn often
            p = 1 + 99 * torch.rand(8, generator=rng)
            rb.update_priority(info if kind != "replay" else info["index"], p)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive(), "the collector thread hung"
    assert not errors, errors
    assert worst <= 1.0, f"an importance weight of {worst}"


def test_writers_samplers_and_priority_updates_at_once_never_crash_a_draw(
    eager_thread_switches,
):
    """3 writer threads, 2 sampler threads updating priorities, on an offline-to-online buffer
    with a prioritized online side: no draw raises (a tree read mid-update gave a None minimum)
    and every weight is in (0, 1]."""
    rb, extend = small_prioritized("offline-to-online")
    extend(id_rows(0, 64))
    errors: list = []
    stop = threading.Event()

    def writer(seed):
        rng = random.Random(seed)
        n = 1000 * seed
        while not stop.is_set():
            k = rng.choice([1, 3, 20])
            extend(id_rows(n, k))
            n += k

    def learner(seed):
        rng = torch.Generator().manual_seed(seed)
        for _ in range(150):
            _, info = rb.sample(16, return_info=True)
            w = info["weight"]
            if not bool(((w > 0) & (w <= 1)).all()):
                raise AssertionError(f"weights outside (0, 1]: {w.tolist()}")
            rb.update_priority(info, 10 ** (torch.rand(16, generator=rng) * 6 - 3))

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    writers = [threading.Thread(target=guarded, args=(writer, s), daemon=True) for s in (1, 2, 3)]
    learners = [threading.Thread(target=guarded, args=(learner, s), daemon=True) for s in (4, 5)]
    for t in writers + learners:
        t.start()
    for t in learners:
        t.join(timeout=120)
    stop.set()
    for t in writers:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in writers + learners), "a thread hung"
    assert not errors, errors
