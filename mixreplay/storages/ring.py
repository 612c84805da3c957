"""Rings of packed rows: the online storages.

:class:`TensorStorage` is preallocated from the first write (its shapes and
dtypes), written by slice, oldest rows overwritten first when full.
:class:`LazyTensorStorage` keeps it in memory on any device,
:class:`LazyMemmapStorage` in a memory-mapped file whose blocks are reserved
when it is created (a full disk is an ``OSError`` then, not a crash later).

A write is checked whole and packed into staging rows before any stored byte
changes, and committed with one copy per contiguous run of slots: a write that is refused
(a key, dtype or shape that does not match, a value that cannot be packed)
leaves the rows, the schema and the counters exactly as they were.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._validate import check_bool, check_int, check_path, check_saved_int
from mixreplay.errors import CheckpointError, SchemaMismatchError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema
from mixreplay.storages.base import PackedStorage, as_device, check_ndim, check_rows

__all__ = ["LazyMemmapStorage", "LazyTensorStorage", "TensorStorage", "check_saved_rows"]

log = logging.getLogger(__name__)

#: writes of up to this many rows (environment steps) keep the views of their staging rows
_SMALL_WRITE = 32
#: writes up to this size are staged in reused rows; larger ones in new rows
_STAGING_BYTES = 4 << 20


def _state_int(state: dict[str, Any], key: str, lo: int = 0) -> int:
    return check_saved_int(state.get(key), f"storage {key}", min=lo)


def check_saved_rows(rows: Any, length: int, words: int, what: str = "rows") -> torch.Tensor:
    """``rows`` if it is an ``int64 [length, words]`` tensor; a :class:`CheckpointError` otherwise."""
    want = (length, words)
    if not isinstance(rows, torch.Tensor) or rows.dtype != torch.int64 or tuple(rows.shape) != want:
        got = (
            f"{rows.dtype}{list(rows.shape)}"
            if isinstance(rows, torch.Tensor)
            else type(rows).__name__
        )
        raise CheckpointError(f"the saved {what} must be an int64{list(want)} tensor, got {got}")
    return rows


class _DedupHooks:
    """How a plain ring reaches its dedup variant (:mod:`mixreplay.storages.dedup`).

    That module registers itself here when it is imported (the ``mixreplay.storages``
    package imports it), so the rings do not import it back.
    """

    variant: Callable[[type], type] | None = None
    expand_state: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def build(self, cls: type) -> type:
        if self.variant is None:  # pragma: no cover - registered by mixreplay.storages
            raise RuntimeError("import mixreplay.storages.dedup to build dedup_next=True rings")
        return self.variant(cls)

    def expand(self, state: dict[str, Any]) -> dict[str, Any]:
        if self.expand_state is None:  # pragma: no cover - registered by mixreplay.storages
            raise RuntimeError("import mixreplay.storages.dedup to read a dedup_next=True ring")
        return self.expand_state(state)


DEDUP_HOOKS = _DedupHooks()


class TensorStorage(PackedStorage):
    """A fixed-capacity ring of packed rows, allocated on the first write.

    The first ``extend`` fixes the schema (keys, per-row shapes, dtypes); later
    writes must match it exactly, or :class:`~mixreplay.errors.SchemaMismatchError`
    names the keys that differ. Rows are written in slot order; once full, the
    oldest rows are overwritten first. Values are stored, never autograd history:
    a tensor that requires grad is stored as its value.

    Args:
        max_size: capacity in rows.

    Keyword Args:
        device: where the rows live (CPU by default).
        ndim: TorchRL's storage dimensions; only 1 (a ring of rows) is supported, see
            :func:`~mixreplay.storages.base.check_ndim`.
        dedup_next: keep each next value once: for every key present both at the root
            and under ``"next"``, the next value is read from the following row of the
            same episode (see :mod:`mixreplay.storages.dedup`). Pixel observations then
            cost about half; batches are the same.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import TensorStorage
        >>> ring = TensorStorage(3)
        >>> ring.extend(TensorDict({"x": torch.arange(4)}, [4]))  # the 4th row overwrites slot 0
        tensor([0, 1, 2, 0])
        >>> ring[:]["x"]
        tensor([3, 1, 2])
    """

    #: whether next values are kept once (a class of :mod:`mixreplay.storages.dedup`)
    dedup_next: bool = False

    def __new__(cls, *args: Any, dedup_next: bool = False, **kwargs: Any) -> TensorStorage:
        # dedup_next=True builds the deduplicating variant of the class asked for, so
        # the plain ring's extend and gather stay free of any dedup branch.
        if check_bool(dedup_next, "dedup_next") and not cls.dedup_next:
            cls = DEDUP_HOOKS.build(cls)
        return super().__new__(cls)

    def __init__(
        self,
        max_size: int,
        *,
        device: torch.device | str | None = None,
        ndim: int = 1,
        dedup_next: bool = False,
    ):
        super().__init__()
        check_ndim(ndim)
        self.max_size = check_int(max_size, "max_size", min=1, what="a positive number of rows")
        self.device = as_device(device)
        self._layout = None
        self._rows = None
        self._cursor = 0
        self._len = 0
        self._write_count = 0
        self._scratch: tuple[RowLayout, torch.Tensor, dict[int, list[torch.Tensor]]] | None = None

    def __len__(self) -> int:
        return self._len

    @property
    def cursor(self) -> int:
        return self._cursor

    @property
    def write_count(self) -> int:
        return self._write_count

    @property
    def nbytes(self) -> int:
        """Bytes held by the allocated rows (capacity × row bytes), 0 before the first write."""
        return 0 if self._rows is None else self.max_size * self.row_bytes

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        return torch.zeros(self.max_size, layout.row_words, dtype=torch.int64, device=self.device)

    def _pack(self, data: TensorDictBase, layout: RowLayout) -> torch.Tensor:
        """The rows of ``data`` as new packed words on this storage's device (validated whole)."""
        return layout.pack(data, device=self.device)

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``) and return the slots written.

        When ``n`` exceeds the capacity, only the last ``max_size`` rows are kept
        (earlier ones would be overwritten within the same call anyway).
        """
        n = check_rows(data)
        layout = self._layout
        if layout is not None:
            # Validated whole first (keys, dtypes, shapes; values detached and moved). Rows
            # that overwrite stored ones are packed into reused staging rows first and
            # committed with one copy per run of slots: a write that fails, however,
            # never leaves a torn row.
            leaves = layout.leaves_of(data)
            if any(v.requires_grad or v.device != self.device for v in leaves):
                leaves = [v.detach().to(self.device) for v in leaves]
            with self.lock:
                if self._layout is layout:
                    start = self._cursor
                    if start == self._len and start + n <= self.max_size:
                        # Filling slots that hold no row yet: no reader can see them until
                        # the counters move, so the rows go straight in (one pass).
                        rows = self._rows
                        assert rows is not None
                        layout.write(leaves, layout.group_views(rows[start : start + n]))
                        return self._advance(start, n)
                    return self._commit(self._stage(layout, leaves, n), n)
        layout = layout or RowLayout(Schema.from_tensordict(data))
        words = self._pack(data, layout)  # raises before any stored byte changes
        with self.lock:
            if self._layout is None:
                self._rows, self._layout = self._allocate(layout), layout
                log.debug(
                    "allocated %d rows × %d bytes for %r",
                    self.max_size,
                    layout.row_bytes,
                    layout.schema,
                )
            elif self._layout is not layout:
                # another thread fixed the schema first: these rows must fit it
                words = self._pack(data, self._layout)
            return self._commit(words, n)

    def _stage(self, layout: RowLayout, leaves: list[torch.Tensor], n: int) -> torch.Tensor:
        """Pack validated ``leaves`` into staging rows (caller holds the lock).

        The staging rows are zeroed once and reused (their padding is never written, so
        it stays zero); they grow to the largest write up to :data:`_STAGING_BYTES`,
        above which a write is packed into new rows.
        """
        limit = max(_SMALL_WRITE, _STAGING_BYTES // layout.row_bytes)
        if n > limit:
            words = torch.zeros(n, layout.row_words, dtype=torch.int64, device=self.device)
            layout.write(leaves, layout.group_views(words))
            return words
        scratch = self._scratch
        if scratch is None or scratch[0] is not layout or scratch[1].shape[0] < n:
            size = min(limit, max(_SMALL_WRITE, 1 << (n - 1).bit_length()))
            zeros = torch.zeros(size, layout.row_words, dtype=torch.int64, device=self.device)
            scratch = self._scratch = (layout, zeros, {})
        views = scratch[2].get(n)
        if views is None:
            views = layout.group_views(scratch[1][:n])
            if n <= _SMALL_WRITE:  # an environment step's size: keep its views
                scratch[2][n] = views
        layout.write(leaves, views)
        return scratch[1][:n]

    def _commit(self, words: torch.Tensor, n: int) -> torch.Tensor:
        """Copy packed rows into the ring at the cursor (caller holds the lock)."""
        rows = self._rows
        assert rows is not None
        cap, start = self.max_size, self._cursor
        if start + n <= cap:
            rows[start : start + n].copy_(words)
        else:
            skip = max(0, n - cap)  # rows overwritten within this very call
            pos, src = (start + skip) % cap, skip
            while src < n:
                m = min(n - src, cap - pos)
                rows[pos : pos + m].copy_(words[src : src + m])
                src += m
                pos = (pos + m) % cap
        return self._advance(start, n)

    def _advance(self, start: int, n: int) -> torch.Tensor:
        """Count ``n`` rows written from slot ``start``; the slots they went to."""
        cap = self.max_size
        self._cursor = (start + n) % cap
        self._len = min(cap, self._len + n)
        self._write_count += n
        index = torch.arange(start, start + n, device=self.device)
        return index if start + n <= cap else index % cap

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_scratch"] = None
        return state

    def empty(self) -> None:
        """Forget every row (the allocation and schema are kept)."""
        with self.lock:
            self._cursor = self._len = 0
            self._bump_generation()

    def reset_write_count(self) -> None:
        with self.lock:
            self._write_count = 0

    # -- state ---------------------------------------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The filled rows (slot order), cursor, fill and write count; capacity and schema."""
        with self.lock:
            layout = self._layout
            rows = None
            if layout is not None:
                rows = self.rows.clone() if copy else self.rows
            return {
                "type": self.config_name,
                "max_size": self.max_size,
                "schema": None if layout is None else layout.schema.to_json(),
                "cursor": self._cursor,
                "len": self._len,
                "write_count": self._write_count,
                "rows": rows,
            }

    def _check_header(self, state: Any) -> tuple[int, int, int, RowLayout | None]:
        """``(len, cursor, write_count, layout)`` of a saved ring, checked against this one.

        ``layout`` is ``None`` for a ring saved before its first write.
        """
        if not isinstance(state, dict):
            raise CheckpointError(f"a storage state is a dict, got {type(state).__name__}")
        max_size = _state_int(state, "max_size", 1)
        if max_size != self.max_size:
            raise CheckpointError(
                f"the saved ring has max_size {max_size}, this storage {self.max_size}; build "
                f"it with the same capacity (e.g. online_capacity={max_size})"
            )
        length = _state_int(state, "len")
        cursor = _state_int(state, "cursor")
        write_count = _state_int(state, "write_count")
        if (
            length > max_size
            or cursor >= max_size
            or write_count < length
            or (length < max_size and cursor != length)
        ):
            raise CheckpointError(
                f"inconsistent ring (len={length}, cursor={cursor}, write_count={write_count}, "
                f"max_size={max_size}); the state is corrupt"
            )
        if state.get("schema") is None:
            if length:
                raise CheckpointError(f"{length} rows saved without a schema; the state is corrupt")
            return length, cursor, write_count, None
        try:
            layout = RowLayout(Schema.from_json(state["schema"]))
        except (SchemaMismatchError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"the saved schema is invalid ({err})") from None
        if self._layout is not None and self._layout != layout:
            lines = self._layout.schema.differences(layout.schema, names=("storage", "state"))
            raise CheckpointError(
                f"the saved rows do not match this storage's ({'; '.join(lines)}); load them "
                "into a storage whose rows have the saved keys, dtypes and shapes"
            )
        return length, cursor, write_count, layout

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        if isinstance(state, dict) and state.get("dedup_next"):
            # a ring saved with dedup_next=True: its rows, each next value restored
            state = DEDUP_HOOKS.expand(state)
        length, cursor, write_count, layout = self._check_header(state)
        if layout is None:

            def restore_empty() -> None:
                self._cursor = self._len = 0
                self._write_count = write_count
                self._bump_generation()

            return restore_empty
        rows = check_saved_rows(state.get("rows"), length, layout.row_words)

        def restore() -> None:
            if self._rows is None or self._layout != layout:
                self._rows, self._layout = self._allocate(layout), layout
            self._rows[:length].copy_(rows)
            self._cursor, self._len, self._write_count = cursor, length, write_count
            self._bump_generation()

        return restore

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={self._len}, "
            f"device={self.device}, row_bytes={self.row_bytes})"
        )


