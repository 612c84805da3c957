"""Exceptions raised by mixreplay.

Every exception derives from :class:`MixreplayError` and from the built-in it
refines, so ``except ValueError`` keeps working for callers who do not know
mixreplay::

    MixreplayError
    ├── SchemaMismatchError(ValueError)      keys, dtypes or shapes disagree
    ├── DataStructureError(TypeError, ValueError, RuntimeError)  data a storage cannot hold
    ├── EmptyBufferError(RuntimeError)       sampling with no rows anywhere
    ├── MissingBatchSizeError(ValueError, RuntimeError)  sampling without a batch size
    ├── PriorityError(ValueError)            a priority update holds NaN, inf or a bad shape
    ├── ReadOnlyError(TypeError)             writing to offline (read-only) data
    ├── DatasetError(ValueError)             an ID or file cannot be resolved or read
    │   ├── DatasetNotFoundError(FileNotFoundError)
    │   └── DatasetPrefixTakenError(KeyError)  a dataset prefix is registered already
    ├── CheckpointError(ValueError)          a checkpoint is corrupt or does not fit
    │   └── CheckpointNotFoundError(FileNotFoundError)
    ├── LockOrderError(RuntimeError)         a call would wait for a thread that needs a lock
    │                                         the caller holds (it would never return)
    ├── BufferActorError(RuntimeError)       the Ray actor hosting a buffer is dead or unreachable
    ├── BufferClosedError(RuntimeError)      the buffer was closed while a call waited for its rate limiter
    ├── RateLimitTimeoutError(TimeoutError)  a sample or extend waited for its rate limiter past its timeout
    ├── WriterEvictedError(RuntimeError)     the buffer actor forgot a writer whose rows it may hold
    └── MissingDependencyError(ImportError)  an optional extra is not installed

Messages name the argument or key, show the expected against the actual value,
and say how to fix it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BufferActorError",
    "BufferClosedError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "DataStructureError",
    "DatasetError",
    "DatasetNotFoundError",
    "DatasetPrefixTakenError",
    "EmptyBufferError",
    "LockOrderError",
    "MissingBatchSizeError",
    "MissingDependencyError",
    "MixreplayError",
    "PriorityError",
    "RateLimitTimeoutError",
    "ReadOnlyError",
    "SchemaMismatchError",
    "WriterEvictedError",
]


class MixreplayError(Exception):
    """Base class of every error raised by mixreplay."""


class SchemaMismatchError(MixreplayError, ValueError):
    """Two sources of rows (or a write and its storage) disagree on keys, dtypes or shapes."""


class DataStructureError(MixreplayError, TypeError, ValueError, RuntimeError):
    """Data a storage cannot hold, or whose type or structure differs from what it holds.

    A ``TypeError`` and a ``ValueError`` for mixreplay's callers (a buffer of TensorDict
    rows refused other types with ``TypeError`` before it took them), and a
    ``RuntimeError`` for TorchRL's, whose storages raise that for the same mistakes (a list
    whose items do not stack, a write that does not match the stored structure).
    """


class EmptyBufferError(MixreplayError, RuntimeError):
    """A sample was requested from a buffer that holds no rows."""


class MissingBatchSizeError(MixreplayError, ValueError, RuntimeError):
    """A batch was asked for (``sample()``, iteration) with no batch size given or set.

    A ``ValueError`` (mixreplay's rule for a missing value) and a ``RuntimeError``, which
    TorchRL's buffers raise for it.
    """


class PriorityError(MixreplayError, ValueError):
    """A priority update is invalid (NaN or infinite values, a count that does not match).

    Attributes:
        position: where the first bad priority is in the update as passed, if known.
    """

    def __init__(self, message: str, *, position: int | None = None):
        super().__init__(message)
        self.position = position


class ReadOnlyError(MixreplayError, TypeError):
    """A write was attempted on read-only (offline) data."""


class DatasetError(MixreplayError, ValueError):
    """A dataset ID, path or file cannot be resolved or read."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """A dataset ID or path points to nothing on disk."""


class DatasetPrefixTakenError(DatasetError, KeyError):
    """A dataset prefix is registered already (a ``KeyError``, the type TorchRL raises)."""

    __str__ = BaseException.__str__  # KeyError's own would print the message quoted


class CheckpointError(MixreplayError, ValueError):
    """A checkpoint is missing, corrupt, or does not match the buffer loading it."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint path points to nothing on disk."""


class LockOrderError(MixreplayError, RuntimeError):
    """A call would wait for a thread (the prefetch worker) that needs a lock the calling
    thread holds: refused, with nothing changed, instead of waiting for ever."""


class LockOwnerDiedError(MixreplayError, RuntimeError):
    """The process holding a shared storage's lock (``shared=True``) died while holding it:
    the lock can never be released, and the rows it was writing may be torn. Raised to every
    process waiting for that lock instead of letting it wait for ever."""


class BufferActorError(MixreplayError, RuntimeError):
    """The Ray actor hosting a :class:`~mixreplay.distributed.RayReplayBuffer` cannot serve.

    Raised when Ray is not initialized, when the actor died (its rows are gone
    unless it checkpointed), or while it is restarting; the message names the
    actor and says what to do.
    """


class BufferClosedError(MixreplayError, RuntimeError):
    """The buffer was closed (``close()``, or ``kill()`` of a Ray-hosted one) while a call
    waited for its rate limiter, or a call that needs the rate limiter came after it."""


class RateLimitTimeoutError(MixreplayError, TimeoutError):
    """A ``sample`` or ``extend`` waited for its rate limiter longer than its ``timeout``.

    The message names the limiter and its counts (inserts, samples, rows held) and
    which side is behind. An ``extend`` goes in as the limiter's band allows, so part
    of it may have been written when its time ran out: those rows stay in the buffer
    (counted as inserts), and the rest were not written.

    Attributes:
        limiter: the :class:`~mixreplay.rate_limit.RateLimiter` that held the call.
        inserts: online rows inserted when the call gave up.
        samples: rows sampled when the call gave up.
        size: online rows held when the call gave up.
        written: for an ``extend``, how many of its rows (the first ones) were written;
            0 for a ``sample``. Write the rest with ``extend(data[err.written:])``. Rows
            as given: with write-side transforms, the input rows whose transformed rows
            went in.
        index: the slots the rows stored went to (``None`` for a ``sample``, or where not
            known).
    """

    def __init__(
        self,
        message: str,
        *,
        limiter: Any = None,
        inserts: int = 0,
        samples: int = 0,
        size: int = 0,
        written: int = 0,
        index: Any = None,
    ):
        super().__init__(message)
        self.limiter = limiter
        self.inserts = inserts
        self.samples = samples
        self.size = size
        self.written = written
        self.index = index

    def __reduce__(self):  # keyword attributes survive pickling (a Ray actor raises it)
        return _rebuild_timeout, (
            str(self),
            self.limiter,
            self.inserts,
            self.samples,
            self.size,
            self.written,
            self.index,
        )


def _rebuild_timeout(message, limiter, inserts, samples, size, written, index):
    return RateLimitTimeoutError(
        message,
        limiter=limiter,
        inserts=inserts,
        samples=samples,
        size=size,
        written=written,
        index=index,
    )


class WriterEvictedError(MixreplayError, RuntimeError):
    """The buffer actor dropped a writer's record and cannot tell whether it holds its rows.

    The actor keeps a bounded table of writers (``RayReplayBuffer(max_writers=...)``);
    a writer whose record was dropped and that sends rows the actor may have applied
    before (a retried task starting over, a write in doubt) is refused with this
    error instead of being written twice. The writer that got it refuses further
    rows; write them with a new one.
    """


class MissingDependencyError(MixreplayError, ImportError):
    """An optional dependency is needed and not installed."""


def require(module: str, extra: str, feature: str):
    """Import an optional dependency or raise with the exact install command.

    Args:
        module: the module to import, e.g. ``"minari"``.
        extra: the mixreplay extra that installs it, e.g. ``"minari"``.
        feature: what needs it, for the message.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{feature} needs the optional package {module!r}, which is not installed. "
            f'Install it with: pip install "mixreplay[{extra}]"'
        ) from err
