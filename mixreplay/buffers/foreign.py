"""Foreign sources: offline data mixreplay cannot read directly, asked to sample itself.

Anything with ``sample(n)`` and ``len()`` (a TorchRL ``ReplayBuffer`` or dataset)
can be a source of a mixing buffer. It draws with its own RNG and applies its own
transforms; mixreplay drops the sampler bookkeeping it adds (TorchRL's
``"index"``, priority weights) and aligns its rows with the other sources'.
(A foreign *storage*, driven as a ring by mixreplay, is
:class:`~mixreplay.storages.ForeignStorage`.)
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay.schema import BOOKKEEPING_KEYS, Schema

__all__ = ["ForeignSource", "peek_schema", "strip_bookkeeping"]


def strip_bookkeeping(td: TensorDictBase, keep: Schema | None = None) -> TensorDictBase:
    """Drop sampler bookkeeping keys (``"index"``, weights) that ``keep`` does not hold."""
    drop = [k for k in BOOKKEEPING_KEYS if (keep is None or k not in keep) and k[0] in td.keys()]
    return td.exclude(*drop) if drop else td


def peek_schema(obj) -> Schema:
    """The schema of a foreign source's rows, read without drawing from its RNG if possible."""
    row = None
    for getter in (lambda: obj[:1], lambda: obj.storage[:1]):
        try:
            row = getter()
        except Exception:  # noqa: BLE001 - any failure means "try the next way"
            continue
        if isinstance(row, TensorDictBase) and row.batch_dims >= 1:
            break
        row = None
    if row is None:
        row = obj.sample(1)
    if not isinstance(row, TensorDictBase):
        raise TypeError(
            f"the offline source {type(obj).__name__} returned a {type(row).__name__}, "
            "not a TensorDict; mixreplay mixes TensorDict rows"
        )
    schema = Schema.from_tensordict(row, batch_dims=row.batch_dims)
    return schema.without(BOOKKEEPING_KEYS)


class ForeignSource:
    """An offline source mixreplay cannot read directly: it samples itself."""

    def __init__(self, obj):
        self.obj = obj
        self._schema: Schema | None = None

    def __len__(self) -> int:
        return len(self.obj)

    def available(self) -> int:
        return len(self.obj)

    @property
    def schema(self) -> Schema:
        if self._schema is None:
            self._schema = peek_schema(self.obj)
        return self._schema

    def sample(self, n: int) -> TensorDictBase:
        td = self.obj.sample(n)
        if td.batch_size[:1] != torch.Size([n]) or td.batch_dims != 1:
            td = td.reshape(-1)
        if td.batch_size[0] != n:
            raise ValueError(
                f"the offline source {type(self.obj).__name__} returned {td.batch_size[0]} rows "
                f"when asked for {n}; set its own batch_size to None or to the requested size"
            )
        return td

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """A reference (type and size): a foreign source's rows and RNG are its own."""
        return {"kind": "foreign", "type": type(self.obj).__name__, "rows": len(self)}

    def __repr__(self) -> str:
        return type(self.obj).__name__
