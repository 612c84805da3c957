"""One training run of the demo: an arm (how batches are drawn), a seed, a number of env steps.

Arms:

- ``online``: SAC on a plain :class:`~mixreplay.ReplayBuffer` of its own experience;
- ``mixed``: an :class:`~mixreplay.OfflineToOnlineReplayBuffer`, half of every batch offline;
- ``anneal``: the same buffer with the offline share decayed linearly from 0.5 to 0
  over the run (``rb.anneal(step, total_steps)`` every step);
- ``proportional``: the offline share is the offline rows' share of all rows
  (:class:`~mixreplay.schedules.Proportional`): every stored row equally likely;
- ``gated``: 0.5 until the agent's evaluation returns pass half the dataset's mean return,
  then lowered linearly to 0 as they reach it (:class:`~mixreplay.schedules.ReturnGated`
  fed the mean of the last :data:`GATE_WINDOW` evaluations). Evaluation returns, of the
  deterministic policy, are what compares with a dataset rolled out from a policy: the
  training episodes' returns, with SAC's exploration noise, ran a third of them or less
  here (online SAC at 20,000 steps: 244 against 834).

:func:`run_arm` is what each worker process executes; it returns one record per
evaluation and never prints (progress goes to an optional callback).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDict

from mixreplay.demo.config import ARMS, RunSpec
from mixreplay.demo.envs import make_env
from mixreplay.demo.sac import SAC
from mixreplay.schedules import ReturnGated

__all__ = ["ARMS", "RunSpec", "load_offline", "make_buffer", "run_arm", "transition"]

log = logging.getLogger(__name__)

OFFLINE_FRACTION = 0.5
#: the gated arm: the offline share starts to fall at GATE_LOW x the dataset's mean return
#: and reaches 0 at GATE_HIGH x that return, of the mean of the last GATE_WINDOW evaluations
GATE_LOW, GATE_HIGH, GATE_WINDOW = 0.5, 1.0, 2
# success rate of the training episodes is taken over this many most recent episodes
TRAIN_WINDOW = 10


def load_offline(dataset_id: str, *, batch_size: int, generator: torch.Generator):
    """The offline dataset, through ``load_dataset`` like any user's (``"minari:<id>"``, ...)."""
    from mixreplay import load_dataset

    return load_dataset(dataset_id, batch_size=batch_size, generator=generator)


def offline_schedule(spec: RunSpec):
    """The arm's offline fraction: a float or a :mod:`mixreplay.schedules` schedule."""
    from mixreplay.schedules import Proportional

    if spec.arm == "proportional":
        return Proportional()
    if spec.arm == "gated":
        if spec.dataset_return is None:  # RunSpec checks it; a spec built otherwise lands here
            raise ValueError("the gated arm needs RunSpec.dataset_return")
        reference = spec.dataset_return
        # low/high must be ordered and distinct even for a dataset of return <= 0
        low = reference - (1.0 - GATE_LOW) * abs(reference)
        high = max(reference - (1.0 - GATE_HIGH) * abs(reference), low + 1.0)
        return ReturnGated(OFFLINE_FRACTION, 0.0, low, high, window=GATE_WINDOW)
    return OFFLINE_FRACTION


def make_buffer(spec: RunSpec, generator: torch.Generator):
    """The arm's buffer: a plain ring for ``online``, the mixing buffer otherwise."""
    from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer

    batch_size = spec.sac.batch_size
    if spec.arm == "online":
        return ReplayBuffer(
            storage=LazyTensorStorage(spec.online_capacity),
            batch_size=batch_size,
            generator=generator,
        )
    offline = load_offline(spec.dataset_id, batch_size=batch_size, generator=generator)
    return OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=spec.online_capacity,
        offline_fraction=offline_schedule(spec),
        batch_size=batch_size,
        generator=generator,
    )


def _flag(value: bool) -> torch.Tensor:
    return torch.tensor([[value]], dtype=torch.bool)


_FALSE = torch.zeros(1, 1, dtype=torch.bool)


def transition(obs, action, reward, next_obs, terminated: bool, truncated: bool) -> TensorDict:
    """One TED row, batch ``[1]``: floats as float32, flags as bool ``[1]``.

    The root flags describe ``obs`` itself (never a terminal state here, as in the
    offline dataset); the ``next`` flags say how the step ended.
    """
    term, trunc = _flag(terminated), _flag(truncated)
    return TensorDict(
        {
            "observation": torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0),
            "action": torch.as_tensor(np.asarray(action, dtype=np.float32)).reshape(1, -1),
            "done": _FALSE,
            "terminated": _FALSE,
            "truncated": _FALSE,
            "next": {
                "observation": torch.as_tensor(np.asarray(next_obs, dtype=np.float32)).unsqueeze(0),
                "reward": torch.tensor([[reward]], dtype=torch.float32),
                "done": term | trunc,
                "terminated": term,
                "truncated": trunc,
            },
        },
        batch_size=[1],
    )


