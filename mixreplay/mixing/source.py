"""The source contract: what a mixing buffer asks of each of its sources.

A mixing buffer keeps only the mixing (the split, the labels, the output batch).
Everything about one source (how many rows it can give, how it draws and gathers
them, its transforms, priorities and state) is asked of that source through
:class:`MixSource`::

    MixSource          the contract
    ├── BufferSource   a mixreplay ReplayBuffer or OfflineDataset: drawn with the mixing
    │                  buffer's generator under the buffer's own lock; packed rows with no
    │                  transform are gathered straight into the batch (one gather each)
    └── ForeignSource  anything with sample(n) and len() (a TorchRL buffer or dataset):
                       it samples itself, with its own RNG and transforms

:func:`as_mix_source` picks the kind for an object; a new kind of source
subclasses :class:`MixSource` (a :class:`MixSource` given as a source is used as
is). (Not to be confused with :class:`mixreplay.datasets.Source`, a dataset's
origin on disk.)
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._state import Plan
from mixreplay.buffers.replay import Drawer, ReplayBuffer
from mixreplay.errors import CheckpointError, ReadOnlyError
from mixreplay.layout import RowLayout
from mixreplay.samplers.base import MASK_KEY, Sampler
from mixreplay.schema import BOOKKEEPING_KEYS, Schema

__all__ = [
    "BufferSource",
    "Drawn",
    "ForeignSource",
    "MixSource",
    "as_mix_source",
    "peek_schema",
    "strip_bookkeeping",
]


@dataclass(slots=True)
class Drawn:
    """What a source contributes to one batch."""

    #: its rows, after its own transforms: a ``[n]`` TensorDict
    rows: TensorDictBase
    #: each row's place in the source (int64 ``[n]``), or ``None`` where it does not say
    index: torch.Tensor | None


def strip_bookkeeping(td: TensorDictBase, keep: Schema | None = None) -> TensorDictBase:
    """Drop sampler bookkeeping keys (``"index"``, weights) that ``keep`` does not hold."""
    drop = [k for k in BOOKKEEPING_KEYS if (keep is None or k not in keep) and k[0] in td.keys()]
    return td.exclude(*drop) if drop else td


def _schema_after(transform: Any, row: TensorDictBase) -> Schema:
    out = transform(row.clone())
    return Schema.from_tensordict(strip_bookkeeping(out), batch_dims=out.batch_dims)


class MixSource(abc.ABC):
    """One source of a mixing buffer: what the buffer asks of it, and nothing else.

    A subclass implements the abstract members; the others have the defaults of a
    read-only source that samples itself (no fast path, no priorities, no state
    beyond a reference).
    """

    # -- sizes ------------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def obj(self) -> Any:
        """The object the user gave as this source."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Rows held."""

    def available(self) -> int:
        """Units that could be drawn now (0: the buffer skips this source)."""
        return len(self)

    def available_getter(self) -> Callable[[], int]:
        """:meth:`available` as a callable of no arguments, resolved once: the buffer asks
        it before every batch, so a source may hand out the cheapest call that answers it."""
        return self.available

    @property
    def unit(self) -> int:
        """Rows per sampling unit (a slice sampler's slice length): counts are multiples of it."""
        return 1

    @property
    def distinct(self) -> bool:
        """Whether one draw never repeats a row (the buffer asks for at most ``available()``)."""
        return False

    @property
    def writable(self) -> bool:
        """Whether rows may be written to it (:meth:`extend`)."""
        return False

    @property
    def prioritized(self) -> bool:
        """Whether it takes priority updates."""
        return False

    @property
    def capacity(self) -> int:
        """Rows it can hold (a writable source's storage capacity; a read-only one's rows)."""
        return len(self)

    @property
    def pads(self) -> bool:
        """Whether its draws may hold padding rows (marked by :meth:`mask`)."""
        return False

    @property
    def write_count(self) -> int:
        """Rows written through :meth:`extend` since creation."""
        return 0

    @property
    def transforms_version(self) -> int:
        """Changes whenever this source's own transforms change (a mixing buffer then plans
        its draws again)."""
        return 0

    @property
    def draw_version(self) -> int:
        """Changes whenever what its draws give changes other than its rows: its transforms,
        its sampler's settings (prefetched batches then go)."""
        return self.transforms_version

    @property
    def device(self) -> torch.device | None:
        """Where its rows live (``None``: not known before they are drawn)."""
        return None

    # -- schema -----------------------------------------------------------------------------

    @property
    def stored_schema(self) -> Schema | None:
        """The rows' schema as stored, when known without drawing (``None`` otherwise)."""
        return None

    @abc.abstractmethod
    def schema(self) -> Schema | None:
        """The schema of the rows it contributes, after its own transforms (``None``: no rows yet)."""

    def incoming_schema(self, data: TensorDictBase) -> Schema:
        """What rows ``data``, as this source stores them, would contribute to a batch."""
        return Schema.from_tensordict(data, batch_dims=data.batch_dims)

    def saved_schema(self, state: Any) -> Schema | None:
        """The schema of the rows a saved state holds, after this source's transforms
        (``None`` when the state holds no rows: a reference)."""
        return None

    # -- drawing ----------------------------------------------------------------------------

    def packed_layout(self) -> RowLayout | None:
        """The layout of its rows when :meth:`packed_drawer` can gather them straight into a
        packed batch (packed rows, no transform); ``None`` otherwise."""
        return None

    def packed_drawer(self) -> Drawer:
        """What draws ``n`` rows straight into a packed batch (``[n, W]`` words of
        :meth:`packed_layout`) and returns their indices (a
        :data:`~mixreplay.buffers.replay.Drawer`). Only asked for when :meth:`packed_layout`
        is not ``None``."""
        raise NotImplementedError(f"{type(self).__name__} draws no packed rows")

    @abc.abstractmethod
    def draw(self, n: int, generator: torch.Generator) -> Drawn:
        """Exactly ``n`` rows (after its own transforms), drawn with ``generator`` where it can."""

    def weight(self, index: torch.Tensor) -> torch.Tensor | None:
        """Importance weights of drawn rows, or ``None`` when they are uniform."""
        return None

    def mask(self, index: torch.Tensor) -> torch.Tensor | None:
        """Of the draw that just returned ``index`` (its lock still held): ``True`` for each
        real row, ``False`` for padding; ``None`` when it does not pad."""
        return None

    # -- priorities -------------------------------------------------------------------------

    def check_priority(self, index: torch.Tensor, priority: torch.Tensor) -> Any:
        """Validate a priority update whole (changes nothing); return it ready to apply."""
        raise TypeError(f"{self!r} does not use priorities")

    def apply_priority(self, checked: Any) -> None:
        """Apply what :meth:`check_priority` returned."""
        raise TypeError(f"{self!r} does not use priorities")

    # -- prefetching ------------------------------------------------------------------------

    def draw_state(self) -> Any:
        """What a draw changes in the source (beyond the generator), to rewind to."""
        return None

    def restore_draw_state(self, state: Any) -> None:  # noqa: B027 - a no-op by default
        """Put back a :meth:`draw_state` snapshot."""

    # -- writes and state -------------------------------------------------------------------

    def lock(self) -> AbstractContextManager[Any]:
        """Held for a consistent snapshot of its state (a checkpoint, a priority update)."""
        return contextlib.nullcontext()

    def lock_held(self) -> bool:
        """Whether the calling thread holds :meth:`lock` (which its draws take)."""
        return False

    def add_reader(self, reader: Any) -> None:  # noqa: B027 - a no-op by default
        """Pause ``reader``'s prefetching whenever this source's whole state is read or
        replaced on its own (a mixing buffer registers itself)."""

    def paused(self) -> AbstractContextManager[Any]:
        """Hold every prefetching reader of this source still (see :meth:`add_reader`): taken
        before its lock by whoever reads or replaces its whole state."""
        return contextlib.nullcontext()

    def write_side(self, data: TensorDictBase) -> Any:
        """``data`` as :meth:`extend` would store it: after the source's write-side
        transforms (``None``: they keep nothing)."""
        return data

    def extend(
        self,
        data: TensorDictBase,
        check: Callable[[TensorDictBase], None] | None = None,
        written: Callable[[torch.Tensor], None] | None = None,
        transformed: bool = False,
    ) -> torch.Tensor:
        """Write rows; return where they went. ``check(rows)``, when given, is called on the
        rows as they will be stored (after any write-side transform), before anything is
        written; what it raises is raised, with nothing written. ``written(index)``, when
        given, is called once the rows are in, under :meth:`lock` (a rate limiter counts
        them there, so that a checkpoint holds rows and count together). ``transformed``:
        ``data`` already went through :meth:`write_side`."""
        raise ReadOnlyError(f"{self!r} is read-only")

    @abc.abstractmethod
    def state_dict(self, *, copy: bool = True, by_reference: bool = False) -> dict[str, Any]:
        """Its state: its rows (or, ``by_reference``, what identifies them) and its sampler's."""

    @abc.abstractmethod
    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        """Check a saved state whole, change nothing; return the function that applies it."""


