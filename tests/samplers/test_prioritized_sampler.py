import json
import math
import pickle

import pytest
import torch

from mixreplay import (
    CheckpointError,
    EmptyBufferError,
    FrozenStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import PrioritizedSampler, Sampler
from tests.helpers import assert_state_equal
from tests.helpers import counted_rows as rows

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def filled(capacity: int, n: int, sampler: PrioritizedSampler, device="cpu") -> LazyTensorStorage:
    storage = LazyTensorStorage(capacity, device=device)
    index = storage.extend(rows(n))
    sampler.on_extend(index, storage)
    return storage


# -- the chi-squared test ----------------------------------------------------------------------

# Upper quantile z of the standard normal at 1 - 1e-4: the tests below fail by chance
# with probability 1e-4 for a correct sampler (and never, being seeded, once they pass).
Z_9999 = 3.719016


def chi2_critical(df: int, z: float = Z_9999) -> float:
    """Wilson-Hilferty: (chi2_df / df) ** (1/3) is close to normal, mean 1 - 2/(9 df), var 2/(9 df)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi2_statistic(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_wilson_hilferty_matches_the_exact_quantile():
    """Within 1% from 19 degrees of freedom on (the tests use 40 to 63), and slightly conservative."""
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (19, 40, 63, 200):
        exact = scipy_stats.chi2.ppf(1 - 1e-4, df)
        assert exact <= chi2_critical(df) <= 1.01 * exact


@pytest.mark.parametrize("stratified", [True, False])
@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_sampling_frequencies_match_priorities(stratified, alpha):
    K, draws = 64, 64_000
    sampler = PrioritizedSampler(alpha=alpha, eps=1e-6, stratified=stratified)
    storage = filled(K, K, sampler)
    g = torch.Generator().manual_seed(1234)
    raw = torch.rand(K, generator=g, dtype=torch.float64) * 10
    raw[3] = 0.0  # priority 0 still leaves the row a chance: (0 + eps) ** alpha
    sampler.update_priority(torch.arange(K), raw)
    p = (raw.abs() + 1e-6) ** alpha
    probs = p / p.sum()
    index = torch.cat([sampler.sample(storage, 256, g) for _ in range(draws // 256)])
    counts = torch.bincount(index, minlength=K).to(torch.float64)
    # bins with an expected count below 5 (row 3) join the smallest other bin, as the
    # chi-squared approximation requires
    small = probs * draws < 5
    smallest = torch.where(small, math.inf, probs).argmin()
    counts[smallest] += counts[small].sum()
    probs[smallest] += probs[small].sum()
    counts, probs = counts[~small], probs[~small]
    stat = chi2_statistic(counts, probs)
    assert stat < chi2_critical(len(probs) - 1)
    # the test has power: the same counts are far from uniform
    assert chi2_statistic(counts, torch.full_like(probs, 1 / len(probs))) > 10 * chi2_critical(
        len(probs) - 1
    )


def test_stratified_batches_cover_the_distribution_and_are_shuffled():
    sampler = PrioritizedSampler(alpha=1.0)
    storage = filled(4, 4, sampler)
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 1.0]))
    g = torch.Generator().manual_seed(0)
    batches = [sampler.sample(storage, 8, g) for _ in range(20)]
    for b in batches:  # one draw per eighth of the total: exactly two per row
        assert torch.bincount(b, minlength=4).tolist() == [2, 2, 2, 2]
    assert any(not torch.equal(b, b.sort().values) for b in batches)


# -- priorities --------------------------------------------------------------------------------


def test_new_rows_get_the_max_priority():
    sampler = PrioritizedSampler(alpha=0.5, eps=0.0 + 1e-6)
    storage = filled(16, 4, sampler)
    assert sampler.tree.get(torch.arange(4)).tolist() == [1.0] * 4  # 1.0 at first
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([16.0, 0.25]))
    expected_max = (16.0 + 1e-6) ** 0.5
    assert sampler.max_priority == pytest.approx(expected_max)
    index = storage.extend(rows(3, 4))
    sampler.on_extend(index, storage)
    assert sampler.tree.get(index).tolist() == pytest.approx([expected_max] * 3)
    # the max is a running max: lowering the top priority does not lower it
    sampler.update_priority(torch.tensor([0]), torch.tensor([0.0]))
    assert sampler.max_priority == pytest.approx(expected_max)


def test_update_priority_sets_abs_plus_eps_to_the_alpha():
    sampler = PrioritizedSampler(alpha=0.7, eps=0.01)
    filled(8, 8, sampler)
    sampler.update_priority(
        torch.tensor([[1], [5]]), torch.tensor([[-2.0], [3.0]])
    )  # [B, 1] shapes
    assert sampler.tree.get(torch.tensor([1, 5])).tolist() == pytest.approx([2.01**0.7, 3.01**0.7])
    sampler.update_priority(torch.tensor([2, 3]), torch.tensor(0.5))  # one scalar for all
    assert sampler.tree.get(torch.tensor([2, 3])).tolist() == pytest.approx([0.51**0.7] * 2)
    sampler.update_priority(torch.tensor([4, 4]), torch.tensor([9.0, 1.0]))  # last write wins
    assert sampler.tree.get(torch.tensor([4])).item() == pytest.approx(1.01**0.7)
    assert sampler.tree.total() == pytest.approx(
        2.01**0.7 + 3.01**0.7 + 2 * 0.51**0.7 + 1.01**0.7 + 3
    )


def test_alpha_zero_is_uniform():
    sampler = PrioritizedSampler(alpha=0.0)
    filled(4, 4, sampler)
    sampler.update_priority(torch.arange(4), torch.tensor([0.0, 1.0, 100.0, 1e6]))
    assert sampler.tree.leaves.tolist() == [1.0] * 4


def test_importance_weights():
    sampler = PrioritizedSampler(alpha=1.0, beta=0.5, eps=1e-9)
    storage = filled(10, 5, sampler)
    sampler.update_priority(torch.arange(5), torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0]))
    index = torch.tensor([1, 3, 4, 3])
    w = sampler.weight(index, storage)
    assert w.dtype == torch.float32
    p = torch.tensor([2.0, 8.0, 16.0, 8.0], dtype=torch.float64)
    N, P = 5, p / 31.0
    full = (N * P) ** -0.5
    largest = (N * (1.0 / 31.0)) ** -0.5  # the row of lowest priority, over the buffer
    assert w.tolist() == pytest.approx((full / largest).tolist())
    sampler.beta = 0.0
    assert sampler.weight(index, storage).tolist() == [1.0] * 4


def test_weights_are_normalized_over_the_buffer_not_the_batch():
    """Issue 11.8: a batch without the buffer's lowest-priority row still divides by its weight."""
    sampler = PrioritizedSampler(alpha=1.0, beta=1.0, eps=1e-9)
    storage = filled(8, 5, sampler)
    sampler.update_priority(torch.arange(5), torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0]))
    w = sampler.weight(torch.tensor([3, 4]), storage)
    assert w.tolist() == pytest.approx([1 / 8, 1 / 16])  # (p_min / p_i) ** beta, p_min = 1
    # the minimum is over the rows held: overwriting the lowest one moves it
    sampler.on_extend(storage.extend(rows(4, 5)), storage)  # slots 5, 6, 7, 0: max priority
    assert sampler.weight(torch.tensor([3, 4]), storage).tolist() == pytest.approx([2 / 8, 2 / 16])


