"""The wire format, the actor-side host and the handle's argument checks: no Ray cluster needed."""

from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_helpers import hopper_rows, ring_rows
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    DatasetNotFoundError,
    LazyTensorStorage,
    MissingDependencyError,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.checkpoint import load_state, save_state
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.distributed.chunks import ChunkIds, WriterTable, mint_writer_id
from mixreplay.distributed.host import BufferHost, info_tensordict
from mixreplay.distributed.wire import (
    INLINE_BYTES,
    MAX_SPLIT,
    LayoutCache,
    Packer,
    check_rows,
    inline_rows,
    message_slices,
)
from mixreplay.errors import BufferActorError, WriterEvictedError


@pytest.fixture
def offline_path(tmp_path):
    return write_memmap_dataset(tmp_path / "offline", hopper_rows(500, tag=-1000.0))


def make_buffer(path, seed=0, **kw):
    return OfflineToOnlineReplayBuffer(
        f"memmap:{path}", online_capacity=2000, batch_size=32, generator=seed, **kw
    )


# -- wire ---------------------------------------------------------------------------------------


def test_message_slices_stay_inline_or_go_whole():
    chunk = inline_rows(112)
    assert chunk == INLINE_BYTES // 112 == 877
    assert message_slices(10, 112) == [slice(0, 10)]
    assert message_slices(1000, 112) == [slice(0, 877), slice(877, 1000)]
    big = MAX_SPLIT * chunk + 1
    assert message_slices(big, 112) == [slice(0, big)]
    assert message_slices(10, 112, chunk_rows=4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert inline_rows(10**9) == 1


def test_packed_rows_round_trip_through_numpy():
    td = hopper_rows(5, tag=3.0)
    td["image"] = torch.arange(5 * 2 * 3, dtype=torch.uint8).reshape(5, 2, 3)
    td["count"] = torch.arange(5, dtype=torch.int64)  # per-row shape ()
    packer = Packer()
    words = packer.pack(td)
    assert words.dtype == np.int64 and words.shape == (5, packer.layout.row_words)
    back = LayoutCache().unpack(packer.key, words)
    assert (back == td).all()
    assert list(back.keys()) == list(td.keys())


def test_packer_follows_a_change_of_layout():
    packer = Packer()
    packer.pack(hopper_rows(2))
    first = packer.key
    packer.pack(hopper_rows(2).exclude(("next", "done")))
    assert packer.key != first


def test_read_only_words_are_wrapped_without_warning_and_copied_when_kept():
    packer = Packer()
    words = packer.pack(hopper_rows(3))
    words.flags.writeable = False
    cache = LayoutCache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        view = cache.unpack(packer.key, words, writable=False)
        kept = cache.unpack(packer.key, words)
    assert (view == kept).all()
    kept["observation"] += 1  # the batch a learner gets is ordinary, writable memory
    assert not (view == kept).all()


@pytest.mark.parametrize(
    ("data", "err", "match"),
    [
        ({"x": torch.zeros(3)}, TypeError, "extend expects a TensorDict of rows, got dict"),
        (
            TensorDict({"x": torch.zeros(2, 3)}, [2, 3]),
            ValueError,
            r"one batch dim .* batch_size=\[2, 3\]",
        ),
        (TensorDict({"x": torch.zeros(0)}, [0]), ValueError, "empty batch"),
    ],
)
def test_check_rows_rejects_what_extend_rejects(data, err, match):
    with pytest.raises(err, match=match):
        check_rows(data)


# -- host (what runs in the actor) ----------------------------------------------------------------


def test_host_extend_and_sample_match_a_local_buffer(offline_path):
    host = BufferHost(make_buffer, (offline_path,), {"source_key": "src"}, restarted=False)
    local = make_buffer(offline_path, source_key="src")
    packer = Packer()
    rows = hopper_rows(100, tag=5.0)
    words = packer.pack(rows)
    index = host.extend_packed(packer.key, words)
    assert index.tolist() == local.extend(rows).tolist()
    assert host.extend_packed(packer.key, packer.pack(hopper_rows(3)), None, False) == 3
    local.extend(hopper_rows(3))
    cache = LayoutCache()
    for _ in range(3):
        key, words, shape, info = host.sample_packed(None, True)
        batch, linfo = local.sample(return_info=True)
        assert shape == (32,)
        assert (cache.unpack(key, words) == batch).all()
        assert (info_tensordict(info, 32) == linfo).all()
    assert host.length() == len(local) == 603
    assert host.info()["rows_received"] == 103


def test_host_describes_methods_and_properties(offline_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    d = host.describe()
    assert d["buffer"] == "OfflineToOnlineReplayBuffer"
    assert {
        "extend",
        "sample",
        "anneal",
        "set_step",
        "update_priority",
        "dumps",
        "loads",
        "state_dict",
    } <= set(d["methods"])
    assert {"offline_fraction", "batch_size", "generator"} <= set(d["properties"])
    host.call("anneal", (5, 10))
    assert host.get("offline_fraction") == pytest.approx(0.25)
    with pytest.raises(
        TypeError, match=r"rb.online_buffer is a ReplayBuffer that lives in the buffer actor"
    ):
        host.get("online_buffer")


def test_host_keeps_a_construction_error_and_raises_it_on_every_call(tmp_path):
    host = BufferHost(make_buffer, (tmp_path / "missing",), restarted=False)
    for call in (host.describe, host.length, lambda: host.sample_packed(4, False)):
        with pytest.raises(DatasetNotFoundError):
            call()


def test_host_checkpoints_every_n_rows_and_restores_only_on_restart_or_resume(
    offline_path, tmp_path
):
    ckpt = tmp_path / "ckpt"
    host = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=ckpt, checkpoint_every=100, restarted=False
    )
    packer = Packer()
    for i in range(5):  # 250 rows: saved after 100 and 200
        words = packer.pack(hopper_rows(50, start=50 * i))
        host.extend_packed(packer.key, words, None, False)
    assert host.info()["checkpoints_saved"] == 2
    # JSON and raw tensor bytes only: restoring it loads no pickled code
    assert {p.suffix for p in (ckpt / "buffer").iterdir()} == {".json", ".bin"}

    with pytest.raises(CheckpointError, match="already holds a checkpoint .* resume=True"):
        BufferHost(make_buffer, (offline_path,), checkpoint_dir=ckpt, restarted=False).length()
    restarted = BufferHost(make_buffer, (offline_path,), checkpoint_dir=ckpt, restarted=True)
    assert restarted.length() == 500 + 200
    assert restarted.info()["restored_from"] == str(ckpt / "buffer")
    resumed = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=ckpt, resume=True, restarted=False
    )
    assert (
        resumed.sample_packed(None, False)[1].tolist()
        == restarted.sample_packed(None, False)[1].tolist()
    )
    with pytest.raises(ValueError, match="no checkpoint_dir"):
        BufferHost(make_buffer, (offline_path,), restarted=False).checkpoint()


