"""What every buffer shares: construction, sampling (prefetched or not), transforms, checkpoints.

:class:`~mixreplay.ReplayBuffer` and the mixing buffers differ in how they draw a batch and
in what their state holds; the fields every buffer has, how a batch size is resolved, how a
prefetch queue hands out batches and follows writes, the transforms-then-pin tail of every
batch, the kind check of a saved state and how a state goes to and from a checkpoint
directory are the same for all of them, and live here once.

Lock order (every buffer; a rule, not a habit):

1. **The prefetch queue** (:class:`~mixreplay.prefetch.Prefetcher`: its pause and its own
   lock) comes before any storage lock. A thread that holds a storage lock never waits for
   the prefetch worker (``wait``, ``discard``, ``next``): the worker draws under storage locks.
   Whatever reads or replaces the whole state therefore pauses the queue first and only then
   takes the locks: :meth:`BufferBase.state_lock` (and with it :meth:`BufferBase.dumps`),
   ``state_dict()``, :meth:`BufferBase.load_state_dict`, ``empty()``. A pause is re-entrant,
   so ``with rb.state_lock(): rb.state_dict(copy=False)`` is safe.
2. **Storage locks**, re-entrant (one per storage). A mixing buffer takes its sources' locks
   in source order and never the other way round; a draw holds one source's lock at a time.
3. A write (``extend``, ``update_priority``) waits for the draws already asked for while it
   holds no lock, then writes under the storage lock, then asks for the next draws after
   releasing it.
4. A rate limiter or any other blocking wait holds none of the locks above while it waits.
   A rate limiter's own lock (:mod:`mixreplay.rate_limit`) is a leaf: taken under a
   storage lock to count the rows a write put there, never held while taking another
   lock, drawing, writing or waiting.

The checkpoint layer (:mod:`mixreplay.checkpoint`) only moves a state to and from disk; it
takes no lock of its own.
"""

from __future__ import annotations

import contextlib
import copy as _copy
import hashlib
import logging
import operator
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager
from multiprocessing.context import get_spawning_popen
from typing import Any, Generic, TypeVar

import torch

from mixreplay import checkpoint, data_types
from mixreplay._state import Plan, generator_state, plan_generator
from mixreplay._validate import check_int, describe
from mixreplay.errors import CheckpointError, MissingBatchSizeError
from mixreplay.prefetch import (
    PrefetchClosed,
    Prefetcher,
    Queued,
    check_pin_memory,
    check_prefetch,
    pin,
)
from mixreplay.rate_limit import RateCounts, RateGate, RateLimiter, check_timeout
from mixreplay.transforms import Compose, Transform

__all__ = [
    "BufferBase",
    "check_batch_device",
    "check_batch_size",
    "device_seed",
    "make_generator",
]

log = logging.getLogger(__name__)

#: what one draw of a buffer returns (a batch and what its info is built from)
R = TypeVar("R")

_HOST = torch.device("cpu")


def _new_buffer(cls: type) -> Any:
    """An empty instance of ``cls``, for an unpickled buffer's state to fill."""
    return object.__new__(cls)


def make_generator(generator: torch.Generator | int | None) -> torch.Generator:
    """The buffer's own generator: given, seeded from an int, or freshly seeded.

    A fresh one is seeded from the OS, not from torch's global RNG, which
    library code never touches.
    """
    if generator is None:
        g = torch.Generator()
        g.seed()
        return g
    if isinstance(generator, torch.Generator):
        return generator
    try:
        seed = operator.index(generator) if not isinstance(generator, bool) else None
    except TypeError:
        seed = None
    if seed is None:
        raise TypeError(
            f"generator must be a torch.Generator or an int seed, got {describe(generator)}; "
            "e.g. generator=0 or generator=torch.Generator().manual_seed(0)"
        )
    return torch.Generator().manual_seed(seed)


def device_seed(generator: torch.Generator, device: torch.device) -> int:
    """The seed of the buffer's generator on ``device``, derived from ``generator``'s state now.

    A function of the state only (a BLAKE2b hash of it and the device's name), so a buffer
    and one restored from a checkpoint written before its first draw on ``device`` seed the
    same generator there.
    """
    h = hashlib.blake2b(digest_size=8, person=b"mixreplay.dev")
    h.update(generator.get_state().numpy().tobytes())
    h.update(str(device).encode())
    return int.from_bytes(h.digest(), "little") >> 1  # 63 bits: every backend's seed range


