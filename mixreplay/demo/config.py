"""The demo's settings: plain dataclasses and constants, importable without torch or numpy.

``mixreplay demo --help`` reads its defaults from here, so the command answers at
once; the modules that train (:mod:`~mixreplay.demo.sac`, :mod:`~mixreplay.demo.experiment`)
import the same objects.
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "ARMS",
    "DEFAULTS",
    "DEFAULT_DATASET_ID",
    "DEFAULT_ENV_ID",
    "QUICK",
    "RunSpec",
    "SACConfig",
]

DEFAULT_ENV_ID = "MountainCarContinuous-v0"
# Minari rejects "." in dataset names, so the ID says "mountaincar", not the env ID.
DEFAULT_DATASET_ID = "mixreplay/mountaincar-expert-v0"

#: the demo's ways of drawing batches (see :mod:`~mixreplay.demo.experiment`)
ARMS = ("online", "mixed", "anneal", "proportional", "gated")

#: ``mixreplay demo``: 3 seeds x 3,000 steps
DEFAULTS = {"steps": 3000, "seeds": 3, "eval_every": 250, "eval_episodes": 5}
#: ``mixreplay demo --quick`` (explicit options still win): 2 seeds x 2,000 steps, about a
#: minute on two idle cores. The mixed arms reach the goal by 1,000-1,750 steps (every one of
#: seeds 0-9 did, measured); online-only SAC never does in this time (nor in 6,000 steps).
QUICK = {"steps": 2000, "seeds": 2, "eval_every": 250, "eval_episodes": 5}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SACConfig:
    """Hyperparameters of :class:`SAC`; the defaults are the demo's tuned values.

    Attributes:
        hidden: width of every hidden layer (actor and critics).
        depth: number of hidden layers.
        num_critics: size of the critic ensemble (2 = twin critics; RLPD uses 10).
        critic_subset: the target takes the minimum over this many randomly chosen critics.
        layer_norm: LayerNorm after every hidden layer of the critics (RLPD).
        gamma: discount.
        tau: Polyak rate of the target critics.
        lr: Adam learning rate of actor, critics and temperature.
        init_alpha: initial entropy temperature.
        target_entropy: entropy the temperature steers towards; ``None`` means ``-act_dim``.
        batch_size: rows per sampled batch (128: the same demo outcome as 256, measured, for
            ~30 % less compute per update).
        utd: critic updates per environment step (update-to-data ratio); the actor and
            the temperature update once per step, on the last batch (as in RLPD).
    """

    hidden: int = 128
    depth: int = 2
    num_critics: int = 2
    critic_subset: int = 2
    layer_norm: bool = True
    gamma: float = 0.99
    tau: float = 0.02
    lr: float = 3e-4
    init_alpha: float = 0.1
    target_entropy: float | None = None
    batch_size: int = 128
    utd: int = 1

    def __post_init__(self):
        for name in ("hidden", "depth", "num_critics", "critic_subset", "batch_size", "utd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SACConfig.{name} must be a positive int, got {value!r}")
        if self.critic_subset > self.num_critics:
            raise ValueError(
                f"SACConfig.critic_subset ({self.critic_subset}) must not exceed "
                f"num_critics ({self.num_critics})"
            )
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"SACConfig.gamma must be in [0, 1], got {self.gamma!r}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"SACConfig.tau must be in (0, 1], got {self.tau!r}")
        if not self.init_alpha > 0.0:
            raise ValueError(f"SACConfig.init_alpha must be > 0, got {self.init_alpha!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything one run needs; picklable, so it travels to a worker process.

    Attributes:
        arm: one of :data:`ARMS`.
        seed: seeds the environment, the learner and the buffer.
        steps: environment steps.
        env_id: the Gymnasium environment.
        dataset_id: the offline dataset, as ``load_dataset`` takes it (``"minari:<id>"``).
        dataset: the dataset's short name (``"weak"``, ``"good"``), recorded with every
            evaluation; ``""`` for the ``online`` arm, which uses no dataset.
        dataset_return: the dataset's mean episode return; the ``gated`` arm needs it.
        learning_starts: uniform random actions, and no updates, before this step.
        eval_every: evaluate every this many steps (and at the last step).
        eval_episodes: deterministic evaluation episodes per evaluation.
        online_capacity: rows in the online ring.
        progress_every: call the progress callback every this many steps.
        sac: the learner's hyperparameters.
    """

    arm: str
    seed: int
    steps: int
    env_id: str = DEFAULT_ENV_ID
    dataset_id: str = f"minari:{DEFAULT_DATASET_ID}"
    dataset: str = ""
    dataset_return: float | None = None
    learning_starts: int = 256
    eval_every: int = 500
    eval_episodes: int = 5
    online_capacity: int = 100_000
    progress_every: int = 50
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)

    def __post_init__(self):
        if self.arm not in ARMS:
            raise ValueError(f"unknown arm {self.arm!r}; choose from {', '.join(ARMS)}")
        if self.arm == "gated" and self.dataset_return is None:
            raise ValueError(
                "the gated arm lowers the offline share as the agent's returns pass the "
                "dataset's: pass RunSpec(dataset_return=<the dataset's mean episode return>)"
            )
        for name in ("steps", "eval_every", "eval_episodes", "online_capacity", "progress_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RunSpec.{name} must be a positive int, got {value!r}")
