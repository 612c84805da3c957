"""How rows are stored once: the byte runs of a dedup row, and the encoder of read-only rows.

A :class:`DedupLayout` derives, from the full :class:`~mixreplay.layout.RowLayout`
of the rows as written, the layout of a *stored* row (the schema without the next
keys kept once) and the contiguous byte runs that map one onto the other. All of
it works on packed words: comparisons are bytewise, gathers are ``index_select``
over column ranges, whatever the dtypes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from mixreplay.layout import WORD_BYTES, RowLayout
from mixreplay.schema import NestedKey, Schema, format_key, normalize_key

__all__ = [
    "END_KEYS",
    "FLAG_NAMES",
    "DedupEncoder",
    "DedupLayout",
    "DedupRows",
    "dedup_keys",
    "dedup_rows",
]

#: TED's episode flags: never deduplicated (they mark where episodes end, samplers
#: read them as columns, and they are a byte each).
FLAG_NAMES = ("done", "terminated", "truncated")
#: The flags of a row that end its episode.
END_KEYS: tuple[tuple[str, ...], ...] = tuple(("next", name) for name in FLAG_NAMES)

_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def _align(*offsets: int) -> int:
    """The widest item size (8, 4, 2 or 1 bytes) that divides every offset."""
    a = WORD_BYTES
    while any(o % a for o in offsets):
        a //= 2
    return a


def _cols(words: torch.Tensor, offset: int, size: int, align: int) -> torch.Tensor:
    """Bytes ``[offset, offset + size)`` of each row of int64 ``words``, as ``align``-byte items."""
    return words.view(_VIEW[align])[:, offset // align : (offset + size) // align]


@dataclass(frozen=True)
class _Run:
    """Contiguous bytes of a row kept in the stored row."""

    stored: int  # byte offset in a stored row
    full: int  # byte offset in a full row
    size: int
    align: int


@dataclass(frozen=True)
class _NextRun:
    """Contiguous deduplicated next values: where they go, and where their root values are."""

    stored: int  # the root values' byte offset in a stored row
    full: int  # the next values' byte offset in a full row
    root: int  # the root values' byte offset in a full row
    x: int  # byte offset in an exception row
    size: int
    align: int


def dedup_keys(schema: Schema) -> tuple[tuple[str, ...], ...]:
    """The next keys a dedup storage keeps once, in schema order.

    ``("next", *k)`` for every root key ``k`` of the same per-row shape and dtype,
    except TED's episode flags (``done``, ``terminated``, ``truncated``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.schema import Schema
        >>> from mixreplay.storages.dedup import dedup_keys
        >>> td = TensorDict({"pixels": torch.zeros(2, 4, dtype=torch.uint8), "done": torch.zeros(2, 1, dtype=torch.bool),
        ...                  "next": {"pixels": torch.zeros(2, 4, dtype=torch.uint8), "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2])
        >>> dedup_keys(Schema.from_tensordict(td))
        (('next', 'pixels'),)
    """
    out = []
    for f in schema.fields:
        if len(f.key) < 2 or f.key[0] != "next" or f.key[1:] in [(n,) for n in FLAG_NAMES]:
            continue
        root = f.key[1:]
        if root in schema and schema[root].shape == f.shape and schema[root].dtype == f.dtype:
            out.append(f.key)
    return tuple(out)


class DedupLayout:
    """How full rows (a :class:`RowLayout`) are stored without their duplicated next values.

    Args:
        full: the layout of the rows as written and read.
        next_keys: the next keys kept once (by default :func:`dedup_keys`); each must
            have a root key of the same shape and dtype.

    Attributes:
        stored: the layout of a stored row (the schema without ``next_keys``).
        x_words: words of one exception row (the next values of ``next_keys``).
    """

    def __init__(self, full: RowLayout, next_keys: Iterable[NestedKey] | None = None):
        schema = full.schema
        if next_keys is None:
            keys = set(dedup_keys(schema))
        else:
            keys = set()
            for key in next_keys:
                k = normalize_key(key)
                root = k[1:]
                if (
                    len(k) < 2
                    or k[0] != "next"
                    or k not in schema
                    or root not in schema
                    or schema[root].shape != schema[k].shape
                    or schema[root].dtype != schema[k].dtype
                ):
                    raise ValueError(
                        f"{format_key(k)} cannot be kept once: it needs to be a key under "
                        "'next' whose root key has the same per-row shape and dtype "
                        f"(rows: {schema})"
                    )
                keys.add(k)
        self.full = full
        self.next_keys: tuple[tuple[str, ...], ...] = tuple(
            f.key for f in schema.fields if f.key in keys
        )
        self.stored = RowLayout(schema.without(keys))
        full_at = {f.key: off for f, off in zip(full.fields, full.offsets)}
        stored_at = {f.key: off for f, off in zip(self.stored.fields, self.stored.offsets)}
        runs: list[list[int]] = []  # [stored, full, size]
        nexts: list[list[int]] = []  # [stored, full, root, x, size]
        x = 0
        for f in full.fields:  # packing order: the stored row keeps it
            if f.key in keys:
                root = f.key[1:]
                s, fo, ro = stored_at[root], full_at[f.key], full_at[root]
                last = nexts[-1] if nexts else None
                if last and (s, fo, ro) == (
                    last[0] + last[4],
                    last[1] + last[4],
                    last[2] + last[4],
                ):
                    last[4] += f.nbytes
                else:
                    nexts.append([s, fo, ro, x, f.nbytes])
                x += f.nbytes
            else:
                s, fo = stored_at[f.key], full_at[f.key]
                if runs and (s, fo) == (runs[-1][0] + runs[-1][2], runs[-1][1] + runs[-1][2]):
                    runs[-1][2] += f.nbytes
                else:
                    runs.append([s, fo, f.nbytes])
        self.runs = tuple(_Run(s, fo, n, _align(s, fo, n)) for s, fo, n in runs)
        self.next_runs = tuple(
            _NextRun(s, fo, ro, xo, n, _align(s, fo, ro, xo, n)) for s, fo, ro, xo, n in nexts
        )
        self.x_bytes = x
        self.x_words = max(1, -(-x // WORD_BYTES))
        # the full row's padding, zeroed in gathered rows (rows are compared as words)
        self.pad = (full.data_bytes, full.row_bytes - full.data_bytes)
        ends: list[list[int]] = []  # [full, stored, size]: the next flags, merged when adjacent
        for f in full.fields:
            if f.key in END_KEYS and f.key not in keys:
                fo, so = full_at[f.key], stored_at[f.key]
                if ends and (fo, so) == (ends[-1][0] + ends[-1][2], ends[-1][1] + ends[-1][2]):
                    ends[-1][2] += f.nbytes
                else:
                    ends.append([fo, so, f.nbytes])
        self._ends = tuple((fo, so, size) for fo, so, size in ends)

    @property
    def deduplicated(self) -> bool:
        """Whether any next value is kept once (``False``: rows are stored whole)."""
        return bool(self.next_runs)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DedupLayout)
            and self.full == other.full
            and self.next_keys == other.next_keys
        )

    def __hash__(self) -> int:
        return hash((self.full, self.next_keys))

    def __reduce__(self) -> tuple[Any, ...]:
        return (DedupLayout, (self.full, self.next_keys))

    def __repr__(self) -> str:
        keys = ", ".join(format_key(k) for k in self.next_keys) or "none"
        return (
            f"DedupLayout(next kept once: {keys}; {self.stored.row_bytes} bytes stored of "
            f"{self.full.row_bytes}, {self.x_words * WORD_BYTES} per exception)"
        )

    # -- rows as written (full words) ------------------------------------------------------

    def project(self, words: torch.Tensor) -> torch.Tensor:
        """Full rows ``[k, W]`` as new stored rows ``[k, Ws]`` (padding zeroed)."""
        out = torch.zeros(
            words.shape[0], self.stored.row_words, dtype=torch.int64, device=words.device
        )
        for r in self.runs:
            _cols(out, r.stored, r.size, r.align).copy_(_cols(words, r.full, r.size, r.align))
        return out

    def next_values(self, words: torch.Tensor) -> torch.Tensor:
        """The deduplicated next values of full rows ``[k, W]``, as exception rows ``[k, Xw]``."""
        out = torch.zeros(words.shape[0], self.x_words, dtype=torch.int64, device=words.device)
        for r in self.next_runs:
            _cols(out, r.x, r.size, r.align).copy_(_cols(words, r.full, r.size, r.align))
        return out

    def ends(self, words: torch.Tensor, *, stored: bool = False) -> torch.Tensor | None:
        """Per row, whether an episode flag under ``"next"`` is set (``None``: no flags).

        Args:
            words: full rows ``[k, W]``, or stored rows ``[k, Ws]`` with ``stored=True``.
        """
        out = None
        u8 = words.view(torch.uint8)
        for full_at, stored_at, size in self._ends:
            at = stored_at if stored else full_at
            hit = u8[:, at : at + size].ne(0).any(1)
            out = hit if out is None else out | hit
        return out

    def row_ends(self, row: torch.Tensor) -> bool:
        """Whether the stored row ``row [1, Ws]`` ends an episode (an episode flag is set)."""
        u8 = row.view(torch.uint8)
        return any(bool(u8[0, at : at + size].any()) for _, at, size in self._ends)

    def continues(self, x: torch.Tensor, words: torch.Tensor) -> bool:
        """Whether the exception row ``x [1, Xw]`` holds, byte for byte, the root values of
        the full row ``words [1, W]`` (so it need not be kept)."""
        return all(
            torch.equal(_cols(x, r.x, r.size, r.align), _cols(words, r.root, r.size, r.align))
            for r in self.next_runs
        )

    def differs(self, words: torch.Tensor) -> torch.Tensor:
        """Per row but the last of full rows ``[k, W]``: whether its next values differ
        (in any byte) from the following row's root values."""
        out = torch.zeros(max(0, words.shape[0] - 1), dtype=torch.bool, device=words.device)
        if words.shape[0] < 2:
            return out
        for r in self.next_runs:
            mine = _cols(words[:-1], r.full, r.size, r.align)
            theirs = _cols(words[1:], r.root, r.size, r.align)
            out |= mine.ne(theirs).any(1)
        return out

    # -- reading -------------------------------------------------------------------------

    def gather_into(
        self,
        rows: torch.Tensor,
        exception_of: torch.Tensor,
        exceptions: torch.Tensor,
        index: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        """Full rows ``index`` into ``out`` (``[len(index), W]``, on the rows' device).

        Args:
            rows: stored rows ``[n, Ws]``; the last one keeps its own next values.
            exception_of: ``int32 [n]``, each row's exception row or -1.
            exceptions: exception rows ``[P, Xw]``.
            index: int64 row indices on the rows' device.
            out: where the full rows go.
        """
        select = _select_into if out.device.type == "cpu" else _select_copy
        for r in self.runs:
            select(
                _cols(rows, r.stored, r.size, r.align), index, _cols(out, r.full, r.size, r.align)
            )
        if self.pad[1]:
            out.view(torch.uint8)[:, self.pad[0] :].zero_()
        if not self.next_runs:
            return
        # The following row; the last row is always an exception, so clamping is safe.
        following = (index + 1).clamp_(max=rows.shape[0] - 1)
        for nr in self.next_runs:
            select(
                _cols(rows, nr.stored, nr.size, nr.align),
                following,
                _cols(out, nr.full, nr.size, nr.align),
            )
        ex = exception_of.index_select(0, index)
        hit = (ex >= 0).nonzero().squeeze(1)
        if hit.numel():
            # Row by row: a few rows per batch in TED data (one per episode end), and
            # index_copy_/index_put_ into a strided view cost far more than these copies.
            rows_at = hit.tolist()
            from_at = ex.index_select(0, hit).tolist()
            for nr in self.next_runs:
                dst = _cols(out, nr.full, nr.size, nr.align)
                src = _cols(exceptions, nr.x, nr.size, nr.align)
                for i, e in zip(rows_at, from_at):
                    dst[i].copy_(src[e])


def _select_into(src: torch.Tensor, index: torch.Tensor, dst: torch.Tensor) -> None:
    # CPU index_select writes a strided destination in place: one pass over the bytes
    torch.index_select(src, 0, index, out=dst)


def _select_copy(src: torch.Tensor, index: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(torch.index_select(src, 0, index))


class DedupRows(NamedTuple):
    """What a read-only dedup storage is made of (and what a dataset writes).

    Attributes:
        layout: the full layout (the rows as written and read).
        next_keys: the next keys kept once.
        rows: stored rows ``int64 [n, Ws]``.
        next_slots: the rows that keep their own next values, increasing, ``int64 [E]``.
        next_rows: those values, ``int64 [E, Xw]``.
    """

    layout: RowLayout
    next_keys: tuple[tuple[str, ...], ...]
    rows: torch.Tensor
    next_slots: torch.Tensor
    next_rows: torch.Tensor


class DedupEncoder:
    """Turns full rows, chunk by chunk, into stored rows and exceptions (bounded memory).

    A row's exception is decided when the following row is seen, so :meth:`push`
    returns the stored rows of its chunk at once and the exceptions known so far;
    :meth:`finish` returns the last row's.

    Args:
        layout: the full layout of the rows.

    Keyword Args:
        episode_starts: the first row of each episode (indices over all chunks); the
            row before each start ends an episode and keeps its own next values.
        next_keys: the next keys kept once (default :func:`dedup_keys`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.layout import RowLayout
        >>> from mixreplay.schema import Schema
        >>> from mixreplay.storages.dedup import DedupEncoder
        >>> obs = torch.arange(7.0)[:, None]
        >>> td = TensorDict({"obs": obs[:6], "next": {"obs": obs[1:]}}, [6])
        >>> enc = DedupEncoder(RowLayout(Schema.from_tensordict(td)), episode_starts=[0, 3])
        >>> rows, slots, x = enc.push(enc.layout.full.pack(td))
        >>> rows.shape, slots.tolist()  # row 2 ends an episode
        (torch.Size([6, 1]), [2])
        >>> enc.finish()[0].tolist()  # the last row keeps its own
        [5]
    """

    def __init__(
        self,
        layout: RowLayout,
        *,
        episode_starts: Iterable[int] | torch.Tensor | None = None,
        next_keys: Iterable[NestedKey] | None = None,
    ):
        self.layout = DedupLayout(layout, next_keys)
        starts = (
            torch.zeros(0, dtype=torch.int64)
            if episode_starts is None
            else torch.as_tensor(episode_starts, dtype=torch.int64).reshape(-1)
        )
        self._starts = starts.sort().values
        self._offset = 0  # rows pushed so far
        self._last: torch.Tensor | None = None  # the last full row pushed, [1, W]

    @property
    def rows(self) -> int:
        """Rows pushed so far."""
        return self._offset

    def push(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Full rows ``[k, W]`` (the next ``k`` rows) → ``(stored rows [k, Ws], exception
        slots [e], exception rows [e, Xw])``; the exceptions cover the rows before this
        chunk's last."""
        dl = self.layout
        k = words.shape[0]
        if k == 0:
            return (
                torch.empty(0, dl.stored.row_words, dtype=torch.int64),
                torch.empty(0, dtype=torch.int64),
                torch.empty(0, dl.x_words, dtype=torch.int64),
            )
        words = words.cpu()
        o = self._offset
        joined = words if self._last is None else torch.cat([self._last, words])
        base = o if self._last is None else o - 1  # row index of joined[0]
        m = joined.shape[0] - 1  # rows decided now: all but the last
        keep = torch.zeros(m, dtype=torch.bool)
        if dl.deduplicated:
            keep = dl.differs(joined)
            ends = dl.ends(joined[:m])
            if ends is not None:
                keep |= ends
            s = self._starts
            s = s[(s > base) & (s <= base + m)] - 1 - base
            keep[s] = True
        slots = keep.nonzero().squeeze(1)
        x = dl.next_values(joined.index_select(0, slots))
        self._last = words[-1:].clone()
        self._offset = o + k
        return dl.project(words), slots + base, x

    def finish(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last row's exception: ``(slots [1], rows [1, Xw])`` (empty if no rows)."""
        dl = self.layout
        if self._last is None:
            return torch.empty(0, dtype=torch.int64), torch.empty(0, dl.x_words, dtype=torch.int64)
        if not dl.deduplicated:
            return torch.empty(0, dtype=torch.int64), torch.empty(0, dl.x_words, dtype=torch.int64)
        return torch.tensor([self._offset - 1]), dl.next_values(self._last)


def dedup_rows(
    td: TensorDictBase,
    episode_starts: Iterable[int] | torch.Tensor | None = None,
    *,
    next_keys: Iterable[NestedKey] | None = None,
) -> DedupRows:
    """What an immutable dedup storage of the ``[n]`` rows ``td`` holds.

    Args:
        td: the rows.
        episode_starts: the first row of each episode (the row before each keeps its
            own next values; so do rows whose next flags are set).

    Keyword Args:
        next_keys: the next keys kept once (default :func:`dedup_keys`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.storages.dedup import DedupFrozenStorage, dedup_rows
        >>> obs = torch.arange(5, dtype=torch.uint8)[:, None].expand(5, 64).contiguous()
        >>> parts = dedup_rows(TensorDict({"obs": obs[:4], "next": {"obs": obs[1:]}}, [4]))
        >>> parts.rows.shape, parts.next_slots.tolist()
        (torch.Size([4, 8]), [3])
        >>> torch.equal(DedupFrozenStorage(*parts)[:]["next", "obs"], obs[1:])
        True
    """
    if not isinstance(td, TensorDictBase) or td.batch_dims != 1:
        got = (
            f"batch_size={list(td.batch_size)}"
            if isinstance(td, TensorDictBase)
            else type(td).__name__
        )
        raise TypeError(f"dedup_rows expects a [n] TensorDict of rows, got {got}")
    layout = RowLayout(Schema.from_tensordict(td))
    enc = DedupEncoder(layout, episode_starts=episode_starts, next_keys=next_keys)
    rows, slots, x = enc.push(layout.pack(td, device=torch.device("cpu")))
    last_slot, last_x = enc.finish()
    return DedupRows(
        layout, enc.layout.next_keys, rows, torch.cat([slots, last_slot]), torch.cat([x, last_x])
    )