def evaluate(agent: SAC, envs: list, seed: int) -> tuple[float, float]:
    """Mean return and success rate (share of episodes that terminated) of the deterministic policy.

    Runs one episode in each of ``envs`` (reset with seeds ``seed, seed + 1, ...``) in
    lockstep, so one batched forward pass serves every episode still running.
    """
    observations = [env.reset(seed=seed + k)[0] for k, env in enumerate(envs)]
    returns = [0.0] * len(envs)
    successes = [False] * len(envs)
    running = list(range(len(envs)))
    while running:
        actions = agent.act_batch(np.stack([observations[k] for k in running]), deterministic=True)
        still = []
        for k, action in zip(running, actions):
            observations[k], reward, terminated, truncated, _ = envs[k].step(action)
            returns[k] += float(reward)
            if terminated:
                successes[k] = True
            if not (terminated or truncated):
                still.append(k)
        running = still
    return float(np.mean(returns)), float(np.mean(successes))


def run_arm(
    spec: RunSpec,
    progress: Callable[[int], None] | None = None,
    *,
    on_evaluate: Callable[[SAC, dict], None] | None = None,
) -> list[dict]:
    """Train one arm on one seed; return one record per evaluation.

    ``on_evaluate(agent, record)``, when given, is called after each evaluation (the
    dataset recipe keeps snapshots of the policy with it).

    Each record holds ``arm, dataset, seed, step, return`` (mean deterministic evaluation
    return), ``eval_success``, ``train_success`` and ``train_return`` (over the last
    :data:`TRAIN_WINDOW` finished training episodes), ``train_episodes``,
    ``offline_fraction``, ``alpha``, ``wall_s`` and ``cpu_s`` (this process's CPU time: the
    run's cost whatever else shares the machine).
    """
    import gymnasium as gym

    start, cpu_start = time.perf_counter(), time.process_time()
    env = make_env(spec.env_id)
    eval_envs = [make_env(spec.env_id) for _ in range(spec.eval_episodes)]
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box) or not isinstance(act_space, gym.spaces.Box):
        raise ValueError(
            f"the demo's SAC needs Box observation and action spaces; {spec.env_id} has "
            f"{obs_space} and {act_space}"
        )
    agent = SAC(
        obs_space.low,
        obs_space.high,
        act_space.low,
        act_space.high,
        config=spec.sac,
        seed=spec.seed,
    )
    buffer = make_buffer(spec, torch.Generator().manual_seed(spec.seed))
    schedule = None if spec.arm == "online" else buffer.schedule
    gate = schedule if isinstance(schedule, ReturnGated) else None  # hears evaluations
    rng = np.random.default_rng(spec.seed)
    low, high = act_space.low, act_space.high

    records: list[dict] = []
    recent: deque[tuple[float, bool]] = deque(
        maxlen=TRAIN_WINDOW
    )  # (return, terminated) of finished training episodes
    episodes, episode_return, last_progress = 0, 0.0, 0
    alpha = agent.alpha
    obs, _ = env.reset(seed=spec.seed)
    for step in range(1, spec.steps + 1):
        if step <= spec.learning_starts:
            action = rng.uniform(low, high).astype(np.float32)
        else:
            action = agent.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        buffer.extend(transition(obs, action, reward, next_obs, terminated, truncated))
        episode_return += float(reward)
        obs = next_obs
        if terminated or truncated:
            recent.append((episode_return, terminated))
            episodes += 1
            episode_return = 0.0
            obs, _ = env.reset()

        if spec.arm == "anneal":
            buffer.anneal(step, spec.steps)
        elif spec.arm != "online":
            buffer.set_step(step)  # schedules read their value at each new step
        if step >= spec.learning_starts:
            alpha = agent.update(buffer)["alpha"]

        if step % spec.eval_every == 0 or step == spec.steps:
            eval_return, eval_success = evaluate(agent, eval_envs, seed=10_000 + 100 * spec.seed)
            records.append(
                {
                    "arm": spec.arm,
                    "dataset": spec.dataset,
                    "seed": spec.seed,
                    "step": step,
                    "return": eval_return,
                    "eval_success": eval_success,
                    "train_success": float(np.mean([t for _, t in recent])) if recent else 0.0,
                    "train_return": float(np.mean([r for r, _ in recent]))
                    if recent
                    else float("nan"),
                    "train_episodes": episodes,
                    "offline_fraction": getattr(buffer, "offline_fraction", 0.0),
                    "alpha": alpha,
                    "wall_s": time.perf_counter() - start,
                    "cpu_s": time.process_time() - cpu_start,
                }
            )
            log.debug("%s seed %d step %d: %s", spec.arm, spec.seed, step, records[-1])
            if gate is not None:  # from the next step on
                gate.observe(eval_return)
            if on_evaluate is not None:
                on_evaluate(agent, records[-1])
        if progress is not None and (step % spec.progress_every == 0 or step == spec.steps):
            progress(step - last_progress)
            last_progress = step
    for e in (env, *eval_envs):
        e.close()
    return records
