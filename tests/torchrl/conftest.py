"""Helpers for the TorchRL tests: real Pendulum transitions and a small real SAC trainer."""

from __future__ import annotations

import warnings

import torch
from tensordict import TensorDictBase

# TorchRL warns that SACTrainer is a prototype; the warning names the line that builds it,
# which for mixreplay's trainer is in mixreplay.torchrl (TorchRL's filter does not cover it).
SAC_PROTOTYPE = "ignore:SACTrainer is an experimental/prototype feature:UserWarning"


def pendulum_rows(n: int, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> TensorDictBase:
    """``n`` random-policy transitions of TorchRL's ``GymEnv("Pendulum-v1")`` (TED, flat)."""
    from torchrl.envs import GymEnv

    env = GymEnv("Pendulum-v1")
    env.set_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # the random policy samples from the action spec (global RNG)
        parts, left = [], n
        while left > 0:
            parts.append(env.rollout(min(200, left), break_when_any_done=False))
            left -= parts[-1].batch_size[0]
    td = torch.cat(parts).exclude("collector")
    if dtype != torch.float32:
        td = td.apply(lambda t: t.to(dtype) if t.is_floating_point() else t)
    env.close()
    return td


def make_trainer(replay_buffer, *, total_frames: int = 60, frames_per_batch: int = 20, **kwargs):
    """mixreplay's ``OfflineToOnlineTrainer`` around a small SAC agent on Pendulum-v1."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    from mixreplay.torchrl import OfflineToOnlineTrainer

    torch.manual_seed(0)
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(
            torch.nn.Sequential(
                MLP(in_features=3, out_features=2, num_cells=[16]), NormalParamExtractor()
            ),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
    )
    qvalue = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[16]), in_keys=["observation", "action"]
    )
    loss = SACLoss(actor, qvalue)
    loss.make_value_estimator(gamma=0.99)
    args = dict(
        collector=Collector(
            env, actor, frames_per_batch=frames_per_batch, total_frames=total_frames
        ),
        total_frames=total_frames,
        frame_skip=1,
        optim_steps_per_batch=2,
        loss_module=loss,
        replay_buffer=replay_buffer,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
        enable_logging=False,
    )
    args.update(kwargs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)  # TorchRL's own notices
        warnings.filterwarnings("ignore", "SACTrainer is an experimental", UserWarning)
        return OfflineToOnlineTrainer(**args)