def _canonical(device: torch.device) -> torch.device:
    """``device`` with its index (``cuda`` is the current CUDA device, as torch resolves it)."""
    if device.index is None and device.type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _usable(device: torch.device) -> bool:
    """Whether this process can put tensors on ``device``."""
    if device.type == "cpu":
        return True
    module = getattr(torch, device.type, None)
    available = getattr(module, "is_available", None)
    if available is None or not available():
        return False
    count = getattr(module, "device_count", None)
    return device.index is None or count is None or device.index < count()


def check_batch_device(batch_device: Any) -> torch.device | None:
    """Where sampled batches land: ``None`` (where the rows are) or a device this process has."""
    if batch_device is None:
        return None
    if not isinstance(batch_device, (str, torch.device)):
        raise TypeError(
            f"batch_device must be a device (e.g. 'cuda' or torch.device('cuda:0')) or None, "
            f"got {describe(batch_device)}"
        )
    try:
        device = torch.device(batch_device)
    except RuntimeError:
        raise ValueError(
            f"batch_device={batch_device!r} is not a device name; e.g. batch_device='cuda' or "
            "'cuda:1' (or None: batches stay where the rows are)"
        ) from None
    if not _usable(device):
        raise ValueError(
            f"batch_device={batch_device!r}: no such {device.type} device is available here; "
            "drop batch_device (batches stay where the rows are) or pass a device this machine has"
        )
    return _canonical(device)


def check_batch_size(batch_size: Any, *, name: str = "batch_size") -> int:
    """A batch size: a positive int (NumPy and 0-dim tensor integers accepted)."""
    return check_int(batch_size, name, min=1, what="a positive int")


