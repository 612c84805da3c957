"""The wire format between collectors, the buffer actor and the learner (no Ray here).

Rows travel packed: a ``[n]`` TensorDict becomes one ``int64 [n, W]`` array of
words (:class:`~mixreplay.schema.RowLayout`, the storages' own format) plus the
schema as a JSON string. Ray serializes a numpy array without pickling its
contents, so a message costs one copy however many keys a row has; a TensorDict
of many small tensors costs a pickle per leaf.

Message sizes follow what Ray does with arguments. Up to ``max_direct_call_object_size``
(100 KiB by default) an argument travels inside the task message; above it, it
goes through the object store, which on a 2-core machine costs about four inline
calls (measured with Ray 2.60: ~800 inline calls/s against ~200 through the store,
almost independent of size). Rows are therefore cut into inline messages of at
most :data:`INLINE_BYTES`, unless that would take more than :data:`MAX_SPLIT`
messages, in which case one large message through the store is cheaper.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import SchemaMismatchError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema
from mixreplay.storages.base import check_rows  # noqa: F401 - re-exported for the handle and writer

__all__ = [
    "INLINE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_SPLIT",
    "LayoutCache",
    "Packer",
    "check_rows",
    "inline_rows",
    "message_slices",
    "words_to_tensor",
    "write_row",
]

#: Largest message sent inline: Ray's default 100 KiB limit, less room for the pickle framing.
INLINE_BYTES = 96 * 1024
#: Above this many inline messages, one message through the object store is cheaper.
MAX_SPLIT = 4
#: Largest message a writer coalesces while the actor is behind (see :class:`~mixreplay.distributed.RayWriter`).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def message_slices(n: int, row_bytes: int, chunk_rows: int | None = None) -> list[slice]:
    """Cut ``n`` rows into messages: inline-sized pieces, or one piece when it is large.

    Args:
        n: rows to send.
        row_bytes: bytes per packed row.
        chunk_rows: rows per inline message; by default as many as fit in :data:`INLINE_BYTES`.

    Examples:
        >>> message_slices(1000, 112)
        [slice(0, 877, None), slice(877, 1000, None)]
        >>> message_slices(100_000, 112)
        [slice(0, 100000, None)]
    """
    chunk = chunk_rows or inline_rows(row_bytes)
    if n <= chunk or n > MAX_SPLIT * chunk:
        return [slice(0, n)]
    return [slice(i, min(n, i + chunk)) for i in range(0, n, chunk)]


def inline_rows(row_bytes: int) -> int:
    """Rows of ``row_bytes`` that fit in one inline message (at least 1)."""
    return max(1, INLINE_BYTES // max(1, row_bytes))


class Packer:
    """Client side: packs rows, reusing the layout of the previous write while rows keep it."""

    def __init__(self) -> None:
        self._layout: RowLayout | None = None
        self._key = ""

    @property
    def layout(self) -> RowLayout:
        """The layout of the rows packed last."""
        if self._layout is None:
            raise RuntimeError("no rows were packed yet")
        return self._layout

    @property
    def key(self) -> str:
        """The schema JSON of the rows packed last (``""`` before any)."""
        return self._key

    def leaves(self, data: TensorDictBase) -> list[torch.Tensor]:
        """The leaves of ``data`` (rows ``[n]`` or one row ``[]``) in packing order, on CPU.

        :attr:`layout` and :attr:`key` follow ``data``'s schema when it changes.
        """
        if self._layout is not None:
            try:
                leaves = self._layout.leaves_of(data)
            except SchemaMismatchError:
                leaves = None
            if leaves is not None:
                return _cpu(leaves)
        schema = Schema.from_tensordict(data, batch_dims=data.batch_dims)
        self._layout = layout = RowLayout(schema)
        self._key = schema.dumps()
        return _cpu(layout.leaves_of(data))

    def pack(self, data: TensorDictBase) -> np.ndarray:
        """``data`` (rows ``[n]``, or one row ``[]``) as new packed words ``int64 [n, W]``."""
        leaves = self.leaves(data)
        layout = self.layout
        if data.batch_dims == 0:
            words = torch.zeros(1, layout.row_words, dtype=torch.int64)
            write_row(layout, leaves, layout.group_views(words), 0)
            return words.numpy()
        words = torch.zeros(data.batch_size[0], layout.row_words, dtype=torch.int64)
        layout.write(leaves, layout.group_views(words))
        return words.numpy()


def write_row(
    layout: RowLayout, leaves: list[torch.Tensor], views: list[torch.Tensor], row: int
) -> None:
    """Write one row's leaves (no batch dim) into row ``row`` of packed group views.

    The single-row path of a collector: one ``cat`` per dtype group, no
    ``unsqueeze`` of the TensorDict (which costs more than the write).
    """
    for g, dest in zip(layout.groups, views):
        if len(g.fields) == 1:
            dest[row].copy_(leaves[g.fields[0]].reshape(-1))
        else:
            torch.cat([leaves[fi].reshape(-1) for fi in g.fields], out=dest[row])


def _cpu(leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    if not all(v.is_cpu for v in leaves):
        return [v.cpu() for v in leaves]
    return leaves


class LayoutCache:
    """Receiving side: the :class:`RowLayout` of each schema JSON seen, built once."""

    def __init__(self) -> None:
        self._layouts: dict[str, RowLayout] = {}

    def __call__(self, key: str) -> RowLayout:
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = RowLayout(Schema.from_json(json.loads(key)))
        return layout

    def unpack(
        self, key: str, words, device: torch.device | None = None, *, writable: bool = True
    ) -> TensorDict:
        """Rows ``words`` (numpy or tensor ``[n, W]``) as a TensorDict of views over them.

        With ``writable``, words Ray handed over read-only are copied first, so the
        batch is ordinary memory the caller may write to.
        """
        layout = self(key)
        t = words_to_tensor(words, writable=writable)
        if device is not None and t.device != device:
            t = t.to(device)
        return layout.unpack(t, device if device is not None else t.device)

    def copy_out(self, key: str, words, device: torch.device | None = None) -> TensorDict:
        """Rows ``words`` (numpy or tensor ``[n, W]``) as a sampled batch: a TensorDict of
        new tensors, one per leaf (each owns its storage, as a TorchRL batch's leaves do).

        The words are read in place (never copied whole first); bound for another device,
        they move there in one copy and the leaves are copied out on that device.
        """
        layout = self(key)
        t = words_to_tensor(words, writable=False)
        if device is not None and t.device != device:
            t = t.to(device)
        return layout.copy_out(t, device if device is not None else t.device)


def words_to_tensor(words, *, writable: bool) -> torch.Tensor:
    """A tensor over the array ``words``, shared when it is writable.

    A read-only array (Ray hands those over from its object store) is copied when
    ``writable``; otherwise it is wrapped as it is, for a caller that only reads it
    (the actor, which copies the rows into its storage).
    """
    if isinstance(words, torch.Tensor):
        return words
    if words.flags.writeable:
        return torch.from_numpy(words)
    if writable:
        return torch.from_numpy(words.copy())
    with warnings.catch_warnings():
        # Arrays Ray hands over from its object store are read-only. The tensor is only
        # read (its rows are copied into a storage or unpacked into a fresh batch).
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(words)