def weighted_estimates(priority: torch.Tensor, functions: dict, batch: int, draws: int):
    """Draw ``draws`` batches at beta=1; per function f, the z-score of mean(w f) against
    c * E_uniform[f] (c = N p_min / sum(p) is E[w]: correct weights make E[w f] = c E_uniform[f]),
    the self-normalized estimate sum(w f) / sum(w), and E_uniform[f]."""
    N = priority.numel()
    rb = ReplayBuffer(
        storage=LazyTensorStorage(N),
        sampler=PrioritizedSampler(alpha=1.0, beta=1.0, eps=1e-9),
        generator=20240,
    )
    rb.extend(rows(N))
    rb.update_priority(torch.arange(N), priority)
    p = priority.double() + 1e-9
    c = N * p.min() / p.sum()
    x, w = [], []
    for _ in range(draws):
        b, info = rb.sample(batch, return_info=True)
        x.append(b["x"])
        w.append(info["weight"].double())
    x, w = torch.cat(x), torch.cat(w)
    out = {}
    for name, f in functions.items():
        fx, uniform = f(x).double(), f(torch.arange(N)).double().mean()
        wf = w * fx
        # the weights are float32: allow their rounding beside the sampling error
        se = wf.std() / math.sqrt(wf.numel()) + 1e-6 * c * uniform.abs()
        out[name] = (
            float((wf.mean() - c * uniform) / se),
            float(wf.sum() / w.sum()),
            float(uniform),
        )
    return out


def test_at_beta_one_weighted_expectations_are_uniform_expectations_100_rows():
    """Issue 11.8's example: 10 rows of low priority among 100. Each weighted mean matches the
    uniform mean; batch-wise normalization gave the low rows ~0.15x the weight they need."""
    priority = torch.ones(100)
    priority[:10] = 0.1
    low = lambda x: (x < 10).long()  # noqa: E731
    functions = {"low rows": low, "row id": lambda x: x, "every 7th": lambda x: (x % 7 == 0).long()}
    for name, (z, estimate, uniform) in weighted_estimates(priority, functions, 32, 3000).items():
        assert abs(z) < 4.5, (name, z)  # a correct sampler fails this with p < 1e-5 (seeded)
        assert estimate == pytest.approx(uniform, rel=0.05), name


def test_at_beta_one_weighted_expectations_are_uniform_expectations_lognormal():
    """10,000 lognormal priorities (batch-wise normalization: the low half got 0.83x)."""
    g = torch.Generator().manual_seed(7)
    priority = torch.exp(torch.randn(10_000, generator=g))
    low_rows = priority < priority.median()
    functions = {
        "low half": lambda x: low_rows[x].long(),
        "row id": lambda x: x,
        "priority": lambda x: priority[x],  # w * p is the same for every row: exact
    }
    for name, (z, estimate, uniform) in weighted_estimates(priority, functions, 256, 400).items():
        assert abs(z) < 4.5, (name, z)
        assert estimate == pytest.approx(uniform, rel=0.03), name


# -- the ring, emptying, rows written behind the sampler's back --------------------------------


def test_ring_wrap_around():
    sampler = PrioritizedSampler(alpha=1.0)
    storage = filled(8, 8, sampler)
    sampler.update_priority(torch.arange(8), torch.arange(8, dtype=torch.float64))
    top = sampler.max_priority
    index = storage.extend(rows(3, 8))  # overwrites slots 0, 1, 2
    sampler.on_extend(index, storage)
    assert index.tolist() == [0, 1, 2]
    assert sampler.tree.get(torch.arange(8)).tolist() == pytest.approx(
        [top] * 3 + [k + 1e-6 for k in range(3, 8)]
    )
    g = torch.Generator().manual_seed(0)
    drawn = sampler.sample(storage, 4096, g)
    assert drawn.min() >= 0 and drawn.max() < 8
    index = storage.extend(rows(20, 11))  # more rows than the capacity in one call
    sampler.on_extend(index, storage)
    assert sampler.tree.leaves.tolist() == pytest.approx([top] * 8)


