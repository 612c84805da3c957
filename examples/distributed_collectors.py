"""Collectors on Ray feed one replay buffer; a learner runs SAC on mixed offline/online batches.

    python examples/distributed_collectors.py                 # local cluster, ~40 s on 2 cores
    python examples/distributed_collectors.py --updates 3000  # long enough to learn, ~65 s

The default run checks the plumbing (1,000 updates do not train SAC on this task);
with ``--updates 3000`` (seed 0, 2 loaded cores) 9 of the last 10 training episodes
reached the goal and the evaluation episode returned 94.6.

What it shows:

- a noisy scripted expert (MountainCarContinuous-v0) written as a memory-mapped
  offline dataset, opened by the buffer actor itself (``"memmap:<dir>"``): the rows
  never travel;
- :class:`~mixreplay.distributed.RayReplayBuffer` hosting an
  :class:`~mixreplay.OfflineToOnlineReplayBuffer` (50 % offline rows per batch), pinned
  to the node where the dataset was written;
- N Gymnasium collectors as Ray actors, each holding the handle and writing with
  ``rb.writer()`` (rows batched, sends not awaited); they act with the latest policy
  snapshot, published once with ``ray.put`` and read by every collector;
- one learner (the driver) running SAC updates (:mod:`mixreplay.demo.sac`) on batches
  prefetched from the actor (``prefetch=2``).

On a multi-node cluster, keep Ray's token authentication on, on every node
(Ray 2.59+ enables it for local clusters; set it explicitly for ``ray start``)::

    # head node
    export RAY_AUTH_MODE=token
    ray get-auth-token --generate            # writes ~/.ray/auth_token once
    ray start --head --port=6379
    # every worker node: the same token (copy ~/.ray/auth_token, mode 600, or point
    # RAY_AUTH_TOKEN_PATH at it), then
    export RAY_AUTH_MODE=token
    ray start --address=<head-ip>:6379
    # the driver, on the head node
    export RAY_AUTH_MODE=token
    python examples/distributed_collectors.py --address auto --collectors 16

Ray's token travels in clear text: keep the cluster on a private network (or a VPN).
The buffer actor is pinned to the driver's node because the offline dataset is
written there; with a dataset on shared storage, drop the pin and pass its path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import numpy as np
import torch
from tensordict import TensorDict

from mixreplay import OfflineToOnlineReplayBuffer
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.demo.sac import SAC, SACConfig
from mixreplay.distributed import RayReplayBuffer

ENV_ID = "MountainCarContinuous-v0"


def ted_rows(obs, actions, rewards, next_obs, terminated, truncated) -> TensorDict:
    """Transitions ``[n]`` in TorchRL's TED layout (rewards and flags ``[n, 1]``)."""
    n = len(rewards)
    f32 = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32)).reshape(n, -1)  # noqa: E731
    flag = lambda x: torch.as_tensor(np.asarray(x, dtype=bool)).reshape(n, 1)  # noqa: E731
    term, trunc = flag(terminated), flag(truncated)
    false = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": f32(obs),
            "action": f32(actions),
            "done": false,
            "terminated": false.clone(),
            "truncated": false.clone(),
            "next": {
                "observation": f32(next_obs),
                "reward": f32(rewards),
                "done": term | trunc,
                "terminated": term,
                "truncated": trunc,
            },
        },
        batch_size=[n],
    )


def expert_dataset(path: str, transitions: int, seed: int) -> tuple[str, int]:
    """The scripted expert (push the way the car moves, plus noise) as a memmap dataset.

    Whole episodes, so at least ``transitions`` rows; returns the path and the row count.
    """
    import gymnasium as gym

    env = gym.make(ENV_ID)
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("obs", "act", "rew", "next", "term", "trunc")}
    starts, episode = [], 0
    while len(cols["rew"]) < transitions:
        obs, _ = env.reset(seed=seed + episode)
        starts.append(len(cols["rew"]))
        done = False
        while not done:
            action = np.clip([np.sign(obs[1]) + 0.5 * rng.standard_normal()], -1, 1).astype(
                np.float32
            )
            next_obs, reward, term, trunc, _ = env.step(action)
            for k, v in zip(cols, (obs, action, reward, next_obs, term, trunc)):
                cols[k].append(v)
            obs, done = next_obs, term or trunc
        episode += 1
    rows = ted_rows(*(cols[k] for k in ("obs", "act", "rew", "next", "term", "trunc")))
    write_memmap_dataset(path, rows, episode_starts=starts, source_id=f"scripted-expert:{ENV_ID}")
    return path, len(rows)


