"""The demo's offline data: a noisy scripted expert, written as a real Minari dataset.

On ``MountainCarContinuous-v0`` the car must pump energy, swinging back and forth,
before it can climb the right hill; an agent that has never reached the goal
sees only the action-cost penalty and learns to stand still. The scripted
expert pushes in the direction it is already moving, ``a = sign(velocity)``,
plus Gaussian noise, which reaches the goal in about a hundred steps.

The dataset is generated on first use with Minari's own writer,
:func:`minari.create_dataset_from_buffers` (no jax needed), into the Minari data
root (``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``), and from then on
read back through ``load_dataset("minari:<id>")`` like any user's dataset.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from mixreplay.demo.config import DEFAULT_DATASET_ID, DEFAULT_ENV_ID

__all__ = [
    "DEFAULT_DATASET_ID",
    "DEFAULT_ENV_ID",
    "ExpertSpec",
    "dataset_exists",
    "ensure_expert_dataset",
    "expert_action",
    "generate_expert_episodes",
]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpertSpec:
    """How the expert dataset is made (changing any field calls for a new dataset ID).

    Attributes:
        env_id: the Gymnasium environment.
        num_transitions: episodes are collected until at least this many transitions.
        noise: standard deviation of the Gaussian noise added to ``sign(velocity)``.
        seed: seeds the first reset and the noise.
    """

    env_id: str = DEFAULT_ENV_ID
    num_transitions: int = 20_000
    noise: float = 0.5
    seed: int = 12345


def expert_action(obs: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """``clip(sign(velocity) + N(0, noise), -1, 1)`` for MountainCar's ``[position, velocity]``."""
    a = np.sign(obs[1]) + noise * rng.standard_normal()
    return np.clip(np.array([a], dtype=np.float32), -1.0, 1.0)


def generate_expert_episodes(spec: ExpertSpec):
    """Roll the expert out; returns a list of :class:`minari.data_collector.EpisodeBuffer`."""
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer

    if spec.env_id != DEFAULT_ENV_ID:
        raise ValueError(
            f"the scripted expert only knows {DEFAULT_ENV_ID!r}, got env_id={spec.env_id!r}; "
            "for another task bring your own dataset"
        )
    env = gym.make(spec.env_id)
    rng = np.random.default_rng(spec.seed)
    episodes, total, episode_id = [], 0, 0
    while total < spec.num_transitions:
        seed = spec.seed + episode_id
        obs, _ = env.reset(seed=seed)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        terminated = truncated = False
        while not (terminated or truncated):
            action = expert_action(obs, rng, spec.noise)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            terms.append(bool(terminated))
            truncs.append(bool(truncated))
        episodes.append(
            EpisodeBuffer(
                id=episode_id,
                seed=seed,
                observations=np.stack(observations).astype(np.float32),
                actions=np.stack(actions).astype(np.float32),
                rewards=rewards,
                terminations=terms,
                truncations=truncs,
                infos={},
            )
        )
        total += len(actions)
        episode_id += 1
    env.close()
    return episodes


def _dataset_dir(dataset_id: str) -> Path:
    root = os.environ.get("MINARI_DATASETS_PATH") or os.path.join(
        os.path.expanduser("~"), ".minari", "datasets"
    )
    return Path(root) / dataset_id


def dataset_exists(dataset_id: str = DEFAULT_DATASET_ID) -> bool:
    """Whether a complete Minari dataset ``dataset_id`` is in the Minari root."""
    return (_dataset_dir(dataset_id) / "data" / "metadata.json").exists()


def ensure_expert_dataset(
    dataset_id: str = DEFAULT_DATASET_ID, spec: ExpertSpec | None = None
) -> Path:
    """Create the expert dataset in the Minari root unless it is already there; return its folder.

    Call it once, in one process, before workers load the dataset.
    """
    import minari

    spec = spec or ExpertSpec()
    path = _dataset_dir(dataset_id)
    if dataset_exists(dataset_id):
        log.debug("expert dataset %s already at %s", dataset_id, path)
        return path
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(
            f"{path} exists but holds no complete Minari dataset (no data/metadata.json), "
            f"perhaps from an interrupted run; delete it (minari.delete_dataset({dataset_id!r}) "
            "or rm -r) and run again"
        )
    log.info(
        "generating expert dataset %s (%d transitions) under %s",
        dataset_id,
        spec.num_transitions,
        path.parent,
    )
    episodes = generate_expert_episodes(spec)
    returns = [sum(ep.rewards) for ep in episodes]
    try:
        minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=episodes,
            env=spec.env_id,
            eval_env=spec.env_id,
            algorithm_name=f"scripted energy pumping: sign(velocity) + N(0, {spec.noise})",
            author="mixreplay demo",
            author_email="mixreplay@example.invalid",
            code_permalink="https://github.com/mixreplay/mixreplay/tree/main/mixreplay/demo/data.py",
            description=(
                "Scripted MountainCarContinuous expert for the mixreplay demo: a = clip(sign(velocity) "
                f"+ N(0, {spec.noise}), -1, 1); {sum(len(ep.actions) for ep in episodes)} transitions "
                f"in {len(episodes)} episodes, mean return {np.mean(returns):.1f}."
            ),
        )
    except BaseException:
        # a half-written folder would break every later load (and Minari's listing)
        shutil.rmtree(path, ignore_errors=True)
        raise
    log.info("wrote %d episodes, mean return %.1f", len(episodes), float(np.mean(returns)))
    return path
