"""Rate limiters: samples per insert held within a band, so the update-to-data ratio is set.

In an asynchronous loop (collectors writing while a learner samples) the
update-to-data ratio (UTD) is whatever the relative speed of the processes makes
it. A rate limiter, given to a buffer as ``rate_limiter=``, holds it: whichever
side runs ahead waits. The limiters are Reverb's, with Reverb's meaning:
:class:`MinSize` (no sampling before the buffer holds ``min_size_to_sample``
online rows) and :class:`SampleToInsertRatio` (that, and then samples per insert
within a band).

What is counted:

- *inserts*: online rows written through the buffer's ``extend`` / ``add`` (for a
  :class:`~mixreplay.MixtureReplayBuffer`, rows written to any of its writable
  sources). Offline rows are never inserted; rows written to a source directly
  (``rb.online_buffer.extend``) pass the limiter and are not counted.
- *samples*: the rows of every batch the buffer hands out, offline rows included,
  so ``samples_per_insert = UTD × batch_size`` whatever the offline share or its
  schedule (UTD 4 at batch 256: ``samples_per_insert=1024``).
- *size*: the online rows the buffer holds (a full ring stays full).

The rule, with ``I`` inserts, ``S`` samples, ``N`` online rows held and
``spi = samples_per_insert``; the *error* is ``I * spi - S``:

- a batch of ``n`` rows may be sampled when ``N >= min_size_to_sample`` and
  ``I * spi - S - n >= min_diff``;
- a row may be inserted when ``N + 1 <= min_size_to_sample`` (filling up is free)
  or ``(I + 1) * spi - S <= max_diff``.

``SampleToInsertRatio(spi, min_size, error_buffer)`` sets ``min_diff, max_diff =
spi * min_size -/+ error_buffer`` (or takes the pair ``error_buffer=(min_diff,
max_diff)`` as it is): once the buffer holds ``min_size`` rows the error starts
at the centre of the band and stays in it. The band must be at least
``2 * max(1, spi)`` wide (Reverb's rule) and at least ``spi + batch_size`` (a
batch must fit beside one insert, else sampler and inserter could both wait),
and ``min_diff`` may not exceed ``spi * min_size``; narrower bands are refused.

What blocks: ``sample`` waits while the batch would take the error below the
band (or the buffer is below ``min_size_to_sample``); ``extend`` waits while one
more row would take it above. Both take ``timeout=`` (seconds; ``None`` waits
until allowed or until the buffer is closed) and raise
:class:`~mixreplay.errors.RateLimitTimeoutError` naming the limiter and the
counts; ``close()`` wakes every waiter with :class:`~mixreplay.errors.BufferClosedError`,
and every later ``sample`` / ``extend`` raises it.

An ``extend`` of many rows goes in *in parts*: as many rows as the band allows
now, the rest as samples make room (one call, which returns the slots of every
row). Whole, an ``extend`` of ``n`` rows would need a band ``n * spi`` wide to
ever fit: at UTD 4 and batch 256 a 1,000-row chunk needs a band of a million
sampled rows (4,000 batches of slack), and the ratio would hold only on
average. In parts the band needs only ``spi + batch_size``, and the counts stay
in it after every row. The cost: an ``extend`` that times out may have written
its first rows; the error's ``written`` says how many (they stay, counted).

Write-side transforms run on each part: every buffer cuts the rows *given* to
``extend`` into parts, runs a part through its write-side transforms, and reserves
the rows the part *stores* (only the rows kept are counted). A part that stores
more rows than it was given waits until all of them fit and goes in whole; one
that could never fit at once (``m * spi + batch_size > max_diff - min_diff``, or
more than fit while fewer than ``min_size_to_sample`` rows are held and no sample
can make room) is refused with a ``ValueError`` rather than waited for. ``written``
counts rows given (the input rows whose parts went in), so
``extend(data[err.written:])`` writes each row once whatever the transforms keep;
``index`` holds the slots of the rows stored.

Prefetching (``prefetch=N``): the worker thread never waits for the limiter
(every write first waits for the worker's pending draws, so a worker waiting for
inserts would deadlock). ``sample()`` waits for the band in the caller's thread
before it takes a batch from the queue, and a prefetched batch counts as a
sample when ``sample()`` hands it out, not when the worker drew it; batches
drawn ahead and discarded (a checkpoint, another batch size) never count.

Checkpoints: ``state_dict()`` (and ``dumps``) saves the counters with the rows, read
under the same locks, so a resumed run continues the same ratio. A state saved
without counters (by an earlier version, or a buffer without a limiter), or with
a limiter of other settings, starts the counters as a run that kept the ratio
exactly would have them for the rows held (``I = N``, ``S = spi * max(0, N -
min_size)``); ``empty()`` restarts them.

Locks: a buffer's gate (:class:`RateGate`) has one lock of its own, a leaf:
taken after any storage lock, never held while taking another lock, drawing,
writing or waiting for a thread. A waiting call holds no lock at all, so other
calls (``len``, checkpoints, priority updates, the writes it waits for) go on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from mixreplay._state import Plan
from mixreplay._validate import check_int, check_real, describe
from mixreplay.errors import BufferClosedError, CheckpointError, RateLimitTimeoutError

__all__ = [
    "MinSize",
    "RateCounts",
    "RateGate",
    "RateLimiter",
    "SampleToInsertRatio",
    "check_timeout",
    "make_gate",
    "timeout_error",
    "write_limited",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


def check_timeout(timeout: Any) -> float | None:
    """``timeout``: ``None`` (wait until allowed or closed) or seconds ``>= 0``."""
    if timeout is None or (isinstance(timeout, float) and timeout == math.inf):
        return None
    return check_real(
        timeout,
        "timeout",
        min=0,
        what="seconds >= 0 or None",
        hint="e.g. timeout=30.0, or None to wait until allowed",
    )


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


# -- the settings --------------------------------------------------------------------------


class RateLimiter:
    """What a rate limiter allows: Reverb's four numbers, checked once, never changed.

    Use :class:`MinSize` or :class:`SampleToInsertRatio`; a buffer keeps the counts
    (see :mod:`mixreplay.rate_limit`). Equal settings compare equal, and a
    limiter pickles, so a buffer's constructor arguments can travel to a Ray actor.
    """

    __slots__ = ("_max_diff", "_min_diff", "_min_size", "_spi")

    def __init__(
        self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float
    ):
        self._spi = float(samples_per_insert)
        self._min_size = int(min_size_to_sample)
        self._min_diff = float(min_diff)
        self._max_diff = float(max_diff)

    @property
    def samples_per_insert(self) -> float:
        """Rows sampled per online row inserted (``UTD × batch_size``)."""
        return self._spi

    @property
    def min_size_to_sample(self) -> int:
        """Online rows the buffer must hold before anything is sampled."""
        return self._min_size

    @property
    def min_diff(self) -> float:
        """The band's floor: a sample may not take ``inserts * spi - samples`` below it."""
        return self._min_diff

    @property
    def max_diff(self) -> float:
        """The band's ceiling: an insert may not take ``inserts * spi - samples`` above it."""
        return self._max_diff

    # -- the rule, as pure functions of the counts ------------------------------------------

    def error(self, inserts: int, samples: int) -> float:
        """``inserts * samples_per_insert - samples``: what the band bounds."""
        return inserts * self._spi - samples

    def sample_allowed(self, inserts: int, samples: int, size: int, n: int) -> bool:
        """Whether ``n`` more rows may be sampled now."""
        return size >= self._min_size and inserts * self._spi - samples - n >= self._min_diff

    def inserts_allowed(self, inserts: int, samples: int, size: int, n: int) -> int:
        """How many of ``n`` rows may be inserted now, one after the other (``0..n``)."""
        spi, top = self._spi, self._max_diff
        if (inserts + n) * spi - samples <= top:  # all of them: the common case, one product
            return n
        free = self._min_size - size  # filling up to min_size_to_sample is always allowed
        if free >= n:
            return n
        k = math.floor((top + samples) / spi) - inserts  # then corrected for rounding
        k = max(0, min(n, k))
        while k < n and (inserts + k + 1) * spi - samples <= top:
            k += 1
        while k > 0 and (inserts + k) * spi - samples > top:
            k -= 1
        return max(k, free, 0)

    def check_batch(self, batch_size: int) -> None:
        """Refuse a batch size the band cannot hold beside one insert (both sides could wait)."""
        width = self._max_diff - self._min_diff
        if width < self._spi + batch_size:
            raise ValueError(
                f"{self!r} cannot limit batches of {batch_size} rows: its band is {width:g} "
                f"rows wide, less than samples_per_insert + batch_size = "
                f"{self._spi + batch_size:g}, so a sample and an insert could both wait for "
                f"good; widen the band to error_buffer >= {(self._spi + batch_size) / 2:g}"
            )

    def centre(self, size: int) -> tuple[int, int]:
        """``(inserts, samples)`` of a run that kept the ratio exactly, holding ``size`` rows."""
        return size, round(self._spi * max(0, size - self._min_size))

    # -- identity -----------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The settings as JSON values (what a checkpoint stores)."""
        raise NotImplementedError

    @staticmethod
    def from_config(config: Any) -> RateLimiter:
        """The limiter :meth:`config` describes; :class:`~mixreplay.CheckpointError` if it is not one."""
        kinds: dict[str, Callable[..., RateLimiter]] = {
            "MinSize": MinSize,
            "SampleToInsertRatio": SampleToInsertRatio,
        }
        if not isinstance(config, dict) or config.get("kind") not in kinds:
            raise CheckpointError(
                f"a rate limiter is saved as a dict with kind one of {sorted(kinds)}, got "
                f"{config!r:.200}; the checkpoint is corrupt"
            )
        args = {k: v for k, v in config.items() if k != "kind"}
        if isinstance(args.get("error_buffer"), list):
            args["error_buffer"] = tuple(args["error_buffer"])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # warned when it was built
                return kinds[config["kind"]](**args)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"the saved rate limiter is invalid: {err}") from None

    def _key(self) -> tuple[Any, ...]:
        return (type(self), self._spi, self._min_size, self._min_diff, self._max_diff)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RateLimiter) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class MinSize(RateLimiter):
    """No sampling until the buffer holds ``min_size_to_sample`` online rows; then none is limited.

    Args:
        min_size_to_sample: online rows to hold before the first sample (``>= 1``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import MinSize, ReplayBuffer, RateLimitTimeoutError
        >>> rb = ReplayBuffer(batch_size=4, generator=0, rate_limiter=MinSize(10))
        >>> _ = rb.extend(TensorDict({"x": torch.arange(5.0)}, [5]))
        >>> try:
        ...     rb.sample(timeout=0)
        ... except RateLimitTimeoutError:
        ...     print("5 rows held, 10 needed")
        5 rows held, 10 needed
        >>> _ = rb.extend(TensorDict({"x": torch.arange(5.0)}, [5]))
        >>> rb.sample(timeout=0).batch_size
        torch.Size([4])
    """

    __slots__ = ()

    def __init__(self, min_size_to_sample: int):
        m = check_int(
            min_size_to_sample,
            "min_size_to_sample",
            min=1,
            what="a positive int (online rows)",
            hint="e.g. MinSize(1000)",
        )
        super().__init__(1.0, m, -math.inf, math.inf)

    def config(self) -> dict[str, Any]:
        return {"kind": "MinSize", "min_size_to_sample": self._min_size}

    def __reduce__(self):
        return MinSize, (self._min_size,)

    def __repr__(self) -> str:
        return f"MinSize(min_size_to_sample={self._min_size})"


