import itertools
import json
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay.schedules import (
    CallableSchedule,
    Constant,
    Cosine,
    Exponential,
    Linear,
    Piecewise,
    Proportional,
    Schedule,
    as_schedule,
)

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
step = st.integers(min_value=0, max_value=10**9)
ramp_steps = st.integers(min_value=0, max_value=10**6)
floor = st.floats(min_value=1e-9, max_value=1.0)


@st.composite
def knot_lists(draw):
    xs = draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=8, unique=True))
    return [(x, draw(unit)) for x in sorted(xs)]


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(["constant", "linear", "cosine", "exponential", "piecewise"]))
    if kind == "constant":
        return Constant(draw(unit))
    if kind == "piecewise":
        return Piecewise(draw(knot_lists()))
    a, b, n = draw(unit), draw(unit), draw(ramp_steps)
    if kind == "exponential":
        return Exponential(a, b, n, floor=draw(floor))
    return {"linear": Linear, "cosine": Cosine}[kind](a, b, n)


# -- invariants --------------------------------------------------------------------------------


@given(s=schedules(), t=step)
def test_values_lie_in_unit_interval(s, t):
    v = s(t)
    assert isinstance(v, float)
    assert 0.0 <= v <= 1.0


@given(s=schedules(), t=step)
def test_schedules_are_pure(s, t):
    assert s(t) == s(t) == pickle.loads(pickle.dumps(s))(t)


@given(
    kind=st.sampled_from([Linear, Cosine, Exponential]),
    a=unit,
    b=unit,
    n=ramp_steps,
    ts=st.lists(step, min_size=2, max_size=20),
)
def test_ramps_are_monotone_between_start_and_end(kind, a, b, n, ts):
    s = kind(a, b, n)
    values = [s(t) for t in sorted(ts)]
    lo, hi = min(a, b), max(a, b)
    assert all(lo <= v <= hi for v in values)
    pairs = list(itertools.pairwise(values))
    if a <= b:
        assert all(x <= y for x, y in pairs)
    else:
        assert all(x >= y for x, y in pairs)


@given(
    kind=st.sampled_from([Linear, Cosine, Exponential]),
    a=unit,
    b=unit,
    n=ramp_steps,
    extra=st.integers(0, 10**6),
)
def test_ramps_start_and_end_exactly(kind, a, b, n, extra):
    s = kind(a, b, n)
    assert s(n + extra) == b
    if n > 0:
        assert s(0) == a


@given(knots=knot_lists(), before=st.integers(0, 10**6), after=st.integers(0, 10**6))
def test_piecewise_hits_knots_and_is_flat_outside(knots, before, after):
    s = Piecewise(knots)
    for x, y in knots:
        assert s(x) == y
    assert s(knots[-1][0] + after) == knots[-1][1]
    assert s(max(0, knots[0][0] - before)) == knots[0][1]


@given(knots=knot_lists(), t=step)
def test_piecewise_lies_between_neighbouring_knots(knots, t):
    s = Piecewise(knots)
    xs = [x for x, _ in knots]
    v = s(t)
    inside = [i for i in range(len(xs) - 1) if xs[i] <= t <= xs[i + 1]]
    for i in inside:
        lo, hi = sorted((knots[i][1], knots[i + 1][1]))
        assert lo <= v <= hi


def test_known_values():
    assert Linear(0.5, 0.0, 100)(50) == 0.25
    assert Linear(0.2, 0.8, 0)(0) == 0.8  # a ramp of length 0 is its end
    assert Cosine(0.0, 1.0, 100)(50) == pytest.approx(0.5)
    assert Cosine(0.0, 1.0, 100)(25) == pytest.approx(0.5 * (1 - math.cos(math.pi / 4)))
    assert Exponential(0.5, 0.005, 100)(50) == pytest.approx(0.05)
    assert Piecewise([(10, 0.2), (20, 0.4)])(15) == pytest.approx(0.3)
    assert Piecewise([(10, 0.2)])(0) == Piecewise([(10, 0.2)])(99) == 0.2


