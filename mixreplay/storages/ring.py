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
from multiprocessing.context import get_spawning_popen
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, MemoryMappedTensor, TensorDictBase, is_tensorclass

from mixreplay._torchrl_args import check_storage_args
from mixreplay._validate import check_bool, check_int, check_path, check_saved_int
from mixreplay.data_types import codec_from_json, one_row, to_rows
from mixreplay.errors import CheckpointError, SchemaMismatchError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema, check_dense, format_key, normalize_key
from mixreplay.storages import _hugepages
from mixreplay.storages.base import (
    PackedStorage,
    RingCounters,
    as_device,
    check_ndim,
    check_rows,
    check_saved_header,
    saved_header,
)

__all__ = [
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "TensorStorage",
    "check_saved_rows",
    "grid_key",
    "grid_rows",
    "leading_dims",
]

log = logging.getLogger(__name__)

#: writes of up to this many rows (environment steps) keep the views of their staging rows
_SMALL_WRITE = 32
#: writes up to this size are staged in reused rows; larger ones in new rows
_STAGING_BYTES = 4 << 20


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


class _ShareHooks:
    """How a ring becomes shared between processes (:mod:`mixreplay.storages.shared`), for
    TorchRL's ``shared_init=True``: that module registers itself here when it is imported (the
    ``mixreplay.storages`` package imports it), so the rings do not import it back."""

    share: Callable[[Any], None] | None = None

    def __call__(self, ring: Any) -> None:
        if self.share is None:  # pragma: no cover - registered by mixreplay.storages
            raise RuntimeError("import mixreplay.storages.shared to build shared_init=True rings")
        self.share(ring)


SHARE_HOOKS = _ShareHooks()


def _existing_data(storage: Any, max_size: Any) -> tuple[Any, Any]:
    """``(max_size, data)`` from TorchRL's ``TensorStorage(storage, max_size=None)`` or
    mixreplay's ``TensorStorage(max_size)`` / ``TensorStorage(max_size=n)``."""
    if storage is None and max_size is None:
        raise ValueError(
            "TensorStorage needs data or a capacity: TensorStorage(data) wraps existing rows, "
            "TensorStorage(max_size) builds an empty ring (Expected storage to be non-null)"
        )
    if storage is None or (isinstance(storage, int) and max_size is None):
        return (max_size if storage is None else storage), None
    if isinstance(storage, int):
        raise TypeError(
            f"TensorStorage({storage}, max_size={max_size}): the capacity is given twice; "
            "pass TensorStorage(max_size) for an empty ring or TensorStorage(data) for rows"
        )
    rows = _rows_of(storage)
    if max_size is not None and max_size != rows:
        raise ValueError(
            f"The max-size and the storage shape mismatch: got max_size={max_size} for data "
            f"of {rows} rows; TensorStorage(data) holds exactly its rows (drop max_size, or "
            "build LazyTensorStorage(max_size) and extend it with the data)"
        )
    return rows, storage


def _rows_of(data: Any) -> int:
    from torch.utils._pytree import tree_leaves

    from mixreplay.data_types import as_batch

    data = as_batch(data)
    shape = getattr(data, "batch_size", None)
    if shape is None:
        leaves = [x for x in tree_leaves(data) if isinstance(x, torch.Tensor)]
        shape = leaves[0].shape if leaves else None
    if not shape:
        raise ValueError(
            f"TensorStorage(data) needs rows along a first dimension, got {type(data).__name__}"
            f"{'' if shape is None else ' with no batch dimension'}"
        )
    return int(shape[0])


def _has_no_device(data: Any) -> bool:
    """Whether ``data`` is a TensorDict or tensorclass built without a ``device``."""
    return (isinstance(data, TensorDictBase) or is_tensorclass(data)) and data.device is None


def _device_of(data: Any) -> torch.device:
    from torch.utils._pytree import tree_leaves

    device = getattr(data, "device", None)
    if device is None:
        leaves = [x for x in tree_leaves(data) if isinstance(x, torch.Tensor)]
        device = leaves[0].device if leaves else None
    return torch.device(device or "cpu")


def _check_grid_args(storage: Any, data: Any, torchrl_kwargs: dict[str, Any]) -> None:
    """Refuse what an ndim=2 ring does not do, naming the way."""
    name = type(storage).__name__
    if storage.dedup_next:
        raise ValueError(
            f"{name}(ndim=2, dedup_next=True) is not supported: dedup_next reads each next "
            "value from the following row of an episode, and a grid's rows interleave its "
            "columns; use ndim=1 (rb.extend(data.reshape(-1)), env by env) to deduplicate"
        )
    if data is not None:
        raise ValueError(
            f"{name}(data, ndim=2) is not supported: build LazyTensorStorage(n, ndim=2) and "
            "extend it with the [n, width] data"
        )
    if torchrl_kwargs.get("shared_init"):
        raise ValueError(
            f"{name}(ndim=2, shared_init=True) is not supported: a grid's width is fixed by "
            "its first write, in one process; share an ndim=1 ring instead"
        )


def leading_dims(data: Any, k: int) -> tuple[int, ...]:
    """The first ``k`` dims of ``data`` (its batch dims, or its first tensor's); a
    ``ValueError`` when it has fewer."""
    from torch.utils._pytree import tree_leaves

    from mixreplay.data_types import as_batch, is_collection

    data = as_batch(data)
    if is_collection(data):
        shape = tuple(data.batch_size)
    else:
        leaves = [x for x in tree_leaves(data) if isinstance(x, torch.Tensor)]
        shape = tuple(leaves[0].shape) if leaves else ()
    if len(shape) < k:
        want = "[width]" if k == 1 else "[n, width]"
        raise ValueError(
            f"an ndim=2 storage takes {want} data here (steps of dim 0, each of width "
            f"rows), got {type(data).__name__} of leading shape {list(shape)}"
        )
    return tuple(int(d) for d in shape[:k])


