"""A replay buffer over one storage: the building block of every mixing buffer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import EmptyBufferError
from mixreplay.samplers import RandomSampler, Sampler
from mixreplay.storage import check_row, is_native_storage

__all__ = ["ReplayBuffer", "check_batch_size", "make_generator"]

log = logging.getLogger(__name__)


def make_generator(generator: torch.Generator | int | None) -> torch.Generator:
    """The buffer's own generator: given, seeded from an int, or freshly seeded.

    A fresh one is seeded from the OS, not from torch's global RNG, which
    library code never touches.
    """
    if generator is None:
        g = torch.Generator()
        g.seed()
        return g
    if isinstance(generator, bool):
        raise TypeError(f"generator must be a torch.Generator or an int seed, got {generator!r}")
    if isinstance(generator, int):
        return torch.Generator().manual_seed(generator)
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or an int seed, got {type(generator).__name__}; "
            "e.g. generator=torch.Generator().manual_seed(0)"
        )
    return generator


def check_batch_size(batch_size, *, name: str = "batch_size", allow_none: bool = True) -> int | None:
    if batch_size is None and allow_none:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"{name} must be a positive int, got {type(batch_size).__name__} {batch_size!r}")
    if batch_size <= 0:
        raise ValueError(f"{name} must be a positive int, got {batch_size}")
    return batch_size


class ReplayBuffer:
    """Rows in a storage, drawn by a sampler with the buffer's own generator.

    Args:
        storage: a mixreplay storage (:class:`~mixreplay.LazyTensorStorage`,
            :class:`~mixreplay.LazyMemmapStorage`, ...) or a TorchRL ``Storage``.

    Keyword Args:
        sampler: which rows a batch draws; uniform with replacement by default.
        batch_size: default batch size of :meth:`sample`.
        generator: a ``torch.Generator`` (or an int seed) that all sampling draws from.
        transform: applied to every sampled batch, last.

    Thread safety: one thread may :meth:`extend` (a collector) while another
    samples and updates priorities (a learner). Each call holds the storage's
    lock while it touches rows or sampler state, so a sampled row is always a
    whole row from one write, and lengths never go backwards. Sampling itself
    is not meant to be called from two threads at once (they would share one
    generator, and the batches would no longer be reproducible).

    Checkpoints: :meth:`dumps` / :meth:`loads` save and restore the filled rows,
    cursor, sampler state and generator (see :mod:`mixreplay.checkpoint`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32, generator=0)
        >>> rb.extend(TensorDict({"observation": torch.randn(10, 4)}, [10])).shape
        torch.Size([10])
        >>> rb.sample().batch_size
        torch.Size([32])
    """

    def __init__(
        self,
        *,
        storage,
        sampler: Sampler | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
    ):
        if not is_native_storage(storage):
            from mixreplay._foreign import adapt_storage

            storage = adapt_storage(storage)
        self._storage = storage
        if sampler is None:
            sampler = RandomSampler()
        elif not isinstance(sampler, Sampler):
            raise TypeError(
                f"sampler must be a mixreplay Sampler (RandomSampler, PrioritizedSampler, "
                f"SliceSampler), got {type(sampler).__name__}"
            )
        self._sampler = sampler
        self._batch_size = check_batch_size(batch_size)
        self._generator = make_generator(generator)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self._transform = transform

    # -- properties ------------------------------------------------------------------------

    @property
    def storage(self):
        return self._storage

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def generator(self) -> torch.Generator:
        return self._generator

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def transform(self):
        return self._transform

    @property
    def schema(self):
        """Keys, per-row shapes and dtypes of the rows (``None`` before the first write)."""
        return self._storage.schema

    def __len__(self) -> int:
        return len(self._storage)

    def available(self) -> int:
        """Units the sampler could draw now (rows, or slices for a slice sampler)."""
        return self._sampler.available(self._storage)

    # -- writing ---------------------------------------------------------------------------

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``); return the slots written."""
        storage = self._storage
        # One lock around the write and the sampler's bookkeeping: a concurrent sample or
        # priority update never sees rows its sampler has not been told about.
        with storage.lock:
            index = storage.extend(data)
            self._sampler.on_extend(index, storage)
        return index

    def add(self, row: TensorDictBase) -> int:
        """Write one row (batch ``[]``); return its slot."""
        check_row(row)
        return int(self.extend(row.unsqueeze(0))[0])

    # -- reading ---------------------------------------------------------------------------

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError(
                    "batch_size is needed: pass sample(batch_size) or set batch_size= at construction"
                )
            return self._batch_size
        return check_batch_size(batch_size, allow_none=False)

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Row indices of a batch of ``n``, drawn by this buffer's sampler with ``generator``."""
        if len(self._storage) == 0:
            raise EmptyBufferError(
                "cannot sample from an empty buffer: extend it with rows first"
            )
        return self._sampler.sample(self._storage, n, generator)

    def sample(self, batch_size: int | None = None, *, return_info: bool = False):
        """Draw a ``[batch_size]`` batch (new memory; writing to it changes nothing stored).

        With ``return_info=True`` returns ``(batch, info)``, ``info`` holding
        ``"index"`` (slots sampled) and ``"weight"`` when the sampler has weights.
        """
        n = self._resolve_batch_size(batch_size)
        storage = self._storage
        with storage.lock:
            if len(storage) == 0:
                raise EmptyBufferError("cannot sample from an empty buffer: extend it with rows first")
            index = self._sampler.sample(storage, n, self._generator)
            batch = storage.gather_unlocked(index)
            weight = self._sampler.weight(index, storage) if return_info else None
        if self._transform is not None:
            batch = self._transform(batch)
        if not return_info:
            return batch
        info = TensorDict({"index": index}, batch_size=[n])
        if weight is not None:
            info["weight"] = weight
        return batch, info

    def __getitem__(self, index) -> TensorDictBase:
        """Rows by slot: ``rb[3]``, ``rb[:10]``, ``rb[tensor]``."""
        return self._storage[index]

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of rows ``index`` (needs a prioritized sampler)."""
        with self._storage.lock:
            self._sampler.update_priority(torch.as_tensor(index), torch.as_tensor(priority))

    def empty(self) -> None:
        self._storage.empty()

    # -- checkpoints (mixreplay.checkpoint) ------------------------------------------------

    def state_dict(self) -> dict:
        """A snapshot of the rows, cursor, sampler and generator (tensors and JSON values)."""
        from mixreplay import checkpoint

        return checkpoint.state_dict(self)

    def load_state_dict(self, state: dict, *, allow_offline_mismatch: bool = False) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.CheckpointError`, changing nothing, if it does not fit."""
        from mixreplay import checkpoint

        checkpoint.load_state_dict(self, state, allow_offline_mismatch=allow_offline_mismatch)

    def dumps(self, path) -> None:
        """Save a checkpoint directory at ``path``, atomically (see :mod:`mixreplay.checkpoint`)."""
        from mixreplay import checkpoint

        checkpoint.dumps(self, path)

    def loads(self, path, *, allow_offline_mismatch: bool = False) -> None:
        """Restore the checkpoint at ``path``: the next batches are those the saved buffer would have drawn."""
        from mixreplay import checkpoint

        checkpoint.loads(self, path, allow_offline_mismatch=allow_offline_mismatch)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"batch_size={self._batch_size})"
        )

