"""Rings shared between processes (TorchRL's ``shared=True``): one ring, written and read anywhere.

A collector in another process (TorchRL's ``AsyncCollector(replay_buffer=rb)``, a
``multiprocessing.Process`` given the buffer) writes rows that the learner samples.
:func:`share_ring` turns a ring (:class:`~mixreplay.LazyTensorStorage` on the CPU,
:class:`~mixreplay.LazyMemmapStorage`) into its shared variant, in place:

- its rows live in shared memory (a memory-mapped file for ``LazyMemmapStorage``);
- its counters (cursor, fill, write count, generation) live in a shared ``int64``
  tensor beside them, so ``len(rb)``, ``rb.write_count`` and the samplers see every
  process's writes;
- its lock is one re-entrant lock of the operating system, shared by every process.

Every read and write of rows already holds the storage's lock (see
:mod:`mixreplay.storages.base`); with that lock shared, the guarantees of the threaded
path hold across processes: a row sampled is a whole row of one write (never torn),
each written row lands once, and lengths never go backwards. Samplers live in each
process and follow the shared counters (a prioritized sampler gives rows written
elsewhere the priority of new rows when it next draws).

The buffer travels to another process by pickling with ``multiprocessing`` (``spawn``
or ``forkserver``: the rows and counters are mapped, not copied) or by ``fork``. Rows
are allocated on the first write, which fixes their layout; that write must happen in
the process that built the ring, before another process gets it (TorchRL's sac-async
extends once and empties before starting its collector). A write elsewhere into a ring
that has no rows yet is refused, never silently kept in that process alone.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from multiprocessing.context import get_spawning_popen
from typing import Any

import numpy as np
import torch

from mixreplay.errors import DataStructureError
from mixreplay.layout import RowLayout
from mixreplay.storages.ring import LazyMemmapStorage, TensorStorage

__all__ = ["SharedRing", "is_shared", "share_ring"]

log = logging.getLogger(__name__)

_CURSOR, _LEN, _WRITE_COUNT, _GENERATION = range(4)

_CONTEXT = multiprocessing.get_context("spawn")  # a lock any start method can carry

_ALLOCATE_FIRST = (
    "a shared ring allocates its rows on its first write, in the process that built it, "
    "before another process gets the buffer: extend it once there (and empty() it, as "
    "TorchRL's sac-async does) before starting the processes that write to it"
)


def _counter(i: int, doc: str) -> property:
    def get(self: SharedRing) -> int:
        return int(self._counts[i])

    def set_(self: SharedRing, value: int) -> None:
        self._counts[i] = value

    return property(get, set_, doc=doc)


class SharedRing:
    """The shared variant of a ring (a mixin before its class): counters, rows and lock
    shared between processes. Built by :func:`share_ring`, never directly."""

    #: the counters, an ``int64 [4]`` tensor in shared memory
    _counters: torch.Tensor
    #: a NumPy view of them (reading one costs ~100 ns; a tensor element ~1 µs)
    _counts: np.ndarray
    #: the process that built the ring: the only one that may allocate its rows
    _owner_pid: int
    #: whether the ring was handed to another process (its rows can no longer be allocated)
    _handed_out: bool
    #: the lock every process holds while it reads or writes rows (the ring's own)
    lock: Any

    shared = True

    _cursor = _counter(_CURSOR, "The slot the next row goes to (shared).")
    _len = _counter(_LEN, "Rows held (shared).")
    _write_count = _counter(_WRITE_COUNT, "Rows written since creation (shared).")
    _generation = _counter(_GENERATION, "Changes when rows change other than by writes (shared).")

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        if os.getpid() != self._owner_pid or self._handed_out:
            raise DataStructureError(
                f"this {_plain(type(self)).__name__} has no rows in this process: "
                + _ALLOCATE_FIRST
            )
        if getattr(self, "_rows", None) is not None:
            raise DataStructureError(
                "a shared ring keeps the layout of its first write: other processes hold its "
                "rows; write rows of that layout (or build a new buffer for the new one)"
            )
        rows = super()._allocate(layout)  # type: ignore[misc]
        if not isinstance(self, LazyMemmapStorage):
            rows.share_memory_()
        return rows

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        plain = _plain(type(self))
        state = self.__getstate__()  # type: ignore[attr-defined]
        if get_spawning_popen() is None:
            # an ordinary copy (pickle, deepcopy, torch.save): a private ring of its own
            for name, i in (("_cursor", _CURSOR), ("_len", _LEN), ("_write_count", _WRITE_COUNT)):
                state[name] = int(self._counts[i])
            state["_generation"] = int(self._counts[_GENERATION])
            for name in ("_counters", "_counts", "_owner_pid", "_handed_out"):
                state.pop(name, None)
            rows = state.get("_rows")
            if rows is not None:
                state["_rows"] = rows.clone()
            if isinstance(self, LazyMemmapStorage):
                state["filename"] = None
            return (_rebuild, (plain, state, False))
        # to a process being started: the same rows, counters and lock
        self._handed_out = True
        state["lock"] = self.lock
        state.pop("_counts", None)
        if isinstance(self, LazyMemmapStorage) and state.get("_rows") is not None:
            if self.filename is None:
                raise RuntimeError(
                    "this shared LazyMemmapStorage's file was unlinked when it was mapped (no "
                    "scratch_dir), so another process cannot map it: build it with "
                    "scratch_dir=..., or share the buffer before its first write"
                )
            rows = state.pop("_rows")
            state["_mapped"] = (self.filename, tuple(rows.shape))
        return (_rebuild, (plain, state, True))


def _plain(cls: type) -> type:
    """The ring class a shared variant was built from."""
    for c in cls.__mro__:
        if issubclass(c, TensorStorage) and not issubclass(c, SharedRing):
            return c
    raise TypeError(f"{cls.__name__} is not a ring")  # pragma: no cover


_VARIANTS: dict[type, type] = {}


def _variant(cls: type) -> type:
    out = _VARIANTS.get(cls)
    if out is None:
        out = type(
            f"Shared{cls.__name__}",
            (SharedRing, cls),
            {"__module__": cls.__module__, "config_name": cls.config_name},  # type: ignore[attr-defined]
        )
        _VARIANTS[cls] = out
    return out


def _rebuild(plain: type, state: dict[str, Any], shared: bool) -> TensorStorage:
    """A ring unpickled: the shared variant with the sender's rows, counters and lock, or a
    private copy."""
    cls = _variant(plain) if shared else plain
    obj: Any = object.__new__(cls)
    mapped = state.pop("_mapped", None)
    lock = state.pop("lock", None)
    obj.__setstate__(state)  # Locked's: a fresh thread lock, replaced below
    if shared:
        obj.lock = lock
        obj._counts = obj._counters.numpy()
        if mapped is not None:
            path, shape = mapped
            words = torch.from_file(path, shared=True, size=shape[0] * shape[1], dtype=torch.int64)
            obj._rows = words.view(*shape)
    return obj


def is_shared(storage: Any) -> bool:
    """Whether ``storage`` is a ring shared between processes."""
    return isinstance(storage, SharedRing)


def share_ring(storage: Any) -> None:
    """Make ``storage`` shared between processes, in place (see the module docs).

    Raises:
        TypeError: a storage that cannot be shared (a storage of items, read-only data, a
            ring on an accelerator or with ``dedup_next=True``), naming what can.
    """
    if isinstance(storage, SharedRing):
        return
    name = type(storage).__name__
    if not isinstance(storage, TensorStorage):
        raise TypeError(
            f"shared=True shares a ring's rows between processes; a {name} cannot be shared "
            "(its items or rows live in this process): use a LazyTensorStorage or "
            "LazyMemmapStorage"
        )
    if storage.dedup_next:
        raise TypeError(
            f"shared=True is not supported with dedup_next=True ({name}): its next values are "
            "kept in a pool of this process; build the storage without dedup_next"
        )
    if storage.device.type != "cpu":
        raise TypeError(
            f"shared=True needs the rows in host memory, got {name}(device={str(storage.device)!r}); "
            "keep the storage on the CPU (device='cpu') and move each batch with "
            "batch.to(device) (or batch_device=...)"
        )
    if isinstance(storage, LazyMemmapStorage) and storage._rows is not None:
        if storage.filename is None:
            raise TypeError(
                "shared=True: this LazyMemmapStorage already wrote its rows to a file that was "
                "unlinked (no scratch_dir), which another process cannot map; share the buffer "
                "before its first write, or build the storage with scratch_dir=..."
            )
    with storage.lock:
        values = (storage._cursor, storage._len, storage._write_count, storage._generation)
        counters = torch.tensor(values, dtype=torch.int64).share_memory_()
        for name in ("_cursor", "_len", "_write_count", "_generation"):
            storage.__dict__.pop(name, None)
        storage.__class__ = _variant(type(storage))
        storage._counters = counters
        storage._counts = counters.numpy()
        storage._owner_pid = os.getpid()
        storage._handed_out = False
        if storage._rows is not None and not isinstance(storage, LazyMemmapStorage):
            storage._rows.share_memory_()
        storage._gather_scratch = None
        old = storage.lock
    storage.lock = _CONTEXT.RLock()
    del old
    log.debug("%s shared between processes", name)
