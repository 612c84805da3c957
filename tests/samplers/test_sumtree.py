import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mixreplay.samplers.sumtree import SumTree

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.composite
def updates(draw):
    capacity = draw(st.integers(1, 70))
    batches = draw(
        st.lists(
            st.lists(
                st.tuples(st.integers(0, capacity - 1), st.floats(0.0, 1e3, allow_nan=False)),
                max_size=40,
            ),
            min_size=1,
            max_size=5,
        )
    )
    shape = draw(st.sampled_from([(32, 4096), (2, 1), (3, 4), (4, 7)]))  # (arity, top)
    return capacity, batches, shape


@settings(max_examples=80, deadline=None)
@given(case=updates())
def test_updates_match_a_sequential_loop(case):
    """Duplicates inside one batch: the last write wins, as in a Python loop; every parent is
    the sum (and the min of the positive values) of its children, at every tree shape."""
    capacity, batches, (arity, top) = case
    tree = SumTree(capacity, arity=arity, top=top)
    expected = np.zeros(capacity)
    for batch in batches:
        for i, v in batch:
            expected[i] = v
        if batch:
            index, values = zip(*batch, strict=True)
            tree.update(torch.tensor(index), torch.tensor(values, dtype=torch.float64))
    np.testing.assert_array_equal(tree.leaves.numpy(), expected)
    assert tree.total() == pytest.approx(expected.sum(), rel=1e-12, abs=1e-12)
    assert tree.max() == expected.max()
    positive = expected[expected > 0]
    assert tree.min() == (positive.min() if positive.size else math.inf)
    assert tree.levels()[-1].numel() <= top  # the top level is searched flat
    for levels, reduce in ((tree.levels(), "sum"), (tree.min_levels(), "min")):
        for children, parent in itertools.pairwise(levels):
            rows = children.view(-1, arity)  # each level is padded to whole rows of children
            if reduce == "sum":
                np.testing.assert_allclose(parent[: rows.shape[0]].numpy(), rows.sum(1), rtol=1e-12)
                assert (parent[rows.shape[0] :] == 0).all()
            else:
                assert torch.equal(parent[: rows.shape[0]], rows.amin(1))
                assert (parent[rows.shape[0] :] == math.inf).all()


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=64),
    fractions=st.lists(
        st.floats(0.0, 1.0, allow_nan=False, exclude_max=True), min_size=1, max_size=30
    ),
)
def test_find_agrees_with_searchsorted(values, fractions):
    tree = SumTree(len(values))
    tree.update(torch.arange(len(values)), torch.tensor(values, dtype=torch.float64))
    v = np.asarray(values)
    if v.sum() == 0:
        return
    prefix = np.asarray(fractions) * tree.total()
    found = tree.find(torch.tensor(prefix)).numpy()
    assert (v[found] > 0).all()
    expected = np.searchsorted(np.cumsum(v), prefix, side="right")
    # floating sums may put a prefix that sits on a boundary one slot either way; else equal
    cum = np.cumsum(v)
    on_boundary = np.isclose(prefix[:, None], cum[None, :], rtol=1e-9, atol=1e-12).any(1)
    assert (found == expected)[~on_boundary].all()


def test_find_never_returns_an_empty_slot():
    tree = SumTree(10)
    tree.update(torch.tensor([2, 5, 7]), torch.tensor([1.0, 0.0, 3.0]))
    total = tree.total()
    probes = torch.tensor([-5.0, 0.0, 0.999, 1.0, 3.999, total, total + 1, 1e30])
    assert tree.find(probes).tolist() == [2, 2, 2, 7, 7, 7, 7, 7]


def test_find_keeps_the_shape():
    tree = SumTree(3)
    tree.update(torch.arange(3), torch.ones(3))
    assert tree.find(torch.tensor([[0.5, 1.5], [2.5, 0.1]])).tolist() == [[0, 1], [2, 0]]


