"""What runs inside the buffer's Ray actor: the buffer, its wire endpoints, its checkpoints.

:class:`BufferHost` is a plain class; :class:`~mixreplay.distributed.RayReplayBuffer`
wraps it with ``ray.remote``. It builds the buffer itself, from the arguments it
is given, so an offline dataset named by ID or path is opened (memory-mapped) on
the actor's node and never travels.

Exactly-once writes: rows arrive in chunks that carry an id
(:mod:`~mixreplay.distributed.chunks`) numbering the writer's rows; rows the actor
already applied are acknowledged (with the slots they went to, while remembered)
and not applied again, so neither Ray's own retries (``max_task_retries`` for a
call, ``max_retries`` for a collector task) nor a caller's retry after an error
duplicates rows. The table of writers is bounded (``max_writers``).

Checkpoints: with ``checkpoint_dir``, every ``checkpoint_every`` rows received
(inside the write that crosses the mark) the actor saves ``{"buffer":
buffer.state_dict(), "writers": <the table of applied chunks>}`` as ONE directory,
``<checkpoint_dir>/buffer``, with :func:`mixreplay.checkpoint.save_state` (atomic: a
crash mid-save leaves the previous checkpoint). Rows and chunk ids are therefore
saved together and can never disagree. An actor that Ray *restarts*
(``max_restarts``) rebuilds the buffer from the same arguments and loads both: JSON
and raw tensor bytes, no pickled code. A fresh actor refuses a directory that
already holds a checkpoint unless ``resume=True``, so one run never silently
continues, or overwrites, another's. A checkpoint written by :meth:`dumps` (as
mixreplay did before chunk ids) still loads, with an empty table.

Rate limits: a buffer built with ``rate_limiter=`` is asked with ``timeout=0``,
and a call its limiter holds is answered with a
:class:`~mixreplay.distributed.limited.Blocked` for the caller to try again:
the actor itself never waits (see :mod:`~mixreplay.distributed.limited`).

Fault injection, for tests only: with the environment variable
``MIXREPLAY_TEST_EXIT_AFTER_CHECKPOINT`` set to a file path, the first actor
process that saves a checkpoint *inside a write* while that file exists deletes
it and exits with ``os._exit(1)`` right after the save, before replying: the
moment at which a retried write would otherwise be applied twice. Pass it with
``ray_options={"runtime_env": {"env_vars": {...}}}``; never set it in production.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict, TensorDictBase

from mixreplay.checkpoint import load_state, save_state
from mixreplay.distributed.chunks import MAX_WRITERS, ChunkId, WriterTable
from mixreplay.distributed.limited import Blocked
from mixreplay.distributed.wire import LayoutCache, Packer
from mixreplay.errors import CheckpointError, RateLimitTimeoutError

__all__ = ["BufferHost"]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "buffer"
#: Test-only fault injection (see the module docstring): a marker file's path.
EXIT_AFTER_CHECKPOINT = "MIXREPLAY_TEST_EXIT_AFTER_CHECKPOINT"


def _was_restarted() -> bool:
    """Whether Ray restarted this actor after a crash (False outside a Ray actor)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not an actor, or an API change: treat as a fresh start
        return False


def has_checkpoint(path: Path) -> bool:
    """A checkpoint at ``path``, or its previous copy left by a save cut between two renames."""
    return path.exists() or path.with_name(f".{path.name}.old").exists()