def test_rows_written_without_on_extend_get_the_default_priority():
    sampler = PrioritizedSampler(alpha=1.0)
    storage = filled(6, 2, sampler)
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([3.0, 0.0]))
    storage.extend(rows(6, 2))  # behind the sampler's back, wrapping the ring
    g = torch.Generator().manual_seed(0)
    sampler.sample(storage, 4, g)
    top = 3.0 + 1e-6
    assert sampler.tree.leaves.tolist() == pytest.approx([top] * 6)


def test_frozen_storage_needs_no_on_extend():
    storage = FrozenStorage.from_tensordict(rows(50))
    sampler = PrioritizedSampler()
    g = torch.Generator().manual_seed(0)
    index = sampler.sample(storage, 100, g)
    assert index.max() < 50 and sampler.tree.total() == 50.0
    assert sampler.weight(index, storage).tolist() == [1.0] * 100


def test_emptied_storage_draws_only_live_rows():
    sampler = PrioritizedSampler()
    storage = filled(10, 10, sampler)
    storage.empty()
    g = torch.Generator().manual_seed(0)
    with pytest.raises(EmptyBufferError, match=r"the source holds no rows; extend it first"):
        sampler.sample(storage, 4, g)
    sampler.on_extend(storage.extend(rows(3)), storage)
    assert sampler.sample(storage, 1000, g).max() < 3
    assert sampler.tree.total() == 3.0


# -- state, reproducibility, randomness --------------------------------------------------------


def test_state_dict_round_trip_reproduces_samples():
    sampler = PrioritizedSampler(alpha=0.8, beta=0.3)
    storage = filled(32, 20, sampler)
    g = torch.Generator().manual_seed(7)
    sampler.update_priority(torch.arange(20), torch.rand(20, generator=g) * 5)
    sampler.beta = 0.9
    state = sampler.state_dict()
    assert state["priorities"].shape == (20,)  # the filled rows only, not the capacity
    restored = PrioritizedSampler(alpha=0.8, beta=0.3)
    restored.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert restored.beta == 0.9 and restored.max_priority == sampler.max_priority
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, b = sampler.sample(storage, 64, g1), restored.sample(storage, 64, g2)
    assert torch.equal(a, b)
    assert torch.equal(sampler.weight(a, storage), restored.weight(b, storage))
    assert all(
        torch.equal(a, b)
        for a, b in zip(sampler.tree.levels(), restored.tree.levels(), strict=True)
    )
    # and both carry on identically
    for s in (sampler, restored):
        s.on_extend(
            storage.extend(rows(2, 20)) if s is sampler else torch.tensor([20, 21]), storage
        )
    assert all(
        torch.equal(a, b)
        for a, b in zip(sampler.tree.levels(), restored.tree.levels(), strict=True)
    )


def test_state_dict_before_any_row():
    state = PrioritizedSampler().state_dict()
    restored = PrioritizedSampler()
    restored.load_state_dict(state)
    assert restored.tree is None
    with pytest.raises(
        ValueError, match=r"PrioritizedSampler state lacks 'priorities'; expected keys"
    ):
        restored.load_state_dict({"capacity": 3})


def test_same_seed_same_samples_and_global_rng_untouched():
    sampler = PrioritizedSampler()
    storage = filled(100, 100, sampler)
    before = torch.random.get_rng_state()
    a = sampler.sample(storage, 50, torch.Generator().manual_seed(5))
    b = sampler.sample(storage, 50, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert torch.equal(before, torch.random.get_rng_state())


def test_config_repr_equality_pickle():
    s = PrioritizedSampler(0.7, 0.5, 1e-4, stratified=False)
    assert isinstance(s, Sampler) and s.unit == 1
    assert s.config() == {"alpha": 0.7, "beta": 0.5, "eps": 1e-4, "stratified": False}
    assert PrioritizedSampler(**json.loads(json.dumps(s.config()))) == s
    assert repr(s) == "PrioritizedSampler(alpha=0.7, beta=0.5, eps=0.0001, stratified=False)"
    storage = filled(8, 8, s)
    s.update_priority(torch.arange(8), torch.arange(8.0))
    back = pickle.loads(pickle.dumps(s))
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(back.sample(storage, 16, g1), s.sample(storage, 16, g2))


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"alpha": -0.1},
            ValueError,
            r"alpha must be greater or equal than 0, got alpha=-0.1 \(0 samples uniformly",
        ),
        ({"alpha": float("nan")}, ValueError, r"alpha must be a finite number, got nan"),
        ({"beta": -1}, ValueError, r"beta must be a finite number >= 0, got -1.0"),
        ({"beta": float("inf")}, ValueError, r"beta must be a finite number >= 0, got inf"),
        ({"eps": 0.0}, ValueError, r"eps must be a finite number > 0, got 0.0"),
        ({"eps": float("inf")}, ValueError, r"eps must be a finite number > 0, got inf"),
        ({"alpha": "0.6"}, TypeError, r"alpha must be a number, got str '0.6'"),
        ({"stratified": 1}, TypeError, r"stratified must be True or False, got int 1"),
        ({"max_capacity": 0}, ValueError, r"max_capacity must be an int >= 1, got 0"),
        (
            {"max_capacity": 2.5},
            TypeError,
            r"max_capacity must be an int, got float 2.5; it is the max_size",
        ),
    ],
)
def test_invalid_config(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrioritizedSampler(**kwargs)


def test_beta_setter_validates():
    s = PrioritizedSampler()
    with pytest.raises(ValueError, match=r"beta must be a finite number >= 0, got -2.0"):
        s.beta = -2.0
    assert s.beta == 0.4
    s.beta = 1.1  # TorchRL allows beta > 1 (its tutorial uses 1.1)
    assert s.beta == 1.1 and PrioritizedSampler(max_capacity=4, alpha=0.7, beta=1.1).beta == 1.1


def test_update_priority_errors():
    sampler = PrioritizedSampler()
    with pytest.raises(
        IndexError, match=r"slot 0: the source holds 0 rows \(sample from it first\)"
    ):
        sampler.update_priority(torch.tensor([0]), torch.tensor([1.0]))
    filled(10, 5, sampler)
    with pytest.raises(
        ValueError,
        match=r"priority has shape \[3\] but index has shape \[2\]; pass one priority per index",
    ):
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(
        ValueError, match=r"priority must be finite, got \[nan\] at positions \[1\]"
    ):
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(
        ValueError, match=r"priority must be finite, got \[inf\] at positions \[0\]"
    ):
        sampler.update_priority(torch.tensor([0]), torch.tensor([float("inf")]))
    with pytest.raises(IndexError, match=r"slot 5: the source holds 5 rows \(valid slots: 0..4\)"):
        sampler.update_priority(torch.tensor([0, 5]), torch.tensor([1.0, 1.0]))
    with pytest.raises(IndexError, match=r"slot -1"):
        sampler.update_priority(torch.tensor([-1]), torch.tensor([1.0]))
    with pytest.raises(TypeError, match=r"index must hold integer slots, got dtype torch.float32"):
        sampler.update_priority(torch.tensor([0.0]), torch.tensor([1.0]))
    with pytest.raises(
        TypeError, match=r"priority must be a real-valued tensor, got dtype torch.bool"
    ):
        sampler.update_priority(torch.tensor([0]), torch.tensor([True]))
    assert sampler.tree.leaves[:5].tolist() == [1.0] * 5  # failed calls changed nothing


def test_one_sampler_per_storage():
    sampler = PrioritizedSampler()
    filled(10, 5, sampler)
    other = LazyTensorStorage(20)
    other.extend(rows(3))
    with pytest.raises(
        ValueError, match=r"tracks a storage of max_size 10, got one of max_size 20"
    ):
        sampler.sample(other, 2, torch.Generator())


# -- through the buffers -----------------------------------------------------------------------


def test_replay_buffer_weights_and_updates():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100), sampler=PrioritizedSampler(alpha=1.0, beta=1.0), generator=0
    )
    rb.extend(rows(100))
    rb.update_priority(torch.arange(100), torch.cat([torch.ones(99), torch.tensor([99.0])]))
    batch, info = rb.sample(64, return_info=True)
    top = batch["x"] == 99
    assert 20 < int(top.sum()) < 44  # half of the mass
    # (p_min / p) ** beta: 1 for the rows of priority 1, about 1/99 for the heavy row
    assert info["weight"][~top].tolist() == [1.0] * int((~top).sum())
    assert info["weight"][top].tolist() == pytest.approx(
        [(1 + 1e-6) / (99 + 1e-6)] * int(top.sum())
    )