# -- exactly-once writes (chunk ids) --------------------------------------------------------------


def send(host, packer, ids, start, rows, want_index=True):
    """What the handle sends: one chunk of packed rows, numbered from ``start``, with its id."""
    words = packer.pack(rows)
    return host.extend_packed(packer.key, words, None, want_index, ids.chunk_id(start))


def test_host_applies_each_chunk_once_and_saves_the_ids_with_the_rows(offline_path, tmp_path):
    ckpt = tmp_path / "ckpt"
    host = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=ckpt, checkpoint_every=100, restarted=False
    )
    packer, ids = Packer(), ChunkIds()
    first, second, third = ids.take([60, 40, 5])
    assert (first, second, third) == (0, 60, 100)  # rows are numbered, not messages
    assert send(host, packer, ids, first, hopper_rows(60)).tolist() == list(range(60))
    # a retry (Ray's, or the caller's): acknowledged with the same slots, not written again
    assert send(host, packer, ids, first, hopper_rows(60)).tolist() == list(range(60))
    assert host.length() == 500 + 60
    # the chunk that crosses checkpoint_every is saved with its id, in the same directory
    assert send(host, packer, ids, second, hopper_rows(40, start=60)).tolist() == list(
        range(60, 100)
    )
    info = host.info()
    assert info["checkpoints_saved"] == 1 and info["chunks_acknowledged_again"] == 1
    assert info["rows_acknowledged_again"] == 60
    assert {p.suffix for p in (ckpt / "buffer").iterdir()} == {".json", ".bin"}
    saved = load_state(ckpt / "buffer")
    assert set(saved) == {"buffer", "writers"}
    # one record: rows [0, 100) applied; both chunks' slots kept (not acknowledged yet)
    table = saved["writers"]
    assert bytes(table["ids"][0].numpy()).decode() == ids.writer
    assert table["done"].tolist() == [100] and table["extra"].tolist() == []
    assert table["open"].tolist() == [[0, 0, 0, 60], [0, 60, 60, 40]]
    assert table["slots"].tolist() == list(range(100))
    # a write-only chunk (the RayWriter's) is acknowledged again with its row count
    assert send(host, packer, ids, third, hopper_rows(5, start=100), want_index=False) == 5

    # the actor died after that save, before replying: the restarted one has rows AND ids
    restarted = BufferHost(make_buffer, (offline_path,), checkpoint_dir=ckpt, restarted=True)
    assert restarted.length() == 500 + 100
    assert send(restarted, packer, ids, second, hopper_rows(40, start=60)).tolist() == list(
        range(60, 100)
    )
    assert send(restarted, packer, ids, third, hopper_rows(5, start=100), want_index=False) == 5
    assert restarted.length() == 500 + 105  # the chunk saved after the checkpoint, applied once
    assert restarted.info()["chunks_acknowledged_again"] == 1
    online = ring_rows(restarted.buffer.state_dict())
    assert (online == hopper_rows(105)).all()

    # acknowledged chunks' slots are forgotten once the writer names a floor above them
    ids.done([first, second, third])
    (fourth,) = ids.take([1])
    assert ids.chunk_id(fourth)[2] == 105
    send(restarted, packer, ids, fourth, hopper_rows(1, start=105))
    info = restarted.info()
    assert info["writers_remembered"] == 1 and info["slots_remembered"] == 1


