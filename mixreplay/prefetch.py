"""Prefetching: a background thread keeps the next batches of a buffer ready.

A buffer built with ``prefetch=N`` hands each :meth:`sample` a batch drawn
earlier by one worker thread, and asks the worker for the next one, so up to
``N`` batches are ready while the learner computes. Torch's gathers release the
GIL, so the worker's copies overlap the learner's own torch work.

Determinism: the worker is the only thread that draws while prefetching, it
draws in order, and every write (``extend``, ``add``, ``update_priority``,
``empty``, ``loads``) first waits for the draws already asked for. A batch is
therefore drawn from the buffer as it was when it was asked for (up to ``N``
samples earlier), never from a state that depends on thread timing: the same
seed and the same calls give the same batches. On a buffer that is not
written meanwhile, they are exactly the batches a buffer without prefetching
returns.

When batches are asked for: ``sample()`` hands out the oldest and owes one;
the next write asks for it right after writing (so it sees the new rows), or
else the next ``sample()`` does before handing out. A write therefore waits
only for draws asked for one learner step earlier (in a ``sample, extend,
compute`` loop they are done by then); up to ``N + 1`` batches exist at once.

Rewinding: before each draw the worker records what that draw will change (the
generator's state and the samplers' draw state, see
:meth:`~mixreplay.Sampler.draw_state`). :meth:`Prefetcher.discard` drops the
batches not yet handed out and restores that record, as if they had never been
drawn. Buffers discard before a checkpoint and before a sample of another
size, so a checkpoint holds the state of a buffer that drew exactly the batches
it returned. A draw that fails is handed out as its error, in its place: the
draws asked for after it are undone, and the buffer is left as the failed draw
left it, exactly as a buffer without prefetching is (the next ``sample()``
draws the next batch; it does not retry the failed one).

Pausing: :meth:`Prefetcher.paused` undoes the queued draws and holds the worker
idle until it is left: nothing is drawn ahead meanwhile, and a ``sample()`` in
that window draws in the caller's thread. Buffers pause around everything that
reads or replaces their whole state (``state_lock()``, ``state_dict()``,
``dumps``, ``load_state_dict``, ``empty``); the lock order this serves is
written in :mod:`mixreplay.buffers.base`.

Looking at the queue: :meth:`Prefetcher.pending` lists the batches asked for and
not handed out, oldest first, as :class:`Queued` futures (``rb._prefetch_queue``,
TorchRL's name, is that list); ``queued[0].result()`` waits for the batch the
next ``sample()`` hands out. :attr:`Prefetcher.lock` (``rb._futures_lock``) guards
the queue: whatever waits for the draws before reading or replacing the whole
state (a checkpoint, a load) holds it while it waits and undoes them.

The thread stops with the buffer's ``close()`` (also on leaving a ``with``
block, and when the buffer is garbage-collected).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any, Generic, TypeVar

import torch

from mixreplay import data_types
from mixreplay._validate import check_bool, check_int
from mixreplay.errors import LockOrderError

__all__ = [
    "HELD_LOCK_GRACE_S",
    "PrefetchClosed",
    "Prefetcher",
    "Queued",
    "check_pin_memory",
    "check_prefetch",
    "pin",
]

log = logging.getLogger(__name__)

#: what one draw returns (each buffer's own record of a batch)
T = TypeVar("T")


def check_prefetch(prefetch, batch_size) -> int:
    """Validate ``prefetch`` (``None``/0 or a positive int); a prefetching buffer needs a batch size."""
    if prefetch is None:
        return 0
    prefetch = check_int(
        prefetch,
        "prefetch",
        min=0,
        what="an int >= 0 (batches kept ready) or None",
        hint="e.g. prefetch=2",
    )
    if prefetch and batch_size is None:
        raise ValueError(
            f"prefetch={prefetch} needs batch_size= at construction: the worker draws batches "
            "before sample() is called, so it must know their size"
        )
    return prefetch


def check_pin_memory(pin_memory) -> bool:
    """Validate ``pin_memory``; pinned memory needs an accelerator."""
    check_bool(pin_memory, "pin_memory")
    if pin_memory and not torch.cuda.is_available():
        raise ValueError(
            "pin_memory=True needs a CUDA device (pinned host memory only speeds up copies to "
            "one) and none is available; drop pin_memory, or move batches with batch.to(device)"
        )
    return pin_memory


def pin(batch):
    """``batch`` (of any data type a buffer gives back) in page-locked memory, when on the CPU."""
    return data_types.pin_memory(batch)


#: seconds a call waits for a prefetched draw while its thread holds a lock that draw needs,
#: before it is refused (:class:`~mixreplay.errors.LockOrderError`): a draw not blocked on that
#: lock ends in far less
HELD_LOCK_GRACE_S = 1.0


def _wait_all(futures: list[Future], timeout: float | None) -> bool:
    """Wait until every future has run or was cancelled; ``False`` if ``timeout`` ran out.

    Not ``concurrent.futures.wait``: a future cancelled by the executor's shutdown is never
    marked as notified, and that wait would never see it end.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    for f in futures:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            f.exception(timeout=left)
        except CancelledError:
            pass
        except FuturesTimeout:
            return False
    return True


