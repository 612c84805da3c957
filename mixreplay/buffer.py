"""A replay buffer over one storage: the building block of every mixing buffer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._torchrl_args import UNSUPPORTED_METHODS, check_unsupported, unsupported_method
from mixreplay.errors import EmptyBufferError
from mixreplay.prefetch import Prefetcher, check_pin_memory, check_prefetch, pin
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


def check_batch_size(
    batch_size, *, name: str = "batch_size", allow_none: bool = True
) -> int | None:
    if batch_size is None and allow_none:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(
            f"{name} must be a positive int, got {type(batch_size).__name__} {batch_size!r}"
        )
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
        transform_factory: builds ``transform`` (TorchRL's spelling; exclusive with it).
        prefetch: batches a background thread keeps ready (needs ``batch_size``);
            see :mod:`mixreplay.prefetch` for what it guarantees.
        pin_memory: return batches in page-locked memory (needs CUDA), for fast
            ``batch.to("cuda", non_blocking=True)``.
        **torchrl_kwargs: TorchRL's other arguments (``writer``, ``collate_fn``,
            ``dim_extend``, ``shared``, ...) are accepted with TorchRL's default only;
            any other value raises ``TypeError`` naming the argument and the mixreplay way.

    Iterating (``for batch in rb``) yields sampled batches of ``batch_size``: without
    end for a sampler with replacement, one epoch for a
    :class:`~mixreplay.SamplerWithoutReplacement`.

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
        transform_factory: Callable[[], Callable] | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        **torchrl_kwargs,
    ):
        check_unsupported(type(self).__name__, torchrl_kwargs)
        if transform_factory is not None:
            if transform is not None:
                raise TypeError("transform and transform_factory are exclusive: pass one of them")
            if not callable(transform_factory):
                raise TypeError(
                    f"transform_factory must be callable, got {type(transform_factory).__name__}"
                )
            transform = transform_factory()
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
        self._prefetch = check_prefetch(prefetch, self._batch_size)
        self._pin_memory = check_pin_memory(pin_memory)
        self._prefetcher = self._make_prefetcher()

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _make_prefetcher(self) -> Prefetcher | None:
        if not self._prefetch:
            return None
        return Prefetcher(
            self._prefetch_draw,
            self._prefetch,
            snapshot=self._draw_snapshot,
            restore=self._restore_draws,
            ran_out=self._ran_out,
        )

    def _prefetch_draw(self):
        return self._sample_now(self._batch_size, info=True)

    def _draw_snapshot(self):
        return self._generator.get_state(), self._sampler.draw_state()

    def _restore_draws(self, state) -> None:
        self._generator.set_state(state[0])
        self._sampler.restore_draw_state(state[1])

    def _ran_out(self) -> bool:
        return bool(getattr(self._sampler, "ran_out", False))

    def _before_write(self) -> None:
        # Draws already asked for see the buffer as it was when they were asked for.
        if self._prefetcher is not None:
            self._prefetcher.wait()

    def _after_write(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.refill()

    def close(self) -> None:
        """Stop the prefetch thread (a no-op without ``prefetch``); later samples are drawn in the caller's thread."""
        if self._prefetcher is not None:
            self._prefetcher.discard()
            self._prefetcher.close()
            self._prefetcher = None
            self._prefetch = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        if self._prefetcher is not None:
            self._prefetcher.discard()  # the copy redraws them: same batches
        state = self.__dict__.copy()
        state["_prefetcher"] = None
        state.pop("_iterator", None)  # a generator object does not pickle
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._prefetcher = self._make_prefetcher()

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

    @property
    def write_count(self) -> int:
        """Rows written since creation, overwritten ones included (TorchRL's ``write_count``)."""
        return self._storage.write_count

    @property
    def prefetch(self) -> int:
        """Batches the prefetch thread keeps ready (0: none)."""
        return self._prefetch

    @property
    def pin_memory(self) -> bool:
        return self._pin_memory

    def __len__(self) -> int:
        return len(self._storage)

    def __getattr__(self, name: str):
        # Only reached for missing attributes: a TorchRL one gets the mixreplay way.
        if name in UNSUPPORTED_METHODS:
            raise unsupported_method(type(self).__name__, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def dim_extend(self) -> int:
        """TorchRL's extension dimension: always 0 (rows are extended along dim 0)."""
        return 0

    def stats(self) -> dict:
        """TorchRL's snapshot of counters: size, write_count, prefetch queue, capacity, utilization."""
        capacity = getattr(self._storage, "max_size", None)
        out = {
            "size": len(self),
            "write_count": self.write_count,
            "prefetch_queue_size": 0 if self._prefetcher is None else self._prefetcher.ready,
            "initialized": True,
        }
        if capacity is not None:
            out["capacity"] = int(capacity)
            out["utilization"] = len(self) / capacity if capacity else 0.0
        return out

    def read_all_in_order(self, end: int | None = None) -> TensorDictBase:
        """The rows in slot order, ``rb[:end]`` (TorchRL's name)."""
        return self[:end]

    def next(self):
        """The next batch of an iteration kept by the buffer; ``None`` once an epoch ends (TorchRL's ``next``)."""
        if self.__dict__.get("_iterator") is None:
            self._iterator = iter(self)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            return None

    def available(self) -> int:
        """Units the sampler could draw now (rows, or slices for a slice sampler)."""
        return self._sampler.available(self._storage)

    # -- writing ---------------------------------------------------------------------------

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``); return the slots written."""
        self._before_write()
        storage = self._storage
        # One lock around the write and the sampler's bookkeeping: a concurrent sample or
        # priority update never sees rows its sampler has not been told about.
        with storage.lock:
            index = storage.extend(data)
            self._sampler.on_extend(index, storage)
        self._after_write()
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
            raise EmptyBufferError("cannot sample from an empty buffer: extend it with rows first")
        return self.draw_unlocked(n, generator)

    def draw_unlocked(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Exactly ``n`` row indices (caller holds the storage lock).

        A sampler that ends an epoch with a short chunk
        (:class:`~mixreplay.SamplerWithoutReplacement`) is asked again for the rest.
        """
        index = self._sampler.sample(self._storage, n, generator)
        while index.numel() < n:
            index = torch.cat(
                [index, self._sampler.sample(self._storage, n - index.numel(), generator)]
            )
        return index

    def _sample_now(self, n: int, *, info: bool):
        """Draw, gather and transform one batch: ``(batch, info or None)``."""
        storage = self._storage
        with storage.lock:
            if len(storage) == 0:
                raise EmptyBufferError(
                    "cannot sample from an empty buffer: extend it with rows first"
                )
            index = self._sampler.sample(storage, n, self._generator)
            batch = storage.gather_unlocked(index)
            weight = self._sampler.weight(index, storage) if info else None
        if self._transform is not None:
            batch = self._transform(batch)
        if self._pin_memory:
            batch = pin(batch)
        if not info:
            return batch, None
        out = TensorDict({"index": index}, batch_size=[index.numel()])
        if weight is not None:
            out["weight"] = weight
        return batch, out

    def _next(self, batch_size: int | None, info: bool):
        """``(batch, info, ran_out)``: from the prefetch queue when it holds this size."""
        n = self._resolve_batch_size(batch_size)
        prefetcher = self._prefetcher
        if prefetcher is not None and n == self._batch_size:
            (batch, out), ran_out = prefetcher.next()
            return batch, out, ran_out
        if prefetcher is not None:
            # Another size: the queued batches are undone, so the sequence stays that of a
            # buffer without prefetching.
            prefetcher.discard()
        batch, out = self._sample_now(n, info=info)
        return batch, out, self._ran_out()

    def sample(self, batch_size: int | None = None, *, return_info: bool = False):
        """Draw a ``[batch_size]`` batch (new memory; writing to it changes nothing stored).

        With ``return_info=True`` returns ``(batch, info)``, ``info`` holding
        ``"index"`` (slots sampled) and ``"weight"`` when the sampler has weights.
        With ``prefetch``, the batch comes from the prefetch thread (see :mod:`mixreplay.prefetch`).
        """
        batch, info, _ = self._next(batch_size, return_info)
        return (batch, info) if return_info else batch

    def __iter__(self):
        """Sampled batches of ``batch_size``: endless, or one epoch for a sampler that has them."""
        if self._batch_size is None:
            raise ValueError(
                "cannot iterate over a buffer without a batch_size: iterating yields sampled "
                "batches, so set batch_size= at construction (or call sample(n) in a loop)"
            )
        while True:
            batch, _, ran_out = self._next(None, False)
            yield batch
            if ran_out:
                return

    def __getitem__(self, index) -> TensorDictBase:
        """Rows by slot: ``rb[3]``, ``rb[:10]``, ``rb[tensor]``."""
        return self._storage[index]

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of rows ``index`` (needs a prioritized sampler)."""
        self._before_write()
        with self._storage.lock:
            self._sampler.update_priority(torch.as_tensor(index), torch.as_tensor(priority))
        self._after_write()

    def empty(self, empty_write_count: bool = True) -> None:
        """Forget every row; ``write_count`` restarts from 0 unless ``empty_write_count=False``."""
        self._discard_prefetched()  # batches of rows that are gone; undone, not just dropped
        self._storage.empty()
        if empty_write_count:
            self._storage.reset_write_count()

    # -- checkpoints (mixreplay.checkpoint) ------------------------------------------------

    def state_dict(self) -> dict:
        """A snapshot of the rows, cursor, sampler and generator (tensors and JSON values)."""
        from mixreplay import checkpoint

        self._discard_prefetched()
        return checkpoint.state_dict(self)

    def load_state_dict(self, state: dict, *, allow_offline_mismatch: bool = False) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.CheckpointError`, changing nothing, if it does not fit."""
        from mixreplay import checkpoint

        self._before_write()
        checkpoint.load_state_dict(self, state, allow_offline_mismatch=allow_offline_mismatch)
        self._drop_prefetched()

    def save(self, path) -> None:
        """Alias of :meth:`dumps` (TorchRL's name)."""
        self.dumps(path)

    dump = save

    def load(self, path, **kwargs) -> None:
        """Alias of :meth:`loads` (TorchRL's name)."""
        self.loads(path, **kwargs)

    def dumps(self, path) -> None:
        """Save a checkpoint directory at ``path``, atomically (see :mod:`mixreplay.checkpoint`).

        While prefetching, the batches not yet returned are discarded first and the
        generator rewound to before them: the checkpoint holds a buffer that drew exactly
        the batches it returned, and this buffer and one restored from the checkpoint
        return the same batches from then on.
        """
        from mixreplay import checkpoint

        self._discard_prefetched()
        checkpoint.dumps(self, path)

    def loads(self, path, *, allow_offline_mismatch: bool = False) -> None:
        """Restore the checkpoint at ``path``: the next batches are those the saved buffer would have drawn."""
        from mixreplay import checkpoint

        self._before_write()
        checkpoint.loads(self, path, allow_offline_mismatch=allow_offline_mismatch)
        self._drop_prefetched()

    def _discard_prefetched(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.discard()

    def _drop_prefetched(self) -> None:
        # After a successful restore: queued batches belong to the replaced state.
        if self._prefetcher is not None:
            self._prefetcher.drop()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"batch_size={self._batch_size})"
        )
