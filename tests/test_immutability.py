"""Nothing done through the public API changes offline data: not in memory, not on disk."""

from __future__ import annotations

import hashlib

import pytest
import torch

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReadOnlyError,
    ReplayBuffer,
    prefill_replay_buffer,
)
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from mixreplay.storages.base import fingerprint_rows
from tests.conftest import ted_rows

try:
    from mixreplay.samplers import PrioritizedSampler
except ImportError:  # pragma: no cover
    PrioritizedSampler = None


def file_hash(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scribble(td) -> None:
    """Write into every leaf of a batch, in place."""
    for key in td.keys(include_nested=True, leaves_only=True):
        v = td.get(key)
        if v.dtype == torch.bool:
            v.logical_not_()
        else:
            v.add_(12345).mul_(-1)


@pytest.fixture
def memmap_dataset(tmp_path):
    path = write_memmap_dataset(
        tmp_path / "ds", ted_rows(500, tag=7.0), episode_starts=[0, 100, 300]
    )
    return path, load_memmap(path)


def everything_a_user_might_do(rb, offline, tmp_path) -> None:
    """Sample and write into the batches, through every public way of reading rows."""
    batch = rb.sample(64)
    scribble(batch)
    batch, info = rb.sample(64, return_info=True)
    scribble(batch)
    scribble(info)
    scribble(offline.sample(32))
    scribble(offline[3])
    scribble(offline[:])
    scribble(offline[torch.tensor([0, 499, 7])])
    scribble(offline.storage.to_tensordict())
    copy = ReplayBuffer(storage=LazyTensorStorage(1000))
    prefill_replay_buffer(copy, offline)
    scribble(copy.sample(16))
    copy.extend(ted_rows(3, tag=1.0))
    rb.dumps(tmp_path / "ck")
    rb.loads(tmp_path / "ck")
    scribble(rb.sample(64))
    with pytest.raises(ReadOnlyError):
        offline.extend(ted_rows(2))
    with pytest.raises(ReadOnlyError):
        offline.storage.extend(ted_rows(2))


def test_writing_into_batches_never_reaches_a_memory_mapped_dataset(memmap_dataset, tmp_path):
    path, ds = memmap_dataset
    rows_before = ds.storage.rows.clone()
    file_before = file_hash(path / "rows.bin")

    def mutating_transform(td):
        scribble(td)  # a transform that writes into its input in place
        return td

    rb = OfflineToOnlineReplayBuffer(
        ds, online_capacity=100, batch_size=32, generator=0, transform=mutating_transform
    )
    rb.extend(ted_rows(50, tag=-3.0))
    everything_a_user_might_do(rb, ds, tmp_path)
    assert torch.equal(ds.storage.rows, rows_before)
    assert fingerprint_rows(ds.storage.rows) == ds.fingerprint
    assert file_hash(path / "rows.bin") == file_before
    assert torch.equal(load_memmap(path).storage.rows, rows_before)


def test_in_memory_datasets_and_mixtures_are_untouched_too(tmp_path):
    ds = OfflineDataset.from_tensordict(ted_rows(500, tag=7.0))
    before = ds.storage.rows.clone()
    mix = MixtureReplayBuffer(
        {"off": ds, "on": LazyTensorStorage(100)},
        {"off": 1, "on": 1},
        batch_size=32,
        generator=0,
        source_key="src",
    )
    mix.extend(ted_rows(40, tag=-3.0), source="on")
    everything_a_user_might_do(mix, ds, tmp_path)
    assert torch.equal(ds.storage.rows, before)
    assert fingerprint_rows(ds.storage.rows) == ds.fingerprint


@pytest.mark.skipif(
    PrioritizedSampler is None, reason="mixreplay.samplers.prioritized not importable yet"
)
def test_priority_updates_on_offline_rows_change_priorities_not_rows(memmap_dataset):
    path, _ = memmap_dataset
    ds = load_memmap(path, sampler=PrioritizedSampler(alpha=1.0))
    before = file_hash(path / "rows.bin")
    rows = ds.storage.rows.clone()
    rb = OfflineToOnlineReplayBuffer(ds, online_capacity=10, batch_size=20, generator=0)
    rb.extend(ted_rows(10, tag=-3.0))
    for _ in range(5):
        batch, info = rb.sample(return_info=True)
        rb.update_priority(info, torch.rand(20) * 10)
    assert torch.equal(ds.storage.rows, rows) and file_hash(path / "rows.bin") == before


def test_writes_through_a_column_view_stay_in_this_process(memmap_dataset):
    """``column()`` is a documented view; on a mapped dataset the mapping is copy-on-write,
    so even a deliberate write through it never reaches the file (or other processes)."""
    path, ds = memmap_dataset
    before = file_hash(path / "rows.bin")
    ds.storage.column("observation").fill_(-1.0)
    assert file_hash(path / "rows.bin") == before
    assert float(load_memmap(path).storage.column("observation").max()) > 0
