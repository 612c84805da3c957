"""TorchRL's ``rb.writer`` on a :class:`~mixreplay.ReplayBuffer`: :class:`RingWriter`."""

from __future__ import annotations

from typing import Any

from mixreplay.storages.base import Storage

__all__ = ["RingWriter"]


class RingWriter:
    """How a buffer writes its rows, as TorchRL's ``rb.writer`` shows it; read-only.

    A mixreplay buffer writes in ring order, as TorchRL's ``RoundRobinWriter``: the
    next row goes to :attr:`cursor`, after the last slot comes slot 0. There is no
    writer object to swap or call: this view reports the storage's cursor (also under
    TorchRL's name ``_cursor``) and refuses a writer's other attributes, naming the
    buffer's way.

    Examples:
        >>> import torch
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(torch.arange(6))
        >>> rb.writer
        RingWriter(cursor=2)
    """

    __slots__ = ("_storage",)

    def __init__(self, storage: Storage):
        self._storage = storage

    @property
    def cursor(self) -> int:
        """The slot the next row will be written to."""
        return self._storage.cursor

    @property
    def _cursor(self) -> int:
        # TorchRL's name for the same position (its tests read it), counted along the
        # storage's dim 0 (steps of an ndim=2 grid)
        return self._storage.cursor // (self._storage.width or 1)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"RingWriter has no TorchRL {name!r}: a mixreplay buffer writes in ring order "
            "through rb.extend / rb.add; rb.writer only reports where the next row goes "
            "(rb.writer.cursor)"
        )

    def __repr__(self) -> str:
        return f"RingWriter(cursor={self.cursor})"
