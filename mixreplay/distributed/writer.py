"""RayWriter: a collector's side of a RayReplayBuffer, batching rows into few messages."""

from __future__ import annotations

import collections
import logging
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from mixreplay._validate import check_int
from mixreplay.distributed.chunks import ChunkIds, mint_writer_id
from mixreplay.distributed.limited import Blocked, Poll
from mixreplay.distributed.wire import (
    MAX_MESSAGE_BYTES,
    MAX_SPLIT,
    Packer,
    check_rows,
    inline_rows,
    write_row,
)
from mixreplay.errors import BufferActorError, BufferClosedError, WriterEvictedError
from mixreplay.rate_limit import check_timeout
from mixreplay.storages.base import check_row

__all__ = ["RayWriter"]

log = logging.getLogger(__name__)


@dataclass
class _Message:
    """A chunk of rows sent and not acknowledged yet: kept until then, to be resent if need be."""

    start: int  # the writer's number of its first row
    key: str
    words: np.ndarray
    rows: int
    ref: Any = None


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

    Identity: a writer made inside a Ray task (or an actor method call, in its
    own thread) takes an identity derived from the task's id and from how many
    writers the task made before; Ray keeps a task's id when it retries it, so
    the retry's writers send their rows under the same identities and row numbers,
    and the actor applies each row once, however the rows are cut into messages.
    Elsewhere (the driver, an actor's ``__init__``, your own threads) it is random.

    Exactly once: each message is a chunk with an id (see
    :mod:`~mixreplay.distributed.chunks`) and the writer keeps it until the actor
    acknowledges it. If the actor dies or restarts, the call that was waiting raises
    :class:`~mixreplay.errors.BufferActorError`; the rows given to that call are
    kept (staged), so do not add them again. Once the actor is back (with
    ``ray_options={"max_restarts": ...}``), :meth:`flush` resends every
    unacknowledged message under its id, and the actor applies each exactly once:
    a message it had already written (and checkpointed) is acknowledged, not
    written twice. With ``max_task_retries`` Ray resends them itself and no error
    reaches the writer.

    If the actor has dropped this writer's record (more than ``max_writers``
    writers since its last write) and cannot tell whether it holds the rows of a
    message, the message is refused with :class:`~mixreplay.errors.WriterEvictedError`
    and the writer refuses every later call with it: write the remaining rows with
    a new writer.

    Rate limits: when the buffer's rate limiter holds this writer's rows (the
    learner is behind), the actor writes what its band allows and answers the rest
    held; the writer then sends one message at a time, after pauses of 1 to 10 ms,
    and :meth:`add`, :meth:`extend` and :meth:`flush` wait instead of staging more
    (so a collector runs no further ahead than the band and one message). After
    ``timeout`` seconds without a row going in they raise
    :class:`~mixreplay.errors.RateLimitTimeoutError`; the writer keeps the rows not
    written, and a later call (or :meth:`flush`) sends them, exactly once. Once the
    buffer is closed (``rb.close()``), the call that learns it raises
    :class:`~mixreplay.errors.BufferClosedError`, and so does every later one.

    Create it with :meth:`RayReplayBuffer.writer`; as a context manager it
    closes on exit (:meth:`close`: flush, then tell the actor it is done). In a collector (a Ray task or actor) handed the buffer's
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
        timeout: float | None = None,
        **extend_kwargs,
    ):
        if chunk_rows is not None:
            chunk_rows = check_int(chunk_rows, "chunk_rows", min=1)
        max_in_flight = check_int(max_in_flight, "max_in_flight", min=1)
        max_message_bytes = check_int(max_message_bytes, "max_message_bytes", min=1)
        self._handle = handle
        self._method = handle.actor.extend_packed
        self._chunk_rows = chunk_rows
        self._max_in_flight = max_in_flight
        self._max_bytes = max_message_bytes
        self._kwargs = extend_kwargs
        self._packer = Packer()
        self._stage = torch.zeros(0, 0, dtype=torch.int64)  # replaced by the first row's layout
        self._stage_key = ""
        self._views: list[torch.Tensor] = []
        self._chunk = 0  # rows per regular message
        self._staged = 0
        self._pending: collections.deque[_Message] = collections.deque()
        # Messages to send, in order: new ones not submitted yet (the actor is behind) and
        # ones that failed with the actor unavailable, to be resent under their ids.
        self._unsent: list[_Message] = []
        # Minted here, in the thread and task that made the writer: a Ray task that is
        # retried makes its writers again in the same order, with the same identities.
        self._ids = ChunkIds(mint_writer_id("writer"))
        # once set, every call raises it
        self._refused: WriterEvictedError | BufferClosedError | None = None
        self._timeout = check_timeout(timeout)
        self._held = False  # the rate limiter holds this writer's rows: one message at a time
        self._poll: Poll | None = None  # the pauses since the last row went in
        self.rows_sent = 0
        self.messages_sent = 0
        self.messages_resent = 0

    # -- writing ------------------------------------------------------------------------------

    def add(self, row: TensorDictBase) -> None:
        """Stage one row (a TensorDict with batch ``[]``)."""
        if self._refused is not None:
            raise self._refused
        self._poll = None
        check_row(row)
        leaves = self._packer.leaves(row)
        self._ready_for(self._packer)
        write_row(self._packer.layout, leaves, self._views, self._staged)
        self._staged += 1
        if self._staged >= self._chunk:
            self._maybe_send()

    def extend(self, data: TensorDictBase) -> None:
        """Stage the rows of ``data`` (batch ``[n]``), sending full chunks as they fill."""
        if self._refused is not None:
            raise self._refused
        self._poll = None
        n = check_rows(data)
        packer = self._packer
        leaves = packer.leaves(data)
        self._ready_for(packer)
        layout = packer.layout
        if self._staged == 0 and n > MAX_SPLIT * self._chunk:
            words = torch.zeros(n, layout.row_words, dtype=torch.int64)
            layout.write(leaves, layout.group_views(words))
            self._queue(words.numpy(), n)  # a fresh array: kept as it is until acknowledged
            self._drain()
            return
        capacity = self._stage.shape[0]
        pos = 0
        while pos < n:
            start = self._staged
            if start == capacity:  # the backlog reached max_message_bytes
                # Queued without waiting: every row of this call is taken before the writer
                # waits for the actor, so an error while waiting never splits the call.
                self._queue_stage()
                start = 0
            m = min(n - pos, capacity - start)
            layout.write(leaves, [v[start : start + m] for v in self._views], slice(pos, pos + m))
            self._staged += m
            pos += m
        if self._unsent:
            self._drain()  # waits for the actor: the backlog is full
        if self._staged >= self._chunk:
            self._maybe_send()

    def _ready_for(self, packer: Packer) -> None:
        """A staging array for the packer's layout; rows of a previous layout are sent first."""
        if packer.key == self._stage_key:
            return
        self._queue_stage()  # sent by the call's next wait, after its rows are staged
        layout = packer.layout
        self._chunk = self._chunk_rows or inline_rows(layout.row_bytes)
        capacity = max(self._chunk, self._max_bytes // layout.row_bytes)
        self._stage = torch.zeros(capacity, layout.row_words, dtype=torch.int64)
        self._views = layout.group_views(self._stage)
        self._stage_key = packer.key

    def _maybe_send(self) -> None:
        """Send the staged rows if a message slot is free; otherwise keep staging."""
        if len(self._pending) >= self._max_in_flight and not self._reap():
            if self._staged < self._stage.shape[0] and not self._held:
                return  # the actor is behind: coalesce into a larger message
            self._wait_for_slot()
        self._send_stage()

    def _reap(self) -> bool:
        """Collect the acknowledgements that arrived; whether a slot is free now."""
        ray = sys.modules["ray"]
        refs = [m.ref for m in self._pending]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not done:
            return False
        done = set(done)
        while self._pending and self._pending[0].ref in done:
            self._ack()  # raises an error the actor returned
        return len(self._pending) < self._max_in_flight

    def _wait_for_slot(self) -> None:
        while len(self._pending) >= self._max_in_flight:
            self._ack()

    def _ack(self) -> None:
        """Wait for the oldest message in flight to be acknowledged."""
        msg = self._pending.popleft()
        try:
            result = self._handle._get(msg.ref, _RETRY)
        except BufferActorError as err:
            if self._held and self._handle._killed.is_set():  # killed while the rows waited
                raise BufferClosedError(
                    "the buffer actor was killed (kill()) while this RayWriter's rows waited "
                    "for its rate limiter"
                ) from err
            # It, and every message sent after it, may or may not have been written:
            # keep them all, to be resent under their ids (the actor drops repeats).
            failed = [msg, *self._pending]
            self._pending.clear()
            _settle_refs([m.ref for m in failed])  # no attempt still runs when they are resent
            self._unsent = sorted([*self._unsent, *failed], key=lambda m: m.start)
            raise
        except (WriterEvictedError, BufferClosedError) as err:
            # The actor dropped this writer's record, or the buffer was closed: it refuses
            # every later message too (they may repeat rows it holds; or nothing goes in any
            # more). The writer stops; rows go to a new one (of a new buffer).
            self._refused = err
            _drop_refs([m.ref for m in self._pending])
            self._pending.clear()
            self._unsent.clear()
            self._staged = 0
            raise
        except BaseException:
            self._ids.done([msg.start])  # refused by the buffer (its error): never resent
            raise
        if isinstance(result, Blocked):
            self._hold(msg, result)
            return
        self._held, self._poll = False, None
        self._ids.done([msg.start])

    def _hold(self, msg: _Message, blocked: Blocked) -> None:
        """The rate limiter holds ``msg`` (in part): it and the later ones wait, then go again."""
        later = list(self._pending)  # held behind it by the actor (rows stay in order)
        self._pending.clear()
        _settle_refs([m.ref for m in later])
        for m in (msg, *later):
            m.ref = None  # held, not failed: sent again, not counted as resent
        self._unsent = sorted([*self._unsent, msg, *later], key=lambda m: m.start)
        self._held = True
        if self._poll is None:
            self._poll = Poll(self._timeout, self._handle._killed)
        self._poll.pause(blocked, f"a RayWriter's rows ({self.rows_staged + self.in_flight} kept)")

    def _drain(self, wait: bool = True) -> None:
        """Submit the unsent messages in order (waiting for free slots), failed ones again.

        While the rate limiter holds this writer's rows, one at a time: each waited for
        (unless not ``wait``) before the next goes.
        """
        while self._unsent:
            if self._held:
                if self._pending:
                    if not wait:
                        return
                    self._ack()
                    continue
            else:
                self._wait_for_slot()
                if self._held:  # a message came back held while waiting for a slot
                    continue
            msg = self._unsent.pop(0)
            if msg.ref is not None:
                self.messages_resent += 1
            self._submit(msg)

    def _send_stage(self, wait: bool = True) -> None:
        self._queue_stage()
        self._drain(wait)

    def _queue_stage(self) -> None:
        if self._staged:
            # The staging array is refilled right away, so the message keeps a copy of its
            # rows until the actor acknowledges it (to resend it if the actor fails).
            self._queue(self._stage[: self._staged].numpy().copy(), self._staged)
            self._staged = 0

    def _queue(self, words: np.ndarray, n: int) -> None:
        # Queued before anything waits: if the actor fails meanwhile, these rows stay
        # queued (neither lost nor staged twice) and flush() sends them.
        (start,) = self._ids.take([n])
        self._unsent.append(_Message(start, self._stage_key, words, n))
        self.rows_sent += n
        self.messages_sent += 1

    def _submit(self, msg: _Message) -> None:
        # through the handle, so writes stay in order with its other calls (and prefetches)
        msg.ref = self._handle._submit(
            self._method, msg.key, msg.words, self._kwargs, False, self._ids.chunk_id(msg.start)
        )
        self._pending.append(msg)

    def flush(self, *, wait: bool = True) -> None:
        """Send the staged rows; with ``wait``, return once the actor has written every row sent.

        Messages that failed because the actor was unavailable are resent first,
        under their chunk ids (the actor applies each once).
        """
        if self._refused is not None:
            raise self._refused
        self._poll = None
        self._drain(wait)
        if self._staged:
            if not self._held:
                self._wait_for_slot()
            self._send_stage(wait)
        if wait:
            while self._pending or self._unsent:
                if self._pending:
                    self._ack()
                else:
                    self._drain()

    @property
    def rows_staged(self) -> int:
        """Rows packed but not sent yet."""
        return self._staged

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged (as far as this writer has checked).

        Includes messages that failed with the actor unavailable, which :meth:`flush` resends.
        """
        return len(self._pending) + len(self._unsent)

    def close(self) -> None:
        """Flush and wait, then tell the actor this writer is done.

        A closed writer's record is the first the actor drops when its table of
        writers is full (``max_writers``); until then, a retried task that sends
        these rows again is still recognised. Use the writer no more after this.
        """
        self.flush()
        ids = self._ids
        if ids.rows:  # the actor knows this writer: no message otherwise
            writer, _, floor, _ = ids.chunk_id(ids.rows)
            # not awaited: nothing to report, and a failure only keeps the record a while longer
            self._handle._submit(self._handle.actor.retire, writer, floor)

    def __enter__(self) -> RayWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        # An error is on its way out: send what is left without waiting (a wait could
        # raise and hide it). Unacknowledged messages stay with the writer.
        if self._refused is not None:
            return
        self._queue_stage()
        while self._unsent:
            self._submit(self._unsent.pop(0))

    def __reduce__(self):
        raise TypeError(
            "a RayWriter does not pickle (it holds staged rows); pickle the RayReplayBuffer "
            "handle instead and call handle.writer() in the process that writes"
        )

    def __repr__(self) -> str:
        return (
            f"RayWriter(staged={self._staged}, in_flight={self.in_flight}, "
            f"sent={self.rows_sent} rows in {self.messages_sent} messages)"
        )


_RETRY = (
    "The writer keeps every message not acknowledged, and the rows given to this call "
    "(do not add them again): once the actor is back, w.flush() resends them under their "
    "chunk ids and the buffer applies each exactly once (a restarted actor first reloads its "
    "last checkpoint; rows written after it are lost)"
)


def _drop_refs(refs: list) -> None:
    """Wait for ``refs`` and fetch what they hold, errors included (none is left unread)."""
    ray = sys.modules["ray"]
    for ref in refs:
        try:
            ray.get(ref)
        except Exception:  # noqa: BLE001 - the writer already stopped on the first error
            pass


def _settle_refs(refs: list) -> None:
    if refs:
        sys.modules["ray"].wait(refs, num_returns=len(refs))
