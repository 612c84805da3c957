"""The options every dataset takes when it is opened, and TorchRL's dataset keywords.

Shared by the one loader of convertible sources (:mod:`mixreplay.datasets.loader`)
and by ``memmap:`` (:func:`~mixreplay.datasets.memmap.load_memmap`): forwarded to
:class:`~mixreplay.OfflineDataset` (``batch_size``, ``generator``, ``sampler``,
``transform``), and TorchRL's dataset keywords, each with mixreplay's meaning or a
clear error naming the mixreplay way.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["DATASET_OPTIONS", "TORCHRL_DATASET_OPTIONS", "dataset_options"]

#: forwarded to the OfflineDataset
DATASET_OPTIONS = ("batch_size", "generator", "sampler", "transform")
#: TorchRL's dataset keywords handled by :func:`dataset_options`
TORCHRL_DATASET_OPTIONS = ("split_trajs", "writer", "collate_fn", "prefetch", "pin_memory")

_READ_ONLY = {
    "writer": "a dataset is read-only (TorchRL's ImmutableDatasetWriter); to add rows, mix it "
    "with an online buffer (OfflineToOnlineReplayBuffer) or prefill_replay_buffer a new buffer",
    "collate_fn": "batches are always TensorDicts; convert them with transform=...",
}


@functools.cache
def _dataset_parameters() -> tuple[frozenset[str], bool]:
    from mixreplay.buffers.offline import OfflineDataset

    params = inspect.signature(OfflineDataset.__init__).parameters.values()
    named = frozenset(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def dataset_options(kwargs: dict[str, Any], loader: str) -> dict[str, Any]:
    """Pop the dataset's options (and TorchRL's dataset keywords) from ``kwargs``.

    ``split_trajs=False``, ``writer=None`` and ``collate_fn=None`` (TorchRL's defaults)
    mean what mixreplay does; ``prefetch`` and ``pin_memory`` are forwarded when the
    dataset takes them. Any other value is refused.

    Args:
        kwargs: the caller's keywords; the ones handled here are removed.
        loader: names the loader in messages, e.g. ``"load_dataset('memmap:...')"``.

    Returns:
        The keywords for :class:`~mixreplay.OfflineDataset`.

    Raises:
        TypeError: a TorchRL keyword with a value mixreplay has no meaning for.

    Examples:
        >>> from mixreplay.datasets.options import dataset_options
        >>> kwargs = {"batch_size": 4, "split_trajs": False, "keys": ["obs"]}
        >>> dataset_options(kwargs, "load_dataset('x:...')"), kwargs
        ({'batch_size': 4}, {'keys': ['obs']})
    """
    out = {k: kwargs.pop(k) for k in DATASET_OPTIONS if k in kwargs}
    split_trajs = kwargs.pop("split_trajs", False)
    if split_trajs is not False:
        raise TypeError(
            f"{loader} does not support TorchRL's split_trajs={split_trajs!r}: rows stay flat "
            "and ds.episode_starts marks each trajectory; to sample whole runs of steps pass "
            "sampler=SliceSampler(slice_len=...) (mixreplay.SliceSampler)"
        )
    for name, way in _READ_ONLY.items():
        value = kwargs.pop(name, None)
        if value is not None:
            raise TypeError(f"{loader} does not support TorchRL's {name}={value!r}: {way}")
    named, var = _dataset_parameters()
    for name, default in (("prefetch", None), ("pin_memory", False)):
        if name not in kwargs:
            continue
        value = kwargs.pop(name)
        if name in named or var:
            out[name] = value
        elif value is not default:
            raise TypeError(
                f"{loader} does not take {name}={value!r}: an OfflineDataset sampled alone "
                f"has no {name}; pass {name}= to the buffer that samples it "
                "(OfflineToOnlineReplayBuffer, MixtureReplayBuffer or ReplayBuffer)"
            )
    return out
