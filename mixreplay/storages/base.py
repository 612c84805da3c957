"""The storage contract: what every storage provides to buffers, samplers and checkpoints.

::

    Storage                 the contract (abstract)
    ├── PackedStorage       rows packed into one int64 tensor [n, W] (RowLayout)
    │   ├── TensorStorage   a ring, allocated on the first write
    │   │   ├── LazyTensorStorage   in memory, on any device
    │   │   └── LazyMemmapStorage   in a memory-mapped file
    │   └── FrozenStorage   read-only rows (offline data)
    ├── ListStorage         items of any type, one per slot (storages/items.py)
    │   └── LazyStackStorage  TensorDicts of any shapes, read as a lazy stack
    └── ForeignStorage      a TorchRL Storage driven as a ring

A storage holds rows in slots ``0 .. max_size - 1``. Writes and reads take its
re-entrant :attr:`~Storage.lock`, so a collector thread may ``extend`` while a
learner samples: a reader never sees a half-written row. Samplers rely on
``len``, :attr:`~Storage.max_size`, :attr:`~Storage.cursor`,
:attr:`~Storage.write_count`, :attr:`~Storage.generation`,
:attr:`~Storage.rewrites` and :attr:`~Storage.device`, nothing else.

Rows change three ways, each told by its own counter: written at the cursor (``extend``:
:attr:`~Storage.write_count`), replaced or forgotten as a whole (a restore, ``empty``,
``set``: :attr:`~Storage.generation`), or rewritten in place where they are
(:meth:`~Storage.rewrite`, ``storage[i] = ...``: :attr:`~Storage.rewrites`; slots,
length, cursor and the samplers' priorities stay). :attr:`~Storage.revision` moves with
every one of them (TorchRL's ``_mutation_revision``).
"""

from __future__ import annotations

import abc
import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._torchrl_args import UNSUPPORTED_STORAGE_METHODS
from mixreplay._validate import check_int, check_saved_int, describe
from mixreplay.data_types import Codec
from mixreplay.errors import CheckpointError, EmptyBufferError
from mixreplay.layout import PackedRows, RowLayout
from mixreplay.schema import NestedKey, Schema, format_key, normalize_key

__all__ = [
    "Locked",
    "PackedStorage",
    "Storage",
    "as_device",
    "as_index",
    "check_ndim",
    "check_row",
    "check_rows",
    "fingerprint_rows",
]


def as_index(index: Any, length: int, device: torch.device) -> torch.Tensor:
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


def as_device(device: Any) -> torch.device:
    """``device`` as a :class:`torch.device` (CPU for ``None``)."""
    if device is None:
        return torch.device("cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise (TypeError if not isinstance(device, (str, int)) else ValueError)(
            "device must be a torch.device or a device string such as 'cpu' or 'cuda:0', "
            f"got {describe(device)}"
        ) from None


def check_rows(data: Any) -> int:
    """The number of rows of ``data``, a TensorDict with one batch dim; a clear error otherwise."""
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
    n = int(data.batch_size[0])
    if n == 0:
        raise ValueError("extend got an empty batch (batch_size=[0]); pass at least one row")
    return n


def check_ndim(ndim: Any) -> int:
    """``ndim`` if a ring can hold it: 1 (rows) or 2 (TorchRL's ``[n, width]`` grid).

    With ``ndim=2`` a ring keeps TorchRL's grid: dim 0 is the dim it is extended along
    (time, for a collector batch extended with ``dim_extend=1``), dim 1 its width (the
    envs), fixed by the first write. The grid is stored as rows, ``width`` consecutive
    rows per step along dim 0, so the capacity is ``ceil(max_size / width) * width`` rows,
    as in TorchRL.
    """
    ndim = check_int(ndim, "ndim")
    if ndim not in (1, 2):
        raise ValueError(
            f"ndim={ndim} is not supported: mixreplay's rings hold rows (ndim=1) or TorchRL's "
            "[n, width] grid of a collector batch (ndim=2); flatten the other dims into the "
            "rows first (data.flatten(1, -1) for a grid of width their product)"
        )
    return ndim


def check_row(row: Any) -> None:
    """Raise a clear error unless ``row`` is one row: a TensorDict with batch ``[]``."""
    if not isinstance(row, TensorDictBase):
        raise TypeError(f"add expects a TensorDict row, got {type(row).__name__}")
    if row.batch_dims != 0:
        raise ValueError(
            f"add expects one row (batch_size=[]), got batch_size={list(row.batch_size)}; "
            "use extend() for several rows"
        )