def test_priority_updates_reach_the_online_source():
    offline = ReplayBuffer(storage=LazyTensorStorage(50))
    offline.extend(rows(50, 1000))
    sampler = PrioritizedSampler(alpha=1.0)
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=20,
        online_sampler=sampler,
        offline_fraction=0.5,
        batch_size=32,
        generator=0,
    )
    rb.extend(rows(20))
    batch, info = rb.sample(return_info=True)
    online = info["source"] == 1
    assert info["weight"][~online].tolist() == [1.0] * int((~online).sum())
    rb.update_priority(info, torch.where(online, torch.tensor(5.0), torch.tensor(0.0)))
    touched = info["index"][online].unique()
    assert sampler.tree.get(touched).tolist() == pytest.approx([5.0 + 1e-6] * touched.numel())


@pytest.mark.parametrize("device", devices)
def test_device(device):
    sampler = PrioritizedSampler()
    storage = filled(64, 64, sampler, device=device)
    sampler.update_priority(torch.arange(64, device=device), torch.rand(64, device=device))
    index = sampler.sample(storage, 32, torch.Generator().manual_seed(0))
    assert index.device.type == device and sampler.tree.device.type == device
    assert sampler.weight(index, storage).device.type == device


# -- issue 11.7: states and priorities that would break the sampler are refused -----------------


def prioritized_buffer(capacity=10, n=10, **kwargs) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=PrioritizedSampler(alpha=1.0, **kwargs),
        batch_size=4,
        generator=0,
    )
    rb.extend(rows(n))
    rb.update_priority(torch.arange(n), torch.arange(1.0, n + 1))
    return rb


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"capacity": 20},
            r"saved for a storage of max_size 20, this sampler serves one of max_size 10",
        ),
        (  # a capacity that would size a huge allocation is refused before any allocation
            {"capacity": 2**50},
            r"saved for a storage of max_size 1125899906842624, this sampler serves one of max_size 10",
        ),
        ({"max_priority": -1.0}, r"'max_priority' must be a number in \(0, .*got -1.0"),
        ({"max_priority": 0.0}, r"'max_priority' must be a number in \(0, .*got 0.0"),
        ({"max_priority": float("nan")}, r"'max_priority' must be a number in \(0, .*got nan"),
        ({"max_priority": 1e308}, r"'max_priority' must be a number in \(0, 8.988e\+306\]"),
        ({"priorities": torch.full((10,), 1e308, dtype=torch.float64)}, r"at most 8.988e\+306 for"),
        ({"priorities": torch.tensor([-1.0] * 10)}, r"finite, >= 0 .*got values in \[-1.0, -1.0\]"),
        ({"priorities": torch.ones(11)}, r"11 priorities saved for a capacity of 10"),
        ({"priorities": "ones"}, r"'priorities' must be a real tensor, got str 'ones'"),
        ({"capacity": -3}, r"'capacity' must be an int >= 0, got int -3"),
        ({"write_count": 2.5}, r"'write_count' must be an int >= -1, got float 2.5"),
        ({"beta": -2.0}, r"beta' must be a finite number >= 0, got -2.0"),
        ({"alpha": -1.0}, r"alpha' must be a finite number >= 0, got -1.0"),
        ({"max_raw": float("nan")}, r"max_raw' must be a finite number >= 0, got nan"),
    ],
)
def test_a_crafted_sampler_state_is_refused_and_changes_nothing(edit, message):
    rb = prioritized_buffer()
    state = rb.state_dict()
    before = rb.state_dict()
    state["sampler"]["state"].update(edit)
    with pytest.raises(CheckpointError, match=message):
        rb.load_state_dict(state)
    assert_state_equal(before, rb.state_dict())
    with pytest.raises(CheckpointError, match=message):  # the sampler alone says the same
        rb.sampler.load_state_dict(state["sampler"]["state"])
    assert_state_equal(before, rb.state_dict())
    rb.sample()  # and the buffer still works


