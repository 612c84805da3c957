"""Asynchronous SAC fine-tuning with offline data, at the update-to-data ratio set.

    python examples/async_sac.py                       # 4 runs of 20 s, ~3 min on 2 cores
    python examples/async_sac.py --seconds 60 --utd 8  # longer runs, another ratio

Collectors (Ray actors) step MountainCarContinuous-v0 with the latest policy and write
every transition through ``rb.writer()`` into a :class:`~mixreplay.distributed.RayReplayBuffer`
hosting an :class:`~mixreplay.OfflineToOnlineReplayBuffer` (a scripted expert's rows
offline, 50 % of every batch). One learner (the driver) runs SAC updates
(:mod:`mixreplay.demo.sac`), one batch each, prefetched from the actor. Nothing
synchronises them but the buffer.

The collectors are throttled to step 4 times slower, then 4 times faster, than the
learner needs for the ratio set (``--utd``, measured against the learner's own speed
first). At each speed the same run goes once with
``rate_limiter=SampleToInsertRatio(samples_per_insert=utd * batch, ...)`` and once
without. Measured: learner updates per environment step after the warm-up (the first
``min_size_to_sample`` rows), over the run and in 2-second windows. With the limiter
the ratio stays at the one set whichever side is faster (the faster side waits);
without it, it is whatever the speeds make it (up to 16 with slow collectors, down
to 1 with fast ones, less where the collectors' work slows the learner on a shared
machine).

Writes ``docs/async_utd.png`` (``--plot``) and the figures behind it,
``docs/async_sac.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed_collectors import ENV_ID, expert_dataset, ted_rows  # noqa: E402

from mixreplay import (  # noqa: E402
    BufferClosedError,
    OfflineToOnlineReplayBuffer,
    SampleToInsertRatio,
)
from mixreplay.demo.sac import SAC, SACConfig  # noqa: E402
from mixreplay.distributed import RayReplayBuffer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 2.0  # seconds per window of the windowed ratio


def make_agent(env, seed: int, hidden: int, batch: int) -> SAC:
    obs, act = env.observation_space, env.action_space
    config = SACConfig(hidden=hidden, batch_size=batch)  # utd=1: one batch per update
    return SAC(obs.low, obs.high, act.low, act.high, config=config, seed=seed)


def define_actors(ray):
    @ray.remote(num_cpus=0)
    class Policy:
        """The latest actor weights, published by the learner, read by the collectors."""

        def __init__(self):
            self.weights, self.stopped = None, False

        def set(self, weights) -> None:
            self.weights = weights

        def stop(self) -> None:
            self.stopped = True

        def get(self):
            return self.weights, self.stopped

    @ray.remote(num_cpus=0)
    class Collector:
        """One environment stepped at a set rate with the latest policy."""

        def __init__(self, seed: int, hidden: int, batch: int):
            import gymnasium as gym

            torch.set_num_threads(1)
            self.env = gym.make(ENV_ID)
            self.agent = make_agent(self.env, seed, hidden, batch)
            self.obs, _ = self.env.reset(seed=seed)

        def run(self, rb, policy, steps_per_s: float) -> int:
            """Step until the learner says stop (or closes the buffer); the steps taken."""
            import ray

            writer = rb.writer(chunk_rows=1)  # each row sent at once: the limiter sees it
            due, steps, asked = time.monotonic(), 0, 0.0
            try:
                while True:
                    if time.monotonic() - asked > 0.2:  # the latest policy, and whether to stop
                        weights, stopped = ray.get(policy.get.remote())
                        asked = time.monotonic()
                        if stopped:
                            break
                        if weights is not None:
                            self.agent.actor.load_state_dict(weights)
                    action = self.agent.act(self.obs)
                    next_obs, reward, term, trunc, _ = self.env.step(action)
                    row = ted_rows([self.obs], [action], [reward], [next_obs], [term], [trunc])
                    writer.add(row[0])  # waits while the rate limiter holds the rows
                    steps += 1
                    self.obs = next_obs if not (term or trunc) else self.env.reset()[0]
                    due = max(due + 1.0 / steps_per_s, time.monotonic() - 1.0 / steps_per_s)
                    time.sleep(max(0.0, due - time.monotonic()))
                writer.flush()
            except BufferClosedError:
                pass  # the learner is done: the buffer was closed while these rows waited
            return steps

    return Policy, Collector


def make_buffer(path: str, args, limited: bool) -> RayReplayBuffer:
    limiter = None
    if limited:
        spi = args.utd * args.batch  # every row of a batch counts, offline ones included
        limiter = SampleToInsertRatio(
            samples_per_insert=spi, min_size_to_sample=args.min_size, error_buffer=2 * spi
        )
    return RayReplayBuffer(
        OfflineToOnlineReplayBuffer,
        f"memmap:{path}",
        online_capacity=100_000,
        offline_fraction=0.5,
        batch_size=args.batch,
        generator=args.seed,
        prefetch=2,
        rate_limiter=limiter,
    )


def learner_rate(path: str, args, env) -> float:
    """Updates per second of the learner alone (batches always ready): what collectors match."""
    rb = make_buffer(path, args, limited=False)
    agent = make_agent(env, args.seed, args.hidden, args.batch)
    for _ in range(10):
        agent.update(rb)  # warm up (the first batches fetch the layout, torch allocates)
    t, n = time.perf_counter(), 100
    for _ in range(n):
        agent.update(rb)
    rate = n / (time.perf_counter() - t)
    rb.kill()
    return rate


def run(ray, actors, path: str, args, env, speed: float, rate: float, limited: bool) -> dict:
    """One run: collectors at ``speed`` times the matched rate; the ratio over time."""
    Policy, Collector = actors
    rb = make_buffer(path, args, limited)
    agent = make_agent(env, args.seed, args.hidden, args.batch)
    policy = Policy.remote()
    policy.set.remote(agent.actor.state_dict())
    per_collector = speed * rate / args.utd / args.collectors
    collectors = [
        Collector.remote(args.seed + 1 + i, args.hidden, args.batch) for i in range(args.collectors)
    ]
    runs = [c.run.remote(rb, policy, per_collector) for c in collectors]
    deadline = time.monotonic() + 120
    while rb.write_count < args.min_size:  # both runs learn once the warm-up rows are in
        ended, _ = ray.wait(runs, timeout=0)
        if ended:
            ray.get(ended)  # a collector that failed says why
        if time.monotonic() > deadline:
            raise RuntimeError(f"the collectors wrote no {args.min_size} rows in 120 s")
        time.sleep(0.05)
    start_rows = rb.write_count
    t0 = time.perf_counter()
    series = [(0.0, 0, start_rows, None)]
    updates, last = 0, t0
    while (now := time.perf_counter()) - t0 < args.seconds:
        agent.update(rb)  # with the limiter: waits while the collectors are behind
        updates += 1
        if updates % 100 == 0:
            policy.set.remote(agent.actor.state_dict())
        if now - last >= 0.5:
            counts = rb.rate_limiter_counts if limited else None
            series.append((now - t0, updates, rb.write_count, counts and tuple(counts)))
            last = now
    series.append(
        (
            time.perf_counter() - t0,
            updates,
            rb.write_count,
            limited and tuple(rb.rate_limiter_counts),
        )
    )
    policy.stop.remote()
    rb.close()  # collectors waiting for the limiter wake (BufferClosedError) and stop
    steps = sum(ray.get(runs))
    rb.kill()
    for c in collectors:
        ray.kill(c)
    ray.kill(policy)
    return summarise(series, start_rows, args, speed, limited, steps)


def summarise(series, start_rows: int, args, speed: float, limited: bool, steps: int) -> dict:
    t = np.array([s[0] for s in series])
    upd = np.array([s[1] for s in series], dtype=float)
    rows = np.array([s[2] for s in series], dtype=float) - start_rows
    with np.errstate(divide="ignore", invalid="ignore"):
        cumulative = np.where(rows > 0, upd / np.maximum(rows, 1), np.nan)
    windows = []
    edges = np.arange(0.0, t[-1] + 1e-9, WINDOW)
    for a, b in zip(edges[:-1], edges[1:]):
        i, j = np.searchsorted(t, a), np.searchsorted(t, b, side="right") - 1
        if j > i and rows[j] > rows[i]:
            windows.append(float((upd[j] - upd[i]) / (rows[j] - rows[i])))
    out = {
        "collector_speed": speed,
        "rate_limiter": limited,
        "seconds": float(t[-1]),
        "updates": int(upd[-1]),
        "env_steps_after_warmup": int(rows[-1]),
        "env_steps_collected": steps,
        "utd": float(upd[-1] / max(rows[-1], 1)),
        "window_utd": {
            "mean": float(np.mean(windows)) if windows else None,
            "min": float(np.min(windows)) if windows else None,
            "max": float(np.max(windows)) if windows else None,
            "windows": len(windows),
        },
        "series": {
            "t": [round(float(x), 3) for x in t],
            "updates": [int(x) for x in upd],
            "env_steps": [int(x) for x in rows],
            "utd": [None if np.isnan(x) else round(float(x), 4) for x in cumulative],
        },
    }
    last = series[-1][3]
    if limited and last:
        i, s, n = last
        out["limiter_counts"] = {"inserts": i, "samples": s, "size": n}
    return out


def plot(results: list[dict], args, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colors = {0.25: "tab:blue", 4.0: "tab:red"}
    for r in results:
        s = r["series"]
        t = [x for x, u in zip(s["t"], s["utd"]) if u is not None]
        u = [u for u in s["utd"] if u is not None]
        speed = r["collector_speed"]
        label = (
            f"collectors {'4x slower' if speed < 1 else '4x faster' if speed > 1 else 'matched'}"
            f", {'with' if r['rate_limiter'] else 'without'} rate limiter"
        )
        ax.plot(
            t,
            u,
            color=colors.get(speed, "tab:gray"),
            linestyle="-" if r["rate_limiter"] else "--",
            linewidth=2 if r["rate_limiter"] else 1.5,
            label=label,
        )
    ax.axhline(args.utd, color="black", linewidth=0.8, linestyle=":", label=f"UTD set: {args.utd}")
    ax.set_yscale("log", base=2)
    lo, hi = ax.get_ylim()
    ticks = [2.0**k for k in range(-6, 8) if lo <= 2.0**k <= hi]
    ax.set_yticks(ticks, [f"{t:g}" if t >= 1 else f"1/{1 / t:g}" for t in ticks])
    ax.set_xlabel("seconds of learning")
    ax.set_ylabel(f"updates per env step\n(samples per insert / {args.batch})")
    ax.set_title(
        f"Asynchronous SAC, {args.collectors} Ray collectors, one learner "
        f"(batch {args.batch}, {ENV_ID})",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="learning time per run")
    parser.add_argument("--utd", type=int, default=4, help="updates per env step to hold")
    parser.add_argument("--speeds", type=float, nargs="+", default=[0.25, 4.0],
                        help="collector speeds, as multiples of what the UTD needs")  # fmt: skip
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--min-size", type=int, default=32, help="online rows before learning")
    parser.add_argument("--offline", type=int, default=5000, help="expert transitions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learner-rate", type=float, default=None,
                        help="updates/s of the learner alone (default: measured first)")  # fmt: skip
    parser.add_argument("--plot", default=str(ROOT / "docs" / "async_utd.png"),
                        help="the figure ('' for none)")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "docs" / "async_sac.json"),
                        help="the figures behind it ('' for none)")  # fmt: skip
    args = parser.parse_args(argv)
    missing = [n for n in ("ray", "gymnasium") if importlib.util.find_spec(n) is None]
    if missing:
        sys.exit(
            f"examples/async_sac.py: error: needs {', '.join(missing)}, not installed; "
            'pip install "mixreplay[ray,demo]"'
        )
    import gymnasium as gym
    import ray

    # the collectors (Ray actors) use its functions: sent by value, workers need not import it
    ray.cloudpickle.register_pickle_by_value(sys.modules["distributed_collectors"])
    torch.set_num_threads(1)
    began = time.perf_counter()
    work = tempfile.TemporaryDirectory(prefix="mixreplay-async-")
    path, _ = expert_dataset(os.path.join(work.name, "expert"), args.offline, args.seed)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        env = gym.make(ENV_ID)
        rate = args.learner_rate or learner_rate(path, args, env)
        print(
            f"learner alone: {rate:.0f} updates/s, so UTD {args.utd} needs "
            f"{rate / args.utd:.1f} env steps/s",
            flush=True,
        )
        actors = define_actors(ray)
        results = []
        for speed in args.speeds:
            for limited in (True, False):
                r = run(ray, actors, path, args, env, speed, rate, limited)
                results.append(r)
                w = r["window_utd"]
                print(
                    f"collectors x{speed:g}, {'with' if limited else 'no'} limiter: "
                    f"{r['updates']:,} updates / {r['env_steps_after_warmup']:,} env steps = "
                    f"UTD {r['utd']:.2f}; per {WINDOW:g}-s window mean {w['mean']:.2f}, "
                    f"range {w['min']:.2f}-{w['max']:.2f}",
                    flush=True,
                )
    finally:
        ray.shutdown()
        work.cleanup()
    out = {
        "example": "async_sac",
        "command": "python examples/async_sac.py" + (" " + " ".join(argv) if argv else ""),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("plot", "out")},
        "learner_updates_per_s": rate,
        "runs": results,
        "seconds": time.perf_counter() - began,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.plot:
        plot(results, args, Path(args.plot))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