class LazyTensorStorage(TensorStorage):
    """A ring of packed rows in memory (CPU or any torch device).

    Allocated from the first write: ``max_size`` × row bytes, never more.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage
        >>> storage = LazyTensorStorage(100)
        >>> storage.extend(TensorDict({"obs": torch.zeros(3, 4)}, [3]))
        tensor([0, 1, 2])
        >>> len(storage), storage.row_bytes
        (3, 16)
    """


def _reserve(fd: int, nbytes: int, path: str) -> None:
    """Allocate the file's blocks now, so a full disk fails here and not as SIGBUS later."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            # a filesystem that cannot reserve blocks: a sparse file is all we can do
            log.warning(
                "cannot reserve %d bytes for %s (%s); the file stays sparse", nbytes, path, err
            )
            os.ftruncate(fd, nbytes)
            return
        raise OSError(
            err.errno,
            f"cannot reserve {nbytes:,} bytes for the ring's rows at {path}: {err.strerror}; "
            "free space on that filesystem, or choose another with scratch_dir=...",
            path,
        ) from None


def _remove_scratch(directory: str, owned: bool, filename: str) -> None:
    try:
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            os.unlink(filename)
    except OSError:
        pass


class LazyMemmapStorage(TensorStorage):
    """A ring of packed rows in a memory-mapped file, allocated from the first write.

    The file (``max_size`` × row bytes) is created in ``scratch_dir`` (a new
    temporary directory by default) with its blocks reserved up front: a disk
    too full for it raises an :class:`OSError` naming the path and the bytes
    needed. The file is removed by :meth:`close`, when the storage is garbage
    collected, or when the process exits (a default temporary directory with it).

    Args:
        max_size: capacity in rows.

    Keyword Args:
        scratch_dir: directory for the backing file.
        device: must be CPU (memory maps live in host memory).
        dedup_next: keep each next value once (see :class:`TensorStorage`); the rows
            and the next values kept apart both live in files of ``scratch_dir``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyMemmapStorage
        >>> storage = LazyMemmapStorage(1000)
        >>> _ = storage.extend(TensorDict({"obs": torch.ones(5, 2)}, [5]))
        >>> storage[4]["obs"]
        tensor([1., 1.])
        >>> storage.close()
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike[str] | None = None,
        device: torch.device | str | None = None,
        ndim: int = 1,
        dedup_next: bool = False,
    ):
        super().__init__(max_size, device=device, ndim=ndim, dedup_next=dedup_next)
        if self.device.type != "cpu":
            raise ValueError(f"LazyMemmapStorage lives in host memory; got device={self.device}")
        self.scratch_dir = (
            None
            if scratch_dir is None
            else str(check_path(scratch_dir, "scratch_dir", what="a directory path"))
        )
        self.filename: str | None = None
        self._finalizer: weakref.finalize | None = None

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        owned = self.scratch_dir is None
        directory = tempfile.mkdtemp(prefix="mixreplay-") if owned else self.scratch_dir
        assert directory is not None
        os.makedirs(directory, exist_ok=True)
        fd, filename = tempfile.mkstemp(prefix="rows-", suffix=".bin", dir=directory)
        nbytes = self.max_size * layout.row_bytes
        try:
            _reserve(fd, nbytes, filename)
        except BaseException:
            os.close(fd)
            _remove_scratch(directory, owned, filename)
            raise
        os.close(fd)
        if self._finalizer is not None:  # a re-allocation (restore of another layout)
            self._finalizer()
        self.filename = filename
        self._finalizer = weakref.finalize(self, _remove_scratch, directory, owned, filename)
        rows = torch.from_file(
            filename, shared=True, size=self.max_size * layout.row_words, dtype=torch.int64
        )
        return rows.view(self.max_size, layout.row_words)

    def close(self) -> None:
        """Remove the backing file (and its default temporary directory); the rows are gone."""
        with self.lock:
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None
            self._rows = None
            self._layout = None
            self._cursor = self._len = 0
            self._bump_generation()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_finalizer"] = None  # the copy's rows are in memory; the file stays with us
        return state