def test_a_fresh_buffer_checks_the_saved_capacity_against_its_ring():
    """The sampler knows its ring from the buffer's construction, before any row is written."""
    state = prioritized_buffer(capacity=20, n=10).state_dict()
    fresh = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(alpha=1.0))
    with pytest.raises(CheckpointError, match=r"max_size 20"):  # the storage says it first
        fresh.load_state_dict(state)
    state["storage"] = prioritized_buffer(capacity=10).state_dict()["storage"]
    with pytest.raises(CheckpointError, match=r"saved for a storage of max_size 20"):
        fresh.load_state_dict(state)
    assert len(fresh) == 0 and fresh.sampler.tree.capacity == 10


def test_a_standalone_sampler_never_sizes_a_tree_by_a_saved_capacity():
    state = {"priorities": torch.ones(3), "capacity": 2**50, "max_priority": 1.0}
    sampler = PrioritizedSampler()
    sampler.load_state_dict(
        state
    )  # no storage seen: nothing to check against yet, nothing allocated
    assert sampler.tree is None
    storage = LazyTensorStorage(8)
    storage.extend(rows(3))
    with pytest.raises(CheckpointError, match=r"saved for a storage of max_size 1125899906842624"):
        sampler.attach(storage)
    with pytest.raises(CheckpointError, match=r"saved for a storage of max_size 20, this"):
        PrioritizedSampler(max_capacity=8, alpha=1, beta=1).load_state_dict(
            {"priorities": torch.ones(3), "capacity": 20, "max_priority": 1.0}
        )


def test_priorities_whose_sum_would_overflow_are_refused():
    """Issue 11.7: finite p of 1e308 each made the total inf and every draw return slot 0."""
    rb = prioritized_buffer()
    before = rb.state_dict()
    with pytest.raises(
        ValueError,
        match=r"priority \[1e\+308, 1e\+308\] at positions \[0, 1\] gives \(\|priority\| \+ eps\) "
        r"\*\* alpha = \[1e\+308, 1e\+308\], more than a tree of 10 slots can sum without "
        r"overflowing \(at most 8.988e\+306\); scale the priorities down",
    ):
        rb.update_priority(torch.tensor([3, 4]), torch.tensor([1e308, 1e308], dtype=torch.float64))
    assert_state_equal(before, rb.state_dict())
    # the largest allowed value keeps the tree finite, and draws follow the priorities
    top = torch.finfo(torch.float64).max / 20
    rb.update_priority(torch.arange(10), torch.full((10,), top, dtype=torch.float64))
    assert math.isfinite(rb.sampler.tree.total())
    drawn = torch.cat([rb.sample(64)["x"] for _ in range(20)])
    assert torch.bincount(drawn, minlength=10).min() > 60  # about 128 each, never all slot 0


def test_a_priority_that_underflows_to_zero_is_refused():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4), sampler=PrioritizedSampler(alpha=100.0, eps=1e-8)
    )
    rb.extend(rows(4))
    with pytest.raises(ValueError, match=r"priority \[0.0\] at positions \[1\] gives .* = 0"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 0.0]))


# -- issue 11.6: check a whole update, then apply it --------------------------------------------


def test_check_priority_names_the_callers_positions_and_changes_nothing():
    sampler = PrioritizedSampler(alpha=1.0)
    filled(10, 10, sampler)
    leaves = sampler.tree.leaves.clone()
    with pytest.raises(ValueError, match=r"got \[nan\] at positions \[9\]") as err:
        sampler.check_priority(
            torch.tensor([2, 3]), torch.tensor([1.0, math.nan]), positions=torch.tensor([5, 9])
        )
    assert err.value.position == 9
    with pytest.raises(ValueError, match=r"got \[inf\] at positions \[1\]") as err:
        sampler.check_priority(torch.tensor([2, 3]), torch.tensor([1.0, math.inf]))
    assert err.value.position == 1
    checked = sampler.check_priority(torch.tensor([2, 3]), torch.tensor([5.0, 7.0]))
    assert torch.equal(sampler.tree.leaves, leaves)  # checking applies nothing
    sampler.apply_priority(checked)
    assert sampler.tree.get(torch.tensor([2, 3])).tolist() == pytest.approx([5.0, 7.0])
    assert sampler.max_priority == pytest.approx(7.0)


def test_a_mixing_buffer_names_the_batch_row_of_a_bad_priority():
    from mixreplay import MixtureReplayBuffer

    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(10), "b": LazyTensorStorage(10)},
        {"a": 1, "b": 1},
        samplers={"a": PrioritizedSampler(alpha=1.0), "b": PrioritizedSampler(alpha=1.0)},
        generator=0,
    )
    mix.extend(rows(10), source="a")
    mix.extend(rows(10, 100), source="b")
    _, info = mix.sample(8, return_info=True)
    before = mix.state_dict()
    priority = torch.ones(8, dtype=torch.float64)
    priority[6] = 1e308  # the second source's third row
    with pytest.raises(ValueError, match=r"row 6 of the batch"):
        mix.update_priority(info, priority)
    assert_state_equal(before, mix.state_dict())


