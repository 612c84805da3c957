"""The data a :class:`~mixreplay.ReplayBuffer` stores, as TorchRL's takes it.

A storage keeps rows of a TensorDict with one batch dimension. A buffer also takes what
TorchRL's ``ReplayBuffer`` takes over a tensor storage, and gives back the type it was
given (from ``sample``, ``rb[i]``, ``storage.get``):

- a ``TensorDict`` ``[n]``: stored as it is (no conversion: the fast path);
- a ``TensorDict`` ``[n, *more]``: ``n`` rows, each a ``TensorDict`` of batch ``more``;
- a tensorclass instance ``[n, ...]``: its fields, given back as the same class;
- a tensor ``[n, ...]``, or a pytree of tensors (dicts, lists, tuples, nested) whose leaves
  all have ``n`` rows, given back with the same structure;
- a ``list`` (or ``range``) at the root of ``extend``: ``n`` items, one row each, stacked
  (TorchRL's rule: a list is items, a tuple is a pytree).

How data maps to rows (a :class:`Codec`) is fixed by a storage's first write and saved
with its state; later writes must have the same structure. Non-tensor values (strings,
``None``, Python objects) cannot be stored in these rings: rows are packed tensors; a
:class:`~mixreplay.ListStorage` keeps such items as they are.

Examples:
    >>> import torch
    >>> from mixreplay import LazyTensorStorage, ReplayBuffer
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), generator=0)
    >>> rb.extend({"obs": torch.zeros(4, 3), "pair": (torch.ones(4), torch.arange(4))}).tolist()
    [0, 1, 2, 3]
    >>> batch = rb.sample(2)
    >>> type(batch).__name__, batch["obs"].shape, type(batch["pair"]).__name__
    ('dict', torch.Size([2, 3]), 'tuple')
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, is_tensorclass
from torch.utils import _pytree as pytree

from mixreplay.errors import CheckpointError, DataStructureError, MixreplayError
from mixreplay.layout import new_tensordict

if TYPE_CHECKING:
    from mixreplay.schema import Schema

__all__ = [
    "Codec",
    "TensorClassRows",
    "TensorDictRows",
    "TensorRows",
    "TreeRows",
    "codec_from_json",
    "device_of",
    "explain_write_error",
    "is_collection",
    "one_row",
    "pin_memory",
    "to_device",
    "to_rows",
]

#: the key a bare tensor is stored under
TENSOR_KEY = "tensor"


class Codec(abc.ABC):
    """How one storage's rows (a ``TensorDict`` ``[n]``) map to the type its data had."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def encode(self, data: Any) -> TensorDictBase:
        """``data`` as rows ``[n]``; :class:`DataStructureError` if its structure differs."""

    @abc.abstractmethod
    def decode(self, rows: TensorDictBase) -> Any:
        """Rows (batch ``[]`` for one row, ``[B]`` for a batch) as the stored type."""

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]:
        """What :func:`codec_from_json` rebuilds this codec from (checkpoints)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """A few words for error messages: what this storage holds."""

    @abc.abstractmethod
    def check_fits(self, schema: Schema) -> None:
        """Raise ``ValueError`` unless rows of ``schema`` decode as this codec's type (a
        saved codec is checked against the saved rows: a mismatch would fail every sample)."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_json() == self.to_json()

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


def summarize(value: Any) -> str:
    """A value as error messages show it: type and shape, never its contents."""
    if isinstance(value, torch.Tensor):
        return f"a tensor {list(value.shape)} of {value.dtype}"
    if isinstance(value, TensorDictBase):
        return f"a {type(value).__name__} with batch_size={list(value.batch_size)}"
    if is_tensorclass(value):
        return f"a {type(value).__name__} with batch_size={list(value.batch_size)}"
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _mismatch(codec: Codec | None, data: Any, detail: str = "") -> DataStructureError:
    held = "TensorDict rows [n]" if codec is None else codec.describe()
    extra = f" ({detail})" if detail else ""
    if isinstance(data, TensorDictBase) and codec is None:
        fix = (
            "use add() for a single row"
            if data.batch_dims == 0
            else "flatten it with data.reshape(-1)"
        )
    else:
        fix = "write data of the same type and structure, or use another buffer for it"
    return DataStructureError(
        f"this storage holds {held} (fixed by its first write), got {summarize(data)}{extra}; {fix}"
    )


