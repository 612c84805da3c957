"""Rings that keep each next value once: ``LazyTensorStorage(..., dedup_next=True)`` and kin."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay.errors import CheckpointError
from mixreplay.layout import WORD_BYTES, RowLayout
from mixreplay.schema import Schema
from mixreplay.storages import ring as plain_ring
from mixreplay.storages.base import check_rows, saved_header
from mixreplay.storages.dedup.frozen import DedupReads
from mixreplay.storages.dedup.layout import DedupLayout, _cols
from mixreplay.storages.ring import (
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorStorage,
    check_saved_rows,
)

__all__ = [
    "DedupLazyMemmapStorage",
    "DedupLazyTensorStorage",
    "DedupTensorStorage",
    "dedup_class",
    "expand_ring_state",
]

log = logging.getLogger(__name__)


class _Pool:
    """Exception rows with a free list: ``rows [P, Xw]``, ids handed out and taken back."""

    def __init__(self, rows: torch.Tensor, free: list[int], release: Callable[[], Any] | None):
        self.rows = rows
        self.free = free
        self.release = release  # removes a file behind ``rows`` (memory-mapped rings)

    @property
    def capacity(self) -> int:
        return int(self.rows.shape[0])


class _DedupRing(DedupReads, TensorStorage):
    """A :class:`TensorStorage` ring that keeps each next value once (see the module)."""

    dedup_next = True
    _pool: _Pool | None = None

    # the pool starts with at most this many exception rows (fewer in a small ring:
    # a 64th of its rows) and doubles when full
    POOL_START = 64

    @property
    def nbytes(self) -> int:
        """Bytes held: the stored rows, the exception pool and its index (0 before the first write)."""
        dl, pool = self._dedup, self._pool
        if self._rows is None or dl is None or pool is None:
            return 0
        return self.max_size * (dl.stored.row_bytes + 4) + pool.capacity * dl.x_words * WORD_BYTES

    @property
    def exceptions(self) -> int:
        """Filled rows that keep their own next values."""
        pool = self._pool
        return 0 if pool is None else pool.capacity - len(pool.free)

    @property
    def plain_name(self) -> str:
        """The class a plain ring of this kind has (``LazyTensorStorage``, ...)."""
        for c in type(self).__mro__:
            if issubclass(c, TensorStorage) and not issubclass(c, _DedupRing):
                return c.__name__
        return "TensorStorage"  # pragma: no cover

    # -- allocation ------------------------------------------------------------------------

    def _allocate_pool(self, rows: int, words: int) -> _Pool:
        return _Pool(
            torch.zeros(rows, words, dtype=torch.int64, device=self.device), list(range(rows)), None
        )

    def _grow_pool(self, pool: _Pool, need: int) -> _Pool:
        """A pool with at least ``need`` more free rows (the old one is left as it is)."""
        cap = pool.capacity
        new_cap = max(2 * cap, cap - len(pool.free) + need)
        grown = self._allocate_pool(new_cap, pool.rows.shape[1])
        grown.rows[:cap].copy_(pool.rows)
        grown.free = pool.free + list(range(cap, new_cap))
        log.debug("exception pool grown from %d to %d rows", cap, new_cap)
        return grown

    def _fresh(self, layout: RowLayout) -> tuple[DedupLayout, torch.Tensor, torch.Tensor, _Pool]:
        dl = DedupLayout(layout)
        if not dl.deduplicated:
            log.warning(
                "dedup_next=True, but no key is both at the root and under 'next' with the same "
                "shape and dtype (rows: %s): every row is stored whole",
                layout.schema,
            )
        rows = self._allocate(dl.stored)
        try:
            exception_of = torch.full((self.max_size,), -1, dtype=torch.int32, device=self.device)
            start = min(self.POOL_START, max(4, self.max_size // 64))
            pool = self._allocate_pool(start, dl.x_words)
        except BaseException:
            self._release_rows()
            raise
        return dl, rows, exception_of, pool

    def _release_rows(self) -> None:
        """Undo an :meth:`_allocate` whose storage was not kept (memory: nothing to do)."""

    def _adopt(
        self, layout: RowLayout, fresh: tuple[DedupLayout, torch.Tensor, torch.Tensor, _Pool]
    ) -> None:
        old = self._pool
        dl, rows, exception_of, pool = fresh
        self._layout, self._dedup, self._rows = layout, dl, rows
        self._exception_of, self._pool, self._exceptions = exception_of, pool, pool.rows
        if old is not None and old is not pool and old.release is not None:
            old.release()

    # -- writing ---------------------------------------------------------------------------

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the rows of ``data`` (batch ``[n]``) and return the slots written.

        The rows are packed and checked whole, and every exception decided (the pool
        grown if needed) before any stored byte changes.
        """
        check_rows(data)
        layout = self._layout or RowLayout(Schema.from_tensordict(data))
        words = self._pack(data, layout)  # raises before any stored byte changes
        with self.lock:
            fresh = None
            if self._layout is None:
                fresh = self._fresh(layout)
            elif self._layout is not layout:
                words = self._pack(data, self._layout)
            try:
                commit = self._plan_write(words, fresh)
            except BaseException:
                if fresh is not None:
                    self._release_rows()
                raise
            if fresh is not None:
                self._adopt(layout, fresh)
                log.debug("allocated %r for %d rows", fresh[0], self.max_size)
            return commit()

    def _plan_write(
        self,
        words: torch.Tensor,
        fresh: tuple[DedupLayout, torch.Tensor, torch.Tensor, _Pool] | None,
    ) -> Callable[[], torch.Tensor]:
        """Decide the write of full rows ``words``; return what commits it.

        Nothing is changed here except, when the pool must grow, a new larger pool
        made (and adopted by the commit).
        """
        if fresh is None:
            dl, rows, exception_of, pool = self._dedup, self._rows, self._exception_of, self._pool
            assert (
                dl is not None
                and rows is not None
                and exception_of is not None
                and pool is not None
            )
            length, start = self._len, self._cursor
        else:
            dl, rows, exception_of, pool = fresh
            length, start = 0, 0
        cap, n, device = self.max_size, words.shape[0], self.device
        k = min(n, cap)  # rows kept: the last ``cap`` of a write larger than the ring
        w = words[n - k :]
        first = (start + n - k) % cap
        # The previous newest row may now read its next values from the first row written.
        prev, prev_free = -1, -1
        if dl.deduplicated and length and k < cap:
            prev = (start - 1) % cap
            pe = int(exception_of[prev])
            if (
                pe >= 0
                and prev != cap - 1
                and not dl.row_ends(rows[prev : prev + 1])
                and dl.continues(pool.rows[pe : pe + 1], w[:1])
            ):
                prev_free = pe
        if k == 1:  # one env step: scalars, no masks
            slots = None
            old = int(exception_of[first])
            freed = [old] if old >= 0 else []
            kept = None
            m = int(dl.deduplicated)  # the newest row keeps its own
        else:
            slots = torch.arange(first, first + k, device=device)
            if first + k > cap:
                slots.remainder_(cap)
            # Which written rows keep their own next values: the newest, the ring's last
            # slot (it reads no following row), episode ends, rows whose next values differ.
            keep = torch.ones(k, dtype=torch.bool, device=device)
            if dl.deduplicated:
                keep[:-1] = dl.differs(w)
                ends = dl.ends(w[:-1])
                if ends is not None:
                    keep[:-1] |= ends
                if first + k >= cap:
                    keep[cap - 1 - first] = True
            else:
                keep.zero_()
            old_t = exception_of.index_select(0, slots)
            freed = old_t[old_t >= 0].tolist()
            kept = keep.nonzero().squeeze(1)
            m = int(kept.numel())
        if prev_free >= 0:
            freed.append(prev_free)
        if m > len(pool.free) + len(freed):
            pool = self._grow_pool(pool, m - len(freed))
        segments = [(first, 0, min(k, cap - first))]
        if first + k > cap:
            segments.append((0, cap - first, k - (cap - first)))

        def commit() -> torch.Tensor:
            free = pool.free
            free.extend(freed)
            ids = free[len(free) - m :]
            del free[len(free) - m :]
            if prev_free >= 0:
                exception_of[prev] = -1
            if slots is None:
                exception_of[first] = ids[0] if m else -1
                if m:
                    x = pool.rows[ids[0] : ids[0] + 1]
                    for nr in dl.next_runs:
                        _cols(x, nr.x, nr.size, nr.align).copy_(
                            _cols(w, nr.full, nr.size, nr.align)
                        )
            else:
                exception_of.index_fill_(0, slots, -1)
                if m:
                    assert kept is not None
                    ids_t = torch.tensor(ids, dtype=torch.int64, device=device)
                    pool.rows.index_copy_(0, ids_t, dl.next_values(w.index_select(0, kept)))
                    exception_of.index_copy_(0, slots.index_select(0, kept), ids_t.to(torch.int32))
            for pos, src, count in segments:
                for r in dl.runs:
                    _cols(rows[pos : pos + count], r.stored, r.size, r.align).copy_(
                        _cols(w[src : src + count], r.full, r.size, r.align)
                    )
            old_pool = self._pool
            if pool is not old_pool:
                self._pool, self._exceptions = pool, pool.rows
                if old_pool is not None and old_pool.release is not None:
                    old_pool.release()
            index = torch.arange(start, start + n, device=device)
            if start + n > cap:
                index %= cap
            self._cursor = (start + n) % cap
            self._len = min(cap, length + n)
            self._write_count += n
            self._bump_revision()
            return index

        return commit

    def empty(self) -> None:
        """Forget every row (the allocation and schema are kept)."""
        with self.lock:
            self._cursor = self._len = 0
            if self._exception_of is not None and self._pool is not None:
                self._exception_of.fill_(-1)
                self._pool.free = list(range(self._pool.capacity))
            self._bump_generation()

    # -- state -----------------------------------------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The stored rows (slot order), the exceptions, cursor, fill and write count.

        ``rows`` holds the stored words ``int64 [len, Ws]``; ``next_slots`` the slots
        that keep their own next values (increasing) and ``next_rows`` those values
        (``int64 [E, Xw]``); ``next_keys`` the next keys kept once.
        """
        with self.lock:
            dl = self._dedup
            schema = None if self._layout is None else self._layout.schema
            state: dict[str, Any] = {
                **saved_header(self, self._len, type_name=self.plain_name, schema=schema),
                "dedup_next": True,
                "rows": None,
            }
            if dl is None or self._exception_of is None or self._exceptions is None:
                return state
            ex = self._exception_of[: self._len]
            slots = (ex >= 0).nonzero().squeeze(1)
            state["next_keys"] = [list(k) for k in dl.next_keys]
            state["rows"] = self.stored_rows.clone() if copy else self.stored_rows
            state["next_slots"] = slots.to(torch.int64)
            state["next_rows"] = self._exceptions.index_select(0, ex.index_select(0, slots).long())
            return state

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        """Check ``state`` (saved by a dedup ring, or by a plain one: converted), change nothing."""
        length, cursor, write_count, layout = self._check_header(state)
        if layout is None:

            def restore_empty() -> None:
                self._cursor = self._len = 0
                self._write_count = write_count
                if self._exception_of is not None and self._pool is not None:
                    self._exception_of.fill_(-1)
                    self._pool.free = list(range(self._pool.capacity))
                self._bump_generation()

            return restore_empty
        dl = DedupLayout(layout)
        if state.get("dedup_next"):
            saved = _check_dedup_state(state, layout, length, cursor, self.max_size)
            if saved[0] != dl:  # kept once differently (another version): convert
                words = _expand(saved, length, self.max_size)
                stored, slots, x = _compress_ring(dl, words, length, cursor, self.max_size)
            else:
                _, stored, slots, x = saved
        else:
            words = check_saved_rows(state.get("rows"), length, layout.row_words)
            log.info("converting a ring saved without dedup_next to stored-once rows")
            stored, slots, x = _compress_ring(dl, words, length, cursor, self.max_size)
        e = int(slots.numel())

        def restore() -> None:
            if self._rows is None or self._layout != layout:
                self._adopt(layout, self._fresh(layout))
            dl_now = self._dedup
            rows, exception_of, pool = self._rows, self._exception_of, self._pool
            assert dl_now is not None and rows is not None and exception_of is not None
            assert pool is not None
            if pool.capacity < e:
                pool = self._grow_pool(pool, e)
            rows[:length].copy_(stored)
            exception_of.fill_(-1)
            if e:
                pool.rows[:e].copy_(x)
                exception_of.index_copy_(
                    0, slots.to(self.device), torch.arange(e, dtype=torch.int32, device=self.device)
                )
            pool.free = list(range(pool.capacity - 1, e - 1, -1))
            if pool is not self._pool:
                old = self._pool
                self._pool, self._exceptions = pool, pool.rows
                if old is not None and old.release is not None:
                    old.release()
            self._cursor, self._len, self._write_count = cursor, length, write_count
            self._bump_generation()

        return restore

    def __repr__(self) -> str:
        return (
            f"{self.plain_name}(max_size={self.max_size}, len={self._len}, "
            f"device={self.device}, row_bytes={self.row_bytes}, dedup_next=True, "
            f"exceptions={self.exceptions})"
        )


class DedupTensorStorage(_DedupRing, TensorStorage):
    """``TensorStorage(max_size, dedup_next=True)``: a ring that keeps each next value once."""


class DedupLazyTensorStorage(_DedupRing, LazyTensorStorage):
    """``LazyTensorStorage(max_size, dedup_next=True)``: in memory, each next value kept once.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage
        >>> obs = torch.arange(5, dtype=torch.uint8)[:, None].expand(5, 100).contiguous()
        >>> td = TensorDict({"observation": obs[:4], "next": {"observation": obs[1:]}}, [4])
        >>> ring = LazyTensorStorage(1000, dedup_next=True)
        >>> _ = ring.extend(td)
        >>> ring.row_bytes, ring.exceptions  # 104 bytes kept per row of 200; the newest row keeps its own
        (104, 1)
        >>> torch.equal(ring[:]["next", "observation"], obs[1:])
        True
    """


class DedupLazyMemmapStorage(_DedupRing, LazyMemmapStorage):
    """``LazyMemmapStorage(max_size, dedup_next=True)``: memory-mapped, each next value kept once.

    The exception pool lives in a second file beside the rows (``next-*.bin``), grown
    by doubling; its blocks are reserved like the rows', so a full disk is an
    ``OSError`` from ``extend`` (which then changes nothing).
    """

    _pool_file: str | None = None

    def _allocate_pool(self, rows: int, words: int) -> _Pool:
        if self.__dict__.get("_in_memory"):  # an unpickled copy: its rows are in memory too
            return _DedupRing._allocate_pool(self, rows, words)
        # beside the rows: in scratch_dir, or unlinked once mapped (see LazyMemmapStorage)
        t, _, release = self._map("next-", rows * words * WORD_BYTES)
        return _Pool(t.view(rows, words), list(range(rows)), release)

    def _release_rows(self) -> None:
        # an allocation that was not kept (a refused first write): remove its file
        if self._rows is None and self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
            self.filename = None

    def _close(self) -> bool:
        # the rows and the exception pool (close() and cleanup() both come here)
        with self.lock:
            pool = self._pool
            removed = False
            if pool is not None and pool.release is not None:
                removed = bool(pool.release())
            self._pool = None
            self._exceptions = self._exception_of = None
            self._dedup = None
            return super()._close() or removed

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_in_memory"] = True
        pool = state.get("_pool")
        if pool is not None:  # the copy's pool is in memory; the file stays with us
            state["_pool"] = _Pool(pool.rows.clone(), list(pool.free), None)
            state["_exceptions"] = state["_pool"].rows
        return state


_CLASSES: dict[type, type] = {
    TensorStorage: DedupTensorStorage,
    LazyTensorStorage: DedupLazyTensorStorage,
    LazyMemmapStorage: DedupLazyMemmapStorage,
}


def dedup_class(cls: type) -> type:
    """The class that ``cls(..., dedup_next=True)`` builds."""
    out = _CLASSES.get(cls)
    if out is None:
        base = _DedupRing
        out = type(f"Dedup{cls.__name__}", (base, cls), {"__module__": cls.__module__})
        _CLASSES[cls] = out
    return out


# -- ring states: checks and conversions ------------------------------------------------------


def _ring_order(length: int, cursor: int, cap: int) -> torch.Tensor:
    """The filled slots, oldest first."""
    if length < cap:
        return torch.arange(length)
    return torch.arange(cursor, cursor + cap) % cap


def _check_dedup_state(
    state: dict[str, Any], layout: RowLayout, length: int, cursor: int, cap: int
) -> tuple[DedupLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dedup layout, stored rows, exception slots, exception rows)`` of a saved dedup ring."""
    keys = state.get("next_keys")
    if not isinstance(keys, list) or not all(
        isinstance(k, list) and k and all(isinstance(p, str) for p in k) for k in keys
    ):
        raise CheckpointError(
            f"next_keys must be a list of keys, got {keys!r}; the state is corrupt"
        )
    try:
        dl = DedupLayout(layout, [tuple(k) for k in keys])
    except ValueError as err:
        raise CheckpointError(f"the saved next_keys do not fit the schema: {err}") from None
    rows = check_saved_rows(state.get("rows"), length, dl.stored.row_words)
    slots = state.get("next_slots")
    if not isinstance(slots, torch.Tensor) or slots.dtype != torch.int64 or slots.dim() != 1:
        got = (
            f"{slots.dtype}{list(slots.shape)}"
            if isinstance(slots, torch.Tensor)
            else type(slots).__name__
        )
        raise CheckpointError(f"the saved next_slots must be an int64 [E] tensor, got {got}")
    slots = slots.cpu()
    if slots.numel() and (
        int(slots[0]) < 0 or int(slots[-1]) >= length or bool((slots[1:] <= slots[:-1]).any())
    ):
        raise CheckpointError(
            f"the saved next_slots must increase strictly within [0, {length}); the state is corrupt"
        )
    x = check_saved_rows(state.get("next_rows"), int(slots.numel()), dl.x_words, "next_rows")
    if dl.deduplicated and length:
        need = torch.tensor(sorted({(cursor - 1) % cap} | ({cap - 1} if length == cap else set())))
        missing = need[~torch.isin(need, slots)].tolist()
        if missing:
            raise CheckpointError(
                f"slot {min(missing)} (the newest row or the ring's last slot) has no next values "
                "saved; the state is corrupt"
            )
    return dl, rows, slots, x