def fingerprint_rows(rows: torch.Tensor, chunk: int = 1 << 16) -> str:
    """A 128-bit BLAKE2b hash of packed rows (what datasets and checkpoints compare)."""
    h = hashlib.blake2b(digest_size=16)
    rows = rows.cpu()
    for i in range(0, rows.shape[0], chunk):
        h.update(rows[i : i + chunk].contiguous().numpy().tobytes())
    return h.hexdigest()


class Locked:
    """An object with a re-entrant ``lock`` that survives pickling (the copy gets a fresh lock).

    Re-entrant: a buffer holds a storage's lock across ``storage.extend`` and its
    sampler's ``on_extend``.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def lock_held(self) -> bool:
        """Whether the calling thread holds :attr:`lock` (a prefetching buffer checks before it
        waits for a worker that takes it)."""
        owned = getattr(self.lock, "_is_owned", None)  # CPython's RLock says so
        return bool(owned()) if owned is not None else False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()


def staging(shape: torch.Size, host: torch.device, dest: torch.device) -> torch.Tensor:
    """A new packed ``int64`` buffer on ``host`` for rows bound for ``dest``: page-locked when
    ``host`` is the CPU and ``dest`` an accelerator, so that :func:`move` is one asynchronous
    copy (a pinned block is reused by torch's host allocator once the copy has run)."""
    pin = host.type == "cpu" and dest.type != "cpu" and torch.cuda.is_available()
    return torch.empty(shape, dtype=torch.int64, device=host, pin_memory=pin)


def to_device(index: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``index`` on ``device``; from the CPU to an accelerator through page-locked memory, so
    the host does not wait for the copy (a pageable copy to a GPU is synchronous)."""
    if index.device.type == "cpu" and device.type != "cpu" and torch.cuda.is_available():
        return index.pin_memory().to(device, non_blocking=True)
    return index.to(device)


def move(staged: torch.Tensor, out: torch.Tensor) -> None:
    """One copy of packed ``staged`` into ``out`` on another device, without waiting for it
    when ``staged`` is pinned (the kernels that read ``out`` are queued after it)."""
    out.copy_(staged, non_blocking=staged.is_pinned())


class Storage(Locked, abc.ABC):
    """Where the rows of one source live; the contract every storage fulfils.

    Attributes:
        max_size: capacity in rows (the row count of a read-only storage).
        device: where the rows live.
        writable: whether :meth:`extend` may be called (``False`` for offline data).
        packed: whether rows are packed words (:class:`PackedStorage`): mixing buffers
            then gather them straight into one output with :meth:`PackedStorage.gather_into`.
        holds_items: whether slots hold items of any type (:class:`~mixreplay.ListStorage`):
            the buffer writes them as they are and collates the items it reads.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import FrozenStorage, LazyTensorStorage, Storage
        >>> ring = LazyTensorStorage(4)
        >>> _ = ring.extend(TensorDict({"x": torch.arange(6)}, [6]))
        >>> isinstance(ring, Storage), len(ring), ring.cursor, ring.write_count, ring.writable
        (True, 4, 2, 6, True)
        >>> FrozenStorage.from_tensordict(ring[:]).writable
        False
    """

    writable: ClassVar[bool] = True
    packed: ClassVar[bool] = False
    holds_items: ClassVar[bool] = False  # see the class docs
    #: the name a checkpoint saves this storage under (the class name by default): moving
    #: the class to another module changes nothing saved; renaming it means setting this
    config_name: ClassVar[str] = "Storage"
    max_size: int
    device: torch.device
    #: how rows map to the type the storage's first write had (``None``: TensorDict rows)
    codec: Codec | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config_name" not in cls.__dict__:
            cls.config_name = cls.__name__

    #: in-place writes and every write: see :attr:`rewrites` and :attr:`revision`
    _rewrites: int = 0
    _revision: int = 0

    def __init__(self) -> None:
        super().__init__()
        self._generation = 0
        self._rewrites = 0
        self._revision = 0

    @abc.abstractmethod
    def __len__(self) -> int:
        """Rows held."""

    @property
    @abc.abstractmethod
    def cursor(self) -> int:
        """The slot the next row will be written to."""

    @property
    @abc.abstractmethod
    def write_count(self) -> int:
        """Rows written since creation (overwritten ones included)."""

    @property
    @abc.abstractmethod
    def schema(self) -> Schema | None:
        """Keys, per-row shapes and dtypes, or ``None`` before the first write."""

    @property
    def layout(self) -> RowLayout | None:
        """The packed layout (``None`` for storages that do not pack rows)."""
        return None

    @property
    def row_bytes(self) -> int:
        """Bytes per stored row (0 before the first write)."""
        schema = self.schema
        return 0 if schema is None else schema.row_nbytes

    @property
    def generation(self) -> int:
        """Changes whenever rows change other than by :meth:`extend` (restore, empty).

        A sampler that derives an index from the rows (episode boundaries, valid
        slice starts) rebuilds it when ``(generation, write_count)`` changes.
        """
        return self._generation

    def _bump_generation(self) -> None:
        self._generation += 1
        self._revision += 1

    @property
    def rewrites(self) -> int:
        """In-place writes since creation (:meth:`rewrite`): rows changed where they are.

        What a sampler derives from the rows' contents (episode boundaries, valid slice
        starts) is keyed on it too (:meth:`content_key`); what it keeps per slot
        (priorities, an epoch's order) is not: an in-place write keeps them.
        """
        return self._rewrites

    def _bump_rewrites(self) -> None:
        self._rewrites += 1
        self._revision += 1

    @property
    def revision(self) -> int:
        """Writes since creation, one per call that changed rows: ``extend``/``add``, an
        in-place write, a restore, ``empty`` (TorchRL's ``storage._mutation_revision``)."""
        return self._revision

    def _bump_revision(self) -> None:
        """Count one ``extend`` (the rows it wrote are counted by :attr:`write_count`)."""
        self._revision += 1

    @property
    def _mutation_revision(self) -> int:
        # TorchRL's name for the same counter (its tests and samplers read it)
        return self.revision

    @property
    def _last_cursor_index(self) -> int | None:
        """The slot of the newest row written at the cursor (along dim 0: the step, for an
        ``ndim=2`` grid), ``None`` when the storage holds none (TorchRL's name)."""
        n = len(self)
        if n == 0:
            return None
        width = self.width or 1
        return ((self.cursor - width) % self.max_size) // width

    @property
    def _is_full(self) -> bool:
        # TorchRL's name: every slot holds a row (its boundary utilities read it)
        return len(self) >= self.max_size

    def content_key(self) -> tuple[int, int, int, int]:
        """Changes whenever the rows' contents may have: ``(generation, rewrites,
        write_count, len)`` (what a cache of anything derived from them compares)."""
        return (self.generation, self.rewrites, self.write_count, len(self))

    @abc.abstractmethod
    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``); return the slots written."""

    def add(self, row: TensorDictBase) -> int:
        """Write one row (a TensorDict with batch ``[]``) and return its slot."""
        check_row(row)
        return int(self.extend(row.unsqueeze(0))[0])

    @abc.abstractmethod
    def gather_unlocked(self, index: torch.Tensor) -> TensorDictBase:
        """Rows ``index`` as a new ``[len(index)]`` TensorDict (caller holds :attr:`lock`)."""

    def gather_into(self, index: torch.Tensor, out: torch.Tensor) -> None:
        """Copy rows ``index`` into packed ``out`` (``[len(index), W]``; caller holds :attr:`lock`).

        Only for storages that pack their rows (:attr:`packed`): a mixing buffer's fast path.
        """
        raise NotImplementedError(f"{type(self).__name__} does not pack its rows")

    def gather_to(self, index: torch.Tensor, device: torch.device) -> TensorDictBase:
        """Rows ``index`` as a new ``[len(index)]`` TensorDict on ``device`` (caller holds
        :attr:`lock`). Here gathered, then moved leaf by leaf; a packed storage moves them as
        one packed buffer (:meth:`PackedStorage.gather_to`)."""
        batch = self.gather_unlocked(index)
        return batch.to(device, non_blocking=device.type != "cpu")

    def gather(self, index: torch.Tensor) -> TensorDictBase:
        """Rows ``index`` (an int64 tensor of valid slots) as a new ``[len(index)]`` TensorDict."""
        with self.lock:
            return self.gather_unlocked(index)

    def __getitem__(self, index: Any) -> Any:
        """Rows by position: an int gives one row, anything else ``[k]`` rows.

        Rows come back as the type the storage was written with (a TensorDict, a
        tensor, a pytree, a tensorclass: see :mod:`mixreplay.data_types`).
        """
        with self.lock:
            n = len(self)
            if self.schema is None or n == 0:
                raise IndexError("the storage holds no rows yet")
            idx = as_index(index, n, self.device)
            td = self.gather_unlocked(idx)
            codec = self.codec
        if isinstance(index, int):
            td = td[0]
        return td if codec is None else codec.decode(td)

    def get(self, index: Any) -> Any:
        """Rows by position, as :meth:`__getitem__` (TorchRL's ``Storage.get``)."""
        return self[index]

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Write ``data`` at slots ``cursor`` (TorchRL's ``Storage.set``); see the rings."""
        raise TypeError(f"{type(self).__name__} does not support set(); write rows with extend()")

    def rewrite(self, index: torch.Tensor, data: Any) -> None:
        """Replace the rows in filled slots ``index`` (int64 ``[k]``) with ``data`` (``[k]``
        rows), in place: length, cursor and write count stay, and so do the samplers'
        per-slot state (priorities); :attr:`rewrites` moves. Checked whole first: a refused
        write changes nothing. The rings and the storages of items implement it."""
        raise TypeError(
            f"{type(self).__name__} does not support in-place writes; write rows with extend()"
        )

    def keep_keys(self) -> None:
        """Refuse in-place writes that add keys from now on (a reader relies on the rows'
        layout); a storage whose keys never change that way has nothing to do."""

    def __setitem__(self, index: Any, value: Any) -> None:
        """TorchRL's ``storage[index] = value``: rows replaced in place, the counters kept.

        A TensorDict into a storage of TensorDict rows goes through :meth:`rewrite` (some or
        new keys); anything else through ``set(index, value, set_cursor=False)``. Held slots
        only: a slot that holds no row is refused (``IndexError``), as by ``rb[index] = ...``
        (``set`` itself writes any slot, as TorchRL's).
        """
        self._check_held(index)
        if (
            self.packed
            and self.ndim == 1
            and self.codec is None
            and isinstance(value, TensorDictBase)
            and len(self)
        ):
            slots = as_index(index, len(self), self.device)
            if value.batch_dims == 0:
                value = value.unsqueeze(0).expand(slots.numel())
            self.rewrite(slots, value)
            return
        self.set(index, value, set_cursor=False)

    def _check_held(self, index: Any) -> None:
        """Refuse an in-place write at a slot (a step of an ``ndim=2`` grid) holding no row."""
        width = self.width or 1
        held = len(self) // width
        where = index[0] if isinstance(index, tuple) and width > 1 else index
        try:
            as_index(where, held, torch.device("cpu"))
        except IndexError as err:
            raise IndexError(
                f"storage[{index!r}] = ...: {err}; an in-place write replaces rows that are "
                "held: write new ones with extend() (or set(), TorchRL's)"
            ) from None

    @property
    def ndim(self) -> int:
        """TorchRL's storage dimensions: 1 here (a storage is a sequence of rows); a ring may
        hold TorchRL's ``ndim=2`` grid (see :func:`check_ndim`)."""
        return 1

    @property
    def width(self) -> int:
        """Rows per step along dim 0: 1 for a storage of rows, the grid's second dim for an
        ``ndim=2`` ring (once its first write has fixed it)."""
        return 1

    @property
    def shape(self) -> torch.Size:
        """``[len]`` (TorchRL's ``Storage.shape`` of a one-dimensional storage)."""
        return torch.Size([len(self)])

    def grid_index(self, slots: torch.Tensor) -> torch.Tensor:
        """TorchRL's index of flat ``slots``: the slots themselves here (an ``ndim=2`` ring
        gives ``[k, 2]`` coordinates)."""
        return slots

    def contains(self, item: Any) -> bool:
        """Whether ``item`` (an int or a tensor of ints) names filled slots (TorchRL's ``contains``)."""
        index = torch.as_tensor(item)
        return bool(((index >= 0) & (index < len(self))).all())

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save this storage alone as a checkpoint directory at ``path`` (atomic).

        A buffer's :meth:`~mixreplay.ReplayBuffer.dumps` saves its storage with it;
        this is TorchRL's storage-level ``dumps``.
        """
        from mixreplay import checkpoint

        with self.lock:
            checkpoint.save_state(path, {"kind": "storage", "storage": self.state_dict(copy=False)})

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Restore a checkpoint that :meth:`dumps` wrote; a :class:`~mixreplay.CheckpointError`
        (and nothing changed) if it is not one or does not fit this storage."""
        from mixreplay import checkpoint

        state = checkpoint.load_state(path)
        if state.get("kind") != "storage":
            raise CheckpointError(
                f"{path} holds a {state.get('kind')} checkpoint, not a storage's; load it "
                "with the object that saved it (rb.loads(path) for a buffer)"
            )
        try:
            self.load_state_dict(state.get("storage"))
        except CheckpointError as err:
            raise CheckpointError(f"cannot load {path}: {err}") from err

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias of :meth:`dumps` (TorchRL's name)."""
        self.dumps(path)

    dump = save

    def load(self, path: str | os.PathLike[str]) -> None:
        """Alias of :meth:`loads` (TorchRL's name)."""
        self.loads(path)

    def column(self, key: NestedKey) -> torch.Tensor:
        """One key over the filled rows, ``[len, *shape]``, in slot order."""
        k = normalize_key(key)
        schema = self.schema
        if schema is None or k not in schema:
            known = "" if schema is None else ", ".join(format_key(f.key) for f in schema.fields)
            raise KeyError(f"key {format_key(k)} not found in storage with keys [{known}]")
        with self.lock:
            return self.gather_unlocked(torch.arange(len(self), device=self.device)).get(k)

    def empty(self) -> None:
        """Forget every row (the schema is kept)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be emptied")

    def reset_write_count(self) -> None:
        """Start :attr:`write_count` again from 0 (TorchRL's ``empty(empty_write_count=True)``)."""
        raise NotImplementedError(f"{type(self).__name__} has no write count to reset")

    # -- state ----------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str | None:
        """A hash of the rows (``None`` where the storage cannot compute one)."""
        return None

    def reference(self) -> dict[str, Any]:
        """What identifies the rows without copying them: type, count, schema, fingerprint.

        Checkpoints save read-only data (offline datasets) this way, and
        :meth:`differences` tells whether the rows a buffer is given are the ones saved.
        """
        schema = self.schema
        return {
            "reference": True,
            "type": self.config_name,
            "rows": len(self),
            "schema": None if schema is None else schema.to_json(),
            "fingerprint": self.fingerprint,
        }

    def differences(self, saved: Any) -> list[str]:
        """How the rows a saved :meth:`reference` describes differ from these (empty: the same)."""
        if not isinstance(saved, dict):
            return [f"the saved reference is a {type(saved).__name__}, not a dict"]
        problems = []
        mine = self.fingerprint
        if mine is not None and saved.get("fingerprint") != mine:
            problems.append(f"fingerprint {saved.get('fingerprint')} saved, {mine} given")
        if saved.get("rows") != len(self):
            problems.append(f"{saved.get('rows')} rows saved, {len(self)} given")
        schema, theirs = self.schema, saved.get("schema")
        if theirs is not None and schema is not None and theirs != schema.to_json():
            try:
                lines = Schema.from_json(theirs).differences(schema, names=("saved", "given"))
            except (ValueError, KeyError, TypeError):
                lines = ["unreadable"]
            problems.append("schema " + "; ".join(lines))
        return problems

    @abc.abstractmethod
    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The storage's state: tensors and JSON values.

        Keyword Args:
            copy: copy the rows (a snapshot). ``False`` returns views, for a caller
                that holds :attr:`lock` until it has written them (checkpoints).
        """

    @abc.abstractmethod
    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        """Check ``state`` whole, change nothing; return the function that applies it.

        Raises :class:`~mixreplay.CheckpointError` naming what does not fit.
        """

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`; on :class:`~mixreplay.CheckpointError` nothing changed."""
        apply = self.plan_load_state_dict(state)
        with self.lock:
            apply()


def _refused(name: str, way: str) -> property:
    def refuse(self: Storage) -> Any:
        raise AttributeError(f"{type(self).__name__} has no TorchRL {name!r}: {way}")

    return property(refuse, doc=f"TorchRL's ``{name}``: not provided ({way}).")


# TorchRL storage methods mixreplay lacks say the mixreplay way. Properties, not a
# __getattr__: a Python __getattr__ would slow every attribute access of every storage.
for _name, _way in UNSUPPORTED_STORAGE_METHODS.items():
    setattr(Storage, _name, _refused(_name, _way))


class RingCounters:
    """The counters of a storage written as a ring: :attr:`cursor` and :attr:`write_count`.

    A mixin before :class:`Storage` in the bases; the storage keeps ``_cursor`` and
    ``_write_count`` (plain attributes, or shared ones) and its :attr:`~Storage.lock`.
    """

    _cursor: int
    _write_count: int
    lock: Any

    @property
    def cursor(self) -> int:
        return self._cursor

    @property
    def write_count(self) -> int:
        return self._write_count

    def reset_write_count(self) -> None:
        with self.lock:
            self._write_count = 0


# -- the header of a saved ring storage ---------------------------------------------------------

#: ``schema`` left out of a header (a storage whose state has no schema key)
NO_SCHEMA: Any = object()


def saved_header(
    storage: Storage,
    length: int,
    *,
    type_name: str | None = None,
    inner: str | None = None,
    schema: Any = NO_SCHEMA,
) -> dict[str, Any]:
    """The header a ring storage's state starts with; :func:`check_saved_header` reads it.

    ``{"type", ["inner",] "max_size", ["schema",] "cursor", "len", "write_count"}``:
    ``type_name`` defaults to the storage's registered name, ``schema`` is a
    :class:`~mixreplay.schema.Schema` or ``None`` (saved as JSON), left out when not given.
    """
    header: dict[str, Any] = {"type": storage.config_name if type_name is None else type_name}
    if inner is not None:
        header["inner"] = inner
    header["max_size"] = storage.max_size
    if schema is not NO_SCHEMA:
        header["schema"] = None if schema is None else schema.to_json()
    header["cursor"] = storage.cursor
    header["len"] = length
    header["write_count"] = storage.write_count
    return header


def check_saved_header(
    state: Any, max_size: int, *, what: str = "ring", capacity: str = "online_capacity"
) -> tuple[int, int, int]:
    """``(len, cursor, write_count)`` of a saved ring's header, checked against ``max_size``.

    Raises :class:`~mixreplay.CheckpointError` naming what does not fit: ``what`` names
    the saved storage, ``capacity`` the argument that sets its size.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"a storage state is a dict, got {type(state).__name__}")
    saved = check_saved_int(state.get("max_size"), "storage max_size", min=1)
    if saved != max_size:
        raise CheckpointError(
            f"the saved {what} has max_size {saved}, this storage {max_size}; build it with "
            f"the same capacity (e.g. {capacity}={saved})"
        )
    length, cursor, count = (
        check_saved_int(state.get(key), f"storage {key}")
        for key in ("len", "cursor", "write_count")
    )
    if (
        length > max_size
        or cursor >= max_size
        or count < length
        or (length < max_size and cursor != length)
    ):
        raise CheckpointError(
            f"inconsistent {what} (len={length}, cursor={cursor}, write_count={count}, "
            f"max_size={max_size}); the state is corrupt"
        )
    return length, cursor, count


# the largest packed gather kept for the next batch (a batch of 256 Hopper rows: 28 KiB)
_GATHER_SCRATCH_BYTES = 1 << 20


class PackedStorage(Storage):
    """Rows packed into one ``int64`` tensor ``[max_size, W]`` following a :class:`RowLayout`.

    Reading ``k`` rows is one ``index_select`` whatever the number of keys, and the
    TensorDict handed back is a set of typed views over the gathered words.
    Pickling copies the rows (a memory-mapped storage arrives as an in-memory copy).
    """

    packed: ClassVar[bool] = True
    _rows: torch.Tensor | None
    _layout: RowLayout | None
    _fingerprint: tuple[tuple[int, int, int, int], str] | None = None
    # the layout and packed rows of the last host gather, kept for the next of its size
    _gather_scratch: tuple[RowLayout, PackedRows] | None = None
    # the ``device`` of the TensorDicts read: the storage's, or ``None`` for a storage that
    # wraps TensorDicts built without one (TorchRL's TensorStorage(data) reads them as given)
    _read_device_unset: bool = False

    @property
    def fingerprint(self) -> str:
        """A 128-bit BLAKE2b hash of the filled rows (computed once per content)."""
        key = self.content_key()
        cached = self._fingerprint
        if cached is None or cached[0] != key:
            with self.lock:
                cached = self._fingerprint = (key, self._rows_fingerprint())
        return cached[1]

    def _rows_fingerprint(self) -> str:
        """The fingerprint of the filled rows, computed (:attr:`fingerprint` caches it)."""
        return fingerprint_rows(self.rows)

    @property
    def layout(self) -> RowLayout | None:
        """The packed layout, or ``None`` before the first write."""
        return self._layout

    @property
    def schema(self) -> Schema | None:
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
        if rows is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        if index.device != rows.device:
            index = to_device(index, rows.device)
        return torch.index_select(rows, 0, index)

    def gather_into(self, index: torch.Tensor, out: torch.Tensor) -> None:
        """Copy rows ``index`` into packed ``out`` (``[len(index), W]``; caller holds :attr:`lock`).

        ``index`` and ``out`` may be on any device: rows bound elsewhere are staged once
        (page-locked towards an accelerator) and moved with one copy."""
        rows = self._rows
        if rows is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        if rows.is_cpu and index.is_cpu and out.is_cpu:  # the common case, told apart cheaply
            torch.index_select(rows, 0, index, out=out)
            return
        if index.device != rows.device:
            index = to_device(index, rows.device)
        if out.device == rows.device:
            torch.index_select(rows, 0, index, out=out)
        else:
            staged = staging(out.shape, rows.device, out.device)
            torch.index_select(rows, 0, index, out=staged)
            move(staged, out)

    def gather_unlocked(self, index: torch.Tensor) -> TensorDict:
        layout, rows = self._layout, self._rows
        if layout is None or rows is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        if index.device != rows.device:
            index = to_device(index, rows.device)
        if rows.is_cpu and index.dim() == 1:
            # One packed index_select into rows kept for the next batch of this size, then
            # every leaf copied out at once (RowLayout.copy_views): three ops per batch.
            n = index.shape[0]
            kept = self._gather_scratch
            if kept is None or kept[0] is not layout or kept[1].batch_size[0] != n:
                # on the rows' device, not the default one (torch.set_default_device)
                kept = (layout, layout.new_rows(n, rows.device))
                if n * layout.row_bytes <= _GATHER_SCRATCH_BYTES:
                    self._gather_scratch = kept
            out = kept[1]
            torch.index_select(rows, 0, index, out=out.words)
            device = None if self._read_device_unset else self.device
            return layout.copy_views(out.views, out.batch_size, device)
        return layout.gather(rows, index, None if self._read_device_unset else self.device)

    def gather_to(self, index: torch.Tensor, device: torch.device) -> TensorDict:
        """Rows ``index`` as a TensorDict on ``device``, moved as one packed buffer.

        The rows are gathered into one :func:`staging` buffer (page-locked from host
        memory to an accelerator), moved with one copy (:func:`move`, ``non_blocking``
        when pinned) and split into leaves on ``device``, each owning its memory: one
        host-to-device copy per batch, whatever the number of keys.
        """
        layout, rows = self._layout, self._rows
        if layout is None or rows is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        if rows.device == device:
            return self.gather_unlocked(index)
        if index.device != rows.device:
            index = to_device(index, rows.device)
        staged = staging(torch.Size([index.numel(), layout.row_words]), rows.device, device)
        torch.index_select(rows, 0, index, out=staged)
        out = torch.empty(staged.shape, dtype=torch.int64, device=device)
        move(staged, out)
        return layout.copy_out(out, device)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_gather_scratch", None)
        return state

    def column(self, key: NestedKey) -> torch.Tensor:
        """A typed view ``[len, *shape]`` of one key over the filled rows (slot order).

        The view shares memory with the storage: treat it as read-only.
        """
        k = normalize_key(key)
        layout = self._layout
        if layout is not None:
            for i, f in enumerate(layout.fields):
                if f.key == k:
                    return layout.split(self.rows)[i]
        return super().column(key)  # raises the KeyError listing the keys

    def to_tensordict(self) -> TensorDict:
        """A copy of the filled rows as a plain ``[len]`` TensorDict (slot order)."""
        if self._layout is None:
            return TensorDict({}, batch_size=[0])
        return self._layout.copy_out(self.rows, self.device)
