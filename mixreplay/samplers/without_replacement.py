"""Epochs of distinct rows: TorchRL's ``SamplerWithoutReplacement``."""

from __future__ import annotations

from typing import Any

import torch

from mixreplay._validate import describe
from mixreplay.errors import CheckpointError, EmptyBufferError
from mixreplay.samplers.base import Sampler
from mixreplay.storages.base import Storage

__all__ = ["SamplerWithoutReplacement"]


class SamplerWithoutReplacement(Sampler):
    """Every row once per epoch: batches are consecutive chunks of one permutation.

    The sampler draws a permutation of the rows held (or their slot order with
    ``shuffle=False``) and hands out its next ``n`` entries per batch. The
    batch that exhausts it ends the epoch (:attr:`ran_out` turns true, which
    ends ``iter(rb)``), and a new permutation is drawn right away. When the
    number of rows changes between two batches, a new permutation of all rows
    is drawn (as TorchRL does: it cannot tell which rows were already handed out), and
    so it is when the storage's rows were restored or emptied without this sampler's state.

    Args:
        drop_last: at the end of an epoch, drop the last chunk when it is shorter
            than the batch (the next permutation starts) instead of returning it
            as a short batch.
        shuffle: permute the rows (default), or hand them out in slot order.

    Keyword Args:
        replacement: TorchRL's dispatch keyword: ``False`` (this sampler) is
            accepted; ``RandomSampler(replacement=False)`` builds this sampler.

    A mixing buffer needs exactly its share of rows: there a short chunk is
    completed from the next permutation.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, generator=0,
        ...                   sampler=SamplerWithoutReplacement(shuffle=False))
        >>> _ = rb.extend(TensorDict({"x": torch.arange(10)}, [10]))
        >>> [batch["x"].tolist() for batch in rb]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    #: rows within one draw are distinct: a mixing buffer refuses to ask for more than are held
    replacement = False

    def __init__(self, drop_last: bool = False, shuffle: bool = True, *, replacement: bool = False):
        if replacement is not False:
            raise TypeError(
                f"SamplerWithoutReplacement(replacement={replacement!r}): it always draws "
                "without replacement (replacement=False); for draws with replacement use "
                "RandomSampler()"
            )
        for name, value in (("drop_last", drop_last), ("shuffle", shuffle)):
            if not isinstance(value, bool):
                raise TypeError(
                    f"SamplerWithoutReplacement {name} must be a bool, got {type(value).__name__} {value!r}"
                )
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._order: torch.Tensor | None = None  # the current epoch's permutation
        self._pos = 0  # entries of it already handed out
        self._len = 0  # rows held when it was drawn
        self._generation: int | None = None  # the storage's generation then (None: adopt it)
        self.ran_out = False

    def config(self) -> dict[str, Any]:
        return {"drop_last": self.drop_last, "shuffle": self.shuffle}

    @property
    def _sample_list(self) -> torch.Tensor | None:
        """TorchRL's name: the rows of the current epoch not handed out yet (``None`` before
        the first draw). A view: read it, never write it."""
        return None if self._order is None else self._order[self._pos :]

    def _new_epoch(self, size: int, stamp: Any, generator: torch.Generator) -> None:
        if self.shuffle:
            self._order = torch.randperm(size, generator=generator, device=generator.device)
        else:
            self._order = torch.arange(size, device=generator.device)
        self._pos, self._len, self._generation = 0, size, stamp

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        if self.drop_last and n > size:  # checked before drawing: a refused batch changes nothing
            raise ValueError(  # TorchRL's words first
                f"The batch size {n} is greater than the storage capacity {size} (the rows "
                "held): with "
                "drop_last=True no batch could be returned without repeating rows; ask for at "
                f"most {size} rows, or use SamplerWithoutReplacement(drop_last=False)"
            )
        return self._next(size, storage.generation, n, generator)

    def _next(self, size: int, stamp: Any, n: int, generator: torch.Generator) -> torch.Tensor:
        """The next ``n`` entries of the epoch's permutation of ``range(size)`` (fewer when it
        ends), drawing a new permutation first when ``size`` or ``stamp`` (what the storage's
        rows are: its generation) changed since the last one was drawn."""
        if self._generation is None:  # just restored with its storage: the order fits the rows
            self._generation = stamp
        if self._order is None or self._len != size or self._generation != stamp:
            # first draw, rows added or removed, or rows restored or emptied behind our back
            self._new_epoch(size, stamp, generator)
        assert self._order is not None
        if self._order.device != generator.device:
            # restored from a checkpoint (saved on the host): the epoch's order moves, once, to
            # where this buffer draws, so its indices never cross devices per batch
            self._order = self._order.to(generator.device)
        # a copy: the caller owns its index (an in-place edit must not rewrite the epoch)
        index = self._order[self._pos : self._pos + n].clone()
        self._pos += index.numel()
        left = self._len - self._pos
        self.ran_out = left == 0 or (self.drop_last and left < n)
        if self.ran_out:
            self._new_epoch(size, stamp, generator)
        return index

    def available(self, storage: Storage) -> int:
        return len(storage)

    # -- state -----------------------------------------------------------------------------

    def draw_state(self) -> Any:
        # The permutation is replaced, never written in place, so a reference is a snapshot.
        return self._order, self._pos, self._len, self._generation, self.ran_out

    def restore_draw_state(self, state: Any) -> None:
        self._order, self._pos, self._len, self._generation, self.ran_out = state

    def state_dict(self) -> dict[str, Any]:
        """The epoch's permutation (``"order"``), the entries of it handed out (``"pos"``),
        the rows it covers (``"len"``), and TorchRL's ``"_sample_list"``: a copy of the rows
        not handed out yet (``order[pos:]``), which :meth:`load_state_dict` checks against
        the others."""
        order = torch.empty(0, dtype=torch.int64) if self._order is None else self._order.cpu()
        return {
            "order": order,
            "pos": self._pos,
            "len": self._len,
            "ran_out": self.ran_out,
            "started": self._order is not None,
            "_sample_list": order[self._pos :].clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state that does not fit raises
        :class:`~mixreplay.CheckpointError` and changes nothing."""
        what = "SamplerWithoutReplacement state"
        if not isinstance(state, dict) or not {"order", "pos", "len", "started"} <= set(state):
            raise CheckpointError(
                f"{what} must be a dict with keys ['len', 'order', 'pos', 'ran_out', 'started'], "
                f"got {describe(state)}"
            )
        order = state["order"]
        if not isinstance(order, torch.Tensor) or order.dtype != torch.int64 or order.dim() != 1:
            raise CheckpointError(f"{what}: 'order' must be a 1-D int64 tensor")
        pos, length = state["pos"], state["len"]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (pos, length)):
            raise CheckpointError(
                f"{what}: 'pos' and 'len' must be ints >= 0, got {pos!r}, {length!r}"
            )
        started, ran_out = state["started"], state.get("ran_out", False)
        if not isinstance(started, bool) or not isinstance(ran_out, bool):
            raise CheckpointError(
                f"{what}: 'started' and 'ran_out' must be True or False, got "
                f"{started!r}, {ran_out!r}"
            )
        if started and (order.numel() != length or not 0 <= pos <= length):
            raise CheckpointError(
                f"{what}: position {pos} and length {length} do not fit "
                f"a permutation of {order.numel()} rows"
            )
        if started and order.numel() and not 0 <= int(order.min()) <= int(order.max()) < length:
            raise CheckpointError(f"{what}: 'order' holds rows outside 0..{length - 1}")
        if started and order.numel() and int(torch.bincount(order.cpu()).max()) > 1:
            raise CheckpointError(
                f"{what}: 'order' repeats a row; it must be a permutation of 0..{length - 1}"
            )
        left = state.get("_sample_list")  # TorchRL's key; states without it predate it
        if left is not None and not (
            isinstance(left, torch.Tensor)
            and torch.equal(left.cpu(), order[pos:].cpu() if started else order[:0])
        ):
            raise CheckpointError(
                f"{what}: '_sample_list' must be the rows of 'order' after 'pos' "
                f"({order.numel() - pos if started else 0} rows), got {describe(left)}"
            )
        self._order = order.clone() if started else None
        self._pos, self._len, self.ran_out = pos, length, ran_out
        self._generation = None  # the order describes the storage as restored with it
