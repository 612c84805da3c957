"""Priority updates checked the device way (no host synchronisation), and the exact descent.

On a CUDA storage ``PrioritizedSampler.check_priority`` validates on the device: an invalid
update is refused whole and reported by ``check_refused()``/``state_dict()``. Here the same
code path is forced on CPU trees (``_defer_checks``) and compared with the host checks; the
sync-free test itself runs wherever CUDA is present.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import LazyTensorStorage, ReplayBuffer
from mixreplay.errors import PriorityError
from mixreplay.samplers import PrioritizedSampler
from mixreplay.samplers.sumtree import SEQUENTIAL_CUMSUM, SumTree


def _rows(n, start=0, device="cpu"):
    return TensorDict({"x": torch.arange(start, start + n, device=device)}, [n])


def _buffer(deferred, capacity=500, **kwargs):
    sampler = PrioritizedSampler(alpha=0.7, beta=0.5, **kwargs)
    sampler._defer_checks = deferred
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, generator=3)
    rb.extend(_rows(300))
    return rb, sampler


@pytest.mark.parametrize("within", [False, True])
def test_device_checks_give_the_host_checks_results_on_cpu(within):
    (host, hs), (dev, ds) = (_buffer(d, max_priority_within_buffer=within) for d in (False, True))
    g = torch.Generator().manual_seed(7)
    for step in range(40):
        bh, ih = host.sample(64, return_info=True)
        bd, id_ = dev.sample(64, return_info=True)
        assert torch.equal(ih["index"], id_["index"]) and torch.equal(ih["weight"], id_["weight"])
        pr = torch.rand(64, generator=g) * (step + 1)  # the running max grows
        host.update_priority(ih["index"], pr)
        dev.update_priority(id_["index"], pr)
        host.extend(_rows(3, 1000 + 3 * step))
        dev.extend(_rows(3, 1000 + 3 * step))
        assert torch.equal(hs.tree.leaves, ds.tree.leaves)
    assert ds.max_priority == hs.max_priority and ds.default_priority == hs.default_priority
    state_h, state_d = hs.state_dict(), ds.state_dict()
    assert state_h.keys() == state_d.keys()
    for key in state_h:
        assert torch.equal(torch.as_tensor(state_h[key]), torch.as_tensor(state_d[key])), key


@pytest.mark.parametrize(
    "index, priority",
    [
        ([0, 1, 2, 3], [1.0, 2.0, float("nan"), 4.0]),
        ([0, 1, 2, 3], [1.0, float("inf"), 3.0, 4.0]),
        ([0, 1, 2, 3], [1.0, 1e300, 3.0, 4.0]),  # (p + eps) ** 0.7 overflows the tree's bound
        ([0, 1, 299, 300], [1.0, 2.0, 3.0, 4.0]),  # slot 300 holds no row
        ([-1, 1, 2, 3], [1.0, 2.0, 3.0, 4.0]),
    ],
)
def test_a_refused_device_update_changes_nothing_and_raises_later(index, priority):
    rb, sampler = _buffer(True)
    rb.update_priority(torch.arange(300), torch.linspace(0.5, 2.0, 300))
    before, max_before = sampler.tree.leaves.clone(), sampler.max_priority
    levels = [level.clone() for level in sampler.tree.levels()]
    rb.update_priority(torch.tensor(index), torch.tensor(priority))  # no raise: not read back
    assert torch.equal(sampler.tree.leaves, before)
    assert all(torch.equal(a, b) for a, b in zip(levels, sampler.tree.levels()))
    assert sampler.max_priority == max_before
    with pytest.raises(PriorityError, match=r"1 priority update\(s\) were refused on cpu"):
        sampler.check_refused()
    sampler.check_refused()  # reported once
    rb.update_priority(torch.tensor(index), torch.tensor(priority))
    rb.update_priority(torch.tensor(index), torch.tensor(priority))
    with pytest.raises(PriorityError, match=r"2 priority update\(s\) were refused"):
        sampler.state_dict()


def test_the_host_path_still_raises_at_once():
    rb, sampler = _buffer(False)
    with pytest.raises(PriorityError, match="priority must be finite"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]))
    sampler.check_refused()  # nothing deferred on the host path


def test_the_running_max_kept_on_the_device_survives_alpha_changes_and_pickling():
    import pickle

    rb, sampler = _buffer(True)
    rb.update_priority(torch.tensor([5]), torch.tensor([9.0]))
    assert sampler._max_raw_t is not None  # kept on the device until read
    clone = pickle.loads(pickle.dumps(sampler))
    assert clone.default_priority == 9.0
    sampler.alpha = 0.5
    assert sampler.default_priority == 9.0
    assert sampler.max_priority == pytest.approx((9.0 + sampler.eps) ** 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sample_and_update_do_not_synchronise():
    sampler = PrioritizedSampler(alpha=0.6, beta=0.4)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10_000, device="cuda"),
        sampler=sampler,
        generator=torch.Generator(device="cuda").manual_seed(0),
    )
    rb.extend(_rows(10_000, device="cuda"))
    pr = torch.rand(256, device="cuda") + 0.01
    for _ in range(3):  # warm-up: caches, the device-side running max, the refusal counter
        _, info = rb.sample(256, return_info=True)
        rb.update_priority(info["index"], pr)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            _, info = rb.sample(256, return_info=True)
            assert info["weight"].device.type == "cuda"
            rb.update_priority(info["index"], pr * info["weight"])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    sampler.check_refused()
    assert sampler.tree.device.type == "cuda"


# -- the exact descent (one level below the top, no clamps) --------------------------------


def test_cpu_cumsum_is_sequential_here():
    # if a torch build changes this, trees fall back to the clamped descent; this test says so
    assert SEQUENTIAL_CUMSUM


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.just(0.0), st.floats(1e-300, 1e300), st.floats(1e-9, 1.0)),
        min_size=2,
        max_size=300,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_exact_descent_lands_on_positive_slots_even_at_the_top_of_each_stratum(values, seed):
    tree = SumTree(len(values), arity=4, top=max(1, len(values) // 4 + 1))
    v = torch.tensor(values, dtype=torch.float64)
    if not (v > 0).any() or not torch.isfinite(v.sum()):
        return
    tree.set_leaves(v)
    assert tree.depth == 1 and tree._exact
    n = 64
    g = torch.Generator().manual_seed(seed)
    below_one = torch.rand(n, generator=g, dtype=torch.float64)
    below_one[:8] = 1.0 - 2.0**-53  # the largest u < 1: perm + u rounds to the stratum's top
    u = torch.randperm(n, generator=g, dtype=torch.float64).add_(below_one)
    slots = tree.sample(u, n)
    assert (v[slots] > 0).all()
    assert torch.equal(tree.values_at(slots), v[slots])
    # updates keep parents the left-to-right sums the descent relies on
    tree.update(torch.tensor([0, len(values) - 1]), torch.tensor([0.5, 0.25]))
    parents = tree.levels()[0].view(-1, 4).cumsum(1)[:, -1]
    assert torch.equal(tree.levels()[1][: parents.shape[0]], parents)


def test_a_tree_from_before_the_exact_descent_is_rebuilt_when_moved_to_the_cpu():
    tree = SumTree(1000, arity=8, top=200)
    tree.update(torch.arange(1000), torch.rand(1000, dtype=torch.float64) + 0.1)
    tree._exact = False  # as a tree pickled before it existed, or summed on another device
    tree.levels()[1].mul_(1.0)  # parents as they are
    tree.to("cpu")
    assert tree._exact
    parents = tree.levels()[0].view(-1, 8).cumsum(1)[:, -1]
    assert torch.equal(tree.levels()[1][: parents.shape[0]], parents)


def test_a_priority_whose_power_overflows_a_python_float_is_refused_by_name():
    rb, sampler = _buffer(False)
    sampler.alpha = 2.0
    before = sampler.tree.leaves.clone()
    with pytest.raises(PriorityError, match=r"more than a tree of 500 slots can sum"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 1e200], dtype=torch.float64))
    assert torch.equal(sampler.tree.leaves, before)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.one_of(st.just(0.0), st.floats(1e-300, 1e300)), min_size=1, max_size=50),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_flat_tree_samples_only_positive_slots_at_the_top_of_each_stratum(values, seed):
    v = torch.tensor(values, dtype=torch.float64)
    if not (v > 0).any() or not torch.isfinite(v.sum()):
        return
    tree = SumTree(len(values))  # capacity <= top: no level below the top
    tree.set_leaves(v)
    assert tree.depth == 0
    n = 32
    g = torch.Generator().manual_seed(seed)
    below_one = torch.rand(n, generator=g, dtype=torch.float64)
    below_one[:4] = 1.0 - 2.0**-53
    slots = tree.sample(torch.randperm(n, generator=g, dtype=torch.float64).add_(below_one), n)
    assert (v[slots] > 0).all() and torch.equal(tree.values_at(slots), v[slots])