def _flat_rows(td: TensorDictBase) -> TensorDictBase:
    """A ``[n, *more]`` TensorDict as ``[n]`` rows over the same tensors (no copy)."""
    if not isinstance(td, TensorDict):
        td = td.to_tensordict()  # a lazy stack: its batch size cannot be changed
    else:
        td = td.copy()
    td.batch_size = td.batch_size[:1]
    return td


def _set_batch(rows: TensorDictBase, row_batch: tuple[int, ...]) -> TensorDictBase:
    if row_batch:
        rows.batch_size = torch.Size([*rows.batch_size, *row_batch])
    return rows


class TensorDictRows(Codec):
    """TensorDicts ``[n, *row_batch]``: each row a TensorDict of batch ``row_batch``."""

    kind = "tensordict"

    def __init__(self, row_batch: tuple[int, ...]):
        self.row_batch = tuple(int(d) for d in row_batch)

    def encode(self, data: Any) -> TensorDictBase:
        if not isinstance(data, TensorDictBase) or tuple(data.batch_size[1:]) != self.row_batch:
            raise _mismatch(self, data)
        return _flat_rows(data)

    def decode(self, rows: TensorDictBase) -> Any:
        return _set_batch(rows, self.row_batch)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "row_batch": list(self.row_batch)}

    def describe(self) -> str:
        return f"TensorDicts [n, {', '.join(map(str, self.row_batch))}]"

    def check_fits(self, schema: Schema) -> None:
        _check_row_batch(self.row_batch, schema)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _check_row_batch(row_batch: tuple[int, ...], schema: Schema) -> None:
    """Every field of a row of batch ``row_batch`` has a shape that begins with it."""
    n = len(row_batch)
    for key, field in schema.items():
        if tuple(field.shape[:n]) != row_batch:
            raise ValueError(
                f"'row_batch' is {list(row_batch)}, but the rows' key {'.'.join(key)} has shape "
                f"{list(field.shape)}, which does not begin with it"
            )


def _import_class(path: str, imports: bool = False) -> type:
    """The tensorclass saved as ``module:qualname``, from a module this process has imported
    (or imports now, with ``imports``).

    A checkpoint never imports code: a module that is not imported yet is refused (its
    import could do anything), and so is anything that is not a tensorclass.
    """
    module, sep, qualname = path.partition(":")
    if "<locals>" in qualname:
        raise ImportError(f"{path} is defined inside a function")
    if not sep or not all(p.isidentifier() for p in (*module.split("."), *qualname.split("."))):
        raise ValueError(f"'class' must be 'module:ClassName', got {path!r}")
    obj: Any = sys.modules.get(module)
    if obj is None and imports:
        obj = importlib.import_module(module)
    if obj is None:
        raise ImportError(
            f"its module {module} is not imported, and a checkpoint never imports code: "
            f"import {module} before loading"
        )
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ImportError(f"{module} has no {qualname}")
    if not isinstance(obj, type) or not is_tensorclass(obj):
        raise ValueError(f"'class' names {path}, which is not a tensorclass")
    return obj


