"""What a rate limiter costs per ``sample`` and ``extend``, against the same buffer without one.

    python benchmarks/bench_rate_limiter.py [--rounds 9] [--calls 2000] [--out PATH]

Each operation runs on two buffers built alike, one with
``rate_limiter=SampleToInsertRatio(...)`` and one without, in the same process,
alternating rounds of ``--calls`` calls; the figure per buffer is the median over
rounds of the mean time per call, in this thread's CPU time (``--clock thread``, the
default: a busy machine's waits for a core are left out) or wall time. The limiter's band is wide enough that nothing
ever waits here: what is timed is the check and the counting a limited call adds
(a lock taken twice, a comparison, the counts), not waiting, which is the point of
a limiter and depends on the other side. Hopper-shaped rows (106 bytes), batch 256,
offline 100,000 rows, online ring of 100,000.

Writes ``benchmarks/results/bench_rate_limiter.json`` (``--out``), with the peer
"no limiter": ``ratio`` = time without / time with (1.0: free; 0.9: the limiter adds
10 %).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampling import hopper_rows  # noqa: E402

import mixreplay  # noqa: E402
from mixreplay import (  # noqa: E402
    LazyTensorStorage,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SampleToInsertRatio,
)

BATCH = 256
ROOT = Path(__file__).resolve().parent


def limiter() -> SampleToInsertRatio:
    # UTD 1 at batch 256; a band so wide that no call of the benchmark ever waits
    return SampleToInsertRatio(samples_per_insert=BATCH, min_size_to_sample=1, error_buffer=1e12)


def buffers(kind: str, offline: OfflineDataset, online_rows: int):
    """The same buffer twice: (with a limiter, without)."""
    out = []
    for lim in (limiter(), None):
        if kind == "replay":
            rb = ReplayBuffer(
                storage=LazyTensorStorage(100_000), batch_size=BATCH, generator=0, rate_limiter=lim
            )
        else:
            rb = OfflineToOnlineReplayBuffer(
                offline, online_capacity=100_000, batch_size=BATCH, generator=0, rate_limiter=lim
            )
        rb.extend(hopper_rows(online_rows, seed=1))
        out.append(rb)
    return out


def time_pair(limited, plain, op, rounds: int, calls: int, clock) -> tuple[float, float]:
    """Median over rounds of the mean µs per call of ``op(rb)``, for each buffer."""
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(3):  # warm up both
        op(limited)
        op(plain)
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)  # alternate which goes first
        for i in order:
            rb = (limited, plain)[i]
            t = clock()
            for _ in range(calls):
                op(rb)
            times[i].append((clock() - t) / calls * 1e6)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--offline", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=("thread", "wall"),
        default="thread",
        help="this thread's CPU time (leaves out waiting for a core on a busy machine) or wall time",
    )
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_rate_limiter.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    offline = OfflineDataset.from_tensordict(hopper_rows(args.offline, seed=0))
    one = hopper_rows(1, seed=2)
    chunk = hopper_rows(1000, seed=3)

    def step(rb):
        rb.extend(one)
        rb.sample()

    cases = [
        ("ReplayBuffer sample(256)", "replay", lambda rb: rb.sample(), args.calls),
        ("ReplayBuffer extend(1 row)", "replay", lambda rb: rb.extend(one), args.calls),
        ("OfflineToOnline mixed sample(256)", "o2o", lambda rb: rb.sample(), args.calls),
        ("OfflineToOnline extend(1 row)", "o2o", lambda rb: rb.extend(one), args.calls),
        ("OfflineToOnline extend(1000 rows)", "o2o", lambda rb: rb.extend(chunk), args.calls // 10),
        ("OfflineToOnline env step: extend(1) + sample(256)", "o2o", step, args.calls),
    ]  # fmt: skip
    rows = []
    print(
        "| operation | with limiter (µs) | no limiter (µs) | added (µs) | no limiter / with |\n"
        "|---|---|---|---|---|"
    )
    for name, kind, op, calls in cases:
        limited, plain = buffers(kind, offline, min(100_000, args.offline))
        clock = time.thread_time if args.clock == "thread" else time.perf_counter
        with_, without = time_pair(limited, plain, op, args.rounds, max(1, calls), clock)
        rows.append(
            {
                "name": name,
                "unit": "us",
                "mixreplay": round(with_, 2),
                "peer": "no limiter",
                "peer_value": round(without, 2),
                "ratio": round(without / with_, 3),
                "better": "lower",
            }
        )
        print(
            f"| {name} | {with_:.1f} | {without:.1f} | {with_ - without:+.1f} | "
            f"{without / with_:.2f} |",
            flush=True,
        )
    import tensordict

    try:
        torchrl_version = importlib.metadata.version("torchrl")  # not imported: not used here
    except importlib.metadata.PackageNotFoundError:
        torchrl_version = None
    out = {
        "benchmark": "bench_rate_limiter",
        "command": "python benchmarks/bench_rate_limiter.py"
        + (" " + " ".join(argv) if argv else ""),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "tensordict": tensordict.__version__,
            "torchrl": torchrl_version,
            "mixreplay": mixreplay.__version__,
        },
        "settings": {
            "rounds": args.rounds,
            "calls": args.calls,
            "offline_rows": args.offline,
            "batch": BATCH,
            "threads": args.threads,
            "clock": args.clock,
            "limiter": repr(limiter()),
        },
        "rows": rows,
        "notes": (
            "Each figure: the median over rounds of the mean time per call; the buffers with "
            "and without the limiter alternate rounds in one process. The band never makes a "
            "call wait here: the figures are the cost of the check and the counting. "
            "ratio = time without / time with (1.0: the limiter costs nothing)."
        ),
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
