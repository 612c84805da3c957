"""Slice sampling: runs of consecutive steps that stay inside one episode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mixreplay._validate import check_int
from mixreplay.errors import EmptyBufferError
from mixreplay.samplers._torchrl import Table, check_torchrl_kwargs
from mixreplay.samplers.base import Sampler
from mixreplay.schema import format_key, normalize_key
from mixreplay.storages.base import Storage

__all__ = ["SliceSampler"]

Key = tuple[str, ...]  # a normalized nested key

#: where episode ends are looked for, in order, when neither key is given
_END_KEYS: tuple[Key, ...] = (("next", "done"), ("done",))

#: TorchRL 0.14 SliceSampler arguments mixreplay does not implement
_TORCHRL: Table = {
    "replacement": (
        (True,),
        "slices are drawn with replacement; for one pass over the rows use "
        "SamplerWithoutReplacement (rows, not slices)",
    ),
    "step_key": (
        ("step_count", None),
        "it is read only with fragmented=True, which mixreplay does not support",
    ),
    "fragmented": (
        (False,),
        "slices run over consecutive slots: extend each env's steps consecutively "
        "(rb.extend(data.reshape(-1)) of a [N, T] batch goes env by env)",
    ),
    "ends": ((None,), "boundaries are read from the rows (end_key= or episode_key=)"),
    "trajectories": ((None,), "boundaries are read from the rows (episode_key= or end_key=)"),
    "cache_values": (
        (False, True),
        "boundaries are always cached and rebuilt when the storage changes",
    ),
    "truncated_key": (
        (None,),
        "the sampler returns slots and writes nothing into the batch; the last step of "
        "slice k is row (k + 1) * slice_len - 1 of the batch",
    ),
    "init_key": (
        (None,),
        "the sampler returns slots and writes nothing into the batch; the first step of "
        "slice k is row k * slice_len of the batch",
    ),
    "strict_length": ((True,), "every slice is whole: episodes shorter than a slice are skipped"),
    "pad_output": ((False,), "every slice is whole, so there is nothing to pad"),
    "compile": ((False, True), "there is nothing to compile"),
    "span": ((False, 0), "slices never run past an episode's first or last step"),
    "use_gpu": ((False,), "the index lives on the storage's device"),
}


def _key(key: Any, name: str) -> Key | None:
    if key is None:
        return None
    if isinstance(key, list):  # a key read back from a JSON config
        key = tuple(key)
    try:
        return normalize_key(key)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a key (a str or a tuple of str), got {key!r}") from err


def _show(key: Key | None) -> Any:
    return key if key is None or len(key) > 1 else key[0]


class SliceSampler(Sampler):
    """Draws runs of consecutive steps, each within one episode.

    With ``slice_len=L`` a batch of ``n`` rows holds ``n // L`` slices of ``L``
    steps; with ``num_slices=S`` (TorchRL's alternative) it holds ``S`` slices of
    ``n // S`` steps. The slices lie one after the other: rows
    ``[k * L, (k + 1) * L)`` are the steps ``t, t + 1, ...`` of one episode, in
    time order. Every valid start is equally likely (so longer episodes supply
    more slices), drawn with replacement.

    Episode boundaries come from ``episode_key`` (a per-row episode id: a
    boundary wherever it changes; TorchRL calls it ``traj_key``) or else from an
    end flag (``True`` on the last step of an episode): ``end_key``, by default
    ``("next", "done")`` (TorchRL's layout) or, when absent, ``"done"``; or
    ``end_keys``, several flags OR-ed together (those absent are skipped). A
    slice may end on a step flagged done but never runs past it.

    In a ring that has wrapped, time runs from the oldest row (at the write
    cursor) to the newest (just before it); a slice never runs across the
    cursor. The oldest, partly overwritten episode is usable from its first
    retained step, and the episode in progress up to its newest step.

    Cost: the sampler keeps, per slot, whether a slice may start there. It
    notices writes through the storage's ``write_count`` (and restores through
    its ``generation``), so ``extend`` costs nothing extra: the next draw
    updates ``O(k + L)`` entries for ``k`` rows written since (a restore or a
    write of most of the ring: one ``O(len)`` rebuild). A draw proposes starts
    uniformly over the rows and keeps the valid ones; when fewer than one row in
    eight can start a slice, it draws from the list of valid starts instead.

    Args:
        slice_len: steps per slice, ``>= 1``: the sampling unit of the buffer
            (batch sizes must be multiples of it).

    Keyword Args:
        num_slices: slices per draw instead of ``slice_len`` (exclusive with it).
        episode_key: key of an integer episode id per row (alias: ``traj_key``).
        end_key: key of a boolean end-of-episode flag per row (ignored with
            ``episode_key``); exclusive with ``end_keys``.
        end_keys: several end-flag keys, OR-ed together.

    TorchRL's other arguments are accepted with the values that mean what
    mixreplay does (``strict_length=True``, ``cache_values``, ``compile``, ...)
    and refused with a ``TypeError`` naming the mixreplay way otherwise.

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
        >>> SliceSampler(slice_len=3, traj_key="episode")  # TorchRL's spelling
        SliceSampler(slice_len=3, episode_key='episode', end_key=None)
    """

    def __init__(
        self,
        slice_len: int | None = None,
        *,
        num_slices: int | None = None,
        episode_key: Any = None,
        traj_key: Any = None,
        end_key: Any = None,
        end_keys: Any = None,
        **torchrl_kwargs: Any,
    ):
        check_torchrl_kwargs("SliceSampler", torchrl_kwargs, _TORCHRL)
        if (slice_len is None) == (num_slices is None):
            raise TypeError(
                "SliceSampler needs exactly one of slice_len= (steps per slice) and num_slices= "
                f"(slices per draw), got slice_len={slice_len!r}, num_slices={num_slices!r}"
            )
        self.slice_len = self.num_slices = None
        if slice_len is not None:
            self.slice_len = _positive(slice_len, "slice_len")
            self.unit = self.slice_len
        else:
            self.num_slices = _positive(num_slices, "num_slices")
            self.unit = self.num_slices  # a draw's rows must split into num_slices slices
        if episode_key is not None and traj_key is not None:
            raise TypeError(
                "episode_key and traj_key are the same argument (mixreplay's and TorchRL's name); "
                "pass one of them"
            )
        self.episode_key = _key(episode_key if episode_key is not None else traj_key, "episode_key")
        if end_key is not None and end_keys is not None:
            raise TypeError(
                "end_key and end_keys are exclusive: pass one flag key as end_key=, or several "
                "(OR-ed together) as end_keys="
            )
        self.end_key = _key(end_key, "end_key")
        self.end_keys: tuple[Key, ...] | None = None
        if end_keys is not None:
            if isinstance(end_keys, str) or not isinstance(end_keys, Sequence):
                raise TypeError(f"end_keys must be a list of keys, got {end_keys!r}")
            keys = tuple(_key(k, "each of end_keys") for k in end_keys)
            if not keys or any(k is None for k in keys):
                raise TypeError(f"end_keys must be a non-empty list of keys, got {end_keys!r}")
            self.end_keys = keys  # type: ignore[assignment]
        self._indexes: dict[int, _SliceIndex] = {}

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = (
            {"slice_len": self.slice_len}
            if self.slice_len is not None
            else {"num_slices": self.num_slices}
        )
        out["episode_key"] = _show(self.episode_key)
        out["end_key"] = _show(self.end_key)
        if self.end_keys is not None:
            out["end_keys"] = [_show(k) for k in self.end_keys]
        return out

    def __getstate__(self) -> dict[str, Any]:
        # the per-slot index is a cache of the storage's content: rebuilt, never pickled
        return {**self.__dict__, "_indexes": {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore; drops every index derived from the rows (rebuilt on the next draw)."""
        self._indexes = {}

    # -- episode structure -----------------------------------------------------------------

    def _ids(self, column: torch.Tensor, m: int) -> torch.Tensor:
        key = format_key(self.episode_key or ())
        if column.dtype.is_floating_point or column.dtype == torch.bool or column.dtype.is_complex:
            raise TypeError(f"episode_key {key} must hold integer episode ids, got {column.dtype}")
        ids = column.reshape(m, -1)
        if ids.shape[1] != 1:
            raise TypeError(
                f"episode_key {key} must hold one id per row, got shape "
                f"{list(column.shape[1:])} per row"
            )
        return ids[:, 0]

    def _end_keys(self, storage: Storage) -> tuple[Key, ...]:
        """The end-flag keys present in ``storage`` (a clear ``KeyError`` when there is none)."""
        schema = storage.schema
        have = set() if schema is None else {f.key for f in schema.fields}
        if self.end_keys is not None:
            keys = tuple(k for k in self.end_keys if k in have)
            wanted = self.end_keys
        else:
            wanted = (self.end_key,) if self.end_key is not None else _END_KEYS
            keys = next(((k,) for k in wanted if k in have), ())
        if not keys:
            raise KeyError(
                f"SliceSampler needs episode boundaries: none of the keys "
                f"[{', '.join(format_key(k) for k in wanted)}] is in the storage. Pass end_key= "
                "(a done flag per row) or episode_key= (an episode id per row)"
            )
        return keys

    def _length(self, n: int) -> int:
        if self.slice_len is not None:
            if n % self.slice_len:
                L = self.slice_len
                raise ValueError(
                    f"SliceSampler draws whole slices: n={n} is not a multiple of slice_len={L}; "
                    f"ask for a multiple of {L}, e.g. {n - n % L or L}"
                )
            return self.slice_len
        S = self.num_slices
        assert S is not None
        if n % S or n == 0:
            raise ValueError(
                f"SliceSampler draws num_slices={S} slices of n // {S} steps: n={n} is not a "
                f"positive multiple of {S}; ask for a multiple of {S}, e.g. {max(S, n - n % S)}"
            )
        return n // S

    def _too_short_message(self, storage: Storage, L: int) -> str:
        n = len(storage)
        longest = _longest_run(self, storage) if n > 1 else n
        what = f"slice_len={L}" if self.slice_len is not None else f"{L} steps"
        return (
            f"cannot draw slices of {what}: no episode among the {n} rows is that long (longest: {longest} "
            f"steps); collect more steps or lower {'slice_len' if self.slice_len else 'the batch'}"
        )

    # -- the per-slot index ----------------------------------------------------------------

    def _index(self, storage: Storage, L: int) -> _SliceIndex:
        """The index of valid starts for slices of ``L``, brought up to date with the storage."""
        index = self._indexes.get(L)
        if index is None:
            if len(self._indexes) >= 4:  # num_slices: one index per slice length seen, a few
                self._indexes.pop(next(iter(self._indexes)))
            index = self._indexes[L] = _SliceIndex(self, L)
        index.sync(storage)
        return index

    def available(self, storage: Storage) -> int:
        """How many slices could start in ``storage`` now (0 until an episode is long enough).

        With ``num_slices`` the slice length depends on the draw: every row counts.
        """
        n, L = len(storage), self.slice_len
        if L is None or L == 1 or n < L:
            return n if L is None or L == 1 else 0
        with storage.lock:
            return self._index(storage, L).count

    def _valid_start_slots(self, storage: Storage, L: int | None = None) -> torch.Tensor:
        """Every slot a slice may start at, ascending (``O(len)``; for tests)."""
        L = L if L is not None else self.slice_len
        assert L is not None
        n = len(storage)
        if L == 1:
            return torch.arange(n, device=storage.device)
        if n < L:
            return torch.empty(0, dtype=torch.int64, device=storage.device)
        return self._index(storage, L).valid_slots()

    # -- sampling --------------------------------------------------------------------------

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        L = self._length(n)
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        k = n // L
        if L == 1:
            return torch.randint(size, (k,), generator=generator, device=generator.device).to(
                storage.device
            )
        index = self._index(storage, L) if size >= L else None
        if index is None or index.count == 0:
            raise EmptyBufferError(self._too_short_message(storage, L))
        valid = index.count
        if 8 * valid >= size:
            starts = index.propose(size, k, valid, generator)
        else:
            slots = index.valid_slots()
            pick = torch.randint(slots.numel(), (k,), generator=generator, device=generator.device)
            starts = slots[pick.to(slots.device)]
        t = starts.unsqueeze(1) + index.steps
        if size == index.cap:  # a full ring: a slice may wrap past the last slot
            t = t.remainder_(index.cap)
        return t.reshape(-1)


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__} {value!r}")
    return check_int(value, name, min=1, what="an int >= 1")


