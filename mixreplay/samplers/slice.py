"""Slice sampling: runs of consecutive steps that stay inside one episode."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch

from mixreplay._validate import check_bool, check_int
from mixreplay.errors import DataStructureError, EmptyBufferError
from mixreplay.samplers._torchrl import Table, check_torchrl_kwargs
from mixreplay.samplers.base import MASK_KEY, Sampler
from mixreplay.schema import format_key, normalize_key
from mixreplay.storages.base import Storage

__all__ = ["SliceSampler"]

log = logging.getLogger(__name__)

Key = tuple[str, ...]  # a normalized nested key

#: where episode ends are looked for, in order, when no key is given and no episode id is found
_END_KEYS: tuple[Key, ...] = (("next", "done"), ("done",))
#: episode-id keys looked for, in order, when no key is given (TorchRL's: collectors, datasets)
_ID_KEYS: tuple[Key, ...] = (("collector", "traj_ids"), ("episode",))
_DEFAULT_TRUNCATED: Key = ("next", "truncated")
_DEFAULT_INIT: Key = ("is_init",)
_UNIFORM = ("trajectories", "starts")

#: TorchRL 0.14 SliceSampler arguments mixreplay does not implement
_TORCHRL: Table = {
    "replacement": (
        (True,),
        "SliceSampler(replacement=False) builds a SliceSamplerWithoutReplacement; a subclass "
        "draws with replacement (build SliceSamplerWithoutReplacement(...) directly)",
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
    "ends": ((None,), "boundaries are read from the rows (end_key= or traj_key=)"),
    "trajectories": ((None,), "boundaries are read from the rows (traj_key= or end_key=)"),
    "cache_values": (
        (False, True),
        "boundaries are always cached and rebuilt when the storage changes",
    ),
    "compile": ((False, True), "there is nothing to compile"),
    "use_gpu": (
        (False, True),
        "the index lives on the storage's device (use_gpu only moves where TorchRL computes it)",
    ),
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


def _replace_last(key: Key, last: str) -> Key:
    return (*key[:-1], last)


def _span_side(value: Any, what: str) -> bool | int:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value >= 0:
        return value or False  # 0 spans nothing
    raise TypeError(
        f"SliceSampler span's {what} side must be a bool or an int >= 0, got {value!r}; "
        "span=(left, right), e.g. span=True or span=(False, 2)"
    )


class _Draw(NamedTuple):
    """What the last draw was made of (for :meth:`SliceSampler.info`)."""

    rows: int  # rows returned
    starts: torch.Tensor  # position in the batch of each slice's first row
    ends: torch.Tensor  # position in the batch of each slice's last real row
    mask: torch.Tensor | None  # real (True) or padding (False) per row, when padded


class SliceSampler(Sampler):
    """Draws runs of consecutive steps, each within one episode (TorchRL's meaning).

    With ``slice_len=L`` a batch of ``n`` rows holds ``n // L`` slices of ``L``
    steps; with ``num_slices=S`` it holds ``S`` slices of ``n // S`` steps. The
    slices lie one after the other, each in time order. As in TorchRL, each slice
    picks an episode uniformly among those long enough, then a start uniformly
    within it (``uniform_over="starts"``, mixreplay's alternative: every valid
    start equally likely, so longer episodes supply more slices).

    Episode boundaries, as TorchRL finds them: from ``traj_key`` (an episode id
    per row: a boundary wherever it changes; mixreplay's name ``episode_key``),
    or from end flags (``True`` on the last step of an episode): ``end_key``, or
    ``end_keys`` (several flags OR-ed together, absent ones skipped). With no key
    given, the first of ``("collector", "traj_ids")`` and ``"episode"`` present
    is the id, else the flag ``("next", "done")`` (or, mixreplay's addition,
    ``"done"``). A given key that is absent falls back to the other kind, as in
    TorchRL (a given ``traj_key`` to the end flags, a given end key to the ids);
    no boundary at all is a ``KeyError`` naming what was looked for.

    In a ring that has wrapped, time runs from the oldest row (at the write
    cursor) to the newest (just before it); a slice never runs across the
    cursor. The oldest, partly overwritten episode is usable from its first
    retained step, and the episode in progress up to its newest step.

    Shorter slices (TorchRL's arguments): with ``strict_length=False`` an
    episode shorter than a slice is drawn too, whole, so a batch may hold fewer
    rows than asked; ``pad_output=True`` then repeats each short slice's last
    row up to the slice length and marks real rows in ``("collector", "mask")``.
    ``span=(left, right)`` lets slices start before an episode's first step or
    run past its last, cut short there (``True``: down to one step; an int ``i``:
    ``L - i`` steps or more on the left, ``i + 1`` or more on the right, TorchRL's
    arithmetic). A sampler that may return fewer rows (``variable_length``)
    cannot serve a mixing buffer, which needs exact shares.

    ``rb.sample(n, return_info=True)`` adds TorchRL's per-row entries to the
    info: ``truncated_key`` (default ``("next", "truncated")``) is ``True`` on the
    last step of each slice, with ``done`` (the stored flag OR truncated) and
    ``terminated`` (stored, or ``False``) beside it; ``init_key`` (default
    ``"is_init"``), when the rows hold it, is the stored flag OR the first step of
    each slice; the mask when padded. The batch itself holds the rows as stored.

    Cost: the sampler keeps, per slot, where episodes end and where a slice may
    start; it notices writes through the storage's ``write_count`` (and restores
    through its ``generation``): the next draw updates ``O(k + L)`` entries for
    ``k`` rows written since. Drawing by episode lists the episodes once per
    change of the rows (``O(len)``).

    Args:
        slice_len: steps per slice, ``>= 1``: the sampling unit of the buffer
            (batch sizes must be multiples of it).

    Keyword Args:
        num_slices: slices per draw instead of ``slice_len`` (exclusive with it).
        traj_key: key of an episode id per row (alias: ``episode_key``).
        end_key: key of a boolean end-of-episode flag per row; exclusive with ``end_keys``.
        end_keys: several end-flag keys, OR-ed together.
        strict_length: only episodes at least a slice long (default), or all of them.
        pad_output: pad short slices to the slice length (needs ``strict_length=False``).
        span: ``bool``, ``int`` or ``(left, right)``: slices may run past episode edges.
        truncated_key: where the info marks each slice's last step (``None``: no such entries).
        init_key: where the info marks each slice's first step (``None``: leave it out).
        uniform_over: ``"trajectories"`` (TorchRL's) or ``"starts"``.

    TorchRL's other arguments are accepted with the values that mean what
    mixreplay does (``cache_values``, ``compile``, ``use_gpu``, ...) and refused
    with a ``TypeError`` naming the mixreplay way otherwise.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> from mixreplay.samplers import SliceSampler
        >>> episode = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
        >>> rows = TensorDict({"t": torch.arange(10), "episode": episode}, [10])
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=SliceSampler(3), generator=5)
        >>> _ = rb.extend(rows)
        >>> batch, info = rb.sample(6, return_info=True)
        >>> batch["t"].view(2, 3).tolist()  # two slices, each inside one episode
        [[4, 5, 6], [0, 1, 2]]
        >>> info["next", "truncated"].view(2, 3).tolist()
        [[False, False, True], [False, False, True]]
        >>> rb.sampler.traj_key  # found by itself, as TorchRL does
        'episode'
    """

    foreign_storage_lead: ClassVar[str] = (
        "Could not get a tensordict out of the storage, which is required for SliceSampler "
        "to compute the trajectories: "
    )

    def __new__(cls, *args: Any, replacement: bool = True, **kwargs: Any) -> Any:
        if replacement is False and cls is SliceSampler and cls._without_replacement is not None:
            # TorchRL's dispatch: SliceSampler(replacement=False) is a SliceSamplerWithoutReplacement
            return super().__new__(cls._without_replacement)
        return super().__new__(cls)

    def __init__(
        self,
        slice_len: int | None = None,
        *,
        num_slices: int | None = None,
        episode_key: Any = None,
        traj_key: Any = None,
        end_key: Any = None,
        end_keys: Any = None,
        strict_length: bool = True,
        pad_output: bool = False,
        span: Any = False,
        truncated_key: Any = _DEFAULT_TRUNCATED,
        init_key: Any = "is_init",
        uniform_over: str = "trajectories",
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
        self.episode_key = (
            _key(episode_key, "episode_key")
            if episode_key is not None
            else _key(traj_key, "traj_key")
        )
        if end_key is not None and end_keys is not None:
            raise RuntimeError(  # TorchRL's exception
                "end_key and end_keys are exclusive arguments: pass one flag key as end_key=, or "
                "several (OR-ed together) as end_keys="
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
        self.strict_length = check_bool(strict_length, "SliceSampler strict_length")
        self.pad_output = check_bool(pad_output, "SliceSampler pad_output")
        if self.pad_output and self.strict_length:
            raise ValueError(
                "pad_output=True is incompatible with strict_length=True: padding only happens "
                "when short trajectories are kept, which requires strict_length=False"
            )
        pair = span if isinstance(span, (tuple, list)) else (span, span)
        if len(pair) != 2:
            raise TypeError(
                f"SliceSampler span must be a bool, an int or (left, right), got {span!r}"
            )
        self.span: tuple[bool | int, bool | int] = (
            _span_side(pair[0], "left"),
            _span_side(pair[1], "right"),
        )
        L = self.slice_len
        for side, value in zip(("left", "right"), self.span, strict=True):
            if L is not None and value is not True and value and value >= L:
                raise ValueError(
                    f"SliceSampler span's {side} side {value} must be lower than slice_len={L} "
                    "(TorchRL: the right and left span must be strictly lower than the sequence "
                    "length)"
                )
        self.truncated_key = _key(truncated_key, "truncated_key")
        self.init_key = _key(init_key, "init_key")
        if uniform_over not in _UNIFORM:
            raise ValueError(
                f"SliceSampler uniform_over must be 'trajectories' (TorchRL's: each episode "
                f"long enough equally likely) or 'starts' (each valid start equally likely), "
                f"got {uniform_over!r}"
            )
        self.uniform_over = uniform_over
        if uniform_over == "starts" and not (self.strict_length and not any(self.span)):
            raise ValueError(
                "SliceSampler(uniform_over='starts') draws whole slices only: it cannot be "
                "combined with strict_length=False, pad_output or span; use "
                "uniform_over='trajectories' (TorchRL's) for those"
            )
        self.variable_length = not self.pad_output and (not self.strict_length or any(self.span))
        self.pads = self.pad_output
        self._used: tuple[str, tuple[Key, ...]] | None = None  # boundaries found last
        self._indexes: dict[int, _SliceIndex] = {}
        self._last: _Draw | None = None

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
        # TorchRL's options, only when they differ from their defaults (so checkpoints saved
        # before they existed still match), then how slices are drawn, always
        if not self.strict_length:
            out["strict_length"] = False
        if self.pad_output:
            out["pad_output"] = True
        if any(self.span):
            out["span"] = list(self.span)
        if self.truncated_key != _DEFAULT_TRUNCATED:
            out["truncated_key"] = _show(self.truncated_key)
        if self.init_key != _DEFAULT_INIT:
            out["init_key"] = _show(self.init_key)
        out["uniform_over"] = self.uniform_over
        return out

    @property
    def traj_key(self) -> Any:
        """TorchRL's name: the episode-id key in use (found by itself when none was given)."""
        used = self._used
        if used is not None and used[0] == "ids":
            return _show(used[1][0])
        return _show(self.episode_key)

    @property
    def _fetch_traj(self) -> bool:
        """TorchRL's flag: whether episodes are found by an id key (else by end flags)."""
        used = self._used
        if used is not None:
            return used[0] == "ids"
        return self.episode_key is not None

    @property
    def _traj_key_auto(self) -> bool:
        """TorchRL's flag: whether the id key is still to be found in the rows."""
        return self._used is None and self.episode_key is None

    #: the positions of the last whole-slice draw, kept for the next draw of that shape (a
    #: class default, so samplers pickled before it load); only ever read
    _fixed_kept: _Draw | None = None
    #: an ndim=2 storage seen column by column (see :class:`_Columns`), kept between draws
    _columns: _Columns | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the per-slot index is a cache of the storage's content: rebuilt, never pickled
        return {
            **self.__dict__,
            "_indexes": {},
            "_last": None,
            "_fixed_kept": None,
            "_columns": None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # samplers pickled before TorchRL's options existed drew uniformly over starts
        defaults = {
            "strict_length": True,
            "pad_output": False,
            "span": (False, False),
            "truncated_key": _DEFAULT_TRUNCATED,
            "init_key": _DEFAULT_INIT,
            "uniform_over": "starts",
            "variable_length": False,
            "_used": None,
            "_last": None,
        }
        self.__dict__.update({**defaults, **state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore; drops every index derived from the rows (rebuilt on the next draw)."""
        self._indexes = {}
        self._last = None
        self._columns = None

    def _seen_as(self, storage: Storage) -> Any:
        """What slices are drawn in: ``storage`` itself, or an ndim=2 grid's columns laid end
        to end (:class:`_Columns`), TorchRL's trajectories running down each column."""
        if storage.ndim == 1:
            return storage
        view = self._columns
        if view is None or view.storage is not storage:
            view = self._columns = _Columns(storage)
        view.sync()
        return view

    # -- episode structure -----------------------------------------------------------------

    def _ids(self, column: torch.Tensor, m: int, key: Key) -> torch.Tensor:
        if column.dtype.is_complex:
            raise TypeError(
                f"traj_key {format_key(key)} must hold real episode ids, got {column.dtype}"
            )
        ids = column.reshape(m, -1)
        if ids.shape[1] != 1:
            raise TypeError(
                f"traj_key {format_key(key)} must hold one id per row, got shape "
                f"{list(column.shape[1:])} per row"
            )
        return ids[:, 0]

    def _resolve(self, storage: Storage) -> tuple[str, tuple[Key, ...]]:
        """Where the episode boundaries come from: ``("ids", (key,))`` or ``("ends", keys)``.

        TorchRL's order: a given traj_key, else given end keys, else an id key found in
        the rows, else the end flag; a given key that is absent falls back to the other kind.
        """
        schema = storage.schema
        have = set() if schema is None else {f.key for f in schema.fields}
        if self.end_keys is not None:
            ends: tuple[Key, ...] = tuple(k for k in self.end_keys if k in have)
            wanted_ends: tuple[Key, ...] = self.end_keys
        else:
            wanted_ends = (self.end_key,) if self.end_key is not None else _END_KEYS
            ends = next(((k,) for k in wanted_ends if k in have), ())
        wanted_ids = (self.episode_key,) if self.episode_key is not None else _ID_KEYS
        ids: tuple[Key, ...] = next(((k,) for k in wanted_ids if k in have), ())
        given_ends = self.end_key is not None or self.end_keys is not None
        order: tuple[tuple[str, tuple[Key, ...]], ...]
        if self.episode_key is not None or not given_ends:
            order = (("ids", ids), ("ends", ends))
        else:
            order = (("ends", ends), ("ids", ids))
        for kind, keys in order:
            if keys:
                if self.episode_key is not None and kind == "ends":
                    log.info(
                        "SliceSampler: traj_key %s is not in the storage; episode boundaries "
                        "come from the end flags %s (as in TorchRL)",
                        format_key(self.episode_key),
                        ", ".join(format_key(k) for k in keys),
                    )
                self._used = (kind, keys)
                return kind, keys
        known = ", ".join(format_key(k) for k in sorted(have, key=str))
        looked = ", ".join(format_key(k) for k in (*wanted_ids, *wanted_ends))
        raise KeyError(
            f"SliceSampler needs episode boundaries: none of the keys [{looked}] is in the "
            f"storage (keys: [{known}]). Pass traj_key= (an episode id per row) or end_key= "
            "(a done flag per row)"
        )

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
        L = n // S
        for side, value in zip(("left", "right"), self.span, strict=True):
            if value is not True and value and value >= L:
                raise ValueError(
                    f"SliceSampler span's {side} side {value} must be lower than the {L} steps "
                    f"of a slice (n={n} // num_slices={S})"
                )
        return L

    def _too_short_message(self, storage: Storage, L: int) -> str:
        n = len(storage)
        longest = _longest_run(self, storage) if n > 1 else n
        what = f"slice_len={L}" if self.slice_len is not None else f"{L} steps"
        return (
            f"cannot draw slices of {what}: no episode among the {n} rows is that long (longest: {longest} "
            f"steps); collect more steps, lower {'slice_len' if self.slice_len else 'the batch'}, "
            "or pass strict_length=False"
        )

    def attach(self, storage: Storage) -> None:
        """Refuse a storage of items: episodes are found in columns of rows."""
        if storage.holds_items:
            raise DataStructureError(  # TorchRL's words first (also a RuntimeError, as its)
                "Could not get a tensordict out of the storage, which is required for "
                f"SliceSampler to compute the trajectories: {type(storage).__name__} holds items, "
                "not rows; store the rows in a LazyTensorStorage or LazyMemmapStorage"
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

        With ``num_slices``, or when short episodes are drawn too, every row counts.
        """
        n, L = len(storage), self.slice_len
        if L is None or L == 1 or not self.strict_length or any(self.span):
            return n
        if n < L:
            return 0
        with storage.lock:
            return self._index(self._seen_as(storage), L).count

    def _valid_start_slots(self, storage: Storage, L: int | None = None) -> torch.Tensor:
        """Every slot a whole slice may start at, ascending (``O(len)``; for tests)."""
        L = L if L is not None else self.slice_len
        assert L is not None
        n = len(storage)
        if L == 1:
            return torch.arange(n, device=storage.device)
        if n < L:
            return torch.empty(0, dtype=torch.int64, device=storage.device)
        seen = self._seen_as(storage)
        slots = self._index(seen, L).valid_slots()
        return slots if seen is storage else seen.perm.index_select(0, slots).sort().values

    # -- sampling --------------------------------------------------------------------------

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        L = self._length(n)
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        k = n // L
        seen = self._seen_as(storage)
        if self.uniform_over == "starts":
            index = self._sample_starts(seen, size, k, L, generator)
        else:
            index = self._sample_trajectories(seen, size, k, L, generator)
        if seen is not storage:  # positions in the columns, as slots of the grid
            index = seen.perm.index_select(0, index)
        return index

    def _fixed(self, k: int, L: int, device: torch.device) -> _Draw:
        """Where each of ``k`` whole slices of ``L`` rows starts and ends in the batch: the same
        for every draw of that shape, so kept (:meth:`info` only reads them as indices)."""
        kept = self._fixed_kept
        if (
            kept is not None
            and kept.rows == k * L
            and kept.starts.shape[0] == k
            and kept.starts.device == device
        ):
            return kept
        first = torch.arange(0, k * L, L, device=device)
        kept = self._fixed_kept = _Draw(k * L, first, first + (L - 1), None)
        return kept

    def _sample_starts(
        self, storage: Storage, size: int, k: int, L: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Every valid start equally likely (``uniform_over="starts"``)."""
        if L == 1:
            out = torch.randint(size, (k,), generator=generator, device=generator.device)
            out = out.to(storage.device)
            self._last = self._fixed(k, 1, out.device)
            return out
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
        self._last = self._fixed(k, L, t.device)
        return t.reshape(-1)

    #: whether :meth:`_pick` hands out episodes in epochs (each once per epoch) rather than
    #: uniformly at random: the draw then goes through the general path, which asks it
    _epochs: ClassVar[bool] = False

    def _pick(
        self, m: int, k: int, storage: Storage, generator: torch.Generator, episodes: int
    ) -> torch.Tensor:
        """Which of the ``m`` episodes long enough each of ``k`` slices comes from (positions
        among them): uniformly, independently. ``episodes`` names the list of episodes (it
        changes when a boundary does)."""
        return torch.randint(m, (k,), generator=generator, device=generator.device)

    def _sample_trajectories(
        self, storage: Storage, size: int, k: int, L: int, generator: torch.Generator
    ) -> torch.Tensor:
        """An episode uniformly (among those long enough), then a start uniformly in it."""
        index = self._index(storage, L)
        left, right = self.span
        gdev, cap = generator.device, index.cap
        if self.strict_length and not left and not right and not self._epochs:  # the hot path
            first, starts_in = index.whole()
            m = first.numel()
            if m == 0:
                raise EmptyBufferError(self._too_short_message(storage, L))
            # one uniform number picks the episode (integer part) and the start in it (fraction)
            u = torch.rand(k, generator=generator, dtype=torch.float64, device=gdev)
            if gdev != first.device:
                u = u.to(first.device)
            u = u.mul_(m)
            pick = u.to(torch.int64)
            rel = u.sub_(pick).mul_(starts_in.index_select(0, pick)).to(torch.int64)
            t = (first.index_select(0, pick) + rel).unsqueeze(1) + index.steps
            if size == cap:
                t = t.remainder_(cap)
            self._last = self._fixed(k, L, t.device)
            return t.reshape(-1)
        first, lengths = index.episodes()
        pool = index.pool(self.strict_length)
        if pool.numel() == 0:
            raise EmptyBufferError(self._too_short_message(storage, L))
        device = first.device
        pick = self._pick(pool.numel(), k, storage, generator, index.version)
        episode = pool[pick.to(device)]
        k = episode.numel()  # fewer at the end of an epoch (SliceSamplerWithoutReplacement)
        length = lengths.index_select(0, episode)
        seq = torch.clamp(length, max=L)  # steps per slice
        # where a slice may start, relative to its episode's first step: [lo, hi)
        if not right:
            hi = length - seq + 1
        elif right is True:
            hi = length  # at least one step (TorchRL's length + 1 can draw an empty slice)
        else:
            hi = length - right
        if not left:
            lo: Any = 0
        elif left is True:
            lo = 1 - seq
        else:
            lo = -torch.clamp(seq - 1, max=left)  # a slice keeps one step at least
        hi = torch.maximum(hi, torch.as_tensor(lo, device=device) + 1)  # one start at least
        u = torch.rand(k, generator=generator, dtype=torch.float64, device=gdev).to(device)
        rel = (u * (hi - lo)).floor_().to(torch.int64) + lo
        if left:
            seq = torch.where(rel < 0, seq + rel, seq)
            rel = rel.clamp(min=0)
        if right:
            seq = torch.minimum(seq, length - rel)
        starts = first.index_select(0, episode) + rel
        if bool((seq == L).all()):
            t = starts.unsqueeze(1) + index.steps
            if size == cap:
                t = t.remainder_(cap)
            self._last = self._fixed(k, L, t.device)
            if self.pad_output and index.has_short():  # TorchRL writes the mask whenever it may pad
                self._last = self._last._replace(
                    mask=torch.ones(k * L, dtype=torch.bool, device=t.device)
                )
            return t.reshape(-1)
        if self.pad_output:
            steps = index.steps.unsqueeze(0)
            real = steps < seq.unsqueeze(1)  # [k, L]
            t = starts.unsqueeze(1) + torch.minimum(steps, (seq - 1).unsqueeze(1))
            pos = torch.arange(0, k * L, L, device=device)
            self._last = _Draw(k * L, pos, pos + seq - 1, real.reshape(-1))
        else:
            total = int(seq.sum())
            ends = seq.cumsum(0)
            begins = ends - seq
            offset = torch.arange(total, device=device) - torch.repeat_interleave(begins, seq)
            t = torch.repeat_interleave(starts, seq) + offset
            self._last = _Draw(total, begins, ends - 1, None)
        if size == cap:
            t = t.remainder_(cap)
        return t.reshape(-1)

    #: TorchRL's private boundary hooks. A subclass may override ``_find_start_stop_traj`` or
    #: ``_end_to_start_stop`` to change where episodes end, as in TorchRL: the sampler then
    #: finds them through its hooks (each write rebuilds the index, ``O(len)``).
    #: ``_get_stop_and_length`` is a view of the episodes found, so overriding it is refused.
    _VIEWS: ClassVar[tuple[str, ...]] = ("_get_stop_and_length",)

    #: whether a subclass overrides a boundary hook (set for each subclass when defined)
    _hooked: ClassVar[bool] = False

    #: what ``SliceSampler(replacement=False)`` builds (TorchRL's dispatch): the subclass
    #: declared with ``without_replacement=True``
    _without_replacement: ClassVar[type[SliceSampler] | None] = None

    def __init_subclass__(cls, without_replacement: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if without_replacement:
            SliceSampler._without_replacement = cls
        for name in SliceSampler._VIEWS:
            if name in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__} overrides SliceSampler.{name}: in mixreplay it is a view "
                    "of the episodes found, not how the sampler finds them, so overriding it "
                    "would change nothing drawn; override _end_to_start_stop(end, length) or "
                    "_find_start_stop_traj(...) instead, or pass traj_key= or end_key=/end_keys="
                )
        cls._hooked = (
            cls._end_to_start_stop is not SliceSampler._end_to_start_stop
            or cls._find_start_stop_traj is not SliceSampler._find_start_stop_traj
        )

    def _find_start_stop_traj(
        self,
        *,
        trajectory: torch.Tensor | None = None,
        end: torch.Tensor | None = None,
        at_capacity: bool,
        cursor: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """TorchRL's episode boundaries of 1-D ids or end flags laid out in slot order.

        ``(start, stop, length)`` as :meth:`_get_stop_and_length`, ordered by last
        step. An episode ends where the id changes (or at a ``True`` flag), and at
        the last row unless ``at_capacity`` (a full ring: an episode without an end
        after the last row goes on at row 0), and at ``cursor`` (the last row
        written) when given with ``at_capacity``. It reads only its arguments, and
        turns them into end flags for :meth:`_end_to_start_stop`; a subclass may
        override either to change where the sampler finds episodes.
        """
        if (trajectory is None) == (end is None):
            raise TypeError(
                "Exactly one of trajectory= (episode ids) or end= (end flags) must be given"
            )
        given = trajectory if trajectory is not None else end
        assert given is not None
        if given.dim() != 1 or given.numel() == 0:
            raise ValueError(
                f"_find_start_stop_traj takes one value per row of a 1-D storage, got shape "
                f"{list(given.shape)}"
            )
        if trajectory is not None:
            last = trajectory != trajectory.roll(-1)
        else:
            last = given.to(torch.bool).clone()
        length = given.numel()
        if not at_capacity:
            last[-1] = True
        elif cursor is not None:
            last[int(cursor) % length] = True
        return self._end_to_start_stop(end=last, length=length)

    def _end_to_start_stop(
        self, end: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start, stop, length)`` of the episodes whose last rows ``end`` flags, in a ring
        of ``length`` slots (TorchRL's hook; a ring without a flag is one episode)."""
        stop = end.nonzero().reshape(-1)
        if stop.numel() == 0:  # a full ring of one episode without an end
            stop = torch.full((1,), length - 1, dtype=torch.int64, device=end.device)
        start = (stop.roll(1) + 1).remainder_(length)
        lengths = (stop - start).remainder_(length).add_(1)
        return start.unsqueeze(-1), stop.unsqueeze(-1), lengths

    def _get_stop_and_length(
        self, storage: Storage
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The episodes ``storage`` holds, as TorchRL's slice sampler reports them.

        Returns ``(start, stop, length)``: the first and last slot of each episode
        (``[episodes, 1]`` int64) and its number of steps (``[episodes]``), oldest
        episode first; the newest one ends at the last row written whether or not it
        is done. TorchRL's tests read this (a private name in TorchRL); it is a view
        of the episode list this sampler draws from, found with the same keys.

        Raises:
            EmptyBufferError: the storage holds no rows.
        """
        with storage.lock:
            if len(storage) == 0:
                raise EmptyBufferError(
                    "cannot list episodes: the storage holds no rows; write rows first"
                )
            first, lengths = self._index(storage, self.slice_len or 1).episodes()
            stop = (first + lengths - 1).remainder_(storage.max_size)
            return first.unsqueeze(-1), stop.unsqueeze(-1), lengths.clone()

    # -- TorchRL's per-row info ------------------------------------------------------------

    def info(self, index: torch.Tensor, storage: Storage) -> dict[Key, torch.Tensor] | None:
        """TorchRL's entries about the draw that returned ``index`` (see the class docs)."""
        last = self._last
        if last is None or last.rows != index.numel():
            return None
        schema = storage.schema
        have = set() if schema is None else {f.key for f in schema.fields}
        out: dict[Key, torch.Tensor] = {}
        n = index.numel()

        def stored(key: Key) -> torch.Tensor | None:
            if key not in have:
                return None
            return storage.column(key).index_select(0, index.to(storage.device))

        if self.truncated_key is not None:
            truncated = torch.zeros(n, 1, dtype=torch.bool, device=index.device)
            truncated[last.ends] = True
            done_key = _replace_last(self.truncated_key, "done")
            terminated_key = _replace_last(self.truncated_key, "terminated")
            done = stored(done_key)
            if done is not None and done.numel() == n:
                truncated = truncated.view(done.shape)
                done = done.bool() | truncated
            else:
                done = truncated.clone()
            terminated = stored(terminated_key)
            if terminated is None:
                terminated = torch.zeros_like(truncated)
            out[self.truncated_key] = truncated
            out[done_key] = done
            out[terminated_key] = terminated
        if last.mask is not None:
            out[MASK_KEY] = last.mask
        if self.init_key is not None:
            init = stored(self.init_key)
            if init is not None:
                marker = torch.zeros_like(init, dtype=torch.bool)
                marker[last.starts] = True
                out[self.init_key] = marker | init.bool()
        return out


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


class _Columns:
    """An ndim=2 ring (TorchRL's ``[steps, width]`` grid) seen column by column.

    TorchRL finds trajectories down each column of a grid (each env's steps, in time
    order), a ring that has wrapped starting each column at its oldest step. Here the
    columns are laid end to end, ``position = column * steps + t`` (``t = 0``: the oldest
    step held), which never wraps; each column's last position ends an episode
    (:attr:`column_ends`), and :attr:`perm` maps positions back to the grid's flat slots.
    What a :class:`_SliceIndex` reads of a storage is given in that order; the layout
    moves with every write, so the index is rebuilt after each (``O(len)``).
    """

    def __init__(self, storage: Storage):
        self.storage = storage
        self.lock = storage.lock
        self.device = storage.device
        self._key: tuple[int, ...] | None = None
        self.generation = 0
        self.perm = self.column_ends = torch.empty(0, dtype=torch.int64)

    def sync(self) -> None:
        s = self.storage
        key = (s.generation, s.rewrites, s.write_count, len(s), s.cursor, s.max_size)
        if key == self._key:
            return
        self._key = key
        self.generation += 1  # any change: the index rebuilds
        n, width, device = len(s), s.width or 1, s.device
        steps, cap = n // width, s.max_size // width
        oldest = (s.cursor // width) % cap if n == s.max_size else 0
        t = torch.arange(steps, device=device).add_(oldest).remainder_(cap)
        column = torch.arange(width, device=device)
        self.perm = (t.unsqueeze(0) * width + column.unsqueeze(1)).reshape(-1)
        self.column_ends = torch.arange(steps - 1, n, steps, device=device) if steps else self.perm

    def __len__(self) -> int:
        return self.perm.numel()

    @property
    def max_size(self) -> int:
        return self.perm.numel() + 1  # one slot more than the positions: nothing wraps

    @property
    def cursor(self) -> int:
        return self.perm.numel()

    @property
    def write_count(self) -> int:
        return self.storage.write_count

    @property
    def rewrites(self) -> int:
        return 0  # an in-place write of the storage moves self.generation (see sync)

    @property
    def schema(self) -> Any:
        return self.storage.schema

    def column(self, key: Key) -> torch.Tensor:
        return self.storage.column(key).index_select(0, self.perm)


#: a number no other version of any index's episode cuts has had (see _SliceIndex.version)
_CUT_VERSIONS = itertools.count(1)


class _SliceIndex:
    """Per slot of one storage: may a slice of ``L`` rows start here?

    ``cut[s]``: a slice may not run from slot ``s`` to slot ``s + 1`` (mod
    capacity): an episode ends at ``s``, or ``s`` holds the newest row (the next
    slot holds the oldest, or nothing), or ``s`` holds no row. ``ok[s]``: no
    ``cut`` among ``s .. s + L - 2``, so the rows ``s .. s + L - 1`` are one run of
    one episode; that is exactly a valid start, the write cursor included.

    The index follows the storage by ``(id, generation, rewrites, write_count)``: a write
    of ``k`` rows since the last look updates ``O(k + L)`` entries, anything else
    (a restore, an emptied ring, an in-place write, another storage) rebuilds it.
    """

    def __init__(self, sampler: SliceSampler, L: int):
        self.sampler = sampler
        self.L = L
        # (id, generation, rewrites) of the storage indexed
        self.key: tuple[int, int, int] | None = None
        self.written = 0  # its write_count then
        self.n = 0  # its length then
        self.cursor = 0  # its cursor then
        self.cap = 0
        self.count = 0  # ok.sum()
        self.cut = self.ok = torch.empty(0, dtype=torch.bool)
        # changes whenever ``cut`` (where episodes end) changes, to a number never used before:
        # an epoch of episodes follows it, so an in-place write that moves no boundary keeps it
        self.version = 0
        self.ids: torch.Tensor | None = None
        self.id_key: Key | None = None
        self.keys: tuple[Key, ...] = ()
        self.steps = torch.arange(L)
        self._slots: torch.Tensor | None = None  # valid starts, cached until the next change
        # the slot where each episode ends, oldest first: kept up to date by writes once built
        self._ends: torch.Tensor | None = None
        # (first slot, length) of every episode, cached until the next change, and derived views
        self._episodes: tuple[torch.Tensor, torch.Tensor] | None = None
        self._pools: dict[bool, torch.Tensor] = {}  # strict -> the episodes a slice may use
        self._whole: tuple[torch.Tensor, torch.Tensor] | None = None
        self._short: bool | None = None

    # -- following the storage -------------------------------------------------------------

    def sync(self, storage: Storage) -> None:
        written = storage.write_count
        if self.key == (id(storage), storage.generation, storage.rewrites) and (
            self.cap == storage.max_size
        ):
            if written == self.written:
                return
            k = written - self.written
            if (
                0 < k
                and not self.sampler._hooked  # a subclass's boundary hooks read every row
                and k + 2 * self.L <= self.cap // 2  # else a rebuild costs about the same
                and len(storage) == min(self.cap, self.n + k)
                and storage.cursor == (self.cursor + k) % self.cap
            ):
                self._extend(storage, k)
                return
        self._rebuild(storage)

    def _rebuild(self, storage: Storage) -> None:
        before = self.cut
        self._build(storage)
        if before.shape != self.cut.shape or not torch.equal(before, self.cut):
            self.version = next(_CUT_VERSIONS)

    def _build(self, storage: Storage) -> None:
        sampler, L = self.sampler, self.L
        cap, n, device = storage.max_size, len(storage), storage.device
        self.cap = cap
        self.steps = torch.arange(L, device=device)
        self.cut = torch.ones(cap, dtype=torch.bool, device=device)
        self.ok = torch.zeros(cap, dtype=torch.bool, device=device)
        self.ids = self.id_key = None
        if n:
            kind, keys = sampler._resolve(storage)
            if kind == "ids":
                key = self.id_key = keys[0]
                column = sampler._ids(storage.column(key), n, key)
                self.ids = torch.zeros(cap, dtype=column.dtype, device=device)
                self.ids[:n] = column
                ids = self.ids[:n]
                self.cut[: n - 1] = ids[1:] != ids[:-1]
                if n == cap:
                    self.cut[n - 1] = bool(ids[-1] != ids[0])
            else:
                self.keys = keys
                self.cut[:n] = self._flags(storage, 0, n)
            if sampler._hooked:  # a subclass says where episodes end (TorchRL's hooks)
                self.cut[:n] = self._hooked_ends(storage, n, cap)
                self.ids = self.id_key = None
            self.cut[(storage.cursor - 1) % cap] = True  # the newest row
            if isinstance(storage, _Columns):  # a grid's columns: no slice runs into the next
                self.cut[storage.column_ends] = True
            if n < L:
                pass  # no whole slice fits in the rows held
            elif L > 1:
                # ok[s] = no cut among s .. s + L - 2, around the ring
                window = torch.cat([self.cut, self.cut[: L - 2]]) if L > 2 else self.cut
                self.ok = ~window.unfold(0, L - 1, 1).any(1)
            else:
                self.ok[:n] = True  # a slice of one step may start at any row
        self.count = int(self.ok.sum())
        self._ends = None
        self._changed()
        self._seen(storage)

    def _hooked_ends(self, storage: Storage, n: int, cap: int) -> torch.Tensor:
        """The end flags of slots ``0 .. n - 1`` as a subclass's boundary hooks find them,
        from the ids or end flags this index read (``self.ids`` / ``self.cut``)."""
        full = n == cap
        cursor = (storage.cursor - 1) % cap if full else None
        if self.ids is not None:
            found = self.sampler._find_start_stop_traj(
                trajectory=self.ids[:n].clone(), at_capacity=full, cursor=cursor
            )
        else:
            found = self.sampler._find_start_stop_traj(
                end=self.cut[:n].clone(), at_capacity=full, cursor=cursor
            )
        stop = found[1].reshape(-1).to(torch.int64)
        if stop.numel() and (int(stop.min()) < 0 or int(stop.max()) >= n):
            raise ValueError(
                f"{type(self.sampler).__name__}'s boundary hooks returned a stop outside the "
                f"{n} rows held (got {stop.tolist()[:8]}); they must return slots 0..{n - 1}"
            )
        ends = torch.zeros(n, dtype=torch.bool, device=self.cut.device)
        ends[stop.to(ends.device)] = True
        return ends

    def _changed(self) -> None:
        self._slots = self._episodes = self._whole = self._short = None
        self._pools = {}

    def _extend(self, storage: Storage, k: int) -> None:
        """Rows were written at slots ``cursor .. cursor + k - 1`` since the last look."""
        cap, L, c0 = self.cap, self.L, self.cursor
        newest = (c0 + k - 1) % cap
        if self.ids is not None:
            sampler, key = self.sampler, self.id_key
            assert key is not None
            column = storage.column(key)
            for a, b in _runs(c0, k, cap):
                self.ids[a:b] = sampler._ids(column[a:b], b - a, key)
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
        self.version = next(_CUT_VERSIONS)
        if self._ends is not None:
            self._extend_ends(k)
        self._changed()
        self._seen(storage)

    def _extend_ends(self, k: int) -> None:
        """Follow ``k`` rows written at the cursor in the list of episode ends (``O(episodes +
        k)``): the ends among overwritten rows (the oldest) leave from the front, the previous
        newest row's and the new rows' ends are appended at the back."""
        ends = self._ends
        assert ends is not None
        cap, c0, n = self.cap, self.cursor, self.n
        ends = ends[:-1] if n else ends  # the previous newest row: an end only while newest
        over = n + k - cap  # rows overwritten, the oldest
        if over > 0 and ends.numel():
            oldest = c0 if n == cap else 0
            gone = int(
                (((ends - oldest) % cap) < over).sum()
            )  # a prefix: the list is in time order
            ends = ends[gone:]
        first = c0 - 1 if n else c0
        region = torch.arange(first, c0 + k, device=ends.device) % cap
        self._ends = torch.cat([ends, region[self.cut.index_select(0, region)]])

    def _flags(self, storage: Storage, a: int, b: int) -> torch.Tensor:
        """The end flags of slots ``a .. b - 1``, OR-ed over the end keys."""
        out = None
        for key in self.keys:
            column = storage.column(key)
            if column[0].numel() != 1:
                raise DataStructureError(  # a TypeError, and TorchRL's RuntimeError
                    "Expected the end-of-trajectory signal to be 1-dimensional: end key "
                    f"{format_key(key)} must hold one flag per row, got shape "
                    f"{list(column.shape[1:])} per row"
                )
            flags = column[a:b].reshape(b - a)
            flags = flags if flags.dtype == torch.bool else flags != 0
            out = flags if out is None else out | flags
        assert out is not None
        return out

    def _seen(self, storage: Storage) -> None:
        self.key = (id(storage), storage.generation, storage.rewrites)
        self.written, self.n, self.cursor = storage.write_count, len(storage), storage.cursor

    # -- drawing ---------------------------------------------------------------------------

    def valid_slots(self) -> torch.Tensor:
        if self._slots is None:
            self._slots = self.ok.nonzero().reshape(-1)
        return self._slots

    def episodes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(first slot, length)`` of every episode held, oldest first (``O(episodes)`` per
        change of the rows once the list of ends exists; ``O(len)`` to build it)."""
        if self._episodes is None:
            cap, oldest = self.cap, self._oldest()
            ends = self._time_ends()
            begins = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
            lengths = ends - begins + 1
            first = (begins + oldest) % cap if oldest else begins
            self._episodes = (first, lengths)
        return self._episodes

    def has_short(self) -> bool:
        """Whether an episode held is shorter than ``L``."""
        if self._short is None:
            self._short = bool((self.episodes()[1] < self.L).any())
        return self._short

    def whole(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(first slot, number of starts)`` (float64) of each episode at least ``L`` long."""
        if self._whole is None:  # straight from the ends: few ops, as after every write
            ends, oldest, cap = self._time_ends(), self._oldest(), self.cap
            lengths = ends.diff(prepend=ends.new_full((1,), -1))
            keep = (lengths >= self.L).nonzero().reshape(-1)
            last, length = ends.index_select(0, keep), lengths.index_select(0, keep)
            first = last - length + 1
            if oldest:
                first = first.add_(oldest).remainder_(cap)
            self._whole = (first, length.sub_(self.L - 1).to(torch.float64))
        return self._whole

    def _oldest(self) -> int:
        return self.cursor % self.cap if self.n == self.cap else 0

    def _time_ends(self) -> torch.Tensor:
        """The time position (0: the oldest row) of each episode's last row, ascending."""
        oldest = self._oldest()
        if self._ends is None:
            n, cap = self.n, self.cap
            cut = self.cut[:n] if n < cap else torch.roll(self.cut, -oldest)
            ends = cut.nonzero().reshape(-1)  # the newest row always ends one
            self._ends = (ends + oldest) % self.cap if oldest else ends
            return ends
        return (self._ends - oldest) % self.cap if oldest else self._ends

    def pool(self, strict: bool) -> torch.Tensor:
        """The episodes a slice may come from: those at least ``L`` long, or all of them."""
        pool = self._pools.get(strict)
        if pool is None:
            _, lengths = self.episodes()
            pool = (
                (lengths >= self.L).nonzero().reshape(-1)
                if strict
                else torch.arange(lengths.numel(), device=lengths.device)
            )
            self._pools[strict] = pool
        return pool

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
