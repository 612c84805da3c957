"""Prioritized sampling (Schaul et al., 2016): rows drawn in proportion to ``priority ** alpha``."""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import torch

from mixreplay._validate import check_bool, check_int, check_real, check_saved_int, describe
from mixreplay.errors import CheckpointError, EmptyBufferError, PriorityError
from mixreplay.samplers._torchrl import Table, check_torchrl_kwargs
from mixreplay.samplers.base import Sampler
from mixreplay.samplers.sumtree import SumTree
from mixreplay.storages.base import Storage

__all__ = ["PrioritizedSampler"]

_UNSET: Any = object()
_DBL_MAX = torch.finfo(torch.float64).max
_TINY = 5e-324  # the smallest positive float64: a clamp to [_TINY, largest] moves 0 and NaN
_TINY32 = torch.finfo(torch.float32).tiny  # the smallest normal positive float32

#: TorchRL 0.14 PrioritizedSampler arguments mixreplay has no use for
_TORCHRL: Table = {
    "dtype": (
        (torch.float32, torch.float64),
        "mixreplay keeps priorities in float64 whatever dtype= says (sums over millions of "
        "rows stay exact); drop dtype=",
    ),
    "reduction": (
        ("max", "min", "median", "mean"),
        "it reduces the values of a row's priority entry to one (TensorDictReplayBuffer)",
    ),
    "replacement": (
        (True,),
        "PrioritizedSampler has no without-replacement variant; cannot be instantiated with "
        "replacement=False (drop replacement=, or use SamplerWithoutReplacement)",
    ),
}


#: more slots than any tree is built for: a storage this large is an unbounded one
_MOST_SLOTS = 1 << 48


def _largest(capacity: int) -> float:
    """The largest ``p`` a tree of ``capacity`` slots holds: any sum of them stays finite."""
    return _DBL_MAX / (2.0 * capacity)


