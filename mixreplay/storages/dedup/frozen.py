"""Reading full rows back from stored rows and exceptions; read-only dedup rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import EmptyBufferError
from mixreplay.layout import WORD_BYTES, RowLayout
from mixreplay.schema import NestedKey, format_key, normalize_key
from mixreplay.storages.base import PackedStorage, move, staging, to_device
from mixreplay.storages.dedup.layout import DedupLayout, DedupRows, dedup_rows
from mixreplay.storages.frozen import FrozenStorage

__all__ = ["DedupFrozenStorage", "DedupReads"]


class DedupReads(PackedStorage):
    """Full rows read from stored rows and exceptions: what both dedup storages share."""

    _dedup: DedupLayout | None = None
    _exception_of: torch.Tensor | None = None
    _exceptions: torch.Tensor | None = None

    @property
    def row_bytes(self) -> int:
        """Bytes per stored row, without the next values kept once (0 before the first write)."""
        return 0 if self._dedup is None else self._dedup.stored.row_bytes

    @property
    def dedup_layout(self) -> DedupLayout | None:
        """How rows are stored (``None`` before the first write)."""
        return self._dedup

    def _gather_full(self, index: torch.Tensor, out: torch.Tensor) -> None:
        rows, dl = self._rows, self._dedup
        if rows is None or dl is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        assert self._exception_of is not None and self._exceptions is not None
        if index.device != rows.device:
            index = to_device(index, rows.device)
        if out.device == rows.device:
            dl.gather_into(rows, self._exception_of, self._exceptions, index, out)
        else:
            tmp = staging(out.shape, rows.device, out.device)
            dl.gather_into(rows, self._exception_of, self._exceptions, index, tmp)
            move(tmp, out)

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """Full packed rows ``index`` as a new ``[len(index), W]`` tensor (caller holds the lock)."""
        if self._layout is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        out = torch.empty(
            index.numel(), self._layout.row_words, dtype=torch.int64, device=self.device
        )
        self._gather_full(index, out)
        return out

    def gather_into(self, index: torch.Tensor, out: torch.Tensor) -> None:
        """Copy full rows ``index`` into packed ``out`` (``[len(index), W]``; caller holds the lock)."""
        self._gather_full(index, out)

    def gather_unlocked(self, index: torch.Tensor) -> TensorDict:
        layout = self._layout
        if layout is None:
            raise EmptyBufferError("cannot read rows from a storage that holds none")
        return layout.copy_out(self.take(index), self.device)

    @property
    def rows(self) -> torch.Tensor:
        """The full packed rows, ``[len, W]``, in slot order: a new tensor (the next values
        are assembled), not a view."""
        layout = self._layout
        if layout is None:
            return torch.empty(0, 0, dtype=torch.int64, device=self.device)
        with self.lock:
            return self.take(torch.arange(len(self), device=self.device))

    @property
    def stored_rows(self) -> torch.Tensor:
        """The stored words of the filled rows, ``[len, Ws]`` (a view, without the next values
        kept once)."""
        if self._rows is None:
            return torch.empty(0, 0, dtype=torch.int64, device=self.device)
        return self._rows[: len(self)]

    def column(self, key: NestedKey) -> torch.Tensor:
        """One key over the filled rows, ``[len, *shape]``, in slot order.

        A typed view of the stored rows (treat it as read-only), except for a next key
        kept once: its values are assembled into a new tensor.
        """
        k = normalize_key(key)
        dl = self._dedup
        if dl is not None and k not in dl.next_keys:
            for i, f in enumerate(dl.stored.fields):
                if f.key == k:
                    return dl.stored.split(self.stored_rows)[i]
        if dl is not None and k in dl.next_keys:
            with self.lock:
                return self.gather_unlocked(torch.arange(len(self), device=self.device)).get(k)
        schema = None if self._layout is None else self._layout.schema
        known = "" if schema is None else ", ".join(format_key(f.key) for f in schema.fields)
        raise KeyError(f"key {format_key(k)} not found in storage with keys [{known}]")

    def to_tensordict(self) -> TensorDict:
        """A copy of the filled rows as a plain ``[len]`` TensorDict (slot order)."""
        if self._layout is None:
            return TensorDict({}, batch_size=[0])
        return self._layout.copy_out(self.rows, self.device)

    def _rows_fingerprint(self) -> str:
        """The fingerprint of the full rows (as a plain storage of the same rows has it)."""
        import hashlib

        layout = self._layout
        h = hashlib.blake2b(digest_size=16)
        if layout is None:
            return h.hexdigest()
        step = max(1, (1 << 26) // layout.row_bytes)  # ~64 MiB of full rows at a time
        n = len(self)
        with self.lock:
            for i in range(0, n, step):
                chunk = self.take(torch.arange(i, min(n, i + step), device=self.device))
                h.update(chunk.cpu().numpy().tobytes())
        return h.hexdigest()


# -- the ring --------------------------------------------------------------------------------


class DedupFrozenStorage(DedupReads, FrozenStorage):
    """Read-only rows stored with each next value once (an offline dataset).

    Args:
        layout: the full layout (rows as read).
        next_keys: the next keys kept once.
        rows: stored rows ``int64 [n, Ws]`` (in memory or memory-mapped).
        next_slots: rows that keep their own next values, increasing, ``int64 [E]``;
            the last row must be one of them.
        next_rows: their next values, ``int64 [E, Xw]``.

    Keyword Args:
        fingerprint: the hash of the *full* rows, if known (the same as a plain
            :class:`FrozenStorage` of the same rows has); computed on first use otherwise.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.storages.dedup import DedupFrozenStorage
        >>> obs = torch.arange(4.0)[:, None]
        >>> td = TensorDict({"obs": obs[:3], "next": {"obs": obs[1:]}}, [3])
        >>> frozen = DedupFrozenStorage.from_tensordict(td)
        >>> frozen[:]["next", "obs"].squeeze(-1).tolist(), frozen.exceptions
        ([1.0, 2.0, 3.0], 1)
    """

    def __init__(
        self,
        layout: RowLayout,
        next_keys: Sequence[NestedKey],
        rows: torch.Tensor,
        next_slots: torch.Tensor,
        next_rows: torch.Tensor,
        *,
        fingerprint: str | None = None,
    ):
        dl = DedupLayout(layout, next_keys)
        n = int(rows.shape[0]) if rows.dim() == 2 else -1
        if rows.dtype != torch.int64 or rows.dim() != 2 or rows.shape[1] != dl.stored.row_words:
            raise ValueError(
                f"stored rows must be int64 [n, {dl.stored.row_words}], got {rows.dtype} "
                f"{list(rows.shape)}"
            )
        if next_slots.dtype != torch.int64 or next_slots.dim() != 1:
            raise ValueError(
                f"next_slots must be int64 [E], got {next_slots.dtype} {list(next_slots.shape)}"
            )
        e = int(next_slots.numel())
        if next_rows.dtype != torch.int64 or tuple(next_rows.shape) != (e, dl.x_words):
            raise ValueError(
                f"next_rows must be int64 [{e}, {dl.x_words}], got {next_rows.dtype} "
                f"{list(next_rows.shape)}"
            )
        slots = next_slots.to(rows.device)
        if e and (
            int(slots[0]) < 0 or int(slots[-1]) >= n or bool((slots[1:] <= slots[:-1]).any())
        ):
            raise ValueError(f"next_slots must increase strictly within [0, {n})")
        if dl.deduplicated and n and (not e or int(slots[-1]) != n - 1):
            raise ValueError(
                f"the last row ({n - 1}) must keep its own next values: it has no following row"
            )
        PackedStorage.__init__(self)  # FrozenStorage's checks are for whole rows
        self.device = rows.device
        self.max_size = n
        self._layout = layout
        self._rows = rows
        self._dedup = dl
        self._exceptions = next_rows.to(rows.device)
        self._next_slots = slots
        exception_of = torch.full((n,), -1, dtype=torch.int32, device=rows.device)
        if e:
            exception_of[slots] = torch.arange(e, dtype=torch.int32, device=rows.device)
        self._exception_of = exception_of
        if fingerprint is not None:
            self._fingerprint = (self.content_key(), fingerprint)

    @classmethod
    def from_tensordict(
        cls,
        td: TensorDictBase,
        episode_starts: Iterable[int] | torch.Tensor | None = None,
        *,
        next_keys: Iterable[NestedKey] | None = None,
    ) -> DedupFrozenStorage:
        """Pack a ``[n]`` TensorDict into new read-only rows, each next value kept once."""
        return cls(*dedup_rows(td, episode_starts, next_keys=next_keys))

    @property
    def exceptions(self) -> int:
        """Rows that keep their own next values."""
        return int(self._next_slots.numel())

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows and the exceptions (the in-memory index not counted)."""
        dl = self._dedup
        assert dl is not None
        return len(self) * dl.stored.row_bytes + self.exceptions * dl.x_words * WORD_BYTES

    def parts(self) -> DedupRows:
        """What this storage is made of (what a dataset writes)."""
        dl = self._dedup
        assert dl is not None and self._rows is not None and self._exceptions is not None
        return DedupRows(dl.full, dl.next_keys, self._rows, self._next_slots, self._exceptions)

    def __repr__(self) -> str:
        return (
            f"DedupFrozenStorage(len={len(self)}, row_bytes={self.row_bytes}, "
            f"exceptions={self.exceptions}, device={self.device})"
        )
