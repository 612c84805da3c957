"""Schedules: the offline fraction as a pure function of the training step.

A schedule maps a step (an int ``>= 0``) to a share in ``[0, 1]``. It holds no
state beyond its constructor arguments, so evaluating it twice at the same step
gives the same value, and a checkpoint stores it as a small JSON dict::

    Schedule               the base class: __call__, to_config, from_config
    ├── Constant           one value
    ├── Linear             straight line from start to end, then flat
    ├── Cosine             half a cosine from start to end, then flat
    ├── Exponential        geometric from start to end, then flat
    ├── Piecewise          linear between knots, flat outside
    ├── Anneal             the reference's anneal: start * max(0, 1 - step / total_steps)
    ├── Proportional       a source's share of all rows (needs the source sizes)
    ├── CallableSchedule   any plain function of the step (not storable)
    └── ReturnGated        lowered as the agent's reported returns pass given levels (experimental)

Schedules that depend on how many rows each source holds set the class
attribute ``needs_sizes = True``; the mixing buffers then call
``schedule(step, sizes={name: rows, ...})``. Every other schedule ignores
``sizes``.

Your own schedule: subclass :class:`Schedule`, implement :meth:`Schedule.value`
and :meth:`Schedule.params`; the subclass registers itself under its class name
(or ``config_name``) so :meth:`Schedule.from_config` can rebuild it.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from mixreplay._validate import check_int, check_real

__all__ = [
    "Anneal",
    "CallableSchedule",
    "Constant",
    "Cosine",
    "Exponential",
    "Linear",
    "Piecewise",
    "Proportional",
    "ReturnGated",
    "Schedule",
    "as_schedule",
]


# -- validation helpers ----------------------------------------------------------------------


def _unit_value(value: Any, name: str) -> float:
    """A finite float in ``[0, 1]`` (NumPy and 0-dim torch scalars accepted)."""
    return check_real(value, name, min=0.0, max=1.0, what="a number in [0, 1]")


def check_step(value: Any) -> int | float:
    """A step: a number ``>= 0`` (an int usually; floats like ``1e6`` and NumPy/torch scalars too)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"step must be a number >= 0, got {value}")
        return value
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"step must be a number >= 0, got {type(value).__name__} {value!r}")
    try:
        index = operator.index(value)  # NumPy integers, integer tensors
    except TypeError:
        pass
    else:
        if index < 0:
            raise ValueError(f"step must be a number >= 0, got {index}")
        return index
    try:
        out = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"step must be a number >= 0, got {type(value).__name__} {value!r}"
        ) from None
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"step must be a finite number >= 0, got {out!r}")
    return int(out) if out.is_integer() else out


def _count(value: Any, name: str) -> int:
    """An int ``>= 0`` (NumPy and torch integers accepted)."""
    return check_int(value, name, min=0, what="an int >= 0")


def _clamp(x: float, a: float, b: float) -> float:
    lo, hi = (a, b) if a <= b else (b, a)
    return lo if x < lo else hi if x > hi else x


# -- the base class --------------------------------------------------------------------------


