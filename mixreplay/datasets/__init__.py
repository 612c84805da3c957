"""Offline datasets by ID: a registry of loaders keyed by prefix.

``load_dataset("prefix:rest", **kwargs)`` looks the prefix up and calls its
factory with ``rest``. Built-in prefixes (imported only when used):

- ``minari:<dataset_id>`` - a Minari dataset from the local Minari root;
- ``d4rl:<name-or-path>`` - an HDF5 file in the D4RL layout;
- ``memmap:<dir>`` - mixreplay's own memory-mapped format;
- TorchRL's other sources (``atari``, ``atari_dqn``, ``gen_dgrl``, ``lerobot``,
  ``openml``, ``openx``, ``roboset``, ``vd4rl``) through TorchRL's dataset classes
  (``pip install "mixreplay[torchrl]"``).

``register_dataset(prefix, factory)`` adds your own.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.errors import DatasetPrefixTakenError, MissingDependencyError

__all__ = ["OfflineDataset", "list_prefixes", "load_dataset", "register_dataset"]

#: prefix -> factory, or a lazy ``"module:attribute"`` string imported on first use
#: (TorchRL's name and layout: code written against TorchRL's registry reads it unchanged)
_DATASET_REGISTRY: dict[str, Callable[..., object] | str] = {
    "d4rl": "mixreplay.datasets.d4rl:load_d4rl",
    "memmap": "mixreplay.datasets.memmap:load_memmap",
    "minari": "mixreplay.datasets.minari:load_minari",
    # TorchRL's other sources open through TorchRL's own classes and mix as foreign sources
    "atari": "torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay",
    "atari_dqn": "torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay",
    "gen_dgrl": "torchrl.data.datasets.gen_dgrl:GenDGRLExperienceReplay",
    "lerobot": "torchrl.data.datasets.lerobot:LeRobotExperienceReplay",
    "openml": "torchrl.data.datasets.openml:OpenMLExperienceReplay",
    "openx": "torchrl.data.datasets.openx:OpenXExperienceReplay",
    "roboset": "torchrl.data.datasets.roboset:RobosetExperienceReplay",
    "vd4rl": "torchrl.data.datasets.vd4rl:VD4RLExperienceReplay",
}


def list_prefixes() -> list[str]:
    """Every known prefix, sorted."""
    return sorted(_DATASET_REGISTRY)


def _normalize_prefix(prefix: str) -> str:
    """A prefix as stored: lower-cased and stripped, as TorchRL does."""
    out = prefix.lower().strip() if isinstance(prefix, str) else prefix
    if not isinstance(out, str) or not out or not out.replace("_", "").replace("-", "").isalnum():
        raise ValueError(
            f"a dataset prefix must be a non-empty word of letters, digits, '_' or '-', got {prefix!r}"
        )
    return out


def register_dataset(
    prefix: str, factory: Callable[..., object] | str, *, replace: bool = False
) -> None:
    """Make ``load_dataset(f"{prefix}:<rest>", **kw)`` call ``factory(rest, **kw)``.

    Args:
        prefix: letters, digits, ``_`` or ``-``; no ``:``. Stored lower-cased and
            stripped (``" Local "`` is ``"local"``).
        factory: returns an offline dataset (anything with ``sample(n)`` and ``len()``),
            or a ``"module:attribute"`` string naming it, imported when the prefix is
            first used.

    Keyword Args:
        replace: allow replacing an existing prefix (built-ins included).

    Raises:
        DatasetPrefixTakenError: the prefix is registered already and ``replace`` is
            false (a ``KeyError``, as in TorchRL, and a ``ValueError``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import ReplayBuffer, LazyTensorStorage, load_dataset, register_dataset
        >>> def zeros(rest, batch_size=None):
        ...     rb = ReplayBuffer(storage=LazyTensorStorage(int(rest)), batch_size=batch_size)
        ...     _ = rb.extend(TensorDict({"x": torch.zeros(int(rest), 2)}, [int(rest)]))
        ...     return rb
        >>> register_dataset("zeros", zeros, replace=True)
        >>> len(load_dataset("zeros:8"))
        8
    """
    prefix = _normalize_prefix(prefix)
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        if not module or not attr:
            raise ValueError(
                f"a factory given as a string is 'module:attribute', got {factory!r}; e.g. "
                "'my_package.datasets:MyDataset'"
            )
    elif not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    if not replace and prefix in _DATASET_REGISTRY:
        raise DatasetPrefixTakenError(
            f"dataset prefix {prefix!r} is already registered; pass replace=True to override it"
        )
    _DATASET_REGISTRY[prefix] = factory


def _factory(prefix: str) -> Callable[..., object]:
    factory = _DATASET_REGISTRY.get(prefix.lower().strip())
    if factory is None:
        raise ValueError(
            f"Unknown dataset source {prefix!r}; known prefixes: {', '.join(list_prefixes())} "
            "(register your own with mixreplay.register_dataset)"
        )
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        if module.startswith("torchrl.") and importlib.util.find_spec("torchrl") is None:
            raise MissingDependencyError(
                f"the dataset source {prefix!r} opens through TorchRL ({factory}), which is not "
                'installed. Install it with: pip install "mixreplay[torchrl]"'
            )
        return getattr(importlib.import_module(module), name)
    return factory


def load_dataset(dataset_id: str, **kwargs):
    """Open the offline dataset named ``"prefix:rest"``.

    Args:
        dataset_id: e.g. ``"minari:mujoco/hopper/expert-v0"``, ``"d4rl:hopper-medium-v2"``,
            ``"memmap:/data/hopper"``.
        **kwargs: forwarded to the prefix's loader (``batch_size``, ``generator``, ...).
    """
    if not isinstance(dataset_id, str):
        raise TypeError(
            f"dataset_id must be a string like 'minari:<id>', got {type(dataset_id).__name__}"
        )
    prefix, sep, rest = dataset_id.partition(":")
    if not sep or not prefix or not rest:
        raise ValueError(
            f"dataset ID {dataset_id!r} must be prefixed with its source: write it as "
            f"'<prefix>:<name>' with a prefix among {', '.join(list_prefixes())}"
        )
    return _factory(prefix)(rest, **kwargs)
