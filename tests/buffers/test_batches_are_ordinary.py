"""A sampled batch is an ordinary TensorDict of ordinary tensors (issue 19 item 4).

Every kind of batch (plain, mixed, N-way, prioritized, slices, padded slices, dedup
storages, transformed, prefetched, memmap-backed, tensor and tensorclass codecs) and
its ``to_dict()`` go through ``torch.save``/``torch.load``, ``pickle``, a
``torch.multiprocessing`` queue to a real child process and ``share_memory_()``;
each leaf owns its storage, so one key pickles to about its own bytes and
``resize_`` of one leaf leaves every other key as it was.
"""

from __future__ import annotations

import io
import json
import pickle
import queue as queue_mod
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.multiprocessing as mp
from tensordict import TensorDictBase, tensorclass

from mixreplay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    SliceSampler,
)
from tests.helpers import mixed_rows as rows

B = 64


@tensorclass
class Step:
    observation: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor


def _plain():
    rb = ReplayBuffer(storage=LazyTensorStorage(500), generator=0)
    rb.extend(rows(300))
    return rb.sample(B)


def _mixed():
    off = ReplayBuffer(storage=LazyTensorStorage(300))
    off.extend(rows(300, seed=1))
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=200, offline_fraction=0.5, generator=0)
    rb.extend(rows(100, seed=2))
    return rb.sample(B)


def _mixed_transformed_source():  # the mixing buffer's generic path (no packed fast path)
    off = ReplayBuffer(storage=LazyTensorStorage(300), transform=lambda td: td.exclude("pixels"))
    off.extend(rows(300, seed=1))
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=200, offline_fraction=0.5, generator=0)
    rb.extend(rows(100, seed=2).exclude("pixels"))
    return rb.sample(B)


def _nway():
    mix = MixtureReplayBuffer(
        {k: LazyTensorStorage(100) for k in "abc"},
        {"a": 0.5, "b": 0.3, "c": 0.2},
        generator=0,
        source_key="src",
    )
    for i, k in enumerate("abc"):
        mix.extend(rows(60, seed=i), source=k)
    return mix.sample(B)


def _prioritized():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300), sampler=PrioritizedSampler(alpha=0.7, beta=0.5), generator=0
    )
    rb.extend(rows(300))
    batch, info = rb.sample(B, return_info=True)
    rb.update_priority(info["index"], torch.rand(B) + 0.1)
    return batch


def _slices():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300),
        sampler=SliceSampler(num_slices=8, traj_key="episode"),
        generator=0,
    )
    rb.extend(rows(300))
    return rb.sample(B)


def _slices_padded():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300),
        sampler=SliceSampler(
            slice_len=16, traj_key="episode", strict_length=False, pad_output=True
        ),
        generator=0,
    )
    rb.extend(rows(300, episode_len=6))
    return rb.sample(B)


def _dedup():
    rb = ReplayBuffer(storage=LazyTensorStorage(300, dedup_next=True), generator=0)
    rb.extend(rows(300))
    return rb.sample(B)


def _transformed():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300), transform=lambda td: td.exclude("action"), generator=0
    )
    rb.extend(rows(300))
    return rb.sample(B)


def _prefetched():
    with ReplayBuffer(storage=LazyTensorStorage(300), batch_size=B, prefetch=2, generator=0) as rb:
        rb.extend(rows(300))
        rb.sample()
        return rb.sample()


def _memmap(tmp_path):
    rb = ReplayBuffer(storage=LazyMemmapStorage(300, scratch_dir=tmp_path), generator=0)
    rb.extend(rows(300))
    return rb.sample(B)


def _tensor():
    rb = ReplayBuffer(storage=LazyTensorStorage(300), generator=0)
    rb.extend(torch.randn(300, 4, generator=torch.Generator().manual_seed(0)))
    return rb.sample(B)


def _tensorclass():
    rb = ReplayBuffer(storage=LazyTensorStorage(300), generator=0)
    g = torch.Generator().manual_seed(0)
    rb.extend(
        Step(
            observation=torch.randn(300, 3, generator=g),
            reward=torch.randn(300, generator=g).double(),
            done=torch.rand(300, 1, generator=g) < 0.5,
            batch_size=[300],
        )
    )
    return rb.sample(B)


