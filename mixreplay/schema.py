"""Row schemas: the keys, per-row shapes and dtypes of a row, and how two compare.

A :class:`Schema` names the leaves of one row: nested key, per-row shape and
dtype. Storages fix theirs on the first write; mixing buffers compare the
schemas their sources produce, and :meth:`Schema.check_compatible` names every
key that differs. How a schema is packed into words is :mod:`mixreplay.layout`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from mixreplay.errors import SchemaMismatchError

__all__ = ["BOOKKEEPING_KEYS", "Field", "NestedKey", "Schema", "format_key", "normalize_key"]

NestedKey = str | tuple[str, ...]

#: Keys that samplers add to their samples (TorchRL's ``"index"`` and priority
#: weights). They are bookkeeping, not data: schema comparisons ignore them when
#: they are present on one side only.
BOOKKEEPING_KEYS: frozenset[tuple[str, ...]] = frozenset(
    {("index",), ("_weight",), ("priority_weight",), ("td_error",)}
)


def _is_leaf(cls: type) -> bool:
    return not issubclass(cls, TensorDictBase) or issubclass(cls, (NonTensorData, NonTensorStack))


def normalize_key(key: NestedKey) -> tuple[str, ...]:
    """Return ``key`` as a tuple of strings (``"a"`` -> ``("a",)``)."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    raise TypeError(
        f"a key must be a string or a non-empty tuple of strings, got {key!r}; "
        'write nested keys as tuples, e.g. ("next", "reward")'
    )


def format_key(key: tuple[str, ...]) -> str:
    """Show a key the way users write it: ``'obs'`` or ``('next', 'reward')``."""
    return repr(key[0]) if len(key) == 1 else repr(key)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r} in a schema")
    return dtype


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _field_from_json(i: int, d: Any) -> Field:
    """Field ``i`` of a schema read from JSON, every part checked."""
    if not isinstance(d, Mapping) or set(d) != {"key", "shape", "dtype"}:
        raise ValueError(
            f"schema field {i} must be an object with keys 'dtype', 'key' and 'shape', got {_show(d)}"
        )
    key, shape = d["key"], d["shape"]
    if not isinstance(key, list) or not key or not all(isinstance(k, str) for k in key):
        raise ValueError(
            f"schema field {i}: the key must be a non-empty list of strings, got {_show(key)}"
        )
    if not isinstance(shape, list) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape
    ):
        raise ValueError(
            f"schema field {i} ({format_key(tuple(key))}): the shape must be a list of ints >= 0, "
            f"got {_show(shape)}"
        )
    try:
        dtype = _dtype_from_name(d["dtype"])
    except ValueError as err:
        raise ValueError(f"schema field {i} ({format_key(tuple(key))}): {err}") from None
    return Field(tuple(key), torch.Size(shape), dtype)


@dataclass(frozen=True)
class Field:
    """One leaf of a row: its nested key, its per-row shape and its dtype.

    Examples:
        >>> import torch
        >>> from mixreplay import Field
        >>> f = Field(("next", "reward"), torch.Size([1]), torch.float32)
        >>> f.nbytes, f.describe()
        (4, 'float32[1]')
    """

    key: tuple[str, ...]
    shape: torch.Size
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def describe(self) -> str:
        return f"{_dtype_name(self.dtype)}{list(self.shape)}"


def check_dense(key: NestedKey, value: torch.Tensor) -> None:
    """Refuse a sparse (or otherwise non-strided) leaf by name: rows are stored dense."""
    if value.layout is not torch.strided:
        raise TypeError(
            f"key {format_key(normalize_key(key))} holds a {value.layout} tensor; mixreplay "
            "stores dense rows: convert it before writing (td.set(key, td.get(key).to_dense()))"
        )


