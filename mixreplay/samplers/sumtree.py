"""A sum tree with a min tree beside it: batched updates and prefix-sum search in torch.

Layout (``arity`` ``b``, ``top`` ``T``): level 0 holds the ``capacity`` leaves;
level ``d + 1`` holds the sums of the rows of ``b`` children of level ``d``
(level ``d`` viewed as ``[-1, b]``, padded with zeros to whole rows). Levels are
added only until one holds at most ``T`` values: that *top* level is searched
with one cumulative sum and one binary search instead of ``log_b(T)`` more levels
of descent. With the defaults (``b = 32``, ``T = 4096``) a ring of 100,000 slots
has two levels (one step of descent below the top), a million slots three.

Why this shape (measured in ``benchmarks/bench_samplers.py``, see
``notes/samplers.md``): on a CPU a batch of 256 searches or updates costs a few
microseconds per tensor op whatever its size, so the op count decides, and
each level of descent is about eight ops while a cumulative sum over 4,096
values is one op of about the same cost as one of them.

Beside the sums, the tree keeps the same levels of *minimums of the positive
values* (an empty slot, value 0, counts as ``+inf``): :meth:`min` is the
smallest positive value in O(top), which is what buffer-wide importance weights
need (:class:`~mixreplay.samplers.PrioritizedSampler`). With ``track_max=True``
it keeps the same levels of maximums too (:meth:`max_tensor` in O(top)), for a
sampler that gives new rows the largest priority held.

Parents are recomputed from their children (never adjusted by deltas), so
rounding errors do not accumulate over millions of updates. Values are float64.
"""

from __future__ import annotations

import math

import torch

__all__ = ["SumTree"]

_ARITY = 32  # children per node: a row of children is one cheap gather
_TOP = 4096  # the top level is searched flat: one cumsum + one binary search
_BELOW = 1.0 - 2.0**-51  # x * _BELOW < x for every positive normal float64 x
#: ATen's ``searchsorted`` runs in parallel above 200 queries; on a busy machine a
#: wake-up of the thread pool costs milliseconds, so searches go in chunks of 200.
_GRAIN = 200
#: the prefix sums of every leaf (:meth:`SumTree._flat_prefix`) cost about one descent to build
#: and save ~2/5 of one per later draw: they pay when a tree serves this many draws between
#: changes. Built on the second draw when the previous run of draws was that long, and on
#: this draw of any run; a tree drawn 2 or 3 times per change keeps descending
_PAYS_AFTER = 4
_INF = math.inf


def _cumsum_is_sequential() -> bool:
    """Whether CPU ``cumsum`` of float64 adds left to right (``c[i] = c[i - 1] + x[i]``,
    rounded each step), in 1-D and along the rows of a 2-D tensor: what the exact descent
    (:meth:`SumTree._descend_exact`) relies on. Probed once, on values whose sums round."""
    x = torch.tensor(
        [0.1, 1e16, 0.3, -1e16, 2.0**-60, 7.0, 1.0 / 3.0, 2.0**53] * 8, dtype=torch.float64
    )
    expect, acc = [], 0.0
    for v in x.tolist():
        acc = acc + v
        expect.append(acc)
    rows = x.view(2, -1).cumsum(1)
    half = len(expect) // 2
    tail, acc2 = [], 0.0
    for v in x.tolist()[half:]:
        acc2 = acc2 + v
        tail.append(acc2)
    return (
        x.cumsum(0).tolist() == expect
        and rows[0].tolist() == expect[:half]
        and rows[1].tolist() == tail
    )


#: CPU cumsum is sequential in this torch build (checked at import; see ``_descend_exact``)
SEQUENTIAL_CUMSUM = _cumsum_is_sequential()


