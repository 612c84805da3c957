"""Storages of items: :class:`ListStorage` and :class:`LazyStackStorage` (TorchRL's).

A ring of Python slots, each holding one item as it was written: any Python object
(a string, ``None``, a dict), a tensor, a TensorDict of any shape. Nothing is packed,
so items may differ from one another (TensorDicts of different shapes, with different
keys); a batch is built when it is read:

- :class:`ListStorage` hands the buffer a ``list`` of the items drawn, and the
  buffer's ``collate_fn`` (by default :meth:`ListStorage.collate`: TensorDicts,
  tensors and pytrees of tensors stacked, as TorchRL does) makes the batch;
- :class:`LazyStackStorage` hands it a lazy stack of the TensorDicts drawn
  (``LazyStackedTensorDict``): ragged items stay ragged.

These are the slow, general storages (one Python object per row, a gather per
batch): rows of one fixed structure belong in a :class:`~mixreplay.LazyTensorStorage`,
whose batches are one ``index_select``.

A write splits ``data`` into items along its first dimension (a list, a range, a
tensor, a TensorDict or tensorclass, a NumPy array) and writes them in ring order,
each a value of its own: tensors and TensorDicts are copied once per write (a view of
the copy per item), so changing the written batch afterwards changes nothing stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, is_tensorclass
from tensordict import lazy_stack as _lazy_stack
from torch.utils import _pytree as pytree

from mixreplay._torchrl_args import check_storage_args
from mixreplay._validate import check_int, describe
from mixreplay.data_types import summarize
from mixreplay.errors import CheckpointError, DataStructureError, EmptyBufferError
from mixreplay.schema import NestedKey, Schema, format_key, normalize_key
from mixreplay.storages.base import (
    RingCounters,
    Storage,
    as_device,
    as_index,
    check_saved_header,
    saved_header,
)

__all__ = ["UNBOUNDED", "LazyStackStorage", "ListStorage"]

#: the capacity of ``ListStorage()`` without ``max_size`` (TorchRL's: the largest int64)
UNBOUNDED = torch.iinfo(torch.int64).max

_JSON_SCALARS = (type(None), bool, int, str)


def _items_of(data: Any, owner: str) -> list[Any]:
    """``data`` split into items along its first dimension (TorchRL's ``ListStorage.set``)."""
    if isinstance(data, (list, range)):
        return list(data)
    if isinstance(data, (TensorDictBase, torch.Tensor)) or is_tensorclass(data):
        if not data.shape:
            raise DataStructureError(
                f"{owner}.extend got {summarize(data)} with no first dimension to split into "
                "items; use add() for one item"
            )
        # one copy of the batch, each item a view of it: the caller's batch stays theirs
        return list(data.detach().clone().unbind(0))
    try:
        import numpy as np

        if isinstance(data, np.ndarray):
            return list(data.copy())
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    raise DataStructureError(
        f"{owner}.extend got {summarize(data)}: a storage of items is extended with a "
        "sequence of items (a list, range, tensor, TensorDict or NumPy array, split along its "
        "first dimension); wrap the items in a list, or use add() for one item"
    )


def _stack_items(items: list[Any]) -> Any:
    """TorchRL's default batch of a ``ListStorage``: TensorDicts stacked (a lazy stack when
    they differ), tensors and pytrees of tensors stacked leaf by leaf."""
    first = items[0]
    if isinstance(first, TensorDictBase) or is_tensorclass(first):
        return LazyStackedTensorDict.maybe_dense_stack(items)
    try:
        return pytree.tree_map(lambda *xs: torch.stack(xs), *items)
    except (TypeError, RuntimeError, ValueError) as err:
        raise DataStructureError(
            f"ListStorage's default collate_fn stacks tensors and TensorDicts, but the items "
            f"drawn hold {summarize(first)} ({err}); pass collate_fn=list to get the items "
            "as a list, or a function that builds your batch"
        ) from None


def _is_json(value: Any) -> bool:
    if isinstance(value, _JSON_SCALARS):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _encode_item(item: Any, slot: int, copy: bool) -> Any:
    """One item as tensors and JSON values (what a checkpoint holds: nothing is pickled)."""
    if isinstance(item, torch.Tensor):  # bare, as TorchRL's ListStorage state holds it
        return item.detach().clone() if copy else item.detach()
    if isinstance(item, TensorDictBase) and not isinstance(item, LazyStackedTensorDict):
        keys, values = [], []
        for key, value in item.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                break
            keys.append(list(normalize_key(key)))
            values.append(value.detach().clone() if copy else value.detach())
        else:
            return {"tensordict": {"keys": keys, "values": values}, "batch": list(item.batch_size)}
    elif isinstance(item, LazyStackedTensorDict):
        parts = [_encode_item(t, slot, copy) for t in item.tensordicts]
        return {"stack": parts, "dim": item.stack_dim}
    elif _is_json(item):
        return {"value": item}
    raise CheckpointError(
        f"ListStorage cannot save the item in slot {slot}, {summarize(item)}: a checkpoint holds "
        "tensors, TensorDicts of tensors and JSON values (None, bool, int, float, str, lists "
        "and dicts of them), nothing pickled; store such items as one of those"
    )


def _decode_item(saved: Any, slot: int) -> Any:
    def bad(what: str) -> CheckpointError:
        return CheckpointError(
            f"ListStorage state: the item in slot {slot} {what}; the state is corrupt"
        )

    if isinstance(saved, torch.Tensor):
        return saved.clone()  # the checkpoint's (or the caller's) tensor stays theirs
    if not isinstance(saved, dict) or len(saved) not in (1, 2):
        raise bad(f"is {describe(saved)}, not an encoded item")
    if "value" in saved:
        if not _is_json(saved["value"]):
            raise bad("is not a JSON value")
        return saved["value"]
    if "tensordict" in saved:
        td, batch = saved["tensordict"], saved.get("batch")
        if (
            not isinstance(td, dict)
            or not isinstance(td.get("keys"), list)
            or not isinstance(td.get("values"), list)
            or len(td["keys"]) != len(td["values"])
            or not isinstance(batch, list)
            or not all(isinstance(b, int) and b >= 0 for b in batch)
        ):
            raise bad("is not a saved TensorDict")
        out = TensorDict({}, batch_size=batch)
        for key, value in zip(td["keys"], td["values"]):
            if (
                not isinstance(key, list)
                or not key
                or not all(isinstance(k, str) for k in key)
                or not isinstance(value, torch.Tensor)
                or tuple(value.shape[: len(batch)]) != tuple(batch)
            ):
                raise bad(f"holds an entry {str(key)[:40]} that does not fit its batch {batch}")
            out.set(tuple(key), value.clone())
        return out
    if "stack" in saved:
        parts, dim = saved["stack"], saved.get("dim")
        if not isinstance(parts, list) or not parts or not isinstance(dim, int):
            raise bad("is not a saved lazy stack")
        tds = [_decode_item(p, slot) for p in parts]
        if not all(isinstance(t, TensorDictBase) for t in tds):
            raise bad("is a lazy stack of other things than TensorDicts")
        return _lazy_stack(tds, dim)
    raise bad(f"has the fields {sorted(saved)}, not an encoded item")


class ListStorage(RingCounters, Storage):
    """Items of any type in a ring of Python slots (TorchRL's ``ListStorage``).

    The storage of TorchRL's buffers without a storage argument: each slot holds one
    item as written, a Python object, a tensor or a TensorDict of any shape, so items
    need not share a structure. A batch is the list of items drawn, made a batch by
    the buffer's ``collate_fn``: :meth:`collate` unless one is given (it stacks
    TensorDicts, a lazy stack where they differ, and tensors; other items need
    ``collate_fn=list`` or your own, as in TorchRL). ``rb[i]`` is the item in slot
    ``i``; ``rb[a:b]`` and ``storage.get(index)`` the collated items.

    Writes go in ring order, oldest items overwritten first once ``max_size`` items are
    held. Every sampler works over it; a :class:`~mixreplay.PrioritizedSampler` needs a
    ``max_size`` (its tree has one slot per item). A checkpoint holds tensors,
    TensorDicts and JSON values (``None``, numbers, strings, lists and dicts of them);
    another item refuses the save, naming its slot.

    Args:
        max_size: the most items held; unbounded (TorchRL's ``2**63 - 1``) if ``None``.

    Keyword Args:
        device: where written tensors and TensorDicts are moved (``None``: kept where they
            are, as in TorchRL); the samplers draw on it.
        compilable: TorchRL's; only ``False``.

    Examples:
        >>> import torch
        >>> from mixreplay import ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), collate_fn=list, generator=0)
        >>> rb.extend(["a", 0, None]).tolist()
        [0, 1, 2]
        >>> rb[0], len(rb)
        ('a', 3)
        >>> sorted(map(str, rb.sample(6)))  # items drawn, as a list
        ['0', 'None', 'None', 'a', 'a', 'a']
        >>> rb = ReplayBuffer(storage=ListStorage(10), generator=0)
        >>> _ = rb.extend([torch.zeros(2), torch.ones(2)])
        >>> rb.sample(3).shape  # the default collate_fn stacks tensors
        torch.Size([3, 2])
    """

    holds_items: ClassVar[bool] = True

    def __init__(
        self,
        max_size: int | None = None,
        *,
        device: torch.device | str | int | None = None,
        compilable: bool = False,
    ):
        super().__init__()
        check_storage_args(type(self).__name__, {"compilable": compilable})
        self.max_size = (
            UNBOUNDED
            if max_size is None
            else check_int(max_size, "max_size", min=1, what="a positive number of items")
        )
        self._move_to = None if device is None else as_device(device)
        self.device = self._move_to or torch.device("cpu")
        self._items: list[Any] = []
        self._cursor = 0
        self._write_count = 0
        self._schema_cache: tuple[tuple[int, int, int, int], Schema | None] | None = None

    # -- the contract ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bounded(self) -> bool:
        """Whether a ``max_size`` was given (an unbounded storage cannot be prioritized)."""
        return self.max_size != UNBOUNDED

    @property
    def schema(self) -> Schema | None:
        """The keys, per-item shapes and dtypes of the first item when it is a TensorDict
        (what a :class:`~mixreplay.SliceSampler` looks its keys up in); ``None`` otherwise."""
        key = self.content_key()
        cached = self._schema_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        schema = None
        with self.lock:
            first = self._items[0] if self._items else None
        if isinstance(first, TensorDictBase) and not isinstance(first, LazyStackedTensorDict):
            try:
                schema = Schema.from_tensordict(first.unsqueeze(0))
            except (TypeError, ValueError, RuntimeError):
                schema = None
        self._schema_cache = (key, schema)
        return schema

    @property
    def _storage(self) -> list[Any]:
        """The items in slot order (TorchRL's ``storage._storage``), the list itself."""
        return self._items

    def _to_device(self, item: Any) -> Any:
        device = self._move_to
        if device is None:
            return item
        if hasattr(item, "to"):
            return item.to(device)
        return pytree.tree_map(lambda x: x.to(device) if hasattr(x, "to") else x, item)

    def extend(self, data: Any) -> torch.Tensor:
        """Write the items of ``data`` (split along its first dimension); return their slots."""
        items = [self._to_device(item) for item in _items_of(data, type(self).__name__)]
        n = len(items)
        if n == 0:
            raise ValueError(
                f"{type(self).__name__}.extend got no item; pass at least one (add() writes one)"
            )
        with self.lock:
            start, cap, held = self._cursor, self.max_size, self._items
            index = torch.arange(start, start + n, dtype=torch.int64)
            if start + n > cap:
                index = index % cap
            for slot, item in zip(index.tolist(), items):
                if slot == len(held):
                    held.append(item)
                else:
                    held[slot] = item
            self._cursor, self._write_count = (start + n) % cap, self._write_count + n
            self._bump_revision()
        return index.to(self.device)

    def add(self, row: Any) -> int:
        """Write one item (any object); return its slot."""
        return int(self.extend([row])[0])

    def items_at(self, index: torch.Tensor) -> list[Any]:
        """The items in slots ``index`` (caller holds :attr:`lock`)."""
        held = self._items
        if not held:
            raise EmptyBufferError("cannot read items from a storage that holds none")
        return [held[i] for i in index.reshape(-1).tolist()]

    def gather_unlocked(self, index: torch.Tensor) -> Any:
        """The items in slots ``index``, as a list (caller holds :attr:`lock`); the buffer's
        ``collate_fn`` makes them a batch."""
        return self.items_at(index)

    def gather_to(self, index: torch.Tensor, device: torch.device) -> Any:
        raise TypeError(
            f"{type(self).__name__} hands out items, not rows: batch_device= needs a tensor "
            "storage (LazyTensorStorage); move the collated batch with batch.to(device)"
        )

    def collate(self, items: list[Any]) -> Any:
        """The default batch of items drawn (TorchRL's): TensorDicts stacked (lazily when they
        differ), tensors and pytrees of tensors stacked; anything else raises, naming
        ``collate_fn``."""
        return _stack_items(items)

    def __getitem__(self, index: Any) -> Any:
        """The item in slot ``index`` (an int), or the items of several slots (TorchRL's
        ``ListStorage.get``: a list; a lazy stack for :class:`LazyStackStorage`)."""
        if isinstance(index, tuple):
            if len(index) != 1:
                raise IndexError(f"{type(self).__name__} is indexed with one index, got {index!r}")
            index = index[0]
        with self.lock:
            n = len(self._items)
            if isinstance(index, int) or (
                isinstance(index, torch.Tensor)
                and index.ndim == 0
                and not index.is_floating_point()
            ):
                i = int(index)
                if not -n <= i < n:
                    raise IndexError(
                        f"item index {i} is out of range for a storage with {n} items"
                        f"{f' (valid: {-n}..{n - 1})' if n else ''}"
                    )
                return self._items[i]
            if n == 0 and not isinstance(index, slice):
                raise IndexError("the storage holds no items yet")
            idx = as_index(index, n, torch.device("cpu"))
            return self._many([self._items[i] for i in idx.tolist()])

    def _many(self, items: list[Any]) -> Any:
        """What several items read at once are (a list here)."""
        return items

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at slot ``cursor`` (an int: one item) or slots (one item each).

        As TorchRL's: a slot may be one past the last item held (appending), not further.
        With ``set_cursor=True`` the items count as written (write count and cursor move).
        """
        if isinstance(cursor, torch.Tensor) and cursor.ndim == 0:
            cursor = int(cursor)
        if isinstance(cursor, int):
            slots, items = [cursor], [data]
        else:
            if isinstance(cursor, slice):
                slots = list(range(*cursor.indices(self.max_size)))
            else:
                slots = torch.as_tensor(cursor).reshape(-1).tolist()
            items = _items_of(data, type(self).__name__)
            if len(items) != len(slots):
                raise ValueError(
                    f"set() got {len(items)} items for {len(slots)} slots; give one item per slot"
                )
        items = [self._to_device(item) for item in items]
        with self.lock:
            held, length = self._items, len(self._items)
            for slot in slots:  # checked whole first: a refused set changes nothing
                if slot < 0 or slot >= self.max_size:
                    raise RuntimeError(
                        f"Cannot append data to the list storage: maximum capacity is "
                        f"{self.max_size} and the index of the item to be set is {slot}."
                    )
                if slot > length:
                    raise RuntimeError(
                        "Cannot append data located more than one item away from the storage "
                        f"size: the storage size is {length} and the index of the item to be "
                        f"set is {slot}."
                    )
                length = max(length, slot + 1)
            for slot, item in zip(slots, items):
                if slot == len(held):
                    held.append(item)
                else:
                    held[slot] = item
            if not set_cursor:  # items replaced where they are: slots and counters stay
                self._bump_rewrites()
                return
            if slots:
                self._write_count += len(slots)
                full = len(held) >= self.max_size
                self._cursor = (slots[-1] + 1) % self.max_size if full else len(held)
            self._bump_generation()

    def rewrite(self, index: torch.Tensor, data: Any) -> None:
        """Replace the items in filled slots ``index`` with the items of ``data`` (split along
        its first dimension, as :meth:`extend` does), in place: length, cursor and write count
        stay. A slot that holds no item is refused (``IndexError``), changing nothing."""
        slots = index.reshape(-1).tolist()
        items = [self._to_device(item) for item in _items_of(data, type(self).__name__)]
        if len(items) != len(slots):
            raise ValueError(
                f"an in-place write got {len(items)} items for {len(slots)} slots; give one item "
                "per slot"
            )
        with self.lock:
            held = self._items
            bad = [slot for slot in slots if not 0 <= slot < len(held)]
            if bad:
                raise IndexError(
                    f"slot {bad[0]} holds no item ({type(self).__name__} holds {len(held)}); an "
                    "in-place write replaces items that are held: write new ones with extend()"
                )
            for slot, item in zip(slots, items):
                held[slot] = item
            self._bump_rewrites()

    def column(self, key: NestedKey) -> torch.Tensor:
        """One key over the items held (TensorDicts), stacked in slot order."""
        k = normalize_key(key)
        with self.lock:
            items = list(self._items)
        if not items or not all(isinstance(t, TensorDictBase) for t in items):
            raise KeyError(f"key {format_key(k)} not found: the storage holds no TensorDict items")
        try:
            return torch.stack([t.get(k) for t in items])
        except KeyError:
            raise KeyError(f"key {format_key(k)} not found in every item of the storage") from None

    def empty(self) -> None:
        """Forget every item."""
        with self.lock:
            self._items = []
            self._cursor = 0
            self._bump_generation()

    def contains(self, item: Any) -> Any:
        """Whether ``item`` (an int, or a tensor of ints) names slots that hold an item."""
        if isinstance(item, int):
            n = len(self._items)
            return 0 <= (item + n if item < 0 else item) < n
        if isinstance(item, torch.Tensor):
            n = len(self._items)
            return (item >= 0) & (item < n)
        raise NotImplementedError(f"contains() of a {type(item).__name__} is not supported")

    # -- state ---------------------------------------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The items (tensors, TensorDicts, JSON values), cursor and write count.

        Raises :class:`~mixreplay.CheckpointError` naming the slot of an item that is none
        of those (nothing is pickled).
        """
        with self.lock:
            return {
                **saved_header(self, len(self._items)),
                # TorchRL's key: the items in slot order (tensors bare, TensorDicts as dicts)
                "_storage": [_encode_item(item, i, copy) for i, item in enumerate(self._items)],
            }

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        if not isinstance(state, dict) or state.get("type") != self.config_name:
            raise CheckpointError(
                f"not a saved {self.config_name} state: {describe(state)}; load it into the "
                "kind of storage that saved it"
            )
        n, cursor, count = check_saved_header(
            state, self.max_size, what="storage", capacity="max_size"
        )
        saved = state.get("_storage")
        if not isinstance(saved, list) or len(saved) != n:
            raise CheckpointError(
                f"inconsistent storage (len={n}, {describe(saved)} saved); the state is corrupt"
            )
        items = [_decode_item(entry, i) for i, entry in enumerate(saved)]

        def restore() -> None:
            self._items = items
            self._cursor, self._write_count = cursor, count
            self._bump_generation()

        return restore

    def __getstate__(self) -> dict[str, Any]:
        from multiprocessing.context import get_spawning_popen

        if get_spawning_popen() is not None:  # TorchRL's words
            raise RuntimeError(
                f"Cannot share a storage of type {type(self).__name__} between processes: its "
                "items live in this process's list; share rows with "
                "LazyTensorStorage/LazyMemmapStorage and shared=True"
            )
        state = super().__getstate__()
        state["_schema_cache"] = None
        return state

    def __repr__(self) -> str:
        bound = "" if self.bounded else ", unbounded"
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}{bound})"


