"""mixreplay: offline-to-online replay for PyTorch.

Every batch mixes an immutable offline dataset with fresh online experience in
an exact, scheduled proportion. Start with :class:`OfflineToOnlineReplayBuffer`.
"""

from mixreplay._version import __version__
from mixreplay.buffers import (
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.datasets import list_prefixes, load_dataset, register_dataset
from mixreplay.errors import (
    BufferActorError,
    CheckpointError,
    CheckpointNotFoundError,
    DatasetError,
    DatasetNotFoundError,
    EmptyBufferError,
    MissingDependencyError,
    MixreplayError,
    PriorityError,
    ReadOnlyError,
    SchemaMismatchError,
)
from mixreplay.prefill import prefill_replay_buffer
from mixreplay.samplers import RandomSampler, Sampler
from mixreplay.samplers.prioritized import PrioritizedSampler
from mixreplay.samplers.slice import SliceSampler
from mixreplay.samplers.without_replacement import SamplerWithoutReplacement
from mixreplay.schema import Field, Schema
from mixreplay.split import split_counts
from mixreplay.storages import (
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    Storage,
    TensorStorage,
)

__all__ = [
    "BufferActorError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "DatasetError",
    "DatasetNotFoundError",
    "EmptyBufferError",
    "Field",
    "FrozenStorage",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "MissingDependencyError",
    "MixreplayError",
    "MixtureReplayBuffer",
    "OfflineDataset",
    "OfflineToOnlineReplayBuffer",
    "PrioritizedSampler",
    "PriorityError",
    "RandomSampler",
    "ReadOnlyError",
    "ReplayBuffer",
    "Sampler",
    "SamplerWithoutReplacement",
    "Schema",
    "SchemaMismatchError",
    "SliceSampler",
    "Storage",
    "TensorStorage",
    "__version__",
    "list_prefixes",
    "load_dataset",
    "prefill_replay_buffer",
    "register_dataset",
    "split_counts",
]
