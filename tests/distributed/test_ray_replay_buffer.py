"""RayReplayBuffer on a local Ray cluster: collectors in other processes, prefetch, failures, restarts.

Every actor start costs a process that imports torch, so each test builds one
buffer actor and checks several things with it.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import signal
import sys

import pytest
import ray
import torch

from mixreplay import (
    DatasetNotFoundError,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    SchemaMismatchError,
)
from mixreplay.checkpoint import load_state
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.distributed import RayReplayBuffer
from mixreplay.errors import BufferActorError
from tests import helpers
from tests.helpers import hopper_rows, stored_online_rows, wait_until_back

pytestmark = pytest.mark.ray

# Ray workers cannot import the test files: ship their functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(helpers)

OFFLINE = 500


@pytest.fixture(scope="module")
def offline_path(tmp_path_factory):
    return write_memmap_dataset(
        tmp_path_factory.mktemp("data") / "offline", hopper_rows(OFFLINE, tag=-1.0)
    )


def local_buffer(path, **kw) -> OfflineToOnlineReplayBuffer:
    return OfflineToOnlineReplayBuffer(
        f"memmap:{path}", online_capacity=5000, batch_size=64, generator=0, **kw
    )


def remote_buffer(path, **kw) -> RayReplayBuffer:
    return RayReplayBuffer(
        OfflineToOnlineReplayBuffer,
        f"memmap:{path}",
        online_capacity=5000,
        batch_size=64,
        generator=0,
        **kw,
    )


@ray.remote(max_retries=0)
def collect(rb, tag: float, n: int, chunk: int | None):
    """A collector process: one row at a time through a writer, or ``chunk``-row extends."""
    if chunk is None:
        with rb.writer(chunk_rows=64) as w:
            for i in range(n):
                w.add(hopper_rows(1, tag, start=i)[0])
    else:
        for s in range(0, n, chunk):
            rb.extend(hopper_rows(min(chunk, n - s), tag, start=s))
    return os.getpid()


@ray.remote(num_cpus=0, max_restarts=0)
class Collector:
    """Writes 100-row messages through a writer; killed by the test mid-stream."""

    def __init__(self, rb):
        self.w = rb.writer(chunk_rows=100, max_in_flight=1)
        self.i = 0

    def write(self, n: int) -> int:
        """``n`` rows, then wait until the actor has written them."""
        for _ in range(n // 100):
            self.w.extend(hopper_rows(100, 3.0, start=self.i))
            self.i += 100
        self.w.flush()
        return self.i

    def forever(self) -> None:
        while True:
            self.write(100)

    def ping(self) -> None:
        """Runs only after ``forever``, i.e. never: it fails when the actor is killed."""


@pytest.mark.heavy  # collector processes, each importing torch and joining the cluster
def test_collectors_in_other_processes_extend_one_buffer_through_a_pickled_handle(
    ray_cluster, offline_path
):
    rb = remote_buffer(offline_path, ray_options={"name": "mixreplay-test-buffer"})
    pids = ray.get(
        [collect.remote(rb, 1.0, 300, None), collect.remote(rb, 2.0, 250, 40)], timeout=120
    )
    assert os.getpid() not in pids
    assert len(rb) == OFFLINE + 550
    online = stored_online_rows(rb)
    for tag, n in ((1.0, 300), (2.0, 250)):
        mine = online[online["action"][:, 0] == tag]
        # every row arrived once, whole, and in its collector's order
        assert mine["next", "reward"].squeeze(-1).tolist() == list(range(n))
        assert (mine == hopper_rows(n, tag)).all()

    clone = pickle.loads(pickle.dumps(rb))
    assert len(clone) == len(rb) and clone.actor_info()["pid"] == rb.actor_info()["pid"]
    by_name = RayReplayBuffer.connect("mixreplay-test-buffer")
    assert len(by_name) == len(rb) and by_name.actor_info()["pid"] == rb.actor_info()["pid"]
    assert repr(rb).startswith("RayReplayBuffer(OfflineToOnlineReplayBuffer, actor=")
    # the buffer's methods and properties, called on the actor
    assert rb.offline_fraction == 0.5 and rb.batch_size == 64
    rb.anneal(1, 4)
    assert rb.offline_fraction == pytest.approx(0.375)
    assert {"extend", "sample", "set_step", "update_priority", "dumps", "loads"} <= set(dir(rb))
    with pytest.raises(
        AttributeError,
        match=r"hosting OfflineToOnlineReplayBuffer has no attribute 'nope'; methods: \[.*'sample'",
    ):
        rb.nope  # noqa: B018
    # a writer's error surfaces when it next waits, naming the key
    w = rb.writer()
    w.extend(hopper_rows(5).exclude("action"))
    with pytest.raises(SchemaMismatchError, match="'action'"):
        w.flush()
    with pytest.raises(TypeError, match="does not pickle"):
        pickle.dumps(w)
    rb.kill()


def test_exact_split_and_prefetched_batches_match_a_local_buffer(ray_cluster, offline_path):
    k = 3
    rb = remote_buffer(offline_path, prefetch=k, source_key="src")
    local = local_buffer(offline_path, source_key="src")
    rows = hopper_rows(1000, tag=1.0)
    assert rb.extend(rows).tolist() == local.extend(rows).tolist() == list(range(1000))

    def same(a, b):
        return a.batch_size == b.batch_size and (a == b).all()

    for _ in range(5):  # no concurrent writers: exactly the local buffer's sequence
        batch = rb.sample()
        assert same(batch, local.sample())
        assert batch["src"].tolist() == [0] * 32 + [1] * 32  # exact split, offline rows first
    # the k batches in flight were drawn before anneal: the new split shows k batches later
    rb.anneal(1, 4)
    in_flight = [local.sample() for _ in range(k)]
    local.anneal(1, 4)
    for expected in in_flight:
        assert same(rb.sample(), expected)
    batch = rb.sample()
    assert same(batch, local.sample())
    assert int((batch["src"] == 0).sum()) == round(0.375 * 64) == 24
    # another batch size drops the requests in flight (their draws are spent)
    for _ in range(k):
        local.sample()
    batch, info = rb.sample(32, return_info=True)
    lbatch, linfo = local.sample(32, return_info=True)
    assert same(batch, lbatch) and (info == linfo).all()
    rb.update_priority(info, torch.ones(32))  # forwarded (a no-op without a prioritized sampler)
    rb.kill()


@pytest.mark.heavy  # a collector and then the actor killed
def test_a_dying_collector_leaves_the_buffer_serving_and_a_dead_buffer_raises(
    ray_cluster, offline_path
):
    rb = remote_buffer(offline_path)
    collector = Collector.remote(rb)
    assert ray.get(collector.write.remote(1000)) == 1000  # written: no polling, no deadline
    collector.forever.remote()
    ray.kill(collector)  # kills the collector's process mid-stream
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(collector.ping.remote())  # queued behind forever(): fails once it is dead
    received = rb.actor_info()["rows_received"]
    # Only whole messages ever land (one sent just before the kill may land later: the
    # checks below hold either way).
    assert received >= 1000 and received % 100 == 0
    assert rb.sample().batch_size == (64,)
    assert len(rb.extend(hopper_rows(10))) == 10
    after = rb.actor_info()["rows_received"]
    assert after >= received + 10 and after % 100 == 10

    pid = rb.actor_info()["pid"]
    rb.kill()  # returns once the actor is dead: no call after it can still run
    died = rf"actor hosting the replay buffer \(OfflineToOnlineReplayBuffer, actor [0-9a-f]+, pid {pid}\) died .*max_restarts"
    with pytest.raises(BufferActorError, match=died):
        rb.sample()
    with pytest.raises(BufferActorError, match=died):
        len(rb)
    with pytest.raises(BufferActorError):
        rb.extend(hopper_rows(1))


@pytest.mark.heavy  # the actor killed and restarted
def test_a_restarted_actor_reloads_its_last_checkpoint(ray_cluster, offline_path, tmp_path):
    ckpt = tmp_path / "ckpt"
    rb = remote_buffer(
        offline_path,
        ray_options={"max_restarts": 1},
        checkpoint_dir=str(ckpt),
        checkpoint_every=100,
    )
    for i in range(5):  # 250 rows: checkpoints after 100 and 200; the last 50 are not saved
        rb.extend(hopper_rows(50, 1.0, start=50 * i))
    rb.sample()
    before = rb.actor_info()
    assert before["checkpoints_saved"] == 2 and not before["restarted"]

    os.kill(before["pid"], signal.SIGKILL)
    after = wait_until_back(rb)  # calls fail (unavailable) or wait while Ray restarts it
    assert after["restarted"] and after["pid"] != before["pid"]
    assert after["restored_from"] == str(ckpt / "buffer")
    assert len(rb) == OFFLINE + 200
    # the checkpoint holds JSON and raw tensor bytes only: the restart loaded no pickled code
    assert {p.suffix for p in (ckpt / "buffer").iterdir()} == {".json", ".bin"}
    local = local_buffer(offline_path)
    local.load_state_dict(load_state(ckpt / "buffer")["buffer"])
    assert (rb.sample() == local.sample()).all()  # rows and generator, as saved
    rb.kill()


def test_construction_errors_surface_where_the_buffer_is_created(ray_cluster, tmp_path):
    missing = tmp_path / "missing"
    with (
        pytest.warns(
            UserWarning, match="without checkpoint_dir: a restarted buffer actor comes back empty"
        ),
        pytest.raises(DatasetNotFoundError, match="missing"),
    ):
        remote_buffer(missing, ray_options={"max_restarts": 1})
    with pytest.raises(TypeError, match=r"could not be pickled .* by ID or path \('memmap:/dir'"):
        RayReplayBuffer(
            OfflineToOnlineReplayBuffer, "memmap:/x", online_capacity=10, transform=_Unpicklable()
        )


class _Unpicklable:
    def __call__(self, td):
        return td

    def __reduce__(self):
        raise TypeError("this transform cannot be pickled")


def test_in_memory_dataset_is_shipped_as_a_copy(ray_cluster):
    in_memory = OfflineDataset.from_tensordict(hopper_rows(10))
    rb = RayReplayBuffer(OfflineToOnlineReplayBuffer, in_memory, online_capacity=10, generator=0)
    assert len(rb) == 10
    assert rb.sample(4).batch_size == (4,)


def test_nothing_lands_in_the_home_directory(ray_cluster):
    assert ray_cluster.home_ray_existed or not (pathlib.Path.home() / ".ray").exists()