class SampleToInsertRatio(RateLimiter):
    """Samples per insert held within a band: ``min_size_to_sample`` rows first, then the ratio.

    While the buffer holds fewer than ``min_size_to_sample`` online rows, sampling
    waits and inserting is free. Then the error ``inserts * samples_per_insert -
    samples`` stays within ``samples_per_insert * min_size_to_sample ± error_buffer``:
    a sample that would take it below waits for inserts, an insert that would take
    it above waits for samples.

    Args:
        samples_per_insert: rows sampled per online row inserted, ``> 0``:
            ``UTD × batch_size`` (every row of a batch counts, offline rows included).
        min_size_to_sample: online rows to hold before the first sample (``>= 1``).
        error_buffer: how far the error may drift each way, in sampled rows (``>= 0``),
            or the band itself as ``(min_diff, max_diff)``. At least
            ``max(1, samples_per_insert)`` (a band ``2 * max(1, samples_per_insert)``
            wide), and a buffer also needs ``(samples_per_insert + batch_size) / 2``.

    Raises:
        ValueError: a ratio ``<= 0``, a band too narrow to let both sides through,
            or a band above the error the buffer starts with (``min_diff >
            samples_per_insert * min_size_to_sample``: sampling would never start).

    A band whose ceiling is below that starting error (``max_diff <
    samples_per_insert * min_size_to_sample``) is legal but warned about: inserts
    wait from the moment the buffer reaches ``min_size_to_sample`` until samples
    bring the error down.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import ReplayBuffer, SampleToInsertRatio
        >>> from mixreplay import RateLimitTimeoutError
        >>> # UTD 2 at batch 4: 8 rows sampled per row inserted, within +- 16 of 2 * 8
        >>> limiter = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=2,
        ...                               error_buffer=16)
        >>> rb = ReplayBuffer(batch_size=4, generator=0, rate_limiter=limiter)
        >>> _ = rb.extend(TensorDict({"x": torch.arange(4.0)}, [4]), timeout=0)
        >>> for _ in range(8):                 # 4 rows in: 8 batches of 4 (UTD 2) may go
        ...     _ = rb.sample(timeout=0)
        >>> rb.rate_limiter_counts
        RateCounts(inserts=4, samples=32, size=4)
        >>> try:
        ...     rb.sample(timeout=0)           # a 9th would leave the band: waits for inserts
        ... except RateLimitTimeoutError as err:
        ...     print(err.inserts, err.samples)
        4 32
    """

    __slots__ = ("_error_buffer",)

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ):
        spi = check_real(
            samples_per_insert,
            "samples_per_insert",
            min=0,
            open_min=True,
            what="a finite number > 0",
            hint="samples_per_insert = UTD x batch_size, e.g. 4 x 256 = 1024",
        )
        m = check_int(
            min_size_to_sample,
            "min_size_to_sample",
            min=1,
            what="a positive int (online rows)",
            hint="e.g. min_size_to_sample=1000",
        )
        offset = spi * m
        if isinstance(error_buffer, (tuple, list)):
            if len(error_buffer) != 2:
                raise ValueError(
                    f"error_buffer must be a number or a (min_diff, max_diff) pair, got "
                    f"{describe(error_buffer)}"
                )
            lo = check_real(error_buffer[0], "error_buffer[0] (min_diff)")
            hi = check_real(error_buffer[1], "error_buffer[1] (max_diff)")
            saved: float | tuple[float, float] = (lo, hi)
        else:
            eb = check_real(
                error_buffer,
                "error_buffer",
                min=0,
                what="a number >= 0 or a (min_diff, max_diff) pair",
                hint=f"e.g. error_buffer={max(1.0, spi) * 2:g}, or a (min_diff, max_diff) pair",
            )
            lo, hi = offset - eb, offset + eb
            saved = eb
        need = 2 * max(1.0, spi)
        if hi - lo < need:
            raise ValueError(
                f"error_buffer={error_buffer!r} makes a band {hi - lo:g} rows wide, less than "
                f"2 * max(1, samples_per_insert) = {need:g}: sampling or inserting could wait "
                f"for good; use error_buffer >= {need / 2:g}"
            )
        if lo > offset:
            raise ValueError(
                f"error_buffer={error_buffer!r} puts min_diff={lo:g} above samples_per_insert "
                f"* min_size_to_sample = {offset:g}, the error once the buffer holds "
                "min_size_to_sample rows: sampling would never start; give a band that holds "
                f"{offset:g} (a number, or a pair with min_diff <= {offset:g})"
            )
        if hi < offset:
            warnings.warn(
                f"error_buffer={error_buffer!r} puts max_diff={hi:g} below samples_per_insert "
                f"* min_size_to_sample = {offset:g}: inserts wait from the moment the buffer "
                "holds min_size_to_sample rows until samples bring the error below max_diff; "
                "a learner that only samples while it inserts would deadlock",
                UserWarning,
                stacklevel=2,
            )
        super().__init__(spi, m, lo, hi)
        self._error_buffer = saved

    @property
    def error_buffer(self) -> float | tuple[float, float]:
        """As given: the drift allowed each way, or the ``(min_diff, max_diff)`` pair."""
        return self._error_buffer

    def config(self) -> dict[str, Any]:
        eb = self._error_buffer
        return {
            "kind": "SampleToInsertRatio",
            "samples_per_insert": self._spi,
            "min_size_to_sample": self._min_size,
            "error_buffer": list(eb) if isinstance(eb, tuple) else eb,
        }

    def __reduce__(self):
        return SampleToInsertRatio, (self._spi, self._min_size, self._error_buffer)

    def __repr__(self) -> str:
        return (
            f"SampleToInsertRatio(samples_per_insert={self._spi:g}, "
            f"min_size_to_sample={self._min_size}, error_buffer={self._error_buffer!r})"
        )


