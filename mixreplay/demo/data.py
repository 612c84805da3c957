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
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mixreplay.demo.config import DEFAULT_DATASET_ID, DEFAULT_ENV_ID

__all__ = [
    "DEFAULT_DATASET_ID",
    "DEFAULT_ENV_ID",
    "ExpertSpec",
    "check_writable",
    "dataset_exists",
    "ensure_expert_dataset",
    "episode_returns",
    "expert_action",
    "generate_expert_episodes",
    "rollout_episodes",
    "write_dataset",
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


def rollout_episodes(
    env_id: str,
    policy: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    *,
    num_transitions: int,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> list:
    """Run ``policy(obs, rng)`` in ``env_id`` until at least ``num_transitions`` transitions.

    Episode ``k`` is reset with seed ``seed + k``; ``rng`` is ``default_rng(seed)``, shared
    by every step. Returns a list of :class:`minari.data_collector.EpisodeBuffer`,
    float32 observations and actions, as :func:`write_dataset` takes them.
    ``progress(n)``, when given, hears of each episode's ``n`` steps.
    """
    from minari.data_collector import EpisodeBuffer

    from mixreplay.demo.envs import make_env

    env = make_env(env_id)
    rng = np.random.default_rng(seed)
    episodes, total, episode_id = [], 0, 0
    while total < num_transitions:
        episode_seed = seed + episode_id
        obs, _ = env.reset(seed=episode_seed)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        terminated = truncated = False
        while not (terminated or truncated):
            action = np.asarray(policy(obs, rng), dtype=np.float32)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            terms.append(bool(terminated))
            truncs.append(bool(truncated))
        episodes.append(
            EpisodeBuffer(
                id=episode_id,
                seed=episode_seed,
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
        if progress is not None:
            progress(len(actions))
    env.close()
    return episodes


def episode_returns(episodes) -> list[float]:
    """The undiscounted return of each episode buffer."""
    return [float(sum(ep.rewards)) for ep in episodes]


def generate_expert_episodes(spec: ExpertSpec):
    """Roll the expert out; returns a list of :class:`minari.data_collector.EpisodeBuffer`."""
    if spec.env_id != DEFAULT_ENV_ID:
        raise ValueError(
            f"the scripted expert only knows {DEFAULT_ENV_ID!r}, got env_id={spec.env_id!r}; "
            "for another task bring your own dataset"
        )
    return rollout_episodes(
        spec.env_id,
        lambda obs, rng: expert_action(obs, rng, spec.noise),
        num_transitions=spec.num_transitions,
        seed=spec.seed,
    )


def _dataset_dir(dataset_id: str) -> Path:
    root = os.environ.get("MINARI_DATASETS_PATH") or os.path.join(
        os.path.expanduser("~"), ".minari", "datasets"
    )
    return Path(root) / dataset_id


def dataset_exists(dataset_id: str = DEFAULT_DATASET_ID) -> bool:
    """Whether a complete Minari dataset ``dataset_id`` is in the Minari root."""
    return (_dataset_dir(dataset_id) / "data" / "metadata.json").exists()


def check_writable(dataset_id: str) -> Path:
    """The folder ``dataset_id`` will be written to; raises if a broken one is in the way."""
    path = _dataset_dir(dataset_id)
    if not dataset_exists(dataset_id) and path.exists() and any(path.iterdir()):
        raise FileExistsError(
            f"{path} exists but holds no complete Minari dataset (no data/metadata.json), "
            f"perhaps from an interrupted run; delete it (minari.delete_dataset({dataset_id!r}) "
            "or rm -r) and run again"
        )
    return path


def write_dataset(
    dataset_id: str,
    episodes,
    *,
    env_id: str,
    algorithm_name: str,
    description: str,
    code_file: str,
) -> Path:
    """Write ``episodes`` as the Minari dataset ``dataset_id`` with Minari's own writer.

    A failed write leaves no folder behind (a half-written one would break every later
    load, and Minari's listing). Returns the dataset's folder.
    """
    import minari

    path = check_writable(dataset_id)
    try:
        minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=episodes,
            env=env_id,
            eval_env=env_id,
            algorithm_name=algorithm_name,
            author="mixreplay demo",
            author_email="mixreplay@example.invalid",
            code_permalink=f"https://github.com/mixreplay/mixreplay/tree/main/mixreplay/demo/{code_file}",
            description=description,
        )
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    returns = episode_returns(episodes)
    log.info("wrote %s: %d episodes, mean return %.1f", dataset_id, len(episodes), np.mean(returns))
    return path


def ensure_expert_dataset(
    dataset_id: str = DEFAULT_DATASET_ID, spec: ExpertSpec | None = None
) -> Path:
    """Create the expert dataset in the Minari root unless it is already there; return its folder.

    Call it once, in one process, before workers load the dataset.
    """
    spec = spec or ExpertSpec()
    path = check_writable(dataset_id)
    if dataset_exists(dataset_id):
        log.debug("expert dataset %s already at %s", dataset_id, path)
        return path
    log.info(
        "generating expert dataset %s (%d transitions) under %s",
        dataset_id,
        spec.num_transitions,
        path.parent,
    )
    episodes = generate_expert_episodes(spec)
    return write_dataset(
        dataset_id,
        episodes,
        env_id=spec.env_id,
        algorithm_name=f"scripted energy pumping: sign(velocity) + N(0, {spec.noise})",
        description=(
            "Scripted MountainCarContinuous expert for the mixreplay demo: a = clip(sign(velocity) "
            f"+ N(0, {spec.noise}), -1, 1); {sum(len(ep.actions) for ep in episodes)} transitions "
            f"in {len(episodes)} episodes, mean return {np.mean(episode_returns(episodes)):.1f}."
        ),
        code_file="data.py",
    )