class PrioritizedSampler(Sampler):
    """Rows drawn with probability ``P(i) = p_i / sum(p)``, ``p_i = (|priority_i| + eps) ** alpha``.

    A new row gets the largest ``p`` assigned so far (1.0 at first), so it is
    likely to be drawn at least once before its priority is known; with
    ``max_priority_within_buffer=True``, the largest ``p`` among the rows the
    buffer holds then (rows being overwritten excluded; 1.0 when none is left).
    Priorities
    live in a :class:`~mixreplay.samplers.sumtree.SumTree` of the storage's
    capacity, on the storage's device. Rows that reach the storage without
    :meth:`on_extend` (a frozen offline dataset, rows written before the sampler
    was attached) get that default priority when the sampler next sees the
    storage, and so do all rows after the storage's rows were restored without
    this sampler's state.

    Sampling is *stratified*: ``[0, total)`` is cut into ``n`` equal segments
    and one row is drawn in each, so a batch covers the distribution more evenly
    than ``n`` independent draws; the segments are visited in a random order,
    so positions in the batch are exchangeable. ``stratified=False`` draws
    ``n`` independent proportional samples instead.

    Importance weights are normalized over the *buffer*, as in PER and TorchRL:
    with ``N`` the rows held and ``P(j)`` their sampling probabilities,

        ``w_i = (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta = (min_j p_j / p_i) ** beta``,

    the maximum (the minimum ``p``) taken over every row held, not over the
    batch. At ``beta = 1`` the weighted mean of any function of the rows over
    many batches equals its mean under uniform sampling, whatever the priorities;
    ``beta > 1`` over-corrects (TorchRL allows it, its tutorial uses 1.1).
    Weights lie in ``(0, 1]``; the rows of lowest priority get 1. The tree keeps
    the minimum beside the sums, so this costs no scan of the buffer.

    ``alpha`` and ``beta`` can be changed at any time (annealing, e.g. by
    TorchRL's ``LinearScheduler``): a new ``beta`` applies to the next weights;
    a new ``alpha`` turns every stored ``p`` into ``(|priority| + eps) ** alpha``
    at once (``p ** (new / old)``, one pass over the tree, taken under the
    storage's lock). From ``alpha = 0`` every stored ``p`` is 1 and the
    priorities cannot be recovered: they stay 1 until next updated (a
    ``UserWarning`` says so, as TorchRL does). Both are saved in checkpoints.

    A priority update addresses slots: if a slot was overwritten between the
    draw and the update, the new row receives the priority. An update is checked
    whole before anything changes (:meth:`check_priority`): a NaN or infinite
    priority, or one whose ``p`` would make the sum of the tree overflow
    (``p > 1.797e308 / (2 * capacity)``: only ratios of priorities matter, so
    scale them down), raises ``ValueError`` naming its position.

    Args:
        alpha: how strongly priorities shape the distribution (0 is uniform), ``>= 0``;
            settable (``sampler.alpha = 0.5``).
        beta: importance-weight exponent, ``>= 0`` (1 fully corrects the bias);
            settable (``sampler.beta = 1.0``) to anneal it.
        eps: added to ``|priority|`` so no row has probability 0, ``> 0``.

    Keyword Args:
        max_capacity: TorchRL's first argument: the capacity of the storage this
            sampler serves. Optional here (the tree takes the storage's size);
            when given, a storage of another ``max_size`` is refused.
        stratified: one draw per equal segment of the total (default) or plain
            independent draws.
        device: TorchRL's tree device; the tree lives on the storage's device,
            so it is only checked against the storage's.
        max_priority_within_buffer: new rows get the largest priority among the
            rows held (TorchRL's meaning) instead of the largest ever assigned.

    TorchRL's spelling works as is: ``PrioritizedSampler(max_capacity=N, alpha=a,
    beta=b)`` or positionally ``PrioritizedSampler(N, a, b)``. Positional
    arguments are read in TorchRL's order (``max_capacity, alpha, beta, eps``)
    when the first is an integer, in mixreplay's (``alpha, beta, eps``) otherwise.
    Called TorchRL's way (with ``max_capacity``), ``alpha`` and ``beta`` are
    required and ``eps`` defaults to TorchRL's ``1e-8``; otherwise the defaults
    are ``alpha=0.6, beta=0.4, eps=1e-6``. TorchRL's ``dtype`` is accepted with the
    values that mean what mixreplay does (priorities are always float64), and
    ``replacement=True``; any other value is refused with a ``TypeError``. TorchRL's
    ``reduction`` (``"max"``, ``"min"``, ``"mean"``, ``"median"``) is kept as
    :attr:`reduction`: a :class:`~mixreplay.TensorDictReplayBuffer` reduces a row's
    priority entry that holds several values with it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> from mixreplay.samplers import PrioritizedSampler
        >>> sampler = PrioritizedSampler(alpha=1.0, beta=1.0)
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, generator=0)
        >>> _ = rb.extend(TensorDict({"x": torch.arange(8)}, [8]))
        >>> rb.update_priority(torch.arange(8), torch.tensor([0., 0, 0, 0, 0, 0, 0, 100]))
        >>> batch, info = rb.sample(4, return_info=True)
        >>> batch["x"].tolist()
        [7, 7, 7, 7]
        >>> w = (1e-6 / (100 + 1e-6)) ** 1.0  # (min_j p_j / p_7) ** beta, p = |priority| + eps
        >>> torch.allclose(info["weight"], torch.full((4,), w))
        True
        >>> PrioritizedSampler(max_capacity=8, alpha=0.7, beta=0.5)  # TorchRL's spelling
        PrioritizedSampler(max_capacity=8, alpha=0.7, beta=0.5, eps=1e-08, stratified=True)
    """

    unit = 1
    prioritized = True

    def __init__(
        self,
        *args: Any,
        max_capacity: int | None = _UNSET,
        alpha: float = _UNSET,
        beta: float = _UNSET,
        eps: float = _UNSET,
        stratified: bool = True,
        device: torch.device | str | None = None,
        max_priority_within_buffer: bool = False,
        **torchrl_kwargs: Any,
    ):
        given = _arguments(
            args, {"max_capacity": max_capacity, "alpha": alpha, "beta": beta, "eps": eps}
        )
        check_torchrl_kwargs("PrioritizedSampler", torchrl_kwargs, _TORCHRL)
        self._reduction: str = torchrl_kwargs.get("reduction", "max")
        self._max_capacity = (
            None
            if given.get("max_capacity") is None
            else check_int(
                given["max_capacity"],
                "PrioritizedSampler max_capacity",
                min=1,
                hint="it is the max_size of the storage this sampler serves",
            )
        )
        torchrl_way = self._max_capacity is not None
        if torchrl_way:
            missing = [k for k in ("alpha", "beta") if k not in given]
            if missing:
                raise TypeError(
                    f"PrioritizedSampler called TorchRL's way (max_capacity="
                    f"{self._max_capacity}, alpha, beta, eps) is missing "
                    f"{' and '.join(missing)}; pass them, or call it mixreplay's way "
                    "without max_capacity: PrioritizedSampler(alpha=0.6, beta=0.4)"
                )
        defaults = {"alpha": 0.6, "beta": 0.4, "eps": 1e-8 if torchrl_way else 1e-6}
        given = {**defaults, **given}
        self._alpha = _alpha(given["alpha"])
        self.beta = given["beta"]
        self._eps = check_real(given["eps"], "PrioritizedSampler eps", min=0.0, open_min=True)
        self._stratified = check_bool(stratified, "PrioritizedSampler stratified")
        self._within = check_bool(
            max_priority_within_buffer, "PrioritizedSampler max_priority_within_buffer"
        )
        self._device_arg = None if device is None else _device(device)
        self._tree: SumTree | None = None
        self._filled = 0  # slots [0, _filled) hold a priority
        self._seen: int | None = 0  # the storage's write_count when last synced
        self._generation: int | None = None  # its generation then (None: adopt it)
        self._max_raw: float | None = None  # the largest |priority| assigned (None: none yet)
        self._max_priority = 1.0  # what new rows get: (_max_raw + eps) ** alpha, 1.0 at first
        self._pending: tuple[torch.Tensor, int] | None = None  # loaded before a storage was seen
        self._lock: Any = None  # the storage's lock, taken when alpha changes the tree
        self._device_state_reset()

    # -- updates checked on the device (no host synchronisation) ---------------------------

    #: check updates the device way on a CPU tree too (for tests: the same results)
    _defer_checks = False
    #: class defaults: samplers pickled before device checks existed load
    _max_raw_t: torch.Tensor | None = None
    _raw_floor = 0.0
    _refused: torch.Tensor | None = None
    _p_new: tuple[Any, torch.Tensor] | None = None

    def _device_state_reset(self) -> None:
        self._max_raw_t = None  # the largest |priority| assigned, on the device (None: on host)
        self._raw_floor = 0.0  # what _max_raw_t had to exceed to count (the host's at start)
        self._refused = None  # updates refused on the device since the last check_refused()
        self._p_new = None  # (key, the p of new rows as a 0-d tensor on the tree's device)

    def _settle(self) -> None:
        """Read back what device updates left on the device (the running max): one host sync,
        outside the steady state (properties, state, alpha changes, restores)."""
        t = self._max_raw_t
        if t is not None:
            value = float(t)
            if value > self._raw_floor:
                self._max_raw = value
                self._max_priority = self._from_raw(value)
            self._max_raw_t = None
            self._p_new = None

    def check_refused(self) -> None:
        """Raise the error of priority updates refused on the device since the last call.

        On a CPU tree an invalid update raises at once. On another device (CUDA) the
        checks run on the device, so that ``update_priority`` never waits for it: an
        invalid update (a NaN or infinite priority, one that would overflow the tree
        or underflow to 0, a slot that holds no row) is refused whole, the priorities
        stay as they were, and the error is raised here, by :meth:`state_dict`, or
        at the latest by the next checkpoint.

        Raises:
            PriorityError: how many updates were refused since the last call.
        """
        refused = self._refused
        if refused is None:
            return
        count = int(refused)
        self._refused = None
        if count:
            raise PriorityError(
                f"{count} priority update(s) were refused on {refused.device} and left the "
                "priorities unchanged: a priority was NaN or infinite, its (|priority| + eps) "
                "** alpha overflowed the tree or underflowed to 0, or a slot held no row "
                f"(valid: 0..{self._filled - 1}); check the loss and the indices passed (on "
                "the CPU the update raises at once, naming the position)"
            )

    def _new_p(self, tree: SumTree) -> torch.Tensor:
        """The ``p`` of new rows as a 0-d tensor on the tree's device (cached)."""
        t = self._max_raw_t
        key: Any = ("device", t) if t is not None else (self._max_priority, tree.device)
        cached = self._p_new
        if cached is not None and cached[0] == key and cached[1].device == tree.device:
            return cached[1]
        if t is not None:  # the host's value until an update raised the max
            value = torch.where(
                t > self._raw_floor, (t + self._eps).pow(self._alpha), self._max_priority
            )
        else:
            value = _scalar(self._max_priority, tree)
        self._p_new = (key, value)
        return value

    # -- configuration ---------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        """How strongly priorities shape the distribution; settable (see the class docs)."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        new = _alpha(value)
        lock = self._lock
        if lock is None:
            self._set_alpha(new)
        else:
            with lock:
                self._set_alpha(new)
        self.settings_version += 1

    def _set_alpha(self, new: float) -> None:
        self._settle()
        old = self._alpha
        if new == old:
            return
        tree = self._tree
        if tree is not None:
            held = tree.leaves[: self._filled]
        elif self._pending is not None:
            held = self._pending[0]
        else:
            held = torch.empty(0, dtype=torch.float64)
        written = bool((held > 0).any()) if held.numel() else False
        values = None
        if written and old == 0.0:
            warnings.warn(
                f"PrioritizedSampler alpha changed away from 0 (to {new:g}) while rows hold "
                "priorities: at alpha=0 every stored (|priority| + eps) ** alpha is 1, so the "
                "priorities cannot be recovered; those rows are sampled uniformly until their "
                "priority is next updated",
                UserWarning,
                stacklevel=3,
            )
        elif written:
            values = torch.where(held > 0, held.pow(new / old), held)
            capacity = tree.capacity if tree is not None else max(held.numel(), 1)
            largest = _largest(capacity)
            top = float(values.max())
            if not top <= largest:
                raise ValueError(
                    f"PrioritizedSampler alpha={new:g} would raise the largest stored "
                    f"(|priority| + eps) ** alpha to {top:.4g}, more than a tree of {capacity} "
                    f"slots can sum (at most {largest:.4g}); scale the priorities down, only "
                    "their ratios matter"
                )
        # -- nothing below can fail
        if values is not None:
            if tree is not None:
                tree.set_leaves(values)
            else:
                assert self._pending is not None
                self._pending = (values, self._pending[1])
        self._alpha = new
        self._max_priority = self._from_raw(self._max_raw)

    def _from_raw(self, raw: float | None) -> float:
        """The ``p`` of a raw priority (1.0 for ``None``: none assigned yet)."""
        return 1.0 if raw is None else (raw + self._eps) ** self._alpha

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def beta(self) -> float:
        """The importance-weight exponent, ``>= 0``; settable (annealing)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_real(value, "PrioritizedSampler beta", min=0.0)
        self.settings_version += 1

    @property
    def device(self) -> torch.device | None:
        """Where the tree lives (TorchRL's ``device``): the storage's device once attached,
        the ``device=`` given before (``None``: not known yet)."""
        return self._tree.device if self._tree is not None else self._device_arg

    @property
    def reduction(self) -> str:
        """How a :class:`~mixreplay.TensorDictReplayBuffer` reduces a row's priority entry
        holding several values to one (TorchRL's ``reduction``: ``"max"`` by default)."""
        return self._reduction

    @property
    def max_priority_within_buffer(self) -> bool:
        """Whether new rows get the largest priority held (else the largest ever assigned)."""
        return self._within

    @property
    def stratified(self) -> bool:
        return self._stratified

    @property
    def max_capacity(self) -> int | None:
        """TorchRL's ``max_capacity``: the storage size given at construction, or ``None``."""
        return self._max_capacity

    @property
    def max_size(self) -> int | None:
        """The capacity of the tree: the storage's ``max_size`` once attached (TorchRL's name)."""
        return self._tree.capacity if self._tree is not None else self._max_capacity

    @property
    def max_priority(self) -> float:
        """The ``(|priority| + eps) ** alpha`` new rows get: the largest assigned so far,
        or with ``max_priority_within_buffer`` the largest the rows held have (1.0 at first)."""
        if self._within and self._tree is not None:
            top = float(self._tree.max_tensor())
            return top if top > 0 else 1.0
        self._settle()
        return self._max_priority

    @property
    def default_priority(self) -> float:
        """TorchRL's name: the raw priority new rows get, before ``(p + eps) ** alpha``."""
        if self._within and self._tree is not None:
            top = float(self._tree.max_tensor())
            if top > 0 and self._alpha > 0:
                return max(top ** (1.0 / self._alpha) - self._eps, 0.0)
        self._settle()
        return 1.0 if self._max_raw is None else self._max_raw

    @property
    def tree(self) -> SumTree | None:
        """The sum tree of ``p`` values (``None`` before the sampler first sees a storage)."""
        return self._tree

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "stratified": self._stratified,
        }
        if self._within:  # only when set: checkpoints saved before it existed still match
            out["max_priority_within_buffer"] = True
        return out

    def __getstate__(self) -> dict[str, Any]:
        self._settle()
        # a lock does not pickle (attach sets it again); the new rows' p is rebuilt on use
        return {**self.__dict__, "_lock": None, "_p_new": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # samplers pickled before these fields existed
        state.setdefault("_within", False)
        state.setdefault("_reduction", "max")
        state.setdefault("_lock", None)
        if "_max_raw" not in state:
            state["_max_raw"] = _raw_of(
                state.get("_max_priority", 1.0), state.get("_alpha", 1.0), state.get("_eps", 0.0)
            )
        self.__dict__.update(state)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        if self._max_capacity is not None:
            args = f"max_capacity={self._max_capacity}, {args}"
        return f"PrioritizedSampler({args})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PrioritizedSampler)
            and self.config() == other.config()
            and self._max_capacity == other._max_capacity
        )

    __hash__ = object.__hash__

    # -- the storage -----------------------------------------------------------------------

    def attach(self, storage: Storage) -> None:
        """Size the tree by ``storage`` (checked against ``max_capacity``) and put it on its device."""
        self._bind(storage)
        self._lock = storage.lock

    def _bind(self, storage: Storage) -> SumTree:
        capacity, device = storage.max_size, storage.device
        if storage.ndim > 1:
            raise ValueError(
                f"PrioritizedSampler does not serve an ndim={storage.ndim} storage (its capacity is "
                "fixed by its first write, its trees by the storage when attached); store the "
                "rows in an ndim=1 storage (extend data.reshape(-1), env by env)"
            )
        if capacity > _MOST_SLOTS:
            raise ValueError(
                f"PrioritizedSampler keeps one priority per slot and cannot serve a storage of "
                f"unbounded size ({type(storage).__name__} with max_size={capacity}); give the "
                f"storage a max_size, e.g. {type(storage).__name__}(1_000_000)"
            )
        if self._max_capacity is not None and capacity != self._max_capacity:
            raise ValueError(
                f"PrioritizedSampler(max_capacity={self._max_capacity}) cannot serve a storage "
                f"of max_size {capacity}; build it with max_capacity={capacity} (or without "
                "max_capacity: the tree takes the storage's size)"
            )
        if self._device_arg is not None and device != self._device_arg:
            raise ValueError(
                f"PrioritizedSampler(device={str(self._device_arg)!r}) cannot serve a storage on "
                f"{device}: the tree lives on the storage's device; drop device="
            )
        tree = self._tree
        if tree is None:
            pending = self._pending
            if pending is not None and pending[1] != capacity:
                raise CheckpointError(
                    f"the PrioritizedSampler state loaded into this sampler was saved for a "
                    f"storage of max_size {pending[1]}, this storage has {capacity}; build the "
                    "storage with the saved capacity"
                )
            tree = SumTree(capacity, device=device, track_max=self._within)
            if pending is not None:
                tree.set_leaves(pending[0])
                self._pending = None
            self._tree = tree
        elif tree.capacity != capacity:
            raise ValueError(
                f"this PrioritizedSampler tracks a storage of max_size {tree.capacity}, got one of "
                f"max_size {capacity}; use one sampler per source"
            )
        elif tree.device != device:
            tree.to(device)
        return tree

    def _in_sync(self, storage: Storage) -> bool:
        return (
            self._tree is not None
            and self._generation == storage.generation
            and self._seen == storage.write_count
            and self._filled == len(storage)
        )

    def _sync(self, storage: Storage) -> SumTree:
        """Match the tree to the rows the storage holds now (writes behind our back, emptying, restores)."""
        tree = self._bind(storage)
        n, filled, cap = len(storage), self._filled, tree.capacity
        written, generation = storage.write_count, storage.generation
        if self._generation is not None and generation != self._generation:
            # the rows were restored or emptied without this sampler's state: no priority is known
            self._settle()
            p = 1.0 if self._within else self._max_priority
            values = torch.full((n,), p, dtype=torch.float64, device=tree.device)
            tree.set_leaves(values)
        else:
            if n < filled:  # the storage was emptied
                tree.assign(torch.arange(n, filled, device=tree.device), _scalar(0.0, tree))
            if written != self._seen:
                # the last `new` writes ended just before the cursor
                seen = self._seen
                new = min(written - seen, n) if seen is not None and written > seen else n
                cursor = storage.cursor
                slots = torch.arange(cursor - new, cursor, device=tree.device) % cap
                self._assign_new(tree, slots)
        self._filled, self._seen, self._generation = n, written, generation
        return tree

    def on_extend(self, index: torch.Tensor, storage: Storage) -> None:
        tree = self._tree
        k = index.numel()
        if (
            tree is not None
            and self._generation == storage.generation
            and self._seen is not None
            and self._seen + k == storage.write_count
            and len(storage) == min(tree.capacity, self._filled + k)
        ):
            self._assign_new(tree, index.reshape(-1).to(tree.device))
            self._filled, self._seen = len(storage), storage.write_count
        else:
            self._sync(storage)

    def _assign_new(self, tree: SumTree, slots: torch.Tensor) -> None:
        """Give freshly written slots the priority of new rows."""
        if not self._within:
            tree.assign(slots, self._new_p(tree), positive=True)
            return
        tree.assign(slots, _scalar(0.0, tree))  # the rows they overwrote leave the buffer
        top = tree.max_tensor()
        tree.assign(slots, torch.where(top > 0, top, torch.ones_like(top)), positive=True)

    # -- sampling --------------------------------------------------------------------------

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        tree = self._tree
        if tree is None or not self._in_sync(storage):
            tree = self._sync(storage)
        if self._filled == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        gdev = generator.device
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=gdev)
        strata = 1
        if self._stratified:
            # a float64 permutation: the same draws as an int64 one, and no cast in the add;
            # the tree divides by n in the factor it scales the sums with
            perm = torch.randperm(n, generator=generator, device=gdev, dtype=torch.float64)
            u.add_(perm)
            strata = n
        if u.device != tree.device:
            u = u.to(tree.device)
        return tree.sample(u, strata)

    def weight(self, index: torch.Tensor, storage: Storage) -> torch.Tensor:
        """Importance weights ``(min_j p_j / p_i) ** beta``, ``j`` over every row held (float32, in ``(0, 1]``)."""
        tree = self._tree
        if tree is None or not self._in_sync(storage):
            tree = self._sync(storage)
        if index.dim() != 1 or index.device != tree.device or index.dtype != torch.int64:
            index = index.reshape(-1).to(device=tree.device, dtype=torch.int64)
        p = tree.values_at(index)  # no gather when `index` is what sample() just returned
        if self._beta == 0.0:
            return torch.ones(p.shape, dtype=torch.float32, device=p.device)
        w = torch.div(tree.min_tensor(), p)
        if self._beta != 1.0:
            w = w.pow_(self._beta)
        # a row ~1e38 times likelier than the rarest one would underflow to a weight of 0,
        # which zeroes its loss: the smallest float32 above 0 keeps weights in (0, 1]
        return w.to(torch.float32).clamp_(min=_TINY32)

    # -- priorities ------------------------------------------------------------------------

    def check_priority(
        self, index: torch.Tensor, priority: torch.Tensor, *, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Validate an update without applying it; return it ready for :meth:`apply_priority`.

        The returned value is opaque: pass it to :meth:`apply_priority` of this sampler.

        Args:
            index: int slots, as returned by :meth:`sample`.
            priority: one finite value per slot (same number of elements, e.g.
                ``|td_error|`` of shape ``[B]`` or ``[B, 1]``), or one scalar for all.

        Keyword Args:
            positions: the caller's position of each entry, named in errors (default:
                its position in ``priority``).

        Raises:
            TypeError: non-integer slots or non-real priorities.
            ValueError: the sizes differ; or a priority is NaN or infinite, or its
                ``(|priority| + eps) ** alpha`` overflows the tree or underflows to 0
                (the error's ``position`` attribute is the first bad position).
            IndexError: a slot holds no row.

        On a tree off the CPU (a CUDA storage) nothing is read back: an invalid update
        is refused whole on the device and raised later by :meth:`check_refused`.
        """
        index = torch.as_tensor(index)
        if index.dtype.is_floating_point or index.dtype == torch.bool or index.dtype.is_complex:
            raise TypeError(f"index must hold integer slots, got dtype {index.dtype}")
        priority = torch.as_tensor(priority)
        if priority.requires_grad:
            priority = priority.detach()
        if priority.numel() != 1 and priority.numel() != index.numel():
            raise ValueError(
                f"priority has shape {list(priority.shape)} but index has shape {list(index.shape)}; "
                "pass one priority per index (or a single scalar)"
            )
        if priority.dtype == torch.bool or priority.is_complex():
            raise TypeError(f"priority must be a real-valued tensor, got dtype {priority.dtype}")
        tree = self._tree
        device = tree.device if tree is not None else priority.device
        # (each call below is a torch op of a few µs: those that would change nothing are skipped)
        if index.dim() != 1:
            index = index.reshape(-1)
        if index.dtype != torch.int64 or index.device != device:
            index = index.to(device=device, dtype=torch.int64)
        raw = priority.reshape(-1) if priority.dim() != 1 else priority
        if raw.dtype != torch.float64 or raw.device != device:
            raw = raw.to(device=device, dtype=torch.float64)
        magnitude = raw.abs()
        largest = _largest(tree.capacity if tree is not None else 1)
        if (
            tree is not None
            and (self._defer_checks or tree.device.type != "cpu")
            and index.numel()
            and self._filled
        ):
            hi_raw_t = magnitude.max()
            return self._check_on_device(tree, index, hi_raw_t, self._p_of(magnitude), largest)
        hi_raw = 0.0
        if magnitude.numel():
            # read on the host (a CPU tensor: no wait): the bounds of |priority| give those of
            # p, as (x + eps) ** alpha is monotone; the tensors decide at the bounds' edges
            lo_t, hi_t = torch.aminmax(magnitude)
            lo_raw, hi_raw = float(lo_t), float(hi_t)
            lo, hi = _pow(lo_raw + self._eps, self._alpha), _pow(hi_raw + self._eps, self._alpha)
            p = self._p_of(magnitude)
            if not (lo > 0.0 and hi <= largest):  # NaN fails both
                self._priority_error(raw, p, largest, positions)
        else:
            p = magnitude
        if index.numel():
            if tree is None and self._pending is not None:
                raise IndexError(
                    "cannot update priorities yet: this sampler's state was loaded before it saw "
                    "its storage; attach it (sampler.attach(storage)) or sample from it first"
                )
            filled = self._filled if tree is not None else 0
            first_t, last_t = torch.aminmax(index)
            first, last = int(first_t), int(last_t)
            if first < 0 or last >= filled:
                valid = f"valid slots: 0..{filled - 1}" if filled else "sample from it first"
                raise IndexError(
                    f"cannot update the priority of slot {first if first < 0 else last}: the "
                    f"source holds {filled} rows ({valid})"
                )
        if p.numel() == 1:
            p = p.expand(index.numel())
        return index, p, hi_raw

    def _p_of(self, magnitude: torch.Tensor) -> torch.Tensor:
        """``(magnitude + eps) ** alpha``, in place (``magnitude`` is a fresh ``abs``)."""
        p = magnitude.add_(self._eps)
        return p if self._alpha == 1.0 else p.pow_(self._alpha)

    def _check_on_device(
        self,
        tree: SumTree,
        index: torch.Tensor,
        hi_raw_t: torch.Tensor,
        p: torch.Tensor,
        largest: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`check_priority` without reading anything back: an invalid update becomes
        one that rewrites every slot it names (clamped into range) with the value it holds,
        and is counted for :meth:`check_refused`."""
        n = index.numel()
        if p.numel() == 1:
            p = p.expand(n)
        slots = index.clamp(0, self._filled - 1)
        # NaN, 0 (an underflow) and overflows all move under a clamp to (0, largest]
        ok = torch.logical_and(torch.eq(p.clamp(_TINY, largest), p), torch.eq(slots, index)).all()
        p = torch.where(ok, p, tree.get_unchecked(slots))
        hi_raw = torch.where(ok, hi_raw_t, 0.0)
        refused = self._refused
        self._refused = (
            ok.logical_not().long() if refused is None else refused.add_(ok.logical_not())
        )
        return slots, p, hi_raw

    def _priority_error(
        self,
        raw: torch.Tensor,
        p: torch.Tensor,
        largest: float,
        positions: torch.Tensor | None,
    ) -> None:
        def where(bad: torch.Tensor) -> list[int]:
            at = bad.nonzero().reshape(-1)[:5].cpu()
            if positions is not None:
                at = torch.as_tensor(positions).reshape(-1).cpu()[at]
            return [int(i) for i in at]

        bad = ~torch.isfinite(raw)
        if bool(bad.any()):
            at = where(bad)
            err = PriorityError(
                f"priority must be finite, got {raw[bad][:5].tolist()} at positions {at}; "
                "check the loss for NaN/inf before updating priorities",
                position=at[0],
            )
        elif bool((p > largest).any()):
            bad = p > largest
            at = where(bad)
            cap = self._tree.capacity if self._tree is not None else 1
            err = PriorityError(
                f"priority {raw[bad][:5].tolist()} at positions {at} gives (|priority| + eps) ** "
                f"alpha = {p[bad][:5].tolist()}, more than a tree of {cap} slots can sum without "
                f"overflowing (at most {largest:.4g}); scale the priorities down, only their "
                "ratios matter",
                position=at[0],
            )
        elif bool((p > 0).all()):
            return  # the host's bounds rounded past an edge the tensors are within: accept
        else:
            bad = ~(p > 0)
            at = where(bad)
            err = PriorityError(
                f"priority {raw[bad][:5].tolist()} at positions {at} gives (|priority| + eps) ** "
                f"alpha = 0 (eps={self._eps:g}, alpha={self._alpha:g} underflow): such a row could "
                "never be drawn; raise eps or lower alpha",
                position=at[0],
            )
        raise err

    def apply_priority(self, checked: tuple[torch.Tensor, torch.Tensor, Any]) -> None:
        """Apply an update :meth:`check_priority` returned."""
        index, p, hi_raw = checked
        if index.numel() == 0:
            return
        tree = self._tree
        assert tree is not None  # check_priority found rows, so the tree exists
        tree.assign(index, p, positive=True)  # check_priority refused p <= 0
        if isinstance(hi_raw, torch.Tensor):  # checked on the device: the max stays there
            t = self._max_raw_t
            if t is None:
                self._raw_floor = self._max_raw if self._max_raw is not None else 1.0 - self._eps
                t = hi_raw.new_full((), self._raw_floor)
            self._max_raw_t = torch.maximum(t, hi_raw)
            return
        # new rows get max(1.0, the largest assigned), as TorchRL's buffers do (their writes
        # assign the default 1.0 before any update)
        current = self._max_raw if self._max_raw is not None else 1.0 - self._eps
        if hi_raw > current:
            self._max_raw = hi_raw
            self._max_priority = self._from_raw(hi_raw)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of slots ``index`` to ``(|priority| + eps) ** alpha``.

        Args:
            index: int slots, as returned by :meth:`sample`.
            priority: one finite value per slot (same number of elements, e.g.
                ``|td_error|`` of shape ``[B]`` or ``[B, 1]``), or one scalar for all.

        Raises:
            as :meth:`check_priority`, before any priority changes.
        """
        self.apply_priority(self.check_priority(index, priority))

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The priorities of the filled slots (on CPU), the running max, ``alpha`` and ``beta``.

        Raises the error of updates refused on the device since the last
        :meth:`check_refused`, if any."""
        self.check_refused()
        self._settle()
        tree = self._tree
        if tree is not None:
            priorities, capacity = tree.leaves[: self._filled].cpu().clone(), tree.capacity
        elif self._pending is not None:
            priorities, capacity = self._pending[0].clone(), self._pending[1]
        else:
            priorities, capacity = torch.empty(0, dtype=torch.float64), 0
        return {
            "priorities": priorities,
            "capacity": capacity,
            "max_priority": self._max_priority,
            "max_raw": self._max_raw,
            "alpha": self._alpha,
            "beta": self._beta,
            "write_count": -1 if self._seen is None else self._seen,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: checked whole first, so a state that does not fit raises
        :class:`~mixreplay.CheckpointError` (a ``ValueError``) and changes nothing.

        The saved capacity must be this sampler's (its storage's ``max_size``, or
        ``max_capacity``); it never sizes an allocation by itself. The saved ``alpha``
        and ``beta`` replace this sampler's (they may have been annealed); a state
        saved before they were kept leaves them as constructed.
        """
        priorities, capacity, max_priority, seen, alpha, beta, max_raw = self._check_state(state)
        known = self._tree.capacity if self._tree is not None else self._max_capacity
        if capacity and known is not None and capacity != known:
            raise CheckpointError(
                f"the PrioritizedSampler state was saved for a storage of max_size {capacity}, "
                f"this sampler serves one of max_size {known}; build the storage with the saved "
                "capacity"
            )
        # -- nothing below can fail
        self._device_state_reset()  # the restored running max replaces what the device held
        if self._tree is not None:
            self._tree.set_leaves(priorities)
        elif capacity and self._max_capacity is not None:
            # sized by the constructor, never by the state
            tree = SumTree(self._max_capacity, track_max=self._within)
            tree.set_leaves(priorities)
            self._tree = tree
        else:  # no storage seen yet: the tree is sized (and the capacity checked) on attach
            self._pending = (priorities, capacity) if capacity else None
        self._filled = priorities.numel()
        if alpha is not None:
            self._alpha = alpha
        self._max_priority = max_priority
        self._max_raw = (
            max_raw if "max_raw" in state else _raw_of(max_priority, self._alpha, self._eps)
        )
        self._seen = seen
        self._generation = None  # the restored priorities describe the storage as it is now
        if beta is not None:
            self._beta = beta

    def _check_state(
        self, state: Any
    ) -> tuple[torch.Tensor, int, float, int | None, float | None, float | None, float | None]:
        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"PrioritizedSampler state: {what}")

        if not isinstance(state, dict):
            raise bad(f"expected a dict, got {describe(state)}")
        missing = [k for k in ("priorities", "capacity", "max_priority") if k not in state]
        if missing:
            raise CheckpointError(
                f"PrioritizedSampler state lacks {missing[0]!r}; expected keys "
                "['alpha', 'beta', 'capacity', 'max_priority', 'max_raw', 'priorities', "
                f"'write_count'], got {sorted(state)}"
            )
        priorities = state["priorities"]
        if not isinstance(priorities, torch.Tensor) or priorities.dtype.is_complex:
            raise bad(f"'priorities' must be a real tensor, got {describe(priorities)}")
        priorities = priorities.detach().to(torch.float64).reshape(-1).cpu()
        capacity = _state_int(state["capacity"], "capacity", bad)
        if capacity == 0 and priorities.numel():
            raise bad(f"{priorities.numel()} priorities saved for a capacity of 0")
        if priorities.numel() > capacity:
            raise bad(f"{priorities.numel()} priorities saved for a capacity of {capacity}")
        largest = _largest(max(capacity, 1))
        if priorities.numel():
            lo, hi = (float(x) for x in torch.aminmax(priorities))
            if not (lo >= 0.0 and hi <= largest):
                raise bad(
                    f"priorities must be finite, >= 0 and at most {largest:.4g} for a capacity "
                    f"of {capacity}, got values in [{lo!r}, {hi!r}]"
                )
        max_priority = state["max_priority"]
        if (
            isinstance(max_priority, bool)
            or not isinstance(max_priority, (int, float))
            or not 0.0 < max_priority <= largest
        ):
            raise bad(
                f"'max_priority' must be a number in (0, {largest:.4g}] (a (|priority| + eps) "
                f"** alpha is positive), got {max_priority!r}"
            )
        seen = _state_int(state.get("write_count", priorities.numel()), "write_count", bad, lo=-1)
        values: dict[str, float | None] = {}
        for name in ("alpha", "beta", "max_raw"):
            value = state.get(name)
            if value is not None:
                try:
                    value = check_real(value, f"PrioritizedSampler state {name!r}", min=0.0)
                except (TypeError, ValueError) as err:
                    raise bad(str(err)) from None
            values[name] = value
        return (
            priorities,
            capacity,
            float(max_priority),
            (None if seen < 0 else seen),
            values["alpha"],
            values["beta"],
            values["max_raw"],
        )


def _pow(x: float, a: float) -> float:
    """``x ** a`` for ``x > 0`` (or NaN), ``inf`` where Python's float power overflows."""
    try:
        return x**a
    except OverflowError:
        return math.inf


def _alpha(value: Any) -> float:
    out = check_real(value, "PrioritizedSampler alpha")
    if out < 0:  # TorchRL's wording
        raise ValueError(
            f"PrioritizedSampler alpha must be greater or equal than 0, got alpha={out!r} "
            "(0 samples uniformly, 1 in proportion to priority)"
        )
    return out


def _raw_of(p: Any, alpha: Any, eps: Any) -> float | None:
    """The raw priority whose ``(raw + eps) ** alpha`` is ``p`` (``None`` for the initial 1.0,
    or when ``alpha`` is 0 and nothing can be recovered): for states saved before ``max_raw``."""
    if p == 1.0 or not alpha:
        return None
    return max(float(p) ** (1.0 / float(alpha)) - float(eps), 0.0)


def _arguments(args: tuple[Any, ...], keywords: dict[str, Any]) -> dict[str, Any]:
    """The arguments given, positional ones named by the order their first one implies."""
    order: tuple[str, ...] = ("alpha", "beta", "eps")
    if args and _is_int(args[0]):
        order = ("max_capacity", "alpha", "beta", "eps")  # TorchRL's
    if len(args) > len(order):
        raise TypeError(
            f"PrioritizedSampler takes at most {len(order)} positional arguments "
            f"({', '.join(order)}), got {len(args)}"
        )
    given = {k: v for k, v in keywords.items() if v is not _UNSET}
    for name, value in zip(order, args):
        if name in given:
            raise TypeError(
                f"PrioritizedSampler got two values for {name}: {args!r} is read in the order "
                f"({', '.join(order)}) and {name}= was passed too; pass each argument once, "
                "preferably by keyword"
            )
        given[name] = value
    if "max_capacity" in given and given["max_capacity"] is None:
        del given["max_capacity"]
    return given


def _is_int(value: Any) -> bool:
    if isinstance(value, bool) or isinstance(value, float):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _state_int(value: Any, name: str, bad: Any, lo: int = 0) -> int:
    return check_saved_int(value, repr(name), min=lo, error=bad)


def _device(device: Any) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise TypeError(
            f"PrioritizedSampler device must be a torch.device or a device string, got {describe(device)}"
        ) from None


def _scalar(value: float, tree: SumTree) -> torch.Tensor:
    # a 0-d tensor: SumTree.assign expands it over the slots and needs no last-write-wins pass
    return torch.tensor(value, dtype=torch.float64, device=tree.device)
