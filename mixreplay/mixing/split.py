"""The split of a batch between sources: pure arithmetic, no state.

:func:`split_counts` is the one rule every mixing buffer uses, so the two-source
buffer and the N-source mixture cannot disagree. :func:`carried_split` is the
mixture's form of it over many batches: the same counts per batch (floor or
ceiling of each quota), with the rows rounding leaves over carried from batch to
batch so that each source's running total stays within one row of its quota.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction

from mixreplay._validate import check_int

__all__ = ["carried_split", "split_counts"]


def split_counts(batch_size: int, fractions: Sequence[float]) -> list[int]:
    """Split ``batch_size`` units between sources in proportion to ``fractions``.

    Largest-remainder method: each source gets the floor of its quota
    ``batch_size * f_i / sum(f)``, and the units left over go, one each, to the
    sources with the largest remainders. Ties between equal remainders are broken
    the way Python's :func:`round` breaks halves (towards even): a tied unit goes
    to the earliest tied source whose running total (counts of sources before it
    and its own) is odd, else to the last tied source. With two sources this makes
    ``counts[0] == round(f_0 * batch_size)`` exactly, which is the reference
    behaviour of :class:`~mixreplay.OfflineToOnlineReplayBuffer`. (Two sources use
    that floating-point ``round`` directly, as the reference does; three or more
    use exact rational quotas, so ties are never artefacts of rounding.)

    Sources whose fraction is 0 get 0 and take no part in the split (adding one
    never changes the others' counts). When every fraction is 0 the units are
    split as if the fractions were equal. Huge weights are compared exactly (their
    sum may overflow a float; the split does not).

    Args:
        batch_size: units to split (rows, or slices for slice samplers); ``>= 0``.
        fractions: non-negative, finite weights, one per source; normalized here.

    Returns:
        One non-negative count per source, summing to ``batch_size``.

    Examples:
        >>> split_counts(256, [0.3, 0.7])
        [77, 179]
        >>> split_counts(10, [1, 1, 1])
        [4, 3, 3]
        >>> split_counts(5, [0.5, 0.5])  # round(2.5) == 2
        [2, 3]
    """
    n = len(fractions)
    if n == 0:
        raise ValueError("split_counts needs at least one source fraction")
    if type(batch_size) is not int or batch_size < 0:
        batch_size = check_int(batch_size, "batch_size", min=0)
    if n == 2:  # the hot path of the two-source buffer; same rule, fewer steps
        f0, f1 = fractions
        if f0 < 0 or f1 < 0 or not (math.isfinite(f0) and math.isfinite(f1)):
            _check(fractions)
        total = f0 + f1
        if total == 0:
            f0, total = 0.5, 1.0
        elif math.isinf(total):  # two huge weights: compare them, not their overflowing sum
            top = max(f0, f1)
            f0, total = f0 / top, f0 / top + f1 / top
        q0 = batch_size * f0 if total == 1.0 else batch_size * (f0 / total)
        k0 = round(q0)
        return [k0, batch_size - k0]
    _check(fractions)
    # Sources of weight 0 get nothing and take no part in the split, so adding one never
    # changes the others' counts (split_counts(2, [.1, .3]) == split_counts(2, [.1, .3, 0])[:2]).
    live = [i for i, f in enumerate(fractions) if f > 0]
    if live and len(live) < n:
        counts = [0] * n
        for i, c in zip(live, split_counts(batch_size, [fractions[i] for i in live])):
            counts[i] = c
        return counts
    if len(live) == 1:
        return [batch_size]
    return list(_largest_remainder(batch_size, tuple(fractions)))


@functools.lru_cache(maxsize=1024)
def _largest_remainder(batch_size: int, fractions: tuple[float, ...]) -> list[int]:
    """The general form of :func:`split_counts`, in exact rational arithmetic.

    Quotas are computed exactly (each float fraction is an exact rational), so
    ties are real ties, not artefacts of floating-point rounding. Cached: a
    mixture's fractions change only when its schedule moves.
    """
    _check(fractions)
    n = len(fractions)
    exact = [Fraction(f) for f in fractions]
    total = sum(exact)
    if total == 0:
        exact, total = [Fraction(1)] * n, Fraction(n)
    quotas = [batch_size * f / total for f in exact]
    counts = [math.floor(q) for q in quotas]
    remainders = [q - c for q, c in zip(quotas, counts)]
    left = batch_size - sum(counts)
    # Largest remainders first; equal remainders are resolved by the tie rule.
    order = sorted(range(n), key=lambda i: -remainders[i])
    i = 0
    while left > 0:
        j = i
        while j < n and remainders[order[j]] == remainders[order[i]]:
            j += 1
        tied = sorted(order[i:j])
        if j - i <= left:
            for s in tied:
                counts[s] += 1
            left -= j - i
        else:
            for _ in range(left):
                pick = next((s for s in tied if sum(counts[: s + 1]) % 2 == 1), tied[-1])
                counts[pick] += 1
                tied.remove(pick)
            left = 0
        i = j
    return counts


def _check(fractions: Sequence[float]) -> None:
    for i, f in enumerate(fractions):
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise TypeError(f"fraction {i} must be a number, got {type(f).__name__} {f!r}")
        if not math.isfinite(f) or f < 0:
            raise ValueError(f"fraction {i} must be finite and >= 0, got {f!r}")


#: slack of the comparisons below: quotas and carries hold floating-point rounding errors
_TOL = 1e-9


def _urgency(carry: float, rate: float) -> tuple[int, int, int, float]:
    """The order in which sources get the rows rounding leaves over (smaller first).

    ``rate`` is the fractional part of a source's quota per batch and ``carry`` how
    far it is behind its running quota: without an extra row its carry grows by
    ``rate`` per batch, so it needs one within ``deadline`` batches to stay less
    than one row behind. Earliest deadline first; equal deadlines are broken as
    PD² does (Anderson & Srinivasan, 2000): first the source whose next deadline
    follows at once (its windows overlap), then the heavier source (quota
    remainder ``>= 1/2``) whose run of back-to-back windows ends later (its group
    deadline), then the source furthest behind.
    """
    ceil, tol = math.ceil, _TOL  # ceilings with slack: x within rounding of an int is that int
    steps = (1.0 - carry) / rate
    deadline = ceil(steps - tol)
    overlaps = 0 if abs(steps - round(steps)) <= tol else 1
    group = 0
    if 0.5 - tol <= rate < 1.0:
        rest = 1.0 - rate
        group = ceil((ceil(deadline * rest - carry - tol) + carry) / rest - tol)
    return deadline, -overlaps, -group, -(carry + rate)


def carried_split(
    units: int, weights: list[float], carry: list[float]
) -> tuple[list[int], list[float]]:
    """Split ``units`` by ``weights`` (normalized), carrying what rounding left over.

    Each count is the floor or the ceiling of its quota ``units * w_i``, so every
    batch is within one row of exact. The units left after the floors go, one
    each, to sources whose quota has a fractional part, in order of urgency (see
    :func:`_urgency`); a source already ahead by that fraction (``carry_i +
    remainder_i <= 0``) gets one only when no other can. The new carry is
    ``carry_i + quota_i - count_i``: how far source ``i``'s running total is behind
    its running quota.

    The bound: while the weights stay the same, every carry stays strictly inside
    ``(-1, 1)``, so after any number of batches each source's total is less than
    one row from its total quota, however small its weight. (The extra units form
    a Pfair schedule of tasks whose weights are the quota remainders on as many
    processors as units are left over, and PD² is an optimal Pfair scheduler.)
    When the weights change from batch to batch (a schedule), no rule that keeps
    every batch within one row can promise this: the carry is kept, and may
    exceed one row for a while.

    Returns:
        ``(counts, new_carry)``.

    Examples:
        >>> counts, carry = carried_split(10, [1, 1, 1], [0.0, 0.0, 0.0])
        >>> counts
        [4, 3, 3]
        >>> carried_split(10, [1, 1, 1], carry)[0]
        [3, 4, 3]
    """
    total = math.fsum(weights)
    n = len(weights)
    if total == 0:
        weights, total = [1.0] * n, float(n)
    elif math.isinf(total):
        top = max(weights)
        weights = [w / top for w in weights]
        total = math.fsum(weights)
    quotas = [units * w / total for w in weights]
    counts = [math.floor(q) for q in quotas]
    left = units - sum(counts)
    if left:
        # only sources with a fractional quota may take an extra unit: counts stay floor or ceil
        rates = [q - c for q, c in zip(quotas, counts)]
        fractional = [i for i in range(n) if rates[i] > 1e-12]
        order = sorted(
            fractional,
            key=lambda i: (carry[i] + rates[i] <= _TOL, *_urgency(carry[i], rates[i]), i),
        )
        if len(order) < left:  # float rounding: complete in order of weight
            order += sorted((i for i in range(n) if i not in order), key=lambda i: -weights[i])
        for i in order[:left]:
            counts[i] += 1
    new = [c + q - k for c, q, k in zip(carry, quotas, counts)]
    mean = math.fsum(new) / n  # the carries sum to 0; keep float drift from accumulating
    return counts, [c - mean for c in new]
