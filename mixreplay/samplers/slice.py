"""Slice sampling: runs of consecutive steps that stay inside one episode."""

from __future__ import annotations

import torch

from mixreplay.errors import EmptyBufferError
from mixreplay.samplers import Sampler
from mixreplay.schema import format_key, normalize_key

__all__ = ["SliceSampler"]

#: where episode ends are looked for, in order, when neither key is given
_END_KEYS = (("next", "done"), ("done",))


def _key(key, name: str):
    if key is None:
        return None
    if isinstance(key, list):  # a key read back from a JSON config
        key = tuple(key)
    try:
        return normalize_key(key)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a key (a str or a tuple of str), got {key!r}") from err


class SliceSampler(Sampler):
    """Draws ``n // slice_len`` runs of ``slice_len`` consecutive steps, each within one episode.

    A batch of ``n`` rows holds the runs one after the other: rows
    ``[k * slice_len, (k + 1) * slice_len)`` are the steps ``t, t + 1, ...`` of
    one episode, in time order. Every valid start is equally likely (so longer
    episodes supply more slices), drawn with replacement.

    Episode boundaries come from ``episode_key`` (a per-row episode id: a
    boundary wherever it changes) or else from an end flag (``True`` on the
    last step of an episode): ``end_key``, by default ``("next", "done")``
    (TorchRL's layout) or, when absent, ``"done"``. A slice may end on a step
    flagged done but never runs past it.

    In a ring that has wrapped, time runs from the oldest row (at the write
    cursor) to the newest (just before it); a slice never runs across the
    cursor. The oldest, partly overwritten episode is usable from its first
    retained step, and the episode in progress up to its newest step.

    Cost: the sampler keeps, per slot, whether a slice may start there, and an
    ``extend`` of ``k`` rows updates ``O(k + slice_len)`` entries of it. A draw
    proposes starts uniformly over the rows and keeps the valid ones
    (``O(n * slice_len)`` work when most rows can start a slice); when fewer
    than one row in eight can, it draws from the list of valid starts instead,
    rebuilt in ``O(len)`` after each write. Rows written without
    :meth:`on_extend` (a frozen dataset, a storage extended directly) are
    noticed through the storage's ``write_count`` and cost one ``O(len)`` pass.

    Args:
        slice_len: steps per slice, ``>= 1``; the sampling unit of the buffer
            (batch sizes must be multiples of it).

    Keyword Args:
        episode_key: key of an integer episode id per row.
        end_key: key of a boolean end-of-episode flag per row (ignored with
            ``episode_key``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> from mixreplay.samplers import SliceSampler
        >>> done = torch.tensor([0, 0, 1, 0, 0, 0, 1, 0, 0, 1], dtype=torch.bool).unsqueeze(-1)
        >>> rows = TensorDict({"t": torch.arange(10), "next": {"done": done}}, [10])
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=SliceSampler(3), generator=0)
        >>> _ = rb.extend(rows)
        >>> rb.sample(6)["t"].view(2, 3).tolist()
        [[4, 5, 6], [3, 4, 5]]
    """

    def __init__(self, slice_len: int, *, episode_key=None, end_key=None):
        if isinstance(slice_len, bool) or not isinstance(slice_len, int):
            raise TypeError(
                f"slice_len must be an int >= 1, got {type(slice_len).__name__} {slice_len!r}"
            )
        if slice_len < 1:
            raise ValueError(f"slice_len must be an int >= 1, got {slice_len}")
        self.slice_len = slice_len
        self.unit = slice_len
        self.episode_key = _key(episode_key, "episode_key")
        self.end_key = _key(end_key, "end_key")
        self._state: _SliceIndex | None = None

    def config(self) -> dict:
        def show(k):
            return k if k is None or len(k) > 1 else k[0]

        return {
            "slice_len": self.slice_len,
            "episode_key": show(self.episode_key),
            "end_key": show(self.end_key),
        }

    def __getstate__(self) -> dict:
        # the per-slot index is a cache of the storage's content: rebuilt, never pickled
        return {**self.__dict__, "_state": None}

    # -- episode structure -----------------------------------------------------------------

    def _boundaries(self, storage, n: int, oldest: int) -> torch.Tensor:
        """``b[t]`` (``t < n - 1``, time order): steps ``t`` and ``t + 1`` belong to different episodes."""
        if self.episode_key is not None:
            ids = self._ids(storage.column(self.episode_key), n)
            if oldest:
                ids = torch.roll(ids, -oldest, 0)
            return ids[1:] != ids[:-1]
        flags = self._flags(self._end_column(storage), n)
        if oldest:
            flags = torch.roll(flags, -oldest, 0)
        return flags[:-1]

    def _ids(self, column: torch.Tensor, m: int) -> torch.Tensor:
        if column.dtype.is_floating_point or column.dtype == torch.bool or column.dtype.is_complex:
            raise TypeError(
                f"episode_key {format_key(self.episode_key)} must hold integer episode ids, got {column.dtype}"
            )
        ids = column.reshape(m, -1)
        if ids.shape[1] != 1:
            raise TypeError(
                f"episode_key {format_key(self.episode_key)} must hold one id per row, got shape "
                f"{list(column.shape[1:])} per row"
            )
        return ids[:, 0]

    @staticmethod
    def _flags(column: torch.Tensor, m: int) -> torch.Tensor:
        flags = column.reshape(m, -1)
        return (flags if flags.dtype == torch.bool else flags != 0).any(-1)

    def _end_column(self, storage) -> torch.Tensor:
        keys = (self.end_key,) if self.end_key is not None else _END_KEYS
        for key in keys:
            try:
                return storage.column(key)
            except KeyError:
                continue
        raise KeyError(
            f"SliceSampler needs episode boundaries: none of the keys "
            f"[{', '.join(format_key(k) for k in keys)}] is in the storage. Pass end_key= (a done flag per row) "
            "or episode_key= (an episode id per row)"
        )

    def _too_short_message(self, storage) -> str:
        n = len(storage)
        if n > 1:
            b = self._boundaries(storage, n, _oldest(storage, n))
            cuts = torch.cat(
                [
                    torch.tensor([-1], device=b.device),
                    b.nonzero().reshape(-1),
                    torch.tensor([n - 1], device=b.device),
                ]
            )
            longest = int((cuts[1:] - cuts[:-1]).max())
        else:
            longest = n
        return (
            f"cannot draw slices of slice_len={self.slice_len}: no episode among the {n} rows "
            f"is that long (longest: {longest} steps); collect more steps or lower slice_len"
        )

    # -- the per-slot index ----------------------------------------------------------------

    def _index(self, storage) -> _SliceIndex:
        """The index of valid starts, brought up to date with the storage."""
        state = self._state
        if state is None or not state.matches(storage):
            state = self._state = _SliceIndex(self, storage)
        return state

    def on_extend(self, index: torch.Tensor, storage) -> None:
        state = self._state
        if self.slice_len == 1:
            return
        if state is None or not state.extend(torch.as_tensor(index).reshape(-1), storage):
            self._state = None  # rebuilt on the next draw

    def available(self, storage) -> int:
        """How many slices could start in ``storage`` now (0 until an episode is long enough)."""
        n = len(storage)
        if n < self.slice_len:
            return 0
        if self.slice_len == 1:
            return n
        return self._index(storage).count_valid(storage)

    def _valid_start_slots(self, storage) -> torch.Tensor:
        """Every slot a slice may start at, ascending (``O(len)``; for tests and the fallback)."""
        n = len(storage)
        if self.slice_len == 1:
            return torch.arange(n, device=_device(storage))
        if n < self.slice_len:
            return torch.empty(0, dtype=torch.int64, device=_device(storage))
        return self._index(storage).valid_slots(storage)

    # -- sampling --------------------------------------------------------------------------

    def sample(self, storage, n: int, generator: torch.Generator) -> torch.Tensor:
        L = self.slice_len
        if n % L:
            raise ValueError(
                f"SliceSampler draws whole slices: n={n} is not a multiple of slice_len={L}; "
                f"ask for a multiple of {L}, e.g. {n - n % L or L}"
            )
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        k = n // L
        if L == 1:
            return torch.randint(size, (k,), generator=generator, device=generator.device).to(
                _device(storage)
            )
        valid = self.available(storage)
        if valid == 0:
            raise EmptyBufferError(self._too_short_message(storage))
        state = self._state
        assert state is not None  # available() built it
        if 8 * valid >= size:
            starts = state.propose(storage, k, valid, generator)
        else:
            slots = state.valid_slots(storage)
            pick = torch.randint(slots.numel(), (k,), generator=generator, device=generator.device)
            starts = slots[pick.to(slots.device)]
        t = starts.unsqueeze(1) + torch.arange(L, device=starts.device)
        return (t % storage.max_size).reshape(-1)