# -- restores of the rows ------------------------------------------------------------------------


def test_rows_restored_without_the_sampler_get_the_default_priority():
    """A restore of the storage alone replaces every row: no priority of the old rows applies."""
    rb = prioritized_buffer()
    other = prioritized_buffer()
    rb.update_priority(torch.arange(10), torch.full((10,), 50.0))
    rb.update_priority(torch.tensor([0]), torch.tensor([0.5]))
    rb.storage.load_state_dict(other.storage.state_dict())  # same counters, new rows
    rb.sample()
    top = 50.0 + 1e-6
    assert rb.sampler.tree.leaves.tolist() == pytest.approx([top] * 10)
    # restoring the whole buffer restores the sampler's priorities with the rows
    rb.load_state_dict(other.state_dict())
    rb.sample()
    assert torch.equal(rb.sampler.tree.leaves, other.sampler.tree.leaves)


# -- issue 10.6: TorchRL's spelling -----------------------------------------------------------


def test_torchrl_spelling_keywords_and_positional():
    t = PrioritizedSampler(max_capacity=10, alpha=0.7, beta=0.5)
    assert (t.max_capacity, t.alpha, t.beta, t.eps) == (10, 0.7, 0.5, 1e-8)  # TorchRL's eps
    assert PrioritizedSampler(10, 0.7, 0.5) == t  # an int first: TorchRL's order
    assert PrioritizedSampler(10, 0.7, 0.5, 1e-3).eps == 1e-3
    assert PrioritizedSampler(10, 0.7, beta=0.5) == t
    m = PrioritizedSampler(0.7, 0.5)  # a float first: mixreplay's order (alpha, beta, eps)
    assert (m.max_capacity, m.alpha, m.beta, m.eps) == (None, 0.7, 0.5, 1e-6)
    assert repr(t) == (
        "PrioritizedSampler(max_capacity=10, alpha=0.7, beta=0.5, eps=1e-08, stratified=True)"
    )
    assert t != PrioritizedSampler(alpha=0.7, beta=0.5, eps=1e-8)
    t = PrioritizedSampler(
        max_capacity=10, alpha=1.0, beta=1.0, dtype=torch.float64, reduction="mean"
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=t, generator=0)
    rb.extend(rows(4))
    assert t.max_size == 10 and rb.sample(8)["x"].max() < 4


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: PrioritizedSampler(10),
            TypeError,
            r"called TorchRL's way \(max_capacity=10, alpha, beta, eps\) is missing alpha and "
            r"beta; pass them, or call it mixreplay's way without max_capacity",
        ),
        (
            lambda: PrioritizedSampler(max_capacity=10, alpha=0.5),
            TypeError,
            r"is missing beta",
        ),
        (
            lambda: PrioritizedSampler(0.6, alpha=0.5),
            TypeError,
            r"got two values for alpha: \(0.6,\) is read in the order \(alpha, beta, eps\)",
        ),
        (
            lambda: PrioritizedSampler(10, 0.6, 0.4, 1e-3, 5),
            TypeError,
            r"takes at most 4 positional arguments \(max_capacity, alpha, beta, eps\), got 5",
        ),
        (
            lambda: PrioritizedSampler(max_capacity=10, alpha=1, beta=1, dtype=torch.float16),
            TypeError,
            r"does not support TorchRL's dtype=torch.float16 \(only torch.float32 / "
            r"torch.float64, which is mixreplay's behaviour\); mixreplay keeps priorities in "
            r"float64 whatever dtype= says",
        ),
        (
            lambda: PrioritizedSampler(max_capacity=10, alpha=1, beta=1, replacement=False),
            TypeError,
            r"TorchRL's replacement=False .*PrioritizedSampler has no without-replacement "
            r"variant; cannot be instantiated with replacement=False",
        ),
        (
            lambda: PrioritizedSampler(alpha=1, max_priority_within_buffer=1),
            TypeError,
            r"PrioritizedSampler max_priority_within_buffer must be True or False, got int 1",
        ),
        (
            lambda: PrioritizedSampler(alpha=1, reduction="sum"),
            TypeError,
            r"TorchRL's reduction='sum'",
        ),
        (
            lambda: PrioritizedSampler(alpha=1, capacity=10),
            TypeError,
            r"PrioritizedSampler\(\) got an unexpected keyword argument 'capacity'",
        ),
        (
            lambda: ReplayBuffer(
                storage=LazyTensorStorage(8),
                sampler=PrioritizedSampler(max_capacity=10, alpha=1, beta=1),
            ),
            ValueError,
            r"PrioritizedSampler\(max_capacity=10\) cannot serve a storage of max_size 8; build it "
            r"with max_capacity=8",
        ),
        (
            lambda: ReplayBuffer(
                storage=LazyTensorStorage(8), sampler=PrioritizedSampler(alpha=1, device="meta")
            ),
            ValueError,
            r"PrioritizedSampler\(device='meta'\) cannot serve a storage on cpu",
        ),
    ],
)
def test_torchrl_spelling_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.torchrl
def test_every_torchrl_prioritized_sampler_argument_is_handled():
    import inspect

    from torchrl.data.replay_buffers import PrioritizedSampler as TorchRLPrioritizedSampler

    from mixreplay.samplers.prioritized import _TORCHRL

    ours = set(inspect.signature(PrioritizedSampler.__init__).parameters) | set(_TORCHRL)
    theirs = set(inspect.signature(TorchRLPrioritizedSampler.__init__).parameters)
    assert theirs - {"self"} <= ours


# -- TorchRL's meanings: beta > 1, annealed alpha and beta, max_priority_within_buffer ------------


def leaves(sampler: PrioritizedSampler, n: int) -> torch.Tensor:
    assert sampler.tree is not None
    return sampler.tree.leaves[:n].clone()