# -- Exponential with an endpoint of 0 ---------------------------------------------------------


def test_exponential_decays_to_floor_then_exactly_zero():
    s = Exponential(0.5, 0.0, 100, floor=0.005)
    assert s(0) == 0.5
    assert s(50) == pytest.approx(0.05)
    assert s(99) == pytest.approx(0.5 * 0.01**0.99)
    assert s(100) == s(10**6) == 0.0


def test_exponential_rises_from_exactly_zero():
    s = Exponential(0.0, 0.5, 100, floor=0.005)
    assert s(0) == 0.0
    assert s(1) == pytest.approx(0.005 * 100**0.01)
    assert s(50) == pytest.approx(0.05)
    assert s(100) == 0.5


def test_exponential_floor_never_overshoots_the_nonzero_endpoint():
    s = Exponential(1e-5, 0.0, 10, floor=1e-3)  # floor above start: the path stays flat
    assert [s(t) for t in range(10)] == [1e-5] * 10
    assert s(10) == 0.0
    assert Exponential(0.0, 0.0, 10)(5) == 0.0


# -- Proportional ------------------------------------------------------------------------------


def test_proportional_is_the_offline_share():
    p = Proportional()
    assert p.needs_sizes and not Linear(0, 1, 1).needs_sizes
    assert p(0, sizes={"offline": 1000, "online": 0}) == 1.0
    assert p(7, sizes={"offline": 1000, "online": 3000}) == 0.25


@given(sizes=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 10**9), min_size=1))
def test_proportional_shares_sum_to_one_over_n_sources(sizes):
    shares = [Proportional(name)(0, sizes=sizes) for name in sizes]
    assert all(0.0 <= v <= 1.0 for v in shares)
    assert math.fsum(shares) == pytest.approx(1.0)


def test_proportional_splits_equally_when_everything_is_empty():
    assert Proportional("a")(0, sizes={"a": 0, "b": 0, "c": 0}) == pytest.approx(1 / 3)


def test_proportional_accepts_numpy_and_torch_counts():
    assert Proportional()(0, sizes={"offline": np.int64(1), "online": torch.tensor(3)}) == 0.25


def test_proportional_errors():
    with pytest.raises(ValueError, match=r"needs the row count of every source"):
        Proportional()(0)
    with pytest.raises(
        ValueError, match=r"source 'offline' is not among the sizes given, which name \['a', 'b'\]"
    ):
        Proportional()(0, sizes={"a": 1, "b": 2})
    with pytest.raises(ValueError, match=r"sizes\['online'\] must be an int >= 0, got -1"):
        Proportional()(0, sizes={"offline": 1, "online": -1})
    with pytest.raises(TypeError, match=r"sizes\['online'\] must be an int >= 0, got float 1.5"):
        Proportional()(0, sizes={"offline": 1, "online": 1.5})
    with pytest.raises(TypeError, match=r"source must be a source name \(str\), got int 3"):
        Proportional(3)


# -- config, pickle, equality ------------------------------------------------------------------


@given(s=st.one_of(schedules(), st.sampled_from([Proportional(), Proportional("b")])))
def test_config_round_trip_through_json(s):
    config = json.loads(json.dumps(s.to_config()))
    back = Schedule.from_config(config)
    assert back == s and hash(back) == hash(s) and repr(back) == repr(s)
    assert type(back) is type(s)


@given(s=schedules())
def test_pickle_round_trip(s):
    back = pickle.loads(pickle.dumps(s))
    assert back == s and repr(back) == repr(s)


