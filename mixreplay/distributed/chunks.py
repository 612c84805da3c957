"""Exactly-once writes: every row a writer sends has a number, and the actor applies each once.

A write to the buffer actor can reach it twice: Ray re-runs a call whose reply was
lost when the actor restarts (``max_task_retries``), a caller told that the actor
was unavailable retries the call itself, and Ray re-runs a whole collector *task*
whose worker died (``max_retries``, 3 by default), which sends every row again
from the start. The actor may have applied the rows, and even checkpointed them,
before it died. So every message of rows is a *chunk* with an id
``(writer, start, floor, attempt)``:

- ``writer``: the writer's identity (see :func:`mint_writer_id`). Inside a Ray task
  it is derived from the task's id, which Ray keeps when it retries the task, and
  from how many writers the task made before: the retried task's writers get the
  identities of the first attempt's. Elsewhere (the driver, an actor's
  ``__init__``, a thread of your own) it is random.
- ``start``: the writer's number of the chunk's first row (0, 1, 2... over all
  its rows). Numbering rows, not messages, keeps a retried task exactly once even
  when it cuts its rows into other messages (a writer coalesces while the actor is
  behind, so the cut depends on timing).
- ``floor``: every row ``< floor`` has been acknowledged to the writer (or
  abandoned), so this writer object never sends it again.
- ``attempt``: the Ray task attempt that made the writer, where known (mixreplay's own
  writers send 0: Ray's public API does not tell a task its attempt).

The actor keeps a compact record per writer (:class:`WriterTable`): the rows it
applied (one number while they arrive in order), the slots of the blocking writes
not yet acknowledged, and nothing else. A chunk's rows that the record holds are
acknowledged, not applied again; the others are applied. The table is saved in
the *same* checkpoint as the rows.

Bounded: the table holds at most ``max_writers`` records. Beyond, it drops the
least recently active one (writers closed with :meth:`RayWriter.close
<mixreplay.distributed.RayWriter.close>` go first) and remembers the dropped
identity in a ring of the last :data:`EVICTED_MEMORY`. A writer that comes back
after its record was dropped continues exactly once when it can (it says, with
``floor == start``, that nothing before its chunk is in doubt); otherwise (a
retried task starting over, a chunk in doubt) its write is refused with
:class:`~mixreplay.errors.WriterEvictedError`: never silently applied twice.

Neither class imports Ray.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import sys
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from mixreplay.errors import CheckpointError, WriterEvictedError

__all__ = [
    "EVICTED_MEMORY",
    "MAX_WRITERS",
    "ChunkIds",
    "WriterTable",
    "mint_writer_id",
    "random_writer_id",
]

log = logging.getLogger(__name__)

#: ``(writer, start, floor, attempt)``: the id a chunk of rows travels with.
ChunkId = tuple[str, int, int, int]

TABLE_VERSION = 2
#: Default bound on the writer records an actor keeps (``RayReplayBuffer(max_writers=...)``).
MAX_WRITERS = 4096
#: How many dropped writer identities the actor remembers (8 bytes each).
EVICTED_MEMORY = 65_536

# -- writer identities ------------------------------------------------------------------------

_MINT_LOCK = threading.Lock()
# (task id, attempt, kind) -> identities of that kind minted so far by that task attempt here
_MINTED: collections.OrderedDict[tuple[str, int, str], int] = collections.OrderedDict()


def _task_key() -> tuple[str, int] | None:
    """``(task id, attempt)`` of the Ray task this thread runs, when its identity is stable.

    ``None`` (a random identity) in the driver, outside Ray, in an actor's creation
    task (a restarted actor runs ``__init__`` again with the same task id, then
    sends *new* rows: a derived identity would drop them), and in threads other
    than the main one (Ray gives them ids of their own).
    """
    ray = sys.modules.get("ray")
    if ray is None or threading.current_thread() is not threading.main_thread():
        return None
    try:
        if not ray.is_initialized():
            return None
        context = ray.get_runtime_context()
        try:
            context.is_canceled()  # documented to raise in a driver (and in an async actor)
        except RuntimeError:
            return None
        task_id = context.get_task_id()
        if task_id is None:
            return None
        actor_id = context.get_actor_id()
        if (
            actor_id is not None
            and task_id == ray.TaskID.for_actor_creation_task(ray.ActorID.from_hex(actor_id)).hex()
        ):
            return None
    except Exception:  # noqa: BLE001 - a Ray without these calls: random identities
        return None
    return task_id, _task_attempt()


def _task_attempt() -> int:
    """The attempt of the Ray task this thread runs: 0; Ray's public API does not say it.

    A retried task still mints the first attempt's identities (they derive from the
    task's id), so its rows are applied once; only the actor's refusal of a retry whose
    writer it forgot long ago (:class:`WriterTable`) goes without the attempt.
    """
    return 0


def mint_writer_id(kind: str = "writer") -> tuple[str, int]:
    """A new writer identity and the task attempt that made it.

    Inside a Ray task (or an actor method call), the identity is a hash of the
    task's id, of ``kind`` (``"writer"`` for a :class:`~mixreplay.distributed.RayWriter`,
    ``"handle"`` for a thread's blocking writes) and of how many identities of that
    kind this task attempt minted before: a task that Ray retries makes the same
    identities in the same order, so the actor recognises the rows the earlier
    attempt sent. Elsewhere it is random (:func:`random_writer_id`).
    """
    task = _task_key()
    if task is None:
        return random_writer_id()
    key = (*task, kind)
    with _MINT_LOCK:
        n = _MINTED.get(key, 0)
        _MINTED[key] = n + 1
        _MINTED.move_to_end(key)
        while len(_MINTED) > 64:  # only the tasks this worker runs now matter
            _MINTED.popitem(last=False)
    digest = hashlib.blake2b(f"{task[0]}:{kind}:{n}".encode(), digest_size=16).hexdigest()
    return digest, task[1]


def random_writer_id() -> tuple[str, int]:
    """An identity no other writer has, and that no retry will take again."""
    return uuid.uuid4().hex, 0


# -- the sending side ------------------------------------------------------------------------


class ChunkIds:
    """One writer's identity, the number of its next row, and its chunks not acknowledged.

    The identity is minted when first needed, in the thread that writes (see
    :func:`mint_writer_id`). Thread-safe.
    """

    def __init__(self, identity: tuple[str, int] | None = None, *, kind: str = "handle") -> None:
        self._identity = identity
        self._kind = kind
        self._next = 0
        self._open: dict[int, int] = {}  # start -> end of chunks sent (or about to be), not acked
        self.lock = threading.Lock()

    @property
    def writer(self) -> str:
        return self._mint()[0]

    def _mint(self) -> tuple[str, int]:
        with self.lock:
            if self._identity is None:
                self._identity = mint_writer_id(self._kind)
            return self._identity

    def take(self, sizes: Iterable[int]) -> list[int]:
        """Row numbers for chunks of ``sizes`` rows: the first row of each, open until :meth:`done`."""
        starts = []
        with self.lock:
            for n in sizes:
                starts.append(self._next)
                self._open[self._next] = self._next + int(n)
                self._next += int(n)
        return starts

    def done(self, starts: Iterable[int]) -> None:
        """Acknowledged or abandoned: these chunks are never sent again."""
        with self.lock:
            for s in starts:
                self._open.pop(s, None)

    def chunk_id(self, start: int) -> ChunkId:
        """The id the chunk starting at ``start`` travels with, naming the current floor."""
        writer, attempt = self._mint()
        with self.lock:
            floor = min(self._open) if self._open else self._next
        return (writer, start, floor, attempt)

    @property
    def open(self) -> int:
        """How many chunks are sent and not acknowledged."""
        return len(self._open)

    @property
    def rows(self) -> int:
        """Rows numbered so far."""
        return self._next


# -- the receiving side ----------------------------------------------------------------------


class _Record:
    """What the actor knows of one writer: rows applied, and the slots of unacknowledged chunks."""

    __slots__ = ("done", "extra", "open")

    def __init__(self, done: int = 0) -> None:
        self.done = done  # every row < done is applied (or acknowledged/abandoned by the writer)
        self.extra: list[list[int]] = []  # applied ranges above done: sorted, disjoint, apart
        self.open: dict[int, np.ndarray] = {}  # start -> slots, of blocking chunks not acked

    def missing(self, a: int, b: int) -> list[tuple[int, int]]:
        """The parts of rows ``[a, b)`` not applied yet."""
        if not self.extra:  # rows arrive in order: one comparison
            return [(a, b)] if a >= self.done else ([(self.done, b)] if b > self.done else [])
        out = []
        a = max(a, self.done)
        for x, y in self.extra:
            if a >= b:
                break
            if y <= a:
                continue
            if x > a:
                out.append((a, min(x, b)))
            a = max(a, y)
        if a < b:
            out.append((a, b))
        return out

    def add(self, a: int, b: int) -> None:
        """Rows ``[a, b)`` were applied."""
        if a <= self.done and not self.extra:  # in order
            self.done = max(self.done, b)
            return
        ranges = [*self.extra, [a, b]]
        ranges.sort()
        merged: list[list[int]] = []
        for x, y in ranges:
            if merged and x <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], y)
            else:
                merged.append([x, y])
        self.extra = merged
        self._absorb()

    def raise_floor(self, floor: int) -> None:
        """The writer will never resend rows ``< floor``: forget what only served their retries."""
        if floor > self.done:
            self.done = floor
            self._absorb()
        if self.open:
            for start in [s for s, slots in self.open.items() if s + len(slots) <= floor]:
                del self.open[start]

    def _absorb(self) -> None:
        while self.extra and self.extra[0][0] <= self.done:
            self.done = max(self.done, self.extra.pop(0)[1])

    def slots(self, a: int, b: int) -> np.ndarray:
        """Slots of rows ``[a, b)`` from the unacknowledged chunks; -1 where they are forgotten."""
        out = np.full(b - a, -1, dtype=np.int64)
        for start, slots in self.open.items():
            lo, hi = max(a, start), min(b, start + len(slots))
            if lo < hi:
                out[lo - a : hi - a] = slots[lo - start : hi - start]
        return out

    def slot_count(self) -> int:
        return sum(len(s) for s in self.open.values())


class WriterTable:
    """The receiving side: which rows each writer had applied, bounded to ``max_writers`` records.

    Records are kept in order of activity; a closed writer's record moves to the
    front. When a new writer would make more than ``max_writers``, the front record
    is dropped and its identity remembered (the last :data:`EVICTED_MEMORY` ones).

    Examples:
        >>> table = WriterTable(max_writers=2)
        >>> table.missing(("w", 0, 0, 0), 5)          # a new writer: all 5 rows to apply
        [(0, 5)]
        >>> table.applied("w", 0, 5, np.arange(5))
        >>> table.settle(("w", 0, 0, 0))
        >>> table.missing(("w", 0, 0, 0), 5)          # the same chunk again: nothing to apply
        []
        >>> table.missing(("w", 3, 0, 0), 4)          # cut differently (a retried task): rows 5, 6
        [(2, 4)]
        >>> table.slots("w", 0, 5).tolist()
        [0, 1, 2, 3, 4]
    """

    def __init__(self, max_writers: int = MAX_WRITERS) -> None:
        self.max_writers = int(max_writers)
        self._records: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        # hashed identities of dropped records: a ring, allocated at the first drop
        self._evicted = np.zeros(0, dtype=np.uint64)
        self._evicted_total = 0

    def __len__(self) -> int:
        """Writer records kept."""
        return len(self._records)

    def __contains__(self, writer: str) -> bool:
        return writer in self._records

    @property
    def evicted(self) -> int:
        """Records dropped so far (over the table's whole life, checkpoints included)."""
        return self._evicted_total

    def slot_count(self) -> int:
        """Slots remembered for unacknowledged blocking writes, over all records."""
        return sum(r.slot_count() for r in self._records.values())

    # -- applying chunks -------------------------------------------------------------------------

    def missing(self, chunk: ChunkId, n: int) -> list[tuple[int, int]]:
        """The parts of the chunk's ``n`` rows not applied yet, as ranges relative to its start.

        Raises :class:`~mixreplay.errors.WriterEvictedError`, changing nothing, when the
        writer's record was dropped and the chunk may hold rows applied before.
        """
        writer, start, floor, attempt = chunk
        record = self._records.get(writer)
        if record is None:
            self._check_unknown(writer, start, floor, attempt)
            return [(0, n)]
        return [(a - start, b - start) for a, b in record.missing(start, start + n)]

    def _check_unknown(self, writer: str, start: int, floor: int, attempt: int) -> None:
        """A writer without a record: new, or dropped (then only safe if nothing is in doubt)."""
        if floor >= start > 0:
            return  # every earlier row was acknowledged: nothing of this writer can repeat
        if self._was_evicted(writer):
            raise WriterEvictedError(
                f"writer {writer[:12]} (rows {start}...) was dropped from the buffer actor's table "
                f"of writers (more than max_writers={self.max_writers} writers wrote since its "
                "last write, or it was closed), so the actor cannot tell whether it holds these "
                "rows; they were not written. Its earlier rows are in the buffer once. "
                + _EVICTED_FIX
            )
        if start == 0 and attempt > 0 and self._evicted_total > EVICTED_MEMORY:
            raise WriterEvictedError(
                f"writer {writer[:12]} of a retried Ray task (attempt {attempt}) starts over, and "
                f"the buffer actor has dropped more writer records ({self._evicted_total}) than it "
                f"remembers ({EVICTED_MEMORY}): it cannot tell whether the earlier attempt's "
                "rows are in the buffer; they were not written again. " + _EVICTED_FIX
            )

    def applied(self, writer: str, a: int, b: int, slots: np.ndarray | None) -> None:
        """Rows ``[a, b)`` of ``writer`` were applied (to ``slots``, for a blocking write)."""
        record = self._records.get(writer)
        if record is None:
            record = self._records[writer] = _Record()
        record.add(a, b)
        if slots is not None:
            record.open[a] = np.asarray(slots, dtype=np.int64)

    def waiting_before(self, writer: str, floor: int, start: int) -> bool:
        """Whether rows ``[floor, start)`` of ``writer`` are not all applied yet.

        The writer sent them before this chunk and has not had them acknowledged
        (they are at or above its floor), so an earlier chunk is still held or on
        its way again: a rate-limited actor holds this one behind it.
        """
        if floor >= start:
            return False
        record = self._records.get(writer)
        return record is None or bool(record.missing(floor, start))

    def settle(self, chunk: ChunkId) -> None:
        """After a chunk was handled: apply its floor, mark the writer active, keep the bound."""
        writer, _, floor, _ = chunk
        record = self._records.get(writer)
        if record is None:
            return
        record.raise_floor(floor)
        self._records.move_to_end(writer)
        self._bound()

    def slots(self, writer: str, a: int, b: int) -> np.ndarray:
        """The slots rows ``[a, b)`` went to, as far as remembered (-1 otherwise)."""
        record = self._records.get(writer)
        if record is None:
            return np.full(b - a, -1, dtype=np.int64)
        return record.slots(a, b)

    def retire(self, writer: str, floor: int) -> None:
        """The writer was closed: keep its rows' record (a retried task may resend them), first to go."""
        record = self._records.get(writer)
        if record is None:
            return
        record.raise_floor(floor)
        record.open.clear()
        self._records.move_to_end(writer, last=False)

    # -- the bound -------------------------------------------------------------------------------

    def _bound(self) -> None:
        while len(self._records) > self.max_writers:
            writer, _ = self._records.popitem(last=False)
            self._remember_evicted(writer)

    def _remember_evicted(self, writer: str) -> None:
        if len(self._evicted) == 0:
            self._evicted = np.zeros(EVICTED_MEMORY, dtype=np.uint64)
        self._evicted[self._evicted_total % EVICTED_MEMORY] = _hash(writer)
        self._evicted_total += 1
        log.debug("writer table full (%d): dropped writer %s", self.max_writers, writer[:12])

    def _was_evicted(self, writer: str) -> bool:
        filled = min(self._evicted_total, EVICTED_MEMORY)
        return bool((self._evicted[:filled] == np.uint64(_hash(writer))).any())

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A few JSON numbers and flat ``int64``/``uint8`` tensors (no per-writer JSON).

        - ``ids``: ``uint8 [W, L]``, each writer's identity in UTF-8, zero-padded, from the
          least to the most recently active; ``done``: ``int64 [W]``;
        - ``extra``: ``int64 [E, 3]``, applied ranges above ``done`` as ``(writer, start, end)``;
        - ``open``: ``int64 [K, 4]``, unacknowledged blocking chunks as
          ``(writer, start, offset, length)`` into ``slots``: ``int64 [S]``;
        - ``evicted``: ``int64 [R]``, the dropped identities' hashes, oldest first.
        """
        names = [w.encode() for w in self._records]
        width = max((len(n) for n in names), default=0)
        ids = np.zeros((len(names), width), dtype=np.uint8)
        for i, n in enumerate(names):
            ids[i, : len(n)] = np.frombuffer(n, dtype=np.uint8)
        done = np.fromiter((r.done for r in self._records.values()), np.int64, len(names))
        extra: list[tuple[int, int, int]] = []
        opened: list[tuple[int, int, int, int]] = []
        parts: list[np.ndarray] = []
        offset = 0
        for i, record in enumerate(self._records.values()):
            extra += [(i, x, y) for x, y in record.extra]
            for start, slots in sorted(record.open.items()):
                opened.append((i, start, offset, len(slots)))
                parts.append(slots)
                offset += len(slots)
        ring = self._evicted[: min(self._evicted_total, EVICTED_MEMORY)]
        if self._evicted_total > EVICTED_MEMORY:
            ring = np.roll(ring, -(self._evicted_total % EVICTED_MEMORY))
        return {
            "version": TABLE_VERSION,
            "max_writers": self.max_writers,
            "evicted_total": self._evicted_total,
            "ids": torch.from_numpy(ids),
            "done": torch.from_numpy(done),
            "extra": torch.tensor(extra, dtype=torch.int64).reshape(-1, 3),
            "open": torch.tensor(opened, dtype=torch.int64).reshape(-1, 4),
            "slots": torch.from_numpy(
                np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
            ),
            "evicted": torch.from_numpy(ring.view(np.int64).copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.errors.CheckpointError`, changing nothing, if malformed.

        A table of version 1 (mixreplay numbered chunks, not rows, before) loads as an
        empty table: the writers that made it ran an earlier mixreplay and are gone.
        ``max_writers`` stays this table's own (the actor's current setting).
        """
        version = state.get("version") if isinstance(state, dict) else state
        if version == 1:
            log.warning(
                "the checkpoint's writer table is of version 1 (an earlier mixreplay): loaded empty"
            )
            self._records = collections.OrderedDict()
            self._evicted = np.zeros(0, dtype=np.uint64)
            self._evicted_total = 0
            return
        if version != TABLE_VERSION:
            raise CheckpointError(
                f"the writer table has version {version!r}, this mixreplay reads {TABLE_VERSION}"
            )
        ids = _tensor(state, "ids", torch.uint8, 2).numpy()
        done = _tensor(state, "done", torch.int64, 1).numpy()
        extra = _tensor(state, "extra", torch.int64, 2).numpy()
        opened = _tensor(state, "open", torch.int64, 2).numpy()
        slots = _tensor(state, "slots", torch.int64, 1).numpy()
        evicted = _tensor(state, "evicted", torch.int64, 1).numpy()
        total = state.get("evicted_total")
        w = len(ids)
        if len(done) != w or (done < 0).any():
            raise CheckpointError(
                f"the writer table's done must hold one row count >= 0 per writer ({w}), got "
                f"{len(done)} values, smallest {done.min() if len(done) else None}"
            )
        records = collections.OrderedDict(
            (bytes(row).rstrip(b"\0").decode(errors="replace"), _Record(int(d)))
            for row, d in zip(ids, done)
        )
        if len(records) != w:
            raise CheckpointError(f"the writer table names a writer twice ({w} rows)")
        order = list(records.values())
        if extra.shape[1:] != (3,) or (len(extra) and not _in(extra[:, 0], w)):
            raise CheckpointError(
                f"the writer table's extra must be [writer < {w}, start, end] rows, got shape "
                f"{tuple(extra.shape)}"
            )
        for i, a, b in extra.tolist():
            record = order[i]
            last = record.extra[-1][1] if record.extra else record.done
            if not last < a < b:
                raise CheckpointError(
                    f"writer {list(records)[i]!r}: applied ranges must be sorted [start, end) "
                    f"pairs above {last}, got [{a}, {b})"
                )
            record.extra.append([a, b])
        if opened.shape[1:] != (4,) or (len(opened) and not _in(opened[:, 0], w)):
            raise CheckpointError(
                f"the writer table's open must be [writer < {w}, start, offset, length] rows, "
                f"got shape {tuple(opened.shape)}"
            )
        for i, start, offset, n in opened.tolist():
            if not (start >= 0 and offset >= 0 and n >= 0 and offset + n <= len(slots)):
                raise CheckpointError(
                    f"writer {list(records)[i]!r}: slots [{offset}, {offset + n}) lie outside the "
                    f"{len(slots)} saved"
                )
            order[i].open[start] = slots[offset : offset + n].copy()
        full = len(evicted) == EVICTED_MEMORY
        if (
            not isinstance(total, int)
            or isinstance(total, bool)
            or len(evicted) > EVICTED_MEMORY
            or not (total >= len(evicted) if full else total == len(evicted))
        ):
            raise CheckpointError(
                f"the writer table's evicted_total must be the int {len(evicted)} (the "
                f"identities saved{', or more' if full else ''}), got {total!r}"
            )
        ring = np.zeros(EVICTED_MEMORY if total else 0, dtype=np.uint64)
        ring[: len(evicted)] = evicted.view(np.uint64)
        if full:  # the next drop overwrites the oldest identity
            ring = np.roll(ring, total % EVICTED_MEMORY)
        self._records = records
        self._evicted = ring
        self._evicted_total = int(total)
        self._bound()

    def __repr__(self) -> str:
        return (
            f"WriterTable({len(self)} writers of at most {self.max_writers}, "
            f"{self.slot_count()} slots remembered, {self._evicted_total} dropped)"
        )


_EVICTED_FIX = (
    "Write further rows with a new writer (rb.writer(), or the handle again), and give the "
    "buffer a larger RayReplayBuffer(max_writers=...) if writers that are still running get "
    "dropped (close writers you are done with: with rb.writer() as w: ...)"
)


def _hash(writer: str) -> int:
    return int.from_bytes(hashlib.blake2b(writer.encode(), digest_size=8).digest(), "little")


def _tensor(state: dict[str, Any], name: str, dtype: torch.dtype, dim: int) -> torch.Tensor:
    t = state.get(name)
    if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != dim:
        kind = str(dtype).removeprefix("torch.")
        raise CheckpointError(
            f"the writer table's {name} must be a {dim}-d {kind} tensor, got {t!r:.80}"
        )
    return t


def _in(index: np.ndarray, n: int) -> bool:
    return bool(((index >= 0) & (index < n)).all())
