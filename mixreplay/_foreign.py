"""Adapters for objects mixreplay did not make: TorchRL storages, buffers and datasets.

A foreign *storage* is driven as a ring by mixreplay (our cursor, our sampler,
our generator); a foreign *source* (anything with ``sample(n)`` and ``len()``,
e.g. a TorchRL ``ReplayBuffer`` or dataset) is asked to sample itself.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from mixreplay.errors import EmptyBufferError
from mixreplay.schema import BOOKKEEPING_KEYS, Schema, normalize_key
from mixreplay.storage import Locked, _as_index, check_rows

__all__ = ["ForeignSource", "ForeignStorage", "adapt_storage", "peek_schema", "strip_bookkeeping"]


def strip_bookkeeping(td: TensorDictBase, keep: Schema | None = None) -> TensorDictBase:
    """Drop sampler bookkeeping keys (``"index"``, weights) that ``keep`` does not hold."""
    drop = [k for k in BOOKKEEPING_KEYS if (keep is None or k not in keep) and k[0] in td.keys()]
    return td.exclude(*drop) if drop else td


def peek_schema(obj) -> Schema:
    """The schema of a foreign source's rows, read without drawing from its RNG if possible."""
    row = None
    for getter in (lambda: obj[:1], lambda: obj.storage[:1]):
        try:
            row = getter()
        except Exception:  # noqa: BLE001 - any failure means "try the next way"
            continue
        if isinstance(row, TensorDictBase) and row.batch_dims >= 1:
            break
        row = None
    if row is None:
        row = obj.sample(1)
    if not isinstance(row, TensorDictBase):
        raise TypeError(
            f"the offline source {type(obj).__name__} returned a {type(row).__name__}, "
            "not a TensorDict; mixreplay mixes TensorDict rows"
        )
    schema = Schema.from_tensordict(row, batch_dims=row.batch_dims)
    return schema.without(BOOKKEEPING_KEYS)


class ForeignSource:
    """An offline source mixreplay cannot read directly: it samples itself."""

    def __init__(self, obj):
        self.obj = obj
        self._schema: Schema | None = None

    def __len__(self) -> int:
        return len(self.obj)

    def available(self) -> int:
        return len(self.obj)

    @property
    def schema(self) -> Schema:
        if self._schema is None:
            self._schema = peek_schema(self.obj)
        return self._schema

    def sample(self, n: int) -> TensorDictBase:
        td = self.obj.sample(n)
        if td.batch_size[:1] != torch.Size([n]) or td.batch_dims != 1:
            td = td.reshape(-1)
        if td.batch_size[0] != n:
            raise ValueError(
                f"the offline source {type(self.obj).__name__} returned {td.batch_size[0]} rows "
                f"when asked for {n}; set its own batch_size to None or to the requested size"
            )
        return td

    def __repr__(self) -> str:
        return type(self.obj).__name__


class ForeignStorage(Locked):
    """A TorchRL ``Storage`` used as mixreplay's online ring.

    mixreplay keeps the cursor and writes with ``storage.set(index, data)``;
    reads use ``storage.get(index)``.
    """

    layout = None

    def __init__(self, storage):
        self.inner = storage
        self.max_size = int(storage.max_size)
        self.device = torch.device(getattr(storage, "device", None) or "cpu")
        super().__init__()
        self._cursor = 0
        self._write_count = 0
        self._schema: Schema | None = None

    def __len__(self) -> int:
        return len(self.inner)

    @property
    def cursor(self) -> int:
        return self._cursor

    @property
    def write_count(self) -> int:
        return self._write_count

    @property
    def schema(self) -> Schema | None:
        return self._schema

    @property
    def row_bytes(self) -> int:
        return 0 if self._schema is None else self._schema.row_nbytes

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        n = check_rows(data)
        schema = Schema.from_tensordict(data)
        if self._schema is not None:
            self._schema.check_compatible(
                schema,
                names=("stored", "written"),
                fix="write rows with the same keys, dtypes and shapes as the first write",
            )
        with self.lock:
            index = (torch.arange(n) + self._cursor) % self.max_size
            self.inner.set(index, data)
            self._schema = self._schema or schema
            self._cursor = (self._cursor + n) % self.max_size
            self._write_count += n
        return index

    def gather_unlocked(self, index: torch.Tensor) -> TensorDictBase:
        if len(self) == 0:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        td = self.inner.get(index)
        return td if self._schema is None else td.select(*self._schema.keys())

    def gather(self, index: torch.Tensor) -> TensorDictBase:
        with self.lock:
            return self.gather_unlocked(index)

    def __getitem__(self, index):
        idx = _as_index(index, len(self), torch.device("cpu"))
        td = self.gather(idx)
        return td[0] if isinstance(index, int) else td

    def column(self, key) -> torch.Tensor:
        return self.gather(torch.arange(len(self))).get(normalize_key(key))

    def empty(self) -> None:
        with self.lock:
            self.inner.empty()
            self._cursor = 0

    def reset_write_count(self) -> None:
        with self.lock:
            self._write_count = 0

    def __repr__(self) -> str:
        return f"ForeignStorage({type(self.inner).__name__}, max_size={self.max_size}, len={len(self)})"


def adapt_storage(storage) -> ForeignStorage:
    """Wrap a TorchRL ``Storage`` (anything with ``set``, ``get``, ``max_size``, ``len``)."""
    if all(hasattr(storage, a) for a in ("set", "get", "max_size", "__len__")):
        from mixreplay.storage import check_ndim

        check_ndim(getattr(storage, "ndim", 1))  # a TorchRL ndim=2 grid is not a ring of rows
        return ForeignStorage(storage)
    raise TypeError(
        f"storage must be a mixreplay storage (LazyTensorStorage, LazyMemmapStorage) or a "
        f"TorchRL Storage, got {type(storage).__name__}"
    )
