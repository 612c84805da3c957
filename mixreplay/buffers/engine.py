"""The mixing engine shared by both mixing buffers: split, gather, labels, priorities, state.

A mixing buffer holds sources (native :class:`~mixreplay.ReplayBuffer` s, or
foreign ones that sample themselves) and, per batch, a count per source from
its subclass's :meth:`MixingBuffer._split`. Each source's rows are then drawn by
its own sampler with the mixing buffer's generator.

Fast path: when every source is native, packs rows with one layout, and has no
transform, each source's rows are gathered straight into one preallocated packed
output (one ``index_select`` per source, no per-source TensorDict, no ``cat``).
Otherwise (a foreign source, a source with transforms, layouts that differ) each
source's rows are gathered, transformed by the source's own transforms, then
aligned and written into the output. Either way the mixing buffer's own
transforms run last, on the whole batch.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._state import Plan, generator_state, plan_generator
from mixreplay._validate import check_real
from mixreplay.buffers.base import BufferBase
from mixreplay.buffers.foreign import ForeignSource, strip_bookkeeping
from mixreplay.buffers.replay import ReplayBuffer, check_batch_size, make_generator
from mixreplay.errors import CheckpointError, EmptyBufferError, PriorityError, SchemaMismatchError
from mixreplay.layout import RowLayout, new_tensordict
from mixreplay.prefetch import Prefetcher, check_pin_memory, check_prefetch, pin
from mixreplay.schema import NestedKey, Schema, format_key, normalize_key
from mixreplay.storages.base import check_rows
from mixreplay.transforms import Compose, Transform

__all__ = ["MixingBuffer", "Source", "as_source", "check_fraction"]

log = logging.getLogger(__name__)

Source = ReplayBuffer | ForeignSource

SCHEMA_FIX = (
    "make every source produce the same keys, dtypes and per-row shapes: load the dataset "
    "with the loader's options (load_dataset(id, dtype=torch.float32, keys=[...], "
    "rename={...})), attach a transform to the source (e.g. "
    "offline.append_transform(DoubleToFloat())), or convert the online rows before "
    "extend (td.float(), td.select(...))"
)


def as_source(obj: Any, name: str) -> Source:
    """A native ReplayBuffer is read directly; anything with sample/len samples itself."""
    if isinstance(obj, ReplayBuffer):
        return obj
    if callable(getattr(obj, "sample", None)) and hasattr(obj, "__len__"):
        return ForeignSource(obj)
    raise TypeError(
        f"source {name!r} must be a mixreplay ReplayBuffer or dataset, a TorchRL ReplayBuffer "
        f"or dataset, or any object with sample(n) and len(); got {type(obj).__name__}"
    )


def check_fraction(value: Any, name: str, *, open_interval: bool) -> float:
    """A fraction in ``[0, 1]`` (``(0, 1)`` with ``open_interval``), as a float."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    out = check_real(value, name, what="a float")  # a number (TypeError otherwise), finite
    if open_interval and not 0.0 < out < 1.0:
        raise ValueError(
            f"{name} must be in (0, 1) (exclusive), got {out!r}; for online-only data use a "
            "plain ReplayBuffer, for offline-only sample the dataset itself"
        )
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {out!r}")
    return out


def _produced_schema(src: Source) -> Schema | None:
    """The schema of the rows ``src`` contributes to a batch: after its own transforms."""
    if isinstance(src, ForeignSource):
        return src.schema
    schema = src.storage.schema
    if schema is None or not src.transform or len(src) == 0:
        return schema
    row = src.storage[:1]
    out = src.transform(row.clone())
    return Schema.from_tensordict(strip_bookkeeping(out), batch_dims=out.batch_dims)


