"""RayReplayBuffer: a replay buffer in a Ray actor, reached through a picklable handle."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Mapping

import numpy as np
import torch
from tensordict import TensorDictBase

from mixreplay._validate import check_bool, check_int, check_path, check_real, check_type
from mixreplay.distributed.chunks import MAX_WRITERS, ChunkIds, random_writer_id
from mixreplay.distributed.host import BufferHost, info_tensordict
from mixreplay.distributed.limited import Blocked, Poll
from mixreplay.distributed.pipeline import CallPipeline
from mixreplay.distributed.wire import (
    MAX_MESSAGE_BYTES,
    LayoutCache,
    Packer,
    check_rows,
    message_slices,
)
from mixreplay.errors import (
    BufferActorError,
    BufferClosedError,
    RateLimitTimeoutError,
    WriterEvictedError,
    require,
)
from mixreplay.rate_limit import check_timeout
from mixreplay.storages.base import check_row

__all__ = ["RayReplayBuffer"]

log = logging.getLogger(__name__)

_REMOTE_HOST = None


def _ray():
    return require("ray", "ray", "mixreplay.distributed.RayReplayBuffer")


def _host_class(ray):
    global _REMOTE_HOST
    if _REMOTE_HOST is None:
        # kill() probes with alive(): a probe Ray retried would log a retry of a killed actor
        ray.method(max_task_retries=0)(BufferHost.alive)
        _REMOTE_HOST = ray.remote(BufferHost)
    return _REMOTE_HOST


#: What a caller who retries a failed blocking write is told.
WRITE_RETRY = (
    "The rows may or may not have been written. Retry the same call with the same rows: the "
    "handle resends them under the same chunk ids and the buffer applies them exactly once "
    "(a restarted actor first reloads its last checkpoint; rows written after it are lost)"
)


class RayReplayBuffer:
    """A replay buffer hosted in a Ray actor, used through this handle as if it were local.

    The actor calls ``buffer_cls(*args, **kwargs)`` itself: an offline dataset
    given by ID or path (``"memmap:/data/hopper"``, ``"minari:..."``) is opened,
    memory-mapped, on the actor's node and never travels. The handle has the
    buffer's methods and properties (``extend``, ``sample``, ``anneal``,
    ``set_step``, ``update_priority``, ``dumps``, ``loads``, ``state_dict``,
    ``offline_fraction``, ``len()`` ...), each one a call to the actor.

    The handle pickles: hand it to Ray tasks and actors, on any node, and their
    writes reach the same buffer. Rows travel packed (one ``int64`` array per
    message, see :mod:`mixreplay.distributed.wire`); collectors that push many
    rows should use :meth:`writer`, which batches rows and keeps a few writes in
    flight.

    Args:
        buffer_cls: the buffer class to host, e.g. :class:`~mixreplay.OfflineToOnlineReplayBuffer`
            (or any importable factory returning a buffer).
        *args: its positional arguments, passed to it inside the actor.
        **kwargs: its keyword arguments, likewise.

    Keyword Args:
        ray_options: options for the actor (``ray.remote(...).options(**ray_options)``):
            ``num_cpus``, ``resources``, ``name``, ``max_restarts``, ``max_task_retries`` ...
        prefetch: sample requests kept in flight by :meth:`sample` (0: none).
        device: where sampled batches land (one copy of the packed rows, then typed views).
        checkpoint_dir: an absolute directory, on the actor's node, for checkpoints.
        checkpoint_every: save a checkpoint after every this many rows written.
        resume: load the checkpoint already in ``checkpoint_dir`` when the actor starts.
        max_writers: how many writers the actor remembers for exactly-once writes
            (4096); beyond, the least recently active is dropped (see ``docs/scaling.md``).

    These keywords belong to the handle; every other keyword goes to ``buffer_cls``.

    Reproducibility: the actor executes one caller's calls in the order they were
    made, so with no other process writing, the batches are exactly those a local
    buffer with the same seed would return, prefetching or not. Collectors writing
    concurrently make the batches depend on how their writes interleave with the
    learner's requests, i.e. on timing.

    Failures: a collector that dies loses only the rows it had not sent, and a
    collector task that Ray retries (``max_retries``) sends its rows again under
    the same writer identities, so the actor applies each row once. If the
    actor dies, every call raises :class:`~mixreplay.errors.BufferActorError`;
    with ``ray_options={"max_restarts": ...}`` and ``checkpoint_dir``, Ray
    restarts it and it reloads its last checkpoint (rows written after it are lost).
    Writes are exactly once: each message of rows carries a chunk id that the actor
    applies once and checkpoints with the rows, so a write retried by Ray
    (``"max_task_retries": -1``, recommended) or by you (the same :meth:`extend`
    call again, or :meth:`RayWriter.flush <mixreplay.distributed.RayWriter.flush>`)
    after a crash is never stored twice, even when the actor had checkpointed it.

    Rate limits: a buffer built with ``rate_limiter=`` (passed with its other
    keywords) holds the update-to-data ratio across the cluster. The actor never
    waits for it: :meth:`sample`, :meth:`extend` and the writers wait on their own
    side, up to their ``timeout``, while the actor serves every other call
    (see :mod:`~mixreplay.distributed.limited`). :meth:`kill` wakes the waiting
    calls of this handle with :class:`~mixreplay.errors.BufferClosedError`; those of
    other processes get :class:`~mixreplay.errors.BufferActorError` at their next try.

    Ray must be initialized first (``ray.init()``); mixreplay never starts Ray or
    changes its network or authentication settings.

    Examples:
        >>> import tempfile, ray, torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import OfflineToOnlineReplayBuffer
        >>> from mixreplay.datasets.memmap import write_memmap_dataset
        >>> from mixreplay.distributed import RayReplayBuffer
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = write_memmap_dataset(tmp.name + "/offline",
        ...                             TensorDict({"obs": torch.zeros(100, 3)}, [100]))
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
        >>> rb = RayReplayBuffer(OfflineToOnlineReplayBuffer, f"memmap:{path}",  # opened by the actor
        ...                      online_capacity=1000, batch_size=8, generator=0, prefetch=2)
        >>> rb.extend(TensorDict({"obs": torch.ones(10, 3)}, [10])).tolist()
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        >>> rb.sample()["obs"][:, 0].tolist()   # 4 offline rows, then 4 online
        [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
        >>> with rb.writer() as w:                # batched, non-blocking writes (for collectors)
        ...     for i in range(5):
        ...         w.add(TensorDict({"obs": torch.full((3,), 2.0)}, []))
        >>> len(rb), rb.offline_fraction
        (115, 0.5)
        >>> rb.kill(); ray.shutdown(); tmp.cleanup()
    """

    def __init__(
        self,
        buffer_cls,
        *args,
        ray_options=None,
        prefetch: int = 0,
        device=None,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int | None = None,
        resume: bool = False,
        max_writers: int = MAX_WRITERS,
        **kwargs,
    ):
        ray = _ray()
        if not callable(buffer_cls):
            raise TypeError(
                f"buffer_cls must be a buffer class (or a factory), got {type(buffer_cls).__name__}; "
                "e.g. RayReplayBuffer(OfflineToOnlineReplayBuffer, dataset, online_capacity=...)"
            )
        if ray_options is not None:
            check_type(ray_options, "ray_options", Mapping, hint="a dict of actor options")
        options = dict(ray_options or {})
        if options.get("max_concurrency", 1) != 1:
            raise ValueError(
                f"ray_options max_concurrency must be 1, got {options['max_concurrency']!r}: the buffer "
                "actor runs calls one at a time, in order, which reproducible batches and whole-message "
                "writes rely on; scale out with more collectors, not actor threads"
            )
        if options.get("allow_out_of_order_execution"):
            raise ValueError(
                "ray_options allow_out_of_order_execution must be False, got "
                f"{options['allow_out_of_order_execution']!r}: the buffer actor runs each caller's "
                "calls in the order they were made, which reproducible batches rely on"
            )
        prefetch = check_int(prefetch, "prefetch", min=0)
        if checkpoint_every is not None:
            checkpoint_every = check_int(checkpoint_every, "checkpoint_every", min=1)
        resume = check_bool(resume, "resume")
        max_writers = check_int(max_writers, "max_writers", min=1)
        if checkpoint_dir is not None:
            check_path(checkpoint_dir, "checkpoint_dir")
            checkpoint_dir = os.fspath(checkpoint_dir)
            if not os.path.isabs(checkpoint_dir):
                raise ValueError(
                    f"checkpoint_dir must be an absolute path (the actor, maybe on another node, "
                    f"opens it from its own working directory), got {checkpoint_dir!r}"
                )
        elif checkpoint_every is not None or resume:
            raise ValueError(
                f"checkpoint_every={checkpoint_every!r} / resume={resume!r} need checkpoint_dir='/abs/dir'"
            )
        if options.get("max_restarts") and checkpoint_dir is None:
            warnings.warn(
                f"max_restarts={options['max_restarts']} without checkpoint_dir: a restarted buffer "
                "actor comes back empty; pass checkpoint_dir='/abs/dir' and checkpoint_every=N rows",
                UserWarning,
                stacklevel=2,
            )
        if not ray.is_initialized():
            raise BufferActorError(
                "Ray is not initialized: call ray.init() for a local cluster, or "
                "ray.init(address='auto') on a node of a running cluster, before creating a "
                "RayReplayBuffer (mixreplay never starts Ray itself, so it never chooses its "
                "network or authentication settings)"
            )
        try:
            actor = (
                _host_class(ray)
                .options(**options)
                .remote(
                    buffer_cls,
                    args,
                    kwargs,
                    checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every,
                    resume=resume,
                    max_writers=max_writers,
                )
            )
        except TypeError as err:
            if "serialize" not in str(err):
                raise
            raise TypeError(
                f"the arguments of {getattr(buffer_cls, '__qualname__', buffer_cls)} are sent to the "
                f"actor and could not be pickled ({str(err).splitlines()[0][:200]}). Pass large offline data by ID or path "
                "('memmap:/dir', 'minari:<id>', 'd4rl:<file>'), which the actor opens itself "
                "instead of receiving a copy, or a module-level factory function as buffer_cls"
            ) from err
        name = getattr(buffer_cls, "__qualname__", repr(buffer_cls))
        self._setup(actor, {"buffer": name}, prefetch, device)
        try:
            self._describe = self._get(actor.describe.remote())
        except BaseException:
            ray.kill(actor)
            raise

    def _setup(self, actor, describe: dict, prefetch: int, device) -> None:
        self._actor = actor
        self._describe = describe
        self._prefetch = prefetch
        self._device = None if device is None else torch.device(device)
        self._queue: collections.deque = collections.deque()
        self._queue_key: tuple | None = None
        self._packer = Packer()
        self._layouts = LayoutCache()
        self._pipeline: CallPipeline | None = None  # started by the first prefetching sample
        # set by kill(): wakes this handle's calls that wait for the rate limiter
        self._killed = threading.Event()
        # Blocking writes, per thread: each thread is a writer of its own (its row numbers
        # and its last failed write); a copy of the handle starts with none.
        self._local = threading.local()

    @classmethod
    def connect(
        cls, name: str, *, namespace: str | None = None, prefetch: int = 0, device=None
    ) -> RayReplayBuffer:
        """A handle on a buffer actor created elsewhere with ``ray_options={"name": name}``."""
        ray = _ray()
        if not ray.is_initialized():
            raise BufferActorError("Ray is not initialized: call ray.init(address=...) first")
        actor = ray.get_actor(name, namespace=namespace)
        self = cls.__new__(cls)
        self._setup(actor, {"buffer": name}, check_int(prefetch, "prefetch", min=0), device)
        self._describe = self._get(actor.describe.remote())
        return self

    def __reduce__(self):
        # Prefetched batches and threads stay behind: a copy starts with nothing in flight.
        return _rebuild, (self._actor, self._describe, self._prefetch, self._device)

    # -- calls --------------------------------------------------------------------------------

    def _get(self, refs, retry: str | None = None):
        return _get(refs, self._describe, self._actor, retry)

    def _submit(self, method, *args):
        """``method.remote(*args)``, after every call this handle queued before it."""
        if self._pipeline is None:
            return method.remote(*args)
        return self._pipeline.submit(method, *args)

    def _call(self, method, *args):
        return self._get(self._submit(method, *args))

    def __getattr__(self, name: str):
        describe = self.__dict__.get("_describe")
        if name.startswith("_") or describe is None:
            raise AttributeError(name)
        if name in describe.get("methods", ()):
            return RemoteMethod(self, name)
        if name in describe.get("properties", ()):
            return self._call(self._actor.get, name)
        raise AttributeError(
            f"{type(self).__name__} hosting {describe.get('buffer')} has no attribute {name!r}; "
            f"methods: {describe.get('methods')}; properties: {describe.get('properties')}"
        )

    def __dir__(self):
        d = self.__dict__.get("_describe") or {}
        return sorted(
            set(super().__dir__()) | set(d.get("methods", ())) | set(d.get("properties", ()))
        )

    # -- writing ------------------------------------------------------------------------------

    def extend(
        self, data: TensorDictBase, *, timeout: float | None = None, **kwargs
    ) -> torch.Tensor:
        """Write rows (a ``[n]`` TensorDict) and return the slots written, like the buffer's ``extend``.

        Blocks until the actor has written them. Keyword arguments go to the
        buffer's ``extend`` (``source="name"`` for a :class:`~mixreplay.MixtureReplayBuffer`).
        Rows of a large call may travel as several messages (see
        :mod:`~mixreplay.distributed.wire`), so a concurrent sample may see part of
        them. Collectors should prefer :meth:`writer`, which does not wait.

        Exactly once: every message carries a chunk id, and the actor applies each id
        once. A retry by Ray (``max_task_retries``) is therefore harmless, and so is
        yours: if this call raises :class:`~mixreplay.errors.BufferActorError` (the
        actor died or is restarting), call it again with the same rows and keyword
        arguments; the handle resends them under the same ids, and rows the actor had
        applied (and checkpointed) before dying are acknowledged, not written twice.

        With a rate limiter the rows go in as its band allows, in order; this call waits
        up to ``timeout`` seconds (``None``: until written), trying again after pauses of
        1 to 10 ms, and then raises :class:`~mixreplay.errors.RateLimitTimeoutError`
        saying how many of the rows (the first ones) were written.
        """
        n = check_rows(data)
        words = self._packer.pack(data)
        key, row_bytes = self._packer.key, self._packer.layout.row_bytes
        parts = self._write(key, words, kwargs, message_slices(n, row_bytes), timeout)
        return torch.from_numpy(parts[0].copy() if len(parts) == 1 else np.concatenate(parts))

    def add(self, row: TensorDictBase, *, timeout: float | None = None, **kwargs) -> int:
        """Write one row (batch ``[]``): one round trip to the actor. See :meth:`writer`.

        Exactly once, like :meth:`extend`: after a :class:`~mixreplay.errors.BufferActorError`,
        call it again with the same row.
        """
        check_row(row)
        words = self._packer.pack(row)  # packed as it is: no unsqueeze of the TensorDict
        return int(self._write(self._packer.key, words, kwargs, [slice(0, 1)], timeout)[0][0])

    def _thread_writes(self) -> _ThreadWrites:
        writes = getattr(self._local, "writes", None)
        if writes is None:
            writes = self._local.writes = _ThreadWrites()
        return writes

    def _write(
        self,
        key: str,
        words: np.ndarray,
        kwargs: dict,
        slices: list[slice],
        timeout: float | None = None,
    ) -> list:
        """Send ``words[s]`` for each slice as one chunk each; the slots written, per chunk."""
        timeout = check_timeout(timeout)
        mine = self._thread_writes()
        ids = mine.ids
        unconfirmed, mine.unconfirmed = mine.unconfirmed, None
        starts = None
        if unconfirmed is not None:
            if unconfirmed.same_as(key, words, kwargs, len(slices)):
                starts = unconfirmed.starts
                log.info("resending %d chunks of a failed write under their ids", len(starts))
            else:
                ids.done(unconfirmed.starts)  # abandoned: never sent again
                log.warning(
                    "a write of %d rows that failed was not retried with the same rows: if the "
                    "actor had written them before failing they are in the buffer, otherwise lost",
                    len(unconfirmed.words),
                )
        if starts is None:
            starts = ids.take(s.stop - s.start for s in slices)
        method = self._actor.extend_packed

        def send(first: int) -> list:
            """Send chunks ``first...`` (again); what the actor answered for each."""
            refs = [
                self._submit(method, key, words[s], kwargs, True, ids.chunk_id(q))
                for s, q in zip(slices[first:], starts[first:])
            ]
            try:
                return self._get(refs, WRITE_RETRY)
            except BufferActorError:
                _settle(refs)  # no attempt of these chunks is still running when a retry is sent
                mine.unconfirmed = _Unconfirmed(key, words, kwargs, starts)
                raise
            except WriterEvictedError:
                _settle(refs)
                # This thread's next write is a new writer, with a random identity: a derived
                # one could be that of another writer of the task's earlier attempt.
                mine.ids = ChunkIds(random_writer_id())
                raise
            except BaseException:
                ids.done(starts)  # the buffer refused the rows: a retry is a new write
                raise

        parts = send(0)
        poll = None
        while True:  # chunks the rate limiter holds are sent again, in order, after a pause
            held = next((i for i, p in enumerate(parts) if isinstance(p, Blocked)), None)
            if held is None:
                break
            blocked = parts[held]
            if poll is None:
                poll = Poll(timeout, self._killed)
            written = slices[held].start + blocked.written  # rows in order: a prefix
            try:
                poll.pause(
                    blocked,
                    f"extend of {words.shape[0]:,} rows",
                    written,
                    torch.from_numpy(
                        np.concatenate([*parts[:held], blocked.slots[: blocked.written]])
                    ),
                )
            except (RateLimitTimeoutError, BufferClosedError):
                ids.done(starts)  # the rows not written are abandoned: the caller is told which
                raise
            try:
                parts[held:] = send(held)
            except BufferActorError as err:
                if self._killed.is_set():  # killed while it waited
                    ids.done(starts)
                    raise _killed_while(f"extend of {words.shape[0]:,} rows") from err
                raise
        ids.done(starts)
        return parts

    def writer(
        self,
        *,
        chunk_rows: int | None = None,
        max_in_flight: int = 4,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        timeout: float | None = None,
        **extend_kwargs,
    ):
        """A :class:`~mixreplay.distributed.RayWriter`: batched writes that do not wait.

        Args:
            chunk_rows: rows per message; by default as many as Ray sends inline (~96 KiB).
            max_in_flight: messages sent and not yet acknowledged; beyond, rows are coalesced.
            max_message_bytes: the largest coalesced message (4 MiB); then the writer waits.
            timeout: how long a call may wait for the buffer's rate limiter with no row
                going in (seconds; ``None``: until one does).
            **extend_kwargs: passed to the buffer's ``extend`` (e.g. ``source="name"``).
        """
        from mixreplay.distributed.writer import RayWriter

        return RayWriter(
            self,
            chunk_rows=chunk_rows,
            max_in_flight=max_in_flight,
            max_message_bytes=max_message_bytes,
            timeout=timeout,
            **extend_kwargs,
        )

    # -- reading ------------------------------------------------------------------------------

    def sample(
        self,
        batch_size: int | None = None,
        *,
        return_info: bool = False,
        prefetch: int | None = None,
        timeout: float | None = None,
    ):
        """Draw a batch, keeping ``prefetch`` more requests in flight.

        With ``prefetch=k > 0`` each call returns the oldest request's batch and
        sends a new one, so ``k`` batches are drawn, fetched and decoded (by two
        background threads) while the caller computes. Batches come back in
        request order, and every call of the handle reaches the actor in the order
        it was made, so the sequence is the one a local buffer would draw.

        A prefetched batch is drawn when it is *requested*: a ``set_step``,
        ``anneal`` or ``update_priority`` made now shapes the batches requested
        after it, i.e. ``k`` batches later. Changing ``batch_size`` or
        ``return_info`` drops the requests in flight (their draws are spent).

        With a rate limiter, a request it holds is tried again after a pause (1 to
        10 ms, one request in flight meanwhile) until ``timeout`` seconds have passed
        (``None``: until allowed), then :class:`~mixreplay.errors.RateLimitTimeoutError`;
        a batch counts as a sample when the actor draws it.

        Args:
            batch_size: rows to draw; the buffer's default when ``None``.

        Keyword Args:
            return_info: also return the buffer's ``info`` TensorDict.
            prefetch: overrides the handle's ``prefetch`` for this call.
            timeout: seconds to wait for a rate limiter (``None``: until allowed).
        """
        k = self._prefetch if prefetch is None else check_int(prefetch, "prefetch", min=0)
        timeout = check_timeout(timeout)
        poll = None
        while True:
            try:
                batch, info = self._next_batch(batch_size, bool(return_info), k)
            except BufferActorError as err:
                if poll is not None and self._killed.is_set():  # killed while it waited
                    raise _killed_while("sample()") from err
                raise
            if not isinstance(batch, Blocked):
                return (batch, info) if return_info else batch
            if poll is None:
                poll = Poll(timeout, self._killed)
            poll.pause(batch, f"sample({'' if batch_size is None else batch_size})")

    def _next_batch(self, batch_size: int | None, return_info: bool, k: int):
        """One ``(batch, info)`` (or a :class:`Blocked` and ``None``), from the queue when prefetching."""
        key = (batch_size, return_info)
        queue = self._queue
        if queue and self._queue_key != key:
            log.debug("dropping %d prefetched batches drawn for %s", len(queue), self._queue_key)
            queue.clear()
        if k == 0 and not queue:
            result = self._call(self._actor.sample_packed, batch_size, return_info)
            return _decode(result, self._layouts, self._device)
        self._queue_key = key
        request = (self._pipeline or self._start_pipeline()).prefetch
        if not queue:
            queue.append(request(self._actor.sample_packed, batch_size, return_info))
        try:
            batch, info = queue.popleft().result()
        except BaseException:
            queue.clear()
            raise
        # Topped up only now: waking the sender thread before taking the batch would
        # make this thread wait for the GIL while the sender submits.
        want = 0 if isinstance(batch, Blocked) else k
        while len(queue) < want:
            queue.append(request(self._actor.sample_packed, batch_size, return_info))
        return batch, info

    def _start_pipeline(self) -> CallPipeline:
        # The threads hold what fetching needs, never the handle: a dropped handle is
        # collected, and its finalizer stops them.
        describe, actor, layouts, device = self._describe, self._actor, self._layouts, self._device

        def fetch(ref):
            return _decode(_get(ref, describe, actor), layouts, device)

        self._pipeline = pipeline = CallPipeline(fetch)
        weakref.finalize(self, pipeline.close)
        return pipeline

    def __len__(self) -> int:
        return self._call(self._actor.length)

    # -- the actor ----------------------------------------------------------------------------

    @property
    def actor(self):
        """The Ray actor handle (for ``ray.kill``, or calls of your own)."""
        return self._actor

    @property
    def prefetch(self) -> int:
        return self._prefetch

    def actor_info(self) -> dict:
        """The actor's pid, node id, whether it was restarted, its checkpoints and writer table."""
        info = self._call(self._actor.info)
        self._describe["pid"] = info["pid"]
        return info

    def checkpoint(self) -> str:
        """Save a checkpoint in ``checkpoint_dir`` now; return its path (on the actor's node)."""
        return self._call(self._actor.checkpoint)

    def kill(self, *, timeout: float = 60.0) -> None:
        """Stop the actor for good (no restart); its rows are gone unless checkpointed.

        Calls of this handle waiting for the buffer's rate limiter (in other threads)
        wake with :class:`~mixreplay.errors.BufferClosedError`.

        Returns once the actor is dead, so every later call raises
        :class:`~mixreplay.errors.BufferActorError` (``ray.kill`` only sends the
        request: a call made right after it may still run). After ``timeout``
        seconds without confirmation it logs a warning and returns.
        """
        timeout = check_real(timeout, "timeout", min=0)
        deadline = time.monotonic() + timeout
        self._killed.set()  # calls of this handle waiting for the rate limiter wake now
        if self._queue:
            # Let the prefetched requests finish first: Ray would retry, and log, each call
            # still in flight when the actor dies (with max_task_retries).
            concurrent.futures.wait(list(self._queue), timeout=timeout)
            self._queue.clear()
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        ray = sys.modules["ray"]
        ray.kill(self._actor, no_restart=True)
        while time.monotonic() < deadline:
            try:
                ray.get(self._actor.alive.remote())  # still running: the kill has not landed yet
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.01)
            except ray.exceptions.RayActorError:
                return
        log.warning(
            "ray.kill of actor %s not confirmed after %s s", _actor_id(self._actor), timeout
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._describe.get('buffer')}, actor={_actor_id(self._actor)}, "
            f"prefetch={self._prefetch})"
        )