def test_a_retried_task_resending_its_rows_cut_differently_applies_each_row_once(offline_path):
    """A collector task that Ray retries runs again from the start with the same writer
    identity: its rows come again, cut into other messages (the writer coalesces while the
    actor is behind). Rows the first attempt sent are acknowledged, the rest applied."""
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    packer = Packer()
    rows = hopper_rows(100, tag=1.0)
    first = ChunkIds(("task-writer", 0))
    for start in first.take([30, 30, 7]):  # 67 rows sent, the last chunk not acknowledged
        send(host, packer, first, start, rows[start : start + {0: 30, 30: 30, 60: 7}[start]])
    retry = ChunkIds(("task-writer", 1))  # attempt 1: same identity, rows from 0 again
    got = []
    for start in retry.take([50, 40, 10]):
        n = {0: 50, 50: 40, 90: 10}[start]
        got.append(send(host, packer, retry, start, rows[start : start + n]))
        retry.done([start])
    assert host.length() == 500 + 100
    assert (ring_rows(host.buffer.state_dict()) == rows).all()  # every row once, in order
    # slots: those of the rows written now, and of the first attempt's chunks not yet
    # acknowledged; -1 for rows whose chunk the first attempt had acknowledged
    slots = np.concatenate(got).tolist()
    assert slots[67:] == list(range(67, 100))
    assert slots[:60].count(-1) + sum(1 for s in slots[:60] if 0 <= s < 60) == 60
    assert host.info()["rows_acknowledged_again"] == 67


def test_a_refused_chunk_is_not_remembered(offline_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    packer, ids = Packer(), ChunkIds()
    send(host, packer, ids, *ids.take([3]), hopper_rows(3))
    (start,) = ids.take([3])
    with pytest.raises(Exception, match="action"):
        send(host, packer, ids, start, hopper_rows(3).exclude("action"))
    assert host.info()["slots_remembered"] == 3 and host.length() == 503
    # the same rows, accepted this time, are a write (the refused one changed nothing)
    assert send(host, packer, ids, start, hopper_rows(3)).tolist() == [3, 4, 5]


def test_a_buffer_checkpoint_from_before_chunk_ids_still_resumes(offline_path, tmp_path):
    old = make_buffer(offline_path)
    old.extend(hopper_rows(7))
    old.dumps(tmp_path / "ckpt" / "buffer")  # what the actor saved before chunk ids
    host = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True, restarted=False
    )
    assert host.length() == 507 and host.info()["writers_remembered"] == 0
    # a table of version 1 (chunks numbered per message) loads empty
    v1 = {"version": 1, "writers": {"w": [[1, 0, 2]]}, "slots": torch.arange(2)}
    save_state(tmp_path / "ckpt" / "buffer", {"buffer": old.state_dict(), "writers": v1})
    host = BufferHost(make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True)
    assert host.length() == 507 and host.info()["writers_remembered"] == 0


