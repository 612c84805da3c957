"""Storages: where the rows of a source live (see :mod:`mixreplay.storages.base`)."""

from mixreplay.storages.base import PackedStorage, Storage
from mixreplay.storages.foreign import ForeignStorage, adapt_storage
from mixreplay.storages.frozen import FrozenStorage
from mixreplay.storages.ring import LazyMemmapStorage, LazyTensorStorage, TensorStorage

__all__ = [
    "ForeignStorage",
    "FrozenStorage",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "PackedStorage",
    "Storage",
    "TensorStorage",
    "adapt_storage",
]
