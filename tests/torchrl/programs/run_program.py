"""Run one of TorchRL's copied training programs on one target, in a subprocess with a watchdog.

    python tests/torchrl/programs/run_program.py sac --target torchrl
    python tests/torchrl/programs/run_program.py sac --target mixreplay --seed 1
    python tests/torchrl/programs/run_program.py --list

The programs (``PROGRAMS``) run with tiny settings, the same on both targets: hydra
overrides for the scripts of ``sota-implementations/``, substituted assignments for the
tutorials (their sizes are module-level constants). Offline programs read a dataset written
in a fresh home directory before the run: random-policy Pendulum-v1 episodes, written by
Minari's own ``create_dataset_from_buffers`` (``minari:``) and, in D4RL's HDF5 layout with
h5py, as a D4RL file. TorchRL's dataset classes fetch what is not in their cache from the
network, which this machine does not reach; on the TorchRL target the run is therefore
preceded by TorchRL's own conversion of the local files into its cache (``prepare_torchrl``),
as a download would leave it. Every run gets its own ``HOME`` (TorchRL's and Minari's
default roots live there), so nothing is left behind.

What a run gives back (:class:`Result`): whether it finished, its wall time, the program's
own run time, and every scalar it logged (``_driver.py`` records them in place of the
program's logger backend).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

#: the offline datasets the programs read: a Minari ID and a D4RL name (Pendulum-v1 rows)
MINARI_ID = "pendulum/random-v0"
D4RL_NAME = "pendulum-random-v0"
DATASET_EPISODES = 20  # 200 steps each: 4,000 rows


@dataclasses.dataclass(frozen=True)
class Program:
    """One program and how it is run small."""

    #: the script, relative to this folder
    script: str
    #: hydra overrides (the scripts) -- the same on both targets
    overrides: tuple[str, ...] = ()
    #: ``(old, new)`` source substitutions (the tutorials' size settings)
    substitutions: tuple[tuple[str, str], ...] | None = None
    #: the hydra key of the seed (``None``: the program has none)
    seed_key: str | None = None
    #: which dataset it reads: ``"minari"``, ``"d4rl"`` or ``None``
    data: str | None = None
    #: TorchRL's dataset class and keywords that fill TorchRL's cache before the run
    prepare_torchrl: tuple[str, dict[str, Any]] | None = None
    #: logged scalars that are returns (checked against TorchRL's spread)
    returns: tuple[str, ...] = ()
    #: logged scalars that are losses (checked to within an order of magnitude)
    losses: tuple[str, ...] = ()
    #: namespace variables of a tutorial to report
    collect: tuple[str, ...] = ()
    #: why the program cannot run on TorchRL here (``None``: it runs)
    torchrl_blocked: str | None = None
    #: why TorchRL's figures are no reference for mixreplay's (``None``: they are)
    reference_differs: str | None = None


# Common tiny settings of the off-policy scripts: Pendulum-v1, 64-unit networks, a CSV
# logger backend (the driver records in its place), evaluation once at the end.
_OFF_POLICY = (
    "env.name=Pendulum-v1",
    "env.max_episode_steps=200",
    "collector.total_frames=1500",
    "collector.init_random_frames=500",
    "collector.frames_per_batch=250",
    "collector.init_env_steps=100",
    "collector.env_per_collector=1",
    "replay_buffer.size=10000",
    "optim.batch_size=128",
    "optim.utd_ratio=0.5",
    "network.hidden_sizes=[64,64]",
    "logger.backend=csv",
    "logger.eval_iter=1500",
)

_REDQ = (
    "env.name=Pendulum-v1",
    "env.library=gym",
    "env.init_env_steps=200",
    "num_workers=1",
    "collector.async_collection=0",
    "collector.frames_per_batch=250",
    "collector.total_frames=1500",
    "collector.init_random_frames=500",
    "optim.init_random_frames=500",
    "optim.steps_per_batch=32",
    "buffer.size=10000",
    "buffer.batch_size=128",
    "buffer.prefetch=4",
    "network.actor_cells=64",
    "network.qvalue_cells=64",
    "loss.num_q_values=4",
    "logger.backend=csv",
    "logger.record_interval=4",
    "logger.record_frames=200",
)

_ONLINE_IQL_CQL = (
    "env.name=Pendulum-v1",
    "collector.total_frames=1500",
    "collector.init_random_frames=500",
    "collector.frames_per_batch=250",
    "collector.max_frames_per_traj=200",
    "replay_buffer.size=10000",
    "optim.batch_size=128",
    "model.hidden_sizes=[64,64]",
    "logger.backend=csv",
    "logger.eval_steps=200",
)

# The decision transformers: TorchRL's programs pass split_trajs=True and this root themselves
_DT_DATA = {
    "dataset_id": D4RL_NAME,
    "split_trajs": True,
    "use_truncated_as_done": True,
    "root": "$HOME/.cache/torchrl/data/d4rl",
}
_DT = (
    "env.name=Pendulum-v1",
    "env.backend=gymnasium",
    "env.num_eval_envs=1",
    f"replay_buffer.dataset={D4RL_NAME}",
    "replay_buffer.batch_size=32",
    "optim.pretrain_gradient_steps=200",
    "optim.warmup_steps=50",
    "transformer.n_embd=32",
    "transformer.n_layer=1",
    "transformer.n_inner=64",
    "logger.backend=csv",
    "logger.pretrain_log_interval=199",
    "logger.eval_steps=200",
)

# coding_ddpg's sizes (module-level constants of the tutorial, substituted in its source):
# Pendulum-v1, two environments (its buffer stores [envs, steps] trajectories and crops them
# along the steps), 2,000 frames, 16 updates per batch instead of 64
_CODING_DDPG = (
    ('        env_name = "HalfCheetah-v4"\n', '        env_name = "Pendulum-v1"\n'),
    ("init_env_steps = 5000\n", "init_env_steps = 200\n"),
    ("env_per_collector = 4\n", "env_per_collector = 2\n"),
    ("total_frames = 10_000  # 1_000_000\n", "total_frames = 2_000\n"),
    ("init_random_frames = 5000\n", "init_random_frames = 800\n"),
    ("buffer_size = 1_000_000\n", "buffer_size = 10_000\n"),
    ("update_to_data = 64\n", "update_to_data = 16\n"),
    ("record_interval = 10\n", "record_interval = 4\n"),
)

PRB_DEFAULT = "TorchRL's prioritized sampler needs its C++ sum trees, which do not load on torch 2.13 here (SumSegmentTreeFp32 is not available)"

PROGRAMS: dict[str, Program] = {
    "sac": Program(
        "sac/sac.py",
        _OFF_POLICY,
        seed_key="env.seed",
        returns=("eval/reward",),
        losses=("train/q_loss", "train/actor_loss"),
    ),
    "td3": Program(
        "td3/td3.py",
        _OFF_POLICY,
        seed_key="env.seed",
        returns=("eval/reward",),
        losses=("train/q_loss", "train/a_loss"),
    ),
    "ddpg": Program(
        "ddpg/ddpg.py",
        _OFF_POLICY,
        seed_key="env.seed",
        returns=("eval/reward",),
        losses=("train/loss_value", "train/loss_actor"),
    ),
    "redq": Program(
        "redq/redq.py",
        _REDQ,
        seed_key="seed",
        returns=("trainer/r_evaluation",),
        losses=("trainer/loss_qvalue", "trainer/loss_actor"),
        torchrl_blocked=PRB_DEFAULT,
    ),
    "redq_uniform": Program(
        "redq/redq.py",
        (*_REDQ, "buffer.prb=0"),
        seed_key="seed",
        returns=("trainer/r_evaluation",),
        losses=("trainer/loss_qvalue", "trainer/loss_actor"),
    ),
    "iql_online": Program(
        "iql/iql_online.py",
        (*_ONLINE_IQL_CQL, "optim.utd_ratio=0.5", "logger.eval_iter=1500"),
        seed_key="env.seed",
        returns=("eval/reward",),
        losses=("train/q_loss", "train/actor_loss", "train/value_loss"),
    ),
    "cql_online": Program(
        "cql/cql_online.py",
        (*_ONLINE_IQL_CQL, "optim.utd_ratio=0.25", "logger.log_interval=1250"),
        seed_key="env.seed",
        returns=("eval/reward",),
        losses=("train/loss_qvalue", "train/loss_actor"),
    ),
    "iql_offline": Program(
        "iql/iql_offline.py",
        (
            "env.name=Pendulum-v1",
            f"replay_buffer.dataset={D4RL_NAME}",
            "replay_buffer.batch_size=128",
            "optim.gradient_steps=600",
            "model.hidden_sizes=[64,64]",
            "logger.backend=csv",
            "logger.eval_iter=599",
            "logger.eval_steps=200",
            "logger.eval_envs=1",
        ),
        seed_key="env.seed",
        data="d4rl",
        prepare_torchrl=("D4RLExperienceReplay", {"dataset_id": D4RL_NAME}),
        returns=("evaluation_reward",),
        losses=("loss_qvalue", "loss_actor", "loss_value"),
    ),
    "cql_offline": Program(
        "cql/cql_offline.py",
        (
            "env.name=Pendulum-v1",
            f"replay_buffer.dataset={MINARI_ID}",
            "replay_buffer.batch_size=128",
            "optim.gradient_steps=600",
            "optim.policy_eval_start=300",
            "model.hidden_sizes=[64,64]",
            "logger.backend=csv",
            "logger.eval_iter=599",
            "logger.eval_steps=200",
            "logger.eval_envs=1",
            "logger.video=False",
        ),
        seed_key="env.seed",
        data="minari",
        prepare_torchrl=("MinariExperienceReplay", {"dataset_id": MINARI_ID}),
        returns=("evaluation_reward",),
        losses=("loss_qvalue", "loss_actor"),
        reference_differs=(
            "TorchRL's MinariExperienceReplay converts the Minari file to all-zero rows: "
            "TorchRL's cql_offline learns from zeros, mixreplay's from the file"
        ),
    ),
    "td3_bc": Program(
        "td3_bc/td3_bc.py",
        (
            "env.name=Pendulum-v1",
            "env.max_episode_steps=200",
            f"replay_buffer.dataset={D4RL_NAME}",
            "replay_buffer.batch_size=128",
            "optim.gradient_steps=600",
            "network.hidden_sizes=[64,64]",
            "logger.backend=csv",
            "logger.eval_iter=599",
            "logger.eval_steps=200",
        ),
        seed_key="env.seed",
        data="d4rl",
        prepare_torchrl=("D4RLExperienceReplay", {"dataset_id": D4RL_NAME}),
        returns=("evaluation_reward",),
        losses=("q_loss", "actor_loss"),
    ),
    "dt": Program(
        "decision_transformer/dt.py",
        (*_DT, "optim.batch_size=32"),
        seed_key="env.seed",
        data="d4rl",
        prepare_torchrl=("D4RLExperienceReplay", _DT_DATA),
        returns=("eval/reward",),
        losses=("train/loss",),
    ),
    "online_dt": Program(
        "decision_transformer/online_dt.py",
        (*_DT, "optim.batch_size=32", "transformer.n_head=1"),
        seed_key="env.seed",
        data="d4rl",
        prepare_torchrl=("D4RLExperienceReplay", _DT_DATA),
        returns=("eval/reward",),
        losses=("train/loss_log_likelihood",),
    ),
    "coding_ddpg": Program(
        "tutorials/coding_ddpg.py",
        substitutions=_CODING_DDPG,
        returns=("rewards_eval",),
        losses=("loss_value", "loss_actor"),
        collect=("rewards", "rewards_eval", "loss_value", "loss_actor"),
    ),
    "coding_ddpg_prb": Program(
        "tutorials/coding_ddpg.py",
        substitutions=(*_CODING_DDPG, ("prb = False\n", "prb = True\n")),
        collect=("rewards", "rewards_eval", "loss_value", "loss_actor"),
        torchrl_blocked=PRB_DEFAULT,
    ),
    "rb_tutorial": Program(
        "../rb/rb_tutorial.py",  # the port's copy: the port runs it cell by cell, this whole
        substitutions=(),
        torchrl_blocked="its prioritized cells (line 523 on): " + PRB_DEFAULT,
    ),
    "dqn": Program(
        "dqn/dqn_cartpole.py",
        (
            "collector.total_frames=3000",
            "collector.frames_per_batch=250",
            "collector.init_random_frames=500",
            "collector.annealing_frames=2000",
            "buffer.buffer_size=5000",
            "buffer.batch_size=64",
            "loss.num_updates=25",
            "logger.backend=csv",
            "logger.test_interval=2500",
            "logger.num_test_episodes=2",
        ),
        returns=("eval/reward",),
        losses=("train/q_loss",),
    ),
    "ppo": Program(
        "ppo/ppo_mujoco.py",
        (
            "env.env_name=Pendulum-v1",
            "collector.frames_per_batch=512",
            "collector.total_frames=2048",
            "loss.mini_batch_size=64",
            "loss.ppo_epochs=2",
            "logger.backend=csv",
            "logger.test_interval=2048",
            "logger.num_test_episodes=1",
        ),
        returns=("eval/reward",),
        losses=("train/loss_critic",),
    ),
}

# The prioritized variants (replay_buffer.prb=1): TorchRL's own option of each script
for _name in ("sac", "td3", "ddpg", "iql_online", "cql_online"):
    PROGRAMS[f"{_name}_prb"] = dataclasses.replace(
        PROGRAMS[_name],
        overrides=(*PROGRAMS[_name].overrides, "replay_buffer.prb=1"),
        torchrl_blocked=PRB_DEFAULT,
    )


@dataclasses.dataclass
class Result:
    """What one run gave back."""

    program: str
    target: str
    seed: int
    #: ``"finished"``, ``"failed"`` or ``"timeout"``
    status: str
    #: the subprocess, from start to exit
    wall_s: float
    #: the program itself (the driver's clock around it)
    run_s: float | None
    #: ``{name: [[step, value], ...]}`` as logged
    scalars: dict[str, list[list[Any]]]
    namespace: dict[str, Any]
    #: the traceback (a failure) or the output's tail (a timeout)
    error: str | None

    def last(self, name: str) -> float | None:
        """The last logged value of ``name`` (a list is averaged); for a tutorial, of its
        variable ``name``."""
        rows = self.scalars.get(name) or self.namespace.get(name) or []
        if not rows:
            return None
        value = rows[-1][1]
        if isinstance(value, list):
            return sum(value) / len(value) if value else None
        return value if isinstance(value, float) else None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- the offline datasets ------------------------------------------------------------------------


def _episodes(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` random-policy Pendulum-v1 episodes (gymnasium), as arrays."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    out = []
    for e in range(n):
        obs, _ = env.reset(seed=seed + e)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(np.asarray(action, dtype=np.float32))
            rewards.append(float(reward))
            terms.append(bool(terminated))
            truncs.append(bool(truncated))
            done = terminated or truncated
        out.append(
            dict(
                observations=np.stack(observations),
                actions=np.stack(actions),
                rewards=np.asarray(rewards),
                terminations=np.asarray(terms),
                truncations=np.asarray(truncs),
            )
        )
    env.close()
    return out


def write_minari(dataset_id: str, episodes: list[dict[str, Any]]) -> None:
    """Write ``episodes`` as a Minari dataset with Minari's own writer (``$MINARI_DATASETS_PATH``)."""
    import warnings

    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    env = gym.make("Pendulum-v1")
    buffers = [
        EpisodeBuffer(
            id=i,
            seed=i,
            observations=ep["observations"],
            actions=ep["actions"],
            rewards=list(ep["rewards"]),
            terminations=list(ep["terminations"]),
            truncations=list(ep["truncations"]),
            infos={},
        )
        for i, ep in enumerate(episodes)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari's advice on metadata
        minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=buffers,
            env=env,
            algorithm_name="random",
            author="mixreplay tests",
            author_email="tests@example.invalid",
            code_permalink="https://example.invalid/mixreplay/tests/torchrl/programs",
            description="random-policy Pendulum-v1 episodes for TorchRL's programs",
        )