def test_a_damaged_writer_table_is_refused(offline_path, tmp_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    table = WriterTable()
    table.applied("w", 0, 2, np.array([0, 1]))
    table.applied("w", 5, 6, None)
    good = {"buffer": host.buffer.state_dict(), "writers": table.state_dict()}
    w = good["writers"]
    i64 = torch.int64
    for writers, match in [
        ({**w, "version": 9}, "writer table has version 9"),
        ({**w, "open": torch.tensor([[0, 0, 0, 5]])}, r"slots \[0, 5\) lie outside the 2"),
        ({**w, "open": torch.tensor([[1, 0, 0, 2]])}, r"open must be \[writer < 1, start, off"),
        ({**w, "open": torch.zeros(1, 3, dtype=i64)}, r"open must be .* got shape \(1, 3\)"),
        ({**w, "extra": torch.tensor([[0, 1, 3]])}, r"sorted \[start, end\) pairs above 2"),
        ({**w, "extra": torch.tensor([[0, 9, 8]])}, r"sorted .* got \[9, 8\)"),
        ({**w, "done": torch.tensor([-1])}, "one row count >= 0 per writer"),
        ({**w, "done": torch.tensor([1, 2])}, r"per writer \(1\), got 2 values"),
        (
            {**w, "ids": torch.zeros(2, 1, dtype=torch.uint8), "done": torch.zeros(2, dtype=i64)},
            "names a writer twice",
        ),
        ({**w, "ids": [[119]]}, "ids must be a 2-d uint8 tensor, got"),
        ({**w, "slots": torch.zeros(2)}, "slots must be a 1-d int64 tensor"),
        ({**w, "evicted": torch.zeros(1, dtype=i64)}, "evicted_total must be the int 1"),
    ]:
        save_state(tmp_path / "ckpt" / "buffer", {**good, "writers": writers})
        resumed = BufferHost(
            make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True
        )
        with pytest.raises(CheckpointError, match=match):
            resumed.length()
    save_state(tmp_path / "ckpt" / "buffer", good)  # the good one loads, ranges and all
    resumed = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True
    )
    assert resumed._writers.missing(("w", 0, 0, 0), 7) == [(2, 5), (6, 7)]