def test_beta_above_one_over_corrects():
    sampler = PrioritizedSampler(alpha=1.0, beta=1.1)  # TorchRL's tutorial value
    storage = filled(5, 5, sampler)
    sampler.update_priority(torch.arange(5), torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0]))
    w = sampler.weight(torch.arange(5), storage)
    p = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0], dtype=torch.float64) + 1e-6
    torch.testing.assert_close(w, ((p.min() / p) ** 1.1).float())


def test_setting_alpha_reweights_every_stored_priority():
    raw = torch.tensor([0.5, 1.0, 3.0, 10.0, 0.0, 7.0], dtype=torch.float64)
    sampler = PrioritizedSampler(alpha=1.0, beta=0.5, eps=1e-3)
    storage = filled(8, 6, sampler)
    sampler.update_priority(torch.arange(6), raw)
    for alpha in (0.5, 0.2, 0.9, 1.3):
        sampler.alpha = alpha
        assert sampler.alpha == alpha
        torch.testing.assert_close(leaves(sampler, 6), (raw + 1e-3) ** alpha)
        assert sampler.max_priority == pytest.approx((10.0 + 1e-3) ** alpha)
        assert sampler.default_priority == pytest.approx(10.0)
        # the same as a sampler built with this alpha and given the same priorities
        fresh = PrioritizedSampler(alpha=alpha, beta=0.5, eps=1e-3)
        filled(8, 6, fresh)
        fresh.update_priority(torch.arange(6), raw)
        torch.testing.assert_close(leaves(sampler, 6), leaves(fresh, 6))
        assert sampler.tree.min() == pytest.approx(fresh.tree.min())
    index = storage.extend(rows(2))  # new rows get the re-weighted max
    sampler.on_extend(index, storage)
    assert leaves(sampler, 8)[6:].tolist() == pytest.approx([(10.0 + 1e-3) ** 1.3] * 2)


def test_setting_alpha_before_any_row_and_to_the_same_value():
    sampler = PrioritizedSampler(alpha=0.6)
    sampler.alpha = 0.6
    sampler.alpha = 0.0
    sampler.alpha = 0.3  # nothing held: no warning (warnings are errors in the suite)
    assert sampler.alpha == 0.3 and sampler.max_priority == 1.0


def test_setting_alpha_away_from_zero_warns_and_keeps_uniform_priorities():
    sampler = PrioritizedSampler(alpha=0.0, beta=1.0)
    filled(4, 4, sampler)
    sampler.update_priority(torch.arange(4), torch.tensor([3.0, 4.0, 1.0, 2.0]))
    with pytest.warns(UserWarning, match=r"alpha changed away from 0 \(to 0.5\) while rows hold"):
        sampler.alpha = 0.5
    assert leaves(sampler, 4).tolist() == [1.0] * 4  # unrecoverable: uniform until updated
    assert sampler.max_priority == pytest.approx((4.0 + 1e-6) ** 0.5)  # the raw max was kept
    sampler.update_priority(torch.tensor([0]), torch.tensor([3.0]))
    assert float(leaves(sampler, 1)) == pytest.approx((3.0 + 1e-6) ** 0.5)


def test_an_alpha_that_would_overflow_the_tree_is_refused_and_changes_nothing():
    sampler = PrioritizedSampler(alpha=1.0)
    filled(4, 4, sampler)
    sampler.update_priority(
        torch.arange(4), torch.tensor([1e100, 1.0, 2.0, 3.0], dtype=torch.float64)
    )
    before = sampler.state_dict()
    with pytest.raises(
        ValueError,
        match=r"alpha=4 would raise the largest stored \(\|priority\| \+ eps\) \*\* alpha to "
        r"1e\+400|alpha=4 would raise the largest stored .* more than a tree of 4 slots can sum",
    ):
        sampler.alpha = 4.0
    assert sampler.alpha == 1.0
    assert_state_equal(before, sampler.state_dict())
    with pytest.raises(
        ValueError,
        match=r"PrioritizedSampler alpha must be greater or equal than 0, got alpha=-1.0",
    ):
        sampler.alpha = -1.0


def test_alpha_and_beta_are_saved_with_the_buffer(tmp_path):
    """The saved alpha and beta replace the constructor's: they may have been annealed."""
    rb = prioritized_buffer()
    rb.update_priority(torch.arange(10), torch.arange(10, dtype=torch.float64))
    rb.sampler.alpha, rb.sampler.beta = 0.3, 1.2
    rb.dumps(tmp_path / "ck")
    twin = prioritized_buffer()
    twin.loads(tmp_path / "ck")
    assert (twin.sampler.alpha, twin.sampler.beta) == (0.3, 1.2)
    torch.testing.assert_close(leaves(twin.sampler, 10), leaves(rb.sampler, 10))
    assert twin.sampler.default_priority == pytest.approx(10.0)  # prioritized_buffer's 1..10
    a, b = rb.sample(6, return_info=True), twin.sample(6, return_info=True)
    assert torch.equal(a[1]["index"], b[1]["index"]) and torch.equal(a[1]["weight"], b[1]["weight"])


def test_a_state_saved_before_alpha_and_max_raw_were_kept_loads():
    rb = prioritized_buffer()
    rb.update_priority(torch.arange(10), torch.full((10,), 40.0))
    state = rb.sampler.state_dict()
    for key in ("alpha", "max_raw"):
        del state[key]
    twin = prioritized_buffer()
    twin.sampler.load_state_dict(state)
    assert twin.sampler.max_priority == pytest.approx(rb.sampler.max_priority)
    assert twin.sampler.default_priority == pytest.approx(40.0)
    twin.sampler.alpha = 0.5  # the raw max was recovered, so re-weighting it is exact
    assert twin.sampler.max_priority == pytest.approx((40.0 + twin.sampler.eps) ** 0.5)


