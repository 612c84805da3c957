"""Offline datasets of chosen quality, made from snapshots of one SAC training run.

The recipe (:class:`~mixreplay.demo.tasks.PolicyRecipe`): train SAC online on the
task's environment with a fixed seed, evaluating the deterministic policy every few
thousand steps; for each :class:`~mixreplay.demo.tasks.DatasetLevel` pick one of the
evaluated policies (the first that reached the level's ``min_eval_return``, or the
best), then roll it out with Gaussian action noise and write the episodes as a real
Minari dataset (:func:`~mixreplay.demo.data.write_dataset`). Each dataset's mean
return is checked against the level's ``expected_return``; a miss is reported, with
the numbers, in the returned record and the log (the dataset is still written: the
benchmark then says which quality it really had).

The datasets are written once into the Minari root and reused from then on;
:func:`make_policy_datasets` runs in a worker process of
:func:`~mixreplay.demo.runner.run_specs`, single-threaded, so that the same seed
gives the same data run after run on one machine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from mixreplay.demo.config import RunSpec
from mixreplay.demo.data import dataset_exists, episode_returns, rollout_episodes, write_dataset
from mixreplay.demo.tasks import DatasetLevel, PolicyRecipe, Task

__all__ = [
    "choose_snapshot",
    "make_policy_datasets",
    "missing_datasets",
    "recipe_steps",
    "run_job",
]

log = logging.getLogger(__name__)


def missing_datasets(task: Task) -> list[DatasetLevel]:
    """The task's datasets not yet in the Minari root."""
    return [level for level in task.datasets if not dataset_exists(level.dataset_id)]


def recipe_steps(task: Task) -> int:
    """Environment steps the recipe takes: training, then every dataset's rollouts."""
    if task.recipe is None:
        return 0
    return task.recipe.train_steps + task.recipe.num_transitions * len(task.datasets)


def choose_snapshot(evaluations: list[tuple[int, float]], level: DatasetLevel) -> int:
    """Index of the evaluation a level rolls out: the first reaching ``min_eval_return``, or the best.

    Args:
        evaluations: ``(step, mean evaluation return)`` in training order.
        level: the dataset's level.

    Examples:
        >>> from mixreplay.demo.tasks import DatasetLevel
        >>> evals = [(1000, 10.0), (2000, 950.0), (3000, 900.0), (4000, 2000.0)]
        >>> choose_snapshot(evals, DatasetLevel(name="weak", dataset_id="a/b-v0", min_eval_return=900))
        1
        >>> choose_snapshot(evals, DatasetLevel(name="good", dataset_id="a/b-v0"))
        3
    """
    if not evaluations:
        raise ValueError("the training run made no evaluation to choose a policy from")
    if level.min_eval_return is not None:
        for i, (_, value) in enumerate(evaluations):
            if value >= level.min_eval_return:
                return i
    return max(range(len(evaluations)), key=lambda i: evaluations[i][1])