def test_the_writer_table_stays_bounded_with_thousands_of_one_shot_writers(offline_path, tmp_path):
    """Item 14: 5,000 collector tasks, each a handle copy writing once. The actor keeps at
    most max_writers records (4096 by default), so memory and checkpoints stay bounded."""
    host = BufferHost(make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt")
    packer = Packer()
    rows = hopper_rows(5)
    for _ in range(5000):
        ids = ChunkIds()  # a fresh handle copy in a one-shot task: a new writer each time
        send(host, packer, ids, *ids.take([5]), rows)  # never acknowledged to the actor
    info = host.info()
    assert info["writers_remembered"] == 4096 and info["max_writers"] == 4096
    assert info["writers_evicted"] == 5000 - 4096
    assert info["slots_remembered"] == 4096 * 5  # one blocking write's slots per record
    path = pathlib.Path(host.checkpoint())
    # the table's share of the checkpoint: flat tensors, ~80 bytes per record plus 8 per slot
    # and per dropped identity, whatever the number of writers that ever wrote
    table = load_state(path)["writers"]
    nbytes = sum(t.numel() * t.element_size() for t in table.values() if torch.is_tensor(t))
    assert nbytes <= 4096 * (80 + 5 * 8) + (5000 - 4096) * 8
    assert (path / "metadata.json").stat().st_size < 20_000  # no per-writer JSON
    restarted = BufferHost(make_buffer, (offline_path,), checkpoint_dir=path.parent, resume=True)
    assert restarted.info()["writers_remembered"] == 4096
    assert restarted.info()["writers_evicted"] == 5000 - 4096


def test_a_dropped_writer_continues_exactly_once_or_is_refused_loudly(offline_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False, max_writers=2)
    packer = Packer()

    def others(k):  # k one-shot writers push the oldest records out
        for _ in range(k):
            ids = ChunkIds()
            send(host, packer, ids, *ids.take([1]), hopper_rows(1, tag=9.0))

    # a writer whose rows were all acknowledged continues exactly once after being dropped
    live = ChunkIds()
    (a,) = live.take([10])
    send(host, packer, live, a, hopper_rows(10, tag=1.0), want_index=False)
    live.done([a])
    others(2)
    assert live.writer not in host._writers
    (b,) = live.take([10])
    assert send(host, packer, live, b, hopper_rows(10, tag=1.0, start=10), want_index=False) == 10
    assert live.writer in host._writers
    assert host.length() == 500 + 10 + 2 + 10

    # a chunk in doubt (sent, not acknowledged) from a dropped writer: refused, nothing changes
    doubt = ChunkIds()
    (c,) = doubt.take([4])
    send(host, packer, doubt, c, hopper_rows(4, tag=2.0))
    others(2)
    before = host.buffer.state_dict()
    with pytest.raises(
        WriterEvictedError, match=r"writer [0-9a-f]{12} \(rows 0\.\.\.\) was dropped"
    ):
        send(host, packer, doubt, c, hopper_rows(4, tag=2.0))  # the caller's retry
    assert (ring_rows(host.buffer.state_dict()) == ring_rows(before)).all()
    assert doubt.writer not in host._writers  # refusing it did not bring it back

    # a retried task whose first attempt's writer was dropped starts over: refused
    task = ("a-task-writer", 0)
    first = ChunkIds(task)
    for s in first.take([3, 3]):
        send(host, packer, first, s, hopper_rows(3, tag=3.0, start=s), want_index=False)
        first.done([s])
    others(2)
    retry = ChunkIds(("a-task-writer", 1))
    length = host.length()
    with pytest.raises(WriterEvictedError, match="max_writers=2 writers wrote since its last"):
        send(host, packer, retry, *retry.take([6]), hopper_rows(6, tag=3.0), want_index=False)
    assert host.length() == length


def test_closed_writers_are_dropped_before_active_ones(offline_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False, max_writers=2)
    packer = Packer()
    active, closed = ChunkIds(), ChunkIds()
    for ids in (active, closed):  # `closed` wrote last: the most recently active
        (s,) = ids.take([2])
        send(host, packer, ids, s, hopper_rows(2), want_index=False)
        ids.done([s])
    host.retire(closed.writer, closed.rows)
    newcomer = ChunkIds()
    send(host, packer, newcomer, *newcomer.take([1]), hopper_rows(1))
    assert active.writer in host._writers and closed.writer not in host._writers
    assert host.info()["writers_evicted"] == 1


def test_a_retried_task_is_refused_once_the_memory_of_dropped_writers_overflows(
    offline_path, monkeypatch
):
    from mixreplay.distributed import chunks

    monkeypatch.setattr(chunks, "EVICTED_MEMORY", 4)
    host = BufferHost(make_buffer, (offline_path,), restarted=False, max_writers=1)
    packer = Packer()
    for _ in range(6):  # 5 records dropped, only 4 identities remembered
        ids = ChunkIds()
        send(host, packer, ids, *ids.take([1]), hopper_rows(1))
    assert host.info()["writers_evicted"] == 5
    retry = ChunkIds(("some-task", 2))  # attempt 2 of a task the actor may have forgotten
    with pytest.raises(WriterEvictedError, match=r"retried Ray task \(attempt 2\) starts over"):
        send(host, packer, retry, *retry.take([1]), hopper_rows(1))
    fresh = ChunkIds(("other-task", 0))  # a first attempt is a new writer
    assert send(host, packer, fresh, *fresh.take([1]), hopper_rows(1)).tolist() == [6]


def test_writer_identities_outside_a_ray_task_are_random():
    a, b = ChunkIds(), ChunkIds()
    assert a.writer != b.writer and len(a.writer) == 32
    assert mint_writer_id()[1] == 0


def plain_buffer():
    return ReplayBuffer(storage=LazyTensorStorage(400), batch_size=4, generator=0)


def tagged(writer: int, start: int, n: int) -> TensorDict:
    return TensorDict(
        {"writer": torch.full((n,), writer), "i": torch.arange(start, start + n)}, batch_size=[n]
    )


@settings(max_examples=40, deadline=None)
@given(
    writers=st.lists(
        st.tuples(st.integers(1, 12), st.lists(st.integers(1, 5), min_size=1, max_size=4)),
        min_size=1,
        max_size=5,
    ),
    order=st.lists(st.integers(0, 99), max_size=40),
    crash=st.one_of(st.none(), st.integers(0, 30)),
    every=st.integers(1, 12),
    max_writers=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_any_redelivery_retry_or_restart_applies_each_row_at_most_once(
    writers, order, crash, every, max_writers, seed
):
    """Writers (one Ray task each) send their rows in chunks; each task may be retried from
    the start with another cut; chunks arrive in any order, some several times; the actor may
    restart from its last checkpoint midway, and drops records beyond max_writers. Invariants:
    no row is ever stored twice; a refusal (WriterEvictedError) only ever concerns a writer
    whose record was dropped, and changes nothing; a writer never dropped ends with each of
    its rows exactly once once all its chunks were delivered after the last restart."""
    import random
    import tempfile

    rng = random.Random(seed)
    packer = Packer()
    # every delivery: (writer k, attempt, start, n); attempt 1 re-cuts the rows
    plans = []
    for k, (n, cut) in enumerate(writers):
        for attempt in (0, 1):
            ids = ChunkIds((f"task-{k}", attempt))
            sizes, left = [], n
            for c in (cut if attempt == 0 else list(reversed(cut))) * n:
                if left == 0:
                    break
                sizes.append(min(c, left))
                left -= sizes[-1]
            plans.append((k, ids, list(zip(ids.take(sizes), sizes))))
    deliveries = [(p, c) for p, (_, _, chunks) in enumerate(plans) for c in range(len(chunks))]
    deliveries += [deliveries[i % len(deliveries)] for i in order]
    rng.shuffle(deliveries)
    phases = [deliveries]
    if crash is not None:  # the actor dies; then every chunk comes again, in any order
        again = [(p, c) for p, (_, _, chunks) in enumerate(plans) for c in range(len(chunks))]
        rng.shuffle(again)
        cut_at = min(crash, len(deliveries))
        phases = [deliveries[:cut_at], again]
    dropped = set()
    with tempfile.TemporaryDirectory(prefix="mixreplay-test-") as tmp:
        kw = {"checkpoint_dir": tmp, "checkpoint_every": every, "max_writers": max_writers}
        for i, phase in enumerate(phases):
            host = BufferHost(plain_buffer, **kw, restarted=i > 0)
            for p, c in phase:
                k, ids, chunks = plans[p]
                start, n = chunks[c]
                before = len(host.buffer)
                try:
                    send(host, packer, ids, start, tagged(k, start, n), want_index=False)
                except WriterEvictedError:
                    assert len(host.buffer) == before
                    dropped.add(k)
                rows = host.buffer.read_all_in_order() if len(host.buffer) else None
                if rows is not None:
                    pairs = list(zip(rows["writer"].tolist(), rows["i"].tolist()))
                    assert len(pairs) == len(set(pairs)), "a row was stored twice"
            dropped |= {k for k, (n, _) in enumerate(writers) if f"task-{k}" not in host._writers}
        rows = host.buffer.read_all_in_order()
    pairs = sorted(zip(rows["writer"].tolist(), rows["i"].tolist()))
    for k, (n, _) in enumerate(writers):
        mine = [i for w, i in pairs if w == k]
        assert len(mine) == len(set(mine))
        if k not in dropped:
            assert mine == list(range(n))


# -- handle arguments (checked before any actor starts) -------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"prefetch": -1}, ValueError, "prefetch must be an int >= 0, got -1"),
        ({"checkpoint_dir": "relative/dir"}, ValueError, "absolute path .* got 'relative/dir'"),
        ({"checkpoint_every": 10}, ValueError, "need checkpoint_dir"),
        (
            {"checkpoint_dir": "/abs", "checkpoint_every": 0},
            ValueError,
            "checkpoint_every must be an int >= 1",
        ),
        ({"ray_options": [("num_cpus", 1)]}, TypeError, "ray_options must be a Mapping, got list"),
        ({"ray_options": {"max_concurrency": 4}}, ValueError, "max_concurrency must be 1, got 4"),
        (
            {"ray_options": {"allow_out_of_order_execution": True}},
            ValueError,
            "allow_out_of_order_execution must be False, got True",
        ),
        # a wrong type is a TypeError naming the argument and the value (mixreplay._validate)
        ({"prefetch": 1.5}, TypeError, "prefetch must be an int, got float 1.5"),
        ({"prefetch": True}, TypeError, "prefetch must be an int, got bool True"),
        (
            {"checkpoint_dir": "/abs", "checkpoint_every": "10"},
            TypeError,
            "checkpoint_every must be an int, got str '10'",
        ),
        ({"checkpoint_dir": 5}, TypeError, "checkpoint_dir must be a path .* got int 5"),
        ({"checkpoint_dir": "/abs", "resume": "yes"}, TypeError, "resume must be True or False"),
        ({"max_writers": 0}, ValueError, "max_writers must be an int >= 1, got 0"),
        ({"max_writers": "8"}, TypeError, "max_writers must be an int, got str '8'"),
    ],
)
def test_handle_rejects_bad_options_before_starting_anything(kwargs, err, match):
    from mixreplay.distributed import RayReplayBuffer

    with pytest.raises(err, match=match):
        RayReplayBuffer(
            OfflineToOnlineReplayBuffer, "memmap:/nowhere", online_capacity=10, **kwargs
        )