def _device(storage) -> torch.device:
    return getattr(storage, "device", None) or torch.device("cpu")


def _oldest(storage, n: int) -> int:
    """Slot of the oldest row: the write cursor once the ring is full, slot 0 before."""
    return int(getattr(storage, "cursor", 0)) % n if n == int(storage.max_size) else 0


class _SliceIndex:
    """Per slot of one storage: may a slice of ``L`` rows start here?

    ``cut[s]``: rows ``s`` and ``s + 1`` (mod capacity) are in different episodes.
    ``ok[s]``: rows ``s .. s + L - 1`` are all written and no cut lies among
    ``s .. s + L - 2``. A slot is a valid start when ``ok`` and its slice does
    not run across the write cursor (only possible once the ring is full: the
    ``L - 1`` slots just before the cursor).
    """

    def __init__(self, sampler: SliceSampler, storage):
        self.sampler = sampler
        self.L = sampler.slice_len
        self.cap = cap = int(storage.max_size)
        device = _device(storage)
        n = len(storage)
        self.cut = torch.zeros(cap, dtype=torch.bool, device=device)
        self.ok = torch.zeros(cap, dtype=torch.bool, device=device)
        self.ids = (
            torch.zeros(cap, dtype=torch.int64, device=device)
            if sampler.episode_key is not None
            else None
        )
        self.count = 0  # ok.sum()
        self._slots: torch.Tensor | None = None  # valid starts, cached for the current key
        if n:
            self._write(torch.arange(n, device=device), storage)
            if n == cap:
                self._refresh(0, cap, n)
            else:
                self._refresh(0, n, n)
        self.key = self._key_of(storage)

    @staticmethod
    def _key_of(storage):
        return (
            id(storage),
            getattr(storage, "write_count", None),
            len(storage),
            int(getattr(storage, "cursor", 0)),
        )

    def matches(self, storage) -> bool:
        key = self._key_of(storage)
        return key[1] is not None and key == self.key and self.cap == int(storage.max_size)

    def _write(self, slots: torch.Tensor, storage) -> None:
        """Read the boundary data of rows ``slots`` and update ``cut`` around them."""
        sampler, m = self.sampler, slots.numel()
        if self.ids is not None:
            self.ids[slots] = sampler._ids(
                storage.column(sampler.episode_key).index_select(0, slots), m
            )
            # the cut before each written row changes too
            around = torch.cat([(slots - 1) % self.cap, slots])
            self.cut[around] = self.ids[around] != self.ids[(around + 1) % self.cap]
        else:
            self.cut[slots] = sampler._flags(sampler._end_column(storage).index_select(0, slots), m)

    def _refresh(self, first: int, count: int, n: int) -> None:
        """Recompute ``ok`` for the starts ``first .. first + count - 1`` (mod capacity)."""
        L, cap = self.L, self.cap
        starts = (first + torch.arange(count, device=self.ok.device)) % cap
        span = (first + torch.arange(count + L - 1, device=self.ok.device)) % cap
        c = torch.nn.functional.pad(torch.cumsum(self.cut[span].to(torch.int32), 0), (1, 0))
        ok = (c[L - 1 : L - 1 + count] - c[:count]) == 0  # no cut among s .. s + L - 2
        if n < cap:  # before the ring is full, the slice must end at a written row
            ok &= starts + (L - 1) < n
        self.count += int(ok.sum()) - int(self.ok[starts].sum())
        self.ok[starts] = ok

    def extend(self, index: torch.Tensor, storage) -> bool:
        """Account for ``index`` just written; ``False`` when a full rebuild is needed."""
        k, cap = index.numel(), self.cap
        written, n, cursor = self.key[1], self.key[2], self.key[3]
        if (
            written is None
            or self.key[0] != id(storage)
            or getattr(storage, "write_count", None) != written + k
            or len(storage) != min(cap, n + k)
            or int(getattr(storage, "cursor", 0)) != (cursor + k) % cap
            or k + 2 * self.L > cap
        ):
            return False
        n = len(storage)
        slots = (cursor + torch.arange(k, device=self.ok.device)) % cap
        self._write(slots, storage)
        # starts whose slice touches a written row (or, with ids, the cut just before it)
        self._refresh((cursor - self.L + 1) % cap, k + self.L - 1, n)
        self.key = self._key_of(storage)
        self._slots = None
        return True

    def _across_cursor(self, storage, n: int) -> torch.Tensor | None:
        """The ``L - 1`` slots whose slice would run from the newest row into the oldest."""
        if n < self.cap:
            return None
        cursor = int(getattr(storage, "cursor", 0))
        return (cursor - self.L + 1 + torch.arange(self.L - 1, device=self.ok.device)) % self.cap

    def count_valid(self, storage) -> int:
        across = self._across_cursor(storage, len(storage))
        return self.count - (0 if across is None else int(self.ok[across].sum()))

    def valid_slots(self, storage) -> torch.Tensor:
        if self._slots is None:
            ok = self.ok
            across = self._across_cursor(storage, len(storage))
            if across is not None:
                ok = ok.clone()
                ok[across] = False
            self._slots = ok.nonzero().reshape(-1)
        return self._slots

    def propose(self, storage, k: int, valid: int, generator: torch.Generator) -> torch.Tensor:
        """``k`` uniform valid starts by rejection: propose slots uniformly, keep the valid ones."""
        n, L = len(storage), self.L
        device = self.ok.device
        cursor = int(getattr(storage, "cursor", 0))
        full = n == self.cap
        m = -(-k * n * 5 // (4 * valid)) + 8  # expected 1.25 * k valid proposals
        kept: list[torch.Tensor] = []
        have = 0
        while have < k:
            c = torch.randint(n, (m,), generator=generator, device=generator.device).to(device)
            good = self.ok[c]
            if full:  # not across the cursor: logical position (c - cursor) mod n <= n - L
                good &= (c - cursor) % n <= n - L
            c = c[good]
            kept.append(c)
            have += c.numel()
        return torch.cat(kept)[:k] if len(kept) > 1 else kept[0][:k]