class BufferSource(MixSource):
    """A mixreplay :class:`~mixreplay.ReplayBuffer` (or :class:`~mixreplay.OfflineDataset`).

    Its rows are drawn by its own sampler with the mixing buffer's generator,
    gathered under its own lock (:meth:`ReplayBuffer.packed_drawer` /
    :meth:`ReplayBuffer.draw_rows`), and transformed by its own transforms.
    """

    def __init__(self, buffer: ReplayBuffer, name: str = "online"):
        if buffer.storage.ndim > 1:
            raise ValueError(
                f"source {name!r} stores an ndim={buffer.storage.ndim} grid, and a mixing buffer "
                "mixes rows: give it an ndim=1 storage and extend a [n_envs, T] collector batch "
                "as rows with data.reshape(-1) (env by env, so each env's steps stay consecutive)"
            )
        if buffer.sampler.variable_length:
            raise ValueError(
                f"source {name!r} samples with {buffer.sampler!r}, which returns slices of varying "
                "length, so it cannot give a mixing buffer its exact share of rows; use "
                'pad_output=True (whole slices, padded; info[("collector", "mask")] marks the real '
                "rows) or strict_length=True "
                "without span"
            )
        if buffer.storage.codec is not None:
            raise TypeError(
                f"source {name!r} holds {buffer.storage.codec.describe()} rows, and a mixing buffer "
                "mixes TensorDict rows only: extend that buffer with TensorDicts "
                "(TensorDict.from_dict(...), or the tensorclass's ._tensordict)"
            )
        self.buffer = buffer
        buffer.keep_keys()  # its rows are gathered by their packed layout: no key added in place
        # a buffer's sampler, storage and transform chain are its own for life
        self._sampler = buffer.sampler
        self._storage = buffer.storage
        self._chain = buffer.transform

    @property
    def obj(self) -> ReplayBuffer:
        return self.buffer

    @property
    def unit(self) -> int:
        return self.buffer.sampler.unit

    @property
    def distinct(self) -> bool:
        return not self.buffer.sampler.replacement

    @property
    def writable(self) -> bool:
        return self.buffer.storage.writable

    @property
    def prioritized(self) -> bool:
        return self.buffer.sampler.prioritized

    @property
    def capacity(self) -> int:
        return int(self.buffer.storage.max_size)

    @property
    def pads(self) -> bool:
        return self.buffer.sampler.pads

    def __len__(self) -> int:
        return len(self._storage)  # the buffer's length, one call shorter (asked per write)

    def available(self) -> int:
        return self._sampler.available(self._storage)

    def available_getter(self) -> Callable[[], int]:
        # a sampler that can draw every stored row: the storage's own length, one call
        if type(self._sampler).available is Sampler.available:
            return self._storage.__len__
        return self.available

    @property
    def write_count(self) -> int:
        return self.buffer.write_count

    @property
    def transforms_version(self) -> int:
        return self._chain.version

    @property
    def draw_version(self) -> int:
        return self._chain.version + self._sampler.settings_version

    @property
    def device(self) -> torch.device:
        return self.buffer.storage.device

    # -- schema -----------------------------------------------------------------------------

    @property
    def stored_schema(self) -> Schema | None:
        return self.buffer.storage.schema

    def schema(self) -> Schema | None:
        buffer = self.buffer
        schema = buffer.storage.schema
        if schema is None or not buffer.transform or len(buffer) == 0:
            return schema
        return _schema_after(buffer.transform, buffer.storage[:1])

    def incoming_schema(self, data: TensorDictBase) -> Schema:
        # ``data`` as stored (after the write-side transforms): what the read side makes of it
        if self.buffer.transform:
            return _schema_after(self.buffer.transform, data[:1])
        return super().incoming_schema(data)

    def saved_schema(self, state: Any) -> Schema | None:
        storage = state.get("storage") if isinstance(state, dict) else None
        if not isinstance(storage, dict) or storage.get("reference") or not storage.get("schema"):
            return None
        if self.buffer.transform:  # what its transforms make of the rows, as for its own rows
            return self.schema() or Schema.from_json(storage["schema"])
        return Schema.from_json(storage["schema"])

    # -- drawing ----------------------------------------------------------------------------

    def packed_layout(self) -> RowLayout | None:
        storage = self.buffer.storage
        if not storage.packed or self.buffer.transform:
            return None
        return storage.layout

    def packed_drawer(self) -> Drawer:
        return self.buffer.packed_drawer()

    def draw(self, n: int, generator: torch.Generator) -> Drawn:
        rows, index = self.buffer.draw_rows(n, generator)
        return Drawn(rows, index)

    def weight(self, index: torch.Tensor) -> torch.Tensor | None:
        buffer = self.buffer
        return buffer.sampler.weight(index, buffer.storage)

    def mask(self, index: torch.Tensor) -> torch.Tensor | None:
        info = self._sampler.info(index, self._storage)
        return None if info is None else info.get(MASK_KEY)

    def check_priority(self, index: torch.Tensor, priority: torch.Tensor) -> Any:
        return self.buffer.sampler.check_priority(index, priority)

    def apply_priority(self, checked: Any) -> None:
        with self._storage.lock:
            self._sampler.apply_priority(checked)

    def draw_state(self) -> Any:
        return self.buffer.sampler.draw_state()

    def restore_draw_state(self, state: Any) -> None:
        self.buffer.sampler.restore_draw_state(state)

    # -- writes and state -------------------------------------------------------------------

    def lock(self) -> AbstractContextManager[Any]:
        return self._storage.lock

    def lock_held(self) -> bool:
        return self._storage.lock_held()

    def add_reader(self, reader: Any) -> None:
        self.buffer.add_reader(reader)

    def paused(self) -> AbstractContextManager[Any]:
        return self.buffer.prefetch_paused()

    def write_side(self, data: TensorDictBase) -> Any:
        return self.buffer.write_side(data)

    def extend(
        self,
        data: TensorDictBase,
        check: Callable[[TensorDictBase], None] | None = None,
        written: Callable[[torch.Tensor], None] | None = None,
        transformed: bool = False,
    ) -> torch.Tensor:
        return self.buffer.extend_checked(data, check, written=written, transformed=transformed)

    def state_dict(self, *, copy: bool = True, by_reference: bool = False) -> dict[str, Any]:
        return self.buffer.state_dict(copy=copy, by_reference=by_reference)

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        return self.buffer.plan_load_state_dict(
            state, allow_offline_mismatch=allow_offline_mismatch
        )

    def __repr__(self) -> str:
        return repr(self.buffer)