def make_policy_datasets(task: Task, progress: Callable[[int], None] | None = None) -> list[dict]:
    """Train, pick the snapshots, roll them out and write every missing dataset of the task.

    Returns one record per dataset written: ``dataset``, ``dataset_id``, ``snapshot_step``,
    ``snapshot_eval_return``, ``mean_return``, ``min_return``, ``max_return``,
    ``expected_low``, ``expected_high``, ``in_range``, ``episodes``, ``transitions``, and
    the recipe's ``wall_s`` and ``cpu_s`` (this process's CPU time) so far.
    """
    import copy

    from mixreplay.demo.experiment import run_arm

    recipe = task.recipe
    if recipe is None:
        raise ValueError(f"task {task.name!r} has no policy recipe")
    wanted = missing_datasets(task)
    if not wanted:
        return []
    start, cpu_start = time.perf_counter(), time.process_time()
    spec = RunSpec(
        arm="online",
        seed=recipe.seed,
        steps=recipe.train_steps,
        env_id=task.env_id,
        eval_every=recipe.eval_every,
        eval_episodes=recipe.eval_episodes,
        sac=recipe.sac,
    )
    snapshots: list[dict] = []
    evaluations: list[tuple[int, float]] = []
    holder: dict = {}

    def keep(agent, record: dict) -> None:
        holder["agent"] = agent
        snapshots.append(copy.deepcopy(agent.actor.state_dict()))
        evaluations.append((record["step"], record["return"]))

    run_arm(spec, progress, on_evaluate=keep)
    log.info("recipe training run of %s: evaluations %s", task.name, evaluations)
    agent = holder["agent"]
    out = []
    for level in wanted:
        i = choose_snapshot(evaluations, level)
        agent.actor.load_state_dict(snapshots[i])
        episodes = _rollout(task, recipe, agent, progress)
        returns = episode_returns(episodes)
        mean = float(np.mean(returns))
        low, high = level.expected_return
        in_range = low <= mean <= high
        step, eval_return = evaluations[i]
        if not in_range:
            log.warning(
                "dataset %s has mean return %.1f, outside the recipe's range [%g, %g]: "
                "results on it speak for a dataset of that return",
                level.dataset_id,
                mean,
                low,
                high,
            )
        write_dataset(
            level.dataset_id,
            episodes,
            env_id=task.env_id,
            algorithm_name=(
                f"SAC snapshot at step {step} (evaluation return {eval_return:.0f}) "
                f"+ N(0, {recipe.noise}) action noise"
            ),
            description=(
                f"{task.env_id} '{level.name}' data for the mixreplay demo: the deterministic "
                f"policy of one SAC run (seed {recipe.seed}, UTD {recipe.sac.utd}) at step "
                f"{step}, plus N(0, {recipe.noise}) action noise; "
                f"{sum(len(ep.actions) for ep in episodes)} transitions in {len(episodes)} "
                f"episodes, mean return {mean:.1f}."
            ),
            code_file="policy_data.py",
        )
        out.append(
            {
                "dataset": level.name,
                "dataset_id": level.dataset_id,
                "snapshot_step": step,
                "snapshot_eval_return": eval_return,
                "mean_return": mean,
                "min_return": float(np.min(returns)),
                "max_return": float(np.max(returns)),
                "expected_low": low,
                "expected_high": high,
                "in_range": in_range,
                "episodes": len(episodes),
                "transitions": sum(len(ep.actions) for ep in episodes),
                "wall_s": time.perf_counter() - start,
                "cpu_s": time.process_time() - cpu_start,
            }
        )
    return out


def _rollout(
    task: Task, recipe: PolicyRecipe, agent, progress: Callable[[int], None] | None
) -> list:
    """The agent's deterministic action plus ``N(0, noise)`` (in half-ranges), clipped."""
    from mixreplay.demo.envs import make_env

    env = make_env(task.env_id)
    low, high = env.action_space.low, env.action_space.high
    env.close()
    half = (high - low) / 2.0

    def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        action = agent.act(obs, deterministic=True)
        action = action + recipe.noise * half * rng.standard_normal(action.shape)
        return np.clip(action, low, high).astype(np.float32)

    return rollout_episodes(
        task.env_id,
        policy,
        num_transitions=recipe.num_transitions,
        seed=recipe.seed,
        progress=progress,
    )


def run_job(job: Task | RunSpec, progress: Callable[[int], None] | None = None) -> list[dict]:
    """A worker's job when the datasets are made beside runs that need none.

    A :class:`~mixreplay.demo.tasks.Task` makes its datasets
    (:func:`make_policy_datasets`); a :class:`~mixreplay.demo.config.RunSpec` runs
    (:func:`~mixreplay.demo.experiment.run_arm`).
    """
    if isinstance(job, Task):
        return make_policy_datasets(job, progress)
    from mixreplay.demo.experiment import run_arm

    return run_arm(job, progress)
