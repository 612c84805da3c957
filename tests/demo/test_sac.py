"""The learner's pieces: TD target, temperature, policy density, critics, and where batches come from."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from mixreplay import LazyTensorStorage, OfflineDataset, OfflineToOnlineReplayBuffer, ReplayBuffer
from mixreplay.demo.sac import SAC, SACConfig, alpha_loss, td_target

OBS_LOW, OBS_HIGH = np.array([-1.2, -0.07]), np.array([0.6, 0.07])
ACT_LOW, ACT_HIGH = np.array([-1.0]), np.array([1.0])


def make_agent(**config) -> SAC:
    return SAC(
        OBS_LOW, OBS_HIGH, ACT_LOW, ACT_HIGH, config=SACConfig(**{"hidden": 32, **config}), seed=0
    )


def ted(
    n: int,
    *,
    reward: float = 1.0,
    terminated: bool = False,
    truncated: bool = False,
    tag: float = 0.0,
) -> TensorDict:
    g = torch.Generator().manual_seed(n)
    obs = torch.rand(n, 2, generator=g) * torch.tensor([1.8, 0.14]) + torch.tensor([-1.2, -0.07])
    term = torch.full((n, 1), terminated)
    trunc = torch.full((n, 1), truncated)
    false = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": obs,
            "action": torch.full((n, 1), tag),
            "done": false,
            "terminated": false.clone(),
            "truncated": false.clone(),
            "next": {
                "observation": obs.flip(0),
                "reward": torch.full((n, 1), reward),
                "done": term | trunc,
                "terminated": term,
                "truncated": trunc,
            },
        },
        [n],
    )


# -- target: bootstrap through truncation, never through termination ------------------------


def test_td_target_terminated_does_not_bootstrap():
    reward = torch.tensor([[1.0], [2.0]])
    next_value = torch.tensor([[50.0], [-50.0]])
    target = td_target(reward, next_value, torch.tensor([[True], [True]]), 0.99)
    assert torch.equal(target, reward)


def test_td_target_live_and_truncated_bootstrap():
    reward = torch.tensor([[1.0]])
    next_value = torch.tensor([[10.0]])
    target = td_target(reward, next_value, torch.tensor([[False]]), 0.9)
    assert target.item() == pytest.approx(1.0 + 0.9 * 10.0)


def test_critic_target_masks_terminated_rows_only():
    terminated = make_agent().critic_target_values(ted(64, reward=3.0, terminated=True))
    assert torch.equal(terminated, torch.full((64, 1), 3.0))
    # truncated = time limit: done is True, but the next state still has a value; two fresh
    # learners (same seed, same noise) give a truncated row exactly a live row's target
    truncated = make_agent().critic_target_values(ted(64, reward=3.0, truncated=True))
    live = make_agent().critic_target_values(ted(64, reward=3.0))
    assert torch.equal(truncated, live)
    assert not torch.allclose(truncated, torch.full((64, 1), 3.0))


def test_critic_update_uses_terminated_not_done():
    """With gamma=1 and a huge next value, a truncated row's target must be far from its reward."""
    agent = make_agent(gamma=1.0)
    with torch.no_grad():
        agent.critic_target.biases[-1].fill_(1000.0)
    target = agent.critic_target_values(ted(8, reward=0.0, truncated=True))
    assert (target > 500).all()
    target = agent.critic_target_values(ted(8, reward=0.0, terminated=True))
    assert (target == 0).all()


# -- temperature ---------------------------------------------------------------------------


@pytest.mark.parametrize(("entropy", "direction"), [(-3.0, 1), (2.0, -1)])
def test_alpha_loss_raises_alpha_when_entropy_below_target(entropy, direction):
    target_entropy = -1.0
    log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
    log_prob = torch.full((256, 1), -entropy)  # entropy = -E[log pi]
    alpha_loss(log_alpha, log_prob, target_entropy).backward()
    # gradient = entropy - target: negative (alpha goes up under descent) when entropy < target
    assert log_alpha.grad.item() == pytest.approx(entropy - target_entropy)
    before = log_alpha.item()
    with torch.no_grad():
        log_alpha -= 0.1 * log_alpha.grad
    assert math.copysign(1, log_alpha.item() - before) == direction


def test_alpha_loss_does_not_train_the_policy():
    log_prob = torch.zeros(4, 1, requires_grad=True)
    alpha_loss(torch.tensor(0.0, requires_grad=True), log_prob, -1.0).backward()
    assert log_prob.grad is None


def test_update_moves_alpha_towards_target_entropy():
    # a target far above any reachable entropy: alpha must only grow
    agent = make_agent(target_entropy=10.0, init_alpha=0.1)
    rb = ReplayBuffer(storage=LazyTensorStorage(512), generator=0)
    rb.extend(ted(512))
    alphas = [agent.update(rb)["alpha"] for _ in range(20)]
    assert all(b > a for a, b in zip(alphas, alphas[1:]))


# -- policy density ------------------------------------------------------------------------


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    agent = make_agent()
    obs = torch.rand(32, 2)
    noise = torch.randn(32, 1, generator=torch.Generator().manual_seed(1))
    action, log_prob = agent.actor(obs, noise)
    mean, log_std = agent.actor.net(obs).chunk(2, dim=-1)
    from mixreplay.demo.sac import LOG_STD_MAX, LOG_STD_MIN

    std = (LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)).exp()
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, std), [torch.distributions.TanhTransform()]
    )
    u = mean + std * noise
    expected = torch.distributions.Normal(mean, std).log_prob(u) - dist.transforms[
        0
    ].log_abs_det_jacobian(u, action)
    assert torch.allclose(log_prob, expected.sum(-1, keepdim=True), atol=1e-4)
    assert (action.abs() <= 1).all()


