"""How a mixed batch is drawn: one pipeline, decided once for the sources as they are.

A :class:`DrawPlan` is made when a mixing buffer first samples and again whenever a
source's transforms change or a source gets its first rows. It fixes what every batch
needs and what would otherwise be decided per batch:

- the **layout** of a batch row (:class:`~mixreplay.layout.RowLayout`): the schema of the
  rows the sources contribute, after their own transforms;
- the **device** the batch is made on (``batch_device``, else where the last source's rows
  are);
- per source, **how its rows reach the batch**: a source that holds rows packed in that very
  layout, with no transform of its own, draws and gathers them straight into its part of the
  packed batch (:meth:`~mixreplay.mixing.source.MixSource.packed_drawer`: one
  ``index_select``); any other (a foreign buffer, a source with transforms, another layout)
  draws its rows as a TensorDict, which are checked and packed into its part.

Then every batch takes the same steps: the packed rows (kept between batches of one split
on the host), each live source filling its part in source order with the buffer's
generator (or the generator on that source's device), and one copy of each leaf out of the
packed rows (:meth:`~mixreplay.layout.RowLayout.copy_views`), so each leaf of a batch owns
its memory. With ``notes`` (the buffer's ``sample(..., return_info=True)``), a prioritized
or padding source's weights and mask are read under the same hold of its lock as its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from mixreplay.buffers.replay import Drawer
from mixreplay.errors import DataStructureError, SchemaMismatchError
from mixreplay.layout import PackedRows, RowLayout
from mixreplay.mixing.source import MixSource, strip_bookkeeping
from mixreplay.schema import BOOKKEEPING_KEYS

__all__ = ["SCHEMA_FIX", "DrawPlan", "Notes"]

SCHEMA_FIX = (
    "make every source produce the same keys, dtypes and per-row shapes: load the dataset "
    "with the loader's options (load_dataset(id, dtype=torch.float32, keys=[...], "
    "rename={...})), attach a transform to the source (e.g. "
    "offline.append_transform(DoubleToFloat())), or convert the online rows before "
    "extend (td.float(), td.select(...))"
)


class Notes(NamedTuple):
    """What a draw with info reads of each source together with its rows."""

    weights: list[torch.Tensor | None]
    masks: list[torch.Tensor | None]

    @classmethod
    def empty(cls, n: int) -> Notes:
        return cls([None] * n, [None] * n)


class _Scratch(NamedTuple):
    """A batch's packed rows, kept for the next batch of the same split (host only)."""

    counts: list[int]
    rows: PackedRows
    #: (source index, its part of ``rows.words``, an int64 buffer of its row count) for each
    #: source that gives rows; a host batch whose indices are not kept draws them into the
    #: buffer (``None`` off the host, where every batch keeps its indices)
    parts: list[tuple[int, torch.Tensor, torch.Tensor | None]]

    @classmethod
    def make(cls, layout: RowLayout, counts: list[int], device: torch.device) -> _Scratch:
        rows = layout.new_rows(sum(counts), device)
        parts, pos = [], 0
        host = device.type == "cpu"
        for i, k in enumerate(counts):
            if k:
                # on the host whatever torch's default device, as the drawer's randint
                index = torch.empty(k, dtype=torch.int64, device=device) if host else None
                parts.append((i, rows.words[pos : pos + k], index))
                pos += k
        return cls(list(counts), rows, parts)


def _rows(td: TensorDictBase) -> str:
    shape = list(td.batch_size)
    return f"{shape[0]} rows" if len(shape) == 1 else f"rows of batch_size {shape}"


