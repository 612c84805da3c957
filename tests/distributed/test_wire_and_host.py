"""The wire format, the actor-side host and the handle's argument checks: no Ray cluster needed."""

from __future__ import annotations

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
from mixreplay.distributed.chunks import ChunkIds, WriterTable
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
from mixreplay.errors import BufferActorError


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


def send(host, packer, ids, seq, rows, want_index=True):
    """What the handle sends: one chunk of packed rows with its id."""
    words = packer.pack(rows)
    return host.extend_packed(packer.key, words, None, want_index, ids.chunk_id(seq))


def test_host_applies_each_chunk_once_and_saves_the_ids_with_the_rows(offline_path, tmp_path):
    ckpt = tmp_path / "ckpt"
    host = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=ckpt, checkpoint_every=100, restarted=False
    )
    packer, ids = Packer(), ChunkIds()
    first, second, third = ids.take(3)
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
    assert {p.suffix for p in (ckpt / "buffer").iterdir()} == {".json", ".bin"}
    saved = load_state(ckpt / "buffer")
    assert set(saved) == {"buffer", "writers"}
    assert saved["writers"]["writers"] == {
        ids.writer: [[first, 0, 60], [second, 60, 40]]
    }  # both still open on the writer's side
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

    # acknowledged chunks are forgotten once the writer names a floor above them
    ids.done([first, second, third])
    (fourth,) = ids.take(1)
    assert ids.chunk_id(fourth)[2] == third
    send(restarted, packer, ids, fourth, hopper_rows(1, start=105))
    assert restarted.info()["chunks_remembered"] == 1


def test_a_refused_chunk_is_not_remembered(offline_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    packer, ids = Packer(), ChunkIds()
    send(host, packer, ids, *ids.take(1), hopper_rows(3))
    (seq,) = ids.take(1)
    with pytest.raises(Exception, match="action"):
        send(host, packer, ids, seq, hopper_rows(3).exclude("action"))
    assert host.info()["chunks_remembered"] == 1 and host.length() == 503
    # the same id with rows the buffer accepts is a write (the refused one changed nothing)
    assert send(host, packer, ids, seq, hopper_rows(2)).tolist() == [3, 4]


def test_a_buffer_checkpoint_from_before_chunk_ids_still_resumes(offline_path, tmp_path):
    old = make_buffer(offline_path)
    old.extend(hopper_rows(7))
    old.dumps(tmp_path / "ckpt" / "buffer")  # what the actor saved before chunk ids
    host = BufferHost(
        make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True, restarted=False
    )
    assert host.length() == 507 and host.info()["chunks_remembered"] == 0


def test_a_damaged_writer_table_is_refused(offline_path, tmp_path):
    host = BufferHost(make_buffer, (offline_path,), restarted=False)
    good = {"buffer": host.buffer.state_dict(), "writers": WriterTable().state_dict()}
    for writers, match in [
        ({**good["writers"], "version": 9}, "writer table has version 9"),
        ({**good["writers"], "writers": {"w": [[1, 0, 5]]}}, r"slots \[0, 5\) lie outside the 0"),
        ({**good["writers"], "writers": {"w": [[1, 0]]}}, r"must be \[seq, offset, length\]"),
        ({**good["writers"], "slots": torch.zeros(2)}, "slots must be int64"),
    ]:
        save_state(tmp_path / "ckpt" / "buffer", {**good, "writers": writers})
        resumed = BufferHost(
            make_buffer, (offline_path,), checkpoint_dir=tmp_path / "ckpt", resume=True
        )
        with pytest.raises(CheckpointError, match=match):
            resumed.length()


def plain_buffer():
    return ReplayBuffer(storage=LazyTensorStorage(200), batch_size=4, generator=0)


def tagged(chunk: int, n: int) -> TensorDict:
    return TensorDict({"chunk": torch.full((n,), chunk), "i": torch.arange(n)}, batch_size=[n])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    extra=st.lists(st.integers(0, 7), max_size=8),
    every=st.integers(1, 12),
    crash=st.one_of(st.none(), st.integers(0, 20)),
    seed=st.integers(0, 2**16),
)
def test_any_redelivery_in_any_order_with_a_restart_applies_each_chunk_once(
    sizes, extra, every, crash, seed
):
    """Chunks arrive in any order, some several times; the actor may restart from its last
    checkpoint midway, after which every chunk arrives again (as if every reply were lost).
    Each chunk ends up in the buffer exactly once."""
    import random
    import tempfile

    rng = random.Random(seed)
    packer, ids = Packer(), ChunkIds()
    seqs = ids.take(len(sizes))  # all open: nothing acknowledged, so nothing may be forgotten
    deliveries = list(range(len(sizes))) + [k % len(sizes) for k in extra]
    rng.shuffle(deliveries)
    phases = [deliveries]
    if crash is not None:  # the actor dies after `crash` deliveries; then every chunk comes again
        again = list(range(len(sizes)))
        rng.shuffle(again)
        cut = min(crash, len(deliveries))
        phases = [deliveries[:cut], again + deliveries[cut:]]
    with tempfile.TemporaryDirectory(prefix="mixreplay-test-") as tmp:
        kw = {"checkpoint_dir": tmp, "checkpoint_every": every}
        for i, phase in enumerate(phases):
            host = BufferHost(plain_buffer, **kw, restarted=i > 0)  # a restart loads the checkpoint
            for k in phase:
                send(host, packer, ids, seqs[k], tagged(k, sizes[k]))
        rows = host.buffer.read_all_in_order()
    got = sorted(zip(rows["chunk"].tolist(), rows["i"].tolist()))
    assert got == [(k, i) for k, n in enumerate(sizes) for i in range(n)]


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
