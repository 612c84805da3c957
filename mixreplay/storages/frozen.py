"""Read-only packed rows: offline data, in memory or mapped from disk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase

from mixreplay.errors import CheckpointError, ReadOnlyError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema
from mixreplay.storages.base import PackedStorage

__all__ = ["FrozenStorage"]


class FrozenStorage(PackedStorage):
    """Read-only packed rows, e.g. an offline dataset mapped from disk.

    Args:
        rows: packed words ``[n, W]`` (int64), in memory or memory-mapped.
        layout: the layout the words follow.

    Keyword Args:
        fingerprint: a hash of the rows, if already known (a dataset stores one);
            computed on first use otherwise.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import FrozenStorage
        >>> rows = FrozenStorage.from_tensordict(TensorDict({"x": torch.arange(3.0)}, [3]))
        >>> len(rows), rows[1]["x"]
        (3, tensor(1.))
    """

    writable: ClassVar[bool] = False

    def __init__(self, rows: torch.Tensor, layout: RowLayout, *, fingerprint: str | None = None):
        super().__init__()
        if rows.dtype != torch.int64 or rows.dim() != 2 or rows.shape[1] != layout.row_words:
            raise ValueError(
                f"packed rows must be int64 [n, {layout.row_words}], got {rows.dtype} {list(rows.shape)}"
            )
        self._rows = rows
        self._layout = layout
        self.device = rows.device
        self.max_size = int(rows.shape[0])
        if fingerprint is not None:  # a dataset stores its own: no need to hash the rows
            self._fingerprint = (self.content_key(), fingerprint)

    @classmethod
    def from_tensordict(cls, td: TensorDictBase) -> FrozenStorage:
        """Pack a ``[n]`` TensorDict into new read-only rows."""
        layout = RowLayout(Schema.from_tensordict(td))
        return cls(layout.pack(td), layout)

    def __len__(self) -> int:
        return self.max_size

    @property
    def cursor(self) -> int:
        return 0

    @property
    def write_count(self) -> int:
        return self.max_size

    def extend(self, data: Any) -> torch.Tensor:
        raise ReadOnlyError(
            "this storage is read-only (offline data); write online rows to the mixing "
            "buffer's extend(), or copy the rows into a LazyTensorStorage first"
        )

    def add(self, row: Any) -> int:
        raise ReadOnlyError(
            "this storage is read-only (offline data); write online rows to the mixing "
            "buffer's add(), or copy the rows into a LazyTensorStorage first"
        )

    def rewrite(self, index: torch.Tensor, data: Any) -> None:
        raise ReadOnlyError(
            "this storage is read-only (offline data, referenced by its fingerprint): its rows "
            "cannot be rewritten in place; copy them into a LazyTensorStorage first "
            "(ReplayBuffer(storage=LazyTensorStorage(n)).extend(storage[:])) and rewrite that"
        )

    # -- state: a reference, never the rows ------------------------------------------------

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """What identifies the rows (count, schema, fingerprint); the rows are never copied."""
        return self.reference()

    def plan_load_state_dict(self, state: Any) -> Callable[[], None]:
        problems = self.differences(state)
        if problems:
            raise CheckpointError(
                f"these read-only rows are not the ones saved: {'; '.join(problems)}"
            )
        return lambda: None

    def __repr__(self) -> str:
        return f"FrozenStorage(len={len(self)}, row_bytes={self.row_bytes}, device={self.device})"
