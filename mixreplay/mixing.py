"""Mixing buffers: every batch holds an exact, scheduled share of each source.

:class:`OfflineToOnlineReplayBuffer` is the two-source buffer of the reference
API (an immutable offline dataset and an online ring); :class:`MixtureReplayBuffer`
mixes any number of named sources. Both split each batch with
:func:`~mixreplay.split.split_counts` and gather every source's rows straight
into one preallocated output: no per-source TensorDict, no ``torch.cat``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._foreign import ForeignSource, strip_bookkeeping
from mixreplay.buffer import ReplayBuffer, check_batch_size, make_generator
from mixreplay.errors import EmptyBufferError, SchemaMismatchError
from mixreplay.prefetch import Prefetcher, check_pin_memory, check_prefetch, pin
from mixreplay.samplers import Sampler
from mixreplay.schema import NestedKey, RowLayout, Schema, normalize_key
from mixreplay.split import split_counts
from mixreplay.storage import FrozenStorage, LazyTensorStorage, check_row, is_native_storage

__all__ = ["MixtureReplayBuffer", "OfflineToOnlineReplayBuffer"]

log = logging.getLogger(__name__)

_NO_LOCK = contextlib.nullcontext()

_SCHEMA_FIX = (
    "make both sides produce the same keys, dtypes and per-row shapes: load the dataset "
    "with the loader's options (load_dataset(id, dtype=torch.float32, keys=[...], "
    "rename={...})), or convert the online rows before extend (td.float(), td.select(...))"
)


def _as_source(obj, name: str):
    """A native ReplayBuffer is read directly; anything with sample/len samples itself."""
    if isinstance(obj, ReplayBuffer):
        return obj
    if callable(getattr(obj, "sample", None)) and hasattr(obj, "__len__"):
        return ForeignSource(obj)
    raise TypeError(
        f"source {name!r} must be a mixreplay ReplayBuffer or dataset, a TorchRL ReplayBuffer "
        f"or dataset, or any object with sample(n) and len(); got {type(obj).__name__}"
    )


def _check_fraction_value(value, name: str, *, open_interval: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number in (0, 1), got {value!r}")
    if open_interval and not 0.0 < value < 1.0:
        raise ValueError(
            f"{name} must be in (0, 1) (exclusive), got {value!r}; for online-only data use a "
            "plain ReplayBuffer, for offline-only sample the dataset itself"
        )
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


class _MixingBuffer:
    """What the two mixing buffers share: the split, the gather, labels and priorities."""

    _names: tuple[str, ...]
    _sources: list
    _generator: torch.Generator
    _batch_size: int | None
    _transform: Callable | None
    _source_key: tuple[str, ...] | None

    def _init_common(
        self, batch_size, generator, transform, source_key, prefetch=None, pin_memory=False
    ) -> None:
        self._batch_size = check_batch_size(batch_size)
        self._prefetch = check_prefetch(prefetch, self._batch_size)
        self._pin_memory = check_pin_memory(pin_memory)
        self._prefetcher: Prefetcher | None = None  # started by the first sample()
        self._generator = make_generator(generator)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self._transform = transform
        try:
            self._source_key = None if source_key is None else normalize_key(source_key)
        except TypeError as err:
            raise TypeError(f"source_key: {err}") from None
        self._layout: RowLayout | None = None  # output layout once every source fits it
        self._fused = False  # every source is native and shares the output layout
        self._unit_size: int | None = None  # rows per sampling unit, once known

    # -- subclass hooks --------------------------------------------------------------------

    def _fractions(self) -> list[float]:
        raise NotImplementedError

    # -- schema ----------------------------------------------------------------------------

    def _source_schema(self, src) -> Schema | None:
        return src.schema

    def _check_schemas(self, incoming: Schema, target: int) -> None:
        """Raise before any write when ``incoming`` rows for source ``target`` do not mix."""
        for i, src in enumerate(self._sources):
            if i == target or len(src) == 0:
                continue
            other = self._source_schema(src)
            if other is None:
                continue
            other.check_compatible(
                incoming, names=(self._names[i], self._names[target]), fix=_SCHEMA_FIX
            )

    def _refresh_layout(self) -> None:
        layouts = []
        for src in self._sources:
            layout = getattr(getattr(src, "storage", None), "layout", None)
            layouts.append(layout)
        known = [lay for lay in layouts if lay is not None]
        self._layout = known[-1] if known else None
        devices = [getattr(getattr(s, "storage", None), "device", None) for s in self._sources]
        self._device = next((d for d in reversed(devices) if d is not None), torch.device("cpu"))
        self._fused = (
            len(known) == len(layouts)
            and all(lay == known[0] for lay in known)
            and all(is_native_storage(getattr(s, "storage", None)) for s in self._sources)
        )

    # -- sampling --------------------------------------------------------------------------

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError(
                    "batch_size is needed: pass sample(batch_size) or set batch_size= at construction"
                )
            return self._batch_size
        return check_batch_size(batch_size, allow_none=False)

    def _unit(self) -> int:
        units = {getattr(getattr(s, "sampler", None), "unit", 1) for s in self._sources}
        units.discard(1)
        if len(units) > 1:
            raise ValueError(
                f"sources sample in different slice lengths {sorted(units)}; give every "
                "sliced source the same slice_len"
            )
        return units.pop() if units else 1

    def _counts(self, batch_size: int) -> list[int]:
        # A source with nothing to draw (no rows, or no complete slice yet) is skipped.
        sizes = [s.available() for s in self._sources]
        live = [i for i, n in enumerate(sizes) if n > 0]
        if not live:
            raise EmptyBufferError(
                f"cannot sample: every source is empty ({', '.join(self._names)}); "
                "extend the buffer with rows first"
                + (
                    ""
                    if all(len(s) == 0 for s in self._sources)
                    else " (the rows present are too few for a whole slice)"
                )
            )
        unit = self._unit_size
        if unit is None:
            unit = self._unit_size = self._unit()
            self._distinct = tuple(
                i
                for i, s in enumerate(self._sources)
                if getattr(getattr(s, "sampler", None), "replacement", True) is False
            )
        if batch_size % unit:
            raise ValueError(
                f"batch_size {batch_size} is not a multiple of slice_len {unit}: slices are "
                f"split whole; use a multiple of {unit}, e.g. {batch_size - batch_size % unit or unit}"
            )
        fractions = self._fractions()
        counts = [0] * len(sizes)
        live_counts = split_counts(batch_size // unit, [fractions[i] for i in live])
        for i, c in zip(live, live_counts):
            counts[i] = c * unit
        for i in self._distinct:  # checked before any draw, so a refused batch changes nothing
            if counts[i] > sizes[i]:
                raise ValueError(
                    f"batch_size {batch_size} asks source {self._names[i]!r} for {counts[i]} distinct rows, "
                    f"but it holds {sizes[i]} and samples without replacement; sample at most "
                    f"{sizes[i]} rows from it (a smaller batch_size or fraction), or give it "
                    "RandomSampler(replacement=True)"
                )
        return counts

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _prefetch_draw(self):
        return self._sample_now(self._batch_size, True)

    def _draw_snapshot(self):
        samplers = tuple(
            s.sampler.draw_state() if isinstance(s, ReplayBuffer) else None for s in self._sources
        )
        return self._generator.get_state(), samplers

    def _restore_draws(self, state) -> None:
        self._generator.set_state(state[0])
        for src, saved in zip(self._sources, state[1]):
            if isinstance(src, ReplayBuffer):
                src.sampler.restore_draw_state(saved)

    def _ran_out(self) -> bool:
        return False

    def _before_write(self) -> None:
        # Draws already asked for see the buffer as it was when they were asked for.
        if self._prefetcher is not None:
            self._prefetcher.wait()

    def _after_write(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.refill()

    def _discard_prefetched(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.discard()

    def _fractions_changed(self) -> None:
        # Batches drawn ahead keep their split only while it is still the current one.
        p = self._prefetcher
        if p is not None and p.ready:
            p.wait()
            try:
                counts = self._counts(self._batch_size)
            except (EmptyBufferError, ValueError):
                counts = None
            # each queued result is (batch, (B, counts, ...)); a failed draw holds None
            if any(r is None or r[1][1] != counts for r in p.queued()):
                p.discard()

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
        self._discard_prefetched()
        state = self.__dict__.copy()
        state["_prefetcher"] = None
        return state

    @property
    def prefetch(self) -> int:
        """Batches the prefetch thread keeps ready (0: none)."""
        return self._prefetch

    @property
    def pin_memory(self) -> bool:
        return self._pin_memory

    def sample(self, batch_size: int | None = None, *, return_info: bool = False):
        """Draw one flat ``[batch_size]`` batch: each source's rows in source order.

        Args:
            batch_size: rows to draw; defaults to the constructor's ``batch_size``.

        Keyword Args:
            return_info: also return a TensorDict with, per row, ``"source"``
                (index of its source), ``"index"`` (its row in that source, -1
                when a foreign source does not say) and ``"weight"`` (importance
                weight; 1 for uniformly sampled rows) when any source is prioritized.

        Returns:
            The batch (new memory), or ``(batch, info)``.

        With ``prefetch``, the batch comes from the prefetch thread (see :mod:`mixreplay.prefetch`).
        """
        B = self._resolve_batch_size(batch_size)
        if self._prefetch and B == self._batch_size:
            if self._prefetcher is None:
                self._prefetcher = Prefetcher(
                    self._prefetch_draw,
                    self._prefetch,
                    snapshot=self._draw_snapshot,
                    restore=self._restore_draws,
                    ran_out=self._ran_out,
                )
            (batch, extra), _ = self._prefetcher.next()
        else:
            self._discard_prefetched()  # another size: undo the queue, keep the sequence
            batch, extra = self._sample_now(B, return_info)
        if not return_info:
            return batch
        return batch, self._info(*extra)

    def _sample_now(self, B: int, return_info: bool):
        """One batch and what its info is built from (``None`` without ``return_info``)."""
        counts = self._counts(B)
        gen = self._generator
        if not self._fused:
            self._refresh_layout()
        indices: list[torch.Tensor | None] = [None] * len(counts)
        if self._fused:
            # One gather per source, straight into the preallocated packed output.
            layout = self._layout
            out = torch.empty(B, layout.row_words, dtype=torch.int64, device=self._device)
            pos = 0
            for i, k in enumerate(counts):
                if k:
                    src = self._sources[i]
                    storage = src._storage
                    with storage.lock:
                        idx = src.draw_unlocked(k, gen)
                        storage.gather_into(idx, out[pos : pos + k])
                    indices[i] = idx
                    pos += k
            batch = layout.unpack(out, self._device)
        else:
            batch = self._sample_generic(B, counts, indices)
        if self._source_key is not None or return_info:
            source = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts)).to(
                batch.device or "cpu"
            )
            if self._source_key is not None:
                batch.set(self._source_key, source)
        if self._transform is not None:
            batch = self._transform(batch)
        if self._pin_memory:
            batch = pin(batch)
        if not return_info:
            return batch, None
        # The weights are read now: priorities may change before the info is built.
        weights = [self._weight(i, idx) for i, idx in enumerate(indices)]
        return batch, (B, counts, indices, source, weights)

    def _weight(self, i: int, idx):
        sampler = getattr(self._sources[i], "sampler", None)
        if sampler is None or idx is None:
            return None
        return sampler.weight(idx, self._sources[i].storage)

    def _sample_generic(self, B: int, counts: list[int], indices: list) -> TensorDictBase:
        """Sources that are foreign or differ in layout: gather, align, write into one output."""
        parts = []
        for i, k in enumerate(counts):
            if not k:
                continue
            src = self._sources[i]
            if isinstance(src, ForeignSource):
                td = src.sample(k)
                if "index" in td.keys():
                    indices[i] = td.get("index").reshape(-1).to(torch.int64)
            else:
                with src.storage.lock:
                    idx = src.draw(k, self._generator)
                    td = src.storage.gather_unlocked(idx)
                indices[i] = idx
            parts.append(td)
        if len(parts) == 1:
            return parts[0]
        layout = self._layout
        if layout is None:
            layout = RowLayout(Schema.from_tensordict(strip_bookkeeping(parts[-1])))
        device = parts[-1].device or torch.device("cpu")
        out = torch.empty(B, layout.row_words, dtype=torch.int64, device=device)
        pos = 0
        for td in parts:
            n = td.batch_size[0]
            td = strip_bookkeeping(td, layout.schema)
            try:
                leaves = layout.leaves_of(td)
            except SchemaMismatchError as err:
                raise SchemaMismatchError(f"{err}\nFix: {_SCHEMA_FIX}") from None
            if any(v.device != device for v in leaves):
                leaves = [v.to(device) for v in leaves]
            layout.write(leaves, layout.group_views(out[pos : pos + n]))
            pos += n
        return layout.unpack(out, device)

    def _info(
        self, B: int, counts: list[int], indices: list, source: torch.Tensor, weights: list
    ) -> TensorDict:
        index = torch.full((B,), -1, dtype=torch.int64)
        weight = None
        pos = 0
        for i, k in enumerate(counts):
            if not k:
                continue
            if indices[i] is not None:
                index[pos : pos + k] = indices[i].cpu()
            w = weights[i]
            if w is not None:
                if weight is None:
                    weight = torch.ones(B, dtype=torch.float32)
                weight[pos : pos + k] = w.cpu().to(torch.float32)
            pos += k
        info = TensorDict({"source": source.cpu(), "index": index}, batch_size=[B])
        if weight is not None:
            info["weight"] = weight
        return info

    def update_priority(self, info: TensorDictBase, priority: torch.Tensor) -> None:
        """Send each row's new priority to the source it was drawn from.

        Args:
            info: the ``info`` returned by ``sample(..., return_info=True)``.
            priority: one priority per row of that batch (e.g. ``|td_error|``).

        Rows from sources without a prioritized sampler are ignored.
        """
        if (
            not isinstance(info, TensorDictBase)
            or "source" not in info.keys()
            or "index" not in info.keys()
        ):
            raise TypeError(
                "update_priority expects the info TensorDict from sample(..., return_info=True) "
                f"(with 'source' and 'index'), got {type(info).__name__}"
            )
        priority = torch.as_tensor(priority).detach().reshape(-1)
        self._before_write()
        B = info.batch_size[0]
        if priority.shape[0] != B:
            raise ValueError(
                f"priority has {priority.shape[0]} entries for a batch of {B} rows; pass one "
                "priority per sampled row"
            )
        source, index = info["source"], info["index"]
        for i, src in enumerate(self._sources):
            sampler = getattr(src, "sampler", None)
            if sampler is None or type(sampler).update_priority is Sampler.update_priority:
                continue
            mask = source == i
            if bool(mask.any()):
                lock = getattr(getattr(src, "storage", None), "lock", None) or _NO_LOCK
                with lock:
                    sampler.update_priority(index[mask], priority.to(index.device)[mask])
        self._after_write()

    # -- misc ------------------------------------------------------------------------------

    @property
    def generator(self) -> torch.Generator:
        return self._generator

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def source_names(self) -> tuple[str, ...]:
        return self._names

    def __len__(self) -> int:
        return sum(len(s) for s in self._sources)

    @property
    def write_count(self) -> int:
        """Rows written through :meth:`extend` since creation (TorchRL's ``write_count``)."""
        return sum(s.write_count for s in self._writable())

    def _writable(self) -> list:
        return [
            s
            for s in self._sources
            if isinstance(s, ReplayBuffer) and not isinstance(s.storage, FrozenStorage)
        ]

    # -- checkpoints (mixreplay.checkpoint) ------------------------------------------------

    def state_dict(self) -> dict:
        """A snapshot: online rows, cursors, samplers, generators, schedules, step and fractions.

        Offline data is referenced (ID, path, fingerprint), never copied.
        """
        from mixreplay import checkpoint

        self._discard_prefetched()
        return checkpoint.state_dict(self)

    def load_state_dict(self, state: dict, *, allow_offline_mismatch: bool = False) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.CheckpointError`, changing nothing, if it does not fit.

        Keyword Args:
            allow_offline_mismatch: resume even though an offline source differs
                from the one saved (its fingerprint, row count or schema).
        """
        from mixreplay import checkpoint

        self._before_write()
        checkpoint.load_state_dict(self, state, allow_offline_mismatch=allow_offline_mismatch)
        if self._prefetcher is not None:
            self._prefetcher.drop()  # queued batches belong to the replaced state

    def dumps(self, path) -> None:
        """Save a checkpoint directory at ``path``, atomically (see :mod:`mixreplay.checkpoint`).

        Only the filled online rows are written; offline data is referenced, not copied.
        While prefetching, the batches not yet returned are discarded and the generator
        rewound first, as :meth:`ReplayBuffer.dumps <mixreplay.ReplayBuffer.dumps>` does.
        """
        from mixreplay import checkpoint

        self._discard_prefetched()
        checkpoint.dumps(self, path)

    def loads(self, path, *, allow_offline_mismatch: bool = False) -> None:
        """Restore the checkpoint at ``path`` into this buffer, built with the same arguments.

        From then on, :meth:`sample` draws exactly the batches the saved buffer
        would have drawn. Raises :class:`~mixreplay.CheckpointError` (and changes
        nothing) for a checkpoint that is missing, corrupt, of another format
        version, or that does not fit this buffer (schema, capacity, sampler,
        offline fingerprint unless ``allow_offline_mismatch=True``).
        """
        from mixreplay import checkpoint

        self._before_write()
        checkpoint.loads(self, path, allow_offline_mismatch=allow_offline_mismatch)
        if self._prefetcher is not None:
            self._prefetcher.drop()  # queued batches belong to the replaced state


class OfflineToOnlineReplayBuffer(_MixingBuffer):
    """An immutable offline dataset and an online ring, mixed in an exact proportion.

    :meth:`extend` writes to the online ring only. :meth:`sample` draws exactly
    ``round(offline_fraction * B)`` offline rows (Python's ``round``, half to even)
    and ``B - round(...)`` online rows, offline rows first, as one flat ``[B]``
    TensorDict. While the online ring is empty, or when the offline count is
    ``B``, the whole batch is offline; when it is 0, the whole batch is online.

    Offline and online rows must agree on keys, dtypes and per-row shapes: the
    first :meth:`extend` checks it and raises :class:`~mixreplay.errors.SchemaMismatchError`
    naming every key that differs (nothing is ever upcast silently). Sampler
    bookkeeping keys such as TorchRL's ``"index"`` are not data and are dropped.

    Thread safety: a collector thread may :meth:`extend` while a learner thread
    calls :meth:`sample` and :meth:`update_priority`. Every source's rows and
    sampler state are read and written under that source's storage lock, so a
    sampled row is always a whole row from one write and lengths only grow.
    Call :meth:`sample`, :meth:`anneal`, :meth:`set_step` and :meth:`loads`
    from one thread (the learner): they share the buffer's generator and fraction.

    Checkpoints: :meth:`dumps` / :meth:`loads` save and restore the filled online
    rows, the ring cursor, samplers, generator, schedule, step and fractions; the
    offline dataset is referenced by ID, path and fingerprint, never copied.

    Args:
        offline_dataset: a mixreplay buffer or dataset, a TorchRL ``ReplayBuffer``
            or dataset, any object with ``sample(n)`` and ``len()``, or a dataset ID
            such as ``"minari:mujoco/hopper/expert-v0"`` resolved by
            :func:`~mixreplay.load_dataset`.

    Keyword Args:
        online_storage: the online ring (a mixreplay or TorchRL storage). Exclusive
            with ``online_capacity``.
        online_capacity: capacity of a new :class:`~mixreplay.LazyTensorStorage`.
        offline_fraction: share of each batch drawn offline, in ``(0, 1)``.
        batch_size: default batch size; required with a dataset ID (and forwarded).
        transform: applied to each batch, last.
        generator: a ``torch.Generator`` or int seed; every draw (offline rows
            included, unless the offline side is foreign) comes from it.
        online_sampler: sampler of the online ring (uniform by default).
        source_key: when set, each batch carries an int64 ``[B]`` label under this
            key: 0 for offline rows, 1 for online rows.
        prefetch: batches a background thread keeps ready (needs ``batch_size``; see
            :mod:`mixreplay.prefetch`). A change of :meth:`anneal` or :meth:`set_step`
            that changes the split redraws them, so every batch has the current split.
        pin_memory: return batches in page-locked memory (needs CUDA).
        **dataset_kwargs: forwarded to the dataset loader with a dataset ID.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(1000))
        >>> _ = offline.extend(TensorDict({"observation": torch.randn(1000, 4)}, [1000]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=500, offline_fraction=0.25,
        ...                                  batch_size=32, generator=0, source_key="source")
        >>> _ = rb.extend(TensorDict({"observation": torch.randn(10, 4)}, [10]))
        >>> rb.sample()["source"].bincount().tolist()
        [8, 24]
    """

    def __init__(
        self,
        offline_dataset,
        *,
        online_storage=None,
        online_capacity: int | None = None,
        offline_fraction: float = 0.5,
        batch_size: int | None = None,
        transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
        generator: torch.Generator | int | None = None,
        online_sampler: Sampler | None = None,
        source_key: NestedKey | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        **dataset_kwargs,
    ):
        if online_storage is not None and online_capacity is not None:
            raise ValueError(
                "pass online_storage or online_capacity, not both "
                f"(got online_storage={type(online_storage).__name__}, online_capacity={online_capacity!r})"
            )
        if online_storage is None and online_capacity is None:
            raise ValueError(
                "the online buffer needs a size: pass online_capacity=N (rows) or online_storage=..."
            )
        if online_capacity is not None:
            online_storage = LazyTensorStorage(_check_capacity(online_capacity))
        self._schedule = None
        self._base_offline_fraction = self._set_initial_fraction(offline_fraction)
        if isinstance(offline_dataset, str):
            from mixreplay.datasets import load_dataset

            if "batch_size" not in dataset_kwargs:
                if batch_size is None:
                    raise ValueError(
                        f"batch_size is required when offline_dataset is an ID ({offline_dataset!r}): "
                        "it is forwarded to the dataset; pass batch_size=..."
                    )
                dataset_kwargs["batch_size"] = batch_size
            offline_dataset = load_dataset(offline_dataset, **dataset_kwargs)
        elif dataset_kwargs:
            raise TypeError(
                f"unexpected keyword arguments {sorted(dataset_kwargs)}: dataset options are only "
                "forwarded when offline_dataset is an ID string; pass them to your dataset instead"
            )
        self._init_common(batch_size, generator, transform, source_key, prefetch, pin_memory)
        offline = _as_source(offline_dataset, "offline")
        if len(offline) == 0:
            raise ValueError(
                f"the offline dataset ({type(offline_dataset).__name__}) holds no rows; fill it "
                "before mixing, or use a plain ReplayBuffer for online-only training"
            )
        self._offline_dataset = offline_dataset
        self._online_buffer = ReplayBuffer(
            storage=online_storage, sampler=online_sampler, generator=self._generator
        )
        self._names = ("offline", "online")
        self._sources = [offline, self._online_buffer]
        if self._schedule is not None and getattr(self._schedule, "needs_sizes", False):
            self._base_offline_fraction = self._offline_fraction = self._evaluate_schedule(0)

    def _set_initial_fraction(self, offline_fraction) -> float:
        if callable(offline_fraction):
            from mixreplay.schedules import as_schedule

            self._schedule = as_schedule(offline_fraction)
            self._step = 0
            if getattr(self._schedule, "needs_sizes", False):
                return math.nan  # needs the sources' sizes: evaluated at the end of __init__
            value = self._evaluate_schedule(0)
            self._offline_fraction = value
            return value
        value = _check_fraction_value(offline_fraction, "offline_fraction", open_interval=True)
        self._offline_fraction = value
        return value

    def _evaluate_schedule(self, step: int) -> float:
        sizes = (
            {"offline": len(self._sources[0]), "online": len(self._sources[1])}
            if hasattr(self, "_sources")
            else None
        )
        value = (
            self._schedule(step, sizes=sizes)
            if getattr(self._schedule, "needs_sizes", False)
            else self._schedule(step)
        )
        return _check_fraction_value(
            value, f"offline_fraction from {self._schedule!r} at step {step}", open_interval=False
        )

    def _fractions(self) -> list[float]:
        f = self._offline_fraction
        if self._schedule is not None and getattr(self._schedule, "needs_sizes", False):
            f = self._offline_fraction = self._evaluate_schedule(self._step)
        return [f, 1.0 - f]

    # -- reference API ---------------------------------------------------------------------

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write online rows (batch ``[n]``); return the online slots written."""
        online = self._online_buffer
        if (
            online.storage.schema is None
            and isinstance(data, TensorDictBase)
            and data.batch_dims >= 1
        ):
            self._check_schemas(Schema.from_tensordict(data, batch_dims=data.batch_dims), target=1)
        self._before_write()
        index = online.extend(data)
        if not self._fused:
            self._refresh_layout()
        self._after_write()
        return index

    def add(self, row: TensorDictBase) -> int:
        """Write one online row (batch ``[]``); return its slot."""
        check_row(row)
        return int(self.extend(row.unsqueeze(0))[0])

    def anneal(self, step: int, total_steps: int) -> None:
        """Decay the offline fraction linearly to 0: ``base * max(0, 1 - step / total_steps)``."""
        for name, v in (("step", step), ("total_steps", total_steps)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
        if total_steps <= 0:
            raise ValueError(
                f"total_steps must be > 0 (the step where the fraction reaches 0), got {total_steps}"
            )
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self._offline_fraction = self._base_offline_fraction * max(0.0, 1.0 - step / total_steps)
        self._fractions_changed()

    def set_step(self, step: int) -> None:
        """Move the offline-fraction schedule to ``step`` (no-op for a fixed float)."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, got {type(step).__name__} {step!r}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self._schedule is not None:  # evaluated first: a schedule that raises changes nothing
            self._offline_fraction = self._evaluate_schedule(step)
        self._step = step
        self._fractions_changed()

    @property
    def offline_fraction(self) -> float:
        """The offline share used by the next :meth:`sample`."""
        if self._schedule is not None and getattr(self._schedule, "needs_sizes", False):
            self._offline_fraction = self._evaluate_schedule(self._step)
        return self._offline_fraction

    @property
    def offline_buffer(self):
        """The offline dataset, as given (never written to)."""
        return self._offline_dataset

    @property
    def online_buffer(self) -> ReplayBuffer:
        """The online :class:`~mixreplay.ReplayBuffer` that :meth:`extend` writes to."""
        return self._online_buffer

    @property
    def write_count(self) -> int:
        """Online rows written since creation, overwritten ones included (TorchRL's trainer reads it)."""
        return self._online_buffer.write_count

    @property
    def schedule(self):
        """The offline-fraction schedule, or ``None`` for a fixed (or annealed) float."""
        return self._schedule

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(offline={type(self._offline_dataset).__name__}, "
            f"offline_fraction={self.offline_fraction:.3f}, "
            f"online_size={len(self._online_buffer)}, batch_size={self._batch_size})"
        )


def _check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(
            f"online_capacity must be an int, got {type(capacity).__name__} {capacity!r}"
        )
    if capacity <= 0:
        raise ValueError(f"online_capacity must be a positive number of rows, got {capacity}")
    return capacity


class MixtureReplayBuffer(_MixingBuffer):
    """Any number of named sources, each with its share of every batch.

    Counts per batch follow :func:`~mixreplay.split.split_counts` (largest
    remainder, exact, summing to ``B``). Sources with no rows are skipped and
    their share goes to the others in proportion to their fractions.

    Args:
        sources: name -> a mixreplay buffer or dataset, a TorchRL buffer or dataset,
            or any object with ``sample(n)`` and ``len()``. Order matters: it is the
            order of rows in a batch and of the source labels.
        fractions: name -> a weight (normalized over the sources) or a schedule.

    Keyword Args:
        batch_size: default batch size.
        generator: a ``torch.Generator`` or int seed for every draw.
        samplers: name -> sampler, for sources given as storages (see below).
        transform: applied to each batch, last.
        source_key: when set, each batch carries the int64 source index of every row.
        prefetch: batches a background thread keeps ready (needs ``batch_size``; see
            :mod:`mixreplay.prefetch`); :meth:`set_step` redraws them if the split changes.
        pin_memory: return batches in page-locked memory (needs CUDA).

    A source given as a storage (``LazyTensorStorage(...)``) becomes a
    :class:`~mixreplay.ReplayBuffer` with ``samplers.get(name)``.

    Thread safety and checkpoints: as for :class:`OfflineToOnlineReplayBuffer`
    (collectors may :meth:`extend` any source while one learner samples;
    :meth:`dumps` saves the rows of every writable source and references the
    read-only ones).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, MixtureReplayBuffer
        >>> mix = MixtureReplayBuffer(
        ...     {"a": LazyTensorStorage(100), "b": LazyTensorStorage(100), "c": LazyTensorStorage(100)},
        ...     {"a": 0.5, "b": 0.3, "c": 0.2}, batch_size=10, generator=0, source_key="src")
        >>> for i, name in enumerate("abc"):
        ...     _ = mix.extend(TensorDict({"x": torch.full((5,), i)}, [5]), source=name)
        >>> mix.sample()["src"].tolist()
        [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]
    """

    def __init__(
        self,
        sources: Mapping[str, object],
        fractions: Mapping[str, object],
        *,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        samplers: Mapping[str, Sampler] | None = None,
        transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
        source_key: NestedKey | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
    ):
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(
                f"sources must be a non-empty mapping name -> buffer, got {type(sources).__name__}"
            )
        bad_names = [n for n in sources if not isinstance(n, str) or not n]
        if bad_names:
            raise TypeError(
                f"source names must be non-empty strings, got {bad_names!r}; name each source, "
                "e.g. {'offline': dataset, 'online': LazyTensorStorage(100_000)}"
            )
        if not isinstance(fractions, Mapping):
            raise TypeError(
                f"fractions must be a mapping name -> fraction, got {type(fractions).__name__}"
            )
        if samplers is not None and not isinstance(samplers, Mapping):
            raise TypeError(
                f"samplers must be a mapping name -> Sampler, got {type(samplers).__name__}; "
                "e.g. samplers={'online': PrioritizedSampler()}"
            )
        if set(fractions) != set(sources):
            raise ValueError(
                f"fractions must name exactly the sources: sources {sorted(sources)}, "
                f"fractions {sorted(fractions)}"
            )
        samplers = dict(samplers or {})
        unknown = set(samplers) - set(sources)
        if unknown:
            raise ValueError(
                f"samplers name unknown sources {sorted(unknown)}; sources are {sorted(sources)}"
            )
        self._init_common(batch_size, generator, transform, source_key, prefetch, pin_memory)
        self._names = tuple(sources)
        self._sources = []
        for name, obj in sources.items():
            if is_native_storage(obj) or _looks_like_storage(obj):
                obj = ReplayBuffer(
                    storage=obj, sampler=samplers.pop(name, None), generator=self._generator
                )
            elif name in samplers:
                raise ValueError(
                    f"samplers[{name!r}] applies to a source given as a storage; source {name!r} is a "
                    f"{type(obj).__name__}, which keeps its own sampler"
                )
            self._sources.append(_as_source(obj, name))
            if (
                isinstance(obj, ReplayBuffer)
                and isinstance(obj.storage, FrozenStorage)
                and len(obj) == 0
            ):
                raise ValueError(
                    f"source {name!r} ({type(obj).__name__}) is read-only and holds no rows, so it could "
                    "never contribute to a batch; fill the dataset before mixing, or drop the source"
                )
        self._schedules = {}
        self._fixed = {}
        for name in self._names:
            f = fractions[name]
            if isinstance(f, (int, float)) and not isinstance(f, bool):
                f = float(f)
                if not math.isfinite(f) or f < 0:
                    raise ValueError(f"fractions[{name!r}] must be finite and >= 0, got {f!r}")
                self._fixed[name] = f
            else:
                from mixreplay.schedules import as_schedule

                try:
                    self._schedules[name] = as_schedule(f)
                except TypeError as err:
                    raise TypeError(f"fractions[{name!r}]: {err}") from None
        if not self._schedules and sum(self._fixed.values()) == 0:
            raise ValueError(
                f"fractions sum to 0 ({dict(fractions)}); give at least one source a share"
            )
        self._step = 0
        self._current = self._evaluate(0)

    def _evaluate(self, step: int) -> list[float]:
        sizes = {n: len(s) for n, s in zip(self._names, self._sources)}
        out = []
        for name in self._names:
            if name in self._fixed:
                out.append(self._fixed[name])
            else:
                sch = self._schedules[name]
                v = sch(step, sizes=sizes) if getattr(sch, "needs_sizes", False) else sch(step)
                out.append(
                    _check_fraction_value(
                        v, f"fractions[{name!r}] at step {step}", open_interval=False
                    )
                )
        return out

    def _fractions(self) -> list[float]:
        if any(getattr(s, "needs_sizes", False) for s in self._schedules.values()):
            self._current = self._evaluate(self._step)
        return self._current

    @property
    def fractions(self) -> dict[str, float]:
        """The current weight of each source (not yet normalized)."""
        return dict(zip(self._names, self._fractions()))

    def set_step(self, step: int) -> None:
        """Move every schedule to ``step``."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, got {type(step).__name__} {step!r}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self._current = self._evaluate(step)  # first: a schedule that raises changes nothing
        self._step = step
        self._fractions_changed()

    def source(self, name: str):
        """The buffer behind source ``name``."""
        return self._sources[self._index(name)]

    def _index(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise KeyError(f"no source named {name!r}; sources are {list(self._names)}") from None

    def extend(self, data: TensorDictBase, *, source: str) -> torch.Tensor:
        """Write rows to source ``source``; return the slots written."""
        i = self._index(source)
        buf = self._sources[i]
        if not isinstance(buf, ReplayBuffer):
            raise TypeError(
                f"source {source!r} is a {buf!r} that mixreplay samples but does not write to; "
                "extend it directly"
            )
        if buf.storage.schema is None and isinstance(data, TensorDictBase) and data.batch_dims >= 1:
            self._check_schemas(Schema.from_tensordict(data, batch_dims=data.batch_dims), target=i)
        self._before_write()
        index = buf.extend(data)
        if not self._fused:
            self._refresh_layout()
        self._after_write()
        return index

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{n}: {len(s)} rows @ {f:.3f}"
            for n, s, f in zip(self._names, self._sources, self._fractions())
        )
        return f"{type(self).__name__}({parts}, batch_size={self._batch_size})"


def _looks_like_storage(obj) -> bool:
    return all(hasattr(obj, a) for a in ("set", "get", "max_size")) and not hasattr(obj, "sample")