def timeout_error(
    call: str,
    timeout: float | None,
    limiter: RateLimiter,
    counts: RateCounts,
    *,
    written: int = 0,
    index: Any = None,
) -> RateLimitTimeoutError:
    """The error of ``call`` (``"sample(256)"``, ``"extend of 10 rows"``) that waited ``timeout`` s."""
    i, s, n = counts
    if n < limiter.min_size_to_sample:
        state = f"{n:,} online rows held of the {limiter.min_size_to_sample:,} needed to sample"
    else:
        state = (
            f"error inserts * samples_per_insert - samples = {limiter.error(i, s):,.6g}, band "
            f"[{limiter.min_diff:,.6g}, {limiter.max_diff:,.6g}]"
        )
    if call.startswith("sample"):
        behind = (
            "inserts are behind: the collectors must write more rows before the learner "
            "samples again (or pass a longer timeout=)"
        )
    else:
        behind = (
            "samples are behind: the learner must sample more before more rows go in (or "
            "pass a longer timeout=)"
        )
    part = f"; {written:,} of its rows were written (extend the rest)" if written else ""
    return RateLimitTimeoutError(
        f"{call} waited {timeout or 0:g} s for {limiter!r}: {i:,} inserts, {s:,} samples, "
        f"{state}; {behind}{part}",
        limiter=limiter,
        inserts=i,
        samples=s,
        size=n,
        written=written,
        index=index,
    )


