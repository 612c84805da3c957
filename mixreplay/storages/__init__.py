"""Storages: where the rows of a source live (see :mod:`mixreplay.storages.base`)."""

from mixreplay.storages.base import PackedStorage, Storage
from mixreplay.storages.dedup import DedupFrozenStorage, DedupLayout, dedup_rows
from mixreplay.storages.foreign import ForeignStorage, adapt_storage
from mixreplay.storages.frozen import FrozenStorage
from mixreplay.storages.items import LazyStackStorage, ListStorage
from mixreplay.storages.ring import LazyMemmapStorage, LazyTensorStorage, TensorStorage

__all__ = [
    "DedupFrozenStorage",
    "DedupLayout",
    "ForeignStorage",
    "FrozenStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "PackedStorage",
    "Storage",
    "TensorStorage",
    "adapt_storage",
    "dedup_rows",
]
