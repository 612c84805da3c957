"""RayWriter: a collector's side of a RayReplayBuffer, batching rows into few messages."""

from __future__ import annotations

import collections
import sys

import torch
from tensordict import TensorDictBase

from mixreplay.distributed.wire import (
    MAX_MESSAGE_BYTES,
    MAX_SPLIT,
    Packer,
    check_rows,
    inline_rows,
    write_row,
)
from mixreplay.storages.base import check_row

__all__ = ["RayWriter"]


class RayWriter:
    """Batched, non-blocking writes to a :class:`~mixreplay.distributed.RayReplayBuffer`.

    Rows given to :meth:`add` or :meth:`extend` are packed into a staging array
    and sent as one message once it holds ``chunk_rows`` rows (by default as many
    as Ray sends inline, ~96 KiB), without waiting for the actor. At most
    ``max_in_flight`` messages are unacknowledged: when the actor falls behind,
    the writer keeps staging instead of waiting and sends the backlog as one
    larger message (up to ``max_message_bytes``) as soon as a slot frees. Slow
    collectors thus send small, prompt messages, and fast ones few large ones.

    Rows reach the buffer when their message is sent: call :meth:`flush` to
    send a partial chunk (at the end of an episode, or before the learner must
    see the rows). An error from the actor (e.g. rows whose keys do not match
    the buffer's) is raised by the call that next waits on that message, or by
    :meth:`flush`. Use a writer from one thread; make one per process (it does
    not pickle: pickle the handle and call ``handle.writer()`` there).

    Create it with :meth:`RayReplayBuffer.writer`; as a context manager it
    flushes on exit. In a collector (a Ray task or actor) handed the buffer's
    handle ``rb`` (the example of :class:`~mixreplay.distributed.RayReplayBuffer`
    runs one)::

        with rb.writer() as w:
            for transition in rollout():      # TensorDicts with batch_size []
                w.add(transition)
    """

    def __init__(
        self,
        handle,
        *,
        chunk_rows: int | None = None,
        max_in_flight: int = 4,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        **extend_kwargs,
    ):
        for name, value, lo in (
            ("chunk_rows", chunk_rows, 1),
            ("max_in_flight", max_in_flight, 1),
            ("max_message_bytes", max_message_bytes, 1),
        ):
            if value is None and name == "chunk_rows":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
        self._handle = handle
        self._method = handle.actor.extend_packed
        self._chunk_rows = chunk_rows
        self._max_in_flight = max_in_flight
        self._max_bytes = max_message_bytes
        self._kwargs = extend_kwargs
        self._packer = Packer()
        self._stage: torch.Tensor | None = None
        self._stage_key: str | None = None
        self._views: list[torch.Tensor] = []
        self._chunk = 0  # rows per regular message
        self._staged = 0
        self._pending: collections.deque = collections.deque()
        self.rows_sent = 0
        self.messages_sent = 0

    # -- writing ------------------------------------------------------------------------------

    def add(self, row: TensorDictBase) -> None:
        """Stage one row (a TensorDict with batch ``[]``)."""
        check_row(row)
        leaves = self._packer.leaves(row)
        self._ready_for(self._packer)
        write_row(self._packer.layout, leaves, self._views, self._staged)
        self._staged += 1
        if self._staged >= self._chunk:
            self._maybe_send()

    def extend(self, data: TensorDictBase) -> None:
        """Stage the rows of ``data`` (batch ``[n]``), sending full chunks as they fill."""
        n = check_rows(data)
        packer = self._packer
        leaves = packer.leaves(data)
        self._ready_for(packer)
        layout = packer.layout
        if self._staged == 0 and n > MAX_SPLIT * self._chunk:
            words = torch.zeros(n, layout.row_words, dtype=torch.int64)
            layout.write(leaves, layout.group_views(words))
            self._wait_for_slot()
            self._send(words.numpy(), n)
            return
        capacity = self._stage.shape[0]
        pos = 0
        while pos < n:
            start = self._staged
            if start == capacity:  # the backlog reached max_message_bytes: wait for the actor
                self._wait_for_slot()
                self._send_stage()
                start = 0
            m = min(n - pos, capacity - start)
            layout.write(leaves, [v[start : start + m] for v in self._views], slice(pos, pos + m))
            self._staged += m
            pos += m
        if self._staged >= self._chunk:
            self._maybe_send()

    def _ready_for(self, packer: Packer) -> None:
        """A staging array for the packer's layout; rows of a previous layout are sent first."""
        if packer.key == self._stage_key:
            return
        if self._staged:
            self._wait_for_slot()
            self._send_stage()
        layout = packer.layout
        self._chunk = self._chunk_rows or inline_rows(layout.row_bytes)
        capacity = max(self._chunk, self._max_bytes // layout.row_bytes)
        self._stage = torch.zeros(capacity, layout.row_words, dtype=torch.int64)
        self._views = layout.group_views(self._stage)
        self._stage_key = packer.key

    def _maybe_send(self) -> None:
        """Send the staged rows if a message slot is free; otherwise keep staging."""
        if len(self._pending) >= self._max_in_flight and not self._reap():
            if self._staged < self._stage.shape[0]:
                return  # the actor is behind: coalesce into a larger message
            self._wait_for_slot()
        self._send_stage()

    def _reap(self) -> bool:
        """Collect the acknowledgements that arrived; whether a slot is free now."""
        ray = sys.modules["ray"]
        done, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        if not done:
            return False
        done = set(done)
        while self._pending and self._pending[0] in done:
            self._handle._get(self._pending.popleft())  # raises an error the actor returned
        return len(self._pending) < self._max_in_flight

    def _wait_for_slot(self) -> None:
        while len(self._pending) >= self._max_in_flight:
            self._handle._get(self._pending.popleft())

    def _send_stage(self) -> None:
        if self._staged:
            # Ray copies an argument into its message (or its object store) when .remote()
            # is called, so the staging array is free to be refilled right after.
            self._send(self._stage[: self._staged].numpy(), self._staged)
            self._staged = 0

    def _send(self, words, n: int) -> None:
        # through the handle, so writes stay in order with its other calls (and prefetches)
        self._pending.append(
            self._handle._submit(self._method, self._stage_key, words, self._kwargs, False)
        )
        self.rows_sent += n
        self.messages_sent += 1

    def flush(self, *, wait: bool = True) -> None:
        """Send the staged rows; with ``wait``, return once the actor has written every row sent."""
        if self._staged:
            self._wait_for_slot()
            self._send_stage()
        if wait:
            while self._pending:
                self._handle._get(self._pending.popleft())

    @property
    def rows_staged(self) -> int:
        """Rows packed but not sent yet."""
        return self._staged

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged (as far as this writer has checked)."""
        return len(self._pending)

    def __enter__(self) -> RayWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()
        elif self._staged:
            self._send_stage()

    def __reduce__(self):
        raise TypeError(
            "a RayWriter does not pickle (it holds staged rows); pickle the RayReplayBuffer "
            "handle instead and call handle.writer() in the process that writes"
        )

    def __repr__(self) -> str:
        return (
            f"RayWriter(staged={self._staged}, in_flight={len(self._pending)}, "
            f"sent={self.rows_sent} rows in {self.messages_sent} messages)"
        )
