"""Faults on a real local Ray cluster: collector tasks that Ray retries, one-shot writers by the
hundred, the actor SIGKILLed in the middle of a checkpoint save, and a restart that takes
seconds while the learner prefetches.

Every actor start costs a process that imports torch, so each test builds one buffer actor
and checks several things with it.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import time

import pytest
import ray
import torch

from mixreplay import OfflineToOnlineReplayBuffer
from mixreplay.checkpoint import load_state
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.distributed import RayReplayBuffer
from mixreplay.errors import BufferActorError
from tests import helpers
from tests.helpers import hopper_rows, stored_online_rows, wait_until_back

pytestmark = [pytest.mark.ray, pytest.mark.heavy]  # actors killed and restarted: minutes

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(helpers)

OFFLINE = 100


@pytest.fixture(scope="module")
def offline_path(tmp_path_factory):
    return write_memmap_dataset(
        tmp_path_factory.mktemp("data") / "offline", hopper_rows(OFFLINE, tag=-1.0)
    )


def remote_buffer(path, capacity, **kw) -> RayReplayBuffer:
    return RayReplayBuffer(
        OfflineToOnlineReplayBuffer,
        f"memmap:{path}",
        online_capacity=capacity,
        batch_size=64,
        generator=0,
        **kw,
    )


def rows_of(online, tag: float) -> list[int]:
    """The row numbers (``("next", "reward")``) of one collector's rows, in slot order."""
    mine = online[online["action"][:, 0] == tag]
    return mine["next", "reward"].squeeze(-1).long().tolist()


@ray.remote  # Ray's defaults, max_retries=3: the collector of docs/scaling.md
def collector(rb, tag: float, steps: int, kill_at: int, marker: str, blocking: bool) -> int:
    """docs/scaling.md's collector. Its first attempt SIGKILLs its own worker at row ``kill_at``,
    with messages in flight; Ray then runs the task again from the start."""

    def die_once(t: int) -> None:
        if t == kill_at and os.path.exists(marker):
            os.unlink(marker)
            os.kill(os.getpid(), signal.SIGKILL)

    if blocking:  # rb.extend, 50 rows a call
        for s in range(0, steps, 50):
            rb.extend(hopper_rows(50, tag, start=s))
            die_once(s)
    else:
        with rb.writer() as w:
            for t in range(steps):
                w.add(hopper_rows(1, tag, start=t)[0])
                if t == steps // 3:
                    w.flush()  # these rows are acknowledged: surely in the buffer
                die_once(t)
    return steps


@ray.remote
def one_shot(rb, i: int) -> None:
    """A collector task that writes once: a new writer for the actor every time."""
    rb.extend(hopper_rows(5, 4.0, start=5 * i))


