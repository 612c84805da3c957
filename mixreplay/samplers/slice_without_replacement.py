"""Epochs of episodes: TorchRL's ``SliceSamplerWithoutReplacement``."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from mixreplay.errors import EmptyBufferError
from mixreplay.samplers.slice import SliceSampler
from mixreplay.samplers.without_replacement import SamplerWithoutReplacement
from mixreplay.storages.base import Storage

__all__ = ["SliceSamplerWithoutReplacement"]


class SliceSamplerWithoutReplacement(
    SliceSampler, SamplerWithoutReplacement, without_replacement=True
):
    """Slices of episodes, each episode once per epoch (TorchRL's meaning).

    A :class:`~mixreplay.SliceSampler` whose episodes are handed out as
    :class:`~mixreplay.SamplerWithoutReplacement` hands out rows: a draw takes the
    next ``k`` episodes of a permutation of those long enough (``k`` slices per
    batch), then one slice in each, its start drawn uniformly. A batch therefore
    never holds two slices of one episode, and an epoch visits every episode once;
    the draw that exhausts the permutation may hold fewer slices than asked (the
    epoch's rest, or none of them with ``drop_last=True``), which ends the epoch
    (:attr:`ran_out`, and ``iter(rb)``). Writing rows starts a new epoch, as in
    TorchRL (the episodes may have changed). ``SliceSampler(replacement=False)``
    builds one.

    Args:
        slice_len: steps per slice (or ``num_slices=``), as for :class:`~mixreplay.SliceSampler`.

    Keyword Args:
        drop_last: at the end of an epoch, drop the episodes left when they are fewer
            than the slices asked for (the next epoch starts) instead of returning them
            as a short batch.
        shuffle: permute the episodes (default), or hand them out in storage order.
        **kwargs: :class:`~mixreplay.SliceSampler`'s other arguments (``traj_key``,
            ``end_key``, ``strict_length``, ``pad_output``, ``span``, ...).

    Its batches may be short, so it cannot serve a mixing buffer (``variable_length``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer, SliceSamplerWithoutReplacement
        >>> episode = torch.arange(12) // 4  # three episodes of four steps
        >>> rows = TensorDict({"t": torch.arange(12), "episode": episode}, [12])
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(12),
        ...     sampler=SliceSamplerWithoutReplacement(2, traj_key="episode"),
        ...     batch_size=4,
        ...     generator=0,
        ... )
        >>> _ = rb.extend(rows)
        >>> epoch = [batch["episode"].view(-1, 2)[:, 0].tolist() for batch in rb]
        >>> epoch  # two slices, then the epoch's last episode
        [[2, 0], [1]]
    """

    _epochs: ClassVar[bool] = True
    #: no row is handed out twice in an epoch (episodes are disjoint); never a mixing source
    replacement = False

    def __init__(
        self,
        slice_len: int | None = None,
        *,
        drop_last: bool = False,
        shuffle: bool = True,
        replacement: bool = False,
        **kwargs: Any,
    ):
        if replacement is not False:
            raise TypeError(
                f"SliceSamplerWithoutReplacement(replacement={replacement!r}): it always draws "
                "without replacement; for slices drawn with replacement use SliceSampler(...)"
            )
        SliceSampler.__init__(self, slice_len, **kwargs)
        SamplerWithoutReplacement.__init__(self, drop_last=drop_last, shuffle=shuffle)
        self.variable_length = True  # the draw that ends an epoch may hold fewer slices

    def config(self) -> dict[str, Any]:
        return {**SliceSampler.config(self), "drop_last": self.drop_last, "shuffle": self.shuffle}

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        return SliceSampler.sample(self, storage, n, generator)

    def _pick(
        self, m: int, k: int, storage: Storage, generator: torch.Generator, episodes: int
    ) -> torch.Tensor:
        """The next ``k`` of a permutation of the ``m`` episodes, fewer when the epoch ends.

        The epoch follows the rows written (``generation``, ``write_count``) and the list of
        episodes (``episodes``): an in-place write that moves no boundary keeps it."""
        if self.drop_last and k > m:  # checked before drawing: a refused batch changes nothing
            raise ValueError(
                f"SliceSamplerWithoutReplacement(drop_last=True) was asked for {k} slices, and "
                f"{m} episodes are long enough: no batch could be returned without repeating an "
                f"episode; ask for at most {m} slices, or use drop_last=False"
            )
        stamp = (storage.generation, storage.write_count, episodes)
        pick = self._next(m, stamp, k, generator)
        if pick.numel() == 0:  # drop_last dropped the epoch's rest: the next epoch's first
            pick = self._next(m, stamp, k, generator)
        if pick.numel() == 0:
            raise EmptyBufferError("cannot sample: no episode is long enough for a slice")
        return pick

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the epoch (:meth:`SamplerWithoutReplacement.load_state_dict`); the episode
        index is rebuilt on the next draw."""
        SamplerWithoutReplacement.load_state_dict(self, state)
        SliceSampler.load_state_dict(self, state)