class TensorClassRows(Codec):
    """Instances of one tensorclass ``[n, *row_batch]`` (nested tensorclass fields included)."""

    kind = "tensorclass"

    def __init__(
        self, cls: type, row_batch: tuple[int, ...], nested: dict[str, TensorClassRows] | None
    ):
        self.cls = cls
        self.row_batch = tuple(int(d) for d in row_batch)
        self.nested = dict(nested or {})

    @classmethod
    def of(cls, data: Any, row_batch: tuple[int, ...]) -> TensorClassRows:
        nested = {}
        for name, value in data._tensordict.items():
            if is_tensorclass(value):
                nested[name] = cls.of(value, ())
        return cls(type(data), row_batch, nested)

    def encode(self, data: Any) -> TensorDictBase:
        same_class = type(data) is self.cls  # (a separate test: mypy would narrow data)
        if not same_class or tuple(data.batch_size[1:]) != self.row_batch:
            raise _mismatch(self, data)
        if not self.nested and not self.row_batch:
            # its own TensorDict holds the rows as they are: no copy (a non-tensor field is
            # refused by the storage's schema check, naming it)
            return data._tensordict
        return _flat_rows(data.to_tensordict())

    def _wrap(self, td: TensorDictBase) -> Any:
        out = self.cls._from_tensordict(td)  # type: ignore[attr-defined]
        for name, sub in self.nested.items():
            setattr(out, name, sub._wrap(td.get(name)))
        return out

    def decode(self, rows: TensorDictBase) -> Any:
        return self._wrap(_set_batch(rows, self.row_batch))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "class": _class_path(self.cls),
            "row_batch": list(self.row_batch),
            "nested": {k: v.to_json() for k, v in self.nested.items()},
        }

    def describe(self) -> str:
        dims = "".join(f", {d}" for d in self.row_batch)
        return f"{self.cls.__name__} instances [n{dims}]"

    def check_fits(self, schema: Schema) -> None:
        _check_row_batch(self.row_batch, schema)
        fields = {f.name for f in dataclasses.fields(self.cls)}
        for key in schema:
            if key[0] not in fields:
                raise ValueError(
                    f"'class' is {_class_path(self.cls)}, which has no field {key[0]!r} (its "
                    f"fields: {sorted(fields)}), but the rows hold it"
                )
        for name, sub in self.nested.items():
            inner = _sub_schema(schema, name)
            if name not in fields or not len(inner):
                raise ValueError(
                    f"'nested' names the field {name!r}, which the rows or "
                    f"{_class_path(self.cls)} do not hold as a nested tensorclass"
                )
            sub.check_fits(inner)


class TensorRows(Codec):
    """Bare tensors ``[n, ...]``: each row a tensor."""

    kind = "tensor"

    def encode(self, data: Any) -> TensorDictBase:
        if not isinstance(data, torch.Tensor) or data.ndim == 0:
            raise _mismatch(self, data)
        return new_tensordict({TENSOR_KEY: data}, data.shape[:1])

    def decode(self, rows: TensorDictBase) -> Any:
        return rows.get(TENSOR_KEY)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def describe(self) -> str:
        return "tensors [n, ...]"

    def check_fits(self, schema: Schema) -> None:
        if list(schema) != [(TENSOR_KEY,)]:
            raise ValueError(
                f"the codec is 'tensor' (rows of one key {TENSOR_KEY!r}), but the rows hold the "
                f"keys {['.'.join(k) for k in schema]}"
            )


class TreeRows(Codec):
    """Pytrees of tensors (nested dicts, lists, tuples) whose leaves share their first dim."""

    kind = "pytree"

    def __init__(self, spec: pytree.TreeSpec, keys: tuple[str, ...]):
        self.spec = spec
        self.keys = keys

    @classmethod
    def of(cls, data: Any) -> TreeRows:
        paths, spec = pytree.tree_flatten_with_path(data)
        return cls(spec, tuple(pytree.keystr(p) for p, _ in paths))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (other.spec, other.keys) == (self.spec, self.keys)

    def __reduce__(self) -> Any:
        # the structure as nested tuples of node types and contexts: pickling a TreeSpec
        # object trips torch's deprecation of LeafSpec, and JSON cannot name every node type
        # (a namedtuple): pickle and deepcopy give back exactly this structure
        return (_tree_from_parts, (_spec_parts(self.spec), self.keys))

    def __hash__(self) -> int:
        return hash(self.keys)

    def encode(self, data: Any) -> TensorDictBase:
        leaves, spec = pytree.tree_flatten(data)
        if spec != self.spec:
            raise _mismatch(self, data, "its structure differs")
        n = _leading_rows(leaves, self.keys)
        return new_tensordict(dict(zip(self.keys, leaves)), torch.Size([n]))

    def decode(self, rows: TensorDictBase) -> Any:
        return pytree.tree_unflatten([rows.get(k) for k in self.keys], self.spec)

    def to_json(self) -> dict[str, Any]:
        """The structure as JSON; refused (``CheckpointError``) unless it reads back exactly."""
        try:
            spec = pytree.treespec_dumps(self.spec)
            exact = _load_spec(spec) == self.spec
        except Exception as err:  # a node type or a key torch cannot serialise
            raise CheckpointError(
                f"the structure of this storage's pytree cannot be saved ({err}); "
                "store a TensorDict or a tensorclass to checkpoint it"
            ) from None
        if not exact:
            raise CheckpointError(
                f"the structure of this storage's pytree ({self.describe()}) would not read back "
                "as it is (its keys do not survive JSON); store a TensorDict or a tensorclass, "
                "or use str keys, to checkpoint it"
            )
        return {"kind": self.kind, "spec": spec, "keys": list(self.keys)}

    def describe(self) -> str:
        return f"pytrees {self.spec}".replace("\n", "")

    def check_fits(self, schema: Schema) -> None:
        held = [".".join(k) for k in schema]
        if sorted(held) != sorted(self.keys):
            raise ValueError(f"'keys' are {list(self.keys)}, but the rows hold the keys {held}")