class RemoteMethod:
    """A buffer method called on the actor: ``rb.set_step(10)`` waits, ``rb.set_step.remote(10)`` does not."""

    def __init__(self, handle: RayReplayBuffer, name: str):
        self._handle = handle
        self._name = name

    def __call__(self, *args, **kwargs):
        h = self._handle
        return h._call(h._actor.call, self._name, args, kwargs)

    def remote(self, *args, **kwargs):
        """Send the call, in order with the handle's other calls, and return its ``ray.ObjectRef``."""
        h = self._handle
        return h._submit(h._actor.call, self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<remote method {self._name} of {self._handle!r}>"


def _killed_while(call: str) -> BufferClosedError:
    return BufferClosedError(
        f"the buffer actor was killed (kill()) while {call} waited for its rate limiter"
    )


def _get(refs, describe: dict, actor, retry: str | None = None):
    """``ray.get`` that turns a dead or unreachable actor into a :class:`BufferActorError`.

    ``retry`` replaces the generic advice for a call that may or may not have run.
    """
    ray = sys.modules["ray"]
    try:
        return ray.get(refs)
    except ray.exceptions.RayActorError as err:
        raise _actor_error(err, describe, actor, retry) from err


def _settle(refs) -> None:
    """Wait until every call in ``refs`` has finished or failed (results are not fetched)."""
    if refs:
        sys.modules["ray"].wait(list(refs), num_returns=len(refs))


class _ThreadWrites:
    """One thread's blocking writes through a handle: its writer identity and last failed write."""

    def __init__(self) -> None:
        self.ids = ChunkIds()  # the identity is minted by the first write, in this thread
        self.unconfirmed: _Unconfirmed | None = None


class _Unconfirmed:
    """A blocking write that failed with the actor unavailable: its rows and chunk ids."""

    def __init__(self, key: str, words: np.ndarray, kwargs: dict, starts: list[int]):
        self.key, self.words, self.kwargs, self.starts = key, words, kwargs, starts

    def same_as(self, key: str, words: np.ndarray, kwargs: dict, chunks: int) -> bool:
        """Whether a new write is this one retried: same schema, rows, arguments and cut."""
        if key != self.key or chunks != len(self.starts) or words.shape != self.words.shape:
            return False
        try:
            same_kwargs = bool(kwargs == self.kwargs)
        except Exception:  # noqa: BLE001 - e.g. tensors among the keyword arguments
            return False
        return same_kwargs and bool(np.array_equal(words, self.words))


def _actor_error(err, describe: dict, actor, retry: str | None = None) -> BufferActorError:
    ray = sys.modules["ray"]
    state = _actor_state(actor, err)
    pid = state.get("pid") or describe.get("pid", "?")  # the latest process, after restarts
    what = (
        f"the Ray actor hosting the replay buffer ({describe.get('buffer')}, "
        f"actor {_actor_id(actor)}, pid {pid})"
    )
    cause = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    # A call in flight when the actor died fails with the actor's death even when Ray
    # restarts it: only a later call tells a restart from the end.
    now = _RESTART_WORDS.get(str(state.get("state")))
    if isinstance(err, ray.exceptions.ActorUnavailableError) or now is not None:
        now = now or _RESTART_WORDS["UNREACHABLE"]
        return BufferActorError(
            f"{what} {now} ({cause}). "
            + (
                retry
                or "The call may or may not have run. Retry it: a restarted actor reloads its "
                "last checkpoint (rows written after that checkpoint are lost)"
            )
        )
    return BufferActorError(
        f"{what} died ({cause}); its rows are lost. Create a new RayReplayBuffer; to survive "
        "a crash, give it ray_options={'max_restarts': -1} and checkpoint_dir='/abs/dir' "
        "(with checkpoint_every=N rows), so that Ray restarts it and it reloads its last checkpoint"
    )


#: How long an error waits for the actor to answer the probe that tells a restart from the end
PROBE_TIMEOUT_S = 1.0
_RESTART_WORDS = {
    "ALIVE": "is restarting (restarted: it answers again)",
    "RESTARTING": "is restarting",
    "UNREACHABLE": "is unavailable: it is restarting or cannot be reached",
}


def _actor_state(actor, err) -> dict:
    """What the actor is now, asked of the actor itself; {} if it cannot tell.

    ``{"state": "ALIVE", "pid": p}`` (it answers: Ray restarted it, in process ``p``),
    ``{"state": "DEAD", "pid": p}`` (Ray will not restart it), ``{"state": "RESTARTING"}``
    or ``{"state": "UNREACHABLE"}`` (no answer within :data:`PROBE_TIMEOUT_S`). Ray's
    public API keeps no actor table without the dashboard, so a probe call asks.
    """
    ray = sys.modules["ray"]
    try:
        probe = actor.alive.remote()
        if not ray.wait([probe], timeout=PROBE_TIMEOUT_S)[0]:
            return {"state": "UNREACHABLE"}
        return {"state": "ALIVE", "pid": int(ray.get(probe))}
    except ray.exceptions.ActorDiedError as died:
        return {"state": "DEAD", "pid": _died_pid(died) or _died_pid(err)}
    except ray.exceptions.ActorUnavailableError:
        return {"state": "RESTARTING"}
    except Exception:  # noqa: BLE001 - only used to word an error better
        return {}


def _died_pid(err) -> int | None:
    """The process an ``ActorDiedError`` names (Ray writes it as a ``pid: N`` line), if any."""
    found = re.search(r"^\s*pid: (\d+)\s*$", str(err), re.MULTILINE)
    return int(found.group(1)) if found else None


def _decode(result, layouts: LayoutCache, device):
    """A ``sample_packed`` result as ``(batch, info)`` (``info`` None unless asked for).

    A :class:`Blocked` (the rate limiter holds the sample) comes back as ``(blocked, None)``.
    """
    if isinstance(result, Blocked):
        return result, None
    key, words, shape, info = result
    if key is None:
        batch = words
    else:
        batch = layouts.copy_out(key, words, device)
        if len(shape) != 1:
            batch = batch.reshape(shape)
    if info is None:
        return batch, None
    n = len(next(iter(info.values()))) if info else 0
    return batch, info_tensordict(info, n)


def _actor_id(actor) -> str:
    aid = getattr(actor, "_actor_id", None)
    return aid.hex()[:12] if aid is not None else "?"


def _rebuild(actor, describe, prefetch, device) -> RayReplayBuffer:
    self = RayReplayBuffer.__new__(RayReplayBuffer)
    self._setup(actor, describe, prefetch, device)
    return self