class DrawPlan:
    """The one way a mixing buffer draws a batch from its sources (see the module docs).

    Args:
        sources: the buffer's sources, in order.
        names: their names (for errors).
        batch_device: where batches land (``None``: where the last source's rows are).
        stamp: the sources' transforms this plan was made for.
        packed: let sources draw straight into the packed batch where they can (``False``
            draws every source's rows as a TensorDict: the same batches, for tests).
    """

    def __init__(
        self,
        sources: Sequence[MixSource],
        names: Sequence[str],
        batch_device: torch.device | None,
        stamp: int,
        *,
        packed: bool = True,
    ):
        self.stamp = stamp
        self._sources = list(sources)
        self._names = tuple(names)
        devices = [d for s in self._sources if (d := s.device) is not None]
        self.device: torch.device = batch_device or (
            devices[-1] if devices else torch.device("cpu")
        )
        self._host = self.device.type == "cpu"
        # sources whose rows are on an accelerator draw with a generator there
        self.where: list[torch.device | None] = [
            None if d is None or d.type == "cpu" else d for d in (s.device for s in self._sources)
        ]
        self.layout = self._decide_layout()
        # per source: its drawer into the packed batch, or None (its rows are drawn as a
        # TensorDict, checked and packed)
        self.drawers: list[Drawer | None] = [
            s.packed_drawer()
            if packed and self.layout is not None and s.packed_layout() == self.layout
            else None
            for s in self._sources
        ]
        #: whether some source's rows come through its own draw (and transforms), which may
        #: fail after the generator moved: the buffer then undoes the batch's draws
        self.may_fail = any(d is None for d in self.drawers)
        # a source's sampler is its own for life: what its draws note is fixed
        self._prioritized = [s.prioritized for s in self._sources]
        self._pads = [s.pads for s in self._sources]
        # a draw with notes reads these sources' weights or mask under the same hold of their
        # lock (re-entrant) as their rows: a collector writing meanwhile could otherwise put a
        # row's priority and the smallest one in two states (weights above 1, a tree caught
        # mid-update)
        self._noted = [p or q for p, q in zip(self._prioritized, self._pads)]
        self._scratch: dict[int, _Scratch] = {}  # the kept packed rows, at key 0

    @property
    def direct(self) -> tuple[bool, ...]:
        """Per source, whether it draws straight into the packed batch (else its rows are
        drawn as a TensorDict, then packed)."""
        return tuple(d is not None for d in self.drawers)

    def _decide_layout(self) -> RowLayout | None:
        """The layout of a batch row: the rows of the first source that has any, after its
        transforms, without sampler bookkeeping (TorchRL's ``"index"``); ``None`` while no
        source has rows."""
        for src in self._sources:
            if len(src) == 0:
                continue
            schema = src.schema()
            if schema is None:
                continue
            schema = schema.without(BOOKKEEPING_KEYS)
            own = src.packed_layout()
            return own if own is not None and own.schema == schema else RowLayout(schema)
        return None

    # -- drawing ---------------------------------------------------------------------------

    def draw(
        self,
        counts: list[int],
        generator: torch.Generator,
        generator_for: Callable[[torch.device], torch.Generator],
        notes: Notes | None = None,
    ) -> tuple[TensorDictBase, list[torch.Tensor | None]]:
        """One batch of ``counts[i]`` rows from each source ``i``, in source order, and each
        source's row indices (without ``notes`` they may be kept buffers that the next batch
        rewrites: read them before drawing again).

        ``generator`` draws for host rows, ``generator_for(device)`` for rows on a device.
        ``notes``, when given, is filled with the sources' weights and masks.
        """
        layout = self.layout
        if layout is None:  # a source got rows since the plan was made: the caller replans
            raise RuntimeError("DrawPlan.draw before any source had rows")
        # Taken with an atomic pop, so two threads sampling at once never share it.
        kept = self._scratch.pop(0, None)
        if kept is None or kept.counts != counts:
            kept = _Scratch.make(layout, counts, self.device)
        indices: list[torch.Tensor | None] = [None] * len(counts)
        drawers, where, noted = self.drawers, self.where, self._noted
        for i, part, index in kept.parts:
            on = where[i]
            g = generator if on is None else generator_for(on)
            drawer = drawers[i]
            if notes is None or not noted[i]:
                # indices the caller keeps (info) are new tensors; else the kept buffer
                keep = index if notes is None else None
                if drawer is not None:
                    indices[i] = drawer(counts[i], g, part, keep)
                else:
                    indices[i] = self._fill(i, counts[i], g, part)
                continue
            # weights or a mask to read: under the same hold of the source's lock as its rows
            with self._sources[i].lock():
                if drawer is not None:
                    idx = drawer(counts[i], g, part, None)
                else:
                    idx = self._fill(i, counts[i], g, part)
                if idx is not None:
                    self._note(i, idx, notes)
            indices[i] = idx
        rows = kept.rows
        batch = layout.copy_views(rows.views, rows.batch_size, self.device)
        if self._host:  # elsewhere a copy may still be reading it
            self._scratch[0] = kept
        return batch, indices

    def _fill(self, i: int, n: int, generator: torch.Generator, part: torch.Tensor) -> Any:
        """Source ``i``'s rows, drawn as a TensorDict (its transforms applied), checked and
        packed into ``part``; returns their indices (``None`` when the source does not say)."""
        layout = self.layout
        assert layout is not None
        drawn = self._sources[i].draw(n, generator)
        rows = drawn.rows
        if rows.batch_size != (n,):  # the batch would hold rows of uninitialised memory
            raise DataStructureError(
                f"source {self._names[i]!r} gave {_rows(rows)} for the {n} rows drawn from "
                "it: a source's transforms must keep one row per row (batch_size "
                f"[{n}]); filter or reshape rows in the mixing buffer's own transform "
                "instead, which runs on the whole batch"
            )
        try:
            leaves = layout.leaves_of(strip_bookkeeping(rows, layout.schema))
        except SchemaMismatchError as err:
            raise SchemaMismatchError(
                f"source {self._names[i]!r}: {err}\nFix: {SCHEMA_FIX}"
            ) from None
        device = part.device
        if any(v.device != device for v in leaves):
            leaves = [v.to(device) for v in leaves]
        with torch.no_grad():
            layout.write(leaves, layout.group_views(part))
        return drawn.index

    def _note(self, i: int, index: torch.Tensor, notes: Notes) -> None:
        """Read source ``i``'s weights and mask of the draw that returned ``index`` (held)."""
        src = self._sources[i]
        if self._prioritized[i]:
            notes.weights[i] = src.weight(index)
        if self._pads[i]:
            notes.masks[i] = src.mask(index)