class BufferHost:
    """The buffer and the endpoints the handle calls (runs in the actor process).

    Args:
        buffer_cls: the buffer class (or any factory) to call.
        args, kwargs: its arguments.

    Keyword Args:
        checkpoint_dir: where checkpoints go (on the actor's node), or ``None``.
        checkpoint_every: save after this many rows received (``None``: only on
            :meth:`checkpoint`).
        resume: a fresh actor loads the checkpoint already in ``checkpoint_dir``.
        max_writers: writer records kept for exactly-once writes (see
            :class:`~mixreplay.distributed.chunks.WriterTable`).
        restarted: whether this is a restart (default: asked from Ray).

    A failure while building the buffer or loading its checkpoint is kept and
    raised by every call, so the handle shows the real error, not a dead actor.
    """

    def __init__(
        self,
        buffer_cls,
        args=(),
        kwargs=None,
        *,
        checkpoint_dir=None,
        checkpoint_every: int | None = None,
        resume: bool = False,
        max_writers: int = MAX_WRITERS,
        restarted: bool | None = None,
    ):
        self._error: BaseException | None = None
        self.buffer: Any = None
        self._layouts = LayoutCache()
        self._out = Packer()
        self._path = None if checkpoint_dir is None else Path(checkpoint_dir) / CHECKPOINT_NAME
        self._every = checkpoint_every
        self._since_save = 0
        self._rows_received = 0
        self._saves = 0
        self._restored_from: str | None = None
        self._max_writers = max_writers
        self._writers = WriterTable(max_writers)
        self._acknowledged_again = 0  # chunks received again, with nothing left to apply
        self._rows_again = 0  # rows received again and not re-applied
        self._checkpoint_error: str | None = None
        self._restarted = _was_restarted() if restarted is None else restarted
        self._limited = False  # the buffer has a rate limiter: asked with timeout=0
        try:
            self.buffer = buffer_cls(*args, **(kwargs or {}))
            self._limited = getattr(self.buffer, "rate_limiter", None) is not None  # any class
            self._restore(resume)
        except Exception as err:  # noqa: BLE001 - re-raised by every call
            log.exception(
                "could not build %s in the buffer actor",
                getattr(buffer_cls, "__name__", buffer_cls),
            )
            self._error = err

    def _restore(self, resume: bool) -> None:
        path = self._path
        if path is None or not has_checkpoint(path):
            return
        if not (self._restarted or resume):
            raise CheckpointError(
                f"checkpoint_dir {str(path.parent)!r} already holds a checkpoint ({path}); pass "
                "resume=True to continue from it, or give an empty checkpoint_dir for a new run"
            )
        try:
            state = load_state(path)
            writers = WriterTable(self._max_writers)
            if isinstance(state.get("buffer"), dict) and "writers" in state:
                writers.load_state_dict(state["writers"])
                state = state["buffer"]
            # else: a buffer checkpoint written by dumps(), from before chunk ids
            self.buffer.load_state_dict(state)
        except CheckpointError as err:
            raise CheckpointError(f"cannot load {path}: {err}") from err
        self._writers = writers
        self._restored_from = str(path)
        log.warning(
            "buffer actor %s: restored %d rows and %d writer records from %s",
            "restarted" if self._restarted else "resumed",
            len(self.buffer),
            len(writers),
            path,
        )

    def _buf(self):
        if self._error is not None:
            raise self._error
        return self.buffer

    # -- introspection -----------------------------------------------------------------------

    def describe(self) -> dict:
        """The buffer's class, public methods and properties, and :meth:`info`."""
        buf = self._buf()
        cls = type(buf)
        methods, properties = [], []
        for name in dir(cls):
            if name.startswith("_"):
                continue
            attr = inspect.getattr_static(cls, name)
            if isinstance(attr, property):
                properties.append(name)
            elif callable(attr) or isinstance(attr, (staticmethod, classmethod)):
                methods.append(name)
        properties += [n for n in vars(buf) if not n.startswith("_") and n not in properties]
        return {
            "buffer": cls.__qualname__,
            "module": cls.__module__,
            "methods": sorted(methods),
            "properties": sorted(properties),
            **self.info(),
        }

    def info(self) -> dict:
        """Where the actor runs and what it did: pid, node, restarts, checkpoints."""
        node_id = None
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()
        return {
            "pid": os.getpid(),
            "node_id": node_id,
            "restarted": self._restarted,
            "restored_from": self._restored_from,
            "checkpoint": None if self._path is None else str(self._path),
            "checkpoints_saved": self._saves,
            "checkpoint_error": self._checkpoint_error,
            "rows_received": self._rows_received,
            "chunks_acknowledged_again": self._acknowledged_again,
            "rows_acknowledged_again": self._rows_again,
            "writers_remembered": len(self._writers),
            "writers_evicted": self._writers.evicted,
            "slots_remembered": self._writers.slot_count(),
            "max_writers": self._writers.max_writers,
        }

    def alive(self) -> int:
        """A probe (Ray never retries it): the pid of the process running the actor."""
        return os.getpid()

    def length(self) -> int:
        return len(self._buf())

    # -- rows in and out ---------------------------------------------------------------------

    def extend_packed(
        self,
        key: str,
        words,
        kwargs: dict | None = None,
        want_index: bool = True,
        chunk: ChunkId | None = None,
    ):
        """Unpack ``words`` with the schema ``key`` and extend the buffer with them, once.

        Args:
            chunk: the chunk's id ``(writer, start, floor, attempt)``; rows of it that
                were applied before (a retry) are acknowledged, not applied again.

        Returns the slots written (numpy; -1 for rows applied before whose slots are
        no longer remembered) or, without ``want_index``, the row count.

        Raises:
            WriterEvictedError: the writer's record was dropped and the chunk may
                hold rows applied before (nothing is written).
        """
        buf = self._buf()
        if chunk is None:
            td = self._layouts.unpack(key, words, writable=False)
            if self._limited:  # never wait here (rows without an id: no exactly-once resend)
                kwargs = {**(kwargs or {}), "timeout": 0}
            index = buf.extend(td, **(kwargs or {}))
            n = td.batch_size[0]
            if self._wrote(n):
                _exit_if_asked()
            return _slots(index) if want_index else n
        chunk = (str(chunk[0]), int(chunk[1]), int(chunk[2]), int(chunk[3]))
        writer, start = chunk[0], chunk[1]
        n = len(words)
        todo = self._writers.missing(chunk, n)
        if self._limited:
            return self._extend_limited(key, words, kwargs, want_index, chunk, todo)
        if todo == [(0, n)]:  # the usual case: new rows
            td = self._layouts.unpack(key, words, writable=False)
            index = buf.extend(td, **(kwargs or {}))
            slots = _slots(index) if want_index else None
            self._writers.applied(writer, start, start + n, slots)
            self._writers.settle(chunk)
            if self._wrote(n):
                _exit_if_asked()
            return slots if want_index else n
        return self._again(key, words, kwargs, want_index, chunk, todo)

    def _again(self, key, words, kwargs, want_index: bool, chunk: ChunkId, todo: list):
        """A chunk some of whose rows were applied before (a retry): apply only the others."""
        writer, start = chunk[0], chunk[1]
        n = len(words)
        fresh = sum(b - a for a, b in todo)
        self._rows_again += n - fresh
        if not todo:
            self._acknowledged_again += 1
        log.info(
            "rows %d-%d of writer %s: %d were applied before and are acknowledged, %d applied now",
            start,
            start + n - 1,
            writer[:12],
            n - fresh,
            fresh,
        )
        out = self._writers.slots(writer, start, start + n) if want_index else None
        buf = self._buf()
        for a, b in todo:
            td = self._layouts.unpack(key, words[a:b], writable=False)
            index = buf.extend(td, **(kwargs or {}))
            slots = _slots(index) if want_index else None
            self._writers.applied(writer, start + a, start + b, slots)
            if out is not None:
                out[a:b] = slots
        self._writers.settle(chunk)
        if fresh and self._wrote(fresh):
            _exit_if_asked()
        return out if want_index else n

    def _extend_limited(
        self, key, words, kwargs, want_index: bool, chunk: ChunkId, todo: list
    ) -> Any:
        """A chunk through the rate limiter: the rows its band allows now, then a Blocked."""
        writer, start, floor = chunk[0], chunk[1], chunk[2]
        n = len(words)
        applied = n - sum(b - a for a, b in todo)  # rows of this chunk applied before
        if applied:
            self._rows_again += applied
            if not todo:
                self._acknowledged_again += 1
        out = self._writers.slots(writer, start, start + n) if want_index else None
        blocked = None
        if todo and self._writers.waiting_before(writer, floor, start):
            # an earlier chunk of this writer is held: this one waits behind it (rows in order)
            blocked = Blocked(self.buffer.rate_limiter, self.buffer.rate_limiter_counts)
            todo = []
        fresh = 0
        buf = self._buf()
        for a, b in todo:
            td = self._layouts.unpack(key, words[a:b], writable=False)
            try:
                index, k = buf.extend(td, timeout=0, **(kwargs or {})), b - a
            except RateLimitTimeoutError as err:
                index, k = err.index, err.written
                blocked = Blocked.of(err)
            if k:
                slots = _slots(index) if want_index else None
                self._writers.applied(writer, start + a, start + a + k, slots)
                if out is not None:
                    out[a : a + k] = slots
                fresh += k
            if blocked is not None:
                break
        self._writers.settle(chunk)
        if fresh and self._wrote(fresh):
            _exit_if_asked()
        if blocked is not None:
            return blocked._replace(written=applied + fresh, slots=out)
        return out if want_index else n

    def retire(self, writer: str, floor: int) -> None:
        """The writer was closed: its record goes first when the table is full."""
        self._writers.retire(str(writer), int(floor))

    def sample_packed(self, batch_size: int | None, return_info: bool):
        """One batch as ``(key, words, batch_shape, info)``: packed rows and the info's leaves.

        A transform's output that is not a TensorDict travels as it is (``key`` None).
        """
        buf = self._buf()
        if self._limited:  # never wait here: a held sample is answered, and asked again
            try:
                out = buf.sample(batch_size, return_info=return_info, timeout=0)
            except RateLimitTimeoutError as err:
                return Blocked.of(err)
        else:
            out = buf.sample(batch_size, return_info=return_info)
        batch, info = out if return_info else (out, None)
        if info is not None:
            info = {
                k: v.cpu().numpy() for k, v in info.items(include_nested=True, leaves_only=True)
            }
        if not isinstance(batch, TensorDictBase) or batch.batch_dims == 0:
            return None, batch, None, info
        shape = tuple(batch.batch_size)
        flat = batch if batch.batch_dims == 1 else batch.reshape(-1)
        words = self._out.pack(flat)  # the layout is rebuilt only when the batch's schema changes
        return self._out.key, words, shape, info

    # -- anything else -----------------------------------------------------------------------

    def call(self, name: str, args: tuple = (), kwargs: dict | None = None):
        """Call the buffer's method ``name``."""
        if self._limited and name in _WAITING_CALLS:
            raise TypeError(
                f"rb.{name}() would wait for the rate limiter inside the buffer actor, which "
                "serves one call at a time; use rb.sample() (it waits on the caller's side)"
            )
        return _sendable(f"rb.{name}(...)", getattr(self._buf(), name)(*args, **(kwargs or {})))

    def get(self, name: str):
        """Read the buffer's attribute or property ``name``."""
        return _sendable(f"rb.{name}", getattr(self._buf(), name))

    # -- checkpoints -------------------------------------------------------------------------

    def _wrote(self, n: int) -> bool:
        """Count ``n`` rows written; checkpoint when due. Whether a checkpoint was saved."""
        self._rows_received += n
        if self._every is None:
            return False
        self._since_save += n
        if self._since_save < self._every:
            return False
        try:
            self.checkpoint()
        except Exception as err:  # noqa: BLE001 - the rows ARE written: the write succeeded
            # Failing the write would tell its caller to retry rows the buffer holds; the
            # next write tries the checkpoint again, and actor_info() reports the error.
            self._checkpoint_error = f"{type(err).__name__}: {err}"
            log.exception("buffer actor: checkpoint to %s failed", self._path)
            return False
        return True

    def checkpoint(self) -> str:
        """Save the buffer and its table of applied chunks to ``<checkpoint_dir>/buffer`` now."""
        buf = self._buf()
        if self._path is None:
            raise ValueError(
                "this buffer actor has no checkpoint_dir; create it with "
                "RayReplayBuffer(..., checkpoint_dir='/abs/path') or call rb.dumps(path)"
            )
        save_state(self._path, {"buffer": buf.state_dict(), "writers": self._writers.state_dict()})
        self._saves += 1
        self._since_save = 0
        self._checkpoint_error = None
        return str(self._path)


