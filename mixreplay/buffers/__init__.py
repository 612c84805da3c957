"""Buffers over one source: :class:`ReplayBuffer` and :class:`OfflineDataset`.

::

    BufferBase (base.py)          what every buffer shares: fields, sampling, prefetch,
    │                             transforms, checkpoint files
    ├── ReplayBuffer              rows of one storage, drawn by a sampler
    │   ├── OfflineDataset        read-only rows with episode boundaries
    │   ├── PrioritizedReplayBuffer         TorchRL's recipe: a PrioritizedSampler built in
    │   └── TensorDictReplayBuffer          batches carry "index"; priorities from the rows
    │       └── TensorDictPrioritizedReplayBuffer
    └── MixingBuffer              several sources mixed per batch (mixreplay.mixing)

The mixing buffers live in :mod:`mixreplay.mixing`; ``from mixreplay.buffers import
OfflineToOnlineReplayBuffer, MixtureReplayBuffer`` keeps working (imported on first use:
the mixing package builds on this one).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.buffers.prioritized import PrioritizedReplayBuffer, TensorDictPrioritizedReplayBuffer
from mixreplay.buffers.replay import ReplayBuffer
from mixreplay.buffers.tensordict import TensorDictReplayBuffer

__all__ = [
    "MixtureReplayBuffer",
    "OfflineDataset",
    "OfflineToOnlineReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
]

_MIXING = {
    "MixtureReplayBuffer": "mixreplay.mixing.mixture",
    "OfflineToOnlineReplayBuffer": "mixreplay.mixing.offline_to_online",
}


def __getattr__(name: str) -> object:
    module = _MIXING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from mixreplay.mixing.mixture import MixtureReplayBuffer
    from mixreplay.mixing.offline_to_online import OfflineToOnlineReplayBuffer
