"""The mixing engine shared by both mixing buffers: split, labels, priorities, state.

A mixing buffer holds sources, each behind the source contract
(:class:`~mixreplay.mixing.source.MixSource`), and, per batch, a count per source
from its subclass's :meth:`MixingBuffer._split`. The engine keeps only the mixing:
which source gives how many rows, the per-row labels, the routing of priority updates
and the state of the whole; everything about one source is asked of that source, and
how the rows reach a batch is one pipeline, :class:`~mixreplay.mixing.plan.DrawPlan`.
The mixing buffer's own transforms run last, on the whole batch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._state import Plan
from mixreplay.buffers.base import BufferBase
from mixreplay.buffers.replay import _join_slots
from mixreplay.errors import (
    CheckpointError,
    EmptyBufferError,
    MixreplayError,
    PriorityError,
    SchemaMismatchError,
)
from mixreplay.layout import new_tensordict
from mixreplay.mixing.plan import SCHEMA_FIX, DrawPlan, Notes
from mixreplay.mixing.source import MixSource
from mixreplay.rate_limit import check_timeout, make_gate, write_limited
from mixreplay.samplers.base import MASK_KEY
from mixreplay.schema import BOOKKEEPING_KEYS, NestedKey, Schema, format_key, normalize_key
from mixreplay.storages.base import check_rows
from mixreplay.transforms import Transform

__all__ = ["SCHEMA_FIX", "MixedDraw", "MixingBuffer"]

log = logging.getLogger(__name__)


class MixedDraw(NamedTuple):
    """One mixed batch, and what its ``info`` is built from (the prefetch queue holds these)."""

    batch: TensorDictBase
    #: rows per source, in source order
    counts: list[int]
    #: each source's row indices (``None``: the source did not say, or gave no rows)
    indices: list[torch.Tensor | None]
    #: each row's source index (``None`` when neither labels nor info were asked for)
    source: torch.Tensor | None
    #: each source's importance weights, read at draw time (``None`` without info)
    weights: list[torch.Tensor | None] | None
    #: each padding source's mask of real rows, read at draw time (``None`` without info)
    masks: list[torch.Tensor | None] | None = None


class MixingBuffer(BufferBase[MixedDraw]):
    """Sources mixed per batch; subclasses decide the split (:meth:`_split`)."""

    _names: tuple[str, ...]
    _sources: list[MixSource]
    #: whether sources may gather straight into the packed batch (``False``: every source
    #: draws its rows as a TensorDict; the same batches, slower: tests compare the two)
    _draw_packed: bool = True

    def _init_common(
        self,
        batch_size: int | None,
        generator: torch.Generator | int | None,
        transform: Transform | None,
        source_key: NestedKey | None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        batch_device: Any = None,
    ) -> None:
        self._init_buffer(batch_size, generator, transform, prefetch, pin_memory, batch_device)
        try:
            self._source_key = None if source_key is None else normalize_key(source_key)
        except TypeError as err:
            raise TypeError(f"source_key: {err}") from None
        key = self._source_key
        if key is not None and ("" in key or key in BOOKKEEPING_KEYS or key == MASK_KEY):
            raise ValueError(
                f"source_key={format_key(key)} is not a key for the source labels: an empty name, "
                "or a name of the samplers' bookkeeping ('index', '_weight', 'priority_weight', "
                "'td_error', ('collector', 'mask')) would be dropped or overwritten; choose a "
                "plain key, e.g. source_key='source'"
            )
        self._plan: DrawPlan | None = None  # how batches are drawn (made on first use)
        self._unit_size: int | None = None  # rows per sampling unit, once known
        self._distinct: tuple[int, ...] = ()
        # source labels per split and device
        self._labels: dict[tuple[int | torch.device, ...], torch.Tensor] = {}
        # the last split when _split_key allows: (batch size, schedule, step, live, counts)
        self._counts_memo: tuple[int, object, Any, list[bool], list[int]] | None = None

    def _init_sources(self, names: Sequence[str], sources: Sequence[MixSource]) -> None:
        self._names = tuple(names)
        self._sources = list(sources)
        # asked before every batch; a source's sampler and storage are its own for life
        self._available = [s.available_getter() for s in self._sources]
        for src in self._sources:
            if len(src):
                self._check_source_key(src.stored_schema)
        self._register_as_reader()

    def _register_as_reader(self) -> None:
        # a source's own state_dict/load_state_dict/empty pause our prefetching first
        for src in self._sources:
            src.add_reader(self)

    def _init_rate_limiter(self, rate_limiter: Any) -> None:
        """Set up ``rate_limiter`` (see :mod:`mixreplay.rate_limit`); after :meth:`_init_sources`."""
        #: the sources whose rows are inserts (written, not referenced)
        self._inserted_sources = [s for i, s in enumerate(self._sources) if self._inserted(i)]
        self._gate = make_gate(
            rate_limiter,
            owner=type(self).__name__,
            capacity=sum(s.capacity for s in self._inserted_sources),
            size=self._online_rows(),
            batch_size=self._batch_size,
            sources=[
                (name, s.obj.rate_limiter if isinstance(s.obj, BufferBase) else None)
                for name, s in zip(self._names, self._sources)
            ],
        )

    def _inserted(self, i: int) -> bool:
        """Whether rows written to source ``i`` are inserts (it is written, not referenced)."""
        return not self._by_reference(i)

    def _online_rows(self) -> list[int]:
        # per written source: each one's count moves under its own lock, with its inserts
        return [len(s) for s in self._inserted_sources]

    # -- subclass hooks --------------------------------------------------------------------

    def _split(self, batch_units: int, live: list[int], sizes: list[int]) -> list[int]:
        """Units per live source (in ``live`` order) for a batch of ``batch_units``."""
        raise NotImplementedError

    def _split_key(self) -> tuple[object, Any] | None:
        """``(schedule, step)`` when :meth:`_split` is a pure function of them, the batch size
        and which sources are live (the counts are then kept between batches); else ``None``."""
        return None

    def _commit_split(self, counts: list[int]) -> None:
        """Called once a batch with ``counts`` was drawn (subclasses carry remainders)."""

    def _split_state(self) -> Any:
        """What drawing a batch changes in the split itself (a mixture's carried remainders)."""
        return None

    def _restore_split_state(self, state: Any) -> None:
        pass

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
            other = src.schema()
            if other is None:
                continue
            other.check_compatible(
                incoming, names=(self._names[i], self._names[target]), fix=SCHEMA_FIX
            )

    def _write(
        self, target: int, data: TensorDictBase, timeout: float | None = None
    ) -> torch.Tensor:
        """Write rows to source ``target``, checking first that they mix, as stored (after the
        source's write-side transforms): refused with nothing written, or written because
        they mix."""
        src = self._sources[target]
        check_rows(data)  # mixed batches are TensorDicts: the other data types are ReplayBuffer's

        def check(rows: TensorDictBase) -> None:
            if rows is data and src.stored_schema is not None:
                return  # the rows as given (checked above), of a layout the storage checks
            if not isinstance(rows, TensorDictBase) or len(rows.batch_size) != 1:
                what = type(rows).__name__
                if isinstance(rows, TensorDictBase):
                    what += f" of batch_size {list(rows.batch_size)}"
                raise TypeError(
                    f"source {self._names[target]!r}: its write-side transforms turned the rows "
                    f"into a {what}; a mixing buffer stores TensorDict rows [n] (one batch "
                    "dim): keep the transform's output [n], e.g. reshape(-1) or squeeze the "
                    "extra dim"
                )
            if src.stored_schema is not None:  # the storage checks later rows against it
                return
            self._check_schemas(src.incoming_schema(rows), target)

        if self._gate is not None:  # rate limiter: in the parts its band allows
            return self._write_limited(src, data, check, check_timeout(timeout))
        first = len(src) == 0
        self._before_write()
        index = src.extend(data, check)
        if first:  # a source's first rows may give batches their layout: plan again
            self._plan = None
        self._after_write()
        return index

    def _write_limited(
        self, src: MixSource, data: TensorDictBase, check: Any, timeout: float | None
    ) -> torch.Tensor:
        """:meth:`_write` with a rate limiter: input rows ``[a, b)`` at a time, as its band
        allows, each part through the source's write-side transforms and reserved by the rows
        it stores (see :func:`~mixreplay.rate_limit.write_limited`)."""
        assert self._gate is not None
        n = data.batch_size[0]

        part = self._inserted_sources.index(src)

        def prepare(a: int, b: int) -> tuple[Any, int]:
            rows = src.write_side(data if b - a == n else data[a:b])
            if rows is None:
                return None, 0
            check(rows)  # refused: nothing of this part is written
            return rows, rows.batch_size[0]

        def write(rows: TensorDictBase, commit) -> torch.Tensor:
            first = len(src) == 0
            self._before_write()
            index = src.extend(
                rows,
                None,
                # under the source's lock: a checkpoint holds the rows and their count; its
                # own size only (another source's rows written meanwhile under that source's
                # lock count with their own insert)
                lambda index: commit(len(src), part),
                transformed=True,
            )
            if first:  # a source's first rows may give batches their layout: plan again
                self._plan = None
            self._after_write()
            return index

        return write_limited(self._gate, n, timeout, prepare, write, _join_slots)

    def _sources_stamp(self) -> int:
        # versions only grow, so the sum changes whenever any source's transform changes
        return sum([s.transforms_version for s in self._sources])

    def _draw_stamp(self) -> int:
        # versions only grow, so the sum changes whenever any of them changes
        return sum([s.draw_version for s in self._sources]) + self._transform.version

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_plan"] = None  # drawers (closures) and scratch rows: made again on first use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._register_as_reader()

    def _drawing_plan(self) -> DrawPlan:
        """The plan batches are drawn with, made again when a source's transforms changed
        (or it is gone: a source's first rows, a restored state)."""
        plan, stamp = self._plan, self._sources_stamp()
        if plan is None or plan.stamp != stamp or plan.layout is None:
            plan = DrawPlan(
                self._sources, self._names, self._batch_device, stamp, packed=self._draw_packed
            )
            if plan.layout is not None:  # rows after the sources' transforms hold no label key
                self._check_source_key(plan.layout.schema)
            self._plan = plan
        return plan

    # -- sampling --------------------------------------------------------------------------

    def _unit(self) -> int:
        units = {s.unit for s in self._sources}
        units.discard(1)
        if len(units) > 1:
            raise ValueError(
                f"sources sample in different slice lengths {sorted(units)}; give every "
                "sliced source the same slice_len"
            )
        return units.pop() if units else 1

    def _counts(self, batch_size: int) -> list[int]:
        # A source with nothing to draw (no rows, or no complete slice yet) is skipped.
        sizes = [available() for available in self._available]
        key = self._split_key()
        if key is None:
            return self._split_counts(batch_size, sizes)
        live_now = [n > 0 for n in sizes]
        memo = self._counts_memo
        if (
            memo is not None
            and memo[0] == batch_size
            and memo[1] is key[0]
            and memo[2] == key[1]
            and memo[3] == live_now
        ):
            counts = memo[4]
            distinct = self._distinct
            if not distinct or all(counts[i] <= sizes[i] for i in distinct):
                return counts.copy()
        counts = self._split_counts(batch_size, sizes)
        self._counts_memo = (batch_size, key[0], key[1], live_now, counts.copy())
        return counts

    def _split_counts(self, batch_size: int, sizes: list[int]) -> list[int]:
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
            self._distinct = tuple(i for i, s in enumerate(self._sources) if s.distinct)
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

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _draw_snapshot(self) -> Any:
        samplers = tuple(s.draw_state() for s in self._sources)
        return self._generators_snapshot(), samplers, self._split_state()

    def _restore_draws(self, state: Any) -> None:
        self._restore_generators(state[0])
        for src, saved in zip(self._sources, state[1]):
            src.restore_draw_state(saved)
        self._restore_split_state(state[2])

    def _fractions_changed(self) -> None:
        """The split may have changed: batches drawn ahead are kept only if theirs did not.

        A split that carries remainders from batch to batch (a mixture's) carried them under
        the old fractions, so every queued batch is undone; otherwise a queued batch is kept
        when the new fractions give it the very counts it was drawn with (then it is the batch
        the new fractions draw). Either way ``sample()`` returns what a buffer without
        prefetching returns.
        """
        p = self._prefetcher
        if p is None:
            return
        if self._split_state() is not None:
            p.discard()
            return
        B = self._batch_size
        assert B is not None  # check_prefetch: prefetching needs a batch size

        def keep(queued: list[MixedDraw | None]) -> bool:
            try:
                counts = self._counts(B)
            except (EmptyBufferError, ValueError):
                return False
            return all(r is not None and r.counts == counts for r in queued)  # None: failed

        p.revise(keep)

    def sample(
        self,
        batch_size: int | None = None,
        *,
        return_info: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Draw one flat ``[batch_size]`` batch: each source's rows in source order.

        Args:
            batch_size: rows to draw; defaults to the constructor's ``batch_size``.

        Keyword Args:
            return_info: also return a TensorDict with, per row, ``"source"``
                (index of its source), ``"index"`` (its row in that source, -1
                when a foreign source does not say), ``"weight"`` (importance
                weight; 1 for uniformly sampled rows) when any source is prioritized,
                and ``("collector", "mask")`` (``False`` on padding rows) when a source
                pads short slices (``SliceSampler(pad_output=True)``).
            timeout: with a rate limiter, how long to wait for its band to let the
                batch through (seconds; ``None``: until allowed, or until :meth:`close`);
                see :mod:`mixreplay.rate_limit`.

        Returns:
            The batch (new memory), or ``(batch, info)``.

        With ``prefetch``, the batch comes from the prefetch thread (see :mod:`mixreplay.prefetch`).
        """
        if self._gate is not None:  # rate limiter: wait for its band, then draw
            return self._limited(batch_size, timeout, self._sample_unlimited, return_info)
        return self._sample_unlimited(batch_size, return_info)

    def _sample_unlimited(self, batch_size: int | None, return_info: bool) -> Any:
        """:meth:`sample`, once the rate limiter (if any) let it through."""
        if self._prefetch:
            drawn, _ = self._draw(batch_size, return_info)
        elif not return_info:  # the most common call: no record of the draw to keep
            return self._mix(self._resolve_batch_size(batch_size), None)[0]
        else:
            drawn = self._sample_now(self._resolve_batch_size(batch_size), True)
        if not return_info:
            return drawn.batch
        return drawn.batch, self._info(drawn)

    def _sample_now(self, B: int, info: bool) -> MixedDraw:
        """One batch, with what its info is built from when ``info``."""
        # each prioritized source's weights and padding source's mask, read with its rows
        notes = Notes.empty(len(self._sources)) if info else None
        batch, counts, indices, source = self._mix(B, notes)
        if notes is None:
            return MixedDraw(batch, counts, indices, source, None)
        return MixedDraw(batch, counts, indices, source, notes.weights, notes.masks)

    def _mix(
        self, B: int, notes: Notes | None
    ) -> tuple[TensorDictBase, list[int], list[torch.Tensor | None], torch.Tensor | None]:
        """Draw one batch of ``B`` rows: the batch, its split, each source's indices (kept
        buffers, rewritten by the next batch, unless ``notes``) and the rows' source labels
        (when a label or info needs them)."""
        plan = self._drawing_plan()
        counts = self._counts(B)
        info = notes is not None
        if plan.may_fail:
            # a source's own draw (its transforms) may fail after the generator moved. A
            # refusal of mixreplay's (rows that do not mix, a source emptied meanwhile) or an
            # interrupt undoes the batch's draws, so the buffer is as it was; an error of the
            # user's code on the rows drawn moves on, as ReplayBuffer does: a retry draws
            # other rows, so one bad row never fails every later batch
            snapshot = self._draw_snapshot()
            try:
                batch, indices = plan.draw(counts, self._generator, self._generator_for, notes)
            except BaseException as err:
                if not isinstance(err, Exception) or isinstance(err, MixreplayError):
                    self._restore_draws(snapshot)
                raise
        else:
            batch, indices = plan.draw(counts, self._generator, self._generator_for, notes)
        self._commit_split(counts)
        source = None
        if self._source_key is not None or info:
            device = batch.device or torch.device("cpu")
            source = self._source_labels(counts, device).to(device, copy=True)
            if self._source_key is not None:
                # the batch's column is its own: writing to it never reroutes update_priority
                batch.set(self._source_key, source.clone() if info else source)
        return self._finish(batch), counts, indices, source

    def _source_labels(self, counts: list[int], device: torch.device) -> torch.Tensor:
        """Each row's source index for a batch split as ``counts``, on ``device`` (kept per
        split and device, so a batch on a GPU copies them there once, not per batch; copy it)."""
        key: tuple[int | torch.device, ...] = (*counts, device)
        labels = self._labels.get(key)
        if labels is None:
            if len(self._labels) > 64:  # an annealed split changes often: keep the recent ones
                self._labels.clear()
            labels = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
            labels = self._labels[key] = labels.to(device)
        return labels

    def _info(self, drawn: MixedDraw) -> TensorDict:
        counts, indices, source = drawn.counts, drawn.indices, drawn.source
        weights = drawn.weights
        assert source is not None and weights is not None  # drawn with info
        B = int(sum(counts))
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
        out = new_tensordict(leaves, torch.Size([B]))
        masks = drawn.masks
        if masks is not None and any(masks[i] is not None for i in live):
            # the padding sources' rows as their samplers marked them; every other row is real
            out.set(
                MASK_KEY,
                torch.cat(
                    [
                        torch.ones(counts[i], dtype=torch.bool)
                        if (m := masks[i]) is None
                        else m.to("cpu").reshape(-1)
                        for i in live
                    ]
                ),
            )
        return out

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
        if source.is_floating_point() or source.is_complex() or source.dtype == torch.bool:
            raise TypeError(
                f"info['source'] must hold integer source labels, got dtype {source.dtype}; pass "
                "the info that sample(..., return_info=True) returned, unchanged"
            )
        if source.numel() and not bool(((source >= 0) & (source < len(self._sources))).all()):
            row = int(((source < 0) | (source >= len(self._sources))).nonzero()[0, 0])
            raise ValueError(
                f"info['source'] holds label {int(source.reshape(-1)[row])} at row {row} of the "
                f"batch, but this buffer has {len(self._sources)} sources (labels 0.."
                f"{len(self._sources) - 1}: {', '.join(map(repr, self._names))}); pass the info "
                "of a batch this buffer drew, unchanged"
            )
        updates = []
        for i, src in enumerate(self._sources):
            if not src.prioritized:
                continue
            mask = source == i
            if bool(mask.any()):
                updates.append(
                    (src, index[mask], priority.to(index.device)[mask], mask.nonzero().squeeze(-1))
                )
        checked = []
        for src, idx, prio, positions in updates:  # everything checked before anything changes
            try:
                checked.append((src, src.check_priority(idx, prio)))
            except PriorityError as err:
                bad = err.position
                where = f" (row {int(positions[bad])} of the batch)" if bad is not None else ""
                raise PriorityError(
                    f"{err}{where}", position=None if bad is None else int(positions[bad])
                ) from None
        self._before_write()
        for src, update in checked:
            src.apply_priority(update)
        self._after_write()

    # -- misc ------------------------------------------------------------------------------

    @property
    def source_names(self) -> tuple[str, ...]:
        return self._names

    def __len__(self) -> int:
        return sum(len(s) for s in self._sources)

    #: where a row of this buffer is written in place (the subclasses name their way)
    _in_place_way = "write through the buffer of a writable source"

    def __setitem__(self, index: Any, value: Any) -> None:
        """Refused: a mixing buffer holds no rows of its own, and its offline rows are
        read-only; rows are rewritten in place through the online buffer that holds them."""
        raise TypeError(
            f"{type(self).__name__} mixes its sources' rows and holds none of its own, so "
            f"rb[{index!r}] = ... names no row; {self._in_place_way} (offline data is "
            "read-only)"
        )

    def _no_rows_here(self, name: str) -> TypeError:
        return TypeError(
            f"{type(self).__name__}.{name}: a mixing buffer holds no rows of its own, so it "
            f"writes none in place; {self._in_place_way} (offline data is read-only)"
        )

    def set_at_(self, *args: Any, **kwargs: Any) -> None:
        """Refused, as ``rb[index] = ...``: write through the buffer that holds the rows."""
        raise self._no_rows_here("set_at_")

    def set_(self, *args: Any, **kwargs: Any) -> None:
        """Refused, as ``rb[index] = ...``: write through the buffer that holds the rows."""
        raise self._no_rows_here("set_")

    def update_(self, *args: Any, **kwargs: Any) -> None:
        """Refused, as ``rb[index] = ...``: write through the buffer that holds the rows."""
        raise self._no_rows_here("update_")

    def write_all(self, *args: Any, **kwargs: Any) -> None:
        """Refused, as ``rb[index] = ...``: write through the buffer that holds the rows."""
        raise self._no_rows_here("write_all")

    @property
    def write_count(self) -> int:
        """Rows written through :meth:`extend` since creation (TorchRL's ``write_count``)."""
        return sum(s.write_count for s in self._sources if s.writable)

    # -- state and checkpoints (mixreplay.checkpoint) --------------------------------------

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        # Every prefetching reader of every source, this buffer included (a source shared
        # with another mixing buffer: that one's worker draws under the same source lock)
        with contextlib.ExitStack() as stack:
            for src in self._sources:
                stack.enter_context(src.paused())
            stack.enter_context(self._own_paused())
            yield

    def _lock_held(self) -> str | None:
        for name, src in zip(self._names, self._sources):
            if src.lock_held():
                return f"the lock of source {name!r}"
        return None

    @contextlib.contextmanager
    def _locks(self) -> Iterator[None]:
        """Every source's lock, in source order (the lock order of :mod:`mixreplay.buffers.base`)."""
        with contextlib.ExitStack() as stack:
            for src in self._sources:
                stack.enter_context(src.lock())
            yield

    def _by_reference(self, i: int) -> bool:
        """Whether source ``i``'s rows are saved by reference (read-only data) or copied."""
        return not self._sources[i].writable

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
        with self._paused(), self._locks():
            return {
                "kind": type(self).__name__,
                **self._generators_state(),
                "sources": {
                    name: src.state_dict(copy=copy, by_reference=self._by_reference(i))
                    for i, (name, src) in enumerate(zip(self._names, self._sources))
                },
                **self._mixing_state(),
                **self._rate_limiter_state(),
            }

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        """Check ``state`` whole, change nothing; return the function that applies it."""
        state = self._check_kind(state)
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
            try:
                plans.append(
                    src.plan_load_state_dict(entry, allow_offline_mismatch=allow_offline_mismatch)
                )
            except CheckpointError as err:
                raise CheckpointError(f"source {src_name!r}: {err}") from None
            try:
                incoming = src.saved_schema(entry)
                if incoming is not None:
                    self._check_schemas(incoming, target=i)
            except (SchemaMismatchError, ValueError) as err:
                raise CheckpointError(
                    f"source {src_name!r}: the saved rows do not mix with this buffer's other sources: {err}"
                ) from None
        plans.append(self._plan_generators(state))
        plans.append(self._plan_mixing_state(state))
        plans.append(self._plan_rate_limiter(state))  # after the rows: it reads their count

        def apply() -> None:
            with self._locks():
                for plan in plans:
                    plan()
            self._unit_size = None
            self._counts_memo = None
            self._plan = None

        return apply
