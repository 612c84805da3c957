"""Exactly-once writes: every chunk of rows carries an id, and the actor applies each id once.

A write to the buffer actor can reach it twice: Ray re-runs a call whose reply was
lost when the actor restarts (``max_task_retries``), and a caller told that the
actor was unavailable retries the call itself. The actor may have applied the
rows, and even checkpointed them, before it died. So every message of rows is a
*chunk* with an id ``(writer, seq, floor)``:

- ``writer``: a random id per writing object (each copy of a handle, each
  :class:`~mixreplay.distributed.RayWriter`); ``seq``: 1, 2, 3... per writer;
- ``floor``: every ``seq <= floor`` of this writer has been acknowledged (or
  abandoned), so the writer never sends it again.

The actor keeps, per writer, the chunks it applied above the floor
(:class:`WriterTable`) and saves that table in the *same* checkpoint as the rows.
A chunk whose id is in the table is acknowledged (with the slots it was written
to) and not applied again. Retries may arrive in any order (Ray resubmits the
calls in flight after a restart without keeping their order), so the table holds
a set of ids, not a high-water mark; it stays small because each chunk names the
writer's floor, below which entries are dropped.

Neither class imports Ray.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from mixreplay.errors import CheckpointError

__all__ = ["ChunkIds", "WriterTable"]

#: ``(writer, seq, floor)``: the id a chunk of rows travels with.
ChunkId = tuple[str, int, int]

TABLE_VERSION = 1


class ChunkIds:
    """The sending side: one writer's id, its next sequence number and its open chunks.

    Thread-safe: :meth:`take` and :meth:`done` may be called from several threads
    of one process that share a handle.
    """

    def __init__(self) -> None:
        self.writer = uuid.uuid4().hex
        self._next = 1
        self._open: set[int] = set()  # sent (or about to be), not acknowledged yet
        self.lock = threading.Lock()

    def take(self, n: int = 1) -> list[int]:
        """``n`` new sequence numbers, open until :meth:`done`."""
        with self.lock:
            seqs = list(range(self._next, self._next + n))
            self._next += n
            self._open.update(seqs)
            return seqs

    def done(self, seqs: Iterable[int]) -> None:
        """Acknowledged or abandoned: these chunks are never sent again."""
        with self.lock:
            self._open.difference_update(seqs)

    def chunk_id(self, seq: int) -> ChunkId:
        """The id ``seq`` travels with, naming the current floor."""
        with self.lock:
            floor = (min(self._open) if self._open else self._next) - 1
        return (self.writer, seq, floor)

    @property
    def open(self) -> int:
        """How many chunks are sent and not acknowledged."""
        return len(self._open)


class WriterTable:
    """The receiving side: which chunks each writer had applied, and the slots they went to.

    Entries live from the chunk's first application until its writer names a floor
    at or above it; the table is part of the actor's checkpoint.

    Examples:
        >>> table = WriterTable()
        >>> ("w", 1, 0) in table
        False
        >>> table.record(("w", 1, 0), np.array([7, 8]))
        >>> ("w", 1, 0) in table, table.slots(("w", 1, 0))   # a retry: acknowledged, not re-applied
        (True, array([7, 8]))
        >>> table.record(("w", 2, 1), None)   # chunk 2 says chunk 1 was acknowledged
        >>> len(table)
        1
    """

    def __init__(self) -> None:
        # writer -> {seq: slots written (int64 array), or None for a count-only write}
        self._applied: dict[str, dict[int, np.ndarray | None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._applied.values())

    @property
    def writers(self) -> int:
        return len(self._applied)

    def __contains__(self, chunk: ChunkId) -> bool:
        """Whether ``chunk`` was applied already (and is still remembered)."""
        writer, seq, _ = chunk
        return seq in self._applied.get(writer, ())

    def slots(self, chunk: ChunkId) -> np.ndarray | None:
        """The slots an applied ``chunk`` went to (``None`` for a write that asked for none)."""
        writer, seq, _ = chunk
        return self._applied[writer][seq]

    def record(self, chunk: ChunkId, slots: np.ndarray | None) -> None:
        """``chunk`` was applied (to ``slots``); forget the writer's chunks at or below its floor."""
        writer, seq, floor = chunk
        applied = self._applied.setdefault(writer, {})
        applied[seq] = None if slots is None else np.asarray(slots, dtype=np.int64)
        self.forget(writer, floor)

    def forget(self, writer: str, floor: int) -> None:
        """Drop the writer's chunks ``<= floor``: it acknowledged them and never resends them."""
        applied = self._applied.get(writer)
        if applied is None:
            return
        for seq in [s for s in applied if s <= floor]:
            del applied[seq]
        if not applied:
            del self._applied[writer]

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON values plus one ``int64`` tensor holding every remembered slot, back to back."""
        writers: dict[str, list[list[int]]] = {}
        parts: list[np.ndarray] = []
        offset = 0
        for writer, applied in self._applied.items():
            rows = []
            for seq, slots in sorted(applied.items()):
                if slots is None:
                    rows.append([seq, -1, 0])
                else:
                    rows.append([seq, offset, len(slots)])
                    parts.append(slots)
                    offset += len(slots)
            writers[writer] = rows
        slots_all = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return {
            "version": TABLE_VERSION,
            "writers": writers,
            "slots": torch.from_numpy(slots_all.astype(np.int64, copy=False)),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.errors.CheckpointError`, changing nothing, if malformed."""
        if not isinstance(state, dict) or state.get("version") != TABLE_VERSION:
            version = state.get("version") if isinstance(state, dict) else state
            raise CheckpointError(
                f"the writer table has version {version!r}, this mixreplay reads {TABLE_VERSION}"
            )
        slots = state.get("slots")
        writers = state.get("writers")
        if not isinstance(slots, torch.Tensor) or slots.dtype != torch.int64 or slots.dim() != 1:
            raise CheckpointError(f"the writer table's slots must be int64[n], got {slots!r:.80}")
        if not isinstance(writers, dict):
            raise CheckpointError(
                f"the writer table's writers must be a dict, got {type(writers).__name__}"
            )
        flat = slots.numpy()
        table: dict[str, dict[int, np.ndarray | None]] = {}
        for writer, rows in writers.items():
            applied: dict[int, np.ndarray | None] = {}
            for row in rows if isinstance(rows, list) else [rows]:
                if (
                    not isinstance(row, list)
                    or len(row) != 3
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)
                ):
                    raise CheckpointError(
                        f"writer {writer!r}: an entry must be [seq, offset, length], got {row!r}"
                    )
                seq, start, n = row
                if start == -1:
                    applied[seq] = None
                elif 0 <= start and 0 <= n and start + n <= len(flat):
                    applied[seq] = flat[start : start + n].copy()
                else:
                    raise CheckpointError(
                        f"writer {writer!r}: slots [{start}, {start + n}) lie outside the "
                        f"{len(flat)} saved"
                    )
            if applied:
                table[writer] = applied
        self._applied = table

    def __repr__(self) -> str:
        return f"WriterTable({self.writers} writers, {len(self)} chunks remembered)"