class Schema(Mapping[tuple[str, ...], Field]):
    """The keys, per-row shapes and dtypes of a row, in a fixed order.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import Schema
        >>> td = TensorDict({"obs": torch.zeros(4, 3), "next": {"reward": torch.zeros(4, 1)}}, [4])
        >>> Schema.from_tensordict(td)
        Schema({'obs': float32[3], ('next', 'reward'): float32[1]})
    """

    def __init__(self, fields: Iterable[Field]):
        self._fields: dict[tuple[str, ...], Field] = {}
        for f in fields:
            if f.key in self._fields:
                raise ValueError(f"duplicate key {format_key(f.key)} in a schema")
            self._fields[f.key] = f

    @classmethod
    def from_tensordict(
        cls,
        td: TensorDictBase,
        *,
        batch_dims: int = 1,
        exclude: Iterable[tuple[str, ...]] = (),
    ) -> Schema:
        """Read the schema of ``td``, whose first ``batch_dims`` dims index rows."""
        excluded = set(exclude)
        fields = []
        # Non-tensor leaves (strings, NonTensorData) count as leaves, so they are refused,
        # never silently dropped.
        for key in td.keys(include_nested=True, leaves_only=True, is_leaf=_is_leaf):
            nk = normalize_key(key)
            if nk in excluded:
                continue
            value = td.get(key)
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"key {format_key(nk)} holds a {type(value).__name__}, not a tensor; "
                    "a storage of rows holds tensors only: drop the key (td.exclude(key)), "
                    "encode it as a tensor, or keep whole TensorDicts in a "
                    "ListStorage/LazyStackStorage"
                )
            check_dense(nk, value)
            fields.append(Field(nk, value.shape[batch_dims:], value.dtype))
        return cls(fields)

    def __getitem__(self, key: NestedKey) -> Field:
        return self._fields[normalize_key(key)]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    @property
    def fields(self) -> tuple[Field, ...]:
        return tuple(self._fields.values())

    @property
    def row_nbytes(self) -> int:
        """Bytes of data in one row, before padding."""
        return sum(f.nbytes for f in self._fields.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return set(self._fields) == set(other._fields) and all(
            f.shape == other._fields[k].shape and f.dtype == other._fields[k].dtype
            for k, f in self._fields.items()
        )

    def __hash__(self) -> int:
        return hash(frozenset((k, tuple(f.shape), f.dtype) for k, f in self._fields.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{format_key(k)}: {f.describe()}" for k, f in self._fields.items())
        return f"Schema({{{inner}}})"

    def without(self, keys: Iterable[tuple[str, ...]]) -> Schema:
        drop = {normalize_key(k) for k in keys}
        return Schema(f for k, f in self._fields.items() if k not in drop)

    def differences(
        self,
        other: Schema,
        *,
        names: tuple[str, str] = ("expected", "got"),
        ignore_one_sided: frozenset[tuple[str, ...]] = BOOKKEEPING_KEYS,
    ) -> list[str]:
        """List, one line per key, how ``other`` differs from this schema.

        Keys in ``ignore_one_sided`` (sampler bookkeeping such as ``"index"``) that
        this schema has and ``other`` lacks are not differences: they are dropped
        when the two are mixed. Every key ``other`` adds is reported.
        """
        a, b = names
        lines = []
        for key, f in self._fields.items():
            g = other._fields.get(key)
            if g is None:
                if key not in ignore_one_sided:
                    lines.append(f"{format_key(key)}: in {a} ({f.describe()}), missing in {b}")
            elif f.dtype != g.dtype or f.shape != g.shape:
                what = "dtype" if f.dtype != g.dtype else "shape"
                if f.dtype != g.dtype and f.shape != g.shape:
                    what = "dtype and shape"
                lines.append(f"{format_key(key)}: {a} {f.describe()}, {b} {g.describe()} ({what})")
        for key, g in other._fields.items():
            if key not in self._fields:
                lines.append(f"{format_key(key)}: in {b} ({g.describe()}), missing in {a}")
        return lines

    def check_compatible(
        self,
        other: Schema,
        *,
        names: tuple[str, str] = ("expected", "got"),
        fix: str = "",
        ignore_one_sided: frozenset[tuple[str, ...]] = BOOKKEEPING_KEYS,
    ) -> None:
        """Raise :class:`SchemaMismatchError` listing every key where ``other`` differs."""
        lines = self.differences(other, names=names, ignore_one_sided=ignore_one_sided)
        if lines:
            msg = f"{names[0]} and {names[1]} rows differ in {len(lines)} key(s):\n  "
            msg += "\n  ".join(lines)
            if fix:
                msg += f"\nFix: {fix}"
            raise SchemaMismatchError(msg)

    def to_json(self) -> list[dict]:
        return [
            {"key": list(f.key), "shape": list(f.shape), "dtype": _dtype_name(f.dtype)}
            for f in self._fields.values()
        ]

    @classmethod
    def from_json(cls, data: Any) -> Schema:
        """The schema :meth:`to_json` wrote, checked strictly (it is read from files).

        Raises:
            ValueError: ``data`` is not a list of ``{"key", "shape", "dtype"}`` objects
                whose key is a non-empty list of strings, shape a list of ints >= 0 and
                dtype the name of a torch dtype; the message names the entry.
        """
        if not isinstance(data, list):
            raise ValueError(f"a schema is a list of fields, got {_show(data)}")
        return cls(_field_from_json(i, d) for i, d in enumerate(data))

    def dumps(self) -> str:
        return json.dumps(self.to_json())
