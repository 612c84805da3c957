"""Rings shared between processes (TorchRL's ``shared=True``): one ring, written and read anywhere.

A collector in another process (TorchRL's ``AsyncCollector(replay_buffer=rb)``, a
``multiprocessing`` process given the buffer) writes rows that the learner samples.
:func:`share_ring` turns a ring (:class:`~mixreplay.LazyTensorStorage` on the CPU,
:class:`~mixreplay.LazyMemmapStorage`) into its shared variant, in place:

- its rows live in a file every process maps (in ``/dev/shm``, memory, for a
  ``LazyTensorStorage``; in the storage's own file for a ``LazyMemmapStorage``);
- its counters (cursor, fill, write count, generation, in-place writes, revision) live in a
  shared ``int64``
  tensor beside them, so ``len(rb)``, ``rb.write_count`` and the samplers see every
  process's writes; a shared header names the rows' file and layout;
- its lock is one re-entrant lock of the operating system, shared by every process.

Every read and write of rows already holds the storage's lock (see
:mod:`mixreplay.storages.base`); with that lock shared, the guarantees of the threaded
path hold across processes: a row sampled is a whole row of one write (never torn),
each written row lands once, and lengths never go backwards. Taking the lock also maps
the rows when another process allocated them (the first write, in whichever process,
allocates them and fixes their layout), so a buffer may be handed to a collector before
any row exists. Samplers live in each process and follow the shared counters (a
prioritized sampler gives rows written elsewhere the priority of new rows when it next
draws).

The buffer travels to another process by pickling with ``multiprocessing`` (``spawn``,
``forkserver``: the counters, header and lock are shared; the rows are mapped from their
file) or by ``fork``. Files: the process that shared the ring removes a rows file in
``/dev/shm`` when the ring is collected or the process exits; a ``LazyMemmapStorage``
keeps TorchRL's rule (its file in ``scratch_dir`` stays unless ``auto_cleanup=True``). A
process killed before that can leave the file behind, as with any shared memory.

A process that dies holding the lock (killed during a write) never releases it, and the
rows it was writing may be torn: every call that then waits for the lock raises
:class:`~mixreplay.errors.LockOwnerDiedError` within about a second, instead of waiting for
ever (the holder's pid is kept beside the counters); ``len()`` still answers.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import tempfile
import time
import uuid
import weakref
from multiprocessing.context import get_spawning_popen
from typing import Any

import numpy as np
import torch

from mixreplay.data_types import codec_from_json
from mixreplay.errors import DataStructureError, LockOwnerDiedError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema
from mixreplay.storages.ring import (
    SHARE_HOOKS,
    LazyMemmapStorage,
    TensorStorage,
    _cleanup_file,
    _reserve,
)

__all__ = ["SharedRing", "is_shared", "share_ring"]

log = logging.getLogger(__name__)

_CURSOR, _LEN, _WRITE_COUNT, _GENERATION, _EPOCH, _OWNER, _REWRITES, _REVISION = range(8)

#: how often a process waiting for the shared lock checks that its holder is alive (seconds)
OWNER_POLL_S = 0.5

_CONTEXT = multiprocessing.get_context("spawn")  # a lock any start method can carry

#: bytes of the shared header (the rows' file, capacity and layout as JSON)
_HEADER_BYTES = 1 << 16

#: where the rows of a shared LazyTensorStorage go: memory, as any shared memory
_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _counter(i: int, doc: str) -> property:
    def get(self: SharedRing) -> int:
        return int(self._counts[i])

    def set_(self: SharedRing, value: int) -> None:
        self._counts[i] = value

    return property(get, set_, doc=doc)


class _FollowingLock:
    """The shared OS lock of a ring; taking it also maps rows another process allocated.

    The process holding it writes its pid into the shared counters, so that a process
    waiting for it notices when the holder died (killed mid-write, or exited holding it): an
    OS lock is not released by a process's death, and the waiter would wait for ever. It
    then raises :class:`~mixreplay.errors.LockOwnerDiedError` instead.
    """

    __slots__ = ("lock", "ring")

    def __init__(self, lock: Any, ring: SharedRing):
        self.lock = lock
        self.ring = ring

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        # (a SemLock takes None for "no timeout": -1, threading's spelling, would not block)
        if not blocking:
            got = self.lock.acquire(False)
        else:
            got = self._wait(None if timeout is None or timeout < 0 else timeout)
        if got:
            counts = self.ring._counts
            counts[_OWNER] = os.getpid()
            try:
                self.ring._follow()
            except BaseException:
                self.release()
                raise
        return got

    def _wait(self, timeout: float | None) -> bool:
        """Take the lock within ``timeout`` seconds (``None``: until taken), checking its holder."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = OWNER_POLL_S if deadline is None else deadline - time.monotonic()
            if self.lock.acquire(True, max(0.0, min(OWNER_POLL_S, left))):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            holder = int(self.ring._counts[_OWNER])
            if holder and holder != os.getpid() and not _alive(holder):
                raise LockOwnerDiedError(
                    f"process {holder}, which held the lock of this shared storage "
                    f"({type(self.ring).__name__}), died while holding it (killed during a "
                    "write, or exited inside one): the lock can never be released and the rows "
                    "it was writing may be torn. Create a new storage with shared=True and write "
                    "again (make writer processes exit between writes, e.g. on a signal handled "
                    "outside extend())"
                )

    def release(self) -> None:
        if self.lock._semlock._count() == 1:  # the last hold: no process holds it now
            self.ring._counts[_OWNER] = 0
        self.lock.release()

    def _is_owned(self) -> bool:
        """Whether the calling thread holds it (as CPython's ``RLock`` says)."""
        return bool(self.lock._semlock._is_mine())

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (macOS): kill(pid, 0) said alive
        return True
    return state not in (b"Z", b"X")