class BufferBase(Generic[R]):
    """The shared half of a buffer; a subclass draws batches and owns its state.

    A subclass calls :meth:`_init_buffer` in its constructor and implements
    :meth:`_sample_now` (one batch drawn now, as its record type ``R``),
    :meth:`_draw_snapshot`, :meth:`_restore_draws`, :meth:`state_dict` (which holds
    :meth:`_paused` and :meth:`_locks` while it reads), :meth:`plan_load_state_dict` and
    :meth:`_locks` (and :meth:`_ran_out` when its sampler has epochs).
    """

    _batch_size: int | None
    _generator: torch.Generator
    _transform: Compose
    _prefetch: int
    _pin_memory: bool
    _prefetcher: Prefetcher[R] | None
    _batch_device: torch.device | None
    #: the generator each device draws with, the buffer's own included (see _generator_for)
    _device_generators: dict[torch.device, torch.Generator]
    #: the rate limiter's counts and waiters (mixreplay.rate_limit); None without a limiter
    _gate: RateGate | None = None

    def _init_buffer(
        self,
        batch_size: int | None,
        generator: torch.Generator | int | None,
        transform: Transform | None,
        prefetch: int | None,
        pin_memory: bool,
        batch_device: Any = None,
    ) -> None:
        """Check and set the fields every buffer has."""
        self._batch_size = None if batch_size is None else check_batch_size(batch_size)
        self._prefetch = check_prefetch(prefetch, self._batch_size)
        self._pin_memory = check_pin_memory(pin_memory)
        self._batch_device = check_batch_device(batch_device)
        self._device_generators = {}
        self._prefetch_stamp: int | None = None  # the transforms the queued batches went through
        self._generator = make_generator(generator)
        self._generator_given = generator is not None  # else seeded from the OS
        self._transform = Compose.of(transform)
        # made now, so that a pause (state_lock, dumps) always has a queue to hold still;
        # its thread starts with the first draw asked for
        self._prefetcher = self._new_prefetcher()

    # -- what a subclass provides ----------------------------------------------------------

    def _sample_now(self, batch_size: int, info: bool) -> R:
        """Draw one batch now (with what its info needs when ``info``)."""
        raise NotImplementedError

    def _draw_snapshot(self) -> Any:
        """Everything a draw changes (generators, samplers' draw state), to rewind to."""
        raise NotImplementedError

    def _restore_draws(self, state: Any) -> None:
        raise NotImplementedError

    def _ran_out(self) -> bool:
        """Whether the last draw ended an epoch (samplers without replacement)."""
        return False

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        raise NotImplementedError

    def plan_load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> Plan:
        """Check ``state`` whole and return the function that applies it (nothing changes yet)."""
        raise NotImplementedError

    def _locks(self) -> AbstractContextManager[Any]:
        """Hold every storage lock a consistent snapshot of the state needs (in lock order)."""
        raise NotImplementedError

    def _lock_held(self) -> str | None:
        """A lock this buffer's draws take that the calling thread holds, named (else ``None``)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def state_lock(self) -> Iterator[None]:
        """Hold the state still: no draw ahead, no write, while inside.

        Pauses prefetching (the queued batches are undone), then takes every storage lock
        the state needs, in the lock order of this module; a collector's ``extend`` waits
        until the block is left, and so does a ``sample()`` from another thread. Hold it
        while reading :meth:`state_dict` with ``copy=False`` (and writing it out).
        """
        with self._paused(), self._locks():
            yield

    def _online_rows(self) -> int | list[int]:
        """Online rows held, what a rate limiter's ``min_size_to_sample`` counts: one count,
        or one per written storage where there are several (each moves under its own lock)."""
        raise NotImplementedError

    # -- rate limiting (mixreplay.rate_limit) ----------------------------------------------

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The :class:`~mixreplay.rate_limit.RateLimiter` given at construction (``None``: none)."""
        gate = self._gate
        return None if gate is None else gate.limiter

    @property
    def rate_limiter_counts(self) -> RateCounts | None:
        """The rate limiter's counts now: online rows inserted, rows sampled, online rows held."""
        gate = self._gate
        return None if gate is None else gate.counts()

    def _limited(self, batch_size: int | None, timeout: Any, draw: Any, *args: Any) -> Any:
        """``draw(n, *args)`` once the rate limiter lets ``n`` more sampled rows through."""
        gate = self._gate
        assert gate is not None
        n = self._resolve_batch_size(batch_size)
        return gate.run_sample(n, check_timeout(timeout), draw, n, *args)

    def _rate_limiter_state(self) -> dict[str, Any]:
        """The ``"rate_limiter"`` entry of :meth:`state_dict` (absent without a limiter)."""
        gate = self._gate
        return {} if gate is None else {"rate_limiter": gate.state_dict()}

    def _plan_rate_limiter(self, state: dict[str, Any]) -> Plan:
        """What restores the saved counts (run after the rows are restored)."""
        gate = self._gate
        if gate is None:
            if "rate_limiter" in state:
                log.info("the state's rate-limiter counts are not restored: no rate_limiter here")
            return lambda: None
        return gate.plan_load(state.get("rate_limiter"), self._online_rows)

    # -- prefetching, as a state records it -------------------------------------------------

    def _prefetch_state_entry(self) -> dict[str, Any]:
        """The ``"_prefetch_state"`` entry of :meth:`state_dict` (TorchRL's key): the prefetch
        depth of the buffer that saved it. It holds no batches: a state is taken with the
        queued draws undone (see :mod:`mixreplay.prefetch`)."""
        return {"_prefetch_state": {"capacity": self._prefetch}}

    def _check_prefetch_state(self, state: dict[str, Any]) -> None:
        """Check the saved ``"_prefetch_state"`` (absent from older states: nothing to check).

        Any depth loads (the sequence of batches does not depend on it); a different one
        is logged at INFO."""
        saved = state.get("_prefetch_state")
        if saved is None:
            return
        capacity = saved.get("capacity") if isinstance(saved, dict) else None
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise CheckpointError(
                "_prefetch_state must be a dict with the saved buffer's 'capacity', an int "
                f">= 0 (its prefetch), got {describe(saved)}; the checkpoint is corrupt"
            )
        if capacity != self._prefetch:
            log.info(
                "%s: the state was saved with prefetch=%d, loaded with prefetch=%d (a state holds "
                "no queued batches: the batches that follow are the same)",
                type(self).__name__, capacity, self._prefetch,
            )  # fmt: skip

    # -- sampling --------------------------------------------------------------------------

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            if self._batch_size is None:
                raise MissingBatchSizeError(  # TorchRL's words first
                    "batch_size not specified: batch_size must be provided either in __init__ "
                    "or sample(): pass sample(batch_size) or set batch_size= at construction"
                )
            return self._batch_size
        return check_batch_size(batch_size)

    def _draw(self, batch_size: int | None, info: bool) -> tuple[R, bool]:
        """One batch and whether it ended an epoch: from the prefetch queue when it holds
        this size, else drawn now."""
        n = self._resolve_batch_size(batch_size)
        prefetcher = self._prefetcher
        if prefetcher is not None:
            if n == self._batch_size:
                self._check_prefetched(prefetcher)
                try:
                    return prefetcher.next()
                except PrefetchClosed:  # close() from another thread: drawn here, as after it
                    pass
            else:
                # Another size: the queued batches are undone, so the sequence stays that of
                # a buffer without prefetching.
                prefetcher.discard()
        return self._sample_now(n, info), self._ran_out()

    def _draw_stamp(self) -> int:
        """Changes whenever what a draw gives changes other than the rows: a transform its
        batches go through, a sampler's settings (a subclass adds its own)."""
        return self._transform.version

    def _check_prefetched(self, prefetcher: Prefetcher[R]) -> None:
        # The transforms changed since the queued batches were drawn (``rb.transform.append``
        # or, on a mixing buffer, a source's append_transform), or a sampler's settings
        # (alpha, beta): the batches drawn ahead with the old ones are undone and drawn again,
        # so every batch after the change follows it, whatever the prefetch thread had done.
        stamp = self._draw_stamp()
        if stamp != self._prefetch_stamp:
            self._prefetch_stamp = stamp
            prefetcher.discard()

    def _finish(self, batch: Any) -> Any:
        """The tail of every batch: on ``batch_device``, this buffer's transforms, then pinning."""
        dest = self._batch_device
        if dest is not None and data_types.device_of(batch) != dest:
            # the fast paths gather straight onto dest; this is the fallback (foreign storages,
            # source transforms): one copy per leaf, asynchronous only towards an accelerator
            batch = data_types.to_device(batch, dest, non_blocking=dest.type != "cpu")
        if self._transform:
            batch = self._transform(batch)
        if self._pin_memory:
            batch = pin(batch)
        return batch

    # -- generators: the buffer's own, and one per device its storages live on -------------

    def _generator_for(self, device: torch.device | None) -> torch.Generator:
        """The generator that draws indices for rows on ``device``.

        The buffer's own generator for host rows (and for rows on its device, when it was
        given one on a device); for rows on an accelerator a generator on that device, so
        indices are drawn where the rows are (no host-to-device copy, no sync). That one is
        seeded from the buffer's generator the first time it is needed
        (:func:`device_seed`) and saved with the buffer's state.
        """
        if device is None or device == _HOST or device.type == "cpu":  # == first: µs cheaper
            return self._generator
        g = self._device_generators.get(device)
        if g is None:
            g = self._new_device_generator(device)
        return g

    def _new_device_generator(self, device: torch.device) -> torch.Generator:
        where = _canonical(device)
        main = self._generator
        if main.device == where:
            g = main
        else:
            g = next(
                (d for d in self._device_generators.values() if d.device == where), None
            ) or torch.Generator(device=where).manual_seed(device_seed(main, where))
        self._device_generators[device] = g
        return g

    def _owned_device_generators(self) -> dict[str, torch.Generator]:
        """The device generators this buffer made (not its own generator), by device name."""
        main = self._generator
        return {str(g.device): g for g in self._device_generators.values() if g is not main}

    def _generators_snapshot(self) -> Any:
        """Every generator's state (what a draw changes), for :meth:`_restore_generators`."""
        return self._generator.get_state(), {
            d: (g, g.get_state()) for d, g in self._device_generators.items()
        }

    def _restore_generators(self, snapshot: Any) -> None:
        main, devices = snapshot
        self._generator.set_state(main)
        self._device_generators = {d: g for d, (g, _) in devices.items()}
        for g, state in {id(g): (g, s) for g, s in devices.values()}.values():
            if g is not self._generator:
                g.set_state(state)

    def _generators_state(self) -> dict[str, Any]:
        """The generator entries of :meth:`state_dict`: ``"_rng"`` (TorchRL's key), and
        ``"device_generators"`` once a generator on a device has drawn (absent otherwise,
        so a host-only buffer saves exactly what it always did)."""
        out: dict[str, Any] = {"_rng": generator_state(self._generator)}
        owned = self._owned_device_generators()
        if owned:
            out["device_generators"] = {name: generator_state(g) for name, g in owned.items()}
        return out

    def _plan_generators(self, state: dict[str, Any]) -> Plan:
        """Check the saved generators; return what restores them (nothing changes yet).

        A state without ``"device_generators"`` (host-only, or written by an earlier
        version) restores the buffer's generator; a generator on a device is then seeded
        from it at its first draw, as in the buffer that wrote the state. A saved device
        generator for a device this process lacks is skipped (logged): no storage of this
        buffer can be there.
        """
        # "_rng", TorchRL's key; states written by mixreplay 0.2 and earlier have "generator"
        key = "_rng" if "_rng" in state or "generator" not in state else "generator"
        main = plan_generator(self._generator, state.get(key), key)
        saved = state.get("device_generators", {})
        if not isinstance(saved, dict):
            raise CheckpointError(
                f"device_generators must be a dict of device name to generator state, got "
                f"{describe(saved)}; the checkpoint is corrupt"
            )
        kept: dict[torch.device, torch.Tensor] = {}
        for name, entry in saved.items():
            try:
                device = torch.device(name)
            except (RuntimeError, TypeError):
                raise CheckpointError(
                    f"device_generators: {name!r} is not a device name; the checkpoint is corrupt"
                ) from None
            if device.type == "cpu":
                raise CheckpointError(
                    "device_generators: 'cpu' is the buffer's own generator, saved as "
                    "'_rng'; the checkpoint is corrupt"
                )
            if not _usable(device):
                log.info(
                    "the saved generator on %s is not restored: this process has no %s", name, name
                )
                continue
            probe = torch.Generator(device=device)
            plan_generator(probe, entry, f"device_generators[{name!r}]")()
            kept[device] = probe.get_state()

        def apply() -> None:
            main()
            gens: dict[torch.device, torch.Generator] = {}
            for device, st in kept.items():
                g = torch.Generator(device=device)
                g.set_state(st)
                gens[device] = g
            self._device_generators = gens

        return apply

    # -- prefetching (mixreplay.prefetch) --------------------------------------------------

    def _prefetch_draw(self) -> R:
        assert self._batch_size is not None  # check_prefetch: prefetching needs a batch size
        return self._sample_now(self._batch_size, True)

    def _new_prefetcher(self) -> Prefetcher[R] | None:
        """A prefetch queue for ``prefetch`` (``None`` without); its thread starts on first use."""
        if not self._prefetch:
            return None
        ref = weakref.ref(self)  # the prefetcher must not keep its buffer alive

        def holds() -> str | None:
            buffer = ref()
            return None if buffer is None else buffer._lock_held()

        return Prefetcher(
            self._prefetch_draw,
            self._prefetch,
            snapshot=self._draw_snapshot,
            restore=self._restore_draws,
            ran_out=self._ran_out,
            holds=holds,
        )

    def _prefetching(self) -> Prefetcher[R] | None:
        """The prefetch queue; ``None`` without ``prefetch``."""
        return self._prefetcher

    def prefetch_paused(self) -> AbstractContextManager[Any]:
        """A block in which this buffer, and every buffer that draws from it ahead of time,
        draws nothing ahead: the batches drawn ahead are undone on entry (a ``sample()``
        inside draws in its caller's thread). Re-entrant; what :meth:`state_lock` takes
        before the storage locks."""
        return self._paused()

    def _paused(self) -> AbstractContextManager[Any]:
        """Prefetching paused (queued batches undone, nothing drawn ahead) while inside: this
        buffer's own queue, and a subclass adds the others its state read must hold still."""
        return self._own_paused()

    def _own_paused(self) -> AbstractContextManager[Any]:
        """This buffer's own prefetch queue paused while inside."""
        p = self._prefetcher
        return contextlib.nullcontext() if p is None else p.paused()

    @property
    def _prefetch_queue(self) -> tuple[Queued[R], ...]:
        """TorchRL's name for the batches drawn ahead and not handed out yet, oldest first
        (a read-only view, taken now; empty without ``prefetch``): ``[0].result()`` is what
        the next ``sample(return_info=True)`` returns."""
        p = self._prefetcher
        return () if p is None else p.pending()

    @property
    def _futures_lock(self) -> threading.RLock:
        """TorchRL's name for the lock of the prefetch queue (:attr:`Prefetcher.lock`), held
        while a checkpoint or a load waits for the draws in flight and undoes them."""
        p = self._prefetcher
        if p is None:
            raise AttributeError(
                f"{type(self).__name__} has no prefetch queue (built without prefetch=, or "
                "closed), hence no _futures_lock: nothing is drawn ahead to wait for"
            )
        return p.lock

    def _before_write(self) -> None:
        # Draws already asked for see the buffer as it was when they were asked for.
        if self._prefetcher is not None:
            self._prefetcher.wait()

    def _after_write(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.refill()

    def _discard_prefetched(self) -> None:
        # Undo the draws not yet returned (the generator and samplers are rewound).
        if self._prefetcher is not None:
            self._prefetcher.discard()

    def close(self) -> None:
        """Stop the prefetch thread (a no-op without ``prefetch``); later samples are drawn in
        the caller's thread, and a ``sample()`` in another thread meanwhile returns the batch
        a buffer without prefetching would (or draws it itself).

        With a rate limiter, every ``sample`` / ``extend`` waiting for it wakes with
        :class:`~mixreplay.errors.BufferClosedError`, and so does every later one.
        """
        if self._gate is not None:  # rate limiter: wake its waiters (mixreplay.rate_limit)
            self._gate.close()
        prefetcher = self._prefetcher
        if prefetcher is not None:
            # first: until it has undone the draws not handed out, a sample() elsewhere waits
            # on it (then draws itself), never on a state being rewound
            prefetcher.close()
            self._prefetcher = None
        self._prefetch = 0

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """The fields a copy is made of, as they are (shared): :meth:`__deepcopy__` and
        :meth:`__reduce_ex__` read them under :meth:`state_lock` and copy them there."""
        self._discard_prefetched()  # the copy redraws them: the same batches
        state = self.__dict__.copy()
        state["_prefetcher"] = None  # a thread does not pickle; the copy starts its own
        state.pop("_iterator", None)  # nor does a generator object
        state.pop("_readers", None)  # the buffers reading this one: the copy has its own
        return state

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickle one state of the buffer: its fields deep-copied under :meth:`state_lock`.

        A collector extending meanwhile waits, so the copy's rows, cursor, counts and
        sampler state (a priority tree) are those of one moment. Sent to a process being
        started (a shared buffer's collector), the fields go as they are: the rows are
        shared, not copied.
        """
        if get_spawning_popen() is not None:
            return super().__reduce_ex__(protocol)
        with self.state_lock():  # pauses prefetching first (the lock order above)
            state = _copy.deepcopy(self.__getstate__())
        return (_new_buffer, (type(self),), state)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A copy of one state of the buffer (see :meth:`__reduce_ex__`)."""
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        with self.state_lock():
            state = _copy.deepcopy(self.__getstate__(), memo)
        twin.__setstate__(state)
        return twin

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_device_generators", {})  # pickled by a version without them
        state.setdefault("_batch_device", None)
        self.__dict__.update(state)
        self._prefetcher = self._new_prefetcher()

    # -- properties and transforms ---------------------------------------------------------

    @property
    def generator(self) -> torch.Generator:
        return self._generator

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def prefetch(self) -> int:
        """Batches the prefetch thread keeps ready (0: none)."""
        return self._prefetch

    @property
    def pin_memory(self) -> bool:
        return self._pin_memory

    @property
    def batch_device(self) -> torch.device | None:
        """Where sampled batches land (``None``: on the device of the rows drawn)."""
        return self._batch_device

    @property
    def transform(self) -> Compose:
        """This buffer's transforms, in order (an empty :class:`~mixreplay.transforms.Compose`: none)."""
        return self._transform

    def append_transform(self, transform: Transform) -> None:
        """Apply ``transform`` to sampled batches, after the transforms already attached.

        Accepts a callable ``td -> td`` or a TorchRL ``Transform`` (e.g. ``DoubleToFloat()``).
        On a mixing buffer it runs on each whole batch, after each source's own transforms;
        to transform one source's rows only (e.g. cast the offline dataset), attach it to
        that source instead.
        """
        self._discard_prefetched()  # batches drawn ahead were transformed the old way
        self._transform.append(transform)

    def insert_transform(self, index: int, transform: Transform) -> None:
        """Apply ``transform`` at position ``index`` of this buffer's transforms."""
        self._discard_prefetched()
        self._transform.insert(index, transform)

    # -- checkpoints (mixreplay.checkpoint) ------------------------------------------------

    def _check_kind(self, state: Any) -> dict[str, Any]:
        """``state`` if it is a dict saved by this kind of buffer; a CheckpointError otherwise."""
        name = type(self).__name__
        if not isinstance(state, dict):
            raise CheckpointError(f"a {name} state is a dict, got {type(state).__name__}")
        if state.get("kind") != name:
            raise CheckpointError(
                f"the state holds a {state.get('kind')}, not a {name}; load it into a {state.get('kind')}"
            )
        return state

    def load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = False) -> None:
        """Restore :meth:`state_dict`; raises :class:`~mixreplay.CheckpointError`, changing nothing, if it does not fit.

        Keyword Args:
            allow_offline_mismatch: resume even though an offline source differs
                from the one saved (its fingerprint, row count or schema).
        """
        if self._prefetcher is not None:
            # the draws in flight end before the state is checked, under the queue's lock
            # (``_futures_lock``): none is asked for or handed out meanwhile
            self._prefetcher.wait(hold=True)
        apply = self.plan_load_state_dict(state, allow_offline_mismatch=allow_offline_mismatch)
        constructed = self._settings()
        with self._paused():  # queued batches belong to the state being replaced
            apply()
        self._log_replaced(constructed, self._settings())

    def _settings(self) -> dict[str, str]:
        """What a loaded state replaces that the constructor set, as text for the log: the
        generator's seed here; the mixing buffers add their fractions."""
        return {"generator": f"seed {self._generator.initial_seed()}"}

    def _log_replaced(self, constructed: dict[str, str], loaded: dict[str, str]) -> None:
        """Say what the loaded state replaced: at WARNING what differs from what the
        constructor was given (a fraction, a generator), at INFO what it keeps."""
        name = type(self).__name__
        replaced = [
            f"{key} {constructed[key]} with the saved {loaded[key]}"
            for key in loaded
            if constructed.get(key) != loaded[key] and (key != "generator" or self._generator_given)
        ]
        if replaced:
            log.warning(
                "%s: the loaded state replaces what the constructor set: %s",
                name, "; ".join(replaced),
            )  # fmt: skip
        log.info(
            "%s: loaded; %s; the generator continues the saved draws",
            name, ", ".join(f"{k} {v}" for k, v in loaded.items()),
        )  # fmt: skip

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save a checkpoint directory at ``path``, atomically (see :mod:`mixreplay.checkpoint`).

        Only the filled rows of writable storages are written, while their locks are held
        (no copy), so a collector extending meanwhile waits and the checkpoint is one
        consistent snapshot; offline data is referenced, not copied. While prefetching,
        the batches not yet returned are discarded first and the generator rewound to
        before them: the checkpoint holds a buffer that drew exactly the batches it
        returned, and this buffer and one restored from the checkpoint return the same
        batches from then on.
        """
        with self.state_lock():  # pauses prefetching first: the worker draws under the locks
            checkpoint.save_state(path, self.state_dict(copy=False))

    def loads(self, path: str | os.PathLike[str], *, allow_offline_mismatch: bool = False) -> None:
        """Restore the checkpoint at ``path`` into this buffer, built with the same arguments.

        From then on, ``sample`` draws exactly the batches the saved buffer would have
        drawn: the saved offline fraction (or mixture weights) and generator replace the
        constructor's, and a WARNING log names each that differs, old and new. Raises :class:`~mixreplay.CheckpointError` (and changes nothing) for a
        checkpoint that is missing, corrupt, of another format version, or that does not
        fit this buffer (schema, capacity, sampler, offline fingerprint unless
        ``allow_offline_mismatch=True``).
        """
        checkpoint.load_into(self, path, allow_offline_mismatch=allow_offline_mismatch)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias of :meth:`dumps` (TorchRL's name)."""
        self.dumps(path)

    dump = save

    def load(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        """Alias of :meth:`loads` (TorchRL's name)."""
        self.loads(path, **kwargs)
