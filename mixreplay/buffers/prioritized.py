"""TorchRL's prioritized buffers: a buffer built around a :class:`~mixreplay.PrioritizedSampler`.

:class:`PrioritizedReplayBuffer` and :class:`TensorDictPrioritizedReplayBuffer` take
TorchRL's ``alpha``, ``beta`` and ``eps`` and build the sampler themselves, sized by the
storage (TorchRL's default storage, ``ListStorage(1000)``, when none is given). They are
named recipes (as Reverb's ``Table.queue``): the buffer is an ordinary
:class:`~mixreplay.ReplayBuffer` / :class:`~mixreplay.TensorDictReplayBuffer` whose
sampler is that :class:`~mixreplay.PrioritizedSampler`.
"""

from __future__ import annotations

from typing import Any

import torch

from mixreplay._validate import check_bool
from mixreplay.buffers.replay import DEFAULT_CAPACITY, ReplayBuffer
from mixreplay.buffers.tensordict import TensorDictReplayBuffer
from mixreplay.samplers import Sampler
from mixreplay.samplers.prioritized import PrioritizedSampler
from mixreplay.storages.base import Storage
from mixreplay.storages.items import ListStorage

__all__ = ["PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer"]


def _storage(storage: Any) -> Any:
    """The storage given (built when a factory), or TorchRL's default ``ListStorage(1000)``."""
    if storage is None:
        return ListStorage(DEFAULT_CAPACITY)
    if not isinstance(storage, Storage) and callable(storage) and not hasattr(storage, "set"):
        return storage()
    return storage


def _sync(sync: Any) -> None:
    # TorchRL's sync=False keeps the priority tree away from writers in other processes and
    # lets the learner's catch up from write_count: what a mixreplay sampler always does
    check_bool(sync, "sync")


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`~mixreplay.ReplayBuffer` drawing rows in proportion to their priority.

    TorchRL's ``PrioritizedReplayBuffer`` (Schaul et al., 2016): a
    :class:`~mixreplay.PrioritizedSampler` of ``alpha``, ``beta`` and ``eps`` (TorchRL's
    defaults) sized by the storage, over TorchRL's default ``ListStorage(1000)`` when no
    storage is given (items of any type; pass a :class:`~mixreplay.LazyTensorStorage`
    for rows of one structure). ``sample(n, return_info=True)`` gives the slots
    (``info["index"]``) to pass to :meth:`update_priority` with the new priorities.

    Keyword Args:
        alpha: how strongly priorities shape the draw (0: uniform).
        beta: the importance-weight exponent.
        eps: added to every priority.
        dtype: TorchRL's tree dtype (``torch.float`` or ``torch.double``; priorities are
            kept in float64 either way).
        sampler: a sampler of your own instead (``alpha``, ``beta``, ``eps`` are then
            not used, as in TorchRL).
        sampler_device: where the tree lives; it lives on the storage's device, so this
            is only checked against it.
        sync: TorchRL's switch for writers in other processes; both values mean what a
            mixreplay sampler does (it follows writes made in any process).
        **kwargs: every other :class:`~mixreplay.ReplayBuffer` argument.

    Examples:
        >>> import torch
        >>> from mixreplay import ListStorage, PrioritizedReplayBuffer
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.9, storage=ListStorage(10),
        ...                              collate_fn=list, generator=0)
        >>> index = rb.extend(["a", "b", "c"])
        >>> rb.update_priority(index, torch.tensor([0.0, 1000.0, 0.0]))
        >>> items, info = rb.sample(5, return_info=True)
        >>> items, info["index"].tolist()
        (['b', 'b', 'b', 'b', 'b'], [1, 1, 1, 1, 1])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Any = None,
        sampler: Sampler | None = None,
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        **kwargs: Any,
    ):
        _sync(sync)
        storage = _storage(storage)
        if sampler is None:
            sampler = PrioritizedSampler(
                max_capacity=storage.max_size,
                alpha=alpha,
                beta=beta,
                eps=eps,
                dtype=dtype,
                device=sampler_device,
            )
        elif sampler_device is not None:
            raise TypeError("sampler_device cannot be passed when sampler is provided.")
        super().__init__(storage=storage, sampler=sampler, **kwargs)


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A :class:`~mixreplay.TensorDictReplayBuffer` drawing rows in proportion to priority.

    TorchRL's ``TensorDictPrioritizedReplayBuffer``: a
    :class:`~mixreplay.PrioritizedSampler` of ``alpha``, ``beta``, ``eps`` and
    ``reduction`` sized by the storage (TorchRL's default ``ListStorage(1000)`` when
    none is given). Batches carry ``"index"`` and ``"priority_weight"``; after the loss
    wrote its TD error into the batch (``"td_error"``, the ``priority_key``),
    ``rb.update_tensordict_priority(batch)`` updates the rows' priorities, as TorchRL's
    ``ReplayBufferTrainer`` does after each loss.

    Keyword Args:
        alpha: how strongly priorities shape the draw (0: uniform).
        beta: the importance-weight exponent.
        priority_key: the entry holding a row's priority.
        eps: added to every priority.
        reduction: how a priority entry with several values per row is reduced
            (``"max"``, ``"min"``, ``"mean"``, ``"median"``).
        sampler_device: where the tree lives (checked against the storage's device).
        sync: TorchRL's switch for writers in other processes; both values mean what a
            mixreplay sampler does.
        **kwargs: every other :class:`~mixreplay.ReplayBuffer` argument (``storage``,
            ``batch_size``, ``prefetch``, ``pin_memory``, ``transform``, ``generator``,
            ``shared``, ...); not ``sampler`` (TorchRL's has none either).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
        >>> rb = TensorDictPrioritizedReplayBuffer(
        ...     alpha=0.7, beta=1.1, storage=LazyTensorStorage(10), batch_size=5, generator=0)
        >>> _ = rb.extend(TensorDict({"a": torch.ones(10, 3)}, [10]))
        >>> sample = rb.sample()
        >>> sorted(sample.keys())
        ['a', 'index', 'priority_weight']
        >>> sample["td_error"] = 100 * torch.ones(sample.shape)
        >>> rb.update_tensordict_priority(sample)
        >>> bool(rb.sample()["priority_weight"].min() < 1)  # their rows are favoured now
        True
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: Any = "td_error",
        eps: float = 1e-8,
        storage: Any = None,
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        reduction: str = "max",
        **kwargs: Any,
    ):
        _sync(sync)
        if "sampler" in kwargs:
            raise TypeError(
                "TensorDictPrioritizedReplayBuffer() got an unexpected keyword argument "
                "'sampler': it builds its PrioritizedSampler from alpha, beta and eps; for a "
                "sampler of your own use TensorDictReplayBuffer(sampler=...)"
            )
        storage = _storage(storage)
        sampler = PrioritizedSampler(
            max_capacity=storage.max_size,
            alpha=alpha,
            beta=beta,
            eps=eps,
            reduction=reduction,
            device=sampler_device,
        )
        super().__init__(priority_key=priority_key, storage=storage, sampler=sampler, **kwargs)