def test_repr_and_config_shape():
    assert repr(Linear(0.5, 0.0, 100)) == "Linear(start=0.5, end=0.0, steps=100)"
    assert Piecewise([(0, 1.0), (10, 0)]).to_config() == {
        "type": "Piecewise",
        "knots": [[0, 1.0], [10, 0.0]],
    }
    assert Exponential(0.5, 0, 10).to_config() == {
        "type": "Exponential",
        "start": 0.5,
        "end": 0.0,
        "steps": 10,
        "floor": 1e-3,
    }
    assert Linear(0.5, 0.0, 100) != Cosine(0.5, 0.0, 100)
    assert Linear(0.5, 0.0, 100) != 0.5
    assert len({Constant(0.5), Constant(0.5), Constant(0.25)}) == 2


def test_from_config_errors():
    with pytest.raises(
        ValueError, match=r"unknown schedule type 'Sigmoid'; registered types are \[.*'Linear'"
    ):
        Schedule.from_config({"type": "Sigmoid"})
    with pytest.raises(ValueError, match=r"a schedule config is a dict with a 'type' key"):
        Schedule.from_config({"start": 0.5})
    with pytest.raises(ValueError, match=r"cannot build Linear from config .*'stop'"):
        Schedule.from_config({"type": "Linear", "start": 0.5, "stop": 0.0})
    with pytest.raises(ValueError, match=r"config type 'Constant' is not a Linear"):
        Linear.from_config({"type": "Constant", "value": 0.5})
    with pytest.raises(
        ValueError, match=r"Linear end must be a finite number in \[0, 1\], got 2.0"
    ):
        Schedule.from_config({"type": "Linear", "start": 0.5, "end": 2.0, "steps": 10})