#: buffer methods that would wait for a rate limiter and that the handle does not wrap
_WAITING_CALLS = frozenset({"next", "__iter__"})


def _slots(index) -> np.ndarray:
    return index.cpu().numpy() if hasattr(index, "cpu") else np.asarray(index)


def _exit_if_asked() -> None:
    """Test-only fault injection: die right after a checkpoint saved inside a write."""
    marker = os.environ.get(EXIT_AFTER_CHECKPOINT)
    if not marker:
        return
    try:
        os.unlink(marker)  # only one process wins: a restarted actor does not exit again
    except FileNotFoundError:
        return
    log.warning(
        "%s: exiting after a checkpoint, before replying (test fault)", EXIT_AFTER_CHECKPOINT
    )
    os._exit(1)


def _sendable(what: str, value):
    """``value``, unless it is a buffer or storage: those stay in the actor."""
    from mixreplay.buffers.replay import ReplayBuffer
    from mixreplay.storages.base import Storage

    if isinstance(value, (ReplayBuffer, Storage)):
        raise TypeError(
            f"{what} is a {type(value).__name__} that lives in the buffer actor and cannot be sent "
            "back (its rows stay where they are); use the handle's own methods instead "
            "(rb.sample(), len(rb), rb.state_dict(), rb.dumps(path))"
        )
    return value


def info_tensordict(info: dict | None, batch: int) -> TensorDict | None:
    """Rebuild the ``info`` TensorDict from :meth:`BufferHost.sample_packed`'s leaves."""
    if info is None:
        return None
    import torch

    td = TensorDict({}, batch_size=[batch])
    for key, value in info.items():
        td.set(
            key,
            torch.from_numpy(value) if value.flags.writeable else torch.from_numpy(value.copy()),
        )
    return td
