"""How long a learner waits for batches, with and without ``prefetch=2``.

A learner step here is: take a batch (``rb.sample()``), write one new row
(``rb.extend``), then do ~2 ms of torch work that reads the batch (a small MLP
forward/backward, calibrated at start). Uniform mixed buffer, Hopper-shaped
rows (offline 200,000 rows, online 100,000), batch 256. Both buffers run in the
same process, alternating rounds, and the figure reported is the share of the
learner's time spent inside ``sample()`` (and inside ``extend``, which waits
for draws already asked for).

    python benchmarks/bench_prefetch.py [--steps 300] [--rounds 5] [--work-ms 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampling import hopper_rows  # noqa: E402

from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer  # noqa: E402

BATCH = 256


def make_work(target_ms: float):
    """A function of the batch costing about ``target_ms`` of torch work."""
    net = torch.nn.Sequential(torch.nn.Linear(11, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def once(batch):
        net.zero_grad(set_to_none=True)
        net(batch["observation"]).square().mean().backward()

    probe = hopper_rows(BATCH)
    for _ in range(20):
        once(probe)
    per = float("inf")
    for _ in range(5):  # best of 5: a busy machine only makes one round slower
        t = time.perf_counter()
        for _ in range(20):
            once(probe)
        per = min(per, (time.perf_counter() - t) / 20)
    reps = max(1, round(target_ms / 1e3 / per))

    def work(batch):
        for _ in range(reps):
            once(batch)

    return work, reps, per * reps * 1e3


def make_buffer(offline: OfflineDataset, prefetch: int | None) -> OfflineToOnlineReplayBuffer:
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100_000, batch_size=BATCH, generator=0,
                                     prefetch=prefetch)
    rb.extend(hopper_rows(100_000, seed=1))
    return rb


def run(rb, work, steps: int, row) -> dict:
    t_sample = t_extend = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = rb.sample()
        t1 = time.perf_counter()
        rb.extend(row)
        t2 = time.perf_counter()
        work(batch)
        t_sample += t1 - t0
        t_extend += t2 - t1
    total = time.perf_counter() - start
    return {"sample": t_sample / total, "extend": t_extend / total, "step_ms": total / steps * 1e3}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work-ms", type=float, default=2.0)
    args = p.parse_args(argv)
    offline = OfflineDataset.from_tensordict(hopper_rows(200_000, seed=2))
    work, reps, ms = make_work(args.work_ms)
    print(f"learner work: {reps} MLP steps ≈ {ms:.2f} ms; torch threads {torch.get_num_threads()}")
    row = hopper_rows(1, seed=3)
    buffers = {"prefetch=None": make_buffer(offline, None), "prefetch=2": make_buffer(offline, 2)}
    results: dict[str, list[dict]] = {k: [] for k in buffers}
    for _ in range(args.rounds):
        for name, rb in buffers.items():
            run(rb, work, 20, row)  # warm-up: fills the prefetch queue
            results[name].append(run(rb, work, args.steps, row))
    for rb in buffers.values():
        rb.close()
    print(f"{'buffer':<15} {'in sample() (median, range)':<32} {'in extend()':<14} step ms")
    summary = {}
    for name, rs in results.items():
        waits = sorted(r["sample"] for r in rs)
        med = waits[len(waits) // 2]
        ext = sorted(r["extend"] for r in rs)[len(rs) // 2]
        step = sorted(r["step_ms"] for r in rs)[len(rs) // 2]
        summary[name] = {"sample": med, "extend": ext, "step_ms": step}
        print(f"{name:<15} {med:6.1%} ({waits[0]:.1%}–{waits[-1]:.1%}){'':<14} {ext:6.1%}{'':<7} {step:.2f}")
    ratio = summary["prefetch=None"]["sample"] / max(summary["prefetch=2"]["sample"], 1e-9)
    print(f"waiting in sample(): prefetch=2 is {ratio:.1f}x less than without")
    return summary


if __name__ == "__main__":
    main()
