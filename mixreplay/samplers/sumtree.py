"""A sum tree over non-negative values: batched updates and prefix-sum search in torch.

The tree is ``B``-ary (``B = 32``): level 0 is the root, each level is one
tensor, and the children of node ``k`` of a level are row ``k`` of the next
level viewed as ``[-1, B]``. The ``capacity`` leaves are the first entries of
the last level; each level is padded to a multiple of ``B`` with zeros, so the
tree takes about ``capacity * B / (B - 1)`` values. A batch
of ``k`` updates or searches is a handful of tensor ops per level, and a wide
tree has few levels (4 for a million slots), so the cost is dominated by a few
dozen kernel launches, on CPU or CUDA alike, never by a Python loop over
elements.

Parents are recomputed from their children (never adjusted by deltas), so
rounding errors do not accumulate over millions of updates. Values are kept in
float64.
"""

from __future__ import annotations

import torch

__all__ = ["SumTree"]

_B = 32  # branching factor: few levels, and a row of children is one cheap gather
_BELOW = 1.0 - 2.0**-51  # x * _BELOW < x for every positive normal float64 x


class SumTree:
    """Sums of non-negative values over ``capacity`` slots, searchable by prefix sum.

    Args:
        capacity: number of slots (leaves), ``>= 1``.
        device: where the tree lives (CPU by default).

    Examples:
        >>> import torch
        >>> from mixreplay.samplers.sumtree import SumTree
        >>> tree = SumTree(4)
        >>> tree.update(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 2.0, 3.0, 4.0]))
        >>> tree.total()
        10.0
        >>> tree.find(torch.tensor([0.5, 1.0, 2.9, 3.0, 9.99])).tolist()
        [0, 1, 1, 2, 3]
    """

    def __init__(self, capacity: int, device: torch.device | str | None = None):
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(
                f"SumTree capacity must be an int >= 1, got {type(capacity).__name__} {capacity!r}"
            )
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be an int >= 1, got {capacity}")
        self.capacity = capacity
        self._b = b = _B
        # level sizes, leaves up: each a multiple of b (a whole number of child rows)
        sizes = [capacity]
        while sizes[-1] > 1:
            sizes[-1] = -(-sizes[-1] // b) * b
            sizes.append(sizes[-1] // b)
        self.depth = len(sizes) - 1  # levels below the root
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._levels = [
            torch.zeros(n, dtype=torch.float64, device=self.device) for n in reversed(sizes)
        ]

    # -- reading ---------------------------------------------------------------------------

    @property
    def leaves(self) -> torch.Tensor:
        """The ``capacity`` leaf values, a view (read it, do not write it)."""
        return self._levels[-1][: self.capacity]

    def total(self) -> float:
        """The sum of every value."""
        return float(self._levels[0][0])

    def total_tensor(self) -> torch.Tensor:
        """The sum of every value as a 0-d tensor on the tree's device (no host sync)."""
        return self._levels[0][0]

    def max(self) -> float:
        """The largest value (a reduction over the leaves: ``O(capacity)``)."""
        return float(self.leaves.max())

    def get(self, index: torch.Tensor) -> torch.Tensor:
        """The values at slots ``index`` (float64, on the tree's device)."""
        index = self._index(index)
        return self._levels[-1][index]

    def find(self, prefix_sums: torch.Tensor) -> torch.Tensor:
        """For each prefix sum ``s``, the slot ``i`` with ``sum(v[:i]) <= s < sum(v[:i + 1])``.

        One batched descent from the root. Only slots holding a positive value
        are ever returned (while :meth:`total` is positive): a sum at or beyond
        the total, as rounding can produce, lands on the last positive slot, and
        a negative one on the first. With a total of 0 every sum finds slot 0.

        Args:
            prefix_sums: float tensor of any shape, nominally in ``[0, total)``.

        Returns:
            int64 slots, same shape, on the tree's device.
        """
        s = torch.as_tensor(prefix_sums).to(device=self.device, dtype=torch.float64)
        shape = s.shape
        s = s.reshape(-1, 1).clamp(min=0.0)
        node = torch.zeros_like(s, dtype=torch.int64)
        b = self._b
        for level in self._levels[1:]:
            kids = torch.index_select(level.view(-1, b), 0, node.view(-1))  # [n, b]
            cums = kids.cumsum(1)
            # keep s strictly below this row's sum, so the child picked has a positive value
            s = torch.minimum(s, cums[:, -1:] * _BELOW)
            # b only where the row sums to 0 (a total of 0): take the first child, a real node
            child = torch.searchsorted(cums, s, right=True).remainder_(b)
            s = s - (cums - kids).gather(1, child)
            node = torch.add(child, node, alpha=b)
        return node.reshape(shape)

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
        bad = ~(values >= 0) | (values == float("inf"))  # NaN fails `>= 0`
        if bool(bad.any()):
            first = values[bad][:5].tolist()
            raise ValueError(
                f"SumTree values must be finite and >= 0, got {first} at slots {index[bad][:5].tolist()}"
            )
        if index.numel() > 1:
            index, values = _last_write_wins(index, values)
        levels = self._levels
        levels[-1][index] = values
        node, b = index, self._b
        for d in range(self.depth, 0, -1):
            node = torch.div(node, b, rounding_mode="floor")
            # duplicates among parents all write the same sum, so the order does not matter
            levels[d - 1][node] = torch.index_select(levels[d].view(-1, b), 0, node).sum(1)

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace every value at once: ``values`` fills slots ``[0, len(values))``, the rest become 0."""
        values = torch.as_tensor(values, dtype=torch.float64, device=self.device).reshape(-1)
        if values.numel() > self.capacity:
            raise ValueError(
                f"SumTree.set_leaves got {values.numel()} values for a capacity of {self.capacity}"
            )
        if values.numel() and not bool(((values >= 0) & (values < float("inf"))).all()):
            raise ValueError("SumTree values must be finite and >= 0")
        levels = self._levels
        levels[-1].zero_()
        levels[-1][: values.numel()] = values
        for d in range(self.depth, 0, -1):
            rows = levels[d].view(-1, self._b)
            torch.sum(rows, 1, out=levels[d - 1][: rows.shape[0]])

    def to(self, device: torch.device | str) -> SumTree:
        """Move the tree to ``device`` (in place); returns ``self``."""
        self.device = torch.device(device)
        self._levels = [level.to(self.device) for level in self._levels]
        return self

    def nodes(self) -> list[torch.Tensor]:
        """Every level of the tree, root first (read-only views; for tests and debugging)."""
        return list(self._levels)

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

    def __repr__(self) -> str:
        return f"SumTree(capacity={self.capacity}, total={self.total():.6g}, device={self.device})"


def _last_write_wins(
    index: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep, for each distinct slot, the value of its last occurrence in the batch."""
    slots, order = torch.sort(index, stable=True)
    last = torch.ones_like(slots, dtype=torch.bool)
    last[:-1] = slots[1:] != slots[:-1]
    return slots[last], values[order[last]]