def write_d4rl(path: pathlib.Path, episodes: list[dict[str, Any]]) -> None:
    """Write ``episodes`` as one HDF5 file in D4RL's layout."""
    import h5py
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["observations"] = np.concatenate([ep["observations"][:-1] for ep in episodes])
        f["next_observations"] = np.concatenate([ep["observations"][1:] for ep in episodes])
        f["actions"] = np.concatenate([ep["actions"] for ep in episodes])
        f["rewards"] = np.concatenate([ep["rewards"] for ep in episodes]).astype(np.float32)
        f["terminals"] = np.concatenate([ep["terminations"] for ep in episodes])
        f["timeouts"] = np.concatenate([ep["truncations"] for ep in episodes])


def prepare_data(home: pathlib.Path, env: dict[str, str]) -> None:
    """The Minari dataset and the D4RL file, in the run's fresh home."""
    saved = {k: os.environ.get(k) for k in ("MINARI_DATASETS_PATH",)}
    os.environ["MINARI_DATASETS_PATH"] = env["MINARI_DATASETS_PATH"]
    try:
        episodes = _episodes(DATASET_EPISODES)
        write_minari(MINARI_ID, episodes)
        write_d4rl(pathlib.Path(env["D4RL_DATASET_DIR"]) / f"{D4RL_NAME}.hdf5", episodes)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# What fills TorchRL's dataset cache from the local files (run in a subprocess, the run's