def _longest_run(sampler: SliceSampler, storage: Storage) -> int:
    """The most consecutive steps of one episode in ``storage`` (for error messages)."""
    n = len(storage)
    cut = _SliceIndex(sampler, 2)
    cut.sync(storage)
    # runs between cuts, in slot order; a run across the ring's end joins its two parts
    ends = cut.cut[:n].nonzero().reshape(-1).tolist()
    if not ends:
        return n
    lengths = [b - a for a, b in zip([-1, *ends[:-1]], ends)]
    if ends[-1] != n - 1:  # a full ring: the slots after the last cut run on into slot 0
        lengths[0] += n - 1 - ends[-1]
    return max(lengths)


class _SliceIndex:
    """Per slot of one storage: may a slice of ``L`` rows start here?

    ``cut[s]``: a slice may not run from slot ``s`` to slot ``s + 1`` (mod
    capacity): an episode ends at ``s``, or ``s`` holds the newest row (the next
    slot holds the oldest, or nothing), or ``s`` holds no row. ``ok[s]``: no
    ``cut`` among ``s .. s + L - 2``, so the rows ``s .. s + L - 1`` are one run of
    one episode; that is exactly a valid start, the write cursor included.

    The index follows the storage by ``(id, generation, write_count)``: a write of
    ``k`` rows since the last look updates ``O(k + L)`` entries, anything else
    (a restore, an emptied ring, another storage) rebuilds it.
    """

    def __init__(self, sampler: SliceSampler, L: int):
        self.sampler = sampler
        self.L = L
        self.key: tuple[int, int] | None = None  # (id, generation) of the storage indexed
        self.written = 0  # its write_count then
        self.n = 0  # its length then
        self.cursor = 0  # its cursor then
        self.cap = 0
        self.count = 0  # ok.sum()
        self.cut = self.ok = torch.empty(0, dtype=torch.bool)
        self.ids: torch.Tensor | None = None
        self.keys: tuple[Key, ...] = ()
        self.steps = torch.arange(L)
        self._slots: torch.Tensor | None = None  # valid starts, cached until the next change

    # -- following the storage -------------------------------------------------------------

    def sync(self, storage: Storage) -> None:
        written = storage.write_count
        if self.key == (id(storage), storage.generation) and self.cap == storage.max_size:
            if written == self.written:
                return
            k = written - self.written
            if (
                0 < k
                and k + 2 * self.L <= self.cap // 2  # else a rebuild costs about the same
                and len(storage) == min(self.cap, self.n + k)
                and storage.cursor == (self.cursor + k) % self.cap
            ):
                self._extend(storage, k)
                return
        self._rebuild(storage)

    def _rebuild(self, storage: Storage) -> None:
        sampler, L = self.sampler, self.L
        cap, n, device = storage.max_size, len(storage), storage.device
        self.cap = cap
        self.steps = torch.arange(L, device=device)
        self.cut = torch.ones(cap, dtype=torch.bool, device=device)
        self.ok = torch.zeros(cap, dtype=torch.bool, device=device)
        self.ids = None
        if n:
            if sampler.episode_key is not None:
                self.ids = torch.zeros(cap, dtype=torch.int64, device=device)
                self.ids[:n] = sampler._ids(storage.column(sampler.episode_key), n)
                ids = self.ids[:n]
                self.cut[: n - 1] = ids[1:] != ids[:-1]
                if n == cap:
                    self.cut[n - 1] = bool(ids[-1] != ids[0])
            else:
                self.keys = sampler._end_keys(storage)
                self.cut[:n] = self._flags(storage, 0, n)
            self.cut[(storage.cursor - 1) % cap] = True  # the newest row
            # ok[s] = no cut among s .. s + L - 2, around the ring
            window = torch.cat([self.cut, self.cut[: L - 2]]) if L > 2 else self.cut
            self.ok = ~window.unfold(0, L - 1, 1).any(1) if L > 1 else ~self.cut
        self.count = int(self.ok.sum())
        self._slots = None
        self._seen(storage)

    def _extend(self, storage: Storage, k: int) -> None:
        """Rows were written at slots ``cursor .. cursor + k - 1`` since the last look."""
        cap, L, c0 = self.cap, self.L, self.cursor
        newest = (c0 + k - 1) % cap
        if self.ids is not None:
            sampler = self.sampler
            assert sampler.episode_key is not None
            column = storage.column(sampler.episode_key)
            for a, b in _runs(c0, k, cap):
                self.ids[a:b] = sampler._ids(column[a:b], b - a)
            # the cut after the previous newest row, and after each new row but the newest
            first = c0 - 1 if self.n else c0
            for a, b in _runs(first % cap, c0 + k - 1 - first, cap):
                nxt = torch.arange(a + 1, b + 1, device=self.cut.device) % cap
                self.cut[a:b] = self.ids[a:b] != self.ids.index_select(0, nxt)
        else:
            first = c0 - 1 if self.n else c0  # the previous newest row gets its own flag back
            for a, b in _runs(first % cap, c0 + k - first, cap):
                self.cut[a:b] = self._flags(storage, a, b)
        self.cut[newest] = True
        # starts whose slice holds a changed cut: c0 - L + 1 .. newest
        first_start = (c0 - L + 1) % cap
        span = k + 2 * L - 3  # their windows: first_start .. newest + L - 2
        window = _take(self.cut, first_start, span, cap)
        fresh = ~window.unfold(0, L - 1, 1).any(1)  # k + L - 1 starts
        before = 0
        for (a, b), part in _split(first_start, fresh, cap):
            before -= int(self.ok[a:b].sum())
            before += int(part.sum())
            self.ok[a:b] = part
        self.count += before
        self._slots = None
        self._seen(storage)

    def _flags(self, storage: Storage, a: int, b: int) -> torch.Tensor:
        """The end flags of slots ``a .. b - 1``, OR-ed over the end keys."""
        out = None
        for key in self.keys:
            flags = storage.column(key)[a:b].reshape(b - a, -1)
            flags = (flags if flags.dtype == torch.bool else flags != 0).any(-1)
            out = flags if out is None else out | flags
        assert out is not None
        return out

    def _seen(self, storage: Storage) -> None:
        self.key = (id(storage), storage.generation)
        self.written, self.n, self.cursor = storage.write_count, len(storage), storage.cursor

    # -- drawing ---------------------------------------------------------------------------

    def valid_slots(self) -> torch.Tensor:
        if self._slots is None:
            self._slots = self.ok.nonzero().reshape(-1)
        return self._slots

    def propose(self, n: int, k: int, valid: int, generator: torch.Generator) -> torch.Tensor:
        """``k`` uniform valid starts by rejection: propose slots uniformly, keep the valid ones."""
        device = self.ok.device
        m = -(-k * n * 5 // (4 * valid)) + 8  # expected 1.25 * k valid proposals
        kept: list[torch.Tensor] = []
        have = 0
        while have < k:
            c = torch.randint(n, (m,), generator=generator, device=generator.device)
            if c.device != device:
                c = c.to(device)
            c = c[self.ok.index_select(0, c)]
            kept.append(c)
            have += c.numel()
        return torch.cat(kept)[:k] if len(kept) > 1 else kept[0][:k]


def _runs(start: int, count: int, cap: int) -> list[tuple[int, int]]:
    """Slots ``start .. start + count - 1`` (mod ``cap``) as at most two ``[a, b)`` ranges."""
    start %= cap
    end = start + count
    return [(start, end)] if end <= cap else [(start, cap), (0, end - cap)]


def _take(x: torch.Tensor, start: int, count: int, cap: int) -> torch.Tensor:
    runs = _runs(start, count, cap)
    return x[runs[0][0] : runs[0][1]] if len(runs) == 1 else torch.cat([x[a:b] for a, b in runs])


def _split(
    start: int, values: torch.Tensor, cap: int
) -> list[tuple[tuple[int, int], torch.Tensor]]:
    out, pos = [], 0
    for a, b in _runs(start, values.shape[0], cap):
        out.append(((a, b), values[pos : pos + b - a]))
        pos += b - a
    return out