def test_collector_tasks_that_ray_retries_write_each_row_once(ray_cluster, offline_path, tmp_path):
    steps, kill_at = 3000, 2000
    rb = remote_buffer(offline_path, 10_000, max_writers=64)
    markers = {tag: tmp_path / f"kill-{tag}" for tag in (1.0, 2.0)}
    for m in markers.values():
        m.touch()
    done = ray.get(
        [
            collector.remote(rb, 1.0, steps, kill_at, str(markers[1.0]), False),
            collector.remote(rb, 2.0, steps, kill_at, str(markers[2.0]), True),
        ]
    )
    assert done == [steps, steps]
    assert not any(m.exists() for m in markers.values()), "a first attempt did not die"
    online = stored_online_rows(rb)
    for tag in (1.0, 2.0):
        assert sorted(rows_of(online, tag)) == list(range(steps))  # each row once
    assert len(rb) == OFFLINE + 2 * steps
    # the retries sent the first attempts' rows again; the actor acknowledged them
    info = rb.actor_info()
    assert info["rows_acknowledged_again"] >= (steps // 3 + 1) + (kill_at + 50)

    # Item 14 on the cluster: 200 one-shot collector tasks, at most max_writers records
    ray.get([one_shot.remote(rb, i) for i in range(200)])
    info = rb.actor_info()
    assert info["writers_remembered"] == 64
    assert info["writers_evicted"] == 2 + 200 - 64
    assert len(rb) == OFFLINE + 2 * steps + 1000
    assert sorted(rows_of(stored_online_rows(rb), 4.0)) == list(range(1000))
    rb.kill()


@ray.remote
def identities(marker: str, report: str) -> dict:
    """The writer identities a task mints; its first attempt records them and dies."""
    from mixreplay.distributed.chunks import ChunkIds, mint_writer_id

    in_thread: list = []
    t = threading.Thread(target=lambda: in_thread.append(mint_writer_id("writer")))
    t.start()
    t.join()
    out = {
        "handle": [ChunkIds().writer, ChunkIds().writer],  # blocking writes of two threads/copies
        "writer": [mint_writer_id("writer") for _ in range(2)],
        "thread": in_thread[0][0],
    }
    if os.path.exists(marker):
        with open(report, "w") as f:
            json.dump(out, f)
        os.unlink(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    return out


@ray.remote(num_cpus=0)
class MintsInInit:
    def __init__(self):
        from mixreplay.distributed.chunks import _task_key

        self.key_in_init = _task_key()

    def keys(self):
        from mixreplay.distributed.chunks import _task_key

        return self.key_in_init, _task_key()


def test_a_retried_task_mints_the_same_writer_identities_and_only_it(ray_cluster, tmp_path):
    marker, report = tmp_path / "kill", tmp_path / "first.json"
    marker.touch()
    retry = ray.get(identities.remote(str(marker), str(report)))
    first = json.loads(report.read_text())
    assert retry["handle"] == first["handle"]  # the retry's writers are the first attempt's
    assert [w for w, _ in retry["writer"]] == [w for w, _ in first["writer"]]
    # Ray's public API does not tell a task its attempt: every attempt reports 0
    assert [a for _, a in first["writer"]] == [0, 0] and [a for _, a in retry["writer"]] == [0, 0]
    every = [*retry["handle"], *(w for w, _ in retry["writer"])]
    assert len(set(every)) == 4  # blocking writes and RayWriters never share an identity
    assert retry["thread"] != first["thread"]  # a thread of the task's own: random
    holder = MintsInInit.remote()
    in_init, in_method = ray.get(holder.keys.remote())
    assert in_init is None  # an actor's __init__ runs again on restart, with new rows: random
    assert in_method is not None and in_method[1] == 0  # a method call: its task id
    ray.kill(holder)


def test_the_actor_killed_during_a_checkpoint_save_comes_back_consistent(
    ray_cluster, offline_path, tmp_path
):
    """The actor is SIGKILLed while it writes a checkpoint (inside the write that crosses
    checkpoint_every). The checkpoint on disk is the old one or the new one, whole; the
    restarted actor loads it with its table of writers; Ray retries the write; each row of it
    lands once."""
    n = 150_000  # ~17 MB of rows per checkpoint: a save long enough to be caught in progress
    ckpt = tmp_path / "ckpt"
    rb = remote_buffer(
        offline_path,
        2 * n,
        checkpoint_dir=str(ckpt),
        checkpoint_every=n,
        ray_options={"max_restarts": -1, "max_task_retries": -1},
    )
    rb.extend(hopper_rows(n, 1.0))  # the first checkpoint, saved inside this write
    pid = rb.actor_info()["pid"]
    caught: list[str] = []

    def kill_while_saving() -> None:
        for _ in range(2_000_000):  # bounded, so a broken save cannot hang the suite
            temp = [p.name for p in ckpt.iterdir() if p.name.startswith(f".buffer.tmp-{pid}-")]
            if temp:
                os.kill(pid, signal.SIGKILL)
                caught.extend(temp)
                return
            time.sleep(0.0002)

    killer = threading.Thread(target=kill_while_saving)
    killer.start()
    slots = rb.extend(hopper_rows(n, 1.0, start=n))  # crosses the mark: the save the kill cuts
    killer.join()
    assert caught, "the checkpoint save was never seen in progress"
    info = rb.actor_info()
    assert info["restarted"] and info["pid"] != pid
    # restored from the old checkpoint (the write applied again: 0 rows acknowledged) or from
    # the new one (its rows acknowledged); either way each row once
    assert info["rows_acknowledged_again"] in (0, n)
    assert slots.tolist() == list(range(n, 2 * n))
    assert len(rb) == OFFLINE + 2 * n
    assert (stored_online_rows(rb) == hopper_rows(2 * n, 1.0)).all()
    # what is on disk now loads, whole, and agrees with the actor; nothing half-written is left
    saved = load_state(ckpt / "buffer")
    assert saved["buffer"]["sources"]["online"]["storage"]["rows"].shape[0] == 2 * n
    assert [p.name for p in ckpt.iterdir()] == ["buffer"]
    rb.kill()


def slow_to_restart(path: str, marker: str) -> OfflineToOnlineReplayBuffer:
    """The buffer; built seconds late once ``marker`` exists (a restart that takes long)."""
    if os.path.exists(marker):
        time.sleep(5)
    return OfflineToOnlineReplayBuffer(
        f"memmap:{path}", online_capacity=1000, batch_size=64, generator=0, source_key="src"
    )


def check_batch(batch) -> None:
    """A whole, genuine batch: 32 offline rows then 32 online, each row one written row."""
    assert batch.batch_size == torch.Size([64])
    assert batch["src"].tolist() == [0] * 32 + [1] * 32
    assert (batch["action"][:32] == -1.0).all() and (batch["action"][32:] == 1.0).all()
    # hopper_rows: observation = tag + row number, reward = row number
    expected = batch["action"][:, :1] + batch["next", "reward"]
    assert (batch["observation"] == expected.expand(-1, 11)).all()


@pytest.mark.parametrize("retries", [-1, 0], ids=["max_task_retries", "no_retries"])
def test_a_prefetching_learner_waits_or_raises_clearly_through_a_long_restart(
    ray_cluster, offline_path, tmp_path, retries
):
    marker = tmp_path / "slow"
    rb = RayReplayBuffer(
        slow_to_restart,
        str(offline_path),
        str(marker),
        prefetch=3,
        checkpoint_dir=str(tmp_path / "ckpt"),
        ray_options={"max_restarts": -1, "max_task_retries": retries},
    )
    rb.extend(hopper_rows(500, 1.0))
    rb.checkpoint()
    copy = pickle.loads(pickle.dumps(rb))  # a handle copy made before the restart
    for _ in range(5):
        check_batch(rb.sample())
    pid = rb.actor_info()["pid"]
    marker.touch()
    os.kill(pid, signal.SIGKILL)
    errors: list[str] = []
    batches = 0
    for _ in range(3000):  # bounded only so that a broken restart cannot hang the suite
        try:
            check_batch(rb.sample())
        except BufferActorError as err:
            errors.append(str(err))
            time.sleep(0.05)
            continue
        batches += 1
        if batches == 10:
            break
    assert batches == 10
    if retries:
        assert errors == []  # Ray resent the requests in flight: the learner only waited
    else:
        assert errors, "the restart went unnoticed"
        for e in errors:  # it says the actor is coming back, never that its rows are lost
            assert "is restarting" in e or "is unavailable" in e, e
            assert "rows are lost" not in e, e
    info = wait_until_back(rb)
    assert info["restarted"] and info["pid"] != pid and info["restored_from"]
    rb.kill()
    # an error names the process that ran last, not the first one, even from the old copy
    with pytest.raises(BufferActorError, match=rf"pid {info['pid']}\) died"):
        len(copy)
