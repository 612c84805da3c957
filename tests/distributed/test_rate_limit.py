"""A rate-limited buffer in a Ray actor on a real local cluster.

Collectors of very different speeds (Ray tasks) and a prefetching learner: the counts
stay in the band at every observation. The actor serves other calls while a sample or
an insert waits (the callers wait, not the actor); ``kill()`` and ``close()`` wake the
waiters; an actor that restarts keeps the counts with the rows, and every row once.

Every blocking call runs under a watchdog (``run_threads``) or with a ``timeout``.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time

import pytest
import ray
import torch

from mixreplay import (
    BufferClosedError,
    OfflineToOnlineReplayBuffer,
    RateLimitTimeoutError,
    SampleToInsertRatio,
)
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.distributed import RayReplayBuffer
from mixreplay.distributed.host import EXIT_AFTER_CHECKPOINT
from mixreplay.errors import BufferActorError
from mixreplay.samplers import PrioritizedSampler
from tests import helpers
from tests.helpers import hopper_rows, run_threads, stored_online_rows, wait_until_back

pytestmark = [pytest.mark.ray, pytest.mark.heavy]  # an actor per test, one restarted: ~1 min

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(helpers)

OFFLINE = 64
BATCH = 16
# UTD 2: 32 rows sampled per row inserted, 20 rows before the first sample, +- 2 inserts
LIMIT = SampleToInsertRatio(samples_per_insert=2 * BATCH, min_size_to_sample=20, error_buffer=64)


@pytest.fixture(scope="module")
def offline_path(tmp_path_factory):
    return write_memmap_dataset(
        tmp_path_factory.mktemp("data") / "offline", hopper_rows(OFFLINE, tag=-1.0)
    )


def remote_buffer(path, limiter=LIMIT, **kw) -> RayReplayBuffer:
    return RayReplayBuffer(
        OfflineToOnlineReplayBuffer,
        f"memmap:{path}",
        online_capacity=10_000,
        batch_size=BATCH,
        generator=0,
        rate_limiter=limiter,
        **kw,
    )


def in_band(counts) -> bool:
    i, s, n = counts
    return n < LIMIT.min_size_to_sample or LIMIT.min_diff <= LIMIT.error(i, s) <= LIMIT.max_diff


@ray.remote
def collector(rb, tag: float, rows: int, pause: float) -> int:
    """Writes ``rows`` rows through a writer, pausing ``pause`` s after each (a slow env)."""
    with rb.writer(chunk_rows=8, timeout=120) as w:
        for t in range(rows):
            w.add(hopper_rows(1, tag, start=t)[0])
            if pause:
                time.sleep(pause)
    return rows


def test_collectors_of_very_different_speeds_keep_the_ratio_in_the_band(ray_cluster, offline_path):
    rb = remote_buffer(offline_path, prefetch=2)
    fast, slow = 300, 30
    tasks = [collector.remote(rb, 1.0, fast, 0.0), collector.remote(rb, 2.0, slow, 0.05)]
    seen = []

    def learner() -> int:
        batches = 0
        while True:
            done = len(ray.wait(tasks, num_returns=2, timeout=0)[0]) == 2
            try:  # after the collectors are done: until the band holds the learner back
                batch = rb.sample(timeout=0.5 if done else 120)
            except RateLimitTimeoutError:
                if done:
                    return batches
                raise
            assert batch.batch_size == (BATCH,)
            batches += 1
            seen.append(rb.rate_limiter_counts)

    (batches,) = run_threads(learner, timeout=180, release=rb.kill)
    assert ray.get(tasks) == [fast, slow]
    assert all(in_band(c) for c in seen), [c for c in seen if not in_band(c)][:5]
    i, s, n = rb.rate_limiter_counts
    assert i == n == fast + slow  # every row inserted once
    # counted when the actor drew them: the learner's batches, and any drawn ahead
    assert batches * BATCH <= s <= (batches + 2) * BATCH
    online = stored_online_rows(rb)
    for tag, count in ((1.0, fast), (2.0, slow)):
        mine = online[online["action"][:, 0] == tag]
        assert mine["next", "reward"].squeeze(-1).long().tolist() == list(range(count))
    rb.kill()


def test_other_calls_are_served_while_a_sample_or_an_insert_waits(ray_cluster, offline_path):
    rb = remote_buffer(offline_path, online_sampler=PrioritizedSampler(alpha=0.6, beta=0.4))
    rb.extend(hopper_rows(20, 1.0))  # min size reached: error 640, 40 batches of 16 may go
    _, info = rb.sample(return_info=True)
    while True:
        try:
            rb.sample(timeout=0)
        except RateLimitTimeoutError:
            break
    got = []

    def learner():
        got.append(rb.sample(timeout=60))  # waits on this side; the actor goes on serving

    def others():
        time.sleep(0.2)
        assert len(rb) == OFFLINE + 20
        assert rb.actor_info()["rows_received"] == 20
        rb.update_priority(info, torch.full((BATCH,), 3.0))
        state = rb.state_dict()
        assert state["rate_limiter"]["inserts"] == 20
        assert got == []
        rb.extend(hopper_rows(1, 1.0, start=20), timeout=10)  # the insert the learner waits for

    run_threads(learner, others, timeout=120, release=rb.kill)
    assert got[0].batch_size == (BATCH,)

    # now an insert that waits: k of its 6 rows fit the band, the rest wait for samples
    before = rb.rate_limiter_counts
    k = LIMIT.inserts_allowed(*before, 6)
    assert 0 < k < 6
    written = []

    def writer():
        written.append(rb.extend(hopper_rows(6, 1.0, start=21), timeout=60))

    def learner_side():
        while rb.rate_limiter_counts.inserts < before.inserts + k:
            time.sleep(0.01)
        time.sleep(0.2)
        assert written == [] and len(rb) == OFFLINE + 21 + k  # k rows in, the writer waits
        while not written:
            try:
                rb.sample(timeout=0)
            except RateLimitTimeoutError:
                time.sleep(0.01)

    run_threads(writer, learner_side, timeout=120, release=rb.kill)
    assert written[0].tolist() == list(range(21, 27))  # in order, each once
    assert in_band(rb.rate_limiter_counts)
    rb.kill()


def test_kill_and_close_wake_the_waiting_calls(ray_cluster, offline_path):
    woken = []

    def waits(call):
        def run():
            with pytest.raises((BufferClosedError, BufferActorError)) as info:
                call()
            woken.append(type(info.value))

        return run

    # close(): the buffer in the actor lets nothing through any more; the next try says so
    rb = remote_buffer(offline_path)
    run_threads(
        waits(lambda: rb.extend(hopper_rows(30, 1.0), timeout=60)),  # 22 rows fit, 8 wait
        lambda: (time.sleep(0.5), rb.close()),
        timeout=90,
        release=rb.kill,
    )
    # (raised in the actor: Ray's error that is also a BufferClosedError)
    assert len(woken) == 1 and issubclass(woken[0], BufferClosedError)
    assert len(rb) == OFFLINE + 22
    rb.kill()

    # kill(): this handle's waiting calls wake at once; another handle's (another process,
    # in practice) learn at their next try that the actor is gone
    woken.clear()
    rb = remote_buffer(offline_path)  # nothing written: samples wait for 20 rows
    other = pickle.loads(pickle.dumps(rb))
    run_threads(
        waits(lambda: rb.sample(timeout=None, prefetch=2)),
        waits(lambda: other.sample(timeout=None)),
        lambda: (time.sleep(0.5), rb.kill()),
        timeout=90,
    )
    assert sorted(w.__name__ for w in woken) == ["BufferActorError", "BufferClosedError"]


def test_a_restarted_actor_keeps_the_counts_with_the_rows_and_every_row_once(
    ray_cluster, offline_path, tmp_path
):
    marker = tmp_path / "exit-after-next-checkpoint"
    rb = remote_buffer(
        offline_path,
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every=50,
        ray_options={
            "max_restarts": -1,
            "max_task_retries": -1,
            "runtime_env": {"env_vars": {EXIT_AFTER_CHECKPOINT: str(marker)}},
        },
    )
    pid = rb.actor_info()["pid"]
    total = 200
    finished = threading.Event()

    def retrying(call):
        """``call()``, again after the actor is back if it was restarting (same rows)."""
        for _ in range(100):
            try:
                return call()
            except BufferActorError:
                wait_until_back(rb)
        raise AssertionError("the actor never came back")

    def collector():
        for start in range(0, total, 10):
            if start == 60:
                marker.touch()  # the actor exits right after its next checkpoint (in a write)
            retrying(lambda s=start: rb.extend(hopper_rows(10, 1.0, start=s), timeout=60))
        finished.set()

    def learner():
        while True:
            final = finished.is_set()
            try:
                retrying(lambda: rb.sample(timeout=0.5))
            except RateLimitTimeoutError:
                if final:
                    return

    run_threads(collector, learner, timeout=240, release=rb.kill)
    info = rb.actor_info()
    assert info["restarted"] and info["pid"] != pid and not marker.exists()
    assert (stored_online_rows(rb) == hopper_rows(total, 1.0)).all()  # each row once, in order
    i, s, n = rb.rate_limiter_counts
    assert i == n == total and in_band((i, s, n))
    rb.kill()