class PrefetchClosed(RuntimeError):
    """The prefetcher was closed (from another thread) while a call was using it; the caller
    draws in its own thread instead, as after ``close()``."""


class Queued(Generic[T]):
    """One batch asked of the prefetch worker and not handed out yet: a read-only future.

    :meth:`result` waits for the draw and returns what the buffer's next ``sample()``
    hands out for it (a :class:`~mixreplay.ReplayBuffer`: ``(batch, info)``), or raises
    the draw's error. Looking changes nothing: the batch stays queued, and a checkpoint
    or a load may still undo it (then a later ``sample()`` draws it again).
    """

    __slots__ = ("_future",)

    def __init__(self, future: Future):
        self._future = future

    def done(self) -> bool:
        """Whether the draw has run (or was cancelled by ``close()``)."""
        return self._future.done()

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def result(self, timeout: float | None = None) -> T:
        """The drawn batch, waiting up to ``timeout`` seconds (``None``: until drawn).

        Raises the draw's error, ``concurrent.futures.CancelledError`` for a draw
        ``close()`` cancelled, ``TimeoutError`` when ``timeout`` runs out.
        """
        _, result, err, _ = self._future.result(timeout)
        if err is not None:
            raise err
        return result

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queued) and other._future is self._future

    def __hash__(self) -> int:
        return hash(self._future)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled() else "done" if self.done() else "pending"
        return f"Queued({state})"