# environment): TorchRL's own classes and conversion code; for D4RL the download of the
# file is replaced by the local file (the only change: the network is out of reach).
_PREPARE_TORCHRL = r"""
import json, os, pathlib, sys
cls_name, kwargs = sys.argv[1], json.loads(sys.argv[2])
kwargs = {k: (pathlib.Path(os.path.expandvars(v)) if k == "root" else v) for k, v in kwargs.items()}
if cls_name == "MinariExperienceReplay":
    from torchrl.data.datasets.minari_data import MinariExperienceReplay
    MinariExperienceReplay(batch_size=1, load_from_local_minari=True, **kwargs)
else:
    import torchrl.data.datasets.d4rl as d4rl
    local = pathlib.Path(os.environ["D4RL_DATASET_DIR"]) / (kwargs["dataset_id"] + ".hdf5")
    d4rl.D4RL_DATASETS[kwargs["dataset_id"]] = "file://" + str(local)
    d4rl._download_dataset_from_url = lambda url, path: str(local)
    d4rl.D4RLExperienceReplay(batch_size=1, direct_download=True, **kwargs)
"""


# -- running -------------------------------------------------------------------------------------


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(
    name: str,
    target: str,
    *,
    seed: int = 0,
    timeout: float = 600.0,
    workdir: pathlib.Path | None = None,
) -> Result:
    """Run program ``name`` on ``target`` (``"torchrl"`` or ``"mixreplay"``) in a subprocess.

    The subprocess (and anything it starts) is killed after ``timeout`` seconds. ``workdir``
    (a fresh temporary directory when ``None``, removed after) becomes the run's ``HOME``.
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"program-{name}-") as tmp:
            return run(name, target, seed=seed, timeout=timeout, workdir=pathlib.Path(tmp))
    program = PROGRAMS[name]
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        MIXREPLAY_TORCHRL_TARGET=target,
        MINARI_DATASETS_PATH=str(home / ".minari" / "datasets"),
        D4RL_DATASET_DIR=str(home / ".d4rl" / "datasets"),
        MIXREPLAY_DATA_DIR=str(home / ".cache" / "mixreplay"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        WANDB_MODE="disabled",
        MPLBACKEND="Agg",  # the tutorials plot
        TMPDIR=str(workdir / "tmp"),
        PYTHONWARNINGS="ignore",
        # one thread per process: tiny networks on a shared 2-core machine are several
        # times slower when two threads per process spin against other processes
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    (workdir / "tmp").mkdir(exist_ok=True)
    out = workdir / "result.json"
    argv = list(program.overrides)
    if program.seed_key is not None:
        argv.append(f"{program.seed_key}={seed}")
    argv += [f"hydra.run.dir={workdir / 'hydra'}", "hydra.output_subdir=null"]
    spec = {
        "script": program.script,
        "argv": argv,
        "substitutions": None if program.substitutions is None else list(program.substitutions),
        "collect": list(program.collect),
        "workdir": str(workdir),
        "out": str(out),
    }
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    start = time.perf_counter()
    log = workdir / "output.txt"
    if program.data is not None:
        prepare_data(home, env)
    with log.open("w") as output:
        commands = []
        if target == "torchrl" and program.prepare_torchrl is not None:
            cls_name, kwargs = program.prepare_torchrl
            commands.append([sys.executable, "-c", _PREPARE_TORCHRL, cls_name, json.dumps(kwargs)])
        commands.append([sys.executable, str(HERE / "_driver.py"), str(spec_path)])
        status = "finished"
        for command in commands:
            left = timeout - (time.perf_counter() - start)
            proc = subprocess.Popen(
                command,
                cwd=workdir,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group: the watchdog kills it whole
            )
            try:
                code = proc.wait(timeout=max(left, 1.0))
            except subprocess.TimeoutExpired:
                _kill(proc)
                proc.wait()
                status = "timeout"
                break
            finally:
                _kill(proc)  # collectors' and envs' children, if any outlived the program
            if code != 0:
                status = "failed"
                break
    wall = time.perf_counter() - start
    data: dict[str, Any] = {}
    if out.exists():
        data = json.loads(out.read_text())
    error = data.get("error")
    if status != "finished" and not error:
        error = log.read_text()[-8000:]
    return Result(
        program=name,
        target=target,
        seed=seed,
        status=status,
        wall_s=wall,
        run_s=data.get("run_s"),
        scalars=data.get("scalars", {}),
        namespace=data.get("namespace", {}),
        error=error,
    )


# -- the reference results file ------------------------------------------------------------------

RESULTS = ROOT / "benchmarks" / "results" / "torchrl_programs.json"


def _environment() -> dict[str, Any]:
    import platform

    import tensordict
    import torch
    import torchrl

    import mixreplay

    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu,
            "cores": os.cpu_count(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "tensordict": tensordict.__version__,
            "torchrl": torchrl.__version__,
            "mixreplay": mixreplay.__version__,
        },
    }


def _summary(result: Result) -> dict[str, Any]:
    return {
        "seed": result.seed,
        "status": result.status,
        "wall_s": round(result.wall_s, 2),
        "run_s": None if result.run_s is None else round(result.run_s, 2),
        # every figure logged (its last value), not only those the test checks
        "last": {
            k: result.last(k)
            for k in sorted({*result.scalars, *result.namespace})
            if not k.startswith("time/")
        },
        "error": None if result.error is None else result.error[-1500:],
    }


def record(names: list[str], torchrl_runs: int, mixreplay_runs: int, timeout: float) -> None:
    """Run ``names`` (TorchRL ``torchrl_runs`` seeds, mixreplay ``mixreplay_runs``) and merge
    them into :data:`RESULTS`; the time ratio comes from TorchRL's and mixreplay's seed-0 runs,
    made back to back."""
    data: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    programs = data.get("detail", {}).get("programs", {})
    for name in names:
        program = PROGRAMS[name]
        entry = programs.get(name, {})
        entry["script"] = program.script
        entry["settings"] = list(program.overrides) or [
            list(x) for x in program.substitutions or ()
        ]
        entry["torchrl_blocked"] = program.torchrl_blocked
        # a program TorchRL cannot run: one run records where it stops
        runs = {
            "torchrl": min(torchrl_runs, 1) if program.torchrl_blocked else torchrl_runs,
            "mixreplay": mixreplay_runs,
        }
        for seed in range(max(runs.values())):
            for target in ("torchrl", "mixreplay"):
                if seed >= runs[target]:
                    continue
                result = run(name, target, seed=seed, timeout=timeout)
                kept = [r for r in entry.get(target, []) if r["seed"] != seed]
                entry[target] = sorted([*kept, _summary(result)], key=lambda r: r["seed"])
                print(
                    f"{name} {target} seed {seed}: {result.status} {result.wall_s:.1f} s",
                    flush=True,
                )
        programs[name] = entry
        data.setdefault("detail", {})["programs"] = programs
        _write(data)


def _write(data: dict[str, Any]) -> None:
    import datetime

    rows = []
    for name, entry in data["detail"]["programs"].items():
        theirs = [r for r in entry.get("torchrl", []) if r["status"] == "finished"]
        ours = [r for r in entry.get("mixreplay", []) if r["status"] == "finished"]
        if theirs and ours and theirs[0]["seed"] == ours[0]["seed"] == 0:
            t, m = theirs[0]["run_s"], ours[0]["run_s"]
            rows.append(
                {
                    "name": f"{name}: the program's run time",
                    "unit": "s",
                    "mixreplay": m,
                    "peer": "torchrl",
                    "peer_value": t,
                    "ratio": round(t / m, 3),
                    "better": "lower",
                }
            )
    detail = data.pop("detail")
    data.clear()
    data.update(
        benchmark="torchrl_programs",
        command="python tests/torchrl/programs/run_program.py --record --torchrl-runs 3 --mixreplay-runs 1",
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **_environment(),
        settings={
            "threads": "OMP_NUM_THREADS=1 per program process",
            "datasets": f"minari:{MINARI_ID}, d4rl:{D4RL_NAME} ({DATASET_EPISODES} random-policy "
            "Pendulum-v1 episodes of 200 steps)",
            "per program": "its hydra overrides or tutorial substitutions, under detail.programs.<name>.settings",
        },
        rows=rows,
        notes=(
            "TorchRL's training programs (tests/torchrl/programs, copied from pytorch/rl at "
            "the 0.14 release; the commit is in each copy's header) run with tiny settings, the same on both targets, each in its own "
            "process. ratio = TorchRL's run time / mixreplay's (seed 0 of each, run back to "
            "back); run time is the program's own, from its import to its end. Programs whose "
            "torchrl_blocked is set cannot run on TorchRL here (the reason is given); "
            "detail.programs.<name>.torchrl holds TorchRL's figures over several seeds, from which the "
            "CI test's expected ranges come (expected_range in run_program.py)."
        ),
    )
    data["detail"] = detail
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")


def expected_range(
    name: str, metric: str, data: dict[str, Any] | None = None
) -> tuple[float, float]:
    """What a mixreplay run's last ``metric`` must lie in, from TorchRL's recorded runs.

    A return: the spread of TorchRL's seeds, widened on each side by the larger of that
    spread and 0.4 of their mean's magnitude (runs of a few thousand frames differ that
    much: ppo's, unseeded, gave -1,145 to -1,738 on TorchRL here). A loss: within an order of magnitude of TorchRL's (ten times the largest
    magnitude seen; for a loss TorchRL kept positive, at least a tenth of its smallest).

    Raises:
        KeyError: TorchRL recorded no finished run of ``name`` with ``metric``.
    """
    if data is None:
        data = json.loads(RESULTS.read_text())
    runs = data["detail"]["programs"][name]["torchrl"]
    values = [r["last"].get(metric) for r in runs if r["status"] == "finished"]
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        raise KeyError(f"TorchRL recorded no value of {metric!r} for {name}")
    lo, hi = min(values), max(values)
    if metric in PROGRAMS[name].returns:
        margin = max(hi - lo, 0.4 * abs(sum(values) / len(values)))
        return lo - margin, hi + margin
    top = 10 * max(abs(lo), abs(hi))
    if lo > 0:
        return lo / 10, top
    return -top, top


def table(data: dict[str, Any] | None = None) -> str:
    """The results file as a markdown table: each program, where it runs, its time ratio."""
    if data is None:
        data = json.loads(RESULTS.read_text())
    lines = [
        "| program | TorchRL here | mixreplay | run time TorchRL / mixreplay (s) | ratio |",
        "|---|---|---|---:|---:|",
    ]
    for name, entry in data["detail"]["programs"].items():
        theirs, ours = entry.get("torchrl", []), entry.get("mixreplay", [])
        t = theirs[0] if theirs else None
        m = ours[0] if ours else None
        t_status = (
            "no: prioritized (C++ trees)"
            if entry.get("torchrl_blocked")
            else (t["status"] if t else "-")
        )
        m_status = m["status"] if m else "-"
        times = ratio = ""
        if t and m and t["status"] == m["status"] == "finished":
            times = f"{t['run_s']:.1f} / {m['run_s']:.1f}"
            ratio = f"{t['run_s'] / m['run_s']:.2f}"
        lines.append(f"| `{name}` | {t_status} | {m_status} | {times} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("program", nargs="?", choices=sorted(PROGRAMS))
    parser.add_argument("--target", choices=("torchrl", "mixreplay"), default="mixreplay")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=pathlib.Path, help="run in this directory and keep it")
    parser.add_argument("--list", action="store_true", help="list the programs")
    parser.add_argument(
        "--record",
        nargs="*",
        metavar="PROGRAM",
        help=f"run these programs (all when none is named) and merge them into {RESULTS.relative_to(ROOT)}",
    )
    parser.add_argument("--table", action="store_true", help="print the results file as a table")
    parser.add_argument("--torchrl-runs", type=int, default=3)
    parser.add_argument("--mixreplay-runs", type=int, default=1)
    args = parser.parse_args(argv)
    if args.table:
        print(table())
        return 0
    if args.record is not None:
        names = args.record or list(PROGRAMS)
        record(names, args.torchrl_runs, args.mixreplay_runs, args.timeout)
        return 0
    if args.list or args.program is None:
        for name, program in PROGRAMS.items():
            print(f"{name:24s} {program.script}")
        return 0
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    result = run(args.program, args.target, seed=args.seed, timeout=args.timeout, workdir=args.keep)
    summary = {
        "program": result.program,
        "target": result.target,
        "status": result.status,
        "wall_s": round(result.wall_s, 1),
        "run_s": None if result.run_s is None else round(result.run_s, 1),
        "last": {k: result.last(k) for k in sorted({*result.scalars, *result.namespace})},
    }
    print(json.dumps(summary, indent=1))
    if result.error:
        print(result.error, file=sys.stderr)
    return 0 if result.status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
