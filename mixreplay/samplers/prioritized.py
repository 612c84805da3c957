"""Prioritized sampling (Schaul et al., 2016): rows drawn in proportion to ``priority ** alpha``."""

from __future__ import annotations

import math

import torch

from mixreplay.errors import EmptyBufferError, PriorityError
from mixreplay.samplers import Sampler
from mixreplay.samplers.sumtree import SumTree

__all__ = ["PrioritizedSampler"]


def _check_real(
    value, name: str, lo: float, hi: float = math.inf, *, open_lo: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    ok = math.isfinite(value) and (value > lo if open_lo else value >= lo) and value <= hi
    if not ok:
        interval = f"{'(' if open_lo else '['}{lo:g}, {hi:g}{']' if math.isfinite(hi) else ')'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return value


class PrioritizedSampler(Sampler):
    """Rows drawn with probability ``P(i) = p_i / sum(p)``, ``p_i = (|priority_i| + eps) ** alpha``.

    A new row gets the largest ``p`` assigned so far (1.0 at first), so it is
    likely to be drawn at least once before its priority is known. Priorities
    live in a :class:`~mixreplay.samplers.sumtree.SumTree` of the storage's
    capacity, allocated on the storage's device on first use. Rows that reach
    the storage without :meth:`on_extend` (a frozen offline dataset, rows
    written before the sampler was attached) get that default priority when the
    sampler next sees the storage.

    Sampling is *stratified*: ``[0, total)`` is cut into ``n`` equal segments
    and one row is drawn in each, so a batch covers the distribution more evenly
    than ``n`` independent draws; the segments are visited in a random order,
    so positions in the batch are exchangeable. ``stratified=False`` draws
    ``n`` independent proportional samples instead.

    Importance weights ``w_i = (N * P(i)) ** -beta``, with ``N = len(storage)``,
    are normalized by the largest weight *of the sampled batch*: the row of the
    batch with the lowest priority gets weight 1, every other row
    ``(p_min / p_i) ** beta`` (this needs no extra min-tree and keeps every
    weight in ``(0, 1]``).

    A priority update addresses slots: if a slot was overwritten between the
    draw and the update, the new row receives the priority.

    Args:
        alpha: how strongly priorities shape the distribution (0 is uniform), ``>= 0``.
        beta: importance-weight exponent in ``[0, 1]`` (1 fully corrects the bias);
            it can be changed later (``sampler.beta = 1.0``) to anneal it.
        eps: added to ``|priority|`` so no row has probability 0, ``> 0``.

    Keyword Args:
        stratified: one draw per equal segment of the total (default) or plain
            independent draws.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> from mixreplay.samplers import PrioritizedSampler
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(alpha=1.0),
        ...                   generator=0)
        >>> _ = rb.extend(TensorDict({"x": torch.arange(8)}, [8]))
        >>> rb.update_priority(torch.arange(8), torch.tensor([0., 0, 0, 0, 0, 0, 0, 100]))
        >>> batch, info = rb.sample(4, return_info=True)
        >>> batch["x"].tolist(), info["weight"].tolist()
        ([7, 7, 7, 7], [1.0, 1.0, 1.0, 1.0])
    """

    unit = 1

    def __init__(
        self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, *, stratified: bool = True
    ):
        self._alpha = _check_real(alpha, "PrioritizedSampler alpha", 0.0)
        self.beta = beta
        self._eps = _check_real(eps, "PrioritizedSampler eps", 0.0, open_lo=True)
        if not isinstance(stratified, bool):
            raise TypeError(
                f"PrioritizedSampler stratified must be a bool, got {type(stratified).__name__} {stratified!r}"
            )
        self._stratified = stratified
        self._tree: SumTree | None = None
        self._filled = 0  # slots [0, _filled) hold a priority
        self._seen: int | None = 0  # the storage's write_count when last synced
        self._max_priority = 1.0

    # -- configuration ---------------------------------------------------------------------

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = _check_real(value, "PrioritizedSampler beta", 0.0, 1.0)

    @property
    def stratified(self) -> bool:
        return self._stratified

    @property
    def max_priority(self) -> float:
        """The largest ``(|priority| + eps) ** alpha`` assigned so far; new rows get it."""
        return self._max_priority

    @property
    def tree(self) -> SumTree | None:
        """The sum tree of ``p`` values (``None`` before the sampler first sees a storage)."""
        return self._tree

    def config(self) -> dict:
        return {
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "stratified": self._stratified,
        }

    # -- bookkeeping -----------------------------------------------------------------------

    def _attach(self, storage) -> SumTree:
        capacity = int(storage.max_size)
        device = getattr(storage, "device", None) or torch.device("cpu")
        tree = self._tree
        if tree is None:
            tree = self._tree = SumTree(capacity, device=device)
        elif tree.capacity != capacity:
            raise ValueError(
                f"this PrioritizedSampler tracks a storage of max_size {tree.capacity}, got one of "
                f"max_size {capacity}; use one sampler per source"
            )
        elif tree.device != torch.device(device):
            tree.to(device)
        return tree

    def _sync(self, storage) -> SumTree:
        """Match the tree to the rows the storage holds now (rows written behind our back, emptying)."""
        tree = self._attach(storage)
        n, filled = len(storage), self._filled
        if n < filled:  # the storage was emptied
            tree.update(torch.arange(n, filled, device=tree.device), 0.0)
        written = getattr(storage, "write_count", None)
        if written is None:  # a storage that does not count writes: trust its length
            if n > filled:
                tree.update(torch.arange(filled, n, device=tree.device), self._max_priority)
        elif written != self._seen:
            # the last `new` writes ended just before the cursor
            new = (
                min(written - self._seen, n)
                if self._seen is not None and written > self._seen
                else n
            )
            cursor = int(getattr(storage, "cursor", n % tree.capacity))
            slots = torch.arange(cursor - new, cursor, device=tree.device) % tree.capacity
            tree.update(slots, self._max_priority)
        self._filled, self._seen = n, written
        return tree

    def on_extend(self, index: torch.Tensor, storage) -> None:
        tree = self._attach(storage)
        index = torch.as_tensor(index).reshape(-1)
        tree.update(index, self._max_priority)
        k = index.numel()
        self._filled = min(tree.capacity, self._filled + k)
        if self._seen is not None:
            self._seen += k
        if len(storage) != self._filled or getattr(storage, "write_count", None) != self._seen:
            self._sync(storage)

    # -- sampling --------------------------------------------------------------------------

    def sample(self, storage, n: int, generator: torch.Generator) -> torch.Tensor:
        if len(storage) == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        tree = self._tree
        if (
            tree is None
            or self._filled != len(storage)
            or self._seen != getattr(storage, "write_count", None)
        ):
            tree = self._sync(storage)
        gdev = generator.device
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=gdev)
        if self._stratified:
            u = (torch.randperm(n, generator=generator, device=gdev) + u) / n
        u = u.to(tree.device)
        # u < 1, but u * total can round up to total; find() then picks the last positive slot
        return tree.find(u * tree.total_tensor())

    def weight(self, index: torch.Tensor, storage) -> torch.Tensor:
        """Importance weights ``(p_min / p_i) ** beta`` over the batch ``index`` (float32, in ``(0, 1]``)."""
        tree = self._tree if self._tree is not None else self._sync(storage)
        p = tree.get(torch.as_tensor(index))
        if p.numel() == 0:
            return p.to(torch.float32)
        # (N P(i)) ** -beta / max_j (N P(j)) ** -beta == (min_j p_j / p_i) ** beta
        return (p.min() / p).pow(self._beta).to(torch.float32)

    prioritized = True

    def check_priority(
        self, index: torch.Tensor, priority: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate an update without applying it; return the slots and their new ``p`` values.

        Raises:
            TypeError: non-integer slots or non-real priorities.
            ValueError: the sizes differ, or a priority is NaN or infinite (the error's
                ``position`` attribute is the position of the first bad one in ``priority``).
            IndexError: a slot holds no row.
        """
        index = torch.as_tensor(index)
        if index.dtype.is_floating_point or index.dtype == torch.bool:
            raise TypeError(f"index must hold integer slots, got dtype {index.dtype}")
        priority = torch.as_tensor(priority).detach()
        if priority.numel() != 1 and priority.numel() != index.numel():
            raise ValueError(
                f"priority has shape {list(priority.shape)} but index has shape {list(index.shape)}; "
                "pass one priority per index (or a single scalar)"
            )
        if priority.dtype == torch.bool or priority.is_complex():
            raise TypeError(f"priority must be a real-valued tensor, got dtype {priority.dtype}")
        index = index.reshape(-1)
        p = priority.to(dtype=torch.float64).reshape(-1)
        bad = ~torch.isfinite(p)
        if bool(bad.any()):
            where = bad.nonzero().reshape(-1)
            raise PriorityError(
                f"priority must be finite, got {p[bad][:5].tolist()} at positions {where[:5].tolist()}; "
                "check the loss for NaN/inf before updating priorities",
                position=int(where[0]),
            )
        if index.numel():
            filled = self._filled
            lo, hi = int(index.min()), int(index.max())
            if lo < 0 or hi >= filled:
                valid = f"valid slots: 0..{filled - 1}" if filled else "sample from it first"
                raise IndexError(
                    f"cannot update the priority of slot {lo if lo < 0 else hi}: the source holds "
                    f"{filled} rows ({valid})"
                )
        p = (p.abs() + self._eps).pow(self._alpha)
        if p.numel() == 1:
            p = p.expand(index.numel())
        return index, p

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priorities of slots ``index`` to ``(|priority| + eps) ** alpha``.

        Args:
            index: int slots, as returned by :meth:`sample`.
            priority: one finite value per slot (same number of elements, e.g.
                ``|td_error|`` of shape ``[B]`` or ``[B, 1]``), or one scalar for all.

        Raises:
            as :meth:`check_priority`, before any priority changes.
        """
        index, p = self.check_priority(index, priority)
        if index.numel() == 0:
            return
        tree = self._tree
        assert tree is not None  # check_priority found rows, so the tree exists
        tree.update(index, p.to(tree.device))
        self._max_priority = max(self._max_priority, float(p.max()))

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The priorities of the filled slots (on CPU), the running max and the config."""
        tree = self._tree
        priorities = (
            torch.empty(0, dtype=torch.float64)
            if tree is None
            else tree.leaves[: self._filled].cpu().clone()
        )
        return {
            "priorities": priorities,
            "capacity": 0 if tree is None else tree.capacity,
            "max_priority": self._max_priority,
            "beta": self._beta,
            "write_count": -1 if self._seen is None else self._seen,
        }

    def load_state_dict(self, state: dict) -> None:
        try:
            priorities = torch.as_tensor(state["priorities"], dtype=torch.float64).reshape(-1)
            capacity, max_priority = int(state["capacity"]), float(state["max_priority"])
        except KeyError as err:
            raise ValueError(
                f"PrioritizedSampler state lacks {err.args[0]!r}; expected keys "
                "['beta', 'capacity', 'max_priority', 'priorities'], got "
                f"{sorted(state)}"
            ) from None
        if capacity == 0:
            self._tree, self._filled = None, 0
        else:
            if priorities.numel() > capacity:
                raise ValueError(
                    f"PrioritizedSampler state holds {priorities.numel()} priorities for a capacity of {capacity}"
                )
            device = self._tree.device if self._tree is not None else None
            tree = SumTree(capacity, device=device)
            tree.set_leaves(priorities)
            self._tree, self._filled = tree, priorities.numel()
        self._max_priority = max_priority
        seen = int(state.get("write_count", self._filled))
        self._seen = None if seen < 0 else seen
        if "beta" in state:
            self.beta = float(state["beta"])
