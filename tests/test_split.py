from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import split_counts
from mixreplay.mixing.split import carried_split
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


# -- defects found by adversarial testing (issue 11.7, 11.10) ----------------------------------


def test_a_zero_weight_source_never_changes_the_others_counts():
    assert split_counts(2, [0.1, 0.3]) == [0, 2]
    assert split_counts(2, [0.1, 0.3, 0]) == [0, 2, 0]  # used to give [1, 1, 0]
    assert split_counts(2, [0, 0.1, 0.3]) == [0, 0, 2]


@given(
    b=st.integers(0, 1000),
    w=st.lists(st.floats(0.0, 100.0), min_size=2, max_size=6),
    at=st.integers(0, 6),
)
def test_inserting_a_zero_weight_source_anywhere_changes_nothing(b, w, at):
    if sum(w) == 0:
        w = [1.0] + w[1:]
    at = min(at, len(w))
    with_zero = split_counts(b, w[:at] + [0.0] + w[at:])
    assert with_zero[at] == 0
    assert with_zero[:at] + with_zero[at + 1 :] == split_counts(b, w)


def test_huge_weights_are_split_exactly():
    assert split_counts(10, [1e308, 1e308]) == [5, 5]  # the float sum overflows
    assert split_counts(9, [1e308, 1e308, 1e308]) == [3, 3, 3]
    assert split_counts(4, [1.7e308, 0.0]) == [4, 0]


@pytest.mark.parametrize(
    "b, err, match",
    [
        (-1, ValueError, "batch_size must be an int >= 0, got -1"),
        (2.5, TypeError, "batch_size must be an int, got float 2.5"),
        (True, TypeError, "batch_size must be an int, got bool True"),
    ],
)
def test_bad_batch_sizes_are_refused(b, err, match):
    with pytest.raises(err, match=match):
        split_counts(b, [0.5, 0.5])
    with pytest.raises(err, match=match):
        split_counts(b, [1, 1, 1])


# -- the carried split: a mixture's counts over many batches (issue 18.15) --------------------

weight = st.one_of(
    st.floats(1e-4, 1.0),  # shares, tiny ones included
    st.sampled_from([1 / 3, 0.5, 0.001, 1.0, 2.0]),
    st.integers(1, 5).map(float),
    st.floats(1.0, 1e3),
)


def _run(batch, weights, batches):
    """The worst distance of a running total from its running quota, checking every batch."""
    total = sum(weights)
    carry = [0.0] * len(weights)
    counts_so_far = [0] * len(weights)
    worst = 0.0
    for t in range(1, batches + 1):
        counts, carry = carried_split(batch, weights, carry)
        assert sum(counts) == batch
        for i, (k, w) in enumerate(zip(counts, weights)):
            quota = batch * w / total
            assert quota - 1 < k < quota + 1  # every batch: the floor or the ceiling
            counts_so_far[i] += k
            worst = max(worst, abs(counts_so_far[i] - t * quota))
    return worst


def test_the_issues_tiny_weights_stay_within_one_row():
    """[1/3, 1/3, .001, 1/3, .001, .5] at B=10 drifted 1.04 rows from its quota by batch 64."""
    assert _run(10, [1 / 3, 1 / 3, 0.001, 1 / 3, 0.001, 0.5], 3000) < 1


@given(batch=st.integers(1, 64), weights=st.lists(weight, min_size=2, max_size=7))
@settings(max_examples=150, deadline=None)
def test_with_fixed_weights_every_running_total_stays_within_one_row_of_its_quota(batch, weights):
    assert _run(batch, weights, 300) < 1 + 1e-9
