"""Copy an offline dataset into a mutable replay buffer, each row once."""

from __future__ import annotations

import logging
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._validate import check_int
from mixreplay.buffers.replay import ReplayBuffer, check_batch_size, make_generator

__all__ = ["prefill_replay_buffer"]

log = logging.getLogger(__name__)


def _read_rows(dataset: Any, index: torch.Tensor) -> TensorDictBase:
    """Rows ``index`` of ``dataset`` without sampling: by position."""
    if isinstance(dataset, ReplayBuffer):
        return dataset.storage.gather(index)
    try:  # a foreign dataset (TorchRL's) reads rows by position with __getitem__
        return dataset[index]
    except (TypeError, NotImplementedError, IndexError, KeyError):
        raise TypeError(
            f"{type(dataset).__name__} cannot be read by row position (it has no __getitem__ "
            "taking a tensor of indices); prefill copies each row once, so it needs one"
        ) from None


def prefill_replay_buffer(
    rb: Any,
    dataset: Any,
    n_samples: int | None = None,
    chunk_size: int = 1000,
    *,
    generator: torch.Generator | int | None = None,
) -> Any:
    """Copy rows of ``dataset`` into ``rb``, each row at most once, in chunks.

    With ``n_samples`` unset (or >= the dataset's size) every row is copied, in
    order. Otherwise a random subset of ``n_samples`` distinct rows is copied, in
    the order of a permutation drawn from ``generator``.

    Args:
        rb: the buffer to fill (anything with ``extend``).
        dataset: a dataset object or a dataset ID (resolved by :func:`~mixreplay.load_dataset`).
        n_samples: how many rows to copy; all by default.
        chunk_size: rows copied per ``extend``.

    Keyword Args:
        generator: a ``torch.Generator`` or int seed for the random subset.

    Returns:
        ``rb``, filled.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer, prefill_replay_buffer
        >>> dataset = ReplayBuffer(storage=LazyTensorStorage(500))
        >>> _ = dataset.extend(TensorDict({"obs": torch.arange(500)}, [500]))
        >>> rb = prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(10_000)), dataset, n_samples=200)
        >>> len(rb), rb[:].get("obs").unique().numel()
        (200, 200)
    """
    chunk_size = check_batch_size(chunk_size, name="chunk_size")
    if isinstance(dataset, str):
        from mixreplay.datasets import load_dataset

        dataset = load_dataset(dataset, batch_size=chunk_size)
    total = len(dataset)
    if n_samples is not None:
        n_samples = check_int(n_samples, "n_samples", min=0, what="an int >= 0 or None")
    if n_samples is None or n_samples >= total:
        order = None
        count = total
    else:
        order = torch.randperm(total, generator=make_generator(generator))[:n_samples]
        count = n_samples
    for start in range(0, count, chunk_size):
        stop = min(count, start + chunk_size)
        index = torch.arange(start, stop) if order is None else order[start:stop]
        rb.extend(_read_rows(dataset, index))
    log.info("prefilled %d of %d rows", count, total)
    return rb
