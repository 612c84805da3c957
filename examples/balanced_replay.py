"""Balanced replay (Lee et al., 2021) with mixreplay's prioritized sampler.

Offline-to-online fine-tuning suffers when updates keep drawing offline
transitions that the current policy would never visit. Balanced replay keeps
offline and online transitions in one prioritized buffer and sets each row's
priority to an estimate of the density ratio ``w(s, a) = d_online(s, a) /
d_offline(s, a)``, so near-on-policy rows are replayed more often.

Here the ratio comes from a small classifier that tells online rows from
offline ones (``w = D / (1 - D)``), trained on equal-sized uniform draws from
each side. Every step:

1. draw a prioritized batch from the joint buffer (``return_info=True``);
2. (an agent would update on it here, weighting losses by ``info["weight"]``);
3. ``update_priority(info["index"], w(batch))``.

The toy problem: 1-D "observations" drawn from N(-1, 1) offline and N(1.5, 0.5)
online. Uniform replay shows online rows in proportion to their count;
balanced replay shows them much more often.

    python examples/balanced_replay.py --steps 300
"""

from __future__ import annotations

import argparse

import torch
from tensordict import TensorDict
from torch import nn

from mixreplay import LazyTensorStorage, OfflineDataset, ReplayBuffer, prefill_replay_buffer
from mixreplay.samplers import PrioritizedSampler


def rows(n: int, mean: float, std: float, online: bool, generator: torch.Generator) -> TensorDict:
    obs = mean + std * torch.randn(n, 1, generator=generator)
    return TensorDict({"observation": obs, "online": torch.full((n, 1), online)}, [n])


class DensityRatio(nn.Module):
    """A classifier online-vs-offline whose odds estimate ``d_online / d_offline``."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(1, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    @torch.no_grad()
    def ratio(self, obs: torch.Tensor) -> torch.Tensor:
        # trained on balanced draws, the odds D / (1 - D) = exp(logit) estimate the ratio;
        # clamped so that priorities stay finite
        return self(obs).squeeze(-1).clamp(-10, 10).exp()


def run(
    steps: int = 300,
    batch_size: int = 128,
    n_offline: int = 4000,
    n_online: int = 500,
    seed: int = 0,
) -> dict:
    """Run balanced replay on the toy problem; return the online share of batches, before and after."""
    g = torch.Generator().manual_seed(seed)
    offline = OfflineDataset.from_tensordict(
        rows(n_offline, -1.0, 1.0, False, g), generator=seed + 2
    )
    online = ReplayBuffer(storage=LazyTensorStorage(n_online), generator=seed + 3)
    online.extend(rows(n_online, 1.5, 0.5, True, g))

    # the joint buffer: every offline row once, then the online rows; new rows get max priority
    joint = ReplayBuffer(
        storage=LazyTensorStorage(n_offline + n_online),
        sampler=PrioritizedSampler(alpha=1.0, beta=0.4),
        generator=seed + 4,
    )
    prefill_replay_buffer(joint, offline)
    joint.extend(online[:])

    with torch.random.fork_rng():  # the classifier's init must not touch the caller's RNG
        torch.manual_seed(seed)
        model = DensityRatio()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    uniform_share = n_online / (n_offline + n_online)
    shares = []
    for _ in range(steps):
        # 1. train the classifier on balanced uniform draws from each side
        x = torch.cat(
            [offline.sample(batch_size)["observation"], online.sample(batch_size)["observation"]]
        )
        y = torch.cat([torch.zeros(batch_size, 1), torch.ones(batch_size, 1)])
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        # 2. a prioritized batch from the joint buffer, and its new priorities
        batch, info = joint.sample(batch_size, return_info=True)
        shares.append(batch["online"].float().mean().item())
        joint.update_priority(info["index"], model.ratio(batch["observation"]))
    tail = shares[-max(1, steps // 5) :]
    return {
        "uniform_online_share": uniform_share,
        "first_batch_online_share": shares[0],
        "final_online_share": sum(tail) / len(tail),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = run(steps=args.steps, seed=args.seed)
    print(f"online rows are {out['uniform_online_share']:.1%} of the joint buffer")
    print(
        f"share of online rows per batch: first {out['first_batch_online_share']:.1%}, "
        f"last 20% of steps {out['final_online_share']:.1%}"
    )


if __name__ == "__main__":
    main()
