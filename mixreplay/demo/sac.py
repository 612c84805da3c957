"""A small SAC learner with RLPD's choices, for the demo only (not part of the core API).

Soft actor-critic (Haarnoja et al., 2018) with what RLPD (Ball et al., 2023) found
matters when batches mix offline and online data: an ensemble of critics with
LayerNorm, a minimum over a random subset of the ensemble in the target, and an
update-to-data ratio (UTD) of several critic updates per environment step.

The learner never owns data: :meth:`SAC.update` draws every batch with
``buffer.sample(batch_size)`` from whatever buffer it is handed, a plain
:class:`~mixreplay.ReplayBuffer` or an :class:`~mixreplay.OfflineToOnlineReplayBuffer`.
Batches use the TED layout; the learner reads ``observation``, ``action``,
``("next", "reward")``, ``("next", "observation")`` and ``("next", "terminated")``.

Episodes that end by *termination* (the MDP reached an absorbing state) have no
future value; episodes cut by a time limit (*truncation*) do. The target
therefore masks the bootstrap with ``terminated`` only, never with ``done``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mixreplay.demo.config import SACConfig

__all__ = ["SAC", "SACConfig", "alpha_loss", "td_target"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


# -- the math, as pure functions -------------------------------------------------------------


def td_target(
    reward: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * V(s')``: bootstrap through truncation, not termination.

    Args:
        reward: ``[B, 1]``.
        next_value: soft value of the next state, ``min Q'(s', a') - alpha * log pi(a'|s')``, ``[B, 1]``.
        terminated: bool ``[B, 1]``; ``True`` where ``s'`` is absorbing. A truncated
            (time-limit) transition is *not* terminated and keeps its bootstrap.
        gamma: discount.

    Examples:
        >>> import torch
        >>> r, v = torch.tensor([[1.0], [1.0]]), torch.tensor([[10.0], [10.0]])
        >>> td_target(r, v, torch.tensor([[True], [False]]), 0.9).squeeze(-1).tolist()
        [1.0, 10.0]
    """
    return reward + gamma * (~terminated).to(reward.dtype) * next_value


def alpha_loss(
    log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """Temperature loss ``-log_alpha * (log_prob + target_entropy)``, averaged.

    Its gradient in ``log_alpha`` is ``-(mean log_prob + target_entropy)`` =
    ``entropy - target_entropy``: negative when the policy's entropy is below
    the target, so gradient descent raises the temperature, and the other way round.
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


# -- networks ------------------------------------------------------------------------------


def _uniform_(tensor: torch.Tensor, fan_in: int, generator: torch.Generator) -> None:
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        tensor.uniform_(-bound, bound, generator=generator)


class _Scaler(nn.Module):
    """Maps a box ``[low, high]`` to ``[-1, 1]``; unbounded dimensions pass through."""

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        lo = torch.as_tensor(np.asarray(low, dtype=np.float64))
        hi = torch.as_tensor(np.asarray(high, dtype=np.float64))
        finite = torch.isfinite(lo) & torch.isfinite(hi) & (hi > lo)
        scale = torch.where(finite, 2.0 / (hi - lo).where(finite, torch.ones_like(lo)), 1.0)
        shift = torch.where(finite, -1.0 - lo.where(finite, torch.zeros_like(lo)) * scale, 0.0)
        self.register_buffer("scale", scale.float())
        self.register_buffer("shift", shift.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int, depth: int, generator: torch.Generator
    ):
        super().__init__()
        sizes = [obs_dim] + [hidden] * depth
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], 2 * act_dim))
        self.net = nn.Sequential(*layers)
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                _uniform_(layer.weight, layer.in_features, generator)
                _uniform_(layer.bias, layer.in_features, generator)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor | None):
        """Squashed action in ``[-1, 1]`` and its log-probability ``[B, 1]`` (``None`` when deterministic)."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        if noise is None:
            return torch.tanh(mean), None
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        u = mean + log_std.exp() * noise
        action = torch.tanh(u)
        # log N(u; mean, std) - log |d tanh(u)/du|, the latter in a stable form
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2.0 * math.pi)
        log_prob = log_prob - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return action, log_prob.sum(-1, keepdim=True)


