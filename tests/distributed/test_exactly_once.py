"""Exactly-once writes on a real local Ray cluster: the buffer actor dies after a checkpoint, before replying.

The actor saves a checkpoint inside the write that crosses ``checkpoint_every``;
the test-only fault ``MIXREPLAY_TEST_EXIT_AFTER_CHECKPOINT`` makes it exit at that
moment, so the checkpoint already holds the rows of the write whose caller has no
answer. Ray restarts the actor, which reloads that checkpoint. The write is then
retried, by Ray (``max_task_retries``) or by the caller after the
:class:`BufferActorError`, and must be acknowledged with the slots it went to,
not applied a second time.
"""

from __future__ import annotations

import logging
import sys

import pytest
import ray
import ray_helpers
from ray_helpers import hopper_rows, stored_online_rows, wait_until_back

from mixreplay import OfflineToOnlineReplayBuffer
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.distributed import RayReplayBuffer
from mixreplay.distributed.host import EXIT_AFTER_CHECKPOINT
from mixreplay.errors import BufferActorError

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ray_helpers)

OFFLINE = 50
EVERY = 100  # checkpoint_every


@pytest.fixture(scope="module")
def offline_path(tmp_path_factory):
    return write_memmap_dataset(
        tmp_path_factory.mktemp("data") / "offline", hopper_rows(OFFLINE, tag=-1.0)
    )


class Crashing:
    """A buffer actor that exits right after the next checkpoint saved inside a write."""

    def __init__(self, offline_path, tmp_path, retries: int):
        self.marker = tmp_path / "exit-after-next-checkpoint"
        self.retries = retries
        self.rb = RayReplayBuffer(
            OfflineToOnlineReplayBuffer,
            f"memmap:{offline_path}",
            online_capacity=1000,
            batch_size=16,
            generator=0,
            checkpoint_dir=str(tmp_path / "ckpt"),
            checkpoint_every=EVERY,
            ray_options={
                "max_restarts": -1,
                "max_task_retries": retries,
                "runtime_env": {"env_vars": {EXIT_AFTER_CHECKPOINT: str(self.marker)}},
            },
        )
        self.pid = self.rb.actor_info()["pid"]

    def crash_at_next_checkpoint(self) -> None:
        self.marker.touch()

    def write(self, call, retry_advice: str):
        """``call()`` as a caller makes it: with Ray's retries it just returns; without, it
        raises :class:`BufferActorError` and the caller calls it again once the actor is back."""
        if self.retries:
            out = call()
        else:
            with pytest.raises(BufferActorError, match=retry_advice):
                call()
            wait_until_back(self.rb)
            out = call()
        info = self.rb.actor_info()
        assert not self.marker.exists(), "the actor did not exit at the checkpoint"
        assert info["restarted"] and info["pid"] != self.pid
        self.pid = info["pid"]
        return out, info


@pytest.mark.parametrize("retries", [-1, 0], ids=["max_task_retries", "caller_retries"])
def test_a_write_whose_rows_were_checkpointed_before_the_crash_is_applied_once(
    ray_cluster, offline_path, tmp_path, retries, caplog
):
    actor = Crashing(offline_path, tmp_path, retries)
    rb = actor.rb
    blocking = (
        r"Retry the same call with the same rows: the handle resends them under the same chunk ids"
    )

    # rb.extend: 60 rows, then 60 more that cross the checkpoint mark (120 rows saved)
    rb.extend(hopper_rows(60, 1.0, start=0))
    actor.crash_at_next_checkpoint()
    slots, info = actor.write(lambda: rb.extend(hopper_rows(60, 1.0, start=60)), blocking)
    assert slots.tolist() == list(range(60, 120))  # the slots of the first, persisted attempt
    assert info["chunks_acknowledged_again"] == 1
    assert len(rb) == OFFLINE + 120

    # rb.add: the row that crosses the next mark
    rb.extend(hopper_rows(99, 1.0, start=120))
    actor.crash_at_next_checkpoint()
    slot, info = actor.write(lambda: rb.add(hopper_rows(1, 1.0, start=219)[0]), blocking)
    assert slot == 219
    assert info["chunks_acknowledged_again"] == 1  # counted by this (restarted) actor process
    assert len(rb) == OFFLINE + 220

    # rb.writer(): four 25-row messages in flight, the fourth crosses the mark
    w = rb.writer(chunk_rows=25)
    actor.crash_at_next_checkpoint()
    for i in range(220, 320):
        w.add(hopper_rows(1, 1.0, start=i)[0])
    assert w.messages_sent == 4 and w.rows_staged == 0
    _, info = actor.write(w.flush, r"w\.flush\(\) resends them under their chunk ids")
    assert info["chunks_acknowledged_again"] >= 1  # >1 if Ray lost a reply sent before the exit
    w.extend(hopper_rows(30, 1.0, start=320))  # the writer goes on after the restart
    w.flush()

    assert len(rb) == OFFLINE + 350
    online = stored_online_rows(rb)
    assert (online == hopper_rows(350, 1.0)).all()  # every row once, in the order written
    if retries:
        rb.kill()
        return

    # A caller that does not retry but writes other rows: a new write, and a warning that
    # the failed one was abandoned (here it had been checkpointed, so its row is there, once).
    rb.extend(hopper_rows(EVERY - 31, 1.0, start=350))
    actor.crash_at_next_checkpoint()
    with pytest.raises(BufferActorError, match="may or may not have been written"):
        rb.add(hopper_rows(1, 1.0, start=419)[0])
    wait_until_back(rb)
    with caplog.at_level(logging.WARNING, logger="mixreplay.distributed.handle"):
        assert rb.add(hopper_rows(1, 1.0, start=420)[0]) == 420
    assert "a write of 1 rows that failed was not retried with the same rows" in caplog.text
    assert rb.actor_info()["chunks_acknowledged_again"] == 0
    assert (stored_online_rows(rb) == hopper_rows(421, 1.0)).all()
    rb.kill()


def test_threads_sharing_a_handle_each_retry_their_own_failed_write(
    ray_cluster, offline_path, tmp_path
):
    """Two threads write through one handle. Thread A's write is checkpointed, then the actor
    dies before replying; thread B then writes other rows. A's retry must still be recognised
    (the handle's record of a failed write is per thread, not shared), so A's rows land once."""
    from concurrent.futures import ThreadPoolExecutor

    actor = Crashing(offline_path, tmp_path, retries=0)
    rb = actor.rb
    rb.extend(hopper_rows(60, 1.0))
    with ThreadPoolExecutor(1) as thread_a, ThreadPoolExecutor(1) as thread_b:
        actor.crash_at_next_checkpoint()
        first = thread_a.submit(rb.extend, hopper_rows(60, 1.0, start=60))
        with pytest.raises(BufferActorError, match="may or may not have been written"):
            first.result()
        wait_until_back(rb)
        assert not actor.marker.exists()
        assert thread_b.submit(rb.extend, hopper_rows(10, 2.0)).result().tolist() == list(
            range(120, 130)
        )
        retried = thread_a.submit(rb.extend, hopper_rows(60, 1.0, start=60)).result()
    assert retried.tolist() == list(range(60, 120))  # acknowledged: the slots of the first try
    assert len(rb) == OFFLINE + 130
    online = stored_online_rows(rb)
    assert (online[:120] == hopper_rows(120, 1.0)).all()
    assert (online[120:] == hopper_rows(10, 2.0)).all()
    rb.kill()