def _leading_rows(leaves: list[Any], keys: tuple[str, ...]) -> int:
    """The common first dim of ``leaves`` (tensors); a clear error otherwise."""
    n = None
    for key, leaf in zip(keys, leaves):
        if not isinstance(leaf, torch.Tensor):
            raise DataStructureError(
                f"leaf {key} is {summarize(leaf)}, not a tensor: a storage packs tensors only "
                "(for Python objects use storage=ListStorage(max_size), which keeps items as they are)"
            )
        if leaf.ndim == 0:
            raise DataStructureError(
                f"leaf {key} is a 0-dim tensor: extend takes rows along dim 0 (use add() for "
                "one row)"
            )
        if n is None:
            n = leaf.shape[0]
        elif leaf.shape[0] != n:
            raise DataStructureError(
                f"leaf {key} has {leaf.shape[0]} rows where the first leaf has {n}: every "
                "leaf of the data needs the same first dimension (one entry per row)"
            )
    if n is None:
        raise DataStructureError("the data holds no tensor: nothing to store")
    return n


def codec_for(data: Any) -> Codec | None:
    """The codec for a first write of ``data`` (``None``: TensorDict rows ``[n]``)."""
    if isinstance(data, TensorDictBase):
        if data.batch_dims == 0:
            raise DataStructureError(
                "extend got a TensorDict with batch_size=[] (a single row); use add() for one "
                "row, or give the rows a leading batch dim"
            )
        return None if data.batch_dims == 1 else TensorDictRows(tuple(data.batch_size[1:]))
    if is_tensorclass(data):
        if not data.batch_size:
            raise DataStructureError(
                f"extend got a {type(data).__name__} with batch_size=[] (a single row); use "
                "add() for one row"
            )
        return TensorClassRows.of(data, tuple(data.batch_size[1:]))
    if isinstance(data, torch.Tensor):
        return TensorRows()
    return TreeRows.of(data)


def _stack(items: list[Any]) -> Any:
    """TorchRL's rule for a list at the root: ``n`` items, one row each, stacked."""
    if not items:
        raise DataStructureError("extend got an empty list: pass at least one item")
    first = items[0]
    try:
        if isinstance(first, (int, float, bool)) and not isinstance(first, torch.Tensor):
            return torch.as_tensor(items)
        if isinstance(first, (torch.Tensor, TensorDictBase)) or is_tensorclass(first):
            return torch.stack(items)
        return pytree.tree_map(lambda *xs: torch.stack(xs), *items)
    except Exception as err:
        raise DataStructureError(
            "Stacking the elements of the list resulted in an error: a list given to extend "
            "holds items (one row each) that must share one structure and shape; a batch "
            f"whose leaves already hold the rows goes in a tuple or a dict ({err})"
        ) from None


def device_of(data: Any) -> torch.device | None:
    """The device every tensor of a batch of any type above is on (``None``: several or none)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)) or is_tensorclass(data):
        return data.device
    devices = {leaf.device for leaf in pytree.tree_leaves(data) if isinstance(leaf, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else None


def to_device(data: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """A batch of any type above, moved to ``device`` (one copy per leaf not already there)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)) or is_tensorclass(data):
        return data.to(device, non_blocking=non_blocking)
    return pytree.tree_map(
        lambda leaf: (
            leaf.to(device, non_blocking=non_blocking) if isinstance(leaf, torch.Tensor) else leaf
        ),
        data,
    )


