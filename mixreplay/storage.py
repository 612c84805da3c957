"""Storages: where rows live.

Every mixreplay storage keeps its rows *packed*: one row of a single
``int64`` tensor of shape ``[max_size, W]`` holds every key of one transition
(see :class:`~mixreplay.schema.RowLayout`). Reading ``k`` rows is one
``index_select`` whatever the number of keys, and the TensorDict handed back is
a set of typed views over the gathered words.

- :class:`TensorStorage` is the ring: preallocated from the first write (its
  shapes and dtypes), written by slice, oldest rows overwritten first when full.
  :class:`LazyTensorStorage` keeps it in memory on any device,
  :class:`LazyMemmapStorage` in a memory-mapped file.
- :class:`FrozenStorage` holds read-only rows, e.g. an offline dataset mapped
  from disk.

Writes and reads take a per-storage lock (``storage.lock``, re-entrant), so a
collector thread may ``extend`` while a learner thread samples: a reader never
sees a half-written row, and a row's keys always come from one write.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import EmptyBufferError, ReadOnlyError
from mixreplay.schema import NestedKey, RowLayout, Schema, format_key, normalize_key

__all__ = ["FrozenStorage", "LazyMemmapStorage", "LazyTensorStorage", "TensorStorage"]

log = logging.getLogger(__name__)


def _as_index(index, length: int, device: torch.device) -> torch.Tensor:
    """Turn an int, slice, sequence or tensor into a validated int64 index tensor."""
    if isinstance(index, slice):
        return torch.arange(*index.indices(length), device=device)
    if isinstance(index, int):
        index = torch.tensor([index])
    elif not isinstance(index, torch.Tensor):
        index = torch.as_tensor(index)
    if index.dtype == torch.bool:
        if index.shape != (length,):
            raise IndexError(
                f"a boolean mask must have shape [{length}] (one entry per row), "
                f"got {list(index.shape)}"
            )
        return index.nonzero().squeeze(-1).to(device)
    if index.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise IndexError(f"row indices must be integers, got dtype {index.dtype}")
    index = index.reshape(-1).to(device=device, dtype=torch.int64)
    if index.numel():
        index = torch.where(index < 0, index + length, index)
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= length:
            bad = lo if lo < 0 else hi
            raise IndexError(
                f"row index {bad} is out of range for a storage with {length} rows "
                f"(valid: {-length}..{length - 1})"
            )
    return index


def _as_device(device) -> torch.device:
    if device is None:
        return torch.device("cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise (TypeError if not isinstance(device, (str, int)) else ValueError)(
            f"device must be a torch.device or a device string such as 'cpu' or 'cuda:0', got "
            f"{type(device).__name__} {device!r}"
        ) from None


def check_rows(data) -> int:
    """The number of rows of ``data``, a TensorDict with one batch dim; raise a clear error otherwise."""
    if not isinstance(data, TensorDictBase):
        hint = (
            "TensorDict(data, batch_size=[n])"
            if isinstance(data, dict)
            else "TensorDict({'observation': x, ...}, batch_size=[n])"
        )
        raise TypeError(
            f"extend expects a TensorDict of rows, got {type(data).__name__}; wrap it: {hint}"
        )
    if data.batch_dims != 1:
        raise ValueError(
            f"extend expects a TensorDict with one batch dim (one entry per row), got "
            f"batch_size={list(data.batch_size)}; use add() for a single row or "
            "data.reshape(-1) to flatten"
        )
    n = data.batch_size[0]
    if n == 0:
        raise ValueError("extend got an empty batch (batch_size=[0]); pass at least one row")
    return n


def check_ndim(ndim) -> None:
    """Refuse TorchRL's multi-dimensional storages (``ndim=2``), naming the mixreplay way.

    TorchRL's ``LazyTensorStorage(n, ndim=2)`` keeps ``[N, T]`` collector batches as a
    time-major ``[n // N, N]`` grid whose slices run down one env's column. mixreplay's
    rings hold rows: flattening the batch env by env keeps each env's steps consecutive,
    which is what its slice sampler and episode bookkeeping read.
    """
    if isinstance(ndim, bool) or not isinstance(ndim, int):
        raise TypeError(f"ndim must be an int, got {type(ndim).__name__} {ndim!r}")
    if ndim != 1:
        raise ValueError(
            f"ndim={ndim} is not supported: mixreplay storages are rings of rows (ndim=1); "
            "extend a [N, T] collector batch as rows with rb.extend(data.reshape(-1)) "
            "(env by env, so each env's steps stay consecutive for SliceSampler)"
        )


def check_row(row) -> None:
    """Raise a clear error unless ``row`` is one row: a TensorDict with batch ``[]``."""
    if not isinstance(row, TensorDictBase):
        raise TypeError(f"add expects a TensorDict row, got {type(row).__name__}")
    if row.batch_dims != 0:
        raise ValueError(
            f"add expects one row (batch_size=[]), got batch_size={list(row.batch_size)}; "
            "use extend() for several rows"
        )


class Locked:
    """An object with a re-entrant ``lock`` that survives pickling (the copy gets a fresh lock).

    Re-entrant: a buffer holds a storage's lock across ``storage.extend`` and its
    sampler's ``on_extend``.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()


class _PackedRows(Locked):
    """What every storage shares: a layout and packed rows ``[capacity, W]``.

    Pickling copies the rows (a memory-mapped storage arrives as an in-memory copy).
    """

    _rows: torch.Tensor | None
    _layout: RowLayout | None
    device: torch.device

    @property
    def layout(self) -> RowLayout | None:
        """The packed layout, or ``None`` before the first write."""
        return self._layout

    @property
    def schema(self) -> Schema | None:
        """Keys, per-row shapes and dtypes of the rows, or ``None`` before the first write."""
        return None if self._layout is None else self._layout.schema

    @property
    def row_bytes(self) -> int:
        """Bytes per stored row, padding included (0 before the first write)."""
        return 0 if self._layout is None else self._layout.row_bytes

    @property
    def rows(self) -> torch.Tensor:
        """The packed words of the filled rows, ``[len, W]`` int64, in slot order."""
        if self._rows is None:
            return torch.empty(0, 0, dtype=torch.int64, device=self.device)
        return self._rows[: len(self)]

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """Packed rows ``index`` as a new ``[len(index), W]`` tensor (caller holds :attr:`lock`)."""
        rows = self._rows
        if index.device != rows.device:
            index = index.to(rows.device)
        return torch.index_select(rows, 0, index)

    def gather_into(self, index: torch.Tensor, out: torch.Tensor) -> None:
        """Copy rows ``index`` into the packed buffer ``out`` (``[len(index), W]``; caller holds :attr:`lock`)."""
        rows = self._rows
        if index.device != rows.device:
            index = index.to(rows.device)
        if out.device == rows.device:
            torch.index_select(rows, 0, index, out=out)
        else:
            out.copy_(torch.index_select(rows, 0, index))

    def gather_unlocked(self, index: torch.Tensor) -> TensorDict:
        """Like :meth:`gather`, for a caller that already holds :attr:`lock`."""
        if self._layout is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        return self._layout.unpack(self.take(index), self.device)

    def gather(self, index: torch.Tensor) -> TensorDict:
        """Rows ``index`` (an int64 tensor of valid slots) as a new ``[len(index)]`` TensorDict."""
        with self.lock:
            return self.gather_unlocked(index)

    def __getitem__(self, index) -> TensorDict:
        """Rows by position: an int gives one row (batch ``[]``), anything else ``[k]`` rows."""
        n = len(self)
        if self._layout is None or n == 0:
            raise IndexError("the storage holds no rows yet")
        idx = _as_index(index, n, self._rows.device)
        td = self.gather(idx)
        return td[0] if isinstance(index, int) else td

    def column(self, key: NestedKey) -> torch.Tensor:
        """A typed view ``[len, *shape]`` of one key over the filled rows (slot order).

        The view shares memory with the storage: treat it as read-only.
        """
        if self._layout is None:
            raise KeyError(f"key {format_key(normalize_key(key))} not found: the storage is empty")
        k = normalize_key(key)
        for i, f in enumerate(self._layout.fields):
            if f.key == k:
                return self._layout.split(self.rows)[i]
        raise KeyError(
            f"key {format_key(k)} not found in storage with keys "
            f"[{', '.join(format_key(f.key) for f in self._layout.schema.fields)}]"
        )

    def to_tensordict(self) -> TensorDict:
        """A copy of the filled rows as a plain ``[len]`` TensorDict (slot order)."""
        if self._layout is None:
            return TensorDict({}, batch_size=[0])
        return self._layout.unpack(self.rows.clone(), self.device)


class TensorStorage(_PackedRows):
    """A fixed-capacity ring of packed rows, allocated on the first write.

    The first ``extend`` fixes the schema (keys, per-row shapes, dtypes); later
    writes must match it exactly, or :class:`~mixreplay.errors.SchemaMismatchError`
    names the keys that differ. Rows are written in slot order; once full, the
    oldest rows are overwritten first.

    Args:
        max_size: capacity in rows.

    Keyword Args:
        device: where the rows live (CPU by default).
        ndim: TorchRL's storage dimensions; only 1 (a ring of rows) is supported, see
            :func:`check_ndim`.

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

    def __init__(self, max_size: int, *, device: torch.device | str | None = None, ndim: int = 1):
        super().__init__()
        check_ndim(ndim)
        if isinstance(max_size, bool) or not isinstance(max_size, int):
            raise TypeError(f"max_size must be an int, got {type(max_size).__name__} {max_size!r}")
        if max_size <= 0:
            raise ValueError(f"max_size must be a positive number of rows, got {max_size}")
        self.max_size = max_size
        self.device = _as_device(device)
        self._layout = None
        self._rows = None
        self._cursor = 0
        self._len = 0
        self._write_count = 0

    def __len__(self) -> int:
        return self._len

    @property
    def cursor(self) -> int:
        """The slot the next row will be written to."""
        return self._cursor

    @property
    def write_count(self) -> int:
        """Rows written since creation (wrapped rows included)."""
        return self._write_count

    @property
    def nbytes(self) -> int:
        """Bytes held by the allocated rows (capacity × row bytes), 0 before the first write."""
        return 0 if self._rows is None else self.max_size * self.row_bytes

    def _set_rows(self, rows: torch.Tensor, layout: RowLayout) -> None:
        self._rows, self._layout = rows, layout
        self._views = layout.group_views(rows)

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        return torch.zeros(self.max_size, layout.row_words, dtype=torch.int64, device=self.device)

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``) and return the slots written.

        When ``n`` exceeds the capacity, only the last ``max_size`` rows are kept
        (earlier ones would be overwritten within the same call anyway).
        """
        n = check_rows(data)
        layout = self._layout
        if layout is None:
            layout = RowLayout(Schema.from_tensordict(data))
        leaves = layout.leaves_of(data)
        if data.device is not None and data.device != self.device:
            leaves = [v.to(self.device) for v in leaves]
        with self.lock:
            if self._rows is None:
                self._set_rows(self._allocate(layout), layout)
                log.debug(
                    "allocated %d rows × %d bytes for %r",
                    self.max_size,
                    layout.row_bytes,
                    layout.schema,
                )
            cap, start = self.max_size, self._cursor
            views = self._views
            if start + n <= cap:
                layout.write(leaves, [v[start : start + n] for v in views])
                index = torch.arange(start, start + n, device=self.device)
            else:
                index = torch.arange(start, start + n, device=self.device) % cap
                skip = max(0, n - cap)  # rows overwritten within this very call
                pos, src = (start + skip) % cap, skip
                while src < n:
                    m = min(n - src, cap - pos)
                    layout.write(leaves, [v[pos : pos + m] for v in views], slice(src, src + m))
                    src += m
                    pos = (pos + m) % cap
            self._cursor = (start + n) % cap
            self._len = min(cap, self._len + n)
            self._write_count += n
        return index

    def add(self, row: TensorDictBase) -> int:
        """Write one row (a TensorDict with batch ``[]``) and return its slot."""
        check_row(row)
        return int(self.extend(row.unsqueeze(0))[0])

    def empty(self) -> None:
        """Forget every row (the allocation and schema are kept)."""
        with self.lock:
            self._cursor = self._len = 0

    def reset_write_count(self) -> None:
        """Start :attr:`write_count` again from 0 (TorchRL's ``empty(empty_write_count=True)``)."""
        with self.lock:
            self._write_count = 0

    # -- state ---------------------------------------------------------------------------

    def _restore(
        self, rows: torch.Tensor, layout: RowLayout, cursor: int, length: int, write_count: int
    ) -> None:
        """Replace the content with ``rows`` (``[length, W]``, slot order)."""
        if length > self.max_size:
            raise ValueError(f"cannot restore {length} rows into a storage of {self.max_size}")
        with self.lock:
            if self._rows is None or self._layout != layout:
                self._set_rows(self._allocate(layout), layout)
            self._rows[:length].copy_(rows)
            self._cursor, self._len, self._write_count = cursor, length, write_count

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


class LazyMemmapStorage(TensorStorage):
    """A ring of packed rows in a memory-mapped file, allocated from the first write.

    The file is created sparse (``max_size`` × row bytes) in ``scratch_dir``
    (a new temporary directory by default); the OS pages rows in and out.

    Args:
        max_size: capacity in rows.

    Keyword Args:
        scratch_dir: directory for the backing file.
        device: must be CPU (memory maps live in host memory).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyMemmapStorage
        >>> storage = LazyMemmapStorage(1000)
        >>> _ = storage.extend(TensorDict({"obs": torch.ones(5, 2)}, [5]))
        >>> storage[4]["obs"]
        tensor([1., 1.])
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike | None = None,
        device=None,
        ndim: int = 1,
    ):
        super().__init__(max_size, device=device, ndim=ndim)
        if self.device.type != "cpu":
            raise ValueError(f"LazyMemmapStorage lives in host memory; got device={self.device}")
        if scratch_dir is not None and not isinstance(scratch_dir, (str, os.PathLike)):
            raise TypeError(
                f"scratch_dir must be a directory path (str or os.PathLike), got "
                f"{type(scratch_dir).__name__} {scratch_dir!r}"
            )
        self.scratch_dir = None if scratch_dir is None else os.fspath(scratch_dir)
        self.filename: str | None = None

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        directory = self.scratch_dir or tempfile.mkdtemp(prefix="mixreplay-")
        os.makedirs(directory, exist_ok=True)
        fd, self.filename = tempfile.mkstemp(prefix="rows-", suffix=".bin", dir=directory)
        nbytes = self.max_size * layout.row_bytes
        os.ftruncate(fd, nbytes)
        os.close(fd)
        return torch.from_file(
            self.filename, shared=True, size=self.max_size * layout.row_words, dtype=torch.int64
        ).view(self.max_size, layout.row_words)


class FrozenStorage(_PackedRows):
    """Read-only packed rows, e.g. an offline dataset mapped from disk.

    Args:
        rows: packed words ``[n, W]`` (int64), in memory or memory-mapped.
        layout: the layout the words follow.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import FrozenStorage
        >>> rows = FrozenStorage.from_tensordict(TensorDict({"x": torch.arange(3.0)}, [3]))
        >>> len(rows), rows[1]["x"]
        (3, tensor(1.))
    """

    def __init__(self, rows: torch.Tensor, layout: RowLayout):
        super().__init__()
        if rows.dtype != torch.int64 or rows.dim() != 2 or rows.shape[1] != layout.row_words:
            raise ValueError(
                f"packed rows must be int64 [n, {layout.row_words}], got {rows.dtype} {list(rows.shape)}"
            )
        self._rows = rows
        self._layout = layout
        self.device = rows.device
        self.max_size = rows.shape[0]

    @classmethod
    def from_tensordict(cls, td: TensorDictBase) -> FrozenStorage:
        """Pack a ``[n]`` TensorDict into new read-only rows."""
        layout = RowLayout(Schema.from_tensordict(td))
        return cls(layout.pack(td), layout)

    def __len__(self) -> int:
        return self._rows.shape[0]

    cursor = 0

    @property
    def write_count(self) -> int:
        return len(self)

    def extend(self, data) -> torch.Tensor:
        raise ReadOnlyError(
            "this storage is read-only (offline data); write online rows to the mixing "
            "buffer's extend(), or copy the rows into a LazyTensorStorage first"
        )

    add = extend

    def __repr__(self) -> str:
        return f"FrozenStorage(len={len(self)}, row_bytes={self.row_bytes}, device={self.device})"


def is_native_storage(obj) -> bool:
    return isinstance(obj, _PackedRows)
