"""Offline datasets by ID: a registry of sources keyed by prefix.

``load_dataset("<prefix>:<name>", **kwargs)`` looks the prefix up in the registry
(:mod:`~mixreplay.datasets.registry`) and opens the dataset. Built in:

- ``minari:<dataset_id>``: a Minari dataset from the local Minari root;
- ``d4rl:<name-or-path>``: an HDF5 file in the D4RL layout (downloaded from D4RL
  when a published name is missing locally);
- ``memmap:<dir>``: mixreplay's own memory-mapped format;
- ``atari``, ``atari_dqn``, ``gen_dgrl``, ``lerobot``, ``openml``, ``openx``,
  ``roboset``, ``vd4rl``: through TorchRL's dataset classes (needs torchrl).

``minari:`` and ``d4rl:`` are :class:`Source` classes, opened by the one loader
(:mod:`~mixreplay.datasets.loader`: row options, the conversion cache, TorchRL's
keywords). ``register_dataset(prefix, Source subclass | factory | "module:attr")``
adds your own; a Source subclass gets the cache, ``mixreplay convert`` and
``mixreplay inspect`` for free.
"""

from __future__ import annotations

# the registry imports its lazy targets with importlib.import_module, looked up when called:
# TorchRL's tests patch it as ``mixreplay.datasets.importlib.import_module`` (TorchRL's layout)
import importlib  # noqa: F401

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.datasets.registry import (
    _DATASET_REGISTRY,  # noqa: F401  (TorchRL's name for its registry; tests read it here)
    DatasetEntry,
    get_entry,
    list_prefixes,
    load_dataset,
    parse_dataset_id,
    register_dataset,
)
from mixreplay.datasets.source import Source

__all__ = [
    "DatasetEntry",
    "OfflineDataset",
    "Source",
    "get_entry",
    "list_prefixes",
    "load_dataset",
    "parse_dataset_id",
    "register_dataset",
]
