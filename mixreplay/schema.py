"""Row schemas and the packed row layout behind every mixreplay storage.

A :class:`Schema` names the leaves of one row: nested key, per-row shape and
dtype. A :class:`RowLayout` packs those leaves into a fixed number of 8-byte
words, so a whole row (every key, every dtype) is one row of a single
``int64`` tensor. Gathering a batch is then one ``index_select`` per source
instead of one per key, and the typed views handed back to the user are
reinterpretations of the gathered words, not copies.

Leaves are ordered by decreasing item size, so every leaf starts at an offset
aligned to its own item size; rows are padded to a multiple of 8 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import SchemaMismatchError

__all__ = ["Field", "RowLayout", "Schema", "format_key", "normalize_key"]

WORD_BYTES = 8
NestedKey = str | tuple[str, ...]

#: Keys that samplers add to their samples (TorchRL's ``"index"`` and priority
#: weights). They are bookkeeping, not data: schema comparisons ignore them when
#: they are present on one side only.
BOOKKEEPING_KEYS: frozenset[tuple[str, ...]] = frozenset(
    {("index",), ("_weight",), ("priority_weight",), ("td_error",)}
)


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
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r} in a schema")
    return dtype


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
        for key in td.keys(include_nested=True, leaves_only=True):
            nk = normalize_key(key)
            if nk in excluded:
                continue
            value = td.get(key)
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"key {format_key(nk)} holds a {type(value).__name__}, not a tensor; "
                    "mixreplay stores tensors only: drop the key (td.exclude(key)) "
                    "or encode it as a tensor"
                )
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
    def from_json(cls, data: Sequence[Mapping]) -> Schema:
        return cls(
            Field(tuple(d["key"]), torch.Size(d["shape"]), _dtype_from_name(d["dtype"]))
            for d in data
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json())


@dataclass(frozen=True)
class _Group:
    """Consecutive leaves of one dtype: how to split a typed view of the row into them."""

    dtype: torch.dtype
    start: int  # first column, in units of this dtype
    stop: int
    fields: tuple[int, ...]  # indices into RowLayout.fields
    sizes: tuple[int, ...]  # split sizes over the whole typed row
    parts: tuple[int, ...]  # which split part holds each field


class RowLayout:
    """Where each leaf of a :class:`Schema` lives inside a packed row of 8-byte words.

    Args:
        schema: the leaves to pack.
    """

    def __init__(self, schema: Schema):
        if len(schema) == 0:
            raise SchemaMismatchError("a row needs at least one tensor leaf; got an empty schema")
        # Canonical order (item size, dtype, key): equal schemas pack identically,
        # whatever order their keys were written in.
        order = sorted(
            range(len(schema)),
            key=lambda i: (
                -schema.fields[i].dtype.itemsize,
                str(schema.fields[i].dtype),
                schema.fields[i].key,
            ),
        )
        self.schema = schema
        self.fields: tuple[Field, ...] = tuple(schema.fields[i] for i in order)
        offsets, pos = [], 0
        for f in self.fields:
            offsets.append(pos)
            pos += f.nbytes
        self.offsets = tuple(offsets)
        self.data_bytes = pos
        self.row_words = max(1, -(-pos // WORD_BYTES))
        self.row_bytes = self.row_words * WORD_BYTES
        self.groups = self._make_groups()
        # Leaves whose per-row shape is not one flat dim need a reshape after the split.
        self._reshape = tuple((i, f.shape) for i, f in enumerate(self.fields) if len(f.shape) != 1)
        self._tree = self._make_tree()
        self._unpack = self._compile_unpack()
        # Leaves already [n, k] are written as they are; others are flattened first.
        self._flat = tuple(len(f.shape) == 1 for f in self.fields)

    def _make_groups(self) -> tuple[_Group, ...]:
        groups = []
        i = 0
        while i < len(self.fields):
            dtype = self.fields[i].dtype
            j = i
            while j < len(self.fields) and self.fields[j].dtype == dtype:
                j += 1
            size = dtype.itemsize
            start = self.offsets[i] // size
            stop = start + sum(f.numel for f in self.fields[i:j])
            width = self.row_bytes // size
            sizes, parts = [], []
            if start:
                sizes.append(start)
            for f in self.fields[i:j]:
                parts.append(len(sizes))
                sizes.append(f.numel)
            if width - stop:
                sizes.append(width - stop)
            groups.append(
                _Group(dtype, start, stop, tuple(range(i, j)), tuple(sizes), tuple(parts))
            )
            i = j
        return tuple(groups)

    def _make_tree(self) -> dict:
        tree: dict = {}
        for i, f in enumerate(self.fields):
            node = tree
            for p in f.key[:-1]:
                node = node.setdefault(p, {})
                if not isinstance(node, dict):
                    raise SchemaMismatchError(f"key {format_key(f.key)} is both a leaf and a node")
            node[f.key[-1]] = i
        # Keep the user's key order (schema order), not the packing order.
        ordered: dict = {}
        for f in self.schema.fields:
            node, src = ordered, tree
            for p in f.key[:-1]:
                node = node.setdefault(p, {})
                src = src[p]
            node[f.key[-1]] = src[f.key[-1]]
        return ordered

    def __reduce__(self):
        # the generated unpack function is rebuilt from the schema, not pickled
        return (RowLayout, (self.schema,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowLayout) and self.fields == other.fields

    def __hash__(self) -> int:
        return hash(self.fields)

    def __repr__(self) -> str:
        return f"RowLayout({len(self.fields)} leaves, {self.data_bytes} bytes in {self.row_bytes})"

    # -- reading ---------------------------------------------------------------------------

    def split(self, words: torch.Tensor) -> list[torch.Tensor]:
        """Typed views, one per leaf (in ``self.fields`` order), of packed rows ``[n, W]``."""
        leaves: list = [None] * len(self.fields)
        for g in self.groups:
            parts = words.view(g.dtype).split_with_sizes(g.sizes, dim=-1)
            for fi, pi in zip(g.fields, g.parts):
                leaves[fi] = parts[pi]
        for i, shape in self._reshape:
            leaves[i] = leaves[i].reshape(*leaves[i].shape[:-1], *shape)
        return leaves

    def unpack(self, words: torch.Tensor, device: torch.device | None = None) -> TensorDict:
        """Wrap packed rows ``[n, W]`` as a TensorDict of typed views (no copy)."""
        return self._unpack(words, device)

    def _compile_unpack(self):
        """Straight-line code for :meth:`unpack`, generated once per layout.

        Sampling calls ``unpack`` once per batch; with one op per dtype group and
        no Python loop over keys, building the batch costs a few microseconds.
        """
        env = {"NEW": _new_td}
        lines = ["def unpack(words, device):", "    bs = words.shape[:-1]"]
        where = {}
        for gi, g in enumerate(self.groups):
            env[f"D{gi}"] = g.dtype
            lines.append(f"    p{gi} = words.view(D{gi}).split_with_sizes({g.sizes!r}, -1)")
            for fi, pi in zip(g.fields, g.parts):
                where[fi] = f"p{gi}[{pi}]"
        for fi, f in enumerate(self.fields):
            if len(f.shape) == 0:
                where[fi] += ".squeeze(-1)"
            elif len(f.shape) > 1:
                where[fi] += f".unflatten(-1, {tuple(f.shape)!r})"
        counter = iter(range(1 << 30))

        def emit(tree: dict) -> str:
            items = []
            for name, item in tree.items():
                value = where[item] if isinstance(item, int) else emit(item)
                items.append(f"{name!r}: {value}")
            var = f"t{next(counter)}"
            lines.append(f"    {var} = NEW({{{', '.join(items)}}}, bs, device)")
            return var

        lines.append(f"    return {emit(self._tree)}")
        exec("\n".join(lines), env)  # noqa: S102 - code built from validated key strings
        return env["unpack"]

    # -- writing ---------------------------------------------------------------------------

    def leaves_of(self, td: TensorDictBase) -> list[torch.Tensor]:
        """The leaves of ``td`` in packing order, checked against the schema.

        Raises:
            SchemaMismatchError: a key is missing or extra, or a dtype or shape differs.
        """
        try:
            out = self._leaves_fast(td)
        except AttributeError:  # not a plain TensorDict all the way down
            out = None
        if out is None:
            out = self._leaves_generic(td)
        return out

    def _leaves_fast(self, td: TensorDictBase) -> list[torch.Tensor]:
        root = td._tensordict
        n_batch = td.batch_dims
        out = []
        for f in self.fields:
            node = root
            for p in f.key[:-1]:
                node = node[p]._tensordict if p in node else {}
            v = node.get(f.key[-1])
            if v is None or v.dtype != f.dtype or v.shape[n_batch:] != f.shape:
                self._raise_mismatch(td)
            out.append(v)
        if _count_leaves(root) != len(self.fields):
            return None  # extra keys, or nodes we cannot count cheaply: check generically
        return out

    def _leaves_generic(self, td: TensorDictBase) -> list[torch.Tensor]:
        got = Schema.from_tensordict(td, batch_dims=td.batch_dims)
        if got != self.schema:
            self._raise_mismatch(td)
        return [td.get(f.key) for f in self.fields]

    def _raise_mismatch(self, td: TensorDictBase) -> None:
        got = Schema.from_tensordict(td, batch_dims=td.batch_dims)
        self.schema.check_compatible(
            got,
            ignore_one_sided=frozenset(),
            names=("stored", "written"),
            fix="write rows with the same keys, dtypes and per-row shapes as the first write "
            "(cast with td.float() or select keys with td.select(...)), "
            "or use a new storage for the new layout",
        )
        raise SchemaMismatchError(  # pragma: no cover - the check above always finds the key
            "written rows do not match the stored layout"
        )

    def group_views(self, words: torch.Tensor) -> list[torch.Tensor]:
        """Per dtype group, the typed columns ``[n, cols]`` of packed rows ``words``."""
        return [words.view(g.dtype)[:, g.start : g.stop] for g in self.groups]

    def write(
        self,
        leaves: Sequence[torch.Tensor],
        views: Sequence[torch.Tensor],
        rows: slice | None = None,
    ) -> None:
        """Copy ``leaves`` (or ``leaves[i][rows]``) into destination group views.

        Args:
            leaves: values in ``self.fields`` order, from :meth:`leaves_of`.
            views: one typed ``[n, cols]`` destination per group (:meth:`group_views`
                of the destination rows).
            rows: which rows of the leaves to copy (all by default).
        """
        flat = self._flat
        for g, dest in zip(self.groups, views):
            parts = []
            for fi in g.fields:
                v = leaves[fi] if rows is None else leaves[fi][rows]
                parts.append(v if flat[fi] else v.reshape(v.shape[0], -1))
            if len(parts) == 1:
                dest.copy_(parts[0])
            else:
                torch.cat(parts, dim=1, out=dest)

    def pack(self, td: TensorDictBase) -> torch.Tensor:
        """Pack a ``[n]`` TensorDict into new rows ``[n, W]`` (padding zeroed)."""
        leaves = self.leaves_of(td)
        n = td.batch_size[0]
        dest = torch.zeros(n, self.row_words, dtype=torch.int64, device=leaves[0].device)
        self.write(leaves, self.group_views(dest))
        return dest


def _count_leaves(node: dict) -> int:
    n = 0
    for v in node.values():
        if isinstance(v, torch.Tensor):
            n += 1
        else:
            sub = getattr(v, "_tensordict", None)
            if sub is None:
                return -1
            n += _count_leaves(sub)
    return n


def _build(tree: dict, leaves: list, batch_size: torch.Size, device) -> TensorDict:
    source = {}
    for name, item in tree.items():
        source[name] = (
            leaves[item] if isinstance(item, int) else _build(item, leaves, batch_size, device)
        )
    return _new_td(source, batch_size, device)


def _new_td(source: dict, batch_size: torch.Size, device) -> TensorDict:
    return TensorDict._new_unsafe(source=source, batch_size=batch_size, device=device)


if not hasattr(TensorDict, "_new_unsafe"):  # pragma: no cover - very old tensordict

    def _new_td(source: dict, batch_size: torch.Size, device) -> TensorDict:  # noqa: F811
        return TensorDict(source, batch_size=batch_size, device=device)