def pin_memory(data: Any) -> Any:
    """A batch of any type above in page-locked memory (leaves off the host are left as they are)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)) or is_tensorclass(data):
        device = data.device
        return data if device is not None and device.type != "cpu" else data.pin_memory()
    return pytree.tree_map(
        lambda leaf: (
            leaf.pin_memory()
            if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu"
            else leaf
        ),
        data,
    )


def as_batch(data: Any) -> Any:
    """``data`` as one batch of rows: lists and ranges at the root are stacked."""
    if isinstance(data, (list, range)):
        return _stack(list(data))
    return data


def is_collection(data: Any) -> bool:
    """Whether ``data`` is a TensorDict or a tensorclass (TorchRL's tensor collections)."""
    return isinstance(data, TensorDictBase) or is_tensorclass(data)


def one_row(data: Any) -> Any:
    """``data`` (one row) as a batch of one row, for ``add``."""
    if isinstance(data, (TensorDictBase, torch.Tensor)) or is_tensorclass(data):
        return data.unsqueeze(0)
    if isinstance(data, (int, float, bool)):
        return torch.as_tensor([data])
    leaves, spec = pytree.tree_flatten(data)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        bad = next((leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)), None)
        raise DataStructureError(
            f"add got {summarize(data)} holding {summarize(bad)}: a storage of rows packs tensors "
            "only (for Python objects use storage=ListStorage(max_size))"
        )
    return pytree.tree_unflatten([leaf.unsqueeze(0) for leaf in leaves], spec)


def to_rows(data: Any, codec: Codec | None, first: bool) -> tuple[TensorDictBase, Codec | None]:
    """``data`` as rows ``[n]`` for a storage whose codec is ``codec``.

    Args:
        data: what the user passed to ``extend`` (or ``add``, made a batch of one).
        codec: the storage's codec (``None``: TensorDict rows, or nothing written yet).
        first: whether the storage has never been written (its codec is to be fixed).

    Returns:
        ``(rows, codec)``: the codec to keep once the write succeeds.
    """
    data = as_batch(data)
    if first:
        codec = codec_for(data)
    elif codec is None:
        if not isinstance(data, TensorDictBase) or data.batch_dims != 1:
            raise _mismatch(None, data)
        return data, None
    if codec is None:
        return data, None
    return codec.encode(data), codec


#: how each kind of codec is read back: ``(state, imports) -> Codec``
_KINDS: dict[str, Callable[[dict[str, Any], bool], Codec]] = {}


def explain_write_error(data: Any, err: RuntimeError) -> Exception | None:
    """A clear error for a write that tensordict could not read as rows (``None``: none)."""
    if isinstance(data, LazyStackedTensorDict) and not isinstance(err, MixreplayError):
        return DataStructureError(
            "a lazy stack of TensorDicts whose entries differ in shape cannot be stored: rows "
            "are packed, so every row has one shape; pad the entries to one shape (or store "
            f"them in separate buffers) ({err})"
        )
    return None


def codec_from_json(
    state: Any, schema: Schema | None = None, *, imports: bool = False
) -> Codec | None:
    """Rebuild a codec saved by :meth:`Codec.to_json` (``None`` stays ``None``).

    With ``schema`` (the saved rows'), the codec must also fit those rows
    (:meth:`Codec.check_fits`), so that a crafted codec is refused here rather than
    accepted and then failing every ``sample()``.

    A tensorclass is looked up in the modules this process has imported: a checkpoint
    never imports code. ``imports=True`` imports its module (what the program itself
    wrote, e.g. a shared storage's header read in a process it started).

    Raises ``ValueError`` for a state that cannot be read or does not fit the rows
    (naming the field), ``ImportError`` for a tensorclass that cannot be imported.
    """
    if state is None:
        return None
    if not isinstance(state, dict) or state.get("kind") not in _KINDS:
        raise ValueError(f"not a saved data codec: {str(state)[:80]}")
    codec = _KINDS[state["kind"]](state, imports)
    if schema is not None:
        codec.check_fits(schema)
    return codec


def _entry(state: dict[str, Any], name: str, kind: type, what: str) -> Any:
    """``state[name]``, which a ``state["kind"]`` codec must hold, as ``kind``."""
    if name not in state:
        raise ValueError(f"a saved {state['kind']} codec must hold {name!r} ({what}); it has none")
    value = state[name]
    if not isinstance(value, kind):
        raise ValueError(f"{name!r} of a saved {state['kind']} codec must be {what}, got {value!r}")
    return value


def _row_batch(state: dict[str, Any]) -> tuple[int, ...]:
    what = "a list of ints >= 0"
    dims = _entry(state, "row_batch", list, what)
    if not all(type(d) is int and d >= 0 for d in dims):
        raise ValueError(f"'row_batch' of a saved {state['kind']} codec must be {what}, got {dims}")
    return tuple(dims)


