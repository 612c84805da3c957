"""Which library TorchRL's copied programs take their replay-buffer names from: the one switch.

``MIXREPLAY_TORCHRL_TARGET=torchrl`` gives TorchRL's own classes (the reference); unset or
``mixreplay`` gives mixreplay's. Each copied program keeps TorchRL's import line and rebinds
the names that follow it: ``from _target import TensorDictReplayBuffer`` (``copy_programs.py``).
A name mixreplay does not export fails at that line, as the changed import would.
"""

from __future__ import annotations

import importlib
import os

TARGET = os.environ.get("MIXREPLAY_TORCHRL_TARGET", "mixreplay").strip().lower()
if TARGET not in ("mixreplay", "torchrl"):
    raise ValueError(f"MIXREPLAY_TORCHRL_TARGET must be 'mixreplay' or 'torchrl', got {TARGET!r}")

#: name -> TorchRL's module that exports it
TORCHRL = {
    "D4RLExperienceReplay": "torchrl.data.datasets.d4rl",
    "LazyMemmapStorage": "torchrl.data",
    "LazyStackStorage": "torchrl.data",
    "LazyTensorStorage": "torchrl.data",
    "ListStorage": "torchrl.data",
    "MinariExperienceReplay": "torchrl.data.datasets.minari_data",
    "PrioritizedReplayBuffer": "torchrl.data",
    "PrioritizedSampler": "torchrl.data",
    "RandomSampler": "torchrl.data",
    "ReplayBuffer": "torchrl.data",
    "SamplerWithoutReplacement": "torchrl.data",
    "SliceSampler": "torchrl.data",
    "TensorDictPrioritizedReplayBuffer": "torchrl.data",
    "TensorDictReplayBuffer": "torchrl.data",
    "TensorStorage": "torchrl.data",
}

__all__ = ["TARGET", *sorted(TORCHRL)]


def __getattr__(name: str) -> object:
    if name not in TORCHRL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module("mixreplay" if TARGET == "mixreplay" else TORCHRL[name])
    try:
        return getattr(module, name)
    except AttributeError:
        raise ImportError(f"cannot import name {name!r} from {module.__name__!r}") from None
