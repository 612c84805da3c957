"""TorchRL's TensorDict buffer: batches that carry their slots, priorities read from the rows.

:class:`TensorDictReplayBuffer` is a :class:`~mixreplay.ReplayBuffer` of TensorDicts
with TorchRL's three additions, which let a training loop update priorities without
keeping indices itself:

- every sampled batch carries ``"index"`` (the slots drawn) and the sampler's
  per-row entries (``"priority_weight"`` of a prioritized sampler, a slice sampler's
  ``("next", "truncated")`` ...), set into the batch as TorchRL does;
- ``extend(td)`` sets ``"index"`` into the TensorDict written and, when it holds the
  ``priority_key`` entry, gives the rows those priorities;
- :meth:`~TensorDictReplayBuffer.update_tensordict_priority` reads ``"index"`` and the
  ``priority_key`` entry of a batch (after the loss wrote its TD error there) and
  updates the sampler.

TorchRL's trainers (``torchrl.trainers.ReplayBufferTrainer``, its TD3 and
execution helpers) look for ``update_tensordict_priority`` on the buffer and call it
after each loss: they update the priorities of these buffers as they do TorchRL's.
That method is the whole link: mixreplay registers nothing with TorchRL (making its
``PrioritizedSampler`` a virtual subclass of TorchRL's would also make TorchRL's own
buffers accept it and TorchRL's private-tree code paths reach it, and would depend on
which library is imported first). A plain :class:`~mixreplay.ReplayBuffer` with a
prioritized sampler, whose batches carry no ``"index"``, refuses the trainers' question
instead (a ``TypeError`` naming these classes), where TorchRL's trainers would skip
every update without a word.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase, is_tensorclass
from tensordict.utils import expand_as_right

from mixreplay._validate import describe
from mixreplay.buffers.replay import _NOTHING_WRITTEN, DEFAULT_CAPACITY, ReplayBuffer, Sampled
from mixreplay.data_types import summarize
from mixreplay.errors import DataStructureError, PriorityError, RateLimitTimeoutError
from mixreplay.schema import NestedKey, normalize_key
from mixreplay.storages.items import ListStorage

__all__ = [
    "BOOKKEEPING",
    "INFO_ONLY",
    "TensorDictReplayBuffer",
    "check_priority_key",
    "reduce_priority",
]

#: what a sampler's info holds that TorchRL's does not: kept out of the batch (the info of
#: ``sample(return_info=True)`` still has it)
INFO_ONLY = frozenset({"weight"})
#: the entries this buffer sets into TensorDicts (by ``extend`` and ``sample``)
BOOKKEEPING = ("index", "priority_weight")

_MISSING: Any = object()

_REDUCTIONS = ("max", "min", "mean", "median")


def check_priority_key(key: Any) -> NestedKey:
    """``key`` if it names an entry (a string or a tuple of strings); ``TypeError`` otherwise."""
    try:
        parts = normalize_key(key)
    except (TypeError, ValueError):
        raise TypeError(
            f"priority_key must name an entry of the rows (a str, or a tuple of str for a "
            f"nested key), got {describe(key)}; e.g. priority_key='td_error'"
        ) from None
    if any(part == "" for part in parts):
        raise ValueError(
            f"priority_key={key!r} holds an empty name, which no entry has; name the entry "
            "holding a row's priority, e.g. priority_key='td_error'"
        )
    return key


def reduce_priority(priority: torch.Tensor, reduction: str, dim: int | None = None) -> torch.Tensor:
    """``priority`` reduced by TorchRL's ``reduction`` (over ``dim``, or all of it)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if reduction == "mean":
        priority = priority.float() if not priority.is_floating_point() else priority
        return priority.mean() if dim is None else priority.mean(dim)
    if dim is None:
        return getattr(priority, reduction)()
    out = getattr(priority, reduction)(dim)
    return out.values if reduction in ("max", "min", "median") else out