@pytest.mark.parametrize("capacity", [1, 40, 2000])
def test_a_total_of_zero_finds_slot_zero(capacity):
    tree = SumTree(capacity)
    assert tree.find(torch.tensor([0.0, 1.0, -1.0])).tolist() == [0, 0, 0]


@pytest.mark.parametrize("top", [4096, 1, 40])
@pytest.mark.parametrize("capacity", [31, 32, 33, 1024, 1025, 40_000])
def test_deep_trees(capacity, top):
    tree = SumTree(capacity, top=top)
    values = torch.zeros(capacity, dtype=torch.float64)
    values[[0, capacity // 2, capacity - 1]] = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    tree.update(torch.arange(capacity), values)
    assert tree.total() == 6.0
    found = tree.find(torch.tensor([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 100.0]))
    assert found.tolist() == [0, 0, capacity // 2, capacity // 2] + [capacity - 1] * 4


def test_capacity_of_one_and_non_powers_of_two():
    tree = SumTree(1)
    tree.update(torch.tensor([0]), torch.tensor([2.5]))
    assert tree.total() == 2.5 and tree.find(torch.tensor([1.0])).tolist() == [0]
    tree = SumTree(5)
    tree.update(torch.arange(5), torch.ones(5))
    assert tree.find(torch.tensor([4.5, 10.0])).tolist() == [4, 4]  # never a padding leaf


def test_scalar_values_get_and_set_leaves():
    tree = SumTree(6)
    tree.update(torch.tensor([1, 3]), 2.0)
    assert tree.get(torch.tensor([0, 1, 3])).tolist() == [0.0, 2.0, 2.0]
    other = SumTree(6)
    other.set_leaves(tree.leaves[:4].clone())
    assert all(torch.equal(a, b) for a, b in zip(other.levels(), tree.levels(), strict=True))
    assert all(
        torch.equal(a, b) for a, b in zip(other.min_levels(), tree.min_levels(), strict=True)
    )
    other.set_leaves(torch.tensor([]))
    assert other.total() == 0.0 and other.min() == math.inf


@pytest.mark.parametrize(("arity", "top"), [(32, 4096), (2, 1), (4, 16)])
def test_set_leaves_builds_the_tree_that_updates_build(arity, top):
    g = torch.Generator().manual_seed(0)
    values = torch.rand(1000, generator=g, dtype=torch.float64)
    values[::7] = 0.0
    bulk, stepwise = SumTree(1000, arity=arity, top=top), SumTree(1000, arity=arity, top=top)
    bulk.set_leaves(values)
    for chunk in torch.arange(1000).split(37):
        stepwise.update(chunk, values[chunk])
    for a, b in zip(bulk.levels() + bulk.min_levels(), stepwise.levels() + stepwise.min_levels()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)


def test_the_min_follows_overwrites_and_zeros():
    """The smallest positive value: raising or zeroing the minimum slot moves it elsewhere."""
    tree = SumTree(10_000)
    tree.update(torch.arange(10_000), torch.arange(1, 10_001, dtype=torch.float64))
    assert tree.min() == 1.0
    tree.update(torch.tensor([0]), torch.tensor([5e4]))  # the minimum is overwritten upwards
    assert tree.min() == 2.0
    tree.update(torch.tensor([1, 2]), torch.tensor([0.0, 0.5]))  # 0 is an empty slot, not a min
    assert tree.min() == 0.5
    tree.set_leaves(torch.zeros(10_000))
    assert tree.min() == math.inf and tree.total() == 0.0


def test_many_queries_at_once_agree_with_numpy():
    """Searches above 200 queries run in chunks (ATen's grain); the answer must not change."""
    g = torch.Generator().manual_seed(1)
    values = torch.rand(50_000, generator=g, dtype=torch.float64)
    tree = SumTree(50_000)
    tree.set_leaves(values)
    u = torch.rand(4099, generator=g, dtype=torch.float64)
    found = tree.sample(u).numpy()
    cum = np.cumsum(values.numpy())
    expected = np.searchsorted(cum, u.numpy() * tree.total(), side="right")
    on_boundary = np.isclose((u.numpy() * tree.total())[:, None], cum[None, :], rtol=1e-9).any(1)
    assert (found == expected)[~on_boundary].all() and (~on_boundary).sum() > 4000


def test_no_drift_over_many_updates():
    g = torch.Generator().manual_seed(0)
    tree = SumTree(1000)
    for _ in range(200):
        idx = torch.randint(1000, (64,), generator=g)
        tree.update(idx, torch.rand(64, generator=g, dtype=torch.float64) * 1e6)
    tree.update(torch.arange(1000), torch.ones(1000))
    assert tree.total() == 1000.0


def test_errors():
    with pytest.raises(ValueError, match=r"SumTree capacity must be an int >= 1, got 0"):
        SumTree(0)
    with pytest.raises(TypeError, match=r"SumTree capacity must be an int >= 1, got float 2.0"):
        SumTree(2.0)
    with pytest.raises(ValueError, match=r"SumTree arity must be an int >= 2, got 1"):
        SumTree(4, arity=1)
    with pytest.raises(ValueError, match=r"SumTree top must be an int >= 1, got 0"):
        SumTree(4, top=0)
    tree = SumTree(4)
    with pytest.raises(
        IndexError, match=r"SumTree slot 4 is out of range for capacity 4 \(valid: 0..3\)"
    ):
        tree.update(torch.tensor([0, 4]), torch.ones(2))
    with pytest.raises(IndexError, match=r"SumTree slot -1 is out of range"):
        tree.get(torch.tensor([-1]))
    with pytest.raises(TypeError, match=r"SumTree slots must be integers, got dtype torch.float32"):
        tree.update(torch.tensor([0.0]), torch.ones(1))
    with pytest.raises(
        ValueError, match=r"SumTree values must be finite and >= 0, got \[-1.0\] at slots \[1\]"
    ):
        tree.update(torch.tensor([0, 1]), torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match=r"SumTree values must be finite and >= 0, got \[nan\]"):
        tree.update(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match=r"SumTree.update got 3 values for 2 slots"):
        tree.update(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(ValueError, match=r"SumTree.set_leaves got 5 values for a capacity of 4"):
        tree.set_leaves(torch.ones(5))
    assert tree.total() == 0.0  # nothing was written by the failed calls


@pytest.mark.parametrize("device", devices)
def test_device(device):
    tree = SumTree(100, device=device)
    tree.update(torch.arange(100), torch.arange(100, dtype=torch.float64))
    found = tree.find(torch.tensor([0.5, 4949.5]))
    assert found.device.type == device and found.tolist() == [1, 99]
    assert "SumTree(capacity=100, total=4950" in repr(tree)


@settings(max_examples=60, deadline=None)
@given(case=updates(), set_first=st.booleans())
def test_the_max_levels_follow_every_update(case, set_first):
    """``track_max``: the max is the largest leaf after any updates (and after set_leaves),
    each parent the max of its children; without it the tree has no such levels."""
    capacity, batches, (arity, top) = case
    tree = SumTree(capacity, arity=arity, top=top, track_max=True)
    expected = np.zeros(capacity)
    if set_first:
        start = torch.arange(capacity, dtype=torch.float64)
        tree.set_leaves(start)
        expected[:] = start.numpy()
    for batch in batches:
        for i, v in batch:
            expected[i] = v
        if batch:
            index, values = zip(*batch, strict=True)
            tree.update(torch.tensor(index), torch.tensor(values, dtype=torch.float64))
        assert float(tree.max_tensor()) == expected.max() == tree.max()
    assert tree._maxs is not None
    for children, parent in itertools.pairwise(tree._maxs):
        rows = children.view(-1, arity)
        assert torch.equal(parent[: rows.shape[0]], rows.amax(1))
    plain = SumTree(capacity, arity=arity, top=top)
    assert not plain.tracks_max and tree.tracks_max
    with pytest.raises(
        ValueError, match=r"SumTree.max_tensor needs a tree built with track_max=True"
    ):
        plain.max_tensor()


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=200),
    fractions=st.lists(
        st.floats(0.0, 1.0, allow_nan=False, exclude_max=True), min_size=1, max_size=30
    ),
    shape=st.sampled_from([(32, 4096), (2, 1), (3, 4), (4, 7)]),
)
@example(  # a child's exclusive sum as cumsum - kids rounded above s: slot 16 (value 0)
    values=[0.0] * 15 + [1e-12, 0.0, 0.5, 0.5], fractions=[1e-12], shape=(2, 1)
)
def test_sample_is_find_with_the_values_of_the_slots(values, fractions, shape):
    """The sampler's lean descent lands where :meth:`find` does (boundaries aside), only on
    positive slots, and hands back the values of the slots it found."""
    arity, top = shape
    tree = SumTree(len(values), arity=arity, top=top)
    tree.update(torch.arange(len(values)), torch.tensor(values, dtype=torch.float64))
    v = np.asarray(values)
    if v.sum() == 0:
        return
    u = torch.tensor(fractions, dtype=torch.float64)
    kept = u.clone()
    slots = tree.sample(u)
    assert torch.equal(u, kept)  # the caller's fractions are not overwritten
    assert (v[slots.numpy()] > 0).all()
    assert (v[tree.find(u * tree.total()).numpy()] > 0).all()  # find's own descent too
    assert torch.equal(tree.values_at(slots), tree.leaves[slots])
    cum = np.cumsum(v)
    prefix = np.asarray(fractions) * tree.total()
    expected = np.searchsorted(cum, prefix, side="right")
    on_boundary = np.isclose(prefix[:, None], cum[None, :], rtol=1e-9, atol=1e-12).any(1)
    assert (slots.numpy() == expected)[~on_boundary].all()


def test_values_at_forgets_the_draw_once_the_tree_changes():
    tree = SumTree(100, arity=4, top=8)
    tree.update(torch.arange(100), torch.ones(100, dtype=torch.float64))
    slots = tree.sample(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    tree.update(slots, torch.tensor([7.0, 8.0, 9.0], dtype=torch.float64))
    assert tree.values_at(slots).tolist() == [7.0, 8.0, 9.0]
    other = slots.clone()  # another tensor: always read from the leaves
    assert tree.values_at(other).tolist() == [7.0, 8.0, 9.0]


def test_last_write_wins_across_calls_and_after_pickling():
    """The scratch array is reused between updates (stale entries never leak) and is not
    pickled; a tree pickled before the caches existed loads and samples."""
    import pickle

    tree = SumTree(50)
    tree.update(torch.tensor([3, 3, 9, 3]), torch.tensor([1.0, 2.0, 5.0, 4.0]))
    tree.update(torch.tensor([9, 3, 9]), torch.tensor([6.0, 7.0, 0.5]))
    assert tree.get(torch.tensor([3, 9])).tolist() == [7.0, 0.5]
    state = tree.__getstate__()
    assert "_scratch" not in state and "_positions" not in state
    old = {k: v for k, v in state.items() if k not in ("_below", "_drawn")}  # an older pickle
    restored = SumTree.__new__(SumTree)
    restored.__dict__.update(old)
    assert restored.sample(torch.tensor([0.99], dtype=torch.float64)).tolist() == [9]
    restored.update(torch.tensor([1, 1]), torch.tensor([2.0, 3.0]))
    assert restored.get(torch.tensor([1])).tolist() == [3.0]
    again = pickle.loads(pickle.dumps(restored))
    assert torch.equal(again.leaves, restored.leaves)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [False, True])
def test_search_in_chunks_or_in_one_call_equals_searchsorted(threads, rows):
    from mixreplay.samplers import sumtree

    g = torch.Generator().manual_seed(threads)
    n = 3 * sumtree._GRAIN + 7  # chunked with two threads, one call with one
    sorted_rows = torch.rand(n if rows else 50, 9, generator=g, dtype=torch.float64)
    sorted_rows = sorted_rows.cumsum(-1) if rows else sorted_rows.flatten().sort().values
    values = torch.rand(n, generator=g, dtype=torch.float64) * float(sorted_rows.max())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = sumtree.search(sorted_rows, values.unsqueeze(-1) if rows else values)
    finally:
        torch.set_num_threads(before)
    expected = torch.searchsorted(sorted_rows, values.unsqueeze(-1) if rows else values, right=True)
    assert torch.equal(got, expected)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.just(0.0),
            st.floats(0.0, 1e3, allow_nan=False),
            st.sampled_from([0.1, 1.0 / 3.0, 1e16, 2.0**-60, 7.0, 2.0**53]),
        ),
        min_size=31,
        max_size=60,
    ),
    # (arity, top): 31 to 60 slots make one level below the top
    shape=st.sampled_from([(8, 8), (16, 4), (4, 16), (2, 30), (32, 2)]),
)
def test_the_leaf_prefix_sums_find_the_very_slots_of_the_descent(values, shape):
    """Repeated draws from an unchanged tree search every leaf's prefix sum at once: at every
    boundary (each prefix sum and the floats just beside it), on sums that round, the slot
    is the one the exact descent finds, never merely a neighbour."""
    from mixreplay.samplers.sumtree import SEQUENTIAL_CUMSUM

    if not SEQUENTIAL_CUMSUM:
        pytest.skip("this torch build's CPU cumsum is not sequential: no exact descent")
    arity, top = shape
    tree = SumTree(len(values), arity=arity, top=top)
    tree.update(torch.arange(len(values)), torch.tensor(values, dtype=torch.float64))
    assert tree.depth == 1
    total = tree.total()
    if total == 0:
        return
    flat = tree._flat_prefix()
    edges = flat[flat < total]
    below = torch.nextafter(edges, torch.tensor(-math.inf, dtype=torch.float64))
    above = torch.nextafter(edges, torch.tensor(math.inf, dtype=torch.float64))
    s = torch.cat([torch.zeros(1, dtype=torch.float64), edges, below.clamp(min=0.0), above])
    s = s[s < total]
    descent, _ = tree._descend_exact(s.clone())
    assert torch.equal(torch.searchsorted(flat, s, right=True), descent)
    assert (tree.leaves[descent] > 0).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_draws_from_an_unchanged_tree_equal_the_first_draw_and_change_with_the_tree(threads):
    """The first draw after a change descends, later ones search the leaf prefix sums: the
    same fractions give the same slots and values every time; an update is seen at once."""
    from mixreplay.samplers.sumtree import SEQUENTIAL_CUMSUM

    g = torch.Generator().manual_seed(3)
    tree = SumTree(5_000, top=256)  # one level below the top
    values = torch.rand(5_000, generator=g, dtype=torch.float64) ** 4
    values[::7] = 0.0
    tree.update(torch.arange(5_000), values)
    u = torch.rand(300, generator=g, dtype=torch.float64) * 300  # > the 200 of one search chunk
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        draws = [tree.sample(u, 300) for _ in range(3)]
        assert (tree._flat is not None) == SEQUENTIAL_CUMSUM  # built on the second draw
        for slots in draws[1:]:
            assert torch.equal(slots, draws[0])
            assert torch.equal(tree.values_at(slots), values[slots])
        assert (values[draws[0]] > 0).all()
        hot = draws[0][:5]
        tree.update(hot, torch.zeros(5, dtype=torch.float64))  # these slots leave the tree
        assert tree._flat is None
        for _ in range(3):
            again = tree.sample(u, 300)
            assert not torch.isin(again, hot).any()
            fresh = SumTree(5_000, top=256)
            fresh.set_leaves(tree.leaves.clone())
            assert torch.equal(again, fresh.sample(u, 300))  # a tree that never cached
    finally:
        torch.set_num_threads(before)


