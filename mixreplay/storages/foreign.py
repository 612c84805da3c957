"""A TorchRL ``Storage`` used as mixreplay's online ring.

mixreplay keeps the cursor and the write count and writes with
``storage.set(index, data)``; reads use ``storage.get(index)``. Rows are
TensorDicts as TorchRL stores them, so a mixed batch with such a source takes
the generic (aligning) path instead of one packed gather.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.data_types import codec_from_json
from mixreplay.errors import CheckpointError, EmptyBufferError
from mixreplay.schema import Schema
from mixreplay.storages.base import (
    RingCounters,
    Storage,
    check_rows,
    check_saved_header,
    saved_header,
)

__all__ = ["ForeignStorage", "adapt_storage", "looks_like_storage"]


def looks_like_storage(obj: Any) -> bool:
    """Whether ``obj`` has what a TorchRL ``Storage`` has (and is not a buffer)."""
    return all(hasattr(obj, a) for a in ("set", "get", "max_size", "__len__")) and not hasattr(
        obj, "sample"
    )


class ForeignStorage(RingCounters, Storage):
    """A TorchRL ``Storage`` driven as a ring by mixreplay (our cursor, sampler and generator)."""

    def __init__(self, storage: Any):
        super().__init__()
        self.inner = storage
        self.max_size = int(storage.max_size)
        self.device = torch.device(getattr(storage, "device", None) or "cpu")
        self._cursor = 0
        self._write_count = 0
        self._schema: Schema | None = None

    def __len__(self) -> int:
        return len(self.inner)

    @property
    def schema(self) -> Schema | None:
        return self._schema

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        n = check_rows(data)
        schema = Schema.from_tensordict(data)
        with self.lock:
            if self._schema is not None:
                self._schema.check_compatible(
                    schema,
                    names=("stored", "written"),
                    fix="write rows with the same keys, dtypes and shapes as the first write",
                )
            index = (torch.arange(n) + self._cursor) % self.max_size
            with torch.no_grad():
                self.inner.set(index, data.detach())
            self._schema = self._schema or schema
            self._cursor = (self._cursor + n) % self.max_size
            self._write_count += n
            self._bump_revision()
        return index

    def gather_unlocked(self, index: torch.Tensor) -> TensorDictBase:
        if len(self) == 0:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        td = self.inner.get(index)
        if isinstance(td, (list, tuple)):  # TorchRL's ListStorage keeps one TensorDict per row
            td = torch.stack(list(td))
        return td if self._schema is None else td.select(*self._schema.keys())

    def _empty_inner(self) -> None:
        # TorchRL storages spell it _empty(); other storage-like objects empty()
        empty = getattr(self.inner, "_empty", None) or self.inner.empty
        empty()

    def empty(self) -> None:
        with self.lock:
            self._empty_inner()
            self._cursor = 0
            self._bump_generation()

    # -- state: the rows as columns, slot order ----------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        with self.lock:
            n = len(self)
            columns = []
            if n and self._schema is not None:
                td = self.gather_unlocked(torch.arange(n))
                columns = [{"key": list(k), "value": td.get(k)} for k in self._schema]
            return {
                **saved_header(self, n, inner=type(self.inner).__name__, schema=self._schema),
                "columns": columns,
                "codec": None if self.codec is None else self.codec.to_json(),
            }

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        if not isinstance(state, dict) or state.get("type") != self.config_name:
            raise CheckpointError(f"not a saved ForeignStorage state: {str(state)[:80]}")
        n, cursor, count = check_saved_header(state, self.max_size, capacity="max_size")
        try:
            schema = None if state.get("schema") is None else Schema.from_json(state["schema"])
        except ValueError as err:
            raise CheckpointError(f"the saved schema is invalid ({err})") from None
        if self._schema is not None and schema is not None and schema != self._schema:
            raise CheckpointError(
                "the saved rows do not match this storage's: "
                + "; ".join(self._schema.differences(schema, names=("storage", "state")))
            )
        try:
            codec = codec_from_json(state.get("codec"), schema)
        except (ValueError, KeyError, TypeError, ImportError) as err:
            raise CheckpointError(f"the saved data type ('codec') is invalid: {err}") from None
        if self._schema is not None and codec != self.codec:
            raise CheckpointError(
                "the saved rows were written as another data type than this storage's; load "
                "them into a storage of the same data type"
            )
        data = None
        if n:
            if schema is None:
                raise CheckpointError(f"{n} rows saved without a schema; the state is corrupt")
            data = _columns(state.get("columns"), schema, n)

        def restore() -> None:
            self._empty_inner()
            if data is not None:
                self.inner.set(torch.arange(n), data)
            self._schema = schema if schema is not None else self._schema
            self.codec = codec if schema is not None else self.codec
            self._cursor, self._write_count = cursor, count
            self._bump_generation()

        return restore

    def __repr__(self) -> str:
        return f"ForeignStorage({type(self.inner).__name__}, max_size={self.max_size}, len={len(self)})"


def _columns(columns: Any, schema: Schema, n: int) -> TensorDict:
    """The saved columns as ``[n]`` rows, each checked against ``schema``."""
    if not isinstance(columns, list) or len(columns) != len(schema):
        raise CheckpointError(
            f"the saved ForeignStorage state must hold one column per key of its schema "
            f"({len(schema)}), got {type(columns).__name__}; the state is corrupt"
        )
    fields = {f.key: f for f in schema.fields}
    values = {}
    for i, c in enumerate(columns):
        raw = c.get("key") if isinstance(c, dict) else None
        key = tuple(raw) if isinstance(raw, list) and all(isinstance(k, str) for k in raw) else None
        field = fields.get(key) if key is not None else None
        value = c.get("value") if isinstance(c, dict) else None
        if key is None or field is None or key in values:
            raise CheckpointError(
                f"the saved column {i} (key {str(raw)[:60]}) names no key of the schema, or one "
                "named before; the state is corrupt"
            )
        if (
            not isinstance(value, torch.Tensor)
            or value.dtype != field.dtype
            or tuple(value.shape) != (n, *field.shape)
        ):
            got = (
                f"{value.dtype}{list(value.shape)}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise CheckpointError(
                f"the saved column {list(key)} must be a {field.dtype}{[n, *field.shape]} "
                f"tensor, got {got}"
            )
        values[key] = value
    return TensorDict(values, batch_size=[n])


def adapt_storage(storage: Any) -> ForeignStorage:
    """Wrap a TorchRL ``Storage`` (anything with ``set``, ``get``, ``max_size``, ``len``)."""
    if looks_like_storage(storage):
        ndim = getattr(storage, "ndim", 1)
        if ndim != 1:  # a TorchRL grid is not driven as a ring of rows
            raise ValueError(
                f"a TorchRL {type(storage).__name__} with ndim={ndim} cannot be wrapped: only "
                f"its rows (ndim=1) are driven; use mixreplay's LazyTensorStorage(n, ndim={ndim}) "
                "or LazyMemmapStorage(n, ndim=2) for a grid"
            )
        return ForeignStorage(storage)
    raise TypeError(
        f"storage must be a mixreplay storage (LazyTensorStorage, LazyMemmapStorage) or a "
        f"TorchRL Storage, got {type(storage).__name__}"
    )