def grid_rows(data: Any) -> Any:
    """``[n, width, ...]`` data (a TensorDict, tensorclass, tensor or pytree of tensors) as
    ``[n * width, ...]`` rows: each step of dim 0 gives ``width`` consecutive rows."""
    from torch.utils._pytree import tree_map

    from mixreplay.data_types import as_batch, is_collection

    data = as_batch(data)
    if is_collection(data):
        if isinstance(data, LazyStackedTensorDict):
            data = data.contiguous()  # a stack along dim 1 (a collector's steps) as one block
        return data.flatten(0, 1)
    return tree_map(lambda x: x.flatten(0, 1) if isinstance(x, torch.Tensor) else x, data)


def _first_row(data: Any) -> Any:
    """Element 0 of ``[width, ...]`` data."""
    from torch.utils._pytree import tree_map

    from mixreplay.data_types import as_batch, is_collection

    data = as_batch(data)
    if is_collection(data):
        return data[0]
    return tree_map(lambda x: x[0] if isinstance(x, torch.Tensor) else x, data)


class MemoryMappedColumn(MemoryMappedTensor):
    """A column of a ``LazyMemmapStorage``'s rows, as TorchRL shows it: a ``MemoryMappedTensor``
    naming the file that holds it. The file holds packed rows, not this column alone, so a
    copy (pickle, ``torch.save``, ``deepcopy``) is of the values, as a plain tensor."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        return torch.Tensor.__reduce_ex__(self.as_subclass(torch.Tensor).clone(), protocol)

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).clone()


def grid_key(index: Any) -> Any:
    """``index`` as torch indexes a grid of slots (lists and ranges as tensors)."""
    if isinstance(index, range):
        return torch.arange(index.start, index.stop, index.step)
    if isinstance(index, list):
        return torch.as_tensor(index)
    if isinstance(index, tuple):
        return tuple(grid_key(i) for i in index)
    return index


def _last_of_each(index: torch.Tensor, data: TensorDictBase) -> tuple[torch.Tensor, Any]:
    """``index`` with each slot once and the rows of ``data`` for them: a slot named several
    times gets its last row (as a sequence of writes would leave it)."""
    unique, inverse = torch.unique(index, return_inverse=True)
    if unique.numel() == index.numel():
        return index, data
    last = torch.full_like(unique, -1).scatter_reduce_(
        0, inverse, torch.arange(index.numel(), device=index.device), reduce="amax"
    )
    return unique, data[last.cpu()]


def _slots(cursor: Any, max_size: int) -> tuple[torch.Tensor, bool]:
    """``(slots, one_row)`` for TorchRL's ``set(cursor, ...)``: an int names one row."""
    if isinstance(cursor, int) or (isinstance(cursor, torch.Tensor) and cursor.ndim == 0):
        index = torch.tensor([int(cursor)])
        single = True
    elif isinstance(cursor, slice):
        index = torch.arange(*cursor.indices(max_size))
        single = False
    else:
        index = torch.as_tensor(cursor if not isinstance(cursor, range) else list(cursor))
        single = False
        if index.dtype == torch.bool or index.is_floating_point():
            raise IndexError(f"set() takes integer slots, got a {index.dtype} tensor")
        index = index.reshape(-1).to(torch.int64)
    index = torch.where(index < 0, index + max_size, index)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= max_size):
        raise IndexError(
            f"set() slots must be in 0..{max_size - 1} (the storage's capacity), got "
            f"{index.tolist()[:8]}"
        )
    return index, single


