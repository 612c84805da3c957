"""A replay buffer over one storage: the building block of every mixing buffer."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from multiprocessing.context import get_spawning_popen
from typing import Any, NamedTuple, NoReturn

import torch
import torch.utils._pytree as pytree
from tensordict import TensorDict, TensorDictBase

from mixreplay import data_types
from mixreplay._state import Plan, plan_sampler, sampler_state
from mixreplay._torchrl_args import UNSUPPORTED_METHODS, check_unsupported, unsupported_method
from mixreplay._validate import check_bool, check_callable, describe
from mixreplay.buffers.base import BufferBase, _new_buffer, check_batch_size, make_generator
from mixreplay.buffers.writer import RingWriter
from mixreplay.errors import (
    CheckpointError,
    EmptyBufferError,
    MissingBatchSizeError,
    ReadOnlyError,
    SchemaMismatchError,
)
from mixreplay.layout import new_tensordict
from mixreplay.rate_limit import check_timeout, make_gate, write_limited
from mixreplay.samplers import RandomSampler, Sampler
from mixreplay.schema import format_key, normalize_key
from mixreplay.storages.base import Storage, as_index
from mixreplay.storages.foreign import adapt_storage, looks_like_storage
from mixreplay.storages.ring import LazyTensorStorage, grid_key, grid_rows, leading_dims
from mixreplay.storages.shared import is_shared, share_ring
from mixreplay.transforms import Inverted, Transform

#: the largest batch a checkpoint may set: a larger value is corrupt, not a batch anyone draws
_MOST_BATCH_ROWS = 2**31 - 1

__all__ = ["DEFAULT_CAPACITY", "ReplayBuffer", "Sampled", "check_batch_size", "make_generator"]

log = logging.getLogger(__name__)

#: the storage of ``ReplayBuffer()`` without one: ``LazyTensorStorage(1000)`` (TorchRL's
#: default holds 1,000 items too)
DEFAULT_CAPACITY = 1000

_NOTHING_WRITTEN = torch.zeros((0, 1), dtype=torch.long)

# TorchRL's words first: code written against TorchRL matches on them
EMPTY_MESSAGE = "Cannot sample from an empty storage: extend the buffer with rows first"

#: What a mixing buffer draws a source's rows with (:meth:`ReplayBuffer.packed_drawer`):
#: ``drawer(n, generator, out, index)`` draws ``n`` rows, gathers their packed words into
#: ``out`` and returns their slots. ``index``, when given, is an int64 ``[n]`` buffer of the
#: caller's that the slots may be drawn into instead of a new tensor (the caller then reads
#: them before the next draw).
Drawer = Callable[[int, torch.Generator, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def _eval(transform: Any) -> None:
    """Put a module transform (a TorchRL ``Transform``) in eval mode, as TorchRL's buffer does:
    a transform with running statistics (``VecNorm``) does not update them on sampled data."""
    if isinstance(transform, Inverted):
        transform = transform.transform
    if isinstance(transform, torch.nn.Module):
        transform.eval()


def _warn_batched_add(data: Any) -> None:
    if data_types.is_collection(data) and data.batch_dims:
        warnings.warn(  # TorchRL's words
            f"Using `add()` with a TensorDict that has batch_size={data.batch_size}. Use "
            "`extend()` to add multiple elements, or `add()` with a single element "
            "(batch_size=torch.Size([])).",
            UserWarning,
            stacklevel=3,
        )


def _share_storage(storage: Storage) -> None:
    """Share ``storage``'s rows between processes; a storage of items, whose items live in
    one process, is refused when it is sent to another (TorchRL's behaviour), not here."""
    if not storage.holds_items:
        share_ring(storage)


def _share_transform(transform: Any) -> None:
    """TorchRL's rule for a transform of a shared buffer: its ``share_memory_()`` shares the
    state it keeps across writes; one that needs shared state and lacks it is refused."""
    if isinstance(transform, Inverted):
        transform = transform.transform
    parts = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and parts is not None:
        for t in parts:
            _share_transform(t)
        return
    share_memory = getattr(transform, "share_memory_", None)
    if callable(share_memory):
        share_memory()
        return
    if getattr(transform, "requires_shared_write_state", False):
        raise RuntimeError(
            f"{type(transform).__name__} keeps replay-buffer write state but does not implement "
            "share_memory_(), so it cannot be shared with the buffer's other processes; write "
            "from one process, or give the transform a share_memory_()"
        )


def _lead(value: Any) -> list[int] | None:
    """The batch shape of a collection, the leading dim of a tensor (``None`` for other
    data): what the write-side transforms must keep of an in-place write."""
    if data_types.is_collection(value):
        return list(value.batch_size)
    if isinstance(value, torch.Tensor):
        return list(value.shape[:1])
    return None


def _no_rows(data: Any) -> bool:
    """Whether write-side transforms left nothing to write (``None`` or zero rows)."""
    if data is None:
        return True
    lead = _lead(data)
    return lead is not None and len(lead) > 0 and lead[0] == 0


def _check_dim_extend(owner: str, dim_extend: Any, ndim: int) -> int:
    """TorchRL's ``dim_extend`` for a storage of ``ndim`` dims: ``ndim - 1`` by default."""
    if dim_extend is None:
        return ndim - 1
    if ndim == 1:
        check_unsupported(owner, {"dim_extend": dim_extend})  # 0, or refused naming the way
        return 0
    if isinstance(dim_extend, bool) or not isinstance(dim_extend, int) or dim_extend < 0:
        raise ValueError(f"dim_extend must be a positive value (0 or 1), got {dim_extend!r}")
    if dim_extend >= ndim:
        raise ValueError(
            f"dim_extend={dim_extend} is not a dim of the storage's ndim={ndim} grid: pass 0 "
            "(data [n, width]) or 1 (data [width, n], a collector's [n_envs, T] batch)"
        )
    return dim_extend


def _transpose(data: Any, dim: int) -> Any:
    """``data`` with dims ``dim`` and 0 swapped (TorchRL's ``rb._transpose``)."""
    if isinstance(data, torch.Tensor) or data_types.is_collection(data):
        return data.transpose(dim, 0)
    return pytree.tree_map(
        lambda x: x.transpose(dim, 0) if isinstance(x, torch.Tensor) else x, data
    )


def _raise_clear_write_error(data: Any, err: RuntimeError) -> NoReturn:
    """Raise what a failed write of ``data`` means, when :func:`data_types.explain_write_error`
    knows (from ``err``), else ``err`` itself."""
    clear = data_types.explain_write_error(data, err)
    if clear is None:
        raise err
    raise clear from err


def _join_slots(parts: list[torch.Tensor]) -> torch.Tensor:
    """The slots of the parts of a rate-limited write that stored rows, as one 1-D tensor
    (TorchRL's empty ``[0, 1]`` when no part stored any)."""
    if not parts:
        return _NOTHING_WRITTEN.clone()
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _input_rows(data: Any) -> int | None:
    """How many rows ``data`` (as given to ``extend``) holds along dim 0; ``None`` when it
    cannot be cut into parts of rows (it then goes through the rate limiter as one part)."""
    if data_types.is_collection(data):
        shape = data.batch_size
    elif isinstance(data, torch.Tensor):
        shape = data.shape
    else:
        leaves = pytree.tree_leaves(data)
        if not leaves or not all(isinstance(x, torch.Tensor) and x.ndim for x in leaves):
            return None
        if len({x.shape[0] for x in leaves}) != 1:
            return None
        return int(leaves[0].shape[0])
    return int(shape[0]) if len(shape) else None


def _input_part(data: Any, a: int, b: int) -> Any:
    """Rows ``[a, b)`` of ``data`` (of a type :func:`_input_rows` counts rows of)."""
    if data_types.is_collection(data) or isinstance(data, torch.Tensor):
        return data[a:b]
    return pytree.tree_map(lambda x: x[a:b], data)


class _SentGenerator:
    """A generator on its way to a new process: its state as bytes (torch's own reduction of a
    generator's state tensor fails through ``multiprocessing``'s file descriptors)."""

    def __init__(self, generator: torch.Generator):
        self.device = str(generator.device)
        self.state = generator.get_state().numpy().tobytes()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_received_generator, (self.device, self.state))