KINDS: dict[str, Callable] = {
    "plain": _plain,
    "mixed": _mixed,
    "mixed_transformed_source": _mixed_transformed_source,
    "nway": _nway,
    "prioritized": _prioritized,
    "slices": _slices,
    "slices_padded": _slices_padded,
    "dedup": _dedup,
    "transformed": _transformed,
    "prefetched": _prefetched,
    "memmap": _memmap,
    "tensor": _tensor,
    "tensorclass": _tensorclass,
}
MULTI_LEAF = [k for k in KINDS if k != "tensor"]


def make(kind: str, tmp_path) -> object:
    fn = KINDS[kind]
    return fn(tmp_path) if kind == "memmap" else fn()


def leaves(obj) -> Iterator[tuple[object, torch.Tensor]]:
    """(key, tensor) of every leaf, without copying."""
    if isinstance(obj, torch.Tensor):
        yield "", obj
    elif isinstance(obj, TensorDictBase):
        yield from obj.items(include_nested=True, leaves_only=True)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            for sub, t in leaves(v):
                yield (k, sub), t
    else:  # a tensorclass
        yield from obj._tensordict.items(include_nested=True, leaves_only=True)


def summary(obj) -> dict:
    """Per leaf: dtype, shape, sum, and the bytes of the storage behind it."""
    return {
        str(k): (t.dtype, tuple(t.shape), t.double().sum().item(), t.untyped_storage().nbytes())
        for k, t in leaves(obj)
    }


def assert_equal(a, b) -> None:
    la, lb = dict(leaves(a)), dict(leaves(b))
    assert la.keys() == lb.keys()
    for k in la:
        assert la[k].dtype == lb[k].dtype, k
        assert torch.equal(la[k], lb[k]), k


def forms(kind: str, batch) -> list:
    return [batch] if isinstance(batch, torch.Tensor) else [batch, batch.to_dict()]


@pytest.mark.parametrize("kind", list(KINDS))
def test_torch_save_round_trip(kind, tmp_path):
    batch = make(kind, tmp_path)
    for obj in forms(kind, batch):
        f = io.BytesIO()
        torch.save(obj, f)
        f.seek(0)
        back = torch.load(f, weights_only=False)
        assert type(back) is type(obj)
        assert_equal(back, obj)
    if not isinstance(batch, torch.Tensor):  # the plain dict loads with weights_only too
        f = io.BytesIO()
        torch.save(batch.to_dict(), f)
        f.seek(0)
        assert_equal(torch.load(f, weights_only=True), batch.to_dict())


@pytest.mark.parametrize("kind", list(KINDS))
def test_pickle_round_trip(kind, tmp_path):
    batch = make(kind, tmp_path)
    for obj in forms(kind, batch):
        back = pickle.loads(pickle.dumps(obj))
        assert_equal(back, obj)


@pytest.mark.parametrize("kind", list(KINDS))
def test_share_memory(kind, tmp_path):
    batch = make(kind, tmp_path)
    before = summary(batch)
    for obj in forms(kind, batch):
        if isinstance(obj, dict):
            for _, t in leaves(obj):
                t.share_memory_()
        else:
            obj.share_memory_()
        for k, t in leaves(obj):
            assert t.is_shared(), k
            # sharing one key moves only its own bytes into shared memory
            assert t.untyped_storage().nbytes() == t.nbytes, k
    assert summary(batch) == before


@pytest.mark.parametrize("kind", MULTI_LEAF)
def test_one_key_pickles_to_its_own_bytes(kind, tmp_path):
    batch = make(kind, tmp_path)
    total = sum(t.nbytes for _, t in leaves(batch))
    for key, t in leaves(batch):
        assert t.untyped_storage().nbytes() == t.nbytes, key
        # as a TorchRL batch's leaves are: t.view(-1) works on every one
        assert t.is_contiguous(), key
        size = len(pickle.dumps(t))
        # a pickled tensor's own header is well under 1 KiB
        assert size < t.nbytes + 1024, (key, size, t.nbytes, total)
    for key, t in leaves(batch.to_dict()):
        assert len(pickle.dumps(t)) < t.nbytes + 1024, key


@pytest.mark.parametrize("kind", MULTI_LEAF)
def test_resize_of_one_leaf_leaves_other_keys_unchanged(kind, tmp_path):
    batch = make(kind, tmp_path)
    items = list(leaves(batch))
    for i, (key, t) in enumerate(items):
        before = {k: v.clone() for k, v in items}
        t.resize_(t.numel() * 8)
        t.fill_(1)
        for k, v in items:
            if k != key:
                assert torch.equal(v, before[k]), (key, k)
        items[i] = (key, t)


