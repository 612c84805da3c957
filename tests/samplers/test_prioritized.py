import json
import math
import pickle

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    EmptyBufferError,
    FrozenStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import PrioritizedSampler, Sampler

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rows(n: int, start: int = 0) -> TensorDict:
    return TensorDict({"x": torch.arange(start, start + n)}, [n])


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
    assert w.tolist() == pytest.approx((full / full.max()).tolist())
    assert w.max().item() == 1.0  # normalized by the largest weight of the batch
    sampler.beta = 0.0
    assert sampler.weight(index, storage).tolist() == [1.0] * 4


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
        torch.equal(a, b) for a, b in zip(sampler.tree.nodes(), restored.tree.nodes(), strict=True)
    )
    # and both carry on identically
    for s in (sampler, restored):
        s.on_extend(
            storage.extend(rows(2, 20)) if s is sampler else torch.tensor([20, 21]), storage
        )
    assert all(
        torch.equal(a, b) for a, b in zip(sampler.tree.nodes(), restored.tree.nodes(), strict=True)
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
        ({"alpha": -0.1}, ValueError, r"alpha must be a finite number in \[0, inf\), got -0.1"),
        (
            {"alpha": float("nan")},
            ValueError,
            r"alpha must be a finite number in \[0, inf\), got nan",
        ),
        ({"beta": 1.5}, ValueError, r"beta must be a finite number in \[0, 1\], got 1.5"),
        ({"beta": -1}, ValueError, r"beta must be a finite number in \[0, 1\], got -1.0"),
        ({"eps": 0.0}, ValueError, r"eps must be a finite number in \(0, inf\), got 0.0"),
        ({"eps": float("inf")}, ValueError, r"eps must be a finite number in \(0, inf\), got inf"),
        ({"alpha": "0.6"}, TypeError, r"alpha must be a number, got str '0.6'"),
        ({"stratified": 1}, TypeError, r"stratified must be a bool, got int 1"),
    ],
)
def test_invalid_config(kwargs, error, message):
    with pytest.raises(error, match=message):
        PrioritizedSampler(**kwargs)


def test_beta_setter_validates():
    s = PrioritizedSampler()
    with pytest.raises(ValueError, match=r"beta must be a finite number in \[0, 1\], got 2.0"):
        s.beta = 2.0
    assert s.beta == 0.4


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