class Schedule:
    """A share in ``[0, 1]`` as a pure function of the step.

    Call it: ``schedule(step)``, or ``schedule(step, sizes=...)`` for schedules
    with ``needs_sizes = True``. Instances are immutable, picklable, comparable
    (``==`` compares type and parameters) and hashable.

    Subclasses implement :meth:`value` and :meth:`params`; the base class checks
    the step and the result, and provides ``repr``, equality and the config
    round trip.
    """

    #: True when the value depends on the row count of each source.
    needs_sizes: ClassVar[bool] = False
    #: Whether a checkpoint can store it (by :meth:`to_config`); a plain function cannot.
    storable: ClassVar[bool] = True
    #: The name stored under ``"type"`` by :meth:`to_config` (the class name by default).
    config_name: ClassVar[str]

    _registry: ClassVar[dict[str, type[Schedule]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("config_name", cls.__name__)
        cls.config_name = name
        if name.startswith("_"):  # private helpers are not storable schedules
            return
        known = Schedule._registry.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise TypeError(
                f"a schedule named {name!r} is already registered ({known.__module__}.{known.__qualname__}); "
                f"give {cls.__module__}.{cls.__qualname__} a distinct class attribute config_name"
            )
        Schedule._registry[name] = cls

    def __call__(self, step: int | float, sizes: Mapping[str, int] | None = None) -> float:
        """The value at ``step`` (a number ``>= 0``, usually an int), a float in ``[0, 1]``."""
        if type(step) is not int or step < 0:
            step = check_step(step)
        v = self.value(step, sizes)
        if not 0.0 <= v <= 1.0:  # also rejects NaN
            raise ValueError(
                f"{self!r} returned {v!r} at step {step}; a schedule's values must lie in [0, 1]"
            )
        return v

    def value(self, step: int | float, sizes: Mapping[str, int] | None = None) -> float:
        """The value at a validated ``step``; implemented by subclasses."""
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """Constructor arguments, JSON-able; implemented by subclasses."""
        raise NotImplementedError

    # -- config round trip ---------------------------------------------------------------

    def to_config(self) -> dict[str, Any]:
        """A JSON-able dict ``{"type": name, **params}`` that :meth:`from_config` rebuilds."""
        return {"type": self.config_name, **self.params()}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Schedule:
        """Rebuild a schedule from :meth:`to_config`'s dict (no pickle, no imports).

        Raises:
            ValueError: the ``"type"`` is missing or names no registered schedule.
        """
        if not isinstance(config, Mapping) or "type" not in config:
            raise ValueError(
                f"a schedule config is a dict with a 'type' key, e.g. "
                f"{{'type': 'Linear', 'start': 0.5, 'end': 0.0, 'steps': 1000}}; got {config!r}"
            )
        args = dict(config)
        name = args.pop("type")
        target = Schedule._registry.get(name)
        if target is None:
            raise ValueError(
                f"unknown schedule type {name!r}; registered types are {sorted(Schedule._registry)}"
            )
        if not issubclass(target, cls):
            raise ValueError(f"config type {name!r} is not a {cls.__name__}")
        try:
            return target(**args)
        except TypeError as err:
            raise ValueError(f"cannot build {name} from config {dict(config)!r}: {err}") from err

    # -- value semantics -----------------------------------------------------------------

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        return self.params() == other.params()

    def __hash__(self) -> int:
        return hash((type(self), repr(self)))


# -- schedules of the step -------------------------------------------------------------------


class Constant(Schedule):
    """The same value at every step.

    Args:
        value: the share, in ``[0, 1]``.

    Examples:
        >>> from mixreplay.schedules import Constant
        >>> Constant(0.5)(10_000)
        0.5
    """

    def __init__(self, value: float):
        self._value = _unit_value(value, "Constant value")

    def value(self, step, sizes=None) -> float:
        return self._value

    def params(self) -> dict[str, Any]:
        return {"value": self._value}


class _Ramp(Schedule):
    """From ``start`` at step 0 to ``end`` at step ``steps``, then ``end`` for ever."""

    def __init__(self, start: float, end: float, steps: int):
        kind = type(self).__name__
        self._start = _unit_value(start, f"{kind} start")
        self._end = _unit_value(end, f"{kind} end")
        self._steps = _count(steps, f"{kind} steps")

    def value(self, step, sizes=None) -> float:
        if step >= self._steps:
            return self._end
        # start + (end - start) * w is monotone in w under rounding; the clamp
        # keeps the last ulp inside [start, end].
        a, b = self._start, self._end
        return _clamp(a + (b - a) * self._weight(step / self._steps), a, b)

    def _weight(self, t: float) -> float:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        return {"start": self._start, "end": self._end, "steps": self._steps}


class Linear(_Ramp):
    """A straight line from ``start`` (step 0) to ``end`` (step ``steps``), then ``end``.

    Args:
        start: value at step 0, in ``[0, 1]``.
        end: value from step ``steps`` on, in ``[0, 1]``.
        steps: length of the ramp, an int ``>= 0`` (0: ``end`` from the start).

    Examples:
        >>> from mixreplay.schedules import Linear
        >>> s = Linear(0.5, 0.0, steps=100)
        >>> s(0), s(50), s(100), s(1_000)
        (0.5, 0.25, 0.0, 0.0)
    """

    def _weight(self, t: float) -> float:
        return t


class Cosine(_Ramp):
    """Half a cosine from ``start`` (step 0) to ``end`` (step ``steps``), then ``end``.

    ``start + (end - start) * (1 - cos(pi * step / steps)) / 2``: flat at both ends,
    steepest in the middle.

    Args:
        start: value at step 0, in ``[0, 1]``.
        end: value from step ``steps`` on, in ``[0, 1]``.
        steps: length of the ramp, an int ``>= 0``.

    Examples:
        >>> from mixreplay.schedules import Cosine
        >>> s = Cosine(1.0, 0.0, steps=100)
        >>> s(0), round(s(50), 6), s(100)
        (1.0, 0.5, 0.0)
    """

    def _weight(self, t: float) -> float:
        return 0.5 * (1.0 - math.cos(math.pi * t))


class Exponential(Schedule):
    """Geometric interpolation ``start * (end / start) ** (step / steps)``, then ``end``.

    Equal numbers of steps multiply the value by equal factors: from 0.5 to
    0.005 in 100 steps it is 0.05 at step 50, then 0.005 for ever.

    A geometric path never reaches 0, so an endpoint of exactly 0 is handled
    with a ``floor``: the path runs geometrically between the nonzero endpoint
    and ``floor`` (or the nonzero endpoint, if smaller), and the 0 itself is
    taken exactly at its own step. Decaying to 0 thus goes ``start`` ... ``floor``
    over ``[0, steps)`` and is exactly 0 from ``steps`` on; rising from 0 is
    exactly 0 at step 0 and then goes ``floor`` ... ``end``. Both stay monotone.

    Args:
        start: value at step 0, in ``[0, 1]``.
        end: value from step ``steps`` on, in ``[0, 1]``.
        steps: length of the ramp, an int ``>= 0``.

    Keyword Args:
        floor: stands in for an endpoint of 0 on the geometric path, in ``(0, 1]``.

    Examples:
        >>> from mixreplay.schedules import Exponential
        >>> s = Exponential(0.5, 0.005, steps=100)
        >>> s(0), round(s(50), 6), s(100)
        (0.5, 0.05, 0.005)
        >>> z = Exponential(0.5, 0.0, steps=100, floor=0.005)
        >>> round(z(50), 6), round(z(99), 6), z(100)
        (0.05, 0.005236, 0.0)
    """

    def __init__(self, start: float, end: float, steps: int, *, floor: float = 1e-3):
        self._start = _unit_value(start, "Exponential start")
        self._end = _unit_value(end, "Exponential end")
        self._steps = _count(steps, "Exponential steps")
        floor_ = _unit_value(floor, "Exponential floor")
        if floor_ == 0.0:
            raise ValueError(f"Exponential floor must be a finite number in (0, 1], got {floor!r}")
        self._floor = floor_
        top = max(self._start, self._end)
        # the geometric path's endpoints: zeros replaced by min(floor, the other endpoint)
        stand_in = min(floor_, top)
        self._a = self._start or stand_in
        self._b = self._end or stand_in
        self._log_ratio = math.log(self._b / self._a) if self._a > 0 else 0.0

    def value(self, step, sizes=None) -> float:
        if step >= self._steps:
            return self._end
        if step == 0:
            return self._start
        a, b = self._a, self._b
        return _clamp(a * math.exp(self._log_ratio * (step / self._steps)), a, b)

    def params(self) -> dict[str, Any]:
        return {"start": self._start, "end": self._end, "steps": self._steps, "floor": self._floor}


class Piecewise(Schedule):
    """Linear between knots ``(step, value)``; flat before the first and after the last.

    Every knot is hit exactly: ``Piecewise([(0, 1.0), (100, 0.5)])(100) == 0.5``.

    Args:
        knots: ``(step, value)`` pairs, steps strictly increasing ints ``>= 0``,
            values in ``[0, 1]``; at least one.

    Examples:
        >>> from mixreplay.schedules import Piecewise
        >>> s = Piecewise([(0, 1.0), (100, 0.5), (300, 0.1)])
        >>> s(0), s(50), s(100), s(200), s(10_000)
        (1.0, 0.75, 0.5, 0.3, 0.1)
    """

    def __init__(self, knots: Sequence[Sequence[float]]):
        if isinstance(knots, (str, bytes)) or not isinstance(knots, Sequence):
            raise TypeError(
                f"Piecewise knots must be a list of (step, value) pairs, got {type(knots).__name__} {knots!r}"
            )
        if len(knots) == 0:
            raise ValueError("Piecewise needs at least one (step, value) knot, got []")
        steps: list[int] = []
        values: list[float] = []
        for i, knot in enumerate(knots):
            if isinstance(knot, (str, bytes)) or not isinstance(knot, Sequence) or len(knot) != 2:
                raise ValueError(f"Piecewise knot {i} must be a (step, value) pair, got {knot!r}")
            s = _count(knot[0], f"Piecewise knot {i} step")
            v = _unit_value(knot[1], f"Piecewise knot {i} value")
            if steps and s <= steps[-1]:
                raise ValueError(
                    f"Piecewise knot steps must be strictly increasing, got step {s} after "
                    f"{steps[-1]} (knots {[tuple(k) for k in knots]!r})"
                )
            steps.append(s)
            values.append(v)
        self._steps = tuple(steps)
        self._values = tuple(values)

    @property
    def knots(self) -> tuple[tuple[int, float], ...]:
        return tuple(zip(self._steps, self._values, strict=True))

    def value(self, step, sizes=None) -> float:
        xs, ys = self._steps, self._values
        i = bisect.bisect_right(xs, step)  # xs[i-1] <= step < xs[i]
        if i == 0:
            return ys[0]
        if i == len(xs) or xs[i - 1] == step:
            return ys[i - 1]
        a, b = ys[i - 1], ys[i]
        t = (step - xs[i - 1]) / (xs[i] - xs[i - 1])
        return _clamp(a + (b - a) * t, a, b)

    def params(self) -> dict[str, Any]:
        return {"knots": [[s, v] for s, v in zip(self._steps, self._values, strict=True)]}


class Anneal(Schedule):
    """The reference's anneal: ``start * max(0, 1 - step / total_steps)``.

    What :meth:`OfflineToOnlineReplayBuffer.anneal(step, total_steps)
    <mixreplay.OfflineToOnlineReplayBuffer.anneal>` installs, computed exactly as
    TorchRL computes it.

    Args:
        start: value at step 0, in ``[0, 1]``.
        total_steps: the step where the value reaches 0, a number ``> 0``.

    Examples:
        >>> from mixreplay.schedules import Anneal
        >>> a = Anneal(0.5, total_steps=1e6)
        >>> a(0), a(250_000), a(2_000_000)
        (0.5, 0.375, 0.0)
    """

    def __init__(self, start: float, total_steps: float):
        self._start = _unit_value(start, "Anneal start")
        if isinstance(total_steps, (bool, str, bytes)):
            raise TypeError(
                f"total_steps must be a number > 0, got {type(total_steps).__name__} {total_steps!r}"
            )
        try:
            total = float(total_steps)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"total_steps must be a number > 0, got {type(total_steps).__name__} {total_steps!r}"
            ) from None
        if not math.isfinite(total) or total <= 0:
            raise ValueError(
                f"total_steps must be a finite number > 0 (the step where the fraction reaches 0), "
                f"got {total_steps!r}"
            )
        self._total = int(total) if total.is_integer() else total

    def value(self, step, sizes=None) -> float:
        return self._start * max(0.0, 1.0 - step / self._total)

    def params(self) -> dict[str, Any]:
        return {"start": self._start, "total_steps": self._total}


# -- schedules of the data -------------------------------------------------------------------


class Proportional(Schedule):
    """A source's share of all rows: ``sizes[source] / sum(sizes.values())``.

    With ``source="offline"`` in the two-source buffer this is Cal-QL's
    ``mixing_ratio < 0``: each row, offline or online, is equally likely to be
    drawn. In a :class:`~mixreplay.MixtureReplayBuffer`, give every source
    ``Proportional(name)`` to sample all rows uniformly. When every source is
    empty, each gets an equal share ``1 / len(sizes)``. The step is ignored.

    Args:
        source: the name of the source whose share this is.

    Examples:
        >>> from mixreplay.schedules import Proportional
        >>> Proportional()(0, sizes={"offline": 300, "online": 100})
        0.75
        >>> Proportional("b")(0, sizes={"a": 1, "b": 2, "c": 1})
        0.5
    """

    needs_sizes: ClassVar[bool] = True

    def __init__(self, source: str = "offline"):
        if not isinstance(source, str):
            raise TypeError(
                f"Proportional source must be a source name (str), got {type(source).__name__} {source!r}"
            )
        self._source = source

    def value(self, step, sizes=None) -> float:
        if sizes is None:
            raise ValueError(
                "Proportional needs the row count of every source: call "
                f"schedule(step, sizes={{'{self._source}': n, ...}}) (the mixing buffers do)"
            )
        if self._source not in sizes:
            raise ValueError(
                f"Proportional source {self._source!r} is not among the sizes given, "
                f"which name {sorted(sizes)}; pass Proportional(source=...) with one of them"
            )
        total = 0
        for name, n in sizes.items():
            if isinstance(n, bool) or not isinstance(n, int):
                n = _count(n, f"sizes[{name!r}]")
            if n < 0:
                raise ValueError(f"sizes[{name!r}] must be an int >= 0, got {n}")
            total += n
        if total == 0:
            return 1.0 / len(sizes)
        return operator.index(sizes[self._source]) / total

    def params(self) -> dict[str, Any]:
        return {"source": self._source}


# -- plain callables -------------------------------------------------------------------------


class CallableSchedule(Schedule):
    """Wraps a plain function ``fn(step) -> float``; its values are checked to lie in ``[0, 1]``.

    It pickles when ``fn`` does (a module-level function, not a lambda), but it
    has no config: :meth:`to_config` raises, since rebuilding it would mean
    importing code named in a file. Subclass :class:`Schedule` for a schedule a
    checkpoint can store.

    Args:
        fn: a function of the step.

    Examples:
        >>> from mixreplay.schedules import CallableSchedule
        >>> CallableSchedule(lambda step: 0.5 if step < 10 else 0.25)(20)
        0.25
    """

    #: a function is code, which a checkpoint does not store: a buffer saves its repr only
    storable: ClassVar[bool] = False

    def __init__(self, fn: Callable[[int], float]):
        if not callable(fn):
            raise TypeError(f"CallableSchedule needs a callable, got {type(fn).__name__} {fn!r}")
        self._fn = fn

    @property
    def fn(self) -> Callable[[int], float]:
        return self._fn

    def value(self, step, sizes=None) -> float:
        v = self._fn(step)
        try:
            return float(v)
        except (TypeError, ValueError):
            raise TypeError(
                f"schedule function {self._fn!r} returned {type(v).__name__} {v!r} at step {step}; "
                "it must return a float in [0, 1]"
            ) from None

    def params(self) -> dict[str, Any]:
        return {"fn": self._fn}

    def to_config(self) -> dict[str, Any]:
        raise TypeError(
            f"a plain function ({self._fn!r}) cannot be stored as a config; use a built-in "
            "schedule (Linear, Piecewise, ...) or subclass mixreplay.schedules.Schedule"
        )

    def __repr__(self) -> str:
        name = getattr(self._fn, "__qualname__", None) or repr(self._fn)
        return f"CallableSchedule({name})"

    def __hash__(self) -> int:
        return hash((CallableSchedule, self._fn))


def as_schedule(x: float | Schedule | Callable[[int], float]) -> Schedule:
    """A :class:`Schedule` from a number, a schedule or a function of the step.

    Args:
        x: a number in ``[0, 1]`` (becomes :class:`Constant`), a :class:`Schedule`
            (returned as is) or a callable ``fn(step) -> float``
            (wrapped in :class:`CallableSchedule`).

    Examples:
        >>> from mixreplay.schedules import as_schedule
        >>> as_schedule(0.25)
        Constant(value=0.25)
    """
    if isinstance(x, Schedule):
        return x
    if isinstance(x, bool):
        raise TypeError(
            f"expected a fraction in [0, 1], a Schedule or a function of the step, got bool {x!r}"
        )
    if isinstance(x, (int, float)):
        return Constant(x)
    if callable(x):
        return CallableSchedule(x)
    raise TypeError(
        f"expected a fraction in [0, 1], a Schedule or a function of the step, got {type(x).__name__} {x!r}"
    )


# -- schedules of the agent's progress -------------------------------------------------------


class ReturnGated(Schedule):
    """The offline share, lowered as the agent's returns pass the dataset's.

    Experimental: the HalfCheetah benchmark (``docs/offline-data-helps.md``) has not shown
    that it closes the weak-data gap (its condition: better than both 50/50 and online-only
    at 20,000 steps on weak data over at least 3 seeds, keeping the good-data gain); the
    page gives the runs measured so far. Its parameters and checkpointed state are stable.

    ``start`` while the agent's best smoothed return is at most ``low``, ``end`` from
    the moment it reaches ``high``, linear in between. The training loop reports the
    agent's returns with :meth:`observe`; the smoothed return is the mean of the last
    ``window`` reports, and the schedule keeps the best one seen, so the value only
    ever moves from ``start`` towards ``end``: a bad report later does not bring the
    offline data back. The step is ignored.

    Set ``low`` and ``high`` from the dataset's mean episode return ``R``
    (``mixreplay inspect`` prints it), and report returns that compare with it: the
    evaluation returns of the deterministic policy, since training episodes carry the
    exploration noise (on HalfCheetah, SAC's training returns ran at a third of its
    evaluation returns or less). With ``low = 0.5 * R`` and ``high = R``, data better than
    the agent keeps its share while it is better, and data the agent has caught up with
    stops taking half of every batch (``docs/offline-data-helps.md`` measures it).

    The observed state (``best`` and the ``recent`` returns) is part of the schedule's
    parameters: :meth:`to_config`, ``pickle`` and a buffer's checkpoint carry it, and a
    buffer restored from a checkpoint holds the restored schedule, so take it back
    from ``rb.schedule`` before observing again. A mixing buffer reads the new value
    at its next :meth:`~mixreplay.OfflineToOnlineReplayBuffer.set_step` to a new step.
    Being mutable, it is not hashable.

    Args:
        start: the value before the agent reaches ``low``, in ``[0, 1]``.
        end: the value once it reaches ``high``, in ``[0, 1]``.
        low: the return where the value starts to move, a finite number.
        high: the return where it arrives at ``end``, a finite number ``> low``.

    Keyword Args:
        window: episodes averaged into one smoothed return, an int ``>= 1``; nothing
            moves before that many reports.
        best: the best smoothed return so far (``None``: none yet); a checkpoint's value.
        recent: the last ``window`` reports at most, oldest first; a checkpoint's value.

    Examples:
        >>> from mixreplay.schedules import ReturnGated
        >>> gate = ReturnGated(0.5, 0.0, low=400.0, high=800.0, window=2)
        >>> gate(0)
        0.5
        >>> gate.observe(500.0); gate(1_000)   # one report: not a full window yet
        0.5
        >>> gate.observe(700.0); gate(2_000)   # mean 600: halfway from low to high
        0.25
        >>> gate.observe(100.0); gate(3_000)   # worse episodes never raise it again
        0.25
        >>> ReturnGated.from_config(gate.to_config()) == gate
        True
    """

    __hash__ = None  # type: ignore[assignment]  # equal values change with observe()

    def __init__(
        self,
        start: float,
        end: float,
        low: float,
        high: float,
        *,
        window: int = 1,
        best: float | None = None,
        recent: Sequence[float] = (),
    ):
        self._start = _unit_value(start, "ReturnGated start")
        self._end = _unit_value(end, "ReturnGated end")
        self._low = check_real(low, "ReturnGated low", what="a finite return")
        self._high = check_real(high, "ReturnGated high", what="a finite return")
        if not self._high > self._low:
            raise ValueError(
                f"ReturnGated high must be greater than low, got low={self._low!r}, "
                f"high={self._high!r}: the value moves from start to end between the two"
            )
        self._window = check_int(window, "ReturnGated window", min=1, what="an int >= 1")
        self._best = None if best is None else check_real(best, "ReturnGated best")
        if isinstance(recent, (str, bytes)) or not isinstance(recent, Sequence):
            raise TypeError(
                f"ReturnGated recent must be a list of returns, got {type(recent).__name__} {recent!r}"
            )
        if len(recent) > self._window:
            raise ValueError(
                f"ReturnGated recent holds at most window={self._window} returns, got {len(recent)}"
            )
        self._recent = [check_real(r, f"ReturnGated recent[{i}]") for i, r in enumerate(recent)]

    @property
    def best(self) -> float | None:
        """The best smoothed return reported so far (``None`` before a full window)."""
        return self._best

    def observe(self, episode_return: float) -> None:
        """Report one finished episode's return; a full window may raise :attr:`best`."""
        value = check_real(
            episode_return, "ReturnGated.observe episode_return", what="a finite return"
        )
        self._recent = [*self._recent, value][-self._window :]
        if len(self._recent) == self._window:
            smoothed = math.fsum(self._recent) / self._window
            if self._best is None or smoothed > self._best:
                self._best = smoothed

    def value(self, step, sizes=None) -> float:
        if self._best is None:
            return self._start
        t = _clamp((self._best - self._low) / (self._high - self._low), 0.0, 1.0)
        a, b = self._start, self._end
        return _clamp(a + (b - a) * t, a, b)

    def params(self) -> dict[str, Any]:
        return {
            "start": self._start,
            "end": self._end,
            "low": self._low,
            "high": self._high,
            "window": self._window,
            "best": self._best,
            "recent": list(self._recent),
        }