class TensorDictReplayBuffer(ReplayBuffer):
    """A :class:`~mixreplay.ReplayBuffer` of TensorDicts whose batches carry their slots.

    TorchRL's ``TensorDictReplayBuffer``, with its arguments and meaning: a sampled
    batch holds ``"index"`` (the slots drawn, ``int64``) and the sampler's per-row
    entries (``"priority_weight"`` for a :class:`~mixreplay.PrioritizedSampler`; a
    :class:`~mixreplay.SliceSampler`'s ``("next", "truncated")``, ``("next", "done")``,
    ...); ``extend(td)`` sets ``"index"`` into ``td`` and, when ``td`` holds the
    ``priority_key`` entry and the sampler is prioritized, gives the rows those
    priorities; :meth:`update_tensordict_priority` updates the priorities from a batch.
    With a sampler that has no priorities, priority entries are ignored, as in TorchRL.

    Keyword Args:
        priority_key: the entry holding a row's priority (TorchRL's ``"td_error"``, the
            key TorchRL's losses write).
        storage: as :class:`~mixreplay.ReplayBuffer`; TorchRL's default here,
            ``ListStorage(1000)``, when ``None`` (pass a
            :class:`~mixreplay.LazyTensorStorage` for rows of one structure: one
            ``index_select`` per batch).
        **kwargs: every other :class:`~mixreplay.ReplayBuffer` argument (``sampler``,
            ``batch_size``, ``prefetch``, ``pin_memory``, ``transform``, ``generator``,
            TorchRL's ``writer``, ``shared``, ...).

    ``update_priority(index, priority)`` sets priorities by slot, as on any buffer;
    called with one TensorDict, ``update_priority(batch)``, it is
    :meth:`update_tensordict_priority` (what several of TorchRL's training scripts
    write: TorchRL's own buffer raises a ``TypeError`` for it).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(10),
        ...     sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0),
        ...     batch_size=4, generator=0)
        >>> data = TensorDict(
        ...     {"obs": torch.arange(10.0), "td_error": (torch.arange(10) == 3) * 1000.0}, [10])
        >>> rb.extend(data).tolist() == data["index"].tolist()  # extend sets "index"
        True
        >>> batch = rb.sample()  # row 3 has all the priority
        >>> batch["index"].tolist(), sorted(batch.keys())
        ([3, 3, 3, 3], ['index', 'obs', 'priority_weight', 'td_error'])
        >>> batch["td_error"] = torch.zeros(4)  # what a loss writes
        >>> rb.update_tensordict_priority(batch)  # now every row has the same priority
        >>> sorted(set(rb.sample(100)["index"].tolist()))
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, *, priority_key: NestedKey = "td_error", storage: Any = None, **kwargs: Any):
        self.priority_key = check_priority_key(priority_key)
        if storage is None:
            storage = ListStorage(DEFAULT_CAPACITY)  # TorchRL's default storage
        super().__init__(storage=storage, **kwargs)

    # -- sampling: the info goes into the batch ---------------------------------------------

    def _sample_now(self, n: int, info: bool) -> Sampled:
        drawn = super()._sample_now(n, True)
        assert drawn.info is not None
        return Sampled(_with_info(drawn.batch, drawn.info), drawn.info if info else None)

    def sample(
        self,
        batch_size: int | None = None,
        return_info: bool = False,
        include_info: bool | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Draw a batch holding ``"index"`` and the sampler's per-row entries (TorchRL's).

        Args:
            batch_size: rows to draw (the buffer's ``batch_size`` if ``None``).
            return_info: also return the info (``(batch, info)``), as
                :meth:`ReplayBuffer.sample <mixreplay.ReplayBuffer.sample>`.
            include_info: TorchRL's deprecated switch: ``False`` leaves the entries out
                of the batch.
            timeout: with a rate limiter, seconds to wait for its band (``None``: no limit).
        """
        batch, info = super().sample(batch_size, return_info=True, timeout=timeout)
        if include_info is False and isinstance(batch, TensorDictBase):
            batch = batch.exclude(*(k for k in info.keys(True, True) if k not in INFO_ONLY))
        return (batch, info) if return_info else batch

    # -- writing: "index" into the data, priorities from it ---------------------------------

    def extend(
        self, data: Any, *, update_priority: bool | None = None, timeout: float | None = None
    ) -> torch.Tensor:
        """Write the rows of the TensorDict ``data``; set ``data["index"]``; return the slots.

        As TorchRL: write-side transforms run first; ``"index"`` is set into the
        TensorDict written (the slot of each row, expanded over its other dims); when it
        holds the ``priority_key`` entry and the sampler is prioritized, the rows get those
        priorities (checked before anything is written). ``update_priority=False`` skips
        that. ``timeout``: with a rate limiter, seconds to wait for its band.

        Raises:
            DataStructureError: ``data`` is not a TensorDict (also a ``ValueError``, as
                TorchRL's).
        """
        if not isinstance(data, TensorDictBase):
            raise DataStructureError(
                f"{type(self).__name__} only accepts TensorDictBase subclasses, got "
                f"{summarize(data)}: tensorclasses and other types go in a ReplayBuffer"
            )
        if self._gate is not None and not self._storage.holds_items:
            return self._extend_td_limited(data, update_priority, timeout)
        if self._transform.writes:
            data = self._transform.inv(data)
            if data is None or (isinstance(data, TensorDictBase) and data.shape[:1] == (0,)):
                return _NOTHING_WRITTEN.clone()
        priority = None
        if update_priority is None or update_priority:
            priority = data.get(self.priority_key, None) if self._sampler.prioritized else None
            if priority is not None:
                _check_values(priority, data.shape[0] if data.batch_dims else 1)
        index = self._write(self._without_bookkeeping(data), timeout)
        if self._storage.ndim > 1:  # a grid: each element's [step, column] in the storage
            return self._set_grid_index(data, index)
        _set_index(data, index)
        if priority is not None:
            self.update_priority(index, priority)
        return index

    def _set_grid_index(self, data: TensorDictBase, slots: torch.Tensor) -> torch.Tensor:
        """Set ``data["index"]`` of data written into a grid (its elements' ``[step, column]``,
        in ``data``'s own layout) and return TorchRL's ``[k, 2]`` index."""
        index = self._storage.grid_index(slots)
        dim = self._dim_extend
        shape = data.batch_size
        steps = shape[dim] if index.shape[0] == shape.numel() else None
        if steps is not None:  # not when more steps were written than the storage holds
            grid = index.view(steps, shape.numel() // steps, 2)
            value = grid.transpose(0, 1) if dim else grid
            value = value.reshape(*shape, 2)
            data.set("index", value.to(data.device) if data.device is not None else value)
        return index

    def _extend_td_limited(
        self, data: TensorDictBase, update_priority: bool | None, timeout: float | None
    ) -> torch.Tensor:
        """:meth:`extend` with a rate limiter: in the parts its band allows, each part's rows
        given their priorities as soon as they are in, so that a timeout part-way leaves the
        rows written with their priorities.

        Without write-side transforms, ``data["index"]`` is set at the end, also when the
        call times out: the slots of the rows written, ``-1`` for the rows not written. With
        write-side transforms, ``"index"`` goes into what the transforms returned for each
        part (as TorchRL sets it into the transform's output).
        """
        prioritized = self._sampler.prioritized and (update_priority is None or update_priority)
        key = self.priority_key
        if self._transform.writes:

            def stored(part: Any) -> Any:
                if not isinstance(part, TensorDictBase):
                    return part
                if prioritized:
                    priority = part.get(key, None)
                    if priority is not None:  # checked before the part is written
                        _check_values(priority, part.shape[0] if part.batch_dims else 1)
                return self._without_bookkeeping(part)

            def after(a: int, b: int, part: Any, index: torch.Tensor) -> None:
                if not isinstance(part, TensorDictBase):
                    return
                _set_index(part, index)
                priority = part.get(key, None) if prioritized else None
                if priority is not None:
                    self.update_priority(index, priority)

            return self._extend_limited(data, None, timeout, stored=stored, after=after)

        n = data.shape[0] if data.batch_dims else 1
        priority = data.get(key, None) if prioritized else None
        if priority is not None:
            _check_values(priority, n)  # before anything is written
            priority = torch.as_tensor(priority)
        cut = priority is not None and priority.ndim > 0 and priority.shape[0] == n

        def given(a: int, b: int, part: Any, index: torch.Tensor) -> None:
            if priority is not None:  # at once: a timeout later leaves these rows with theirs
                self.update_priority(index, priority[a:b] if cut else priority)

        try:
            index = self._extend_limited(
                self._without_bookkeeping(data), None, timeout, after=given
            )
        except RateLimitTimeoutError as err:
            if data.batch_dims and isinstance(err.index, torch.Tensor):
                slots = torch.full((n,), -1, dtype=torch.long)
                if err.index.numel() == err.written:
                    slots[: err.written] = err.index.reshape(-1)
                    _set_index(data, slots)
            raise
        _set_index(data, index)
        return index

    def add(self, data: Any, *, timeout: float | None = None) -> Any:
        """Write one row; for a TensorDict, set its ``"index"`` and read its priority entry."""
        if self._transform.writes:
            data = self._transform.inv(data)
            if data is None:
                return _NOTHING_WRITTEN.clone()
        priority = None
        if isinstance(data, TensorDictBase) and self._sampler.prioritized:
            priority = data.get(self.priority_key, None)
            if priority is not None:
                priority = torch.as_tensor(priority)
                priority = reduce_priority(priority, self._sampler.reduction)
                _check_values(priority, 1)
        row = self._without_bookkeeping(data) if isinstance(data, TensorDictBase) else data
        slots = self._write(self._one(row), timeout, step=True)
        if self._storage.ndim > 1:  # one step of a grid: TorchRL's [width, 2] index
            coords = self._storage.grid_index(slots)
            if isinstance(data, TensorDictBase) and data.batch_dims:
                data.set("index", coords.to(data.device) if data.device is not None else coords)
            return coords
        index = int(slots[0])
        if isinstance(data, TensorDictBase):
            data.set("index", torch.tensor(index, device=data.device))
        if priority is not None:
            self.update_priority(torch.tensor([index]), priority.reshape(1))
        return index

    def _stored_part(self, data: Any) -> Any:
        # a sampled batch written back in place carries "index": not a stored key
        return self._without_bookkeeping(data) if isinstance(data, TensorDictBase) else data

    def _without_bookkeeping(self, data: TensorDictBase) -> TensorDictBase:
        """``data`` without the entries this buffer sets (``"index"``, ``"priority_weight"``)
        that the stored rows lack: a TensorDict extended twice, or a sampled batch written back,
        carries them, and TorchRL's storage then quietly takes the key in (mixreplay's rows keep
        the keys of their first write). A first write leaves them out too: they say where a
        row was drawn or written, and every sample sets them afresh."""
        storage = self._storage
        if storage.holds_items:
            return data
        schema = storage.schema
        held = set() if schema is None else {f.key for f in schema.fields}
        extra = [k for k in BOOKKEEPING if k in data.keys() and (k,) not in held]
        return data.exclude(*extra) if extra else data

    # -- priorities -------------------------------------------------------------------------

    def update_priority(self, index: Any, priority: Any = _MISSING) -> None:
        """Set the priorities of slots ``index``; with one TensorDict, read them from it.

        ``update_priority(index, priority)`` is :meth:`ReplayBuffer.update_priority
        <mixreplay.ReplayBuffer.update_priority>`. ``update_priority(batch)`` with a
        sampled TensorDict is :meth:`update_tensordict_priority` (TorchRL's scripts call
        it that way; TorchRL's own buffer raises a ``TypeError`` there).
        """
        if priority is _MISSING:
            if isinstance(index, TensorDictBase):
                self.update_tensordict_priority(index)
                return
            raise TypeError(
                f"{type(self).__name__}.update_priority() takes (index, priority), or one "
                f"sampled TensorDict, got {summarize(index)} alone; pass the priorities too"
            )
        super().update_priority(index, priority)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update the priorities of the rows ``data`` was sampled from (TorchRL's method).

        Reads ``data["index"]`` (the slots, as :meth:`sample` set them) and the
        ``priority_key`` entry (e.g. the TD error TorchRL's losses write there), reduced
        per row with the sampler's ``reduction`` (``"max"`` by default) when it holds
        several values; a batch without that entry gives its rows the priority of new
        rows. Does nothing when the sampler has no priorities, as in TorchRL.
        """
        if not self._sampler.prioritized:
            return
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"update_tensordict_priority takes a sampled TensorDict (with 'index' and "
                f"{self.priority_key!r}), got {summarize(data)}; for slots and values call "
                "update_priority(index, priority)"
            )
        reduction = self._sampler.reduction
        raw = data.get(self.priority_key, None)
        if data.batch_dims:
            n = data.shape[0]
            if raw is None:
                priority = torch.full((n,), float(self._sampler.default_priority))
            else:
                priority = reduce_priority(torch.as_tensor(raw).reshape(n, -1), reduction, dim=1)
        else:
            if raw is None:
                priority = torch.tensor(float(self._sampler.default_priority))
            else:
                priority = reduce_priority(torch.as_tensor(raw), reduction)
        index = data.get("index", None)
        if index is None:
            raise KeyError(
                f"update_tensordict_priority needs the batch's 'index' entry (the slots "
                f"{type(self).__name__}.sample() sets), and this TensorDict has none (keys "
                f"{sorted(map(str, data.keys()))[:8]}); pass a batch as sample() returned it, "
                "or call update_priority(index, priority) with the slots"
            )
        while index.shape != priority.shape and index.ndim > priority.ndim:
            index = index[..., 0]  # TorchRL's: rows of [T] carry their slot T times
        self.update_priority(index.reshape(-1), priority.reshape(-1))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"batch_size={self._batch_size}, priority_key={self.priority_key!r})"
        )


def _with_info(batch: Any, info: TensorDictBase) -> Any:
    """``batch`` with TorchRL's info entries set into it (``"index"``, ``"priority_weight"``,
    a slice sampler's entries), each expanded over the batch's other dims."""
    if is_tensorclass(batch):
        return batch  # TorchRL leaves a tensorclass batch as it is
    if not isinstance(batch, TensorDictBase):
        raise DataStructureError(
            f"Cannot include info in non-tensordict data: a TensorDictReplayBuffer batch is a "
            f"TensorDict, got {summarize(batch)}; store TensorDicts, or use a ReplayBuffer "
            "(sample(return_info=True) gives the info beside the batch)"
        )
    locked = batch.is_locked
    if locked:
        batch.unlock_()
    try:
        for key, value in info.items(include_nested=True, leaves_only=True):
            if key in INFO_ONLY:
                continue
            if value.ndim < batch.ndim:
                value = expand_as_right(value, batch)
            try:
                batch.set(key, value)
            except RuntimeError as err:
                raise RuntimeError(
                    "Failed to set the metadata (e.g., indices or weights) in the sampled "
                    "tensordict within TensorDictReplayBuffer.sample: a transform probably "
                    f"changed the batch's shape ({err}); sample(return_info=True) of a "
                    "ReplayBuffer gives the info beside the batch"
                ) from err
    finally:
        if locked:
            batch.lock_()
    return batch


def _set_index(data: TensorDictBase, index: torch.Tensor) -> None:
    """TorchRL's ``"index"`` in the TensorDict written: each row's slot, over its other dims."""
    if index.numel() != (data.shape[0] if data.batch_dims else 1):
        return  # a write of more rows than the storage holds: the slots repeat; TorchRL's too
    value = index.to(data.device) if data.device is not None else index
    data.set("index", expand_as_right(value, data) if data.batch_dims else value.reshape(()))


def _check_values(priority: Any, n: int) -> None:
    """Refuse, before anything is written, priorities that cannot be given to ``n`` rows."""
    p = torch.as_tensor(priority)
    if p.numel() not in (1, n):
        raise PriorityError(
            f"the priority entry has shape {list(p.shape)}, which gives no single priority to "
            f"each of the {n} rows written; give it shape [{n}] (or [{n}, 1]), or extend with "
            "update_priority=False"
        )
    if p.is_floating_point() and not bool(torch.isfinite(p).all()):
        raise PriorityError(
            "the priority entry holds NaN or infinite values; nothing was written (check the "
            "loss, or extend with update_priority=False)"
        )