def _tensordict_from_json(state: dict[str, Any], imports: bool) -> Codec:
    return TensorDictRows(_row_batch(state))


def _tensorclass_from_json(state: dict[str, Any], imports: bool) -> Codec:
    nested = _entry(state, "nested", dict, "a dict of field name to codec")
    subs = {}
    for k, v in nested.items():
        if not isinstance(v, dict) or v.get("kind") != "tensorclass":
            raise ValueError(f"'nested' field {k!r} must be a saved tensorclass codec, got {v!r}")
        subs[k] = _tensorclass_from_json(v, imports)
    path = _entry(state, "class", str, "'module:ClassName' of a tensorclass")
    return TensorClassRows(_import_class(path, imports), _row_batch(state), subs)  # type: ignore[arg-type]


def _sub_schema(schema: Schema, name: str) -> Schema:
    """The fields of ``schema`` under the key ``name``, keyed below it."""
    from mixreplay.schema import Field, Schema

    return Schema(
        Field(k[1:], f.shape, f.dtype) for k, f in schema.items() if k[0] == name and len(k) > 1
    )


def _as_key(value: Any) -> Any:
    # JSON writes a tuple as a list; no dict key can be a list, so a list key was a tuple
    return tuple(_as_key(v) for v in value) if isinstance(value, list) else value


#: the containers a saved structure names by their builtin name; another package may register a
#: type of its own under that name (tensordict does, for "builtins.list"), which loading would
#: otherwise give back instead of the builtin
_BUILTINS = {f"builtins.{t.__name__}": t for t in (list, tuple, dict)}


def _with_keys(spec: pytree.TreeSpec) -> pytree.TreeSpec:
    if spec.is_leaf():
        return spec
    node = spec.type
    entry = pytree.SUPPORTED_SERIALIZED_TYPES.get(node)
    if entry is not None:
        node = _BUILTINS.get(entry.serialized_type_name, node)
    context = spec.context
    if node in (dict, collections.OrderedDict) and isinstance(context, list):
        context = [_as_key(k) for k in context]
    return pytree.TreeSpec(node, context, [_with_keys(c) for c in spec.children()])


def _load_spec(saved: str) -> pytree.TreeSpec:
    """A structure saved by ``treespec_dumps`` as it was: its dict keys (tuples included) and
    its builtin containers."""
    return _with_keys(pytree.treespec_loads(saved))


def _spec_keys(spec: pytree.TreeSpec) -> tuple[str, ...]:
    """The keys of the leaves of a structure, in order (what :meth:`TreeRows.of` names)."""
    paths, _ = pytree.tree_flatten_with_path(pytree.tree_unflatten([0] * spec.num_leaves, spec))
    return tuple(pytree.keystr(p) for p, _ in paths)


def _tree_from_json(state: dict[str, Any], imports: bool = False) -> Codec:
    saved = _entry(state, "spec", str, "a structure saved by torch's treespec_dumps")
    keys = _entry(state, "keys", list, "the list of the leaves' keys")
    spec = _load_spec(saved)
    expected = _spec_keys(spec)
    if list(expected) != keys:
        raise ValueError(
            f"'keys' are {keys}, but the saved 'spec' names the leaves {list(expected)}"
        )
    return TreeRows(spec, expected)


def _spec_parts(spec: pytree.TreeSpec) -> Any:
    """A structure as nested ``(node type, context, children)`` (``None``: a leaf)."""
    if spec.is_leaf():
        return None
    return (spec.type, spec.context, [_spec_parts(c) for c in spec.children()])


def _spec_from_parts(parts: Any) -> pytree.TreeSpec:
    if parts is None:
        return pytree.treespec_leaf()
    node, context, children = parts
    return pytree.TreeSpec(node, context, [_spec_from_parts(c) for c in children])


def _tree_from_parts(parts: Any, keys: tuple[str, ...]) -> TreeRows:
    return TreeRows(_spec_from_parts(parts), tuple(keys))


_KINDS.update(
    {
        "tensordict": _tensordict_from_json,
        "tensorclass": _tensorclass_from_json,
        "tensor": lambda state, imports: TensorRows(),
        "pytree": _tree_from_json,
    }
)