class MixingBuffer(BufferBase):
    """Sources mixed per batch; subclasses decide the split (:meth:`_split`)."""

    _names: tuple[str, ...]
    _sources: list[Source]

    def _init_common(
        self,
        batch_size: int | None,
        generator: torch.Generator | int | None,
        transform: Transform | None,
        source_key: NestedKey | None,
        prefetch: int | None = None,
        pin_memory: bool = False,
    ) -> None:
        self._batch_size = None if batch_size is None else check_batch_size(batch_size)
        self._prefetch = check_prefetch(prefetch, self._batch_size)
        self._pin_memory = check_pin_memory(pin_memory)
        self._prefetcher: Prefetcher | None = None  # started by the first sample()
        self._generator = make_generator(generator)
        self._transform = Compose.of(transform)
        try:
            self._source_key = None if source_key is None else normalize_key(source_key)
        except TypeError as err:
            raise TypeError(f"source_key: {err}") from None
        self._layout: RowLayout | None = None  # output layout once every source fits it
        self._device = torch.device("cpu")
        self._fused = False  # every source is native, packed with one layout, untransformed
        self._unit_size: int | None = None  # rows per sampling unit, once known
        self._distinct: tuple[int, ...] = ()
        self._labels: dict[tuple[int, ...], torch.Tensor] = {}  # source labels per split

    def _init_sources(self, names: Sequence[str], sources: Sequence[Source]) -> None:
        self._names = tuple(names)
        self._sources = list(sources)
        # the sources' transform lists (shared objects: an append_transform shows up here)
        self._chains = [s.transform for s in self._sources if isinstance(s, ReplayBuffer)]
        for src in self._sources:
            if len(src) and isinstance(src, ReplayBuffer):
                self._check_source_key(src.storage.schema)
        self._refresh_layout()

    # -- subclass hooks --------------------------------------------------------------------

    def _split(self, batch_units: int, live: list[int], sizes: list[int]) -> list[int]:
        """Units per live source (in ``live`` order) for a batch of ``batch_units``."""
        raise NotImplementedError

    # -- schema ----------------------------------------------------------------------------

    def _check_source_key(self, schema: Schema | None) -> None:
        """Refuse a ``source_key`` that names data: the labels would overwrite it."""
        key = self._source_key
        if key is None or schema is None:
            return
        clash = [
            f.key
            for f in schema.fields
            if f.key == key or f.key[: len(key)] == key or key[: len(f.key)] == f.key
        ]
        if clash:
            raise ValueError(
                f"source_key={format_key(key)} names data: the rows hold {format_key(clash[0])}, "
                "which the per-row source labels would overwrite; choose a key the rows do not "
                "have, e.g. source_key='source'"
            )

    def _check_schemas(self, incoming: Schema, target: int) -> None:
        """Raise before any write when rows for source ``target`` would not mix."""
        self._check_source_key(incoming)
        for i, src in enumerate(self._sources):
            if i == target or len(src) == 0:
                continue
            other = _produced_schema(src)
            if other is None:
                continue
            other.check_compatible(
                incoming, names=(self._names[i], self._names[target]), fix=SCHEMA_FIX
            )

    def _incoming_schema(self, target: int, data: TensorDictBase) -> Schema:
        """What rows ``data`` written to source ``target`` will produce in a batch."""
        src = self._sources[target]
        if isinstance(src, ReplayBuffer) and src.transform:
            out = src.transform(data[:1].clone())
            return Schema.from_tensordict(strip_bookkeeping(out), batch_dims=out.batch_dims)
        return Schema.from_tensordict(data, batch_dims=data.batch_dims)

    def _write(self, target: int, data: TensorDictBase) -> torch.Tensor:
        """Write rows to native source ``target``, checking that they mix first."""
        buf = self._sources[target]
        assert isinstance(buf, ReplayBuffer)
        check_rows(data)  # mixed batches are TensorDicts: the other data types are ReplayBuffer's
        if buf.storage.schema is None and isinstance(data, TensorDictBase) and data.batch_dims >= 1:
            self._check_schemas(self._incoming_schema(target, data), target)
        self._before_write()
        index = buf.extend(data)
        if not self._fused:
            self._refresh_layout()
        self._after_write()
        return index

    def _refresh_layout(self) -> None:
        layouts = [s.storage.layout if isinstance(s, ReplayBuffer) else None for s in self._sources]
        known = [lay for lay in layouts if lay is not None]
        self._layout = known[-1] if known else None
        devices = [s.storage.device for s in self._sources if isinstance(s, ReplayBuffer)]
        self._device = devices[-1] if devices else torch.device("cpu")
        self._fused = (
            len(known) == len(layouts)
            and all(lay == known[0] for lay in known)
            and all(isinstance(s, ReplayBuffer) and s.storage.packed for s in self._sources)
        )

    # -- sampling --------------------------------------------------------------------------

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError(
                    "batch_size must be provided either in __init__ or sample(): pass "
                    "sample(batch_size) or set batch_size= at construction"
                )
            return self._batch_size
        return check_batch_size(batch_size)

    def _unit(self) -> int:
        units = {s.sampler.unit for s in self._sources if isinstance(s, ReplayBuffer)}
        units.discard(1)
        if len(units) > 1:
            raise ValueError(
                f"sources sample in different slice lengths {sorted(units)}; give every "
                "sliced source the same slice_len"
            )
        return units.pop() if units else 1

    def _counts(self, batch_size: int) -> list[int]:
        # A source with nothing to draw (no rows, or no complete slice yet) is skipped.
        sizes = [s.available() for s in self._sources]
        live = [i for i, n in enumerate(sizes) if n > 0]
        if not live:
            raise EmptyBufferError(
                f"cannot sample: every source is empty ({', '.join(self._names)}); "
                "extend the buffer with rows first"
                + (
                    ""
                    if all(len(s) == 0 for s in self._sources)
                    else " (the rows present are too few for a whole slice)"
                )
            )
        unit = self._unit_size
        if unit is None:
            unit = self._unit_size = self._unit()
            self._distinct = tuple(
                i
                for i, s in enumerate(self._sources)
                if isinstance(s, ReplayBuffer) and not s.sampler.replacement
            )
        if batch_size % unit:
            raise ValueError(
                f"batch_size {batch_size} is not a multiple of slice_len {unit}: slices are "
                f"split whole; use a multiple of {unit}, e.g. {batch_size - batch_size % unit or unit}"
            )
        counts = [0] * len(sizes)
        for i, c in zip(live, self._split(batch_size // unit, live, sizes)):
            counts[i] = c * unit
        for i in self._distinct:  # checked before any draw, so a refused batch changes nothing
            if counts[i] > sizes[i]:
                raise ValueError(
                    f"batch_size {batch_size} asks source {self._names[i]!r} for {counts[i]} distinct rows, "
                    f"but it holds {sizes[i]} and samples without replacement; sample at most "
                    f"{sizes[i]} rows from it (a smaller batch_size or fraction), or give it "
                    "RandomSampler(replacement=True)"
                )
        return counts

    def _commit_split(self, counts: list[int]) -> None:
        """Called once a batch with ``counts`` was drawn (subclasses carry remainders)."""

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _prefetch_draw(self) -> tuple[TensorDictBase, Any]:
        assert self._batch_size is not None
        return self._sample_now(self._batch_size, True)

    def _draw_snapshot(self) -> Any:
        samplers = tuple(
            s.sampler.draw_state() if isinstance(s, ReplayBuffer) else None for s in self._sources
        )
        return self._generator.get_state(), samplers, self._split_state()

    def _restore_draws(self, state: Any) -> None:
        self._generator.set_state(state[0])
        for src, saved in zip(self._sources, state[1]):
            if isinstance(src, ReplayBuffer):
                src.sampler.restore_draw_state(saved)
        self._restore_split_state(state[2])

    def _split_state(self) -> Any:
        """What drawing a batch changes in the split itself (a mixture's carried remainders)."""
        return None

    def _restore_split_state(self, state: Any) -> None:
        pass

    def _ran_out(self) -> bool:
        return False

    def _fractions_changed(self) -> None:
        # Batches drawn ahead keep their split only while it is still the current one.
        p = self._prefetcher
        if p is not None and p.ready:
            p.wait()
            snapshot = self._split_state()
            try:
                assert self._batch_size is not None
                counts = self._counts(self._batch_size)
            except (EmptyBufferError, ValueError):
                counts = None
            self._restore_split_state(snapshot)
            # each queued result is (batch, (B, counts, ...)); a failed draw holds None
            if any(r is None or r[1][1] != counts for r in p.queued()):
                p.discard()

    def sample(self, batch_size: int | None = None, *, return_info: bool = False) -> Any:
        """Draw one flat ``[batch_size]`` batch: each source's rows in source order.

        Args:
            batch_size: rows to draw; defaults to the constructor's ``batch_size``.

        Keyword Args:
            return_info: also return a TensorDict with, per row, ``"source"``
                (index of its source), ``"index"`` (its row in that source, -1
                when a foreign source does not say) and ``"weight"`` (importance
                weight; 1 for uniformly sampled rows) when any source is prioritized.

        Returns:
            The batch (new memory), or ``(batch, info)``.

        With ``prefetch``, the batch comes from the prefetch thread (see :mod:`mixreplay.prefetch`).
        """
        B = self._resolve_batch_size(batch_size)
        if self._prefetch and B == self._batch_size:
            prefetcher = self._prefetching()
            assert prefetcher is not None
            result, _ = prefetcher.next()
            batch, extra = result  # type: ignore[misc]
        else:
            self._discard_prefetched()  # another size: undo the queue, keep the sequence
            batch, extra = self._sample_now(B, return_info)
        if not return_info:
            return batch
        return batch, self._info(*extra)

    def _sample_now(self, B: int, return_info: bool) -> tuple[TensorDictBase, Any]:
        """One batch and what its info is built from (``None`` without ``return_info``)."""
        counts = self._counts(B)
        gen = self._generator
        if not self._fused:
            self._refresh_layout()
        indices: list[torch.Tensor | None] = [None] * len(counts)
        if self._fused and not any(self._chains):
            # One gather per source, straight into the preallocated packed output.
            layout = self._layout
            assert layout is not None
            out = torch.empty(B, layout.row_words, dtype=torch.int64, device=self._device)
            pos = 0
            for i, k in enumerate(counts):
                if k:
                    src = self._sources[i]
                    assert isinstance(src, ReplayBuffer)
                    storage = src.storage
                    with storage.lock:
                        idx = src.draw_unlocked(k, gen)
                        storage.gather_into(idx, out[pos : pos + k])  # type: ignore[attr-defined]
                    indices[i] = idx
                    pos += k
            batch: TensorDictBase = layout.unpack(out, self._device)
        else:
            batch = self._sample_generic(B, counts, indices)
        self._commit_split(counts)
        source = None
        if self._source_key is not None or return_info:
            source = self._source_labels(counts).to(batch.device or "cpu", copy=True)
            if self._source_key is not None:
                batch.set(self._source_key, source)
        if self._transform:
            batch = self._transform(batch)
        if self._pin_memory:
            batch = pin(batch)
        if not return_info:
            return batch, None
        # The weights are read now: priorities may change before the info is built.
        weights = [self._weight(i, idx) for i, idx in enumerate(indices)]
        return batch, (B, counts, indices, source, weights)

    def _source_labels(self, counts: list[int]) -> torch.Tensor:
        """Each row's source index for a batch split as ``counts`` (kept per split; copy it)."""
        key = tuple(counts)
        labels = self._labels.get(key)
        if labels is None:
            if len(self._labels) > 64:  # an annealed split changes often: keep the recent ones
                self._labels.clear()
            labels = self._labels[key] = torch.repeat_interleave(
                torch.arange(len(counts)), torch.tensor(counts)
            )
        return labels

    def _weight(self, i: int, idx: torch.Tensor | None) -> torch.Tensor | None:
        src = self._sources[i]
        if not isinstance(src, ReplayBuffer) or idx is None:
            return None
        return src.sampler.weight(idx, src.storage)

    def _sample_generic(
        self, B: int, counts: list[int], indices: list[torch.Tensor | None]
    ) -> TensorDictBase:
        """Sources that are foreign, transformed or differ in layout: gather, transform, align."""
        parts = []
        for i, k in enumerate(counts):
            if not k:
                continue
            src = self._sources[i]
            if isinstance(src, ForeignSource):
                td = src.sample(k)
                if "index" in td.keys():
                    indices[i] = td.get("index").reshape(-1).to(torch.int64)
            else:
                with src.storage.lock:
                    idx = src.draw(k, self._generator)
                    td = src.storage.gather_unlocked(idx)
                indices[i] = idx
                if src.transform:
                    td = src.transform(td)
            parts.append(td)
        if len(parts) == 1:
            return strip_bookkeeping(parts[0])
        layout = self._output_layout(Schema.from_tensordict(strip_bookkeeping(parts[-1])))
        device = parts[-1].device or torch.device("cpu")
        out = torch.empty(B, layout.row_words, dtype=torch.int64, device=device)
        pos = 0
        for td in parts:
            n = td.batch_size[0]
            td = strip_bookkeeping(td, layout.schema)
            try:
                leaves = layout.leaves_of(td)
            except SchemaMismatchError as err:
                raise SchemaMismatchError(f"{err}\nFix: {SCHEMA_FIX}") from None
            if any(v.device != device for v in leaves):
                leaves = [v.to(device) for v in leaves]
            with torch.no_grad():
                layout.write(leaves, layout.group_views(out[pos : pos + n]))
            pos += n
        return layout.unpack(out, device)

    def _output_layout(self, schema: Schema) -> RowLayout:
        """The packed layout of a batch with ``schema`` (built once: it compiles its unpacking)."""
        if self._layout is not None and self._layout.schema == schema:
            return self._layout
        layouts = self.__dict__.setdefault("_layouts", {})
        layout = layouts.get(schema)
        if layout is None:
            if len(layouts) > 16:  # transforms that keep changing the schema: do not hoard
                layouts.clear()
            layout = layouts[schema] = RowLayout(schema)
        return layout

    def _info(
        self,
        B: int,
        counts: list[int],
        indices: list[torch.Tensor | None],
        source: torch.Tensor,
        weights: list[torch.Tensor | None],
    ) -> TensorDict:
        live = [i for i, k in enumerate(counts) if k]
        parts = [indices[i] for i in live]
        if all(p is not None for p in parts):  # every source said which rows: one cat
            index = torch.cat([p.to("cpu", torch.int64) for p in parts if p is not None])
        else:
            index = torch.full((B,), -1, dtype=torch.int64)
            pos = 0
            for i in live:
                idx = indices[i]
                if idx is not None:
                    index[pos : pos + counts[i]] = idx.cpu()
                pos += counts[i]
        leaves = {"source": source.cpu(), "index": index}
        if any(weights[i] is not None for i in live):
            leaves["weight"] = torch.cat(
                [
                    torch.ones(counts[i], dtype=torch.float32)
                    if (w := weights[i]) is None
                    else w.to("cpu", torch.float32)
                    for i in live
                ]
            )
        return new_tensordict(leaves, torch.Size([B]))

    def update_priority(self, info: TensorDictBase, priority: Any) -> None:
        """Send each row's new priority to the source it was drawn from.

        Args:
            info: the ``info`` returned by ``sample(..., return_info=True)``.
            priority: one priority per row of that batch (e.g. ``|td_error|``).

        The whole update is checked before any priority changes: a bad priority for
        any row (NaN, negative, ...) raises naming its position in the batch, and no
        source's priorities change. Rows from sources without a prioritized sampler
        are ignored.
        """
        if (
            not isinstance(info, TensorDictBase)
            or "source" not in info.keys()
            or "index" not in info.keys()
        ):
            raise TypeError(
                "update_priority expects the info TensorDict from sample(..., return_info=True) "
                f"(with 'source' and 'index'), got {type(info).__name__}"
            )
        priority = torch.as_tensor(priority).detach().reshape(-1)
        B = info.batch_size[0]
        if priority.shape[0] != B:
            raise ValueError(
                f"priority has {priority.shape[0]} entries for a batch of {B} rows; pass one "
                "priority per sampled row"
            )
        source, index = info["source"], info["index"]
        updates = []
        for i, src in enumerate(self._sources):
            if not isinstance(src, ReplayBuffer) or not src.sampler.prioritized:
                continue
            mask = source == i
            if bool(mask.any()):
                updates.append(
                    (src, index[mask], priority.to(index.device)[mask], mask.nonzero().squeeze(-1))
                )
        checked = []
        for src, idx, prio, positions in updates:  # everything checked before anything changes
            try:
                checked.append((src, src.sampler.check_priority(idx, prio)))
            except PriorityError as err:
                bad = err.position
                where = f" (row {int(positions[bad])} of the batch)" if bad is not None else ""
                raise PriorityError(
                    f"{err}{where}", position=None if bad is None else int(positions[bad])
                ) from None
        self._before_write()
        for src, update in checked:
            with src.storage.lock:
                src.sampler.apply_priority(update)
        self._after_write()

    # -- misc ------------------------------------------------------------------------------

    @property
    def source_names(self) -> tuple[str, ...]:
        return self._names

    def __len__(self) -> int:
        return sum(len(s) for s in self._sources)

    @property
    def write_count(self) -> int:
        """Rows written through :meth:`extend` since creation (TorchRL's ``write_count``)."""
        return sum(s.write_count for s in self._writable())

    def _writable(self) -> list[ReplayBuffer]:
        return [s for s in self._sources if isinstance(s, ReplayBuffer) and s.storage.writable]

    # -- state and checkpoints (mixreplay.checkpoint) --------------------------------------

    @contextlib.contextmanager
    def state_lock(self) -> Iterator[None]:
        """Hold every native source's lock, in source order (a consistent snapshot)."""
        with contextlib.ExitStack() as stack:
            for src in self._sources:
                if isinstance(src, ReplayBuffer):
                    stack.enter_context(src.storage.lock)
            yield

    def _by_reference(self, i: int) -> bool:
        """Whether source ``i``'s rows are saved by reference (read-only data) or copied."""
        src = self._sources[i]
        return not (isinstance(src, ReplayBuffer) and src.storage.writable)

    def _mixing_state(self) -> dict[str, Any]:
        """The subclass's own fields: fractions, schedules, step."""
        raise NotImplementedError

    def _plan_mixing_state(self, state: dict[str, Any]) -> Plan:
        raise NotImplementedError

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """Every source's state (rows of writable ones; read-only ones by reference),
        the generator, and the fractions with their schedules and step.

        Keyword Args:
            copy: copy rows (a snapshot, the default); ``False`` returns views, valid
                while :meth:`state_lock` is held.
        """
        self._discard_prefetched()
        with self.state_lock():
            return {
                "kind": type(self).__name__,
                "generator": generator_state(self._generator),
                "sources": {
                    name: src.state_dict(copy=copy)
                    if isinstance(src, ForeignSource)
                    else src.state_dict(copy=copy, by_reference=self._by_reference(i))
                    for i, (name, src) in enumerate(zip(self._names, self._sources))
                },
                **self._mixing_state(),
            }

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        """Check ``state`` whole, change nothing; return the function that applies it."""
        name = type(self).__name__
        if not isinstance(state, dict):
            raise CheckpointError(f"a {name} state is a dict, got {type(state).__name__}")
        if state.get("kind") != name:
            raise CheckpointError(
                f"the state holds a {state.get('kind')}, not a {name}; load it into a {state.get('kind')}"
            )
        saved = state.get("sources")
        if not isinstance(saved, dict) or list(saved) != list(self._names):
            got = list(saved) if isinstance(saved, dict) else saved
            raise CheckpointError(
                f"the state's sources are {got}, this buffer's are {list(self._names)}; "
                "build the buffer with the same sources, in the same order"
            )
        plans = []
        for i, (src_name, src) in enumerate(zip(self._names, self._sources)):
            entry = saved[src_name]
            if isinstance(src, ForeignSource):
                if not isinstance(entry, dict) or entry.get("kind") != "foreign":
                    raise CheckpointError(
                        f"source {src_name!r} was saved as {entry.get('kind') if isinstance(entry, dict) else entry!r}, "
                        f"but is a foreign {src!r} in this buffer"
                    )
                if entry.get("rows") != len(src) and not allow_offline_mismatch:
                    raise CheckpointError(
                        f"source {src_name!r}: {entry.get('rows')} rows saved, {len(src)} given; pass "
                        "the dataset the run used, or allow_offline_mismatch=True"
                    )
                continue
            try:
                plans.append(
                    src.plan_load_state_dict(entry, allow_offline_mismatch=allow_offline_mismatch)
                )
            except CheckpointError as err:
                raise CheckpointError(f"source {src_name!r}: {err}") from None
            storage_state = entry.get("storage") if isinstance(entry, dict) else None
            if (
                isinstance(storage_state, dict)
                and not storage_state.get("reference")
                and storage_state.get("schema")
            ):
                try:
                    incoming = Schema.from_json(storage_state["schema"])
                    if src.transform:
                        incoming = _produced_schema(src) or incoming
                    self._check_schemas(incoming, target=i)
                except (SchemaMismatchError, ValueError) as err:
                    raise CheckpointError(
                        f"source {src_name!r}: the saved rows do not mix with this buffer's other sources: {err}"
                    ) from None
        plans.append(plan_generator(self._generator, state.get("generator"), "generator"))
        plans.append(self._plan_mixing_state(state))

        def apply() -> None:
            with self.state_lock():
                for plan in plans:
                    plan()
            self._unit_size = None
            self._refresh_layout()

        return apply
