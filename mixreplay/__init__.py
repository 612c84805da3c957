"""mixreplay: offline-to-online replay for PyTorch.

Every batch mixes an immutable offline dataset with fresh online experience in
an exact, scheduled proportion. Start with :class:`OfflineToOnlineReplayBuffer`.

The names below are imported on first use (PEP 562): ``import mixreplay`` alone
costs nothing, so the ``mixreplay`` command can answer ``--help`` without
loading torch; ``from mixreplay import ReplayBuffer`` imports what it needs.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from mixreplay._version import __version__

# every public name -> the module that defines it (the one place the mapping lives)
_EXPORTS = {
    "BufferActorError": "mixreplay.errors",
    "BufferClosedError": "mixreplay.errors",
    "CheckpointError": "mixreplay.errors",
    "CheckpointNotFoundError": "mixreplay.errors",
    "D4RLExperienceReplay": "mixreplay.datasets.experience_replay",
    "DatasetError": "mixreplay.errors",
    "DatasetNotFoundError": "mixreplay.errors",
    "EmptyBufferError": "mixreplay.errors",
    "Field": "mixreplay.schema",
    "FrozenStorage": "mixreplay.storages",
    "LazyMemmapStorage": "mixreplay.storages",
    "LazyStackStorage": "mixreplay.storages",
    "LazyTensorStorage": "mixreplay.storages",
    "ListStorage": "mixreplay.storages",
    "LockOrderError": "mixreplay.errors",
    "LockOwnerDiedError": "mixreplay.errors",
    "MinSize": "mixreplay.rate_limit",
    "MinariExperienceReplay": "mixreplay.datasets.experience_replay",
    "MissingDependencyError": "mixreplay.errors",
    "MixreplayError": "mixreplay.errors",
    "MixtureReplayBuffer": "mixreplay.mixing.mixture",
    "OfflineDataset": "mixreplay.buffers",
    "OfflineToOnlineReplayBuffer": "mixreplay.mixing.offline_to_online",
    "PrioritizedReplayBuffer": "mixreplay.buffers",
    "PrioritizedSampler": "mixreplay.samplers.prioritized",
    "PriorityError": "mixreplay.errors",
    "RandomSampler": "mixreplay.samplers",
    "RateLimitTimeoutError": "mixreplay.errors",
    "ReadOnlyError": "mixreplay.errors",
    "ReplayBuffer": "mixreplay.buffers",
    "SampleToInsertRatio": "mixreplay.rate_limit",
    "Sampler": "mixreplay.samplers",
    "SamplerWithoutReplacement": "mixreplay.samplers.without_replacement",
    "Schema": "mixreplay.schema",
    "SchemaMismatchError": "mixreplay.errors",
    "SliceSampler": "mixreplay.samplers.slice",
    "SliceSamplerWithoutReplacement": "mixreplay.samplers.slice_without_replacement",
    "Storage": "mixreplay.storages",
    "TensorDictPrioritizedReplayBuffer": "mixreplay.buffers",
    "TensorDictReplayBuffer": "mixreplay.buffers",
    "TensorStorage": "mixreplay.storages",
    "list_prefixes": "mixreplay.datasets",
    "load_dataset": "mixreplay.datasets",
    "prefill_replay_buffer": "mixreplay.prefill",
    "register_dataset": "mixreplay.datasets",
    "split_counts": "mixreplay.mixing.split",
    "WriterEvictedError": "mixreplay.errors",
}

__all__ = [
    "BufferActorError",
    "BufferClosedError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "D4RLExperienceReplay",
    "DatasetError",
    "DatasetNotFoundError",
    "EmptyBufferError",
    "Field",
    "FrozenStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "LockOrderError",
    "LockOwnerDiedError",
    "MinSize",
    "MinariExperienceReplay",
    "MissingDependencyError",
    "MixreplayError",
    "MixtureReplayBuffer",
    "OfflineDataset",
    "OfflineToOnlineReplayBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PriorityError",
    "RandomSampler",
    "RateLimitTimeoutError",
    "ReadOnlyError",
    "ReplayBuffer",
    "SampleToInsertRatio",
    "Sampler",
    "SamplerWithoutReplacement",
    "Schema",
    "SchemaMismatchError",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorStorage",
    "WriterEvictedError",
    "__version__",
    "list_prefixes",
    "load_dataset",
    "prefill_replay_buffer",
    "register_dataset",
    "split_counts",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        # a submodule not imported yet (``import mixreplay; mixreplay.errors``)
        if importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from mixreplay.buffers import (
        OfflineDataset,
        PrioritizedReplayBuffer,
        ReplayBuffer,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
    )
    from mixreplay.datasets import list_prefixes, load_dataset, register_dataset
    from mixreplay.datasets.experience_replay import D4RLExperienceReplay, MinariExperienceReplay
    from mixreplay.errors import (
        BufferActorError,
        BufferClosedError,
        CheckpointError,
        CheckpointNotFoundError,
        DatasetError,
        DatasetNotFoundError,
        EmptyBufferError,
        LockOrderError,
        LockOwnerDiedError,
        MissingDependencyError,
        MixreplayError,
        PriorityError,
        RateLimitTimeoutError,
        ReadOnlyError,
        SchemaMismatchError,
        WriterEvictedError,
    )
    from mixreplay.mixing.mixture import MixtureReplayBuffer
    from mixreplay.mixing.offline_to_online import OfflineToOnlineReplayBuffer
    from mixreplay.mixing.split import split_counts
    from mixreplay.prefill import prefill_replay_buffer
    from mixreplay.rate_limit import MinSize, SampleToInsertRatio
    from mixreplay.samplers import RandomSampler, Sampler
    from mixreplay.samplers.prioritized import PrioritizedSampler
    from mixreplay.samplers.slice import SliceSampler
    from mixreplay.samplers.slice_without_replacement import SliceSamplerWithoutReplacement
    from mixreplay.samplers.without_replacement import SamplerWithoutReplacement
    from mixreplay.schema import Field, Schema
    from mixreplay.storages import (
        FrozenStorage,
        LazyMemmapStorage,
        LazyStackStorage,
        LazyTensorStorage,
        ListStorage,
        Storage,
        TensorStorage,
    )
