"""A rate-limited buffer in a Ray actor: the actor never waits, its callers do.

The buffer actor runs one call at a time, in order (reproducible batches and
whole-message writes rely on it), so a call waiting inside it for the rate
limiter would stop every other call, the inserts it waits for included. Instead
the actor asks its buffer with ``timeout=0``: a ``sample`` or ``extend`` the band
lets through runs as usual; one it holds is answered at once with a
:class:`Blocked` (for an ``extend``, after writing the rows the band allows), and
the caller tries again after a pause (:class:`Poll`: 1 ms, doubling up to 10 ms)
until its own ``timeout``. Between tries the actor serves every other call
(``len``, checkpoints, priority updates, other writers' rows).

Writes stay exactly once and in order: a chunk the limiter holds keeps its id,
the actor records the rows it applied (see :mod:`~mixreplay.distributed.chunks`),
and the chunk sent again applies only the rest. A chunk whose writer has an
earlier chunk still held (rows between the chunk's floor and its start not yet
applied) is held too, so a writer's rows enter the buffer in the order it wrote
them.

A batch counts as a sample when the actor draws it: with ``prefetch=k`` on the
handle, up to ``k`` batches drawn ahead (requests in flight) are counted before
the learner takes them; while the limiter holds the learner, one request at a
time is in flight.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

import numpy as np

from mixreplay.errors import BufferClosedError, RateLimitTimeoutError
from mixreplay.rate_limit import RateCounts, RateLimiter, timeout_error

__all__ = ["POLL_FIRST", "POLL_MAX", "Blocked", "Poll"]

#: the first pause before a held call is tried again (seconds); it doubles up to POLL_MAX
POLL_FIRST = 0.001
POLL_MAX = 0.01


class Blocked(NamedTuple):
    """The actor's answer to a ``sample`` or a chunk of rows the rate limiter holds."""

    limiter: RateLimiter
    counts: RateCounts
    #: rows of the chunk applied so far (0 for a sample)
    written: int = 0
    #: the chunk's slots, -1 for rows not applied (a blocking write's chunk), else None
    slots: np.ndarray | None = None

    @classmethod
    def of(cls, err: RateLimitTimeoutError) -> Blocked:
        """What the actor answers for the call that ``err`` (raised with ``timeout=0``) ended."""
        return cls(err.limiter, RateCounts(err.inserts, err.samples, err.size))

    def error(self, call: str, timeout: float | None, written: int = 0, index: Any = None):
        """The caller's :class:`~mixreplay.errors.RateLimitTimeoutError` once its time is up."""
        return timeout_error(call, timeout, self.limiter, self.counts, written=written, index=index)


class Poll:
    """The pauses of one call that the rate limiter holds, up to its ``timeout``.

    Args:
        timeout: seconds the call may wait in all (``None``: until allowed).
        killed: set by the handle's ``kill()``; wakes the pause with
            :class:`~mixreplay.errors.BufferClosedError`.
    """

    def __init__(self, timeout: float | None, killed: threading.Event):
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.delay = POLL_FIRST
        self.killed = killed

    def pause(self, blocked: Blocked, call: str, written: int = 0, index: Any = None) -> None:
        """Wait before the next try; past the deadline, raise the call's timeout error."""
        delay = self.delay
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise blocked.error(call, self.timeout, written, index)
            delay = min(delay, left)
        if self.killed.wait(delay):
            raise BufferClosedError(
                f"the buffer actor was killed while {call} waited for its rate limiter "
                f"({blocked.limiter!r})"
            )
        self.delay = min(2 * self.delay, POLL_MAX)