def search(sorted_rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``torch.searchsorted(sorted_rows, values, right=True)``, in chunks that stay serial on CPU
    (with one intra-op thread there is no pool to wake: one call)."""
    n = values.shape[0]
    if n <= _GRAIN or not values.is_cpu or torch.get_num_threads() == 1:
        return torch.searchsorted(sorted_rows, values, right=True)
    out = torch.empty(values.shape, dtype=torch.int64)
    rows = sorted_rows.dim() > 1
    for i in range(0, n, _GRAIN):
        j = i + _GRAIN
        torch.searchsorted(
            sorted_rows[i:j] if rows else sorted_rows, values[i:j], right=True, out=out[i:j]
        )
    return out


class SumTree:
    """Sums of non-negative values over ``capacity`` slots, searchable by prefix sum.

    Args:
        capacity: number of slots (leaves), ``>= 1``.
        device: where the tree lives (CPU by default).

    Keyword Args:
        arity: children per node, ``>= 2``.
        top: the most values the top level may hold (searched flat), ``>= 1``.
        track_max: also keep levels of maximums (:meth:`max_tensor` without a scan).

    Examples:
        >>> import torch
        >>> from mixreplay.samplers.sumtree import SumTree
        >>> tree = SumTree(4)
        >>> tree.update(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 2.0, 3.0, 4.0]))
        >>> tree.total(), tree.min()
        (10.0, 1.0)
        >>> tree.find(torch.tensor([0.5, 1.0, 2.9, 3.0, 9.99])).tolist()
        [0, 1, 1, 2, 3]
    """

    #: levels of maximums (``track_max``); a class default, so trees pickled without it load
    _maxs: list[torch.Tensor] | None = None
    #: scratch for :meth:`_last_write_wins` (never pickled: rebuilt on use)
    _scratch: torch.Tensor | None = None
    _positions: torch.Tensor | None = None
    #: caches added after trees were first pickled (class defaults, so those load)
    _below: torch.Tensor | None = None
    _drawn: tuple[torch.Tensor, torch.Tensor] | None = None
    _head: torch.Tensor | None = None
    _scaled: tuple[int, torch.Tensor] | None = None
    #: ``[0, cumsum of the top level]`` (``top + 1`` values), rewritten when the tree changes
    _cumbuf: torch.Tensor | None = None
    _views: tuple[torch.Tensor, ...] = ()
    #: parents hold the left-to-right (``cumsum``) sums of their children, bit for bit, so
    #: the exact descent applies; False for trees pickled before it existed and off the CPU
    _exact: bool = False
    #: an exact one-level tree's prefix sums at every leaf (:meth:`_flat_prefix`), valid until
    #: the tree changes, and the draws served since it last changed (class defaults, so trees
    #: pickled before them load)
    _flat: torch.Tensor | None = None
    _flatbuf: torch.Tensor | None = None
    #: scratch of :meth:`_led_cumsum` (never pickled: rebuilt on use)
    _ledbuf: torch.Tensor | None = None
    _served: int = 0
    #: the draws served between the last two changes (while unknown, as many as pay)
    _run: int = _PAYS_AFTER

    def __init__(
        self,
        capacity: int,
        device: torch.device | str | None = None,
        *,
        arity: int = _ARITY,
        top: int = _TOP,
        track_max: bool = False,
    ):
        for name, value, lo in (("capacity", capacity, 1), ("arity", arity, 2), ("top", top, 1)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"SumTree {name} must be an int >= {lo}, got {type(value).__name__} {value!r}"
                )
            if value < lo:
                raise ValueError(f"SumTree {name} must be an int >= {lo}, got {value}")
        self.capacity = capacity
        self.arity = arity
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        sizes = [capacity]  # leaves first; each level but the top padded to whole rows
        while sizes[-1] > top:
            sizes[-1] = -(-sizes[-1] // arity) * arity
            sizes.append(sizes[-1] // arity)
        self._sums = [torch.zeros(n, dtype=torch.float64, device=self.device) for n in sizes]
        self._mins = [
            torch.full((n,), _INF, dtype=torch.float64, device=self.device) for n in sizes
        ]
        self._maxs = (
            [torch.zeros(n, dtype=torch.float64, device=self.device) for n in sizes]
            if track_max
            else None
        )
        self._exact = self.device.type == "cpu" and SEQUENTIAL_CUMSUM
        self._clear_cache()

    def _clear_cache(self) -> None:
        self._cums: torch.Tensor | None = None  # inclusive cumsum of the top level
        self._excl: torch.Tensor | None = None  # exclusive cumsum of the top level
        self._head: torch.Tensor | None = None  # _cums[:-1]: searched when the sum is < total
        self._scaled: tuple[int, torch.Tensor] | None = None  # (n, [total * _BELOW / n])
        self._below: torch.Tensor | None = None  # [total * _BELOW], 1 value: sums stay under it
        self._least: torch.Tensor | None = None  # smallest positive value, 0-d
        # the slots the last :meth:`sample` returned and their values (read by :meth:`values_at`)
        self._drawn: tuple[torch.Tensor, torch.Tensor] | None = None
        self._flat = None  # its buffer (_flatbuf) is kept and rewritten
        if self._served:  # a change after draws: how many the tree served unchanged
            self._run = self._served
        self._served = 0

    @property
    def depth(self) -> int:
        """Levels of descent below the top level."""
        return len(self._sums) - 1

    # -- reading ---------------------------------------------------------------------------

    @property
    def leaves(self) -> torch.Tensor:
        """The ``capacity`` leaf values, a view (read it, do not write it)."""
        return self._sums[0][: self.capacity]

    def _top(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cums is None or self._excl is None:
            top = self._sums[-1]
            buf = self._cumbuf
            if buf is None or buf.shape[0] != top.shape[0] + 1 or buf.device != top.device:
                buf = self._cumbuf = torch.zeros(
                    top.shape[0] + 1, dtype=torch.float64, device=top.device
                )
                # views made once (each view is a torch call): inclusive sums, exclusive ones
                # as a column, the inclusive ones but the last, the total
                self._views = (buf[1:], buf[:-1].view(-1, 1), buf[1:-1], buf[-1:])
            # buf[0] stays 0: the exclusive sums are buf[:-1], bit for bit the inclusive ones
            # shifted (not `cums - top`, which rounds)
            views = self._views
            torch.cumsum(top, 0, out=views[0])
            self._cums, self._excl, self._head = views[0], buf[:-1], views[2]
        return self._cums, self._excl

    def _scale(self, n: int) -> torch.Tensor:
        """``[total * (_BELOW / n)]``: ``x * it < total`` for every ``x`` in ``[0, n]``, rounding
        included (three roundings of 2**-53 each stay under the margin of 2**-51)."""
        scaled = self._scaled
        if scaled is None or scaled[0] != n:
            self._top()
            scaled = self._scaled = (n, torch.mul(self._views[3], _BELOW / n))
        return scaled[1]

    def _guard(self) -> torch.Tensor:
        """``[total * _BELOW]``: the largest prefix sum searched (cached with the top level)."""
        below = self._below
        if below is None:
            below = self._below = self._top()[0][-1:] * _BELOW
        return below

    def total(self) -> float:
        """The sum of every value."""
        return float(self._top()[0][-1])

    def total_tensor(self) -> torch.Tensor:
        """The sum of every value as a 0-d tensor on the tree's device (no host sync); the
        caller's own (a copy: later updates do not change it, nor it the tree)."""
        return self._top()[0][-1].clone()

    def min(self) -> float:
        """The smallest positive value (``inf`` when every value is 0)."""
        return float(self.min_tensor())

    def min_tensor(self) -> torch.Tensor:
        """:meth:`min` as a 0-d tensor on the tree's device (no host sync); the caller's own."""
        if self._least is None:
            self._least = self._mins[-1].amin()
        return self._least.clone()

    def max(self) -> float:
        """The largest value (``O(top)`` with ``track_max``, else a reduction over the leaves)."""
        if self._maxs is not None:
            return float(self.max_tensor())
        return float(self.leaves.max())

    def max_tensor(self) -> torch.Tensor:
        """The largest value as a 0-d tensor (0 when every value is 0); needs ``track_max``."""
        if self._maxs is None:
            raise ValueError("SumTree.max_tensor needs a tree built with track_max=True")
        return self._maxs[-1].amax()

    @property
    def tracks_max(self) -> bool:
        """Whether the tree keeps levels of maximums (``track_max=True``)."""
        return self._maxs is not None

    def get(self, index: torch.Tensor) -> torch.Tensor:
        """The values at slots ``index`` (float64, on the tree's device)."""
        index = self._index(index)
        return self._sums[0][index]

    def get_unchecked(self, index: torch.Tensor) -> torch.Tensor:
        """:meth:`get` for valid 1-D int64 slots on the tree's device (no range check, no sync)."""
        return self._sums[0].index_select(0, index)

    def find(self, prefix_sums: torch.Tensor) -> torch.Tensor:
        """For each prefix sum ``s``, the slot ``i`` with ``sum(v[:i]) <= s < sum(v[:i + 1])``.

        One batched search. Only slots holding a positive value are ever
        returned (while :meth:`total` is positive): a sum at or beyond the
        total, as rounding can produce, lands on the last positive slot, and a
        negative one on the first. With a total of 0 every sum finds slot 0.

        Args:
            prefix_sums: float tensor of any shape, nominally in ``[0, total)``.

        Returns:
            int64 slots, same shape, on the tree's device.
        """
        s = torch.as_tensor(prefix_sums).to(device=self.device, dtype=torch.float64)
        shape = s.shape
        cums, _ = self._top()
        s = torch.minimum(s.reshape(-1).clamp(min=0.0), cums[-1:] * _BELOW)
        return self._descend(s).reshape(shape)

    def sample(self, u: torch.Tensor, n: int = 1) -> torch.Tensor:
        """The slots at prefix sums ``u / n * total`` for ``u`` in ``[0, n]`` (1-D, float64).

        :meth:`find` for the sampler's hot path: ``u`` must already be a 1-D
        float64 tensor on the tree's device, and the total positive. ``n`` lets a stratified draw pass ``rand + randperm`` without
        dividing it first. The values of the slots returned are kept until the
        tree next changes: :meth:`values_at` of the same tensor reads them without
        another gather.
        """
        # u <= n, so u * (total * _BELOW / n) < total, rounding included
        s = torch.mul(u, self._scale(n))
        if self._exact and self.depth == 1:
            # once a tree serves enough draws unchanged (_PAYS_AFTER), one search over every
            # leaf's prefix sum: the slots the descent finds, bit for bit (see _flat_prefix)
            flat = self._flat
            if flat is None and self._served and _PAYS_AFTER <= max(self._run, self._served + 1):
                flat = self._flat_prefix()
            self._served += 1
            if flat is None:
                node, value = self._descend_exact(s)
            else:
                node = search(flat, s)
                value = self._sums[0].index_select(0, node)
        elif self._exact and not self.depth:  # s < total: the top search alone, no wrap
            node = search(self._views[2], s)
            value = self._sums[0].index_select(0, node)
        else:
            node, value = self._descend_lean(s)
        self._drawn = (node, value)
        return node

    def _descend_exact(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The descent of a tree of one level below the top, for sums in ``[0, total)``,
        without clamps: 10 ops.

        It relies on sums rounded the same way everywhere (``SEQUENTIAL_CUMSUM``, and
        parents written as the ``cumsum`` of their children, ``_exact``): with ``c`` the
        exclusive prefix sum of the top node ``k`` found (``c <= s < cums[k]``), the
        absolute prefix sums of its children ``c + cumsum(kids)`` end on
        ``c + top[k]``, the very float ``cums[k]``. So ``s`` is below the last of
        them, and the first child whose prefix sum exceeds ``s`` has one larger than
        the previous, hence a positive value (rounding ``c + x`` is monotone in ``x``).
        """
        _, excl, head, _ = self._views  # set by _scale's _top()
        node = search(head, s)  # s < total: never past the last top node
        b = self.arity
        kids = torch.index_select(self._sums[0].view(-1, b), 0, node)  # [n, b]
        row = kids.cumsum(1).add_(torch.index_select(excl, 0, node))
        # the count of prefix sums <= s; the last (cums[k]) is > s, so it is < b
        child = torch.le(row, s.unsqueeze_(1)).sum(1, keepdim=True)
        return torch.add(child.view(-1), node, alpha=b), kids.gather(1, child).view(-1)

    def _flat_prefix(self) -> torch.Tensor:
        """Every leaf's absolute prefix sum as :meth:`_descend_exact` computes it (exact trees of
        one level below the top): row ``k`` of leaves is ``excl[k] + cumsum(kids of k)``.

        Searched with ``right=True``, it gives the slot the descent gives for every sum in
        ``[0, total)``, not merely one near it: the array is nondecreasing (row ``k`` ends on
        ``cums[k]``, the very float row ``k + 1`` starts from, as the descent's docstring
        shows), so the count of its entries ``<= s`` is the whole rows before the top node
        the descent finds plus the count the descent takes in that node's row. Building it
        costs about one descent (a cumsum and an add over every leaf) and each later draw
        saves ~2/5 of one, so :meth:`sample` builds it only for runs of ``_PAYS_AFTER``
        draws or more between changes: on the second draw of a run when the previous run
        was that long (or none is known yet), else on that draw of the run. A tree updated
        after every draw, or drawn 2 or 3 times per change, never pays for it.
        """
        _, excl = self._top()
        leaves = self._sums[0].view(-1, self.arity)
        buf = self._flatbuf
        if buf is None or buf.shape != leaves.shape or buf.device != leaves.device:
            buf = self._flatbuf = torch.empty_like(leaves)
        torch.cumsum(leaves, 1, out=buf)
        buf.add_(excl.view(-1, 1))
        self._flat = flat = buf.view(-1)
        return flat

    def values_at(self, index: torch.Tensor) -> torch.Tensor:
        """The values at slots ``index`` (1-D int64 on the tree's device): no gather when
        ``index`` is the tensor the last :meth:`sample` returned and nothing changed since."""
        drawn = self._drawn
        if drawn is not None and drawn[0] is index:
            return drawn[1]
        return self._sums[0].index_select(0, index)

    def _descend_lean(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_descend` for sums in ``[0, total * _BELOW]`` (may modify ``s``): the slots
        and their values.

        Each level keeps its sum strictly below the row it searches, so the child
        found always holds a positive value, and passes down ``s`` less the inclusive sum
        of the children before it: the very float ``s`` was found to reach, so what is
        left never rounds below 0 (as at the top, where ``excl`` is the shifted ``cums``).
        The exclusive sum taken as ``cumsum - kids`` instead can round above it (1e-12 and
        1.0 side by side: ``(1e-12 + 1.0) - 1.0`` is 1.00009e-12) and leave a negative
        remainder, with which the level below took its first child whatever it held.
        """
        cums, excl = self._top()
        top = cums.shape[0]
        node = search(cums, s).remainder_(top)  # `top` only when the total is 0
        if not self.depth:
            return node, self._sums[-1].index_select(0, node)
        b = self.arity
        s = s.sub_(excl.index_select(0, node)).unsqueeze_(1)
        levels = self._sums[:-1]
        for d in range(len(levels) - 1, -1, -1):
            kids = torch.index_select(levels[d].view(-1, b), 0, node)  # [n, b]
            row = self._led_cumsum(kids)  # [n, b + 1]: 0, then each child's inclusive sum
            s = torch.minimum(s, row[:, -1:] * _BELOW)
            # the count of children's sums <= s (searchsorted's right=True, without its
            # thread pool): one less than that of the row, whose leading 0 is <= s; b where
            # the row sums to 0
            child = torch.le(row, s).sum(1, keepdim=True).sub_(1).remainder_(b)
            node = torch.add(child.view(-1), node, alpha=b)
            if not d:
                return node, kids.gather(1, child).view(-1)
            s = s.sub_(row.gather(1, child))  # less the sums before the child: >= 0
        raise AssertionError("unreachable")  # pragma: no cover

    def _led_cumsum(self, kids: torch.Tensor) -> torch.Tensor:
        """``[0, cumsum(row)]`` for each row of ``kids`` (``[n, arity]``): column ``c`` holds the
        sum of the children before ``c``, the very floats a search of the row compares with.
        Written into kept scratch whose first column stays 0 (valid until the next call)."""
        n, width = kids.shape[0], kids.shape[1] + 1
        buf = self._ledbuf
        if buf is None or buf.shape[0] < n or buf.shape[1] != width or buf.device != kids.device:
            buf = self._ledbuf = kids.new_zeros(n, width)
        row = buf if buf.shape[0] == n else buf[:n]
        torch.cumsum(kids, 1, out=row[:, 1:])
        return row

    def _descend(self, s: torch.Tensor) -> torch.Tensor:
        cums, excl = self._top()
        top = cums.shape[0]
        # count of cums <= s: the top-level node; `top` only when the total is 0
        node = search(cums, s).remainder_(top)
        if not self.depth:
            return node
        b = self.arity
        s = (s - excl.index_select(0, node)).unsqueeze(1)
        for level in reversed(self._sums[:-1]):
            kids = torch.index_select(level.view(-1, b), 0, node)  # [n, b]
            row = self._led_cumsum(kids)
            # keep s strictly below this row's sum, so the child picked has a positive value
            s = torch.minimum(s, row[:, -1:] * _BELOW)
            # the leading 0 is <= s: one more than the children's count (b + 1 where the
            # row sums to 0, so the child is 0 there)
            child = search(row, s).sub_(1).remainder_(b)
            s = s - row.gather(1, child)  # as in _descend_lean: never below 0
            node = torch.add(child.view(-1), node, alpha=b)
        return node

    # -- writing ---------------------------------------------------------------------------

    def update(self, index: torch.Tensor, values: torch.Tensor | float) -> None:
        """Set the values of slots ``index``.

        Duplicate slots in one call: the last write wins, as in a loop over the
        batch.

        Args:
            index: int slots in ``[0, capacity)``, any shape.
            values: one non-negative finite value per slot (same number of
                elements), or a scalar for all of them.

        Raises:
            IndexError: a slot is out of range.
            ValueError: a value is negative, NaN or infinite, or the sizes differ.
        """
        index = self._index(index).reshape(-1)
        values = torch.as_tensor(values, dtype=torch.float64, device=self.device)
        if values.dim() == 0:
            values = values.expand(index.shape[0])
        elif values.numel() != index.numel():
            raise ValueError(
                f"SumTree.update got {values.numel()} values for {index.numel()} slots; "
                "pass one value per slot, or a scalar"
            )
        else:
            values = values.reshape(-1)
        if index.numel() == 0:
            return
        bad = ~(values >= 0) | (values == _INF)  # NaN fails `>= 0`
        if bool(bad.any()):
            first = values[bad][:5].tolist()
            raise ValueError(
                f"SumTree values must be finite and >= 0, got {first} at slots {index[bad][:5].tolist()}"
            )
        self.assign(index, values)

    def assign(self, index: torch.Tensor, values: torch.Tensor, *, positive: bool = False) -> None:
        """:meth:`update` without the checks: ``index`` valid int64 slots (1-D) and ``values``
        finite non-negative float64, one per slot or a 0-d tensor for all, on the tree's device.
        ``positive=True`` promises every value is ``> 0`` (saves the masking of zeros)."""
        if values.dim() and index.numel() > 1:
            values = self._last_write_wins(index, values)
        sums, mins, exact = self._sums, self._mins, self._exact
        sums[0].index_put_((index,), values)
        mins[0].index_put_((index,), values if positive else values.masked_fill(values <= 0, _INF))
        node, b = index, self.arity
        for d in range(1, len(sums)):
            node = torch.div(node, b, rounding_mode="floor")
            # duplicates among parents all write the same value, so the order does not matter
            rows = torch.index_select(sums[d - 1].view(-1, b), 0, node)
            # exact trees sum left to right (the last of a cumsum), as the descent does
            sums[d].index_put_((node,), rows.cumsum(1)[:, -1] if exact else rows.sum(1))
            mins[d].index_put_(
                (node,), torch.index_select(mins[d - 1].view(-1, b), 0, node).amin(1)
            )
        maxs = self._maxs
        if maxs is not None:
            maxs[0].index_put_((index,), values)
            node = index
            for d in range(1, len(maxs)):
                node = torch.div(node, b, rounding_mode="floor")
                maxs[d].index_put_(
                    (node,), torch.index_select(maxs[d - 1].view(-1, b), 0, node).amax(1)
                )
        self._clear_cache()

    def _last_write_wins(self, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``values`` with each duplicate slot's entries replaced by the value of its last
        occurrence, so that writes in any order leave what a loop over the batch would.

        Three ops and no sort: the largest batch position per slot is scattered into a
        scratch array of ``capacity`` int32 (kept between calls; the slots it touches
        are overwritten, the others are never read), then read back per entry.
        """
        n = index.shape[0]
        scratch = self._scratch
        if scratch is None or scratch.device != index.device:
            scratch = self._scratch = torch.empty(
                self.capacity, dtype=torch.int32, device=index.device
            )
        positions = self._positions
        if positions is None or positions.shape[0] < n or positions.device != index.device:
            positions = self._positions = torch.arange(
                max(n, 256), dtype=torch.int32, device=index.device
            )
        scratch.scatter_reduce_(0, index, positions[:n], "amax", include_self=False)
        return values.index_select(0, scratch.index_select(0, index))

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every value at once: ``values`` fills slots ``[0, len(values))``, the rest become 0."""
        values = torch.as_tensor(values, dtype=torch.float64, device=self.device).reshape(-1)
        if values.numel() > self.capacity:
            raise ValueError(
                f"SumTree.set_leaves got {values.numel()} values for a capacity of {self.capacity}"
            )
        if values.numel() and not bool(((values >= 0) & (values < _INF)).all()):
            raise ValueError("SumTree values must be finite and >= 0")
        sums, mins, b = self._sums, self._mins, self.arity
        sums[0].zero_()
        sums[0][: values.numel()] = values
        mins[0].fill_(_INF)
        mins[0][: values.numel()] = values.masked_fill(values <= 0, _INF)
        for d in range(1, len(sums)):
            rows = sums[d - 1].shape[0] // b
            if self._exact:  # left to right, as the descent sums them
                sums[d][:rows] = sums[d - 1].view(-1, b).cumsum(1)[:, -1]
            else:
                torch.sum(sums[d - 1].view(-1, b), 1, out=sums[d][:rows])
            torch.amin(mins[d - 1].view(-1, b), 1, out=mins[d][:rows])
        maxs = self._maxs
        if maxs is not None:
            maxs[0].zero_()
            maxs[0][: values.numel()] = values
            for d in range(1, len(maxs)):
                rows = maxs[d - 1].shape[0] // b
                torch.amax(maxs[d - 1].view(-1, b), 1, out=maxs[d][:rows])
        self._clear_cache()

    def to(self, device: torch.device | str) -> SumTree:
        """Move the tree to ``device`` (in place); returns ``self``."""
        self.device = torch.device(device)
        self._sums = [level.to(self.device) for level in self._sums]
        self._mins = [level.to(self.device) for level in self._mins]
        if self._maxs is not None:
            self._maxs = [level.to(self.device) for level in self._maxs]
        exact = self.device.type == "cpu" and SEQUENTIAL_CUMSUM
        if exact and not self._exact:  # parents summed elsewhere: sum them left to right
            self._exact = True
            self.set_leaves(self.leaves.clone())
        self._exact = exact
        self._clear_cache()
        return self

    def levels(self) -> list[torch.Tensor]:
        """The sums, level by level, leaves first and the top last (views; for tests)."""
        return list(self._sums)

    def min_levels(self) -> list[torch.Tensor]:
        """The minimums of positive values, level by level, leaves first (views; for tests)."""
        return list(self._mins)

    def _index(self, index) -> torch.Tensor:
        index = torch.as_tensor(index)
        if index.dtype.is_floating_point or index.dtype == torch.bool or index.dtype.is_complex:
            raise TypeError(f"SumTree slots must be integers, got dtype {index.dtype}")
        index = index.to(device=self.device, dtype=torch.int64)
        if index.numel():
            lo, hi = (int(x) for x in torch.aminmax(index))
            if lo < 0 or hi >= self.capacity:
                raise IndexError(
                    f"SumTree slot {lo if lo < 0 else hi} is out of range for capacity "
                    f"{self.capacity} (valid: 0..{self.capacity - 1})"
                )
        return index

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # caches and scratch are rebuilt on use
        state.update(
            _cums=None, _excl=None, _head=None, _scaled=None, _below=None, _least=None, _drawn=None
        )
        state.update(_flat=None, _served=0)
        state.pop("_run", None)
        state.pop("_flatbuf", None)
        state.pop("_ledbuf", None)
        state.pop("_scratch", None)
        state.pop("_cumbuf", None)
        state.pop("_views", None)
        state.pop("_positions", None)
        return state

    def __repr__(self) -> str:
        return f"SumTree(capacity={self.capacity}, total={self.total():.6g}, device={self.device})"