# -- the counts a buffer keeps -------------------------------------------------------------


class RateCounts(NamedTuple):
    """A buffer's rate-limiter counts at one instant (``rb.rate_limiter_counts``)."""

    #: online rows inserted
    inserts: int
    #: rows sampled (every row of every batch handed out)
    samples: int
    #: online rows held
    size: int

    @property
    def samples_per_insert(self) -> float:
        """``samples / inserts`` (NaN before the first insert)."""
        return self.samples / self.inserts if self.inserts else math.nan


class RateGate:
    """A buffer's rate-limiter counts, and the calls waiting on them.

    The buffer owns it (see :func:`make_gate`). Counts that a call has been let
    through for but not yet finished are *pending*: a sample's rows count against
    further samples at once but let inserts through only once drawn, and an
    insert's rows the other way round, so the committed counts stay in the band
    at every instant. A call that fails gives its pending rows back.
    """

    def __init__(self, limiter: RateLimiter, *, size: int | Sequence[int] = 0):
        self.limiter = limiter
        self._cond = threading.Condition(threading.Lock())
        #: the online rows held by each written storage (one, but for a mixture's sources),
        #: and their sum
        self._parts: list[int] = []
        self._size = 0
        self._set_size(size)
        self._inserts, self._samples = limiter.centre(self._size)
        self._pending_inserts = 0
        self._pending_samples = 0
        self._closed = False
        self._waiting = 0  # calls waiting on the condition
        self._batch_ok = -1  # the last batch size checked against the band
        #: the largest batch size checked against the band (the buffer's, and every sample's)
        self._batch_max = 0

    # -- waiting ----------------------------------------------------------------------------

    def _wait(
        self, ready: Callable[[], int], deadline: float | None, fail: Callable[[], Exception]
    ):
        """Wait (holding the condition) until ``ready()`` is truthy; its value."""
        while True:
            if self._closed:
                raise BufferClosedError(
                    f"the buffer was closed: its rate limiter ({self.limiter!r}) lets no call "
                    "through any more; build a new buffer (or load a checkpoint into one)"
                )
            out = ready()
            if out:
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise fail()
            self._waiting += 1  # the counts' changes notify only while someone waits
            try:
                self._cond.wait(left)
            finally:
                self._waiting -= 1

    def _changed(self) -> None:
        """The counts changed (caller holds the condition): wake the waiters to look again."""
        if self._waiting:
            self._cond.notify_all()

    def _timeout(
        self, call: str, timeout: float | None, written: int = 0, index: Any = None
    ) -> RateLimitTimeoutError:
        return timeout_error(
            call,
            timeout,
            self.limiter,
            RateCounts(self._inserts, self._samples, self._size),
            written=written,
            index=index,
        )

    # -- sampling ---------------------------------------------------------------------------

    def run_sample(self, n: int, timeout: float | None, draw: Callable[..., T], *args: Any) -> T:
        """``draw(*args)`` once ``n`` more sampled rows fit the band; counted when it returns."""
        if n != self._batch_ok:
            self.limiter.check_batch(n)
            self._batch_ok = n
            self._batch_max = max(self._batch_max, n)
        lim = self.limiter
        with self._cond:
            if self._closed or not lim.sample_allowed(
                self._inserts, self._samples + self._pending_samples, self._size, n
            ):
                self._wait(
                    lambda: lim.sample_allowed(
                        self._inserts, self._samples + self._pending_samples, self._size, n
                    ),
                    _deadline(timeout),
                    lambda: self._timeout(f"sample({n})", timeout),
                )
            self._pending_samples += n
        done = False
        try:
            out = draw(*args)
            done = True
        finally:
            with self._cond:
                self._pending_samples -= n
                if done:
                    self._samples += n
                self._changed()
        return out

    # -- inserting --------------------------------------------------------------------------

    def reserve_insert(
        self, n: int, deadline: float | None, timeout: float | None, written: int, index: Any
    ) -> int:
        """Wait until some of ``n`` rows fit the band; reserve and return how many (``>= 1``)."""
        lim = self.limiter
        with self._cond:
            pending = self._pending_inserts
            k = 0
            if not self._closed:
                k = lim.inserts_allowed(
                    self._inserts + pending, self._samples, self._size + pending, n
                )
            if not k:

                def fits() -> int:
                    pending = self._pending_inserts
                    return lim.inserts_allowed(
                        self._inserts + pending, self._samples, self._size + pending, n
                    )

                k = self._wait(
                    fits,
                    deadline,
                    lambda: self._timeout(
                        f"extend of {written + n:,} rows",
                        timeout,
                        written,
                        index() if written else None,
                    ),
                )
            self._pending_inserts += k
        return k

    def reserve_rows(
        self,
        m: int,
        total: int,
        deadline: float | None,
        timeout: float | None,
        written: int,
        index: Any,
    ) -> None:
        """Wait until ``m`` rows fit the band at once; reserve them.

        One part of an ``extend`` (of ``total`` input rows, ``written`` of them in) whose
        write-side transforms made more rows than its input rows. Rows that no sample can
        ever make room for refuse the call (``ValueError``) rather than wait for good:
        more than the band holds beside a batch (``m * spi + batch_size > max_diff -
        min_diff``), or more than fit while nothing can be sampled yet (fewer than
        ``min_size_to_sample`` rows held) and no other insert is on its way.
        """
        lim = self.limiter

        def fits() -> int:
            pending = self._pending_inserts
            inserts, size = self._inserts + pending, self._size + pending
            if lim.inserts_allowed(inserts, self._samples, size, m) >= m:
                return 1
            width, spi, batch = lim.max_diff - lim.min_diff, lim.samples_per_insert, self._batch_max
            if m * spi + batch > width:
                why = (
                    f"{m:,} rows take {m * spi:,.6g} of the band, which is {width:,.6g} wide and "
                    f"must also hold a batch of {batch:,}"
                )
                need = (m * spi + batch) / 2
            elif size < lim.min_size_to_sample and not pending:
                why = (
                    f"{size:,} rows are held, fewer than the {lim.min_size_to_sample:,} needed "
                    "to sample, so no sample can make room"
                )
                need = (inserts + m) * spi - self._samples - lim.min_size_to_sample * spi
            else:
                return 0
            done = f"; {written:,} of its rows were written before" if written else ""
            raise ValueError(
                f"extend of {total:,} rows: a write-side transform made the next rows into "
                f"{m:,} rows, more than {lim!r} can ever let in at once ({why}){done}: a part's "
                f"rows go in whole; widen the band (error_buffer >= {max(need, 0):,.6g}) or "
                "make the transform return fewer rows per row"
            )

        with self._cond:
            self._wait(
                fits,
                deadline,
                lambda: self._timeout(
                    f"extend of {total:,} rows", timeout, written, index() if written else None
                ),
            )
            self._pending_inserts += m

    def commit_insert(self, k: int, size: int, rows: int, part: int = 0) -> None:
        """``k`` reserved rows went in as ``rows`` rows; written storage ``part`` now holds
        ``size`` online rows.

        Each storage's size is read under its own lock, with its insert: a total read there
        could count rows another collector has just written to another storage (a
        mixture's source) before their own insert is counted.
        """
        with self._cond:
            self._pending_inserts -= k
            self._inserts += rows
            self._parts[part] = size
            self._size = sum(self._parts)
            self._changed()

    def cancel_insert(self, k: int) -> None:
        """``k`` reserved rows were not written (the write failed)."""
        with self._cond:
            self._pending_inserts -= k
            self._changed()

    # -- the buffer's life ------------------------------------------------------------------

    def counts(self) -> RateCounts:
        with self._cond:
            return RateCounts(self._inserts, self._samples, self._size)

    def close(self) -> None:
        """Wake every waiter with :class:`~mixreplay.errors.BufferClosedError`; let nothing through again."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def _set_size(self, size: int | Sequence[int]) -> None:
        """The online rows held: one storage's, or one count per written storage."""
        self._parts = [size] if isinstance(size, int) else list(size)
        self._size = sum(self._parts)

    def reset(self, size: int | Sequence[int]) -> None:
        """Start counting again (the buffer was emptied, or now holds ``size`` rows)."""
        with self._cond:
            self._set_size(size)
            self._inserts, self._samples = self.limiter.centre(self._size)
            self._cond.notify_all()

    def state_dict(self) -> dict[str, Any]:
        with self._cond:
            return {
                "limiter": self.limiter.config(),
                "inserts": self._inserts,
                "samples": self._samples,
            }

    def plan_load(self, saved: Any, size: Callable[[], int | Sequence[int]]) -> Plan:
        """Check the saved counts; return what restores them (``size()``: rows held after the load)."""
        if saved is None:

            def centre() -> None:
                n = _total(size())
                log.info(
                    "the state holds no rate-limiter counts (saved without a limiter, or by an "
                    "earlier version): counting starts as a run at the ratio holding %d rows",
                    n,
                )
                self.reset(size())

            return centre
        if not isinstance(saved, dict):
            raise CheckpointError(
                f"rate_limiter must be a dict of the limiter and its counts, got {saved!r:.200}"
            )
        limiter = RateLimiter.from_config(saved.get("limiter"))
        counts = []
        for name in ("inserts", "samples"):
            value = saved.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(
                    f"rate_limiter {name} must be an int >= 0, got {value!r}; the checkpoint is "
                    "corrupt"
                )
            counts.append(value)
        if limiter != self.limiter:

            def rebase() -> None:
                n = _total(size())
                log.warning(
                    "the state's rate limiter is %r, this buffer's %r: counting starts again "
                    "at this buffer's ratio, as a run at that ratio holding %d rows",
                    limiter,
                    self.limiter,
                    n,
                )
                self.reset(size())

            return rebase

        def apply() -> None:
            with self._cond:
                self._inserts, self._samples = counts
                self._set_size(size())
                self._cond.notify_all()

        return apply

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_cond"]  # a copy waits on a condition of its own
        state.update(_pending_inserts=0, _pending_samples=0, _waiting=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition(threading.Lock())

    def __repr__(self) -> str:
        i, s, n = self.counts()
        return f"RateGate({self.limiter!r}, inserts={i}, samples={s}, size={n})"


def write_limited(
    gate: RateGate,
    n: int,
    timeout: float | None,
    prepare: Callable[[int, int], tuple[Any, int]],
    write: Callable[[Any, Callable[..., None]], Any],
    join: Callable[[list[Any]], Any],
) -> Any:
    """Write ``n`` input rows in the parts the band allows.

    Each part is input rows ``[a, b)``, as many as fit now. ``prepare(a, b)`` returns
    ``(rows, m)``: what they store (after the buffer's write-side transforms) and how many
    rows that is (``0``: nothing to write). The part reserves ``m`` rows: at once when
    ``m <= b - a``, else after waiting until all ``m`` fit (see :meth:`RateGate.reserve_rows`).
    ``write(rows, commit)`` writes them and calls ``commit(size[, part])`` (the online
    rows held after it, or held by storage ``part``) *under the lock that guards the
    rows*, so that a checkpoint never holds rows without their count; it returns the
    slots written. Reserved rows it does not commit (a failed write) are given back.
    ``join`` makes one result of the slots of the parts that stored rows (also for the
    rows a timeout leaves written, whose ``written`` counts input rows).
    """
    deadline = _deadline(timeout)
    parts: list[Any] = []

    def done() -> Any:
        return join(parts)

    a = 0
    while a < n:
        k = gate.reserve_insert(n - a, deadline, timeout, a, done)
        b = a + k
        try:
            rows, m = prepare(a, b)
        except BaseException:
            gate.cancel_insert(k)
            raise
        if m < k:
            gate.cancel_insert(k - m)  # rows the write-side transforms dropped
        elif m > k:
            gate.cancel_insert(k)  # more rows than the input's: wait until all of them fit
            gate.reserve_rows(m, n, deadline, timeout, a, done)
        if m:
            committed = False

            def commit(size: int, part: int = 0, m: int = m) -> None:
                nonlocal committed
                gate.commit_insert(m, size, m, part)
                committed = True

            try:
                parts.append(write(rows, commit))
            finally:
                if not committed:
                    gate.cancel_insert(m)
        a = b
    return done()


def make_gate(
    limiter: Any,
    *,
    owner: str,
    capacity: int,
    size: int | Sequence[int],
    batch_size: int | None,
    sources: Sequence[tuple[str, RateLimiter | None]] = (),
) -> RateGate | None:
    """The gate of a buffer built with ``rate_limiter=limiter`` (``None`` without one).

    Args:
        owner: the buffer's class name, for messages.
        capacity: online rows the buffer can hold (0: it takes no inserts).
        size: online rows it holds now.
        batch_size: its default batch size, checked against the band.
        sources: a mixing buffer's sources' own limiters ``(name, limiter or None)``:
            none may have one (the mixing buffer draws their rows past it).
    """
    for name, own in sources:
        if own is not None:
            raise ValueError(
                f"source {name!r} has a rate_limiter of its own ({own!r}), which the "
                f"{owner} would draw past; give the rate limiter to the {owner} instead "
                f"({owner}(..., rate_limiter=...))"
            )
    if limiter is None:
        return None
    if not isinstance(limiter, RateLimiter) or type(limiter).config is RateLimiter.config:
        # the base class (or a subclass without config()) would fail at the first checkpoint
        extra = (
            " (a RateLimiter without config(), which every checkpoint saves: use one of those, "
            "or a subclass that implements config())"
            if isinstance(limiter, RateLimiter)
            else ""
        )
        raise TypeError(
            f"rate_limiter must be a mixreplay.MinSize or mixreplay.SampleToInsertRatio, got "
            f"{describe(limiter)}{extra}; e.g. rate_limiter=SampleToInsertRatio("
            "samples_per_insert=4 * 256, min_size_to_sample=1000, error_buffer=4 * 256)"
        )
    if capacity <= 0:
        raise ValueError(
            f"rate_limiter={limiter!r} on a {owner} that takes no inserts (no writable "
            "storage): a rate limiter counts online rows written, so it would never let a "
            "sample through; give it to the buffer the collectors extend"
        )
    if limiter.min_size_to_sample > capacity:
        raise ValueError(
            f"rate_limiter={limiter!r}: min_size_to_sample={limiter.min_size_to_sample} is more "
            f"than the {capacity} online rows this {owner} can hold, so sampling would wait "
            f"for good; use min_size_to_sample <= {capacity}"
        )
    gate = RateGate(limiter, size=size)
    if batch_size is not None:
        limiter.check_batch(batch_size)
        gate._batch_max = batch_size
    return gate


def _total(size: int | Sequence[int]) -> int:
    return size if isinstance(size, int) else sum(size)