def test_the_prefix_sums_are_built_only_for_runs_of_draws_that_pay_and_draw_the_same():
    """Built on the second draw while the last run between changes was long enough (or none is
    known), else on the _PAYS_AFTER-th draw of a run; every draw equals a never-caching tree's."""
    from mixreplay.samplers.sumtree import _PAYS_AFTER, SEQUENTIAL_CUMSUM

    if not SEQUENTIAL_CUMSUM:
        pytest.skip("the exact descent (and its prefix sums) needs a sequential CPU cumsum")
    g = torch.Generator().manual_seed(5)
    tree = SumTree(5_000, top=256)
    tree.update(torch.arange(5_000), torch.rand(5_000, generator=g, dtype=torch.float64))

    def run(draws: int) -> list[bool]:
        """Change one slot, draw ``draws`` times; whether the prefix sums existed after each."""
        slot = torch.randint(5_000, (1,), generator=g)
        tree.update(slot, torch.rand(1, generator=g, dtype=torch.float64))
        built = []
        for _ in range(draws):
            u = torch.rand(64, generator=g, dtype=torch.float64) * 64
            fresh = SumTree(5_000, top=256)
            fresh.set_leaves(tree.leaves.clone())
            assert torch.equal(tree.sample(u, 64), fresh.sample(u, 64))
            built.append(tree._flat is not None)
        return built

    assert run(2) == [False, True]  # nothing known yet: built on the second draw
    assert run(2) == [False, False]  # runs of two do not pay
    assert run(3) == [False, False, False]
    long = run(_PAYS_AFTER + 2)  # a longer run builds on its _PAYS_AFTER-th draw
    assert long == [False] * (_PAYS_AFTER - 1) + [True] * 3
    assert run(_PAYS_AFTER) == [False] + [True] * (_PAYS_AFTER - 1)  # after a long run: second
    assert run(1) == [False]
    assert run(2) == [False, False]  # the last run held one draw: two more descend