def peek_schema(obj: Any) -> Schema:
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


class ForeignSource(MixSource):
    """Anything with ``sample(n)`` and ``len()`` (a TorchRL buffer or dataset): it samples itself.

    It draws with its own RNG and applies its own transforms; the mixing buffer
    drops the sampler bookkeeping it adds (TorchRL's ``"index"``, priority
    weights) and aligns its rows with the other sources'. Read-only; a
    checkpoint references it by type and size. (A foreign *storage*, driven as a
    ring by mixreplay, is :class:`~mixreplay.storages.ForeignStorage`.)
    """

    def __init__(self, obj: Any):
        self._obj = obj
        self._schema: Schema | None = None

    @property
    def obj(self) -> Any:
        return self._obj

    def __len__(self) -> int:
        return len(self._obj)

    def schema(self) -> Schema:
        if self._schema is None:
            self._schema = peek_schema(self._obj)
        return self._schema

    def draw(self, n: int, generator: torch.Generator) -> Drawn:
        td = self._obj.sample(n)
        if td.batch_size[:1] != torch.Size([n]) or td.batch_dims != 1:
            td = td.reshape(-1)
        if td.batch_size[0] != n:
            raise ValueError(
                f"the offline source {type(self._obj).__name__} returned {td.batch_size[0]} rows "
                f"when asked for {n}; set its own batch_size to None or to the requested size"
            )
        index = td.get("index").reshape(-1).to(torch.int64) if "index" in td.keys() else None
        return Drawn(td, index)

    def state_dict(self, *, copy: bool = True, by_reference: bool = True) -> dict[str, Any]:
        """A reference (type and size): a foreign source's rows and RNG are its own."""
        return {"kind": "foreign", "type": type(self._obj).__name__, "rows": len(self)}

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        if not isinstance(state, dict) or state.get("kind") != "foreign":
            saved = state.get("kind") if isinstance(state, dict) else state
            raise CheckpointError(f"saved as {saved!r}, but is a foreign {self!r} in this buffer")
        if state.get("rows") != len(self) and not allow_offline_mismatch:
            raise CheckpointError(
                f"{state.get('rows')} rows saved, {len(self)} given; pass the dataset the run "
                "used, or allow_offline_mismatch=True"
            )
        return lambda: None

    def __repr__(self) -> str:
        return type(self._obj).__name__


def as_mix_source(obj: Any, name: str) -> MixSource:
    """The source an object stands for: a native buffer is read directly, anything
    else with ``sample``/``len`` samples itself."""
    if isinstance(obj, MixSource):
        return obj
    if isinstance(obj, ReplayBuffer):
        return BufferSource(obj, name)
    if callable(getattr(obj, "sample", None)) and hasattr(obj, "__len__"):
        return ForeignSource(obj)
    raise TypeError(
        f"source {name!r} must be a mixreplay ReplayBuffer or dataset, a TorchRL ReplayBuffer "
        f"or dataset, or any object with sample(n) and len(); got {type(obj).__name__}"
    )