class Halves(Schedule):
    """A user schedule: 1, 0.5, 0.25, ... every ``period`` steps."""

    def __init__(self, period: int):
        self.period = period

    def value(self, step, sizes=None):
        return 0.5 ** (step // self.period)

    def params(self):
        return {"period": self.period}


def test_user_subclasses_register_and_round_trip():
    s = Halves(10)
    assert s(25) == 0.25
    assert Schedule.from_config(json.loads(json.dumps(s.to_config()))) == s
    assert pickle.loads(pickle.dumps(s)) == s


def test_user_subclass_name_clash_is_refused():
    with pytest.raises(TypeError, match=r"a schedule named 'Linear' is already registered"):

        class Linear(Schedule):  # noqa: F811 - the clash is the point
            pass

    class Renamed(Schedule):
        config_name = "test_schedules.Linear"

    assert Schedule.from_config({"type": "test_schedules.Linear"}).__class__ is Renamed


def test_user_subclass_with_values_outside_the_range_is_caught():
    class Broken(Schedule):
        def value(self, step, sizes=None):
            return 1.5

        def params(self):
            return {}

    with pytest.raises(
        ValueError,
        match=r"Broken\(\) returned 1.5 at step 3; a schedule's values must lie in \[0, 1\]",
    ):
        Broken()(3)


# -- as_schedule and plain callables -----------------------------------------------------------


def half_until_100(step):
    return 0.5 if step < 100 else 0.1


def test_as_schedule():
    assert as_schedule(0.25) == Constant(0.25)
    assert as_schedule(1) == Constant(1.0)
    lin = Linear(0.5, 0.0, 10)
    assert as_schedule(lin) is lin
    wrapped = as_schedule(half_until_100)
    assert isinstance(wrapped, CallableSchedule) and wrapped.fn is half_until_100
    assert wrapped(0) == 0.5 and wrapped(100) == 0.1
    assert not wrapped.needs_sizes
    assert repr(wrapped) == "CallableSchedule(half_until_100)"
    assert pickle.loads(pickle.dumps(wrapped)) == wrapped
    assert wrapped == CallableSchedule(half_until_100)


def test_as_schedule_errors():
    with pytest.raises(TypeError, match=r"got bool True"):
        as_schedule(True)
    with pytest.raises(TypeError, match=r"a Schedule or a function of the step, got str 'linear'"):
        as_schedule("linear")
    with pytest.raises(
        ValueError, match=r"Constant value must be a finite number in \[0, 1\], got 1.5"
    ):
        as_schedule(1.5)


def test_callable_schedule_errors():
    with pytest.raises(TypeError, match=r"CallableSchedule needs a callable, got int 3"):
        CallableSchedule(3)
    with pytest.raises(
        ValueError, match=r"returned 2.0 at step 0; a schedule's values must lie in \[0, 1\]"
    ):
        CallableSchedule(lambda t: 2.0)(0)
    with pytest.raises(ValueError, match=r"returned nan at step 0"):
        CallableSchedule(lambda t: float("nan"))(0)
    with pytest.raises(
        TypeError, match=r"returned str 'x' at step 1; it must return a float in \[0, 1\]"
    ):
        CallableSchedule(lambda t: "x")(1)
    with pytest.raises(TypeError, match=r"cannot be stored as a config; use a built-in schedule"):
        CallableSchedule(half_until_100).to_config()


# -- parameter and step validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Constant(1.5), r"Constant value must be a finite number in \[0, 1\], got 1.5"),
        (lambda: Constant(-0.1), r"Constant value must be a finite number in \[0, 1\], got -0.1"),
        (
            lambda: Constant(float("nan")),
            r"Constant value must be a finite number in \[0, 1\], got nan",
        ),
        (
            lambda: Constant(float("inf")),
            r"Constant value must be a finite number in \[0, 1\], got inf",
        ),
        (
            lambda: Linear(-0.5, 0.0, 10),
            r"Linear start must be a finite number in \[0, 1\], got -0.5",
        ),
        (lambda: Linear(0.5, 2, 10), r"Linear end must be a finite number in \[0, 1\], got 2.0"),
        (lambda: Linear(0.5, 0.0, -1), r"Linear steps must be an int >= 0, got -1"),
        (
            lambda: Cosine(0.5, float("inf"), 10),
            r"Cosine end must be a finite number in \[0, 1\], got inf",
        ),
        (lambda: Cosine(0.5, 0.0, -3), r"Cosine steps must be an int >= 0, got -3"),
        (
            lambda: Exponential(1.1, 0.0, 10),
            r"Exponential start must be a finite number in \[0, 1\], got 1.1",
        ),
        (lambda: Exponential(0.5, 0.1, -10), r"Exponential steps must be an int >= 0, got -10"),
        (
            lambda: Exponential(0.5, 0.0, 10, floor=0.0),
            r"Exponential floor must be a finite number in \(0, 1\], got 0.0",
        ),
        (
            lambda: Exponential(0.5, 0.0, 10, floor=2.0),
            r"Exponential floor must be a finite number in \[0, 1\], got 2.0",
        ),
        (lambda: Piecewise([]), r"Piecewise needs at least one \(step, value\) knot, got \[\]"),
        (lambda: Piecewise([(0, 1.0), (0, 0.5)]), r"strictly increasing, got step 0 after 0"),
        (lambda: Piecewise([(10, 1.0), (5, 0.5)]), r"strictly increasing, got step 5 after 10"),
        (
            lambda: Piecewise([(0, 1.5)]),
            r"Piecewise knot 0 value must be a finite number in \[0, 1\], got 1.5",
        ),
        (lambda: Piecewise([(-1, 0.5)]), r"Piecewise knot 0 step must be an int >= 0, got -1"),
        (
            lambda: Piecewise([(0, 0.5, 1)]),
            r"Piecewise knot 0 must be a \(step, value\) pair, got \(0, 0.5, 1\)",
        ),
    ],
)
def test_invalid_parameters_raise_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Linear(0.5, 0.0, 10.0), r"Linear steps must be an int >= 0, got float 10.0"),
        (lambda: Linear(0.5, 0.0, True), r"Linear steps must be an int >= 0, got bool True"),
        (lambda: Constant("0.5"), r"Constant value must be a number in \[0, 1\], got str '0.5'"),
        (lambda: Constant(None), r"Constant value must be a number in \[0, 1\], got NoneType None"),
        (
            lambda: Piecewise(0.5),
            r"Piecewise knots must be a list of \(step, value\) pairs, got float 0.5",
        ),
        (
            lambda: Piecewise("ab"),
            r"Piecewise knots must be a list of \(step, value\) pairs, got str 'ab'",
        ),
    ],
)
def test_parameters_of_the_wrong_type_raise_type_error(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_numpy_and_torch_parameters_are_accepted():
    s = Linear(np.float32(0.5), torch.tensor(0.0), np.int64(10))
    assert s == Linear(0.5, 0.0, 10)
    assert json.dumps(s.to_config())
    assert s(np.int64(5)) == s(torch.tensor(5)) == 0.25


@pytest.mark.parametrize(
    "s", [Constant(0.5), Linear(0, 1, 10), Piecewise([(0, 0.5)]), Proportional()]
)
def test_bad_steps_raise(s):
    with pytest.raises(ValueError, match=r"step must be a number >= 0, got -1"):
        s(-1, sizes={"offline": 1})
    with pytest.raises(TypeError, match=r"step must be a number >= 0, got str '1'"):
        s("1", sizes={"offline": 1})
    with pytest.raises(ValueError, match=r"step must be a number >= 0, got -2"):
        s(np.int64(-2), sizes={"offline": 1})
    with pytest.raises(ValueError, match=r"step must be a finite number >= 0, got inf"):
        s(float("inf"), sizes={"offline": 1})


@pytest.mark.parametrize(
    "s", [Constant(0.5), Linear(0.5, 0.0, 10), Piecewise([(0, 0.5), (10, 0.0)])]
)
def test_real_steps_are_accepted(s):
    """Steps such as 1e6, NumPy integers and 0-dim tensors, as TorchRL's anneal takes them."""
    assert s(2.5) == s(np.float64(2.5)) == s(torch.tensor(2.5))
    assert s(4.0) == s(4) == s(np.int64(4)) == s(torch.tensor(4))


@settings(max_examples=50)
@given(t=step)
def test_lead_buffer_contract_needs_sizes_keyword(t):
    """The mixing buffers call ``sch(step)`` or ``sch(step, sizes=...)`` by ``needs_sizes``."""
    for s in (Constant(0.3), Linear(0.5, 0.1, 100), Proportional()):
        sizes = {"offline": 10, "online": 30}
        v = s(t, sizes=sizes) if s.needs_sizes else s(t)
        assert 0.0 <= v <= 1.0


# -- through the buffers -----------------------------------------------------------------------


def _rows(n: int, value: float):
    from tensordict import TensorDict

    return TensorDict({"x": torch.full((n,), value)}, [n])


def test_schedules_drive_the_offline_fraction():
    from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer

    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(_rows(100, 0.0))
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=100,
        offline_fraction=Linear(0.5, 0.1, 100),
        batch_size=10,
        generator=0,
        source_key="source",
    )
    rb.extend(_rows(10, 1.0))
    assert rb.sample()["source"].tolist().count(0) == 5
    rb.set_step(100)
    assert rb.offline_fraction == 0.1
    assert rb.sample()["source"].tolist().count(0) == 1


def test_proportional_in_a_mixture():
    from mixreplay import LazyTensorStorage, MixtureReplayBuffer

    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(10), "b": LazyTensorStorage(10)},
        {"a": Proportional("a"), "b": Proportional("b")},
        batch_size=8,
        generator=0,
    )
    mix.extend(_rows(6, 0.0), source="a")
    mix.extend(_rows(2, 1.0), source="b")
    assert mix.fractions == {"a": 0.75, "b": 0.25}


def test_proportional_in_the_two_source_buffer():
    from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer

    offline = ReplayBuffer(storage=LazyTensorStorage(300))
    offline.extend(_rows(300, 0.0))
    rb = OfflineToOnlineReplayBuffer(
        offline, online_capacity=1000, offline_fraction=Proportional(), batch_size=8, generator=0
    )
    assert rb.offline_fraction == 1.0
    rb.extend(_rows(100, 1.0))
    assert rb.offline_fraction == 0.75