def test_actions_respect_action_bounds():
    agent = SAC(
        OBS_LOW,
        OBS_HIGH,
        np.array([-2.0, 0.0]),
        np.array([2.0, 1.0]),
        config=SACConfig(hidden=16),
        seed=0,
    )
    actions = agent.act_batch(np.zeros((200, 2), dtype=np.float32))
    assert actions.shape == (200, 2)
    assert (actions[:, 0] >= -2).all() and (actions[:, 0] <= 2).all()
    assert (actions[:, 1] >= 0).all() and (actions[:, 1] <= 1).all()


def test_observations_scaled_to_unit_box():
    agent = make_agent()
    scaled = agent.obs_scaler(torch.tensor(np.stack([OBS_LOW, OBS_HIGH]), dtype=torch.float32))
    assert torch.allclose(scaled, torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-6)


def test_unbounded_observations_pass_through():
    agent = SAC(
        np.array([-np.inf, 0.0]),
        np.array([np.inf, 2.0]),
        ACT_LOW,
        ACT_HIGH,
        config=SACConfig(hidden=8),
    )
    scaled = agent.obs_scaler(torch.tensor([[5.0, 2.0]]))
    assert torch.allclose(scaled, torch.tensor([[5.0, 1.0]]))


# -- critics -------------------------------------------------------------------------------


def test_ensemble_critics_are_independent_and_layer_normed():
    agent = make_agent(num_critics=4, critic_subset=2)
    q = agent.critic(torch.rand(16, 3))
    assert q.shape == (4, 16, 1)
    assert not torch.allclose(q[0], q[1])
    assert agent.critic.layer_norm and len(agent.critic.ln_scales) == 2
    rb = ReplayBuffer(storage=LazyTensorStorage(256), generator=0)
    rb.extend(ted(256))
    metrics = agent.update(rb)
    assert math.isfinite(metrics["critic_loss"])


def test_target_critics_follow_polyak():
    agent = make_agent(tau=0.5)
    before = [p.clone() for p in agent.critic_target.parameters()]
    rb = ReplayBuffer(storage=LazyTensorStorage(256), generator=0)
    rb.extend(ted(256))
    agent.update(rb)
    for old, target, online in zip(
        before, agent.critic_target.parameters(), agent.critic.parameters()
    ):
        assert torch.allclose(target, 0.5 * old + 0.5 * online, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hidden": 0}, "hidden must be a positive int"),
        ({"utd": 1.5}, "utd must be a positive int"),
        ({"num_critics": 2, "critic_subset": 3}, "critic_subset"),
        ({"tau": 0.0}, "tau must be in"),
        ({"gamma": 1.5}, "gamma must be in"),
        ({"init_alpha": 0.0}, "init_alpha must be > 0"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SACConfig(**kwargs)


def test_infinite_action_bounds_rejected():
    with pytest.raises(ValueError, match="finite action bounds"):
        SAC(OBS_LOW, OBS_HIGH, np.array([-np.inf]), np.array([np.inf]))


# -- the learner reads its batches from the buffer it is given --------------------------------


class SpyBuffer:
    def __init__(self, buffer):
        self.buffer = buffer
        self.calls: list[int] = []
        self.batches: list[TensorDict] = []

    def sample(self, batch_size=None):
        self.calls.append(batch_size)
        batch = self.buffer.sample(batch_size)
        self.batches.append(batch)
        return batch


@pytest.mark.parametrize("utd", [1, 3])
def test_update_samples_utd_batches_from_given_buffer(utd):
    agent = make_agent(utd=utd, batch_size=64)
    rb = ReplayBuffer(storage=LazyTensorStorage(256), generator=0)
    rb.extend(ted(256))
    spy = SpyBuffer(rb)
    agent.update(spy)
    assert spy.calls == [64] * utd
    agent.update(spy)
    assert spy.calls == [64] * (2 * utd)


def test_update_draws_mixed_batches_from_the_mixing_buffer():
    offline = OfflineDataset.from_tensordict(ted(500, tag=-0.5))
    mix = OfflineToOnlineReplayBuffer(
        offline, online_capacity=100, offline_fraction=0.5, generator=0
    )
    mix.extend(ted(100, tag=0.5))
    spy = SpyBuffer(mix)
    agent = make_agent(batch_size=128)
    agent.update(spy)
    (batch,) = spy.batches
    tags = batch["action"].squeeze(-1)
    assert (tags == -0.5).sum() == 64 and (tags == 0.5).sum() == 64


def test_update_changes_the_critic_towards_the_buffer_rewards():
    """Rewards only exist in the buffer: if the learner read anything else, Q would not move to them."""
    agent = make_agent(gamma=0.0, lr=1e-2, batch_size=64)
    rb = ReplayBuffer(storage=LazyTensorStorage(256), generator=0)
    rb.extend(ted(256, reward=7.0))
    for _ in range(80):
        agent.update(rb)
    q = agent.critic(
        torch.cat([agent.obs_scaler(rb.sample(64)["observation"]), torch.zeros(64, 1)], -1)
    )
    assert q.mean().item() == pytest.approx(7.0, abs=0.5)


def test_same_seed_same_learner():
    a, b = make_agent(), make_agent()
    for pa, pb in zip(a.actor.parameters(), b.actor.parameters()):
        assert torch.equal(pa, pb)
    obs = np.zeros(2, dtype=np.float32)
    assert np.array_equal(a.act(obs), b.act(obs))
