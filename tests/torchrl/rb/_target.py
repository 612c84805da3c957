"""Which library the ported TorchRL replay-buffer tests run against: the one switch.

``MIXREPLAY_TORCHRL_TARGET=torchrl`` runs the same test files against TorchRL itself (the
reference); unset or ``mixreplay`` runs them against mixreplay. The ported files import the
names mixreplay exports under TorchRL's names from here, and everything else (TorchRL's
writers, transforms, other buffers and test helpers) from TorchRL, as a user who swapped
only those imports would.
"""

from __future__ import annotations

import os
import types

TARGET = os.environ.get("MIXREPLAY_TORCHRL_TARGET", "mixreplay").strip().lower()
if TARGET not in ("mixreplay", "torchrl"):
    raise ValueError(f"MIXREPLAY_TORCHRL_TARGET must be 'mixreplay' or 'torchrl', got {TARGET!r}")
ON_MIXREPLAY = TARGET == "mixreplay"
#: where a script run in a subprocess imports the names under test from
TARGET_MODULE = "mixreplay" if ON_MIXREPLAY else "torchrl.data"

if ON_MIXREPLAY:
    from mixreplay import (
        LazyMemmapStorage,
        LazyStackStorage,
        LazyTensorStorage,
        ListStorage,
        PrioritizedReplayBuffer,
        PrioritizedSampler,
        RandomSampler,
        ReplayBuffer,
        Sampler,
        SamplerWithoutReplacement,
        SliceSampler,
        SliceSamplerWithoutReplacement,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
        TensorStorage,
    )
else:
    from torchrl.data import (
        LazyMemmapStorage,
        LazyStackStorage,
        LazyTensorStorage,
        ListStorage,
        PrioritizedReplayBuffer,
        PrioritizedSampler,
        RandomSampler,
        ReplayBuffer,
        SamplerWithoutReplacement,
        SliceSampler,
        SliceSamplerWithoutReplacement,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
        TensorStorage,
    )
    from torchrl.data.replay_buffers.samplers import Sampler


def _module(name: str, torchrl_module: str, **swapped: object) -> types.ModuleType:
    """TorchRL's module ``torchrl_module`` with the names mixreplay exports swapped in."""
    import importlib

    base = importlib.import_module(torchrl_module)
    mod = types.ModuleType(name)
    mod.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("__")})
    mod.__dict__.update(swapped)
    return mod


# ``from torchrl.data.replay_buffers import samplers`` (test_composable.py)
samplers = _module(
    "samplers",
    "torchrl.data.replay_buffers.samplers",
    Sampler=Sampler,
    RandomSampler=RandomSampler,
    SamplerWithoutReplacement=SamplerWithoutReplacement,
    PrioritizedSampler=PrioritizedSampler,
    SliceSampler=SliceSampler,
    SliceSamplerWithoutReplacement=SliceSamplerWithoutReplacement,
)

__all__ = [
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "ON_MIXREPLAY",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "RandomSampler",
    "ReplayBuffer",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "TARGET",
    "TARGET_MODULE",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorStorage",
    "samplers",
]
