"""Transforms attached to a buffer: applied, in order, to every batch it contributes.

A transform is any callable taking and returning a TensorDict: a plain function,
or a TorchRL ``Transform`` (``DoubleToFloat()``, ``RewardScaling(...)``), whose
forward pass is what a call runs. A buffer's transforms run on its own rows: a
source's on the rows it contributes to a mixed batch, exactly as when it is
sampled alone, then the mixing buffer's own transforms on the whole batch.

Writes, as in TorchRL: :meth:`ReplayBuffer.extend <mixreplay.ReplayBuffer.extend>` and
``add`` first run each transform's *write side*, last transform first: a TorchRL
``Transform``'s inverse (``t.inv(data)``; e.g. ``PolicyAgeFilter`` drops stale rows
there), and for a transform appended with ``invert=True`` (an :class:`Inverted`) its
forward pass, the read side then running its inverse. A plain function has no write
side. A write side that returns ``None`` (or no rows) writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tensordict import TensorDictBase

from mixreplay._validate import check_callable, check_int

__all__ = ["Compose", "Inverted", "write_side"]

Transform = Callable[[TensorDictBase], TensorDictBase]


def write_side(transform: Any) -> Callable[[Any], Any] | None:
    """What ``transform`` does to data on its way in: a TorchRL ``Transform``'s ``inv``,
    an :class:`Inverted` transform's forward pass, nothing (``None``) for a plain function."""
    if isinstance(transform, Inverted):
        return transform.transform
    inv = getattr(transform, "inv", None)
    return inv if callable(inv) else None


class Inverted:
    """A transform run the other way round (TorchRL's ``append_transform(t, invert=True)``).

    Its forward pass runs on writes (``extend``/``add``), its inverse (for a TorchRL
    ``Transform``; none for a plain function) on reads.

    Args:
        transform: a callable ``data -> data`` or a TorchRL ``Transform``.
    """

    def __init__(self, transform: Callable[[Any], Any]):
        self.transform = check_callable(
            transform, "transform", hint="pass a function td -> td or a TorchRL Transform"
        )

    def __call__(self, data: Any) -> Any:
        inv = getattr(self.transform, "inv", None)
        return inv(data) if callable(inv) else data

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Inverted) and other.transform == self.transform

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Inverted({self.transform!r})"


class Compose:
    """A list of transforms applied in order (empty: the identity).

    Args:
        *transforms: callables ``td -> td``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.transforms import Compose
        >>> def plus(k):
        ...     return lambda td: td.set("x", td["x"] + k)
        >>> chain = Compose(plus(1))
        >>> chain.append(plus(10))
        >>> chain.insert(0, lambda td: td.set("x", td["x"] * 2))
        >>> chain(TensorDict({"x": torch.ones(2)}, [2]))["x"].tolist()
        [13.0, 13.0]
    """

    def __init__(self, *transforms: Transform):
        self._items: list[Transform] = []
        self.writes = False  # whether any transform has a write side (see write_side)
        #: counts the changes of this chain: a mixing buffer compares it to notice that a
        #: source's transforms changed (it then redraws the batches it prefetched)
        self.version = 0
        for t in transforms:
            self.append(t)

    @classmethod
    def of(cls, transform: Transform | None, name: str = "transform") -> Compose:
        """A chain from ``None``, one callable, or an existing :class:`Compose` (copied)."""
        if transform is None:
            return cls()
        if isinstance(transform, Compose):
            return cls(*transform)
        check_callable(transform, name, hint="pass a function td -> td or a TorchRL Transform")
        return cls(transform)

    def append(self, transform: Transform) -> None:
        """Run ``transform`` after the others."""
        self._items.append(
            check_callable(
                transform, "transform", hint="pass a function td -> td or a TorchRL Transform"
            )
        )
        self.writes = self.writes or write_side(transform) is not None
        self.version += 1

    def insert(self, index: int, transform: Transform) -> None:
        """Run ``transform`` at position ``index``, ``-len .. len`` (``ValueError`` outside)."""
        index = check_int(index, "index")
        n = len(self._items)
        if not -n <= index <= n:
            raise ValueError(
                f"index {index} is out of range for {n} transforms: insert at -{n}..{n}"
            )
        self._items.insert(
            index,
            check_callable(
                transform, "transform", hint="pass a function td -> td or a TorchRL Transform"
            ),
        )
        self.writes = self.writes or write_side(transform) is not None
        self.version += 1

    def __call__(self, td: Any) -> Any:
        return self.forward(td)

    def forward(self, td: Any) -> Any:
        """Run the transforms on ``td`` in order (what calling the Compose does, as TorchRL's)."""
        for t in self._items:
            out = t(td)
            if isinstance(td, TensorDictBase) and not isinstance(out, TensorDictBase):
                raise TypeError(
                    f"transform {t!r} returned {type(out).__name__}, not a TensorDict; a "
                    "transform must return the (new or modified) batch"
                )
            td = out
        return td

    def inv(self, data: Any) -> Any:
        """Run the write sides on ``data``, last transform first (``None``: write nothing)."""
        for t in reversed(self._items):
            side = write_side(t)
            if side is not None:
                data = side(data)
                if data is None:
                    return None
        return data

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self._items)

    def __getitem__(self, index: int) -> Transform:
        return self._items[index]

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Compose) and self._items == other._items

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Compose({', '.join(repr(t) for t in self._items)})"