def test_handle_needs_an_initialized_ray():
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray cluster is already running in this process")
    from mixreplay.distributed import RayReplayBuffer

    with pytest.raises(BufferActorError, match=r"Ray is not initialized: call ray.init\(\)"):
        RayReplayBuffer(OfflineToOnlineReplayBuffer, "memmap:/nowhere", online_capacity=10)


def test_handle_without_ray_installed_names_the_extra(monkeypatch):
    from mixreplay.distributed import RayReplayBuffer

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install "mixreplay\[ray\]"'):
        RayReplayBuffer(OfflineToOnlineReplayBuffer, "memmap:/nowhere", online_capacity=10)


def test_importing_the_package_does_not_import_ray():
    import subprocess

    code = "import sys, mixreplay.distributed; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_handle_rejects_what_is_not_a_buffer_class():
    from mixreplay.distributed import RayReplayBuffer

    with pytest.raises(TypeError, match="buffer_cls must be a buffer class .* got int"):
        RayReplayBuffer(42)


def _offline_handle():
    """A handle whose checks run before any call reaches an actor (none exists)."""
    from types import SimpleNamespace

    from mixreplay.distributed import RayReplayBuffer

    rb = RayReplayBuffer.__new__(RayReplayBuffer)
    rb._setup(
        SimpleNamespace(extend_packed=None), {"buffer": "OfflineToOnlineReplayBuffer"}, 0, None
    )
    return rb


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda rb: rb.add({"x": 1}), TypeError, "add expects a TensorDict row, got dict"),
        (
            lambda rb: rb.add(hopper_rows(2)),
            ValueError,
            r"one row \(batch_size=\[\]\), got batch_size=\[2\]",
        ),
        (lambda rb: rb.extend(hopper_rows(2)[0]), ValueError, r"one batch dim .* batch_size=\[\]"),
        (
            lambda rb: rb.writer().add(hopper_rows(2)),
            ValueError,
            r"got batch_size=\[2\]; use extend\(\)",
        ),
        (lambda rb: rb.writer().add("row"), TypeError, "add expects a TensorDict row, got str"),
        (lambda rb: rb.writer(chunk_rows=0), ValueError, "chunk_rows must be an int >= 1, got 0"),
        (
            lambda rb: rb.writer(max_in_flight=0),
            ValueError,
            "max_in_flight must be an int >= 1, got 0",
        ),
        (lambda rb: rb.sample(prefetch=-2), ValueError, "prefetch must be an int >= 0, got -2"),
        (lambda rb: rb.sample(prefetch=2.0), TypeError, "prefetch must be an int, got float 2.0"),
        (lambda rb: rb.writer(chunk_rows=2.5), TypeError, "chunk_rows must be an int, got float"),
        (
            lambda rb: rb.writer(max_in_flight="4"),
            TypeError,
            "max_in_flight must be an int, got str '4'",
        ),
        (
            lambda rb: rb.writer(max_message_bytes=0),
            ValueError,
            "max_message_bytes must be an int >= 1, got 0",
        ),
        (
            lambda rb: rb.nope,
            AttributeError,
            r"hosting OfflineToOnlineReplayBuffer has no attribute 'nope'",
        ),
    ],
)
def test_handle_and_writer_check_their_arguments_before_calling_the_actor(call, err, match):
    with pytest.raises(err, match=match):
        call(_offline_handle())