class EnsembleCritic(nn.Module):
    """``N`` Q-networks evaluated as one batched matmul per layer; LayerNorm optional."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        depth: int,
        num: int,
        layer_norm: bool,
        generator: torch.Generator,
    ):
        super().__init__()
        sizes = [in_dim] + [hidden] * depth + [1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            w, b = torch.empty(num, n_in, n_out), torch.empty(num, 1, n_out)
            _uniform_(w, n_in, generator)
            _uniform_(b, n_in, generator)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.layer_norm = layer_norm
        if layer_norm:
            self.ln_scales = nn.ParameterList(
                nn.Parameter(torch.ones(num, 1, hidden)) for _ in range(depth)
            )
            self.ln_shifts = nn.ParameterList(
                nn.Parameter(torch.zeros(num, 1, hidden)) for _ in range(depth)
            )
        self.num = num
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, in]`` -> Q-values ``[N, B, 1]``."""
        h = x.unsqueeze(0).expand(self.num, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                if self.layer_norm:
                    h = torch.addcmul(
                        self.ln_shifts[i], F.layer_norm(h, (self.hidden,)), self.ln_scales[i]
                    )
                h = F.relu(h)
        return h


def _adam(params, lr: float) -> torch.optim.Adam:
    # the fused CPU kernel is ~15 % faster per update than the per-tensor default
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - torch builds without it
        return torch.optim.Adam(params, lr=lr)


# -- the learner -----------------------------------------------------------------------------


class SAC:
    """Soft actor-critic over boxes; samples its batches from the buffer given to :meth:`update`.

    Args:
        obs_low, obs_high: observation bounds; observations are scaled to ``[-1, 1]``
            where both are finite.
        act_low, act_high: action bounds (finite).
        config: hyperparameters.
        seed: seeds network initialisation, exploration noise and critic subsets;
            the learner never touches torch's global RNG.

    Examples:
        >>> import numpy as np
        >>> agent = SAC(np.array([-1.2, -0.07]), np.array([0.6, 0.07]), np.array([-1.0]), np.array([1.0]),
        ...             config=SACConfig(hidden=16), seed=0)
        >>> agent.act(np.zeros(2, dtype=np.float32)).shape
        (1,)
    """

    def __init__(
        self,
        obs_low,
        obs_high,
        act_low,
        act_high,
        *,
        config: SACConfig | None = None,
        seed: int = 0,
    ):
        self.config = config = config or SACConfig()
        self.generator = torch.Generator().manual_seed(seed)
        obs_dim = int(np.asarray(obs_low).size)
        act_dim = int(np.asarray(act_low).size)
        act_low = torch.as_tensor(np.asarray(act_low, dtype=np.float32))
        act_high = torch.as_tensor(np.asarray(act_high, dtype=np.float32))
        if not (torch.isfinite(act_low).all() and torch.isfinite(act_high).all()):
            raise ValueError(
                f"SAC needs finite action bounds, got low={act_low.tolist()} high={act_high.tolist()}"
            )
        self._act_scale = (act_high - act_low) / 2.0
        self._act_mid = (act_high + act_low) / 2.0
        self.obs_scaler = _Scaler(obs_low, obs_high)
        self.act_dim = act_dim
        g = self.generator
        self.actor = Actor(obs_dim, act_dim, config.hidden, config.depth, g)
        self.critic = EnsembleCritic(
            obs_dim + act_dim, config.hidden, config.depth, config.num_critics, config.layer_norm, g
        )
        self.critic_target = EnsembleCritic(
            obs_dim + act_dim, config.hidden, config.depth, config.num_critics, config.layer_norm, g
        )
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(config.init_alpha), requires_grad=True)
        self.target_entropy = float(
            -act_dim if config.target_entropy is None else config.target_entropy
        )
        self.actor_opt = _adam(self.actor.parameters(), config.lr)
        self.critic_opt = _adam(self.critic.parameters(), config.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.lr)
        self.num_updates = 0

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def _noise(self, n: int) -> torch.Tensor:
        return torch.randn(n, self.act_dim, generator=self.generator)

    def _to_env(self, action: torch.Tensor) -> torch.Tensor:
        return action * self._act_scale + self._act_mid

    def _to_unit(self, action: torch.Tensor) -> torch.Tensor:
        return (action - self._act_mid) / self._act_scale

    @torch.no_grad()
    def act_batch(self, obs, *, deterministic: bool = False) -> np.ndarray:
        """Actions ``[n, act_dim]`` for observations ``[n, obs_dim]``, in the environment's bounds."""
        x = self.obs_scaler(torch.as_tensor(np.asarray(obs, dtype=np.float32)))
        action, _ = self.actor(x, None if deterministic else self._noise(x.shape[0]))
        return self._to_env(action).numpy()

    def act(self, obs, *, deterministic: bool = False) -> np.ndarray:
        """One action for one observation, in the environment's bounds."""
        return self.act_batch(np.asarray(obs)[None], deterministic=deterministic)[0]

    def _q_input(self, obs_scaled: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        return torch.cat([obs_scaled, unit_action], dim=-1)

    def critic_target_values(self, batch) -> torch.Tensor:
        """The TD target of every row of ``batch``, ``[B, 1]`` (no gradient)."""
        cfg = self.config
        with torch.no_grad():
            next_obs = self.obs_scaler(batch["next", "observation"])
            next_action, next_log_prob = self.actor(next_obs, self._noise(next_obs.shape[0]))
            q_next = self.critic_target(self._q_input(next_obs, next_action))
            if cfg.critic_subset < cfg.num_critics:
                subset = torch.randperm(cfg.num_critics, generator=self.generator)[
                    : cfg.critic_subset
                ]
                q_next = q_next.index_select(0, subset)
            next_value = q_next.min(dim=0).values - self.log_alpha.exp() * next_log_prob
            return td_target(
                batch["next", "reward"], next_value, batch["next", "terminated"], cfg.gamma
            )

    def update_critic(self, batch) -> float:
        """One step of every critic towards :meth:`critic_target_values`, then the Polyak update."""
        target = self.critic_target_values(batch)
        obs = self.obs_scaler(batch["observation"])
        q = self.critic(self._q_input(obs, self._to_unit(batch["action"])))
        loss = (q - target.unsqueeze(0)).pow(2).mean(dim=(1, 2)).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        loss = loss.detach()
        with torch.no_grad():
            torch._foreach_lerp_(
                list(self.critic_target.parameters()),
                list(self.critic.parameters()),
                self.config.tau,
            )
        return loss.item()

    def update_actor_and_alpha(self, batch) -> tuple[float, float, float]:
        """One policy step on ``alpha * log pi - mean_i Q_i`` (the ensemble mean, as in RLPD), then one temperature step."""
        obs = self.obs_scaler(batch["observation"])
        action, log_prob = self.actor(obs, self._noise(obs.shape[0]))
        self.critic.requires_grad_(False)
        q = self.critic(self._q_input(obs, action)).mean(dim=0)
        self.critic.requires_grad_(True)
        alpha = self.log_alpha.detach().exp()
        actor_loss = (alpha * log_prob - q).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        actor_loss = actor_loss.detach()
        a_loss = alpha_loss(self.log_alpha, log_prob, self.target_entropy)
        self.alpha_opt.zero_grad(set_to_none=True)
        a_loss.backward()
        self.alpha_opt.step()
        return actor_loss.item(), -log_prob.detach().mean().item(), self.alpha

    def update(self, buffer) -> dict[str, float]:
        """``utd`` critic updates, then one actor and temperature update, each on ``buffer.sample(batch_size)``."""
        critic_loss = 0.0
        for _ in range(self.config.utd):
            batch = buffer.sample(self.config.batch_size)
            critic_loss = self.update_critic(batch)
        actor_loss, entropy, alpha = self.update_actor_and_alpha(batch)
        self.num_updates += 1
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "entropy": entropy,
            "alpha": alpha,
        }