class SharedRing:
    """The shared variant of a ring (a mixin before its class): counters, rows and lock
    shared between processes. Built by :func:`share_ring`, never directly."""

    #: the counters, an ``int64 [8]`` tensor in shared memory (see ``_CURSOR`` .. ``_REVISION``;
    #: ``_OWNER``: the pid holding the lock)
    _counters: torch.Tensor
    #: a NumPy view of them (reading one costs ~100 ns; a tensor element ~1 µs)
    _counts: np.ndarray
    #: the shared header: the rows' file and layout, as length-prefixed JSON
    _header: torch.Tensor
    #: the allocation this process maps (the counters' epoch when it mapped the rows)
    _mapped_epoch: int
    #: the rows' file (chosen when the ring was shared) and the temporary directory holding it
    _rows_path: tuple[str, str | None]
    #: the lock every process holds while it reads or writes rows
    lock: Any
    _rows: torch.Tensor | None
    _layout: RowLayout | None
    max_size: int

    shared = True

    _cursor = _counter(_CURSOR, "The slot the next row goes to (shared).")
    _len = _counter(_LEN, "Rows held (shared).")
    _write_count = _counter(_WRITE_COUNT, "Rows written since creation (shared).")
    _generation = _counter(_GENERATION, "Changes when rows change other than by writes (shared).")
    _rewrites = _counter(_REWRITES, "In-place writes since creation (shared).")
    _revision = _counter(_REVISION, "Writes since creation, one per call (shared).")

    @property
    def codec(self) -> Any:
        """How rows map to the type of the first write (shared through the header)."""
        return self.__dict__.get("_codec")

    @codec.setter
    def codec(self, value: Any) -> None:
        self.__dict__["_codec"] = value
        if self._layout is not None and int(self._counts[_EPOCH]) == self._mapped_epoch:
            header = self._read_header()
            header["codec"] = None if value is None else value.to_json()
            self._write_header(header)

    # -- the header -------------------------------------------------------------------------

    def _read_header(self) -> dict[str, Any]:
        n = int(self._header[:8].view(torch.int64)[0])
        return json.loads(bytes(self._header[8 : 8 + n].numpy())) if n else {}

    def _write_header(self, header: dict[str, Any]) -> None:
        payload = json.dumps(header).encode()
        if len(payload) > _HEADER_BYTES - 8:
            raise DataStructureError(
                f"the layout of these rows ({len(payload):,} bytes of JSON) is too large to "
                f"share (at most {_HEADER_BYTES - 8:,}); store fewer keys per row"
            )
        self._header[8 : 8 + len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        self._header[:8].view(torch.int64)[0] = len(payload)

    # -- the rows: allocated by the first write anywhere, mapped by every process ------------

    def _follow(self) -> None:
        """Map the rows another process allocated (caller holds the lock)."""
        epoch = int(self._counts[_EPOCH])
        if epoch == self._mapped_epoch:
            return
        header = self._read_header()
        layout = RowLayout(Schema.from_json(header["schema"]))
        words = torch.from_file(
            header["path"],
            shared=True,
            size=self.max_size * layout.row_words,
            dtype=torch.int64,
        )
        self._rows = words.view(self.max_size, layout.row_words)
        self._layout = layout
        # written by this program (a process it started reads it): the class's module may
        # not be imported here yet
        self.__dict__["_codec"] = codec_from_json(header.get("codec"), imports=True)
        self._mapped_epoch = epoch
        self._adopt_file(header["path"])

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        if self._rows is not None:
            raise DataStructureError(
                "a shared ring keeps the layout of its first write: other processes map its "
                "rows; write rows of that layout (or build a new buffer for the new one)"
            )
        return self._new_rows(layout)

    def _new_rows(self, layout: RowLayout) -> torch.Tensor:
        """Rows of ``layout`` in the ring's file, published to every process (caller holds the
        lock). The file's path was chosen when the ring was shared, so the process that shared
        it removes the file whichever process made it."""
        path = self._rows_path[0]
        nbytes = self.max_size * layout.row_bytes
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _reserve(fd, nbytes, path)
            words = torch.from_file(path, shared=True, size=nbytes // 8, dtype=torch.int64)
        except BaseException:
            _cleanup_file(path, None)
            raise
        finally:
            os.close(fd)
        self._write_header({"path": path, "schema": layout.schema.to_json(), "codec": None})
        epoch = int(self._counts[_EPOCH]) + 1
        self._counts[_EPOCH] = epoch
        self._mapped_epoch = epoch
        self._adopt_file(path)
        return words.view(self.max_size, layout.row_words)

    def _adopt_file(self, path: str) -> None:
        ring: Any = self
        if isinstance(ring, LazyMemmapStorage):
            ring.filename = path

    # -- pickling: to a process being started, or a private copy ---------------------------

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        plain = _plain(type(self))
        state = self.__getstate__()  # type: ignore[attr-defined]
        state.pop("_counts", None)
        if get_spawning_popen() is None:
            # an ordinary copy (pickle, deepcopy, torch.save): a private ring of its own
            for name, i in (
                ("_cursor", _CURSOR),
                ("_len", _LEN),
                ("_write_count", _WRITE_COUNT),
                ("_generation", _GENERATION),
                ("_rewrites", _REWRITES),
                ("_revision", _REVISION),
            ):
                state[name] = int(self._counts[i])
            state["codec"] = state.pop("_codec", None)
            for name in ("_counters", "_header", "_mapped_epoch", "_rows_path"):
                state.pop(name, None)
            rows = state.get("_rows")
            if rows is not None:
                state["_rows"] = rows.clone()
            if isinstance(self, LazyMemmapStorage):
                state["filename"] = None
            return (_rebuild, (plain, state, None))
        # to a process being started: the same counters, header and lock; the rows are mapped
        # there from their file when it first takes the lock
        lock = self.lock.lock
        for name in ("_rows", "_layout", "_codec"):
            state.pop(name, None)
        state["_mapped_epoch"] = 0
        return (_rebuild, (plain, state, lock))


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


def _rebuild(plain: type, state: dict[str, Any], lock: Any) -> TensorStorage:
    """A ring unpickled: the shared variant with the sender's counters, header and lock (rows
    mapped on first use), or a private copy (``lock`` is ``None``)."""
    obj: Any = object.__new__(_variant(plain) if lock is not None else plain)
    obj.__setstate__(state)  # Locked's: a fresh thread lock, replaced below when shared
    if lock is not None:
        obj._rows = obj._layout = None
        obj._counts = obj._counters.numpy()
        obj.lock = _FollowingLock(lock, obj)
    return obj


def _rows_file(ring: Any) -> tuple[str, str | None]:
    """Where a shared ring's rows go, chosen by the process that shares it, and who removes the
    file: that process, when the ring is collected or it exits (TorchRL's rule for a
    ``LazyMemmapStorage`` in a ``scratch_dir``: kept unless ``auto_cleanup=True``)."""
    memmap = isinstance(ring, LazyMemmapStorage)
    directory = ring.scratch_dir if memmap else _SHM_DIR
    temp_dir = None
    if directory is None:
        directory = temp_dir = tempfile.mkdtemp(prefix="mixreplay-")
    else:
        os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"rows-{uuid.uuid4().hex[:16]}.bin")
    if memmap and ring.scratch_dir is not None and not ring._auto_cleanup:
        ring._finalizer = lambda: _cleanup_file(path, None)  # close()/cleanup() remove it
        return path, temp_dir
    done = weakref.finalize(ring, _cleanup_file, path, temp_dir)
    if memmap:

        def release() -> bool:
            done.detach()
            return _cleanup_file(path, temp_dir)

        ring._finalizer = release
    return path, temp_dir


def is_shared(storage: Any) -> bool:
    """Whether ``storage`` is a ring shared between processes."""
    return isinstance(storage, SharedRing)


def share_ring(storage: Any) -> None:
    """Make ``storage`` shared between processes, in place (see the module docs).

    Raises:
        TypeError: a storage that cannot be shared (read-only data, a TorchRL storage, a
            ring on an accelerator, with ``dedup_next=True`` or ``ndim=2``), naming what can.
    """
    if isinstance(storage, SharedRing):
        return
    name = type(storage).__name__
    if not isinstance(storage, TensorStorage):
        raise TypeError(
            f"shared=True shares a ring's rows between processes; a {name} cannot be shared "
            "(its rows live in this process): use a LazyTensorStorage or LazyMemmapStorage"
        )
    if storage.dedup_next:
        raise TypeError(
            f"shared=True is not supported with dedup_next=True ({name}): its next values are "
            "kept in a pool of this process; build the storage without dedup_next"
        )
    if storage.ndim > 1:
        raise TypeError(
            f"shared=True is not supported with ndim={storage.ndim} ({name}): a grid's width is "
            "fixed by its first write, in one process; share an ndim=1 ring (extend "
            "data.reshape(-1), env by env)"
        )
    if storage.device.type != "cpu":
        raise TypeError(
            f"shared=True needs the rows in host memory, got {name}(device={str(storage.device)!r}); "
            "keep the storage on the CPU (device='cpu') and move each batch with "
            "batch.to(device) (or batch_device=...)"
        )
    ring: Any = storage
    with ring.lock:
        values = (
            ring._cursor,
            ring._len,
            ring._write_count,
            ring._generation,
            0,
            0,
            ring._rewrites,
            ring._revision,
        )
        counters = torch.tensor(values, dtype=torch.int64).share_memory_()
        header = torch.zeros(_HEADER_BYTES, dtype=torch.uint8).share_memory_()
        old_rows, layout, codec = ring._rows, ring._layout, ring.codec
        # a memmap's former file: its rows move to the shared ring's own file below
        superseded = ring._finalizer if isinstance(ring, LazyMemmapStorage) else None
        for attr in (
            "_cursor",
            "_len",
            "_write_count",
            "_generation",
            "_rewrites",
            "_revision",
            "codec",
        ):
            ring.__dict__.pop(attr, None)
        ring.__class__ = _variant(type(ring))
        ring._counters = counters
        ring._counts = counters.numpy()
        ring._header = header
        ring._mapped_epoch = 0
        ring._rows_path = _rows_file(ring)
        ring._gather_scratch = None
        ring._rows = None
        if layout is not None and old_rows is not None:
            # rows written before sharing move into a file every process can map
            rows = ring._new_rows(layout)
            rows.copy_(old_rows)
            ring._rows = rows
            if superseded is not None:
                superseded()  # the memmap's former file: its rows are in the new one now
        ring.codec = codec
        old = ring.lock
    ring.lock = _FollowingLock(_CONTEXT.RLock(), ring)
    del old
    log.debug("%s shared between processes", name)


SHARE_HOOKS.share = share_ring  # TorchRL's shared_init=True on a ring (see ring.py)