def test_max_priority_within_buffer_gives_new_rows_the_largest_priority_held():
    sampler = PrioritizedSampler(alpha=1.0, beta=1.0, max_priority_within_buffer=True)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler, generator=0)
    rb.extend(rows(4))
    rb.update_priority(torch.arange(4), torch.tensor([9.0, 2.0, 5.0, 1.0]))
    assert sampler.max_priority == pytest.approx(9.0 + 1e-6)
    rb.extend(rows(1, 4))  # overwrites slot 0, the row of priority 9: it leaves
    assert float(leaves(sampler, 1)) == pytest.approx(5.0 + 1e-6)  # the largest left
    assert sampler.default_priority == pytest.approx(5.0)
    rb.update_priority(torch.tensor([2]), torch.tensor([0.5]))  # lowering the max lowers it
    assert sampler.max_priority == pytest.approx(5.0 + 1e-6)  # slot 0 holds 5 now
    rb.update_priority(torch.tensor([0]), torch.tensor([0.1]))
    assert sampler.max_priority == pytest.approx(2.0 + 1e-6)
    # without it, new rows keep the largest ever assigned
    plain = PrioritizedSampler(alpha=1.0, beta=1.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=plain, generator=0)
    rb.extend(rows(4))
    rb.update_priority(torch.arange(4), torch.tensor([9.0, 2.0, 5.0, 1.0]))
    rb.extend(rows(1, 4))
    assert float(leaves(plain, 1)) == pytest.approx(9.0 + 1e-6)


def test_max_priority_within_buffer_survives_a_checkpoint(tmp_path):
    def make():
        sampler = PrioritizedSampler(alpha=0.7, beta=0.5, max_priority_within_buffer=True)
        return ReplayBuffer(storage=LazyTensorStorage(6), sampler=sampler, generator=0)

    rb = make()
    rb.extend(rows(6))
    rb.update_priority(torch.arange(6), torch.tensor([1.0, 8.0, 2.0, 3.0, 4.0, 5.0]))
    rb.dumps(tmp_path / "ck")
    twin = make()
    twin.loads(tmp_path / "ck")
    for buffer in (rb, twin):
        buffer.extend(rows(2, 6))  # overwrites slots 0 and 1: the 8 leaves
    torch.testing.assert_close(leaves(twin.sampler, 6), leaves(rb.sampler, 6))
    assert float(leaves(twin.sampler, 2)[1]) == pytest.approx((5.0 + 1e-6) ** 0.7)
    with pytest.raises(
        CheckpointError, match=r"max_priority_within_buffer: saved True, buffer None"
    ):
        plain = ReplayBuffer(
            storage=LazyTensorStorage(6), sampler=PrioritizedSampler(alpha=0.7, beta=0.5)
        )
        plain.loads(tmp_path / "ck")


def test_annealing_alpha_and_beta_step_by_step():
    """What TorchRL's LinearScheduler / StepScheduler do, written as the loop they run.

    (Those classes check ``isinstance`` of TorchRL's own ReplayBuffer or Sampler and refuse
    a mixreplay buffer; a row of "Differences from TorchRL".)"""
    sampler = PrioritizedSampler(max_capacity=100, alpha=0.8, beta=0.4)
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, generator=0)
    rb.extend(rows(100))
    priority = torch.linspace(0.1, 10.0, 100).double()
    rb.update_priority(torch.arange(100), priority)
    for step in range(1, 21):
        rb.sample(8)
        sampler.alpha = 0.8 + (0.2 - 0.8) * min(step / 10, 1.0)  # linear to 0.2 in 10 steps
        if step % 2 == 0:
            sampler.beta = min(sampler.beta + 0.1, 1.1)  # additive steps, capped at 1.1
    assert sampler.alpha == pytest.approx(0.2) and sampler.beta == pytest.approx(1.1)
    torch.testing.assert_close(leaves(sampler, 100), (priority + 1e-8) ** 0.2)


@pytest.mark.torchrl
def test_torchrls_parameter_schedulers_refuse_a_mixreplay_buffer():
    """Pinned so the row in "Differences from TorchRL" is updated if TorchRL starts accepting it."""
    from torchrl.data.replay_buffers.scheduler import LinearScheduler

    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=PrioritizedSampler(alpha=0.8))
    with pytest.raises(TypeError, match=r"ParameterScheduler only supports Sampler class"):
        LinearScheduler(rb, param_name="alpha", final_value=0.2, num_steps=10)


def test_the_info_holds_the_weights_under_torchrls_name_too():
    rb = prioritized_buffer()
    _, info = rb.sample(6, return_info=True)
    assert info["priority_weight"] is info["weight"] or torch.equal(
        info["priority_weight"], info["weight"]
    )
    plain = ReplayBuffer(storage=LazyTensorStorage(4), generator=0)
    plain.extend(rows(4))
    assert set(plain.sample(2, return_info=True)[1].keys()) == {"index"}


@pytest.mark.parametrize(
    "priorities",
    [
        [1e-30] * 32 + [1e30] * 32,  # likelier by 1e60: the ratio underflows float32
        [0.0] * 32 + [1.0] * 32,  # zero priorities with a tiny eps (1e-300 after alpha)
    ],
)
def test_weights_stay_above_zero_however_far_apart_the_priorities(priorities):
    """A weight of 0 would zero that row's loss: weights are in (0, 1] at any spread."""
    rb = ReplayBuffer(
        storage=LazyTensorStorage(64),
        sampler=PrioritizedSampler(alpha=1.0, beta=1.0, eps=1e-300),
        batch_size=64,
        generator=0,
    )
    rb.extend(rows(64))
    rb.update_priority(torch.arange(64), torch.tensor(priorities, dtype=torch.float64))
    for _ in range(5):
        _, info = rb.sample(return_info=True)
        w = info["weight"]
        assert bool((w > 0).all()) and bool((w <= 1).all()), w