class _QueueLock:
    """The prefetch queue's lock: re-entrant, and never a hang for a thread that holds a lock
    the worker's draws take (``holds()`` names it).

    Another thread may hold the queue lock while it waits for the worker (a checkpoint, a
    load), and the worker may be waiting for a storage lock this thread holds: taking the
    queue lock then would wait for ever. Such a thread gets :data:`HELD_LOCK_GRACE_S`, then a
    :class:`~mixreplay.errors.LockOrderError`, nothing changed; leaving its block lets the
    others finish.
    """

    __slots__ = ("_holds", "lock")

    def __init__(self, holds: Callable[[], str | None]):
        self.lock = threading.RLock()
        self._holds = holds

    def __enter__(self) -> None:
        lock = self.lock
        if lock.acquire(blocking=False):
            return
        held = self._holds()
        if held is None:
            lock.acquire()
        elif not lock.acquire(timeout=HELD_LOCK_GRACE_S):
            raise LockOrderError(
                "this call needs the prefetch queue, which another thread holds while it waits "
                f"for the prefetch thread's draws; those need {held}, and this thread holds it "
                "(inside 'with <buffer or source>.state_lock():'?): the wait would never end. "
                "Call it after leaving that block, or build the buffer without prefetch; "
                "nothing was changed"
            )

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class Prefetcher(Generic[T]):
    """One worker thread drawing batches ahead, in order, with rewindable draws.

    Args:
        draw: called in the worker; returns what :meth:`next` hands out.
        depth: batches to keep asked for.
        snapshot: called in the worker right before each draw; returns what
            :meth:`discard` hands to ``restore`` to undo that draw and the later ones.
        restore: puts a snapshot back.
        ran_out: called after each draw; whether that draw ended an epoch
            (see :class:`~mixreplay.samplers.SamplerWithoutReplacement`).
        holds: called in a thread about to wait for the worker; names a lock the worker's
            draws take that this thread holds (``None``: none). Such a wait could never end
            (the worker waits for that lock): it is given :data:`HELD_LOCK_GRACE_S`, then
            refused with a :class:`~mixreplay.errors.LockOrderError`, nothing changed.

    :attr:`lock` guards the queue; it is held while waiting for the worker only by
    :meth:`discard`, :meth:`drop`, :meth:`revise`, :meth:`paused`'s entry and
    ``wait(hold=True)``, and the worker itself never takes it, so a caller that holds no
    storage lock never waits on it for long.
    """

    def __init__(
        self,
        draw: Callable[[], T],
        depth: int,
        *,
        snapshot: Callable[[], object],
        restore: Callable[[object], None],
        ran_out: Callable[[], bool],
        holds: Callable[[], str | None] = lambda: None,
    ):
        # Weak references to the owner's methods: the owner holds the prefetcher, and a buffer
        # dropped by the user is freed (and its thread stopped) without waiting for the GC.
        self._draw: weakref.WeakMethod[Any] = weakref.WeakMethod(draw)
        self._snapshot: weakref.WeakMethod[Any] = weakref.WeakMethod(snapshot)
        self._restore: weakref.WeakMethod[Any] = weakref.WeakMethod(restore)
        self._ran_out: weakref.WeakMethod[Any] = weakref.WeakMethod(ran_out)
        self._holds = holds
        self.depth = depth
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mixreplay-prefetch")
        self._queue: collections.deque[Future] = collections.deque()
        self._lock = _QueueLock(holds)
        self._started = False  # writes refill the queue only once sampling has begun
        self._pauses = 0  # > 0: nothing is asked of the worker (see paused())
        # The finalizer holds the executor, not the prefetcher: a dropped buffer stops its thread.
        self._finalizer = weakref.finalize(
            self, self._executor.shutdown, wait=False, cancel_futures=True
        )

    @staticmethod
    def _call(ref, *args):
        fn = ref()
        if fn is None:
            raise ReferenceError("the buffer that owned this prefetcher was garbage-collected")
        return fn(*args)

    def _job(self):
        snapshot = self._snapshot()
        if snapshot is None:  # the buffer is gone: an unraised error holds no frame, hence no cycle
            return None, None, ReferenceError("the buffer was garbage-collected"), False
        state = snapshot()
        try:
            result = self._call(self._draw)
        except Exception as err:  # handed to the caller of next(), in order
            return state, None, err, False
        return state, result, None, bool(self._call(self._ran_out))

    def _top_up(self) -> None:
        # depth + 1: the pop that follows leaves ``depth`` batches asked for between calls.
        if self._pauses:
            return
        while len(self._queue) < self.depth + 1:
            self._queue.append(self._executor.submit(self._job))

    def refill(self) -> None:
        """Ask for the batches owed, after a write (so they see it) once sampling has started."""
        with self._lock:
            if self._started and not self.closed:
                self._top_up()

    def _await(self, pending: list[Future]) -> None:
        """Wait for ``pending``; refused (LockOrderError) when they wait for a lock we hold."""
        if all(f.done() for f in pending):
            return
        held = self._holds()
        if held is None:
            _wait_all(pending, None)
            return
        if not _wait_all(pending, HELD_LOCK_GRACE_S):
            raise LockOrderError(
                f"this call waits for the prefetch thread's draws, which need {held}, and this "
                "thread holds it (inside 'with <buffer or source>.state_lock():'?): the wait "
                "would never end. Call it after leaving that block, or build the buffer "
                "without prefetch; nothing was changed"
            )

    def next(self) -> tuple[T, bool]:
        """The oldest prefetched result and its ``ran_out`` flag (drawn now if none is queued).

        An error raised by the draw is raised here, in the draw's place: the draws asked
        for after it are undone, and the state is the one the failed draw left (as
        without prefetching). While :meth:`paused`, or while this thread holds a lock the
        worker's draws take and nothing is queued, the draw runs in the caller's thread.
        The wait for the worker holds no lock. Raises :class:`PrefetchClosed` when the
        prefetcher is (or gets) closed.
        """
        with self._lock:
            if self.closed:
                raise PrefetchClosed("the prefetcher was closed")
            inline = bool(self._pauses) or (not self._queue and self._holds() is not None)
            if not inline:
                self._started = True
                if self._holds() is None:  # else new draws would wait for our lock
                    self._top_up()
                future = self._queue.popleft()
        if inline:
            _, result, err, ran_out = self._job()
        else:
            try:
                self._await([future])
            except LockOrderError:
                with self._lock:
                    self._queue.appendleft(future)  # as it was
                raise
            try:
                _, result, err, ran_out = future.result()
            except CancelledError:  # close() from another thread cancelled this draw
                raise PrefetchClosed("the prefetcher was closed") from None
        if err is not None:
            with self._lock:
                after = self._discard_locked()  # the state right after the failed draw
                if after is not None:
                    self._call(self._restore, after)
            raise err
        return result, ran_out

    def wait(self, *, hold: bool = False) -> None:
        """Block until every draw asked for so far has run (called before each write).

        With ``hold=True`` the wait holds :attr:`lock` (as a checkpoint's does), so no
        draw is asked for or handed out meanwhile; a load waits so before it checks
        the state it replaces.
        """
        with self._lock:
            pending = list(self._queue)
            if hold:
                self._await(pending)  # returns at once when every draw has run
                return
        self._await(pending)

    def _discard_locked(self):
        pending = list(self._queue)
        if not pending:
            return None
        self._await(pending)  # before anything changes: a refusal leaves the queue as it was
        self._queue.clear()
        first = pending[0]
        return None if first.cancelled() else first.result()[0]

    def discard(self) -> None:
        """Drop the batches not handed out yet and rewind to before they were drawn."""
        with self._lock:
            state = self._discard_locked()
            if state is not None:
                self._call(self._restore, state)

    def drop(self) -> None:
        """Drop the batches not handed out yet without rewinding (the state is being replaced)."""
        with self._lock:
            self._discard_locked()

    def revise(self, keep: Callable[[list[T | None]], bool]) -> None:
        """Keep the queued batches if ``keep(results)`` says so (``None`` for a failed draw),
        else discard them; no draw is asked for meanwhile (``keep`` sees a still queue)."""
        with self._lock:
            pending = list(self._queue)
            if not pending:
                return
            self._await(pending)
            if not keep([f.result()[1] for f in pending]):
                state = self._discard_locked()
                if state is not None:
                    self._call(self._restore, state)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Undo the queued draws and keep the worker idle until left (re-entrant).

        Meanwhile writes ask for no draws and :meth:`next` draws in the caller's thread,
        so a caller inside may take storage locks and read or replace the whole state
        without the worker ever waiting on them.
        """
        with self._lock:
            self._pauses += 1
            try:
                state = self._discard_locked()
                if state is not None:
                    self._call(self._restore, state)
            except BaseException:
                self._pauses -= 1
                raise
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1

    def queued(self) -> list[T | None]:
        """The results waiting to be handed out, oldest first (``None`` for a failed draw)."""
        self.wait()
        with self._lock:
            return [f.result()[1] for f in self._queue]

    def pending(self) -> tuple[Queued[T], ...]:
        """The batches asked for and not handed out yet, oldest first, as they are now."""
        with self._lock:
            return tuple(Queued(f) for f in self._queue)

    @property
    def lock(self) -> threading.RLock:
        """The queue's lock (re-entrant): held while a checkpoint or a load waits for the
        draws and undoes them, and briefly by every call that asks for or hands out a draw."""
        return self._lock.lock

    @property
    def ready(self) -> int:
        """Batches asked for and not yet handed out."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Undo the draws not handed out yet and stop the worker thread; idempotent.

        A :meth:`next` in another thread meanwhile raises :class:`PrefetchClosed` (its
        caller then draws in its own thread); none submits a draw after this."""
        with self._lock:
            # the draws not handed out are undone, in the same hold of the lock that stops
            # new ones being asked for: none is lost, none drawn twice
            if not self.closed:
                state = self._discard_locked()
                if state is not None:
                    self._call(self._restore, state)
            stopping = self._finalizer.detach() is not None
            if stopping:
                self._executor.shutdown(wait=False, cancel_futures=True)
        if stopping:
            self._executor.shutdown(wait=True)  # the draw in progress, with no lock held
