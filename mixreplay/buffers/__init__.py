"""Buffers: one source (:class:`ReplayBuffer`, :class:`OfflineDataset`) or several mixed.

::

    ReplayBuffer                  rows of one storage, drawn by a sampler
    └── OfflineDataset            read-only rows with episode boundaries
    MixingBuffer (engine)         the split, gather, labels, priorities and state of a mixture
    ├── OfflineToOnlineReplayBuffer   the reference's offline + online buffer
    └── MixtureReplayBuffer           any number of named sources by weight
"""

from mixreplay.buffers.mixture import MixtureReplayBuffer
from mixreplay.buffers.offline import OfflineDataset
from mixreplay.buffers.offline_to_online import OfflineToOnlineReplayBuffer
from mixreplay.buffers.replay import ReplayBuffer

__all__ = ["MixtureReplayBuffer", "OfflineDataset", "OfflineToOnlineReplayBuffer", "ReplayBuffer"]