def test_random_trees_of_mixed_scales_draw_and_find_only_positive_slots():
    """Seeded trees whose values span 1e-300 to 1e12, zeros among them, searched at random
    fractions and at each slot's boundary and the float below it: neither the descent of
    :meth:`sample` nor that of :meth:`find` ever lands on a slot holding 0 (before the
    remainder was clamped at 0, about one tree in five did)."""
    g = torch.Generator().manual_seed(11)
    scales = torch.tensor([0.0, 1e-300, 1e-12, 1e-6, 1.0, 1e6, 1e12], dtype=torch.float64)
    shapes = [(2, 1), (3, 4), (4, 7), (32, 4), (8, 2)]
    for trial in range(300):
        arity, top = shapes[trial % len(shapes)]
        n = int(torch.randint(1, 300, (1,), generator=g))
        pick = torch.randint(len(scales), (n,), generator=g)
        values = scales[pick] * torch.rand(n, generator=g, dtype=torch.float64)
        if values.sum() == 0:
            continue
        tree = SumTree(n, arity=arity, top=top)
        tree.update(torch.arange(n), values)
        edges = (values.cumsum(0) / tree.total()).clamp(max=1 - 2**-53)
        below = torch.nextafter(edges, torch.zeros_like(edges))
        u = torch.cat([torch.rand(64, generator=g, dtype=torch.float64), edges, below])
        drawn, found = tree.sample(u.clone()), tree.find(u * tree.total())
        assert (values[drawn] > 0).all() and (values[found] > 0).all(), (trial, arity, top)


@pytest.mark.parametrize("capacity", [10, 5000, 200_000])
def test_the_tensors_a_tree_returns_are_the_callers_own(capacity):
    """total_tensor() and min_tensor() are copies: a later update changes neither (the total
    was a view of a kept buffer that updates rewrote), and writing into them leaves the tree."""
    tree = SumTree(capacity)
    tree.update(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    total, least = tree.total_tensor(), tree.min_tensor()
    tree.update(torch.tensor([0, 5]), torch.tensor([0.5, 100.0]))
    assert float(total) == 10.0 and float(least) == 1.0
    assert tree.total() == 109.5 and tree.min() == 0.5
    tree.total_tensor().fill_(-1.0)
    tree.min_tensor().fill_(-1.0)
    assert tree.total() == 109.5 and tree.min() == 0.5