class TensorStorage(RingCounters, PackedStorage):
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
        ndim: TorchRL's storage dimensions: 1 (a ring of rows) or 2 (TorchRL's grid:
            ``[n, width]`` writes, dim 0 the one extended, ``width`` fixed by the first
            write; stored as ``width`` consecutive rows per step of dim 0, for
            ``ceil(max_size / width) * width`` rows in all, as in TorchRL). ``len`` counts
            the elements of the grid, ``storage[i]`` reads it by its dims, ``set`` takes
            steps of dim 0. See :func:`~mixreplay.storages.base.check_ndim`.
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
    #: whether rows and counters are shared between processes (:mod:`mixreplay.storages.shared`)
    shared: bool = False
    #: whether the first positional argument may be existing data (TorchRL's TensorStorage)
    _wraps_data: bool = True
    #: TorchRL's storage dimensions (see ``ndim``), and the rows per step along dim 0 (``None``
    #: for a grid whose first write has not fixed it yet)
    _ndim: int = 1
    _width: int | None = 1

    def __new__(cls, *args: Any, dedup_next: bool = False, **kwargs: Any) -> TensorStorage:
        # dedup_next=True builds the deduplicating variant of the class asked for, so
        # the plain ring's extend and gather stay free of any dedup branch.
        if check_bool(dedup_next, "dedup_next") and not cls.dedup_next:
            cls = DEDUP_HOOKS.build(cls)
        return super().__new__(cls)

    def __init__(
        self,
        storage: Any = None,
        max_size: int | None = None,
        *,
        device: torch.device | str | None = None,
        ndim: int = 1,
        dedup_next: bool = False,
        **torchrl_kwargs: Any,
    ):
        super().__init__()
        self._ndim = check_ndim(ndim)
        data = None
        if self._wraps_data:
            # TorchRL's TensorStorage(storage, max_size=None): a storage over existing data;
            # mixreplay's TensorStorage(max_size) and TensorStorage(max_size=n): a ring
            max_size, data = _existing_data(storage, max_size)
        else:  # the lazy rings: LazyTensorStorage(max_size), which passes it first
            max_size = storage
        check_storage_args(type(self).__name__, torchrl_kwargs)
        self.max_size = check_int(max_size, "max_size", min=1, what="a positive number of rows")
        self._asked = self.max_size  # an ndim=2 grid rounds it up to whole steps of its width
        if self._ndim > 1:
            self._width = None
            _check_grid_args(self, data, torchrl_kwargs)
        if device == "auto":
            if data is None:
                raise ValueError(
                    f"{type(self).__name__}(device='auto') is only meaningful with existing "
                    "data (TensorStorage(data)): a ring's device is fixed when it is built; "
                    "pass the device your rows go to, e.g. device='cpu'"
                )
            device = _device_of(data)
        self.device = as_device(device)
        self._layout = None
        self._rows = None
        self._cursor = 0
        self._len = 0
        self._write_count = 0
        self._scratch: tuple[RowLayout, torch.Tensor, dict[int, list[torch.Tensor]]] | None = None
        if data is not None:
            self.set(torch.arange(self.max_size), data)
            # TorchRL reads the data back as it was given: TensorDicts (and tensorclasses)
            # built without a device keep none, the leaves staying on the storage's device
            self._read_device_unset = device is None and _has_no_device(data)
        if torchrl_kwargs.get("shared_init"):
            SHARE_HOOKS(self)  # TorchRL's shared_init=True: rows any process may allocate

    def __len__(self) -> int:
        return self._len

    @property
    def ndim(self) -> int:
        """TorchRL's storage dimensions: 1 (rows) or 2 (a grid; see the class docs)."""
        return self._ndim

    @property
    def width(self) -> int:
        """Rows per step along dim 0: 1 for rows; a grid's second dim once the first write has
        fixed it (0 before)."""
        return self._width or 0

    @property
    def shape(self) -> torch.Size:
        """TorchRL's shape: ``[len]`` for rows, ``[len // width, width]`` for a grid."""
        if self._ndim == 1:
            return torch.Size([self._len])
        return torch.Size([self._len // self._width, self._width] if self._width else [0, 0])

    def _fix_width(self, width: int) -> bool:
        """Fix a grid's width at its first write (caller holds the lock): the capacity becomes
        whole steps of it. Whether it was fixed now (:meth:`_unfix_width` undoes that)."""
        if self._width is not None:
            if width != self._width:
                raise SchemaMismatchError(
                    f"this ndim=2 storage holds steps of width {self._width} (its dim 1), got "
                    f"data of width {width}; write [n, {self._width}] data (or build another "
                    "storage for this width)"
                )
            return False
        self._width = width
        self.max_size = -(-self._asked // width) * width
        return True

    def _unfix_width(self) -> None:
        """Forget a width fixed by a write that failed before anything was allocated."""
        if self._layout is None:
            self._width, self.max_size = None, self._asked

    def _extend_grid(self, data: Any) -> torch.Tensor:
        """:meth:`extend` of an ndim=2 grid: ``[n, width]`` data, written as ``n * width`` rows."""
        if not isinstance(data, TensorDictBase) or data.batch_dims < 2:
            got = list(data.batch_size) if isinstance(data, TensorDictBase) else None
            raise ValueError(
                f"an ndim=2 storage is extended with [n, width] data (n steps of dim 0), got "
                f"{type(data).__name__}{'' if got is None else f' with batch_size={got}'}"
            )
        return self.extend_steps(grid_rows(data), int(data.batch_size[1]))

    def extend_steps(self, rows: TensorDictBase, width: int) -> torch.Tensor:
        """Write ``rows`` (``[n * width]``, as :func:`grid_rows` lays them out) as ``n`` steps
        of an ndim=2 grid of ``width``; return their flat slots."""
        if self._ndim == 1 or check_rows(rows) % width:
            raise ValueError(
                f"extend_steps writes whole steps of an ndim=2 grid: got {rows.batch_size[0]} "
                f"rows for width {width} on a storage of ndim={self._ndim}"
            )
        with self.lock:
            fixed = self._fix_width(width)
            try:
                return self._extend_rows(rows)
            except BaseException:
                if fixed:
                    self._unfix_width()
                raise

    def grid_index(self, slots: torch.Tensor) -> torch.Tensor:
        """TorchRL's index of flat ``slots``: ``[k, 2]`` (step along dim 0, column) for an
        ndim=2 grid; the slots themselves for rows."""
        if self._ndim == 1:
            return slots
        width = self.width or 1
        return torch.stack([slots.div(width, rounding_mode="floor"), slots.remainder(width)], -1)

    def __getitem__(self, index: Any) -> Any:
        """Rows by position; a grid (ndim=2) by its dims, as TorchRL's ``storage[index]``
        (``storage[i]`` is step ``i`` of dim 0, ``storage[i, j]`` one element)."""
        if self._ndim == 1:
            return super().__getitem__(index)
        return self.get_grid(index)

    def get_grid(self, index: Any, swap: int = 0) -> Any:
        """An ndim=2 grid's elements at ``index`` (as ``storage[index]``); with ``swap``, dims
        ``swap`` and 0 of the result swapped when it has them (TorchRL's ``rb[index]`` with
        ``dim_extend=swap``)."""
        with self.lock:
            slots = self.grid_slots(index)
            td = self.gather_unlocked(slots.reshape(-1))
            codec = self.codec
        td = td[0] if slots.dim() == 0 else td.reshape(slots.shape)
        if swap and td.batch_dims > swap:
            td = td.transpose(swap, 0)
        return td if codec is None else codec.decode(td)

    def grid_slots(self, index: Any) -> torch.Tensor:
        """The flat slots of an ndim=2 grid's elements at ``index`` (as ``storage[index]``
        reads them), shaped as the elements (a 0-dim tensor for one)."""
        with self.lock:
            n, width = self._len, self._width
            if self._layout is None or n == 0 or not width:
                raise IndexError("the storage holds no rows yet")
            grid = torch.arange(n, device=self.device).view(n // width, width)
            return grid[grid_key(index)]

    @property
    def nbytes(self) -> int:
        """Bytes held by the allocated rows (capacity × row bytes), 0 before the first write."""
        return 0 if self._rows is None else self.max_size * self.row_bytes

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        # 2 MiB aligned on transparent huge pages where the OS offers them (opt out:
        # MIXREPLAY_HUGEPAGES=0); plain zeros otherwise
        return _hugepages.zeros(self.max_size, layout.row_words, torch.device(self.device))

    def _pack(self, data: TensorDictBase, layout: RowLayout) -> torch.Tensor:
        """The rows of ``data`` as new packed words on this storage's device (validated whole)."""
        return layout.pack(data, device=self.device)

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``) and return the slots written.

        When ``n`` exceeds the capacity, only the last ``max_size`` rows are kept
        (earlier ones would be overwritten within the same call anyway). An ndim=2 grid
        takes ``[n, width]`` data: ``n`` steps of dim 0, ``n * width`` rows, whose flat
        slots are returned (:meth:`grid_index` gives TorchRL's ``[k, 2]`` index of them).
        """
        if self._ndim > 1:
            return self._extend_grid(data)
        return self._extend_rows(data)

    def add(self, row: TensorDictBase) -> int:
        """Write one row and return its slot; for an ndim=2 grid, one step of dim 0 (a
        ``[width]`` TensorDict) and its first slot."""
        if self._ndim > 1:
            if not isinstance(row, TensorDictBase) or row.batch_dims < 1:
                raise ValueError(
                    "add() of an ndim=2 storage takes one step of dim 0: a [width] TensorDict"
                )
            return int(self.extend(row.unsqueeze(0))[0])
        return super().add(row)

    def _extend_rows(self, data: TensorDictBase) -> torch.Tensor:
        n = check_rows(data)
        layout = self._layout
        if layout is not None:
            # Validated whole first (keys, dtypes, shapes; values detached and moved). Rows
            # that overwrite stored ones are packed into reused staging rows first and
            # committed with one copy per run of slots: a write that fails, however,
            # never leaves a torn row.
            leaves = layout.leaves_on(data, self.device)
            with self.lock:
                if self._layout is layout:
                    start = self._cursor
                    try:
                        if start == self._len and start + n <= self.max_size:
                            # Filling slots that hold no row yet: no reader can see them
                            # until the counters move, so the rows go straight in (one pass).
                            rows = self._rows
                            assert rows is not None
                            layout.write(leaves, layout.group_views(rows[start : start + n]))
                            return self._advance(start, n)
                        words = self._stage(layout, leaves, n)
                    except RuntimeError:  # torch's words for a sparse leaf: name it, and the fix
                        for f, v in zip(layout.fields, leaves):
                            check_dense(f.key, v)
                        raise
                    return self._commit(words, n)
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

    @property
    def _storage(self) -> Any:
        """Every slot (``max_size`` rows, filled or not) as the stored type (TorchRL's
        ``storage._storage``): views of the packed rows, so writing to them writes the
        storage. ``None`` before the first write."""
        if self.dedup_next:  # its rows hold each next value once: no view of every slot
            raise AttributeError(f"{type(self).__name__} has no _storage (dedup_next=True)")
        layout, rows = self._layout, self._rows
        if layout is None or rows is None:
            return None
        td = self._file_views(layout.unpack(rows, self.device))
        if self._ndim > 1 and self._width:
            td = td.reshape(self.max_size // self._width, self._width)
        return td if self.codec is None else self.codec.decode(td)

    def _file_views(self, td: TensorDictBase) -> TensorDictBase:
        """The columns of :attr:`_storage` as they are kept (a memory-mapped storage's say
        which file holds them)."""
        return td

    def _init(self, datum: Any) -> None:
        """Allocate the rows for data shaped like ``datum`` (one row) without writing it
        (TorchRL's ``storage._init``); a storage that holds rows is left as it is."""
        with self.lock:
            if self._layout is not None:
                return
            if self._ndim > 1:  # one step of dim 0: [width] rows
                fixed = self._fix_width(leading_dims(datum, 1)[0])
                try:
                    rows, codec = to_rows(one_row(_first_row(datum)), None, True)
                except BaseException:
                    if fixed:
                        self._unfix_width()
                    raise
                layout = RowLayout(Schema.from_tensordict(rows))
                self._rows, self._layout = self._allocate(layout), layout
                self.codec = codec
                return
            rows, codec = to_rows(one_row(datum), None, True)
            layout = RowLayout(Schema.from_tensordict(rows))
            self._rows, self._layout = self._allocate(layout), layout
            self.codec = codec

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at slots ``cursor`` (TorchRL's ``Storage.set``).

        ``cursor`` is an int (``data`` is one row) or slots (a slice, range, list or tensor;
        ``data`` holds one row per slot), anywhere in ``0 .. max_size - 1``. With
        ``set_cursor=True`` (TorchRL's default) the rows count as written: the length
        grows by their number (up to the capacity), as do the write count and the
        cursor. With ``set_cursor=False`` stored rows are replaced in place.
        Any data type a buffer takes may be written (see :mod:`mixreplay.data_types`);
        it is checked and packed whole before any stored byte changes.
        """
        if self.dedup_next:
            raise TypeError(
                "set() is not supported with dedup_next=True (its next values are read from "
                "the following rows); write rows in order with extend()"
            )
        if self._ndim > 1:
            self._set_grid(cursor, data, set_cursor)
            return
        index, single = _slots(cursor, self.max_size)
        if single:
            data = one_row(data)
        self._set_rows(index, data, set_cursor)

    def _set_grid(self, cursor: Any, data: Any, set_cursor: bool) -> None:
        """:meth:`set` of an ndim=2 grid: ``cursor`` names steps of dim 0 (an int: ``data`` is
        one step, ``[width]``; else ``[k, width]``), each written as ``width`` rows."""
        single = isinstance(cursor, int) or (isinstance(cursor, torch.Tensor) and cursor.ndim == 0)
        width = leading_dims(data, 1 if single else 2)[-1]
        with self.lock:
            fixed = self._fix_width(width)
            try:
                steps, _ = _slots(cursor, self.max_size // width)
                index = (steps.unsqueeze(1) * width + torch.arange(width)).reshape(-1)
                self._set_rows(index, data if single else grid_rows(data), set_cursor)
            except BaseException:
                if fixed:
                    self._unfix_width()
                raise

    def _set_rows(self, index: torch.Tensor, data: Any, set_cursor: bool) -> None:
        with self.lock:
            layout = self._layout
            rows, codec = to_rows(data, self.codec, layout is None)
            n = int(rows.batch_size[0]) if rows.batch_dims else 0
            if n != index.numel():
                raise ValueError(
                    f"set() got {n} rows for {index.numel()} slots; give one row per slot"
                )
            if n == 0:
                return
            layout = layout or RowLayout(Schema.from_tensordict(rows))
            words = self._pack(rows, layout)  # raises before any stored byte changes
            if self._layout is None:
                self._rows, self._layout = self._allocate(layout), layout
            assert self._rows is not None
            self._rows.index_copy_(0, index.to(self._rows.device), words)
            self.codec = codec
            if not set_cursor:  # rows replaced where they are: slots and counters stay
                self._bump_rewrites()
                return
            self._len = min(self.max_size, self._len + n)
            self._write_count += n
            self._cursor = (
                self._len if self._len < self.max_size else (int(index[-1]) + 1) % self.max_size
            )
            self._bump_generation()

    def rewrite(self, index: torch.Tensor, data: Any) -> None:
        """Replace the rows in filled slots ``index`` with ``data`` (a TensorDict ``[k]``), in
        place (see :meth:`Storage.rewrite <mixreplay.storages.base.Storage.rewrite>`).

        ``data`` may hold some of the stored keys (the others keep their values) and, unless
        :meth:`keep_keys` was called, keys the rows do not have yet: every row then gets
        them, zero where not written (TorchRL's meaning), and the rows are repacked once. A
        slot named twice gets its last row. Refused (nothing changes): a slot that holds no
        row (``IndexError``), a dtype or per-row shape that differs from the stored one
        (:class:`~mixreplay.errors.SchemaMismatchError`), a new key where the layout is
        fixed (a shared ring, ``dedup_next=True``, rows of another type than TensorDicts,
        a layout a reader relies on).
        """
        name = type(self).__name__
        if self.dedup_next:
            raise TypeError(
                f"{name}(dedup_next=True) does not support in-place writes: a row's next values "
                "are read from the following row, which a rewrite would change too; build the "
                "storage without dedup_next to rewrite rows"
            )
        if not isinstance(data, TensorDictBase) or data.batch_dims != 1:
            raise TypeError(
                f"an in-place write takes a TensorDict of rows [k], got {type(data).__name__}"
                + (
                    f" with batch_size={list(data.batch_size)}"
                    if isinstance(data, TensorDictBase)
                    else ""
                )
            )
        with self.lock:
            n, layout, rows = self._len, self._layout, self._rows
            index = index.reshape(-1).to(torch.int64)
            k = index.numel()
            if int(data.batch_size[0]) != k:
                raise ValueError(
                    f"an in-place write got {int(data.batch_size[0])} rows for {k} slots; give "
                    "one row per slot"
                )
            if layout is None or rows is None or n == 0:
                raise IndexError(
                    f"{name} holds no rows yet: an in-place write replaces rows that are held; "
                    "write new rows with extend()"
                )
            if k and (int(index.min()) < 0 or int(index.max()) >= n):
                bad = int(index.min()) if int(index.min()) < 0 else int(index.max())
                raise IndexError(
                    f"slot {bad} holds no row ({name} holds {n} rows, slots 0..{n - 1}); an "
                    "in-place write replaces rows that are held: write new rows with extend()"
                )
            if k == 0:
                return
            index, data = _last_of_each(index.to(rows.device), data)
            data = data.to(self.device) if data.device != self.device else data
            current = self.gather_unlocked(index)
            added = [
                key for key in data.keys(True, True) if normalize_key(key) not in layout.schema
            ]
            target = layout
            if added:
                self._check_new_keys(added)
                for key in added:
                    check_dense(key, data.get(key))
                    try:
                        current.set(key, data.get(key))
                    except KeyError:  # a key under a stored leaf: ("obs", "x") with "obs" a tensor
                        raise SchemaMismatchError(
                            f"an in-place write adds the key {format_key(normalize_key(key))} "
                            "under a stored value that is a tensor, not a TensorDict; write it "
                            "under a new key"
                        ) from None
                target = RowLayout(Schema.from_tensordict(current))
            try:
                current.update(data.exclude(*added) if added else data)
            except RuntimeError as err:
                raise SchemaMismatchError(
                    f"an in-place write's rows do not fit the stored rows ({err}); write values "
                    "of the stored per-row shapes"
                ) from None
            words = target.pack(current, device=rows.device)  # raises before any byte changes
            if target is not layout:
                rows = self._relayout(target, frozenset(normalize_key(key) for key in added))
            rows.index_copy_(0, index, words)
            self._bump_rewrites()

    #: whether :meth:`rewrite` may add keys: ``False`` once a reader relies on the layout
    _keys_fixed: bool = False

    def keep_keys(self) -> None:
        """Refuse in-place writes that add keys from now on: a reader (a mixing buffer) gathers
        these rows by their packed layout, which must stay as it is."""
        self._keys_fixed = True

    def _check_new_keys(self, added: list[Any]) -> None:
        """Refuse keys ``added`` by an in-place write where the layout cannot grow."""
        why = None
        if self.shared:
            why = "its rows are shared with other processes, which map them by their layout"
        elif self._keys_fixed:
            why = "a mixing buffer draws its rows by their packed layout"
        elif self.codec is not None:
            why = f"it holds {self.codec.describe()} rows, whose fields are fixed"
        if why is None:
            return
        held = ", ".join(format_key(f.key) for f in self._layout.fields) if self._layout else ""
        names = ", ".join(format_key(normalize_key(key)) for key in added)
        raise SchemaMismatchError(
            f"an in-place write adds the key(s) {names}, which the stored rows lack (they hold "
            f"[{held}]), and {type(self).__name__} cannot add keys here: {why}. Write only the "
            "stored keys (data.select(...)), or extend a new buffer whose rows have the new keys"
        )

    def _relayout(self, layout: RowLayout, added: frozenset[Any]) -> torch.Tensor:
        """Repack every slot into ``layout``, the stored one plus keys ``added`` (zero in every
        row); return the new rows (caller holds the lock)."""
        old_layout, old_rows = self._layout, self._rows
        assert old_layout is not None and old_rows is not None
        held = old_layout.unpack(old_rows, self.device)
        leaves = [
            held.get(f.key)
            if f.key not in added
            else torch.zeros((self.max_size, *f.shape), dtype=f.dtype, device=self.device)
            for f in layout.fields
        ]
        rows = self._allocate(layout)
        layout.write(leaves, layout.group_views(rows))
        self._rows, self._layout, self._scratch = rows, layout, None
        log.debug("repacked %d rows for the new keys %s", self.max_size, sorted(added))
        return rows

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
        if n > _SMALL_WRITE:
            layout.write(leaves, layout.group_views(scratch[1][:n]))
            return scratch[1][:n]
        views = scratch[2].get(n)
        if views is None:  # an environment step's size: keep its views, one per leaf
            views = scratch[2][n] = layout.split(scratch[1][:n])
        layout.write_leaves(leaves, views)
        return scratch[1][:n]

    def _commit(self, words: torch.Tensor, n: int) -> torch.Tensor:
        """Copy packed rows into the ring at the cursor (caller holds the lock).

        Whole rows are copied and the counters move last, so a write interrupted
        (``KeyboardInterrupt``) between two copies leaves whole rows, and retried lands
        on the same slots.
        """
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
        cursor, length, count = (start + n) % cap, min(cap, self._len + n), self._write_count + n
        revision = self._revision + 1
        # one statement without calls: an interrupt never moves one counter without the others
        self._cursor, self._len, self._write_count, self._revision = cursor, length, count, revision
        if n == 1:  # an environment step: a new one-slot tensor is cheaper made by full
            return torch.full((1,), start, dtype=torch.int64, device=self.device)
        index = torch.arange(start, start + n, device=self.device)
        return index if start + n <= cap else index % cap

    def __getstate__(self) -> dict[str, Any]:
        if not self.shared and get_spawning_popen() is not None:
            # torch would map the rows into the new process, but not the counters: its
            # writes would land in rows this process never counts (or tear rows it reads)
            raise RuntimeError(
                f"this {type(self).__name__} is not shared between processes, and is being "
                "sent to a new process: build the buffer with shared=True (or call "
                "rb.share() before starting the process)"
            )
        state = super().__getstate__()
        state["_scratch"] = None
        return state

    def empty(self) -> None:
        """Forget every row (the allocation and schema are kept)."""
        with self.lock:
            self._cursor = self._len = 0
            self._bump_generation()

    # -- state ---------------------------------------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The filled rows (slot order), cursor, fill and write count; capacity and schema."""
        with self.lock:
            layout = self._layout
            rows = None
            if layout is not None:
                rows = self.rows.clone() if copy else self.rows
            out = {
                **saved_header(self, self._len, schema=None if layout is None else layout.schema),
                "rows": rows,
                "codec": None if self.codec is None else self.codec.to_json(),
            }
            if self._ndim > 1:  # a grid: its dims (a ring of rows saves none, as it always did)
                out["ndim"], out["width"] = self._ndim, self._width
            return out

    def _check_header(
        self, state: Any, max_size: int | None = None
    ) -> tuple[int, int, int, RowLayout | None]:
        """``(len, cursor, write_count, layout)`` of a saved ring, checked against this one
        (of ``max_size`` rows: this ring's, unless a grid's saved width sets it).

        ``layout`` is ``None`` for a ring saved before its first write.
        """
        length, cursor, write_count = check_saved_header(
            state, self.max_size if max_size is None else max_size
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
            lines = self._layout.schema.differences(
                layout.schema, names=("storage", "state"), ignore_one_sided=frozenset()
            )
            raise CheckpointError(
                f"the saved rows do not match this storage's ({'; '.join(lines)}); load them "
                "into a storage whose rows have the saved keys, dtypes and shapes"
            )
        return length, cursor, write_count, layout

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        if isinstance(state, dict) and state.get("dedup_next"):
            # a ring saved with dedup_next=True: its rows, each next value restored
            state = DEDUP_HOOKS.expand(state)
        width, cap = self._saved_grid(state)
        length, cursor, write_count, layout = self._check_header(state, cap)
        if width is not None and (length % width or cursor % width):
            raise CheckpointError(
                f"inconsistent ndim=2 storage (len={length}, cursor={cursor} are not whole steps "
                f"of its width {width}); the state is corrupt"
            )
        if layout is None:

            def restore_empty() -> None:
                self._cursor = self._len = 0
                self._write_count = write_count
                self._bump_generation()

            return restore_empty
        rows = check_saved_rows(state.get("rows"), length, layout.row_words)
        codec = self._saved_codec(state.get("codec"), layout.schema)

        def restore() -> None:
            if width is not None:
                self._width, self.max_size = width, cap
            if self._rows is None or self._layout != layout:
                self._rows, self._layout = self._allocate(layout), layout
            self._rows[:length].copy_(rows)
            self._cursor, self._len, self._write_count = cursor, length, write_count
            self.codec = codec
            self._bump_generation()

        return restore

    def _saved_grid(self, state: Any) -> tuple[int | None, int]:
        """``(width, max_size)`` a saved state gives this ring: a grid's saved width (``None``
        for rows, or a grid saved before its first write) and the capacity it implies."""
        saved = state.get("ndim", 1) if isinstance(state, dict) else 1
        if saved != self._ndim:
            raise CheckpointError(
                f"the saved storage has ndim={saved}, this one ndim={self._ndim}; load it into "
                f"a storage built with ndim={saved}"
            )
        width = state.get("width") if self._ndim > 1 else None
        if width is None:
            return None, self.max_size
        width = check_saved_int(width, "storage width", min=1)
        if self._width is not None and width != self._width:
            raise CheckpointError(
                f"the saved storage holds steps of width {width}, this one of width "
                f"{self._width}; load it into an ndim=2 storage of that width (or a new one)"
            )
        return width, -(-self._asked // width) * width

    def _saved_codec(self, saved: Any, schema: Schema) -> Any:
        """The data type a saved state's rows (of ``schema``) were written as, checked against
        those rows and this storage's."""
        mine = self.codec
        if mine is not None and saved == mine.to_json():
            return mine
        try:
            codec = codec_from_json(saved, schema)
        except ImportError as err:
            raise CheckpointError(
                f"the saved rows are {saved.get('class')} instances, and that class cannot be "
                f"imported ({err}); load them into a storage that already holds that class"
            ) from None
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"the saved data type ('codec') is invalid: {err}") from None
        if self._layout is not None and codec != mine:
            held = "TensorDict rows" if mine is None else mine.describe()
            got = "TensorDict rows" if codec is None else codec.describe()
            raise CheckpointError(
                f"the saved rows are {got}, this storage holds {held}; load them into a "
                "storage of the same data type"
            )
        return codec

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={self._len}, "
            f"device={self.device}, row_bytes={self.row_bytes})"
        )


class LazyTensorStorage(TensorStorage):
    """A ring of packed rows in memory (CPU or any torch device).

    TorchRL's other arguments are honoured or refused: ``compilable`` (``False``),
    ``consolidated`` (either: rows are always packed into one tensor), ``shared_init``
    (``True``: the ring is shared between processes from the start, see
    :mod:`mixreplay.storages.shared`), ``cleanup_memmap``.

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

    _wraps_data = False

    def __init__(
        self,
        max_size: int,
        *,
        device: torch.device | str | None = None,
        ndim: int = 1,
        dedup_next: bool = False,
        **torchrl_kwargs: Any,
    ):
        super().__init__(
            max_size, device=device, ndim=ndim, dedup_next=dedup_next, **torchrl_kwargs
        )


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


def _remove_file(path: str) -> bool:
    """Remove ``path`` if it still exists; whether it did."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _cleanup_file(path: str, directory: str | None) -> bool:
    """What ``auto_cleanup`` runs when a storage is collected or the process exits:
    remove its file, then its directory once empty (TorchRL's ``cleanup``)."""
    removed = _remove_file(path)
    if directory is not None:
        try:
            os.rmdir(directory)  # only an empty directory: other files are never ours
        except OSError:
            pass
    return removed


def _nothing_to_remove() -> bool:
    return False


def map_scratch_file(
    directory: str | None, prefix: str, nbytes: int, *, keep: bool
) -> tuple[torch.Tensor, str | None]:
    """A new file of ``nbytes`` (blocks reserved) mapped as an ``int64`` tensor.

    In a default temporary directory (``directory=None``) the file is unlinked as soon as
    it is mapped, unless ``keep``: the mapping keeps its blocks alive and the kernel frees
    them when the last mapping goes, so nothing is left behind whatever ends the process
    (a crash, ``SIGKILL``). In a given directory the file stays visible and its path is
    returned, for its owner to remove.

    Returns:
        ``(words, path)``: ``path`` is ``None`` for a file already unlinked.
    """
    temp = directory is None
    if directory is None:
        directory = tempfile.mkdtemp(prefix="mixreplay-")
    else:
        os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".bin", dir=directory)
    try:
        _reserve(fd, nbytes, path)
        words = torch.from_file(path, shared=True, size=nbytes // 8, dtype=torch.int64)
    except BaseException:
        os.close(fd)
        _remove_file(path)
        if temp:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    os.close(fd)
    if temp and not keep:
        _remove_file(path)
        shutil.rmtree(directory, ignore_errors=True)
        return words, None
    return words, path


class LazyMemmapStorage(TensorStorage):
    """A ring of packed rows in a memory-mapped file, allocated from the first write.

    The file (``max_size`` × row bytes) has its blocks reserved up front: a disk too
    full for it raises an :class:`OSError` naming the path and the bytes needed.
    Without ``scratch_dir`` it is made in the temporary directory and unlinked as soon
    as it is mapped: nothing is left on disk whatever ends the process (a crash,
    ``SIGKILL``), and its blocks are freed when the storage is. With ``scratch_dir``
    the file is visible there (``storage.filename``), several storages may share the
    directory (each has its own ``rows-*.bin``, never overwritten), and, as in TorchRL,
    it stays after the process unless ``auto_cleanup=True`` (then it is removed, with
    ``scratch_dir`` once empty, when the storage is garbage collected or the process
    exits). :meth:`close` and :meth:`cleanup` remove it at once.

    Args:
        max_size: capacity in rows.

    Keyword Args:
        scratch_dir: directory for the backing file (created if missing).
        device: must be CPU (memory maps live in host memory).
        existsok: TorchRL's permission to overwrite existing files; mixreplay never
            overwrites a file (each storage makes its own), so both values mean that.
        auto_cleanup: remove the files when the storage is collected or the process
            exits; by default ``True`` without ``scratch_dir`` and ``False`` with one
            (TorchRL's defaults). ``False`` without ``scratch_dir`` keeps the file in its
            temporary directory (``storage.filename``).
        dedup_next: keep each next value once (see :class:`TensorStorage`); the rows
            and the next values kept apart both live in files of ``scratch_dir``.
        compilable, shared_init: TorchRL's (see :class:`LazyTensorStorage`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyMemmapStorage
        >>> storage = LazyMemmapStorage(1000)
        >>> _ = storage.extend(TensorDict({"obs": torch.ones(5, 2)}, [5]))
        >>> storage[4]["obs"]
        tensor([1., 1.])
        >>> storage.filename is None  # unlinked once mapped: nothing to leave behind
        True
        >>> storage.close()
    """

    _wraps_data = False

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike[str] | None = None,
        device: torch.device | str | None = None,
        ndim: int = 1,
        existsok: bool = False,
        auto_cleanup: bool | None = None,
        dedup_next: bool = False,
        **torchrl_kwargs: Any,
    ):
        shared_init = torchrl_kwargs.pop("shared_init", False)  # shared once fully built
        super().__init__(
            max_size, device=device, ndim=ndim, dedup_next=dedup_next, **torchrl_kwargs
        )
        if self.device.type != "cpu":
            raise ValueError(f"LazyMemmapStorage lives in host memory; got device={self.device}")
        self.scratch_dir = (
            None
            if scratch_dir is None
            else str(check_path(scratch_dir, "scratch_dir", what="a directory path"))
        )
        self.existsok = check_bool(existsok, "existsok")
        self._scratch_dir_is_temp = self.scratch_dir is None
        # TorchRL's default: a temporary file is cleaned up, a file in a given directory kept
        self._auto_cleanup = (
            self._scratch_dir_is_temp
            if auto_cleanup is None
            else check_bool(auto_cleanup, "auto_cleanup")
        )
        self._cleaned_up = False
        self.filename: str | None = None
        self._finalizer: Callable[[], Any] | None = None
        check_storage_args(type(self).__name__, {"shared_init": shared_init})
        if shared_init:
            SHARE_HOOKS(self)

    def _map(self, prefix: str, nbytes: int) -> tuple[torch.Tensor, str | None, Callable[[], Any]]:
        """A scratch file of this storage: ``(words, path, release)``.

        ``release()`` removes the file (if it is still on disk) and returns whether it
        did. With ``auto_cleanup`` the file, and ``scratch_dir`` once empty, are also
        removed when the storage is collected or the process exits (see
        :func:`map_scratch_file`).
        """
        words, path = map_scratch_file(
            self.scratch_dir, prefix, nbytes, keep=not self._auto_cleanup
        )
        if path is None:
            return words, None, _nothing_to_remove
        auto = (
            weakref.finalize(self, _cleanup_file, path, self.scratch_dir)
            if self._auto_cleanup
            else None
        )

        def release() -> bool:
            if auto is not None:
                auto.detach()
            return _remove_file(path)

        return words, path, release

    def _file_views(self, td: TensorDictBase) -> TensorDictBase:
        """TorchRL's memmap leaves: each column a ``MemoryMappedTensor`` view whose
        ``filename`` is the file holding the rows (every column is in that one file; a file
        in the default temporary directory is unlinked once mapped, so has no name)."""
        path = self.filename
        if path is None:
            return td

        def view(column: torch.Tensor) -> torch.Tensor:
            leaf = column.as_subclass(MemoryMappedColumn)  # the same memory, no copy
            leaf.filename = path
            return leaf

        return td.apply(view)

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        words, path, release = self._map("rows-", self.max_size * layout.row_bytes)
        if self._finalizer is not None:  # a re-allocation (restore of another layout)
            self._finalizer()
        self._finalizer = release
        self.filename = path
        self._cleaned_up = False
        return words.view(self.max_size, layout.row_words)

    def close(self) -> None:
        """Remove the backing file (``scratch_dir`` itself stays); the rows are gone."""
        self._close()

    def _close(self) -> bool:
        with self.lock:
            removed = False
            if self._finalizer is not None:
                removed = bool(self._finalizer())
                self._finalizer = None
            self.filename = None
            self._rows = None
            self._layout = None
            if self._ndim > 1:  # a new first write fixes the grid's width again
                self._width, self.max_size = None, self._asked
            self.codec = None
            self._cursor = self._len = 0
            self._bump_generation()
            return removed

    def cleanup(self) -> bool:
        """Remove the backing files, and ``scratch_dir`` once it is empty (TorchRL's ``cleanup``).

        Returns whether anything was removed from disk (``False`` the second time, or when
        nothing was on disk). The rows are gone, as after :meth:`close`.
        """
        if self._cleaned_up:
            return False
        removed = self._close()
        self._cleaned_up = True
        if self.scratch_dir is not None:
            try:
                os.rmdir(self.scratch_dir)  # only if empty: other files are never ours to remove
                removed = True
            except OSError:
                pass
        return removed

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_finalizer"] = None  # the copy's rows are in memory; the file stays with us
        return state
