from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import split_counts
from mixreplay.split import _largest_remainder

fraction = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
weights = st.lists(
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False), min_size=1, max_size=6
)


@given(b=st.integers(0, 4096), f=fraction)
def test_two_sources_follow_pythons_round(b, f):
    counts = split_counts(b, [f, 1.0 - f])
    assert counts == [round(f * b), b - round(f * b)]


@given(b=st.integers(0, 2048), w=weights)
def test_counts_sum_to_batch_and_are_never_negative(b, w):
    counts = split_counts(b, w)
    assert sum(counts) == b
    assert all(c >= 0 for c in counts)


@given(
    b=st.integers(0, 2048),
    w=st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=3, max_size=6),
)
@settings(max_examples=300)
def test_largest_remainder_rule(b, w):
    """Every count is its quota's floor or ceiling; leftover units went to the largest remainders."""
    counts = split_counts(b, w)
    total = sum(Fraction(x) for x in w)
    quotas = [b * Fraction(x) / total for x in w] if total else [Fraction(b, len(w))] * len(w)
    floors = [q.numerator // q.denominator for q in quotas]
    bumped = [c - f for c, f in zip(counts, floors)]
    assert all(x in (0, 1) for x in bumped)
    rem = [q - f for q, f in zip(quotas, floors)]
    got = [r for r, x in zip(rem, bumped) if x]
    missed = [r for r, x in zip(rem, bumped) if not x]
    if got and missed:
        assert min(got) >= max(missed)


def test_ties_round_towards_even_running_totals():
    # quotas 2.5 / 2.5: round(2.5) == 2, the online side takes the unit
    assert split_counts(5, [0.5, 0.5]) == [2, 3]
    assert split_counts(7, [0.5, 0.5]) == [4, 3]
    # three-way tie on thirds: the first source whose running total is odd gets it
    assert split_counts(10, [1, 1, 1]) == [4, 3, 3]
    assert split_counts(4, [1, 1, 1, 1]) == [1, 1, 1, 1]


def test_general_rule_agrees_with_fast_path_away_from_float_halves():
    for b in range(0, 300):
        for k in range(0, 21):
            f = k / 20
            if (f * b) % 1 == 0.5:
                continue
            assert list(_largest_remainder(b, (f, 1 - f))) == split_counts(b, [f, 1 - f])


def test_all_zero_fractions_split_evenly():
    assert split_counts(9, [0.0, 0.0, 0.0]) == [3, 3, 3]
    assert split_counts(8, [0.0, 0.0]) == [4, 4]


@pytest.mark.parametrize(
    "fractions, err, match",
    [
        ([], ValueError, "at least one source"),
        ([0.5, -0.1, 0.6], ValueError, "fraction 1 must be finite and >= 0, got -0.1"),
        ([float("nan"), 1.0, 1.0], ValueError, "fraction 0 must be finite"),
        ([float("inf"), 1.0], ValueError, "fraction 0 must be finite"),
        (["a", 1.0, 1.0], TypeError, "fraction 0 must be a number"),
    ],
)
def test_bad_fractions(fractions, err, match):
    with pytest.raises(err, match=match):
        split_counts(10, fractions)
