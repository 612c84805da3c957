"""Transforms attached to a buffer: applied, in order, to every batch it contributes.

A transform is any callable taking and returning a TensorDict: a plain function,
or a TorchRL ``Transform`` (``DoubleToFloat()``, ``RewardScaling(...)``), whose
forward pass is what a call runs. A buffer's transforms run on its own rows: a
source's on the rows it contributes to a mixed batch, exactly as when it is
sampled alone, then the mixing buffer's own transforms on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tensordict import TensorDictBase

from mixreplay._validate import check_callable, check_int

__all__ = ["Compose"]

Transform = Callable[[TensorDictBase], TensorDictBase]


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
        self.version += 1

    def insert(self, index: int, transform: Transform) -> None:
        """Run ``transform`` at position ``index`` (as ``list.insert``)."""
        index = check_int(index, "index")
        self._items.insert(
            index,
            check_callable(
                transform, "transform", hint="pass a function td -> td or a TorchRL Transform"
            ),
        )
        self.version += 1

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        for t in self._items:
            out = t(td)
            if not isinstance(out, TensorDictBase):
                raise TypeError(
                    f"transform {t!r} returned {type(out).__name__}, not a TensorDict; a "
                    "transform must return the (new or modified) batch"
                )
            td = out
        return td

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