def child(inbox, outbox) -> None:
    """The child process: read batches, answer with what they hold."""
    while True:
        obj = inbox.get()
        if obj is None:
            return
        outbox.put(summary(obj))


@pytest.fixture(scope="module")
def worker():
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(inbox, outbox), daemon=True)
    proc.start()
    yield inbox, outbox
    inbox.put(None)
    proc.join(60)
    if proc.is_alive():
        proc.kill()


@pytest.mark.parametrize("kind", list(KINDS))
def test_multiprocessing_queue(kind, worker, tmp_path):
    inbox, outbox = worker
    batch = make(kind, tmp_path)
    for obj in forms(kind, batch):
        inbox.put(obj)
        try:
            got = outbox.get(timeout=120)
        except queue_mod.Empty:
            pytest.fail("the child process did not answer: it could not rebuild the batch")
        assert got == summary(obj)
        for k, (_, _, _, nbytes) in got.items():  # each leaf arrived with its own bytes only
            t = dict((str(key), v) for key, v in leaves(obj))[k]
            assert nbytes == t.nbytes, k


# -- bound for a device ---------------------------------------------------------------------


def test_staging_is_one_packed_buffer_moved_by_one_copy():
    """Rows gathered for another device go through one packed staging buffer (page-locked
    where a GPU can read it) and one copy; on a CPU-only machine it is ordinary memory."""
    from mixreplay.storages.base import move, staging

    st = LazyTensorStorage(50)
    st.extend(rows(50))
    layout = st.layout
    index = torch.tensor([3, 1, 4, 1, 5])
    buf = staging(torch.Size([5, layout.row_words]), torch.device("cpu"), torch.device("cpu"))
    assert buf.dtype == torch.int64 and not buf.is_pinned()
    torch.index_select(st.rows, 0, index, out=buf)
    out = torch.empty_like(buf)
    move(buf, out)
    batch = layout.copy_out(out, out.device)
    assert_equal(batch, st.gather(index))
    storages = {t.untyped_storage().data_ptr() for _, t in leaves(batch)}
    assert len(storages) == len(list(leaves(batch)))  # each leaf its own memory


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_host_rows_reach_the_device_in_one_copy_per_source():
    """Offline rows in host memory, online rows on the GPU: the offline part of a batch is one
    pinned packed buffer and one non_blocking host-to-device copy; leaves are owned on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    off = ReplayBuffer(storage=LazyTensorStorage(300))
    off.extend(rows(300, seed=1))
    rb = OfflineToOnlineReplayBuffer(
        off,
        online_storage=LazyTensorStorage(200, device="cuda"),
        offline_fraction=0.5,
        generator=0,
    )
    rb.extend(rows(100, seed=2))
    rb.sample(B)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        batch = rb.sample(B)
        torch.cuda.synchronize()
    h2d = [e for e in prof.events() if "HtoD" in e.name or "Memcpy HtoD" in e.name]
    # the offline rows, and the online source's indices (drawn on the host)
    assert len(h2d) <= 2, [e.name for e in h2d]
    for _, t in leaves(batch):
        assert t.device.type == "cuda"
        assert t.untyped_storage().nbytes() == t.nbytes


def test_a_remote_batch_is_ordinary_too():
    """A batch from a Ray-hosted buffer arrives as packed words (read-only, from Ray's object
    store); the handle copies each leaf out of them, so it is as ordinary as a local one."""
    from mixreplay.distributed.wire import LayoutCache

    st = LazyTensorStorage(50)
    st.extend(rows(50))
    words = torch.index_select(st.rows, 0, torch.arange(8)).numpy()
    words.flags.writeable = False
    key = json.dumps(st.layout.schema.to_json())  # how the wire names a layout
    batch = LayoutCache().copy_out(key, words)
    assert_equal(batch, st.gather(torch.arange(8)))
    for k, t in leaves(batch):
        assert t.untyped_storage().nbytes() == t.nbytes, k
    f = io.BytesIO()
    torch.save(batch, f)
    f.seek(0)
    assert_equal(torch.load(f, weights_only=False), batch)


# -- a batch and its info share no memory ------------------------------------------------------


def _storages(x) -> set[int]:
    leaves = x.values(True, True) if isinstance(x, TensorDictBase) else [x]
    return {leaf.untyped_storage().data_ptr() for leaf in leaves if leaf.numel()}


@pytest.mark.parametrize("kind", ["offline-to-online", "mixture", "replay"])
@pytest.mark.parametrize("prefetch", [None, 2])
def test_info_shares_no_memory_with_the_batch_and_routes_updates_as_drawn(kind, prefetch):
    """Writing into a batch (its source column included) changes nothing its info says: an
    update_priority with that info still reaches the rows drawn, in the source drawn from."""
    prio = PrioritizedSampler(100, alpha=1.0, beta=1.0)
    online = LazyTensorStorage(100)
    if kind == "replay":
        rb = ReplayBuffer(
            storage=online, sampler=prio, batch_size=B, generator=0, prefetch=prefetch
        )
        rb.extend(rows(100))
    elif kind == "mixture":
        offline = ReplayBuffer(
            storage=LazyTensorStorage(100), sampler=PrioritizedSampler(100, 1.0, 1.0)
        )
        offline.extend(rows(100, seed=1))
        rb = MixtureReplayBuffer(
            {"off": offline, "on": online},
            {"off": 1, "on": 1},
            samplers={"on": prio},
            batch_size=B,
            generator=0,
            prefetch=prefetch,
            source_key="src",
        )
        rb.extend(rows(100), source="on")
    else:
        offline = ReplayBuffer(
            storage=LazyTensorStorage(100), sampler=PrioritizedSampler(100, 1.0, 1.0)
        )
        offline.extend(rows(100, seed=1))
        rb = OfflineToOnlineReplayBuffer(
            offline,
            online_storage=online,
            online_sampler=prio,
            batch_size=B,
            generator=0,
            prefetch=prefetch,
            source_key="src",
        )
        rb.extend(rows(100))
    try:
        batch, info = rb.sample(return_info=True)
        assert not _storages(batch) & _storages(info)
        expected = info.clone()
        for leaf in batch.values(True, True):  # the user writes into every leaf of the batch
            leaf.zero_()
        assert (info == expected).all()
        before = prio.tree.leaves.clone()
        if kind == "replay":
            rb.update_priority(info["index"], torch.full((B,), 7.0))
            drawn = info["index"]
        else:
            rb.update_priority(info, torch.full((B,), 7.0))
            drawn = info["index"][info["source"] == 1]  # the rows drawn from the online side
        assert drawn.numel()
        expected_changed = torch.zeros(100, dtype=torch.bool)
        expected_changed[drawn] = True
        assert torch.equal(prio.tree.leaves[:100] != before[:100], expected_changed)
    finally:
        rb.close()


@pytest.mark.parametrize("prefetch", [None, 2])
def test_info_shares_no_memory_with_the_sampler_or_itself(prefetch):
    """The info is the caller's: an in-place edit of ``info["index"]`` (a shift some loops do)
    leaves a without-replacement epoch a permutation that checkpoints, and normalizing
    ``info["weight"]`` in place leaves TorchRL's ``info["priority_weight"]`` as drawn."""
    from mixreplay import SamplerWithoutReplacement

    rb = ReplayBuffer(
        storage=LazyTensorStorage(40),
        sampler=SamplerWithoutReplacement(),
        batch_size=8,
        generator=0,
        prefetch=prefetch,
    )
    rb.extend(rows(40))
    try:
        seen = []
        for _ in range(3):  # mid-epoch, each batch's index scribbled over after the draw
            batch, info = rb.sample(return_info=True)
            seen.append(info["index"].clone())
            info["index"].fill_(3)
        fresh = ReplayBuffer(
            storage=LazyTensorStorage(40), sampler=SamplerWithoutReplacement(), batch_size=8
        )
        fresh.load_state_dict(rb.state_dict())  # the saved epoch is still a permutation
        for _ in range(2):  # the rest of the epoch, from the restored copy
            seen.append(fresh.sample(return_info=True)[1]["index"])
        assert torch.equal(torch.cat(seen).sort().values, torch.arange(40))
    finally:
        rb.close()

    prb = ReplayBuffer(
        storage=LazyTensorStorage(40),
        sampler=PrioritizedSampler(40, alpha=1.0, beta=1.0),
        batch_size=8,
        generator=0,
        prefetch=prefetch,
    )
    prb.extend(rows(40))
    prb.update_priority(torch.arange(40), torch.arange(40.0) + 1)
    try:
        _, info = prb.sample(return_info=True)
        drawn = info["priority_weight"].clone()
        info["weight"].div_(info["weight"].max()).mul_(0)  # normalized in place, then zeroed
        assert torch.equal(info["priority_weight"], drawn)
        assert not _storages(info["weight"]) & _storages(info["priority_weight"])
    finally:
        prb.close()