def _expand(
    saved: tuple[DedupLayout, torch.Tensor, torch.Tensor, torch.Tensor], length: int, cap: int
) -> torch.Tensor:
    """Full rows ``[len, W]`` of a checked dedup ring state."""
    dl, rows, slots, x = saved
    exception_of = torch.full((length,), -1, dtype=torch.int32)
    exception_of[slots] = torch.arange(slots.numel(), dtype=torch.int32)
    out = torch.empty(length, dl.full.row_words, dtype=torch.int64)
    if length:
        dl.gather_into(rows.cpu(), exception_of, x.cpu(), torch.arange(length), out)
    return out


def _compress_ring(
    dl: DedupLayout, words: torch.Tensor, length: int, cursor: int, cap: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Full rows of a ring (slot order) as ``(stored rows, exception slots, exception rows)``."""
    words = words.cpu()
    if not length:
        return (
            torch.empty(0, dl.stored.row_words, dtype=torch.int64),
            torch.empty(0, dtype=torch.int64),
            torch.empty(0, dl.x_words, dtype=torch.int64),
        )
    order = _ring_order(length, cursor, cap)
    timed = words.index_select(0, order)  # oldest first: each row's next is the one after
    keep = torch.ones(length, dtype=torch.bool)
    if dl.deduplicated:
        keep[:-1] = dl.differs(timed)
        ends = dl.ends(timed)
        if ends is not None:
            keep |= ends
        keep |= order == cap - 1
    else:
        keep.zero_()
    slots = order[keep].sort().values
    return dl.project(words), slots, dl.next_values(words.index_select(0, slots))


def expand_ring_state(state: dict[str, Any]) -> dict[str, Any]:
    """A ring state saved with ``dedup_next=True`` as a plain ring's (full rows).

    Checks the state whole first; raises :class:`~mixreplay.CheckpointError` naming
    what does not fit. The header (capacity, counters) is left for the plain ring to check.
    """
    out = dict(state)
    for key in ("dedup_next", "next_keys", "next_slots", "next_rows"):
        out.pop(key, None)
    if state.get("schema") is None:
        return out
    try:
        layout = RowLayout(Schema.from_json(state["schema"]))
    except Exception as err:  # the plain ring's check says it the usual way
        log.debug("unreadable schema in a dedup state: %s", err)
        return out
    length, cursor, max_size = state.get("len"), state.get("cursor"), state.get("max_size")
    if not (
        isinstance(length, int)
        and isinstance(cursor, int)
        and isinstance(max_size, int)
        and 0 <= length <= max_size
        and 0 <= cursor < max_size
    ):
        return out  # the plain ring's header check names the problem
    saved = _check_dedup_state(state, layout, length, cursor, max_size)
    log.info("converting a ring saved with dedup_next=True to whole rows")
    out["rows"] = _expand(saved, length, max_size)
    return out


# -- read-only rows (offline datasets) -------------------------------------------------------

# The plain rings build these (their dedup_next=True) without importing this module.
plain_ring.DEDUP_HOOKS.variant = dedup_class
plain_ring.DEDUP_HOOKS.expand_state = expand_ring_state