def evaluate(agent: SAC, env, seed: int) -> tuple[float, bool]:
    """Return of one episode of the deterministic policy, and whether it reached the goal."""
    obs, _ = env.reset(seed=10_000 + seed)
    total, done, term = 0.0, False, False
    while not done:
        obs, reward, term, trunc, _ = env.step(agent.act(obs, deterministic=True))
        total += float(reward)
        done = term or trunc
    return total, bool(term)


def make_agent(env, seed: int) -> SAC:
    obs, act = env.observation_space, env.action_space
    return SAC(
        obs.low,
        obs.high,
        act.low,
        act.high,
        config=SACConfig(hidden=128, batch_size=256),
        seed=seed,
    )


class TimedBuffer:
    """The learner's view of the buffer: counts the time spent waiting for batches."""

    def __init__(self, rb: RayReplayBuffer):
        self.rb = rb
        self.waited = 0.0

    def sample(self, batch_size=None):
        t = time.perf_counter()
        batch = self.rb.sample(batch_size)
        self.waited += time.perf_counter() - t
        return batch


def define_collector(ray):
    @ray.remote(num_cpus=0)
    class Collector:
        """One environment, the buffer's handle and a copy of the policy."""

        def __init__(self, rb: RayReplayBuffer, seed: int):
            import gymnasium as gym

            torch.set_num_threads(1)
            self.env = gym.make(ENV_ID)
            self.agent = make_agent(self.env, seed)
            self.writer = rb.writer()
            self.obs, _ = self.env.reset(seed=seed)
            self.ep_return, self.returns, self.successes = 0.0, [], []

        def run(self, weights, steps: int) -> dict:
            """``steps`` env steps with the policy ``weights`` (a ``ray.put`` snapshot)."""
            self.agent.actor.load_state_dict(weights)
            for _ in range(steps):
                action = self.agent.act(self.obs)
                next_obs, reward, term, trunc, _ = self.env.step(action)
                self.writer.extend(
                    ted_rows([self.obs], [action], [reward], [next_obs], [term], [trunc])
                )
                self.ep_return += float(reward)
                self.obs = next_obs
                if term or trunc:
                    self.returns.append(self.ep_return)
                    self.successes.append(bool(term))
                    self.ep_return = 0.0
                    self.obs, _ = self.env.reset()
            self.writer.flush(wait=False)  # this round's rows go out now, without waiting
            out = {"steps": steps, "returns": self.returns, "successes": self.successes}
            self.returns, self.successes = [], []
            return out

        def close(self) -> int:
            """Wait until every row sent has been written; return how many were sent.

            Closing the writer also tells the buffer actor that this writer is done, so
            its record is the first to go when the actor's table of writers is full.
            """
            self.writer.close()
            return self.writer.rows_sent

    return Collector


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--address", default=None, help="a running cluster ('auto'); default: a local one"
    )
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--updates", type=int, default=1000, help="SAC updates of the learner")
    parser.add_argument(
        "--round-steps", type=int, default=100, help="env steps per collector round"
    )
    parser.add_argument("--offline", type=int, default=10_000, help="expert transitions")
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    missing = [name for name in ("ray", "gymnasium") if importlib.util.find_spec(name) is None]
    if missing:  # one line, not a traceback from inside an import
        sys.exit(
            f"examples/distributed_collectors.py: error: needs {', '.join(missing)}, not "
            'installed; pip install "mixreplay[ray,demo]"'
        )

    import gymnasium as gym
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    work = tempfile.TemporaryDirectory(prefix="mixreplay-example-")
    path, offline_rows = expert_dataset(os.path.join(work.name, "expert"), args.offline, args.seed)
    if args.address is None:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    else:
        ray.init(address=args.address, logging_level="ERROR")
    try:
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        rb = RayReplayBuffer(
            OfflineToOnlineReplayBuffer,
            f"memmap:{path}",
            online_capacity=100_000,
            offline_fraction=0.5,
            batch_size=256,
            generator=args.seed,
            prefetch=args.prefetch,
            ray_options={"scheduling_strategy": here},
        )
        env = gym.make(ENV_ID)
        agent = make_agent(env, args.seed)
        Collector = define_collector(ray)
        collectors = [Collector.remote(rb, args.seed + 1 + i) for i in range(args.collectors)]

        weights = ray.put(agent.actor.state_dict())  # one snapshot in the object store, read by all
        learner = TimedBuffer(rb)
        idle, running = list(collectors), {}
        env_steps = updates = 0
        returns, successes = [], []
        lead = args.round_steps * args.collectors  # how far collectors may run ahead (UTD 1)
        t_learn = time.perf_counter()
        while updates < args.updates:
            while idle and env_steps + (len(running) + 1) * args.round_steps <= updates + lead:
                c = idle.pop()
                running[c.run.remote(weights, args.round_steps)] = c
            done = (
                ray.wait(list(running), num_returns=len(running), timeout=0)[0] if running else []
            )
            for ref in done:
                stats = ray.get(ref)
                idle.append(running.pop(ref))
                env_steps += stats["steps"]
                returns += stats["returns"]
                successes += stats["successes"]
            if updates >= env_steps:  # one update per env step: wait for experience
                if running:
                    ray.wait(list(running), num_returns=1)
                continue
            agent.update(learner)  # samples through the handle, prefetching
            updates += 1
            if updates % 250 == 0:
                print(
                    f"{updates:,}/{args.updates:,} updates, {env_steps:,} env steps collected, "
                    f"{time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
            if updates % 50 == 0:  # publish a new policy snapshot
                weights = ray.put(agent.actor.state_dict())
        learn_s = time.perf_counter() - t_learn
        for stats in ray.get(list(running)):  # rounds still running when the learner stopped
            env_steps += stats["steps"]
            returns += stats["returns"]
            successes += stats["successes"]
        # every row is in the buffer now; each collector says how many it sent
        collected = sum(ray.get([c.close.remote() for c in collectors]))
        eval_return, reached = evaluate(agent, env, args.seed)
        out = {
            "eval_return": eval_return,
            "eval_reached_goal": reached,
            "wait_share": learner.waited / learn_s,
            "env_steps": env_steps,
            "collected_rows": collected,
            "offline_rows": offline_rows,
            "updates": updates,
            "updates_per_s": updates / learn_s,
            "buffer_rows": len(rb),
            "episodes": len(returns),
            "last_returns": [round(r, 1) for r in returns[-5:]],
            "training_successes": int(sum(successes)),
            "seconds": time.perf_counter() - t0,
        }
        rb.kill()
    finally:
        ray.shutdown()
        work.cleanup()
    print(report(out, args))
    return out


def report(out: dict, args) -> str:
    """What the run measured, and how to read it."""
    stored = out["buffer_rows"] - out["offline_rows"]
    arrived = (
        "every collected row stored once"
        if stored == out["collected_rows"]
        else f"{stored:,} stored for {out['collected_rows']:,} sent: rows lost or duplicated"
    )
    if out["eval_reached_goal"]:
        reading = f"the policy reaches the goal after {out['updates']:,} updates."
    else:
        reading = (
            f"{out['updates']:,} updates check the distributed plumbing, they do not train the "
            "policy: with the same SAC and 50/50 batches, `mixreplay demo` first reaches a return "
            "of 80 after a median of 1,500 steps (README). Run with --updates 3000 to train."
        )
    return "\n".join(
        [
            f"Collectors: {args.collectors} Ray actors ran {out['env_steps']:,} steps of {ENV_ID} "
            f"and wrote them through rb.writer(); {out['episodes']} training episodes finished, "
            f"{out['training_successes']} reached the goal (last returns {out['last_returns']}).",
            f"Buffer actor: {out['buffer_rows']:,} rows = {out['offline_rows']:,} expert rows "
            f"(memory-mapped by the actor) + {stored:,} collected ({arrived}).",
            f"Learner: {out['updates']:,} SAC updates on 50 % offline / 50 % online batches, "
            f"{out['updates_per_s']:.0f} updates/s, {out['wait_share']:.0%} of its time waiting "
            f"for batches (prefetch={args.prefetch}); {out['seconds']:.0f} s in all.",
            f"Evaluation: one deterministic episode, return {out['eval_return']:.1f} "
            f"({'goal reached' if out['eval_reached_goal'] else 'goal not reached'}): {reading}",
        ]
    )


if __name__ == "__main__":
    main()
