"""Ring rows on transparent huge pages: aligned where offered, plain otherwise, and every
storage operation (pickling, shared memory, checkpoints) unchanged."""

import logging
import pickle
import re
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import mixreplay
from mixreplay.storages import _hugepages

HUGE = 2 * 1024 * 1024
offered = pytest.mark.skipif(
    not _hugepages.huge_pages_offered(), reason="this OS offers no transparent huge pages"
)


def rows(n: int, width: int = 64, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1).expand(n, width)
    return TensorDict({"x": x.clone(), "i": torch.arange(start, start + n)}, [n])


def ring_of(storage) -> torch.Tensor:
    return storage._rows


def big_storage() -> mixreplay.LazyTensorStorage:
    storage = mixreplay.LazyTensorStorage(20_000)  # 20,000 rows of 33 words: 5 MiB
    storage.extend(rows(1000))
    return storage


@offered
def test_a_large_ring_is_aligned_and_backed_by_huge_pages(caplog):
    with caplog.at_level(logging.DEBUG, logger="mixreplay.storages._hugepages"):
        storage = big_storage()
    ring = ring_of(storage)
    assert ring.data_ptr() % HUGE == 0
    assert torch.equal(ring[1000:], torch.zeros_like(ring[1000:]))  # zeroed as torch.zeros
    assert "transparent huge pages" in caplog.text
    assert _mapping_of(ring.data_ptr())["THPeligible"] == "1"  # advised: the kernel may back it


def _mapping_of(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds ``address``."""
    fields: dict[str, str] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            if fields is not None:
                break
            lo, hi = (int(x, 16) for x in head.groups())
            fields = {} if lo <= address < hi else None
        elif fields is not None and ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.split()[0] if value.split() else ""
    assert fields is not None, f"no mapping holds {address:#x}"
    return fields


def test_a_small_ring_and_the_opt_out_are_plain(monkeypatch):
    small = mixreplay.LazyTensorStorage(10)
    small.extend(rows(3))
    assert ring_of(small).untyped_storage().nbytes() == ring_of(small).numel() * 8  # no slack
    monkeypatch.setenv("MIXREPLAY_HUGEPAGES", "0")
    storage = big_storage()
    ring = ring_of(storage)
    assert ring.untyped_storage().nbytes() == ring.numel() * 8
    assert storage[999]["i"].item() == 999


def test_an_os_without_huge_pages_falls_back_silently(monkeypatch, caplog):
    monkeypatch.setattr(_hugepages, "_SETTING", "/nonexistent/transparent_hugepage/enabled")
    _hugepages.huge_pages_offered.cache_clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="mixreplay.storages._hugepages"):
            assert not _hugepages.huge_pages_offered()
            storage = big_storage()
    finally:
        _hugepages.huge_pages_offered.cache_clear()
    assert "unreadable" in caplog.text
    assert ring_of(storage).untyped_storage().nbytes() == ring_of(storage).numel() * 8
    assert storage[5]["i"].item() == 5


def test_pickling_shared_memory_and_checkpoints_keep_the_rows():
    storage = big_storage()
    storage.extend(rows(500, start=1000))
    expected = storage[:1500]
    copy = pickle.loads(pickle.dumps(storage))
    assert (copy[:1500] == expected).all()
    copy.extend(rows(10, start=1500))  # the copy keeps working
    assert copy[1505]["i"].item() == 1505

    ring = ring_of(storage)
    shared = ring.clone().share_memory_()
    assert shared.is_shared() and torch.equal(shared, ring)

    other = mixreplay.LazyTensorStorage(20_000)
    other.load_state_dict(storage.state_dict())
    assert (other[:1500] == expected).all()
    assert len(other) == 1500


def test_a_buffer_samples_from_a_huge_page_ring():
    rb = mixreplay.ReplayBuffer(storage=big_storage(), generator=0)
    batch = rb.sample(64)
    assert batch.batch_size == (64,)
    assert torch.equal(batch["x"][:, 0].long(), batch["i"])