def _received_generator(device: str, state: bytes) -> torch.Generator:
    g = torch.Generator(device=device)
    g.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    return g


class Sampled(NamedTuple):
    """One batch of a :class:`ReplayBuffer` (what the prefetch queue holds)."""

    batch: TensorDictBase
    #: ``"index"`` (and ``"weight"``) per row, when asked for
    info: TensorDict | None


class ReplayBuffer(BufferBase[Sampled]):
    """Rows in a storage, drawn by a sampler with the buffer's own generator.

    TorchRL's ``ReplayBuffer`` with the same arguments and meaning, for the data types
    TorchRL's takes over a tensor storage: TensorDicts, tensorclasses, tensors, pytrees of
    tensors and lists of items (see :mod:`mixreplay.data_types`); ``sample`` and ``rb[i]``
    give back the type that was stored.

    Keyword Args:
        storage: a mixreplay storage (:class:`~mixreplay.LazyTensorStorage`,
            :class:`~mixreplay.LazyMemmapStorage`, ...), a TorchRL ``Storage``, or a
            callable that builds one; ``LazyTensorStorage(1000)`` by default.
        sampler: which rows a batch draws (or a callable that builds the sampler);
            uniform with replacement by default.
        batch_size: default batch size of :meth:`sample`.
        generator: a ``torch.Generator`` (or an int seed) that all sampling draws from.
        transform: applied to every sampled batch (a callable or a TorchRL
            ``Transform``, put in eval mode as TorchRL does); a TorchRL ``Transform``'s
            inverse also runs on every write (see :mod:`mixreplay.transforms`). More with
            :meth:`append_transform`. When this buffer is a source of a mixing buffer,
            its transforms run on the rows it contributes.
        transform_factory: builds ``transform`` (TorchRL's spelling; exclusive with it).
        prefetch: batches a background thread keeps ready (needs ``batch_size``);
            see :mod:`mixreplay.prefetch` for what it guarantees.
        pin_memory: return batches in page-locked memory (needs CUDA), for fast
            ``batch.to("cuda", non_blocking=True)``; TorchRL's meaning (each leaf is
            pinned on its own). A GPU learner is better served by ``batch_device``.
        batch_device: where sampled batches land (``None``, the default: on the
            storage's device). With host rows and ``batch_device="cuda"``, the rows
            drawn are gathered into one page-locked packed buffer, moved with one
            ``non_blocking`` copy and split into leaves on the GPU; the transforms run
            there. Refused (``ValueError``) when this machine has no such device.
        collate_fn: applied to every batch as stored (and to ``rb[index]`` but for an int
            index), before the transforms, as TorchRL does with a tensor storage; for a
            storage of items (:class:`~mixreplay.ListStorage`) the storage's own
            ``collate`` by default (TorchRL's).
        shared: share the rows with other processes (TorchRL's ``shared=True``: a
            collector in another process writes, this one samples), with the guarantees
            of the threaded path; see :mod:`mixreplay.storages.shared`.
        rate_limiter: a :class:`~mixreplay.MinSize` or :class:`~mixreplay.SampleToInsertRatio`:
            ``sample`` and ``extend`` wait to keep rows sampled per row written within
            its band (see :mod:`mixreplay.rate_limit`); refused on a read-only storage.
        delayed_init: TorchRL's: build the buffer on its first use rather than now (the
            storage and sampler factories, ``transform_factory``, sharing, attaching the
            sampler). Until then :attr:`initialized` is ``False``, :meth:`stats` reports
            without building, and a pickled copy stays unbuilt, so it is built in the
            process that uses it. Any other use builds it first.
        **torchrl_kwargs: TorchRL's other arguments (``writer``, ``dim_extend``,
            ``compilable``, ...) are accepted with TorchRL's default (a
            ``RoundRobinWriter`` for ``writer``), which is what mixreplay does; any other
            value raises ``TypeError`` naming the argument and the mixreplay way.

    Iterating (``for batch in rb``) yields sampled batches of ``batch_size``: without
    end for a sampler with replacement, one epoch for a
    :class:`~mixreplay.SamplerWithoutReplacement`.

    Thread safety: one thread may :meth:`extend` (a collector) while another
    samples and updates priorities (a learner). Each call holds the storage's
    lock while it touches rows or sampler state, so a sampled row is always a
    whole row from one write, and lengths never go backwards. Sampling itself
    is not meant to be called from two threads at once (they would share one
    generator, and the batches would no longer be reproducible).

    Checkpoints: :meth:`state_dict` / :meth:`load_state_dict` hold the storage's
    state (the filled rows, cursor, fill and write count; a read-only storage is
    referenced by its fingerprint), the sampler's and the generator's;
    :meth:`dumps` / :meth:`loads` write and read them as a checkpoint directory
    (see :mod:`mixreplay.checkpoint`). Not saved: ``batch_size``, transforms and
    prefetching (the constructor's).

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
        storage: Any = None,
        sampler: Sampler | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        transform: Transform | None = None,
        transform_factory: Callable[[], Transform] | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        collate_fn: Callable[[Any], Any] | None = None,
        batch_device: torch.device | str | None = None,
        shared: bool = False,
        rate_limiter: Any = None,
        delayed_init: bool | None = False,
        _mixing_source: bool = False,
        **torchrl_kwargs: Any,
    ):
        # _mixing_source: built by a mixing buffer as one of its sources, which it asks for
        # its share of each batch (a drop_last sampler then needs no batch size of its own)
        if delayed_init is not None and check_bool(delayed_init, "delayed_init"):
            # refused now, not later (dim_extend against the storage, when it is given built)
            extend_dim = torchrl_kwargs.get("dim_extend")
            if extend_dim is not None and (storage is None or isinstance(storage, Storage)):
                ndim = 1 if storage is None else storage.ndim
                _check_dim_extend(type(self).__name__, extend_dim, ndim)
            check_unsupported(
                type(self).__name__, {k: v for k, v in torchrl_kwargs.items() if k != "dim_extend"}
            )
            # everything else waits for the first use (:meth:`_build`), as in TorchRL
            self.__dict__["_deferred"] = dict(
                storage=storage,
                sampler=sampler,
                batch_size=batch_size,
                generator=generator,
                transform=transform,
                transform_factory=transform_factory,
                prefetch=prefetch,
                pin_memory=pin_memory,
                collate_fn=collate_fn,
                batch_device=batch_device,
                shared=shared,
                rate_limiter=rate_limiter,
                _mixing_source=_mixing_source,
                **torchrl_kwargs,
            )
            self.__dict__["_building"] = threading.RLock()
            return
        dim_extend = torchrl_kwargs.pop("dim_extend", None)  # checked against the storage's ndim
        check_unsupported(type(self).__name__, torchrl_kwargs)
        check_bool(shared, "shared")
        if collate_fn is not None:
            check_callable(collate_fn, "collate_fn", hint="pass a function batch -> batch")
        self._collate_fn = collate_fn
        if storage is None:
            storage = LazyTensorStorage(DEFAULT_CAPACITY)
        elif (
            not isinstance(storage, Storage)
            and not looks_like_storage(storage)
            and callable(storage)
        ):
            storage = storage()  # TorchRL also takes a storage factory
        if sampler is not None and not isinstance(sampler, Sampler) and callable(sampler):
            sampler = sampler()
        if (
            batch_size is None
            and isinstance(sampler, Sampler)
            and sampler.drop_last
            and not _mixing_source
        ):
            raise ValueError(  # TorchRL's words first
                "Samplers with drop_last=True must work with a predictable batch-size: "
                f"{type(self).__name__}(sampler={sampler!r}) was "
                "given no batch_size; pass batch_size= (the chunk an epoch's last batch is "
                "short against), or build the sampler with drop_last=False"
            )
        if transform_factory is not None:
            if transform is not None:
                raise TypeError("transform and transform_factory are exclusive: pass one of them")
            if not callable(transform_factory):
                raise TypeError(
                    f"transform_factory must be callable, got {type(transform_factory).__name__}"
                )
            transform = transform_factory()
        if not isinstance(storage, Storage):
            storage = adapt_storage(storage)
        if shared:
            _share_storage(storage)  # before anything holds its lock
        self._storage: Storage = storage
        if sampler is None:
            sampler = RandomSampler()
        if not isinstance(sampler, Sampler):
            raise TypeError(
                f"sampler must be a mixreplay Sampler (RandomSampler, PrioritizedSampler, "
                f"SliceSampler, SamplerWithoutReplacement), got {describe(sampler)}"
            )
        self._dim_extend = _check_dim_extend(type(self).__name__, dim_extend, storage.ndim)
        sampler.attach(storage)  # sizes what it keeps by the storage, checks it fits
        self._sampler: Sampler = sampler
        if storage.holds_items:
            # TorchRL's default for a storage of items: the storage's own collate
            if collate_fn is None:
                self._collate_fn = storage.collate
            if batch_device is not None:
                raise TypeError(
                    f"batch_device= needs a storage of rows; {type(storage).__name__} hands out "
                    "items: move the batch yourself (batch.to(device)) or store the rows in a "
                    "LazyTensorStorage"
                )
        self._init_buffer(batch_size, generator, transform, prefetch, pin_memory, batch_device)
        self._shared = shared
        for t in self._transform:
            _eval(t)
            if shared:
                _share_transform(t)

        if rate_limiter is not None and storage.ndim > 1:
            raise TypeError(
                f"rate_limiter= is not supported with an ndim={storage.ndim} storage: it lets rows "
                "in by parts, and a grid is written in whole steps of its width; extend "
                "data.reshape(-1) (env by env) into an ndim=1 storage to limit its rate"
            )
        if rate_limiter is not None and storage.holds_items:
            raise TypeError(
                f"rate_limiter= counts rows, and {type(storage).__name__} holds items: give the "
                "buffer a storage of rows (LazyTensorStorage, LazyMemmapStorage) to limit its rate"
            )
        self._gate = make_gate(  # rate limiting (mixreplay.rate_limit)
            rate_limiter,
            owner=type(self).__name__,
            capacity=int(storage.max_size) if storage.writable else 0,
            size=len(storage),
            batch_size=self._batch_size,
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_deferred" in state:  # pickled before it was built (delayed_init=True)
            self.__dict__.update(_deferred=state["_deferred"], _building=threading.RLock())
            return
        super().__setstate__(state)

    def __reduce_ex__(self, protocol: Any) -> Any:
        if "_deferred" in self.__dict__:  # not built yet: the copy is built where it is used
            return (_new_buffer, (type(self),), {"_deferred": self.__dict__["_deferred"]})
        return super().__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        if "_deferred" in self.__dict__:  # not built yet: a copy of its arguments
            twin = type(self).__new__(type(self))
            memo[id(self)] = twin
            twin.__setstate__({"_deferred": copy.deepcopy(self.__dict__["_deferred"], memo)})
            return twin
        return super().__deepcopy__(memo)

    def __getstate__(self) -> dict[str, Any]:
        if "_deferred" in self.__dict__:  # not built yet: the copy is built where it is used
            return {"_deferred": self.__dict__["_deferred"]}
        state = super().__getstate__()
        state.pop("_building", None)  # the lock of a delayed build (a copy is built already)
        if get_spawning_popen() is not None:  # to a new process (a shared buffer's collector)
            state["_generator"] = _SentGenerator(self._generator)
            state["_device_generators"] = {}  # a shared buffer's rows are on the host
        else:  # an ordinary copy (pickle, deepcopy) is a private buffer, its storage too
            state["_shared"] = False
        return state

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _draw_snapshot(self):
        return self._generators_snapshot(), self._sampler.draw_state()

    def _restore_draws(self, state) -> None:
        self._restore_generators(state[0])
        self._sampler.restore_draw_state(state[1])

    def _ran_out(self) -> bool:
        return self._sampler.ran_out

    # -- properties ------------------------------------------------------------------------

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def schema(self):
        """Keys, per-row shapes and dtypes of the rows (``None`` before the first write)."""
        return self._storage.schema

    @property
    def write_count(self) -> int:
        """Rows written since creation, overwritten ones included (TorchRL's ``write_count``)."""
        return self._storage.write_count

    def __len__(self) -> int:
        return len(self._storage)

    def _build(self) -> None:
        """Build a buffer made with ``delayed_init=True`` (once; a failure leaves it unbuilt)."""
        with self.__dict__["_building"]:
            deferred = self.__dict__.get("_deferred")
            if deferred is None:
                return  # built meanwhile, by another thread
            before = dict(self.__dict__)
            self.__dict__["_builder"] = threading.get_ident()
            try:
                ReplayBuffer.__init__(self, **deferred)
            except BaseException:  # nothing half-built stays: the next use builds again
                self.__dict__.clear()
                self.__dict__.update(before)
                raise
            del self.__dict__["_builder"]
            del self.__dict__["_deferred"]

    def __getattr__(self, name: str):
        # Only reached for missing attributes: a buffer made with delayed_init=True is built
        # by its first use of one (its storage, sampler, ...), then answers it
        # (the build's own questions about attributes it has not set yet are answered below)
        if (
            "_deferred" in self.__dict__
            and not name.startswith("__")
            and self.__dict__.get("_builder") != threading.get_ident()
        ):
            self._build()
            return getattr(self, name)
        # A TorchRL one gets the mixreplay way.
        if name == "update_tensordict_priority" and self.__dict__.get("_sampler") is not None:
            if self._sampler.prioritized:
                # TorchRL's trainers ask hasattr(rb, "update_tensordict_priority") and, without
                # it, silently never update priorities: refused here, with the fix.
                raise TypeError(
                    f"{type(self).__name__} with a {type(self._sampler).__name__} has no "
                    "update_tensordict_priority (its batches carry no 'index'), so a TorchRL "
                    "trainer hook could never update its priorities; build a "
                    "TensorDictPrioritizedReplayBuffer(alpha=..., beta=...) or "
                    "TensorDictReplayBuffer(sampler=PrioritizedSampler(...)) instead"
                )
        if name in UNSUPPORTED_METHODS:
            raise unsupported_method(type(self).__name__, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def shared(self) -> bool:
        """Whether the buffer is shared between processes (TorchRL's ``shared``; see
        :mod:`mixreplay.storages.shared`)."""
        return self.__dict__.get("_shared", False) or is_shared(self._storage)

    def share(self, shared: bool = True) -> ReplayBuffer:
        """Share the rows with other processes (TorchRL's ``share``); returns the buffer.

        The storage becomes shared in place (see :mod:`mixreplay.storages.shared`): call
        it before another process gets the buffer. Transforms that keep write state
        (TorchRL's ``requires_shared_write_state``) are shared with their
        ``share_memory_()``, as TorchRL does, or refused (``RuntimeError``) without one.
        A shared buffer stays shared: ``share(False)`` on it raises ``TypeError``.
        """
        if check_bool(shared, "shared"):
            for t in self._transform:
                _share_transform(t)
            _share_storage(self._storage)
            self._shared = True
        elif self.shared:
            raise TypeError(
                "share(False): a buffer shared between processes stays shared (other "
                "processes may hold its rows); build a new buffer for a private one"
            )
        return self

    @property
    def initialized(self) -> bool:
        """Whether the buffer is built: ``False`` only for one made with ``delayed_init=True``
        and not used yet (TorchRL's ``initialized``)."""
        return "_deferred" not in self.__dict__

    @property
    def _rng(self) -> torch.Generator:
        # TorchRL's name for the buffer's generator (its own tests set its state through it)
        return self._generator

    @property
    def collate_fn(self) -> Callable[[Any], Any] | None:
        """Applied to every batch as stored, before the transforms (TorchRL's ``collate_fn``)."""
        return self._collate_fn

    @property
    def writer(self) -> RingWriter:
        """TorchRL's ``rb.writer``: a read-only view of how rows are written (ring order,
        the next at ``rb.writer.cursor``); see :class:`~mixreplay.buffers.writer.RingWriter`."""
        return RingWriter(self._storage)

    #: the dim of ``extend``'s data that runs along the storage's dim 0 (see :attr:`dim_extend`)
    _dim_extend: int = 0

    @property
    def dim_extend(self) -> int:
        """TorchRL's extension dimension: the dim of ``extend``'s data written along the
        storage's dim 0. 0 for rows; for an ``ndim=2`` storage TorchRL's default is 1 (a
        collector's ``[n_envs, T]`` batch is written as ``T`` steps of ``n_envs``)."""
        return self._dim_extend

    def stats(self) -> dict:
        """TorchRL's snapshot of counters: size, write_count, prefetch queue, capacity,
        utilization, and whether the buffer is built (it does not build one made with
        ``delayed_init=True``)."""
        deferred = self.__dict__.get("_deferred")
        if deferred is not None:
            storage = deferred["storage"]
            built = isinstance(storage, Storage)  # a factory tells nothing before it is called
            capacity = int(storage.max_size) if built else 0
            if storage is None:  # the default storage, LazyTensorStorage(DEFAULT_CAPACITY)
                capacity = DEFAULT_CAPACITY
            size = len(storage) if built else 0
            return {
                "size": size,
                "write_count": storage.write_count if built else 0,
                "prefetch_queue_size": 0,
                "initialized": False,
                "capacity": capacity,
                "utilization": size / capacity if capacity else 0.0,
            }
        capacity = self._storage.max_size
        out: dict[str, Any] = {
            "size": len(self),
            "write_count": self.write_count,
            "prefetch_queue_size": 0 if self._prefetcher is None else self._prefetcher.ready,
            "initialized": True,
            "capacity": int(capacity),
            "utilization": len(self) / capacity if capacity else 0.0,
        }
        return out

    def read_all_in_order(self, end: int | None = None) -> TensorDictBase:
        """The rows in slot order, ``rb[:end]`` (TorchRL's name); :meth:`write_all` writes
        them back."""
        return self[:end]

    # -- in-place writes -------------------------------------------------------------------

    def __setitem__(self, index: Any, value: Any) -> None:
        """Overwrite stored rows in place (TorchRL's ``rb[index] = value``).

        ``index`` as :meth:`__getitem__` takes it: an int, a slice, a list, a tensor of slots
        or a boolean mask over the rows held; for an ``ndim=2`` storage, ``rb[env, steps]``
        by the dims of the data as extended (``value`` is broadcast to the elements named).
        ``rb["key"] = value`` is :meth:`set_`. The write-side transforms run first, as on
        :meth:`extend`. ``value`` may hold some of the stored keys (the others keep their
        values) or, for TensorDict rows in a ring of this process, keys the rows lack: every
        row then gets them, zero where not written.

        The rows stay where they are: ``len``, the writer's cursor, ``write_count`` and the
        priorities are unchanged; what a sampler derives from the rows (a slice sampler's
        trajectories) follows the new contents. Batches drawn ahead (``prefetch``) are undone
        first, so the next batches are those a buffer without prefetching gives.

        Raises (and nothing changes): ``IndexError`` for a slot that holds no row,
        :class:`~mixreplay.errors.SchemaMismatchError` for a dtype or per-row shape that
        differs from the stored one (or a key that cannot be added),
        :class:`~mixreplay.errors.ReadOnlyError` for read-only (offline) rows.
        """
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(i, str) for i in index)
        ):
            self.set_(index, value)
            return
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        self._check_writable("rb[index] = ...")
        slots = self._slots_of(index, self._dim_extend)
        value = self._write_value(value, slots.shape)
        self._rewrite(slots.reshape(-1), value)

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write rows back in slot order (TorchRL's): ``rb[:end] = data``; without ``end``,
        every row when the storage is full, else the first ``len(data)``."""
        if end is None:
            if len(self) == self._storage.max_size:
                self[:] = data
                return
            end = int(data.shape[0]) if data_types.is_collection(data) else len(data)
        self[:end] = data

    def set_at_(self, key: Any, value: Any, index: Any) -> ReplayBuffer:
        """Write ``value`` into the stored ``key`` of the rows at ``index``, in place
        (TorchRL's; ``index`` into the storage's rows, or its ``[steps, width]`` grid).

        No transform runs (as TorchRL's); ``key`` must be stored (``KeyError`` otherwise:
        ``rb[index] = td`` adds keys), ``value`` of its dtype, ``[*index, *shape]`` or
        broadcastable to it. Returns the buffer.
        """
        self._check_writable("set_at_")
        slots = self._slots_of(index, 0)
        self._rewrite(slots.reshape(-1), self._column_rows(key, value, slots.shape, "set_at_"))
        return self

    def set_(self, key: Any, value: Any) -> ReplayBuffer:
        """Write ``value`` into the stored ``key`` of every row held, in place (TorchRL's);
        see :meth:`set_at_`. Returns the buffer."""
        self._check_writable("set_")
        slots = self._slots_of(slice(None), 0)
        self._rewrite(slots.reshape(-1), self._column_rows(key, value, slots.shape, "set_"))
        return self

    def update_(
        self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Any = None
    ) -> ReplayBuffer:
        """Write the entries of ``input_dict_or_td`` (one value per row held) into the
        stored keys of every row, in place (TorchRL's); ``keys_to_update`` writes only those.
        Every key must be stored (``KeyError`` otherwise). Values are always copied, so
        ``clone`` changes nothing. Returns the buffer."""
        self._check_writable("update_")
        slots = self._slots_of(slice(None), 0)
        data = input_dict_or_td
        if not isinstance(data, TensorDictBase):
            try:
                data = TensorDict(dict(data), batch_size=slots.shape)
            except RuntimeError:
                shapes = {k: list(getattr(v, "shape", ())) for k, v in dict(data).items()}
                raise ValueError(
                    f"update_ takes one value per row held ({list(slots.shape)} rows), got "
                    f"values of shapes {shapes}; give each key one value per row"
                ) from None
        if keys_to_update is not None:
            data = data.select(*keys_to_update)
        self._check_stored_keys(list(data.keys(True, True)), "update_")
        self._rewrite(slots.reshape(-1), self._broadcast(data, slots.shape))
        return self

    def _check_writable(self, what: str) -> None:
        storage = self._storage
        if not storage.writable:
            raise ReadOnlyError(
                f"{what}: {type(self).__name__} holds read-only (offline) rows "
                f"({type(storage).__name__}), which are never written in place; copy them into "
                "a buffer over a LazyTensorStorage first, or write online rows to the mixing "
                "buffer's online_buffer"
            )

    def _slots_of(self, index: Any, swap: int) -> torch.Tensor:
        """The slots of the rows at ``index``, shaped as the rows named (``[]`` for one): the
        rows held, or an ``ndim=2`` grid's elements by the dims of the data as extended (dim
        ``swap`` first: ``dim_extend`` for ``rb[index]``, 0 for the storage's own dims)."""
        storage = self._storage
        n = len(storage)
        if storage.ndim == 1:
            if isinstance(index, tuple):
                raise IndexError(
                    f"a storage of rows takes one index (an int, slice or tensor of slots), got "
                    f"the tuple {index!r}"
                )
            if n == 0:
                raise IndexError(
                    f"{type(self).__name__} holds no rows yet: an in-place write replaces rows "
                    "that are held; write new rows with extend()"
                )
            try:
                slots = as_index(index, n, torch.device("cpu"))
            except IndexError as err:
                raise IndexError(
                    f"{err}; an in-place write replaces rows that are held: write new rows "
                    "with extend()"
                ) from None
            one = isinstance(index, int) or (isinstance(index, torch.Tensor) and index.ndim == 0)
            return slots[0] if one else slots
        grid_slots = storage.grid_slots  # type: ignore[attr-defined]
        if isinstance(index, tuple):  # by the dims of the data as extended
            full = grid_slots((slice(None), slice(None)))
            view = full.transpose(swap, 0) if swap else full
            return view[grid_key(index)].cpu()
        slots = grid_slots((slice(None),) * swap + (index,))
        if swap and slots.dim() > swap:
            slots = slots.transpose(swap, 0)
        return slots.cpu()

    def _write_value(self, value: Any, shape: torch.Size) -> Any:
        """``value`` for the rows of ``shape`` as the storage writes them: after the write-side
        transforms, in the stored type, broadcast and flattened to ``[k]`` rows."""
        storage = self._storage
        one = len(shape) == 0
        if one and data_types.is_collection(value) and tuple(value.batch_size) == (1,):
            shape = torch.Size([1])  # one slot, given as one row of a batch
        elif one and (
            data_types.is_collection(value)
            or isinstance(value, torch.Tensor)
            or not storage.holds_items
        ):
            value = data_types.one_row(value)
            shape = torch.Size([1])
        elif one:
            value, shape = [value], torch.Size([1])
        if self._transform.writes:
            given = _lead(value)
            value = self._transform.inv(value)
            if _no_rows(value):
                raise ValueError(
                    "the write-side transforms left nothing to write in place; an in-place write "
                    "replaces rows, so they must return one row per slot"
                )
            if given is not None and _lead(value) != given:
                raise ValueError(
                    f"the write-side transforms turned the {given} rows written into "
                    f"{_lead(value)}; an in-place write replaces rows one for one, so they must "
                    "keep the number of rows (write through rb.storage, or extend instead)"
                )
        if storage.holds_items:
            return value
        if data_types.is_collection(value):
            value = self._stored_part(value)
        value = self._broadcast(value, shape)
        rows, _ = data_types.to_rows(value, storage.codec, False)
        return rows

    def _broadcast(self, value: Any, shape: torch.Size) -> Any:
        """``value`` (a TensorDict, tensorclass, tensor or pytree of tensors whose leading
        dims broadcast to ``shape``) as ``[shape.numel()]`` rows."""
        k = shape.numel()
        if data_types.is_collection(value):
            if value.batch_size != shape:
                try:
                    value = value.expand(shape)
                except RuntimeError:
                    raise ValueError(
                        f"the value written has batch_size={list(value.batch_size)}, which does "
                        f"not broadcast to the {list(shape)} rows named by the index; give one "
                        "row per slot"
                    ) from None
            return value.reshape(k)

        def flat(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            lead = len(shape)
            if tuple(x.shape[:lead]) != tuple(shape):
                raise ValueError(
                    f"the value written has leading shape {list(x.shape[:lead])}, not the "
                    f"{list(shape)} rows named by the index; give one row per slot"
                )
            return x.reshape(k, *x.shape[lead:])

        return pytree.tree_map(flat, value)

    def _stored_part(self, data: Any) -> Any:
        """What of a collection written in place is stored (TensorDictReplayBuffer leaves
        out its bookkeeping entries)."""
        return data

    def _check_stored_keys(self, keys: list[Any], what: str) -> None:
        storage = self._storage
        schema = storage.schema
        codec = storage.codec
        if storage.holds_items or codec is not None:
            held_kind = "items" if codec is None else codec.describe()
            raise TypeError(
                f"{what} writes keys of TensorDict rows, and {type(storage).__name__} holds "
                f"{held_kind}: write whole rows with rb[index] = ..."
            )
        held = set() if schema is None else set(schema.keys())
        missing = [k for k in keys if normalize_key(k) not in held]
        if missing:
            known = "" if schema is None else ", ".join(format_key(f.key) for f in schema.fields)
            raise KeyError(
                f"key {format_key(normalize_key(missing[0]))} not found in the stored rows with "
                f"keys [{known}]; {what} writes stored keys only: rb[index] = td adds keys"
            )

    def _column_rows(self, key: Any, value: Any, shape: torch.Size, what: str) -> TensorDict:
        """``value`` for the stored ``key`` of the rows of ``shape``, as ``[k]`` rows."""
        self._check_stored_keys([key], what)
        schema = self._storage.schema
        assert schema is not None
        field = schema[normalize_key(key)]
        value = torch.as_tensor(value, device=self._storage.device)
        want = (*shape, *field.shape)
        if tuple(value.shape) != want:
            try:
                value = value.expand(want)
            except RuntimeError:
                raise SchemaMismatchError(
                    f"{what}: the value for {format_key(field.key)} has shape "
                    f"{list(value.shape)}, which does not broadcast to {list(want)} (the rows "
                    f"named, {list(shape)}, of {field.describe()}); write a value of that shape"
                ) from None
        k = shape.numel()
        return TensorDict({field.key: value.reshape(k, *field.shape)}, batch_size=[k])

    def _rewrite(self, slots: torch.Tensor, rows: Any) -> None:
        """Replace the rows in ``slots`` with ``rows`` in place; batches drawn ahead (this
        buffer's and its readers') are undone first, and nothing is drawn ahead meanwhile
        (the lock order of :mod:`mixreplay.buffers.base`: the pause, then the storage lock)."""
        storage = self._storage
        with self._paused(), storage.lock:
            storage.rewrite(slots, rows)

    def keep_keys(self) -> None:
        """Refuse in-place writes that add keys from now on: a reader (a mixing buffer)
        gathers these rows by their packed layout."""
        self._storage.keep_keys()

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

    def extend(self, data: Any, *, timeout: float | None = None) -> torch.Tensor:
        """Write the rows of ``data``; return the slots written.

        ``data`` is a TensorDict ``[n]`` (or ``[n, ...]``), a tensorclass, a tensor, a
        pytree of tensors, or a list of items (see :mod:`mixreplay.data_types`); the
        first write fixes the type every later one must have. Write-side transforms run
        first (see :mod:`mixreplay.transforms`); when they keep nothing, nothing is
        written and the slots are empty.

        With a rate limiter the rows go in as its band allows, waiting up to ``timeout``
        seconds (``None``: until allowed, or until :meth:`close`) for samples to make room;
        the write-side transforms then run on each part of ``data`` that goes in (see
        :mod:`mixreplay.rate_limit`).
        """
        return self._storage.grid_index(self.extend_checked(data, None, timeout=timeout))

    def extend_checked(
        self,
        data: Any,
        check: Callable[[Any], None] | None,
        *,
        timeout: float | None = None,
        written: Callable[[torch.Tensor], None] | None = None,
        transformed: bool = False,
    ) -> torch.Tensor:
        """:meth:`extend`, calling ``check(rows)`` on the rows as they will be stored (after
        the write-side transforms) before anything is written; what ``check`` raises is
        raised, and nothing is written. A mixing buffer checks that its sources' rows mix
        this way, on what its online side will really hold. ``written(index)`` is called
        under the storage's lock once the rows are in (a mixing buffer's rate limiter
        counts them there). ``transformed``: ``data`` already went through
        :meth:`write_side` (a mixing buffer's rate-limited write, part by part)."""
        if self._gate is not None and not self._storage.holds_items:
            return self._extend_limited(data, check, timeout)
        if self._transform.writes and not transformed:  # ``None`` as given is refused below
            data = self.write_side(data)
            if data is None:
                return _NOTHING_WRITTEN.clone()
        if check is not None:
            check(data)
        return self._write(data, timeout, written)

    def write_side(self, data: Any) -> Any:
        """``data`` after this buffer's write-side transforms (``None``: nothing to write)."""
        if self._transform.writes:
            data = self._transform.inv(data)
            if _no_rows(data):
                return None
        return data

    def add(self, data: Any, *, timeout: float | None = None) -> Any:
        """Write one row (a TensorDict ``[]``, a tensor, a pytree, a tensorclass); return its slot.

        A TensorDict (or tensorclass) with a batch dimension is written as one row holding
        that batch, with a ``UserWarning`` (TorchRL's): ``extend`` writes one row each.
        """
        _warn_batched_add(data)
        if self._transform.writes:
            # as TorchRL: a tensor collection goes through the write sides as a batch of one
            collection = data_types.is_collection(data)
            data = self._transform.inv(data_types.one_row(data) if collection else data)
            if _no_rows(data):
                return _NOTHING_WRITTEN.clone()
            data = data if collection else self._one(data)
        else:
            data = self._one(data)
        if self._gate is not None and not self._storage.holds_items:
            # one row in: what the write sides made of it goes in whole
            return self._added(
                self._extend_limited(data, None, timeout, transformed=True, whole=True)
            )
        return self._added(self._write(data, timeout, step=True))

    def _added(self, slots: torch.Tensor) -> Any:
        """What ``add`` returns: the row's slot; for an ndim=2 storage TorchRL's ``[width, 2]``
        index of the step written."""
        return self._storage.grid_index(slots) if self._storage.ndim > 1 else int(slots[0])

    def _one(self, data: Any) -> Any:
        """One row (or item) as a batch of one, as the storage writes it."""
        return [data] if self._storage.holds_items else data_types.one_row(data)

    def _write(
        self,
        data: Any,
        timeout: float | None = None,
        written: Callable[[torch.Tensor], None] | None = None,
        *,
        step: bool = False,
    ) -> torch.Tensor:
        storage = self._storage
        if storage.ndim > 1:  # TorchRL's grid: [n, width] steps (dim_extend moved to dim 0)
            return self._write_steps(data, step)
        if storage.holds_items:  # items are stored as they are: no rows, no codec
            self._before_write()
            with storage.lock:
                index = storage.extend(data)
                self._sampler.on_extend(index, storage)
            self._after_write()
            return index
        codec = storage.codec
        # the fast path (TensorDict rows [n] into TensorDict rows) costs two cheap checks;
        # everything else, TensorDict subclasses and lazy stacks included, is converted
        convert = codec is not None or type(data) is not TensorDict or len(data.batch_size) != 1
        try:
            rows = data
            if convert:  # not the fast path: data of another type than TensorDict rows [n]
                rows, codec = data_types.to_rows(data, codec, storage.schema is None)
            self._before_write()
            # One lock around the write and the sampler's bookkeeping: a concurrent sample or
            # priority update never sees rows its sampler has not been told about.
            with storage.lock:
                index = storage.extend(rows)
                if convert:
                    storage.codec = codec
                self._sampler.on_extend(index, storage)
                if written is not None:  # a mixing buffer's rate limiter counts the rows
                    written(index)
        except RuntimeError as err:
            _raise_clear_write_error(data, err)
        self._after_write()
        return index

    def _write_steps(self, data: Any, step: bool) -> torch.Tensor:
        """:meth:`_write` into an ndim=2 storage: ``data`` with ``dim_extend`` moved to dim 0
        (``add`` writes one step as it is, as TorchRL's), written as ``n * width`` rows."""
        storage = self._storage
        if not step and self._dim_extend:
            data = _transpose(data, self._dim_extend)
        _, width = leading_dims(data, 2)
        try:
            rows, codec = data_types.to_rows(grid_rows(data), storage.codec, storage.schema is None)
            self._before_write()
            with storage.lock:
                index = storage.extend_steps(rows, width)  # type: ignore[attr-defined]
                storage.codec = codec
                self._sampler.on_extend(index, storage)
        except RuntimeError as err:
            _raise_clear_write_error(data, err)
        self._after_write()
        return index

    def _extend_limited(
        self,
        data: Any,
        check: Callable[[Any], None] | None,
        timeout: float | None,
        *,
        transformed: bool = False,
        whole: bool = False,
        stored: Callable[[Any], Any] | None = None,
        after: Callable[[int, int, Any, torch.Tensor], None] | None = None,
    ) -> torch.Tensor:
        """:meth:`extend_checked` with a rate limiter: input rows ``[a, b)`` at a time, as its
        band allows (see :func:`~mixreplay.rate_limit.write_limited`).

        Each part of the input goes through the write-side transforms (unless
        ``transformed``), then ``stored(part)`` (what to write of it; default: all of it),
        ``check``, and is written whole; ``after(a, b, part, index)`` runs once input rows
        ``[a, b)`` are in. ``whole``: the input is one part (an ``add``).
        """
        timeout = check_timeout(timeout)
        storage, gate = self._storage, self._gate
        assert gate is not None
        transform = self.write_side if self._transform.writes and not transformed else None
        data = data_types.as_batch(data)
        counted = None if whole else _input_rows(data)
        one = counted is None  # the input goes in as one part
        n = 1 if counted is None else counted

        def prepare(a: int, b: int) -> tuple[Any, int]:
            part = data if one or b - a == n else _input_part(data, a, b)
            if transform is not None:
                part = transform(part)
                if part is None:
                    return None, 0
            rows = part if stored is None else stored(part)
            if check is not None:
                check(rows)
            codec = storage.codec
            convert = codec is not None or type(rows) is not TensorDict or rows.batch_dims != 1
            if convert:
                try:
                    rows, codec = data_types.to_rows(rows, codec, storage.schema is None)
                except RuntimeError as err:
                    _raise_clear_write_error(part, err)
            return (a, b, part, rows, convert, codec), rows.batch_size[0]

        def write(prepared: Any, commit: Callable[..., None]) -> torch.Tensor:
            a, b, part, rows, convert, codec = prepared
            self._before_write()
            try:
                with storage.lock:
                    index = storage.extend(rows)
                    if convert:
                        storage.codec = codec
                    self._sampler.on_extend(index, storage)
                    commit(len(storage))  # under the lock: a checkpoint holds rows and count
            except RuntimeError as err:
                _raise_clear_write_error(part, err)
            self._after_write()
            if after is not None:
                after(a, b, part, index)
            return index

        return write_limited(gate, n, timeout, prepare, write, _join_slots)

    # -- reading ---------------------------------------------------------------------------

    def _draw_exact(
        self, n: int, generator: torch.Generator, index: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Exactly ``n`` row indices (caller holds the storage lock).

        A sampler that ends an epoch with a short chunk
        (:class:`~mixreplay.SamplerWithoutReplacement`) is asked again for the rest;
        for a sampler that draws distinct rows, the rows of the next epoch that the
        short chunk already holds are passed over (and asked for again), so the ``n``
        rows stay distinct (``n`` never exceeds the rows held: the mixing buffer checks).
        """
        storage, sampler = self._storage, self._sampler
        if index is None:
            index = sampler.sample(storage, n, generator)
        while index.numel() < n:
            more = sampler.sample(storage, n - index.numel(), generator)
            if not sampler.replacement:
                more = more[~torch.isin(more, index)]
            index = torch.cat([index, more])
        return index

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Exactly ``n`` row indices, drawn by this buffer's sampler with ``generator``."""
        with self._storage.lock:
            if len(self._storage) == 0:
                raise EmptyBufferError(EMPTY_MESSAGE)
            return self._draw_exact(n, generator)

    def draw_rows(self, n: int, generator: torch.Generator) -> tuple[TensorDictBase, torch.Tensor]:
        """``n`` rows drawn with ``generator``, after this buffer's transforms, and their slots.

        What a mixing buffer asks of a source: the draw and the gather hold this
        buffer's lock; the transforms run after it is released.
        """
        with self._storage.lock:
            index = self._draw_exact(n, generator)
            rows = self._storage.gather_unlocked(index)
        if self._storage.holds_items:  # items: a batch once collated (TensorDicts stacked)
            rows = self._collate_fn(rows)  # type: ignore[misc]
        if self._transform:
            rows = self._transform(rows)
        return rows, index

    def packed_drawer(self) -> Drawer:
        """What a mixing buffer draws this buffer's rows with, straight into its packed batch.

        A :data:`Drawer`: under the storage's lock, the sampler draws the slots
        (:meth:`~mixreplay.Sampler.sample_into`, into the caller's index buffer where it can)
        and the storage copies their packed words into ``out``
        (:meth:`~mixreplay.storages.base.PackedStorage.gather_into`); no transform runs. A
        sampler that ends an epoch with a short chunk is asked again for the rest.
        """
        storage, sampler = self._storage, self._sampler
        lock, sample, sample_into = storage.lock, sampler.sample, sampler.sample_into
        gather_into = storage.gather_into
        # the last generator seen drawing into a host index buffer (held, so that its
        # identity cannot pass to another): the device is checked once per generator
        host: list[torch.Generator | None] = [None]

        def draw(
            n: int, generator: torch.Generator, out: torch.Tensor, index: torch.Tensor | None = None
        ) -> torch.Tensor:
            if index is not None and generator is not host[0]:
                if generator.device != index.device:
                    index = None
                else:
                    host[0] = generator
            with lock:
                if index is None:
                    slots = sample(storage, n, generator)
                else:
                    slots = sample_into(storage, n, generator, index)
                if slots.numel() != n:  # an epoch ended with a short chunk
                    slots = self._draw_exact(n, generator, slots)
                gather_into(slots, out)
            return slots

        return draw

    def _sample_now(self, n: int, info: bool) -> Sampled:
        """Draw, gather and transform one batch."""
        storage = self._storage
        with storage.lock:
            if len(storage) == 0:
                raise EmptyBufferError(EMPTY_MESSAGE)
            index = self._sampler.sample(storage, n, self._generator_for(storage.device))
            dest = self._batch_device
            if dest is None or dest == storage.device:
                batch = storage.gather_unlocked(index)
            else:  # packed rows: one staging buffer and one copy to dest
                batch = storage.gather_to(index, dest)
            weight = self._sampler.weight(index, storage) if info else None
            extra = self._sampler.info(index, storage) if info else None
            codec = storage.codec
            if info and storage.ndim > 1:
                index = storage.grid_index(index)  # TorchRL's [n, 2] index of a grid
        if codec is not None:
            batch = codec.decode(batch)
        if self._collate_fn is not None:
            batch = self._collate_fn(batch)
        batch = self._finish(batch)
        if not info:
            return Sampled(batch, None)
        leaves = {"index": index}
        if weight is not None:  # "priority_weight": TorchRL's name for the same weights
            # two tensors: normalizing one in place must leave the other as drawn
            leaves.update(weight=weight, priority_weight=weight.clone())
        out = new_tensordict(leaves, torch.Size([index.shape[0]]))
        for key, value in (extra or {}).items():  # a sampler's own entries (TorchRL's slices)
            out.set(key, value)
        return Sampled(batch, out)

    def sample(
        self,
        batch_size: int | None = None,
        *,
        return_info: bool = False,
        timeout: float | None = None,
    ):
        """Draw a ``[batch_size]`` batch (new memory; writing to it changes nothing stored).

        With ``return_info=True`` returns ``(batch, info)``, ``info`` holding
        ``"index"`` (slots sampled), ``"weight"`` (and TorchRL's name for it,
        ``"priority_weight"``) when the sampler has weights, and a sampler's own
        entries (TorchRL's slice entries, see :class:`~mixreplay.SliceSampler`).
        With ``prefetch``, the batch comes from the prefetch thread (see :mod:`mixreplay.prefetch`).
        With a rate limiter, waits up to ``timeout`` seconds (``None``: until allowed, or
        until :meth:`close`) for its band to let the batch through (see :mod:`mixreplay.rate_limit`).
        """
        if self._gate is not None:  # rate limiter: wait for its band, then draw
            drawn, _ = self._limited(batch_size, timeout, self._draw, return_info)
        else:
            drawn, _ = self._draw(batch_size, return_info)
        return (drawn.batch, drawn.info) if return_info else drawn.batch

    def __iter__(self):
        """Sampled batches of ``batch_size``: endless, or one epoch for a sampler that has them."""
        if self._batch_size is None:
            raise MissingBatchSizeError(  # TorchRL's words first
                "Cannot iterate over the replay buffer. Batch_size was not specified: "
                "iterating yields sampled batches, so set batch_size= at construction (or call "
                "sample(n) in a loop)"
            )
        while True:
            if self._gate is not None:  # rate limiter: wait for its band, then draw
                drawn, ran_out = self._limited(None, None, self._draw, False)
            else:
                drawn, ran_out = self._draw(None, False)
            yield drawn.batch
            if ran_out:
                return

    def __getitem__(self, index: Any) -> Any:
        """Rows by slot, as ``sample`` gives them (TorchRL's ``rb[index]``).

        ``rb[3]``, ``rb[:10]``, ``rb[tensor]``: rows of the stored type, through
        ``collate_fn`` (all but an int index) and the transforms; ``rb["key"]`` is
        ``rb[:]["key"]``.
        """
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and isinstance(index[0], str)
        ):
            return self[:][index]
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        if self._storage.ndim > 1:
            if isinstance(index, tuple):  # TorchRL's: the grid as extend took it, then indexed
                return self[:][index]
            # as TorchRL: ``index`` runs along the data's dim_extend (the storage's dim 0)
            key = (slice(None),) * self._dim_extend + (index,)
            data = self._storage.get_grid(key, self._dim_extend)  # type: ignore[attr-defined]
        else:
            data = self._storage[index]
        if self._collate_fn is not None and not isinstance(index, int):
            data = self._collate_fn(data)
        if self._transform:
            data = self._transform(data)
        return data

    def append_transform(  # type: ignore[override]  # returns the buffer, as TorchRL's
        self, transform: Transform, *, invert: bool = False
    ) -> ReplayBuffer:
        """Apply ``transform`` to sampled batches, after the transforms already attached.

        A TorchRL ``Transform``'s inverse also runs on writes (``extend``/``add``; see
        :mod:`mixreplay.transforms`). With ``invert=True`` it runs the other way round:
        its forward pass on writes, its inverse (none for a plain function) on reads.
        Returns the buffer, as TorchRL's does.
        """
        _eval(transform)
        if self.shared:
            _share_transform(transform)
        super().append_transform(Inverted(transform) if check_bool(invert, "invert") else transform)
        return self

    def insert_transform(  # type: ignore[override]  # returns the buffer, as TorchRL's
        self, index: int, transform: Transform, *, invert: bool = False
    ) -> ReplayBuffer:
        """Insert ``transform`` at position ``index`` (see :meth:`append_transform`)."""
        _eval(transform)
        if self.shared:
            _share_transform(transform)
        super().insert_transform(
            index, Inverted(transform) if check_bool(invert, "invert") else transform
        )
        return self

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of rows ``index`` (needs a prioritized sampler)."""
        self._before_write()
        with self._storage.lock:
            self._sampler.update_priority(torch.as_tensor(index), torch.as_tensor(priority))
        self._after_write()

    def empty(self, empty_write_count: bool = True) -> None:
        """Forget every row; ``write_count`` restarts from 0 unless ``empty_write_count=False``."""
        with self._paused():  # batches of rows that are gone: undone, not just dropped
            self._storage.empty()
            if empty_write_count:
                self._storage.reset_write_count()
            if self._gate is not None:  # rate limiter: counting starts again
                self._gate.reset(0)

    # -- state and checkpoints (mixreplay.checkpoint) ---------------------------------------

    def _locks(self) -> AbstractContextManager[Any]:
        return self._storage.lock

    def _draw_stamp(self) -> int:
        return self._transform.version + self._sampler.settings_version

    def add_reader(self, reader: BufferBase[Any]) -> None:
        """Register ``reader``, a buffer that draws from this one ahead of time (a mixing buffer
        with ``prefetch``): whatever reads or replaces this buffer's whole state
        (``state_dict``, ``load_state_dict``, ``empty``, ``state_lock``) first pauses the
        reader's prefetching too, so that its queued batches hold no rows and no generator
        state from before (held weakly)."""
        self.__dict__.setdefault("_readers", []).append(weakref.ref(reader))

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        readers = [b for r in self.__dict__.get("_readers", ()) if (b := r()) is not None]
        with contextlib.ExitStack() as stack:
            for reader in readers:  # the readers' queues first: they draw under our lock
                stack.enter_context(reader._own_paused())
            stack.enter_context(self._own_paused())
            yield

    def _lock_held(self) -> str | None:
        return "the lock of this buffer's storage" if self._storage.lock_held() else None

    def _online_rows(self) -> int:
        return len(self._storage)

    def state_dict(self, *, copy: bool = True, by_reference: bool = False) -> dict[str, Any]:
        """The buffer's state: storage, sampler and generator, as tensors and JSON values.

        Keyword Args:
            copy: copy the rows (a snapshot, the default); ``False`` returns views of
                the storage, valid while :meth:`state_lock` is held.
            by_reference: save what identifies the rows (count, schema, fingerprint)
                instead of the rows, as is always done for a read-only storage; a
                mixing buffer saves its offline side this way.

        While prefetching, the batches not yet returned are discarded first and the
        generator rewound to before them (see :mod:`mixreplay.prefetch`): the state holds
        no queued batches, and its ``"_prefetch_state"`` (TorchRL's key) only the prefetch
        depth of this buffer; it loads into a buffer of any depth.

        The batch size is saved under TorchRL's key, ``"_batch_size"``, for programs that
        build a buffer from it, and :meth:`load_state_dict` restores it, as TorchRL does (a
        state saved without one keeps the loading buffer's); so is the generator, under
        ``"_rng"`` (mixreplay 0.2 saved it as ``"generator"``, still read). A state written
        by TorchRL is not read: the rows are under ``"storage"``, the sampler's under
        ``"sampler"``.
        """
        storage = self._storage
        with self._paused(), storage.lock:
            by_reference = by_reference or not storage.writable
            return {
                "kind": type(self).__name__,
                "storage": storage.reference() if by_reference else storage.state_dict(copy=copy),
                "sampler": sampler_state(self._sampler),
                **self._generators_state(),
                **self._rate_limiter_state(),
                "_batch_size": self._batch_size,
                **self._prefetch_state_entry(),
            }

    def _settings(self) -> dict[str, str]:
        return {"batch_size": repr(self._batch_size), **super()._settings()}

    def _plan_batch_size(self, state: dict[str, Any]) -> Plan:
        """Check the state's ``"_batch_size"``; return what restores it. A state saved
        without one (``None``, or no entry) keeps this buffer's."""
        batch_size = state.get("_batch_size")
        if batch_size is None:
            batch_size = self._batch_size
        else:
            try:
                batch_size = check_batch_size(batch_size, name="_batch_size")
            except (TypeError, ValueError) as err:
                raise CheckpointError(f"{err}; the checkpoint is corrupt") from None
            unit = self._sampler.unit
            if batch_size > _MOST_BATCH_ROWS or batch_size % unit:
                raise CheckpointError(
                    f"_batch_size {batch_size} is not a batch this buffer's sampler "
                    f"({self._sampler!r}) can draw: at most {_MOST_BATCH_ROWS:,} rows, a multiple "
                    f"of {unit}; the checkpoint is corrupt, or was saved by a buffer with another "
                    "sampler"
                )

        def apply() -> None:
            self._batch_size = batch_size

        return apply

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        """Check ``state`` whole against this buffer, change nothing; return what applies it.

        Rows saved by reference (offline data) are not restored but compared: this
        buffer's rows must be the ones saved (fingerprint, row count, schema), unless
        ``allow_offline_mismatch=True``, which logs the difference and then restores
        the sampler state only if the row count matches.
        """
        name = type(self).__name__
        state = self._check_kind(state)
        self._check_prefetch_state(state)
        plans: list[Plan] = [self._plan_batch_size(state)]
        storage = self._storage
        saved = state.get("storage")
        restore_sampler = True
        if isinstance(saved, dict) and saved.get("reference"):
            problems = storage.differences(saved)
            if problems:
                msg = (
                    "the rows are not the ones this state was saved with (it references them, "
                    f"it does not hold them): {'; '.join(problems)}"
                )
                if not allow_offline_mismatch:
                    raise CheckpointError(
                        f"{msg}. Pass the dataset the run used, or load with "
                        "allow_offline_mismatch=True to resume with this one anyway"
                    )
                log.warning("%s; resuming anyway (allow_offline_mismatch=True)", msg)
                restore_sampler = saved.get("rows") == len(storage)
        elif not storage.writable:
            raise CheckpointError(
                f"the state holds rows, but this {name}'s storage is read-only "
                f"({type(storage).__name__}); load it into a buffer over a writable storage"
            )
        else:
            try:
                plans.append(storage.plan_load_state_dict(saved))
            except CheckpointError as err:
                raise CheckpointError(f"storage: {err}") from None
        if restore_sampler:
            plans.append(plan_sampler(self._sampler, state.get("sampler"), "sampler"))
        plans.append(self._plan_generators(state))
        plans.append(self._plan_rate_limiter(state))  # after the rows: it reads their count

        def apply() -> None:
            with self._storage.lock:
                for plan in plans:
                    plan()

        return apply

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"batch_size={self._batch_size})"
        )