class LazyStackStorage(ListStorage):
    """TensorDicts of any shapes, read back as one lazy stack (TorchRL's ``LazyStackStorage``).

    A :class:`ListStorage` whose reads of several items are a ``LazyStackedTensorDict``
    (``tensordict.lazy_stack`` along ``stack_dim``): items of different shapes (ragged
    trajectories, observations of varying size) stay as they are, and a key present
    with one shape in every item reads as a tensor. The buffer's default
    ``collate_fn`` keeps that stack as it is.

    Args:
        max_size: the most items held; unbounded if ``None``.

    Keyword Args:
        stack_dim: where the items are stacked (``-1``: after their own dims).
        device: where written items are moved (``None``: kept where they are).
        compilable: TorchRL's; only ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyStackStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyStackStorage(100), generator=0)
        >>> _ = rb.add(TensorDict(a=torch.zeros(3), b=torch.ones(2)))
        >>> _ = rb.add(TensorDict(a=torch.zeros(5), b=torch.ones(2)))
        >>> batch = rb.sample(4)
        >>> type(batch).__name__, batch["b"].shape
        ('LazyStackedTensorDict', torch.Size([4, 2]))
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        stack_dim: int = 0,
        device: torch.device | str | int | None = None,
        compilable: bool = False,
    ):
        super().__init__(max_size, device=device, compilable=compilable)
        self.stack_dim = check_int(stack_dim, "stack_dim")

    def gather_unlocked(self, index: torch.Tensor) -> Any:
        return self._many(self.items_at(index))

    def _many(self, items: list[Any]) -> Any:
        if not items:
            return items
        dim = self.stack_dim
        if dim < 0:
            dim = items[0].ndim + 1 + dim
        return _lazy_stack(list(items), dim)

    def collate(self, items: Any) -> Any:
        """The batch as read: the lazy stack itself (TorchRL's identity collate)."""
        return items
