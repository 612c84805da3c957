"""Mixing: every rule that decides which source gives how many rows of a batch.

::

    split.py              split_counts (one batch) and carried_split (a mixture's long run)
    fractions.py          fraction and weight checks; how a checkpoint holds schedules
    source.py             the source contract MixSource: BufferSource (mixreplay buffers),
                          ForeignSource (anything with sample/len)
    engine.py             MixingBuffer: split, gather, labels, priorities, state
    offline_to_online.py  OfflineToOnlineReplayBuffer (the reference's two sources)
    mixture.py            MixtureReplayBuffer (named sources by weight)

The schedules themselves (the fraction as a function of the step) are
:mod:`mixreplay.schedules`. Names below are imported on first use, as in the
top-level package, so that importing the split rule does not import the buffers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "BufferSource": "mixreplay.mixing.source",
    "ForeignSource": "mixreplay.mixing.source",
    "MixSource": "mixreplay.mixing.source",
    "MixingBuffer": "mixreplay.mixing.engine",
    "MixtureReplayBuffer": "mixreplay.mixing.mixture",
    "OfflineToOnlineReplayBuffer": "mixreplay.mixing.offline_to_online",
    "Weight": "mixreplay.mixing.fractions",
    "as_mix_source": "mixreplay.mixing.source",
    "carried_split": "mixreplay.mixing.split",
    "split_counts": "mixreplay.mixing.split",
}

__all__ = [
    "BufferSource",
    "ForeignSource",
    "MixSource",
    "MixingBuffer",
    "MixtureReplayBuffer",
    "OfflineToOnlineReplayBuffer",
    "Weight",
    "as_mix_source",
    "carried_split",
    "split_counts",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from mixreplay.mixing.engine import MixingBuffer
    from mixreplay.mixing.fractions import Weight
    from mixreplay.mixing.mixture import MixtureReplayBuffer
    from mixreplay.mixing.offline_to_online import OfflineToOnlineReplayBuffer
    from mixreplay.mixing.source import BufferSource, ForeignSource, MixSource, as_mix_source
    from mixreplay.mixing.split import carried_split, split_counts
