"""The demo's tasks: an environment, its offline datasets, its arms and its run sizes.

``mixreplay demo --task NAME`` picks one of :data:`TASKS`:

- ``mountaincar`` (the default): MountainCarContinuous, where exploration alone fails and a
  scripted expert's data decides success;
- ``halfcheetah``: HalfCheetah-v5 (MuJoCo), with datasets of two qualities rolled out from
  snapshots of one SAC training run, to show when offline data helps and which schedule
  to pick.

Plain dataclasses, importable without torch or numpy (``--help`` reads them).
"""

from __future__ import annotations

import dataclasses

from mixreplay.demo.config import (
    DEFAULT_DATASET_ID,
    DEFAULT_ENV_ID,
    DEFAULTS,
    QUICK,
    SACConfig,
)

__all__ = ["DEFAULT_TASK", "TASKS", "DatasetLevel", "PolicyRecipe", "Task"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetLevel:
    """One offline dataset of a task, and the quality it is meant to have.

    Attributes:
        name: its short name (``"weak"``, ``"good"``): the panel and the ``dataset`` column.
        dataset_id: the Minari dataset ID it is written under.
        min_eval_return: for :class:`PolicyRecipe` datasets: roll out the first policy of the
            training run whose evaluation return reaches this; ``None``: the best one.
        expected_return: the range the dataset's mean episode return is meant to lie in; the
            recipe says so, with the numbers, when it misses.
    """

    name: str
    dataset_id: str
    min_eval_return: float | None = None
    expected_return: tuple[float, float] = (float("-inf"), float("inf"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolicyRecipe:
    """How a task's datasets are made: snapshots of one SAC run, rolled out with action noise.

    One SAC run (seed ``seed``, ``train_steps`` environment steps, hyperparameters ``sac``)
    is evaluated every ``eval_every`` steps; each :class:`DatasetLevel` picks one of the
    policies evaluated, whose deterministic action plus ``N(0, noise)`` (clipped to the
    action bounds) is rolled out for ``num_transitions`` transitions (episode ``k`` reset
    with seed ``seed + k``). Changing any field calls for new dataset IDs.
    """

    train_steps: int = 20_000
    sac: SACConfig = dataclasses.field(default_factory=lambda: SACConfig(utd=2))
    seed: int = 2024
    eval_every: int = 1_000
    eval_episodes: int = 3
    num_transitions: int = 30_000
    noise: float = 0.2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
    """What ``mixreplay demo --task NAME`` runs.

    Attributes:
        name: the ``--task`` value.
        env_id: the Gymnasium environment.
        title: one line for the help and the plots.
        datasets: the offline datasets; every arm but ``online`` runs once on each.
        recipe: how the datasets are made (``None``: the scripted MountainCar expert).
        arms: the arms run by default.
        quick_arms: the arms ``--quick`` runs.
        defaults: run sizes (``steps``, ``seeds``, ``eval_every``, ``eval_episodes``).
        quick: the same for ``--quick``.
        quick_caveat: what ``--quick`` shows and what it does not.
        threshold: the return that counts as solved in the summary.
        early_step: the summary's early column reports the return at this step.
        extra: the pip extra the task needs beyond the demo's.
        modules: what that extra installs (checked before anything runs).
    """

    name: str
    env_id: str
    title: str
    datasets: tuple[DatasetLevel, ...]
    recipe: PolicyRecipe | None
    arms: tuple[str, ...]
    quick_arms: tuple[str, ...]
    defaults: dict
    quick: dict
    quick_caveat: str
    threshold: float
    early_step: int
    extra: str = "demo"
    modules: tuple[str, ...] = ()


MOUNTAINCAR = Task(
    name="mountaincar",
    env_id=DEFAULT_ENV_ID,
    title="SAC on MountainCarContinuous",
    datasets=(DatasetLevel(name="expert", dataset_id=DEFAULT_DATASET_ID),),
    recipe=None,
    arms=("online", "mixed", "anneal"),
    quick_arms=("online", "mixed", "anneal"),
    defaults=DEFAULTS,
    quick=QUICK,
    quick_caveat="the mixed arms have just reached the goal and the success rates rest on "
    "few episodes",
    threshold=80.0,
    early_step=1000,
)

HALFCHEETAH = Task(
    name="halfcheetah",
    env_id="HalfCheetah-v5",
    title="SAC on HalfCheetah-v5 with weak and good offline data",
    datasets=(
        DatasetLevel(
            name="weak",
            dataset_id="mixreplay/halfcheetah-weak-v0",
            min_eval_return=900.0,
            expected_return=(500.0, 1000.0),
        ),
        DatasetLevel(
            name="good",
            dataset_id="mixreplay/halfcheetah-good-v0",
            min_eval_return=None,
            expected_return=(1000.0, 2000.0),
        ),
    ),
    recipe=PolicyRecipe(),
    # ReturnGated (experimental) is not in the default run: `--arms ...,gated` adds it
    arms=("online", "mixed", "anneal", "proportional"),
    quick_arms=("online", "mixed"),
    defaults={"steps": 20_000, "seeds": 3, "eval_every": 1_250, "eval_episodes": 5},
    quick={"steps": 5_000, "seeds": 2, "eval_every": 1_250, "eval_episodes": 3},
    quick_caveat="the good-data gap shows by 5,000 steps; whether weak data helps or holds "
    "the agent back shows only later, in the full run",
    threshold=1500.0,
    early_step=5_000,
    extra="mujoco",
    modules=("mujoco",),
)

#: every task, by ``--task`` name
TASKS = {task.name: task for task in (MOUNTAINCAR, HALFCHEETAH)}
DEFAULT_TASK = MOUNTAINCAR.name
