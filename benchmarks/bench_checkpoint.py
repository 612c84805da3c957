"""Checkpoints and concurrent sampling: mixreplay against torchrl 0.14.1, in one run.

1. ``dumps`` / ``loads`` of a buffer of capacity 1,000,000 holding 100,000 Hopper-shaped
   rows (observation f32[11], action f32[3], next observation f32[11], reward f32[1],
   done/terminated bool[1] at the root and under ``next``): seconds (best of ``--rounds``,
   fsync included for mixreplay) and bytes on disk (apparent and allocated), against the
   filled bytes (rows × packed row bytes). mixreplay is timed both as a plain
   ``ReplayBuffer`` and as an ``OfflineToOnlineReplayBuffer`` whose 1M-row offline
   dataset is referenced, not copied.
2. Mixed ``sample(256)`` (1M offline rows, 100k online) alone, then while a collector
   thread extends the same buffer (one row per call, paced at 2,000 rows/s, and flat out).
   Two controls tell the cost of the storage lock from that of Python threads (the GIL):
   a thread that only wakes 2,000 times a second, and one that extends *another* buffer
   (no lock shared with the learner) at 2,000 rows/s.

    python benchmarks/bench_checkpoint.py [--rounds 3] [--filled 100000] [--capacity 1000000]
        [--offline 1000000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
from bench_sampling import hopper_rows  # the same rows as every benchmark here
from results import command_line, row, write_results


def disk_usage(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path``."""
    apparent = allocated = 0
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def time_checkpoint(name, make, fill, rounds, root: Path) -> dict:
    rb = make()
    fill(rb)
    path = root / name.replace(" ", "_")

    def save():
        if path.exists() and name.startswith("torchrl"):
            shutil.rmtree(path)  # torchrl writes into an existing directory
        rb.dumps(path)

    t_save = best(save, rounds)
    apparent, allocated = disk_usage(path)
    twin = make()
    t_load = best(lambda: twin.loads(path), rounds)
    return {"dumps_s": t_save, "loads_s": t_load, "apparent": apparent, "allocated": allocated}


def bench_checkpoints(args, root: Path) -> list:
    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import ReplayBuffer as TRB

    import mixreplay

    rows = hopper_rows(args.filled, seed=2)
    offline = mixreplay.OfflineDataset.from_tensordict(hopper_rows(args.capacity, seed=1))
    results = []
    results.append(
        (
            "mixreplay ReplayBuffer",
            time_checkpoint(
                "mixreplay ReplayBuffer",
                lambda: mixreplay.ReplayBuffer(
                    storage=mixreplay.LazyTensorStorage(args.capacity), generator=0
                ),
                lambda rb: rb.extend(rows),
                args.rounds,
                root,
            ),
        )
    )
    results.append(
        (
            "mixreplay OfflineToOnline",
            time_checkpoint(
                "mixreplay OfflineToOnline",
                lambda: mixreplay.OfflineToOnlineReplayBuffer(
                    offline, online_capacity=args.capacity, generator=0
                ),
                lambda rb: rb.extend(rows),
                args.rounds,
                root,
            ),
        )
    )
    results.append(
        (
            "torchrl 0.14.1 ReplayBuffer",
            time_checkpoint(
                "torchrl ReplayBuffer",
                lambda: TRB(storage=TLazy(args.capacity)),
                lambda rb: rb.extend(rows),
                args.rounds,
                root,
            ),
        )
    )
    probe = mixreplay.LazyTensorStorage(args.capacity)
    probe.extend(rows[:1])
    filled = args.filled * probe.row_bytes
    data = args.filled * probe.layout.data_bytes
    print(
        f"dumps/loads: capacity {args.capacity:,}, {args.filled:,} rows filled; filled bytes "
        f"{filled / 1e6:.2f} MB ({probe.row_bytes} B/row packed), data bytes {data / 1e6:.2f} MB"
    )
    print(
        f"{'buffer':<30}{'dumps s':>9}{'loads s':>9}{'on disk MB':>12}{'allocated MB':>14}{'÷ filled':>10}"
    )
    for name, r in results:
        print(
            f"{name:<30}{r['dumps_s']:9.3f}{r['loads_s']:9.3f}{r['apparent'] / 1e6:12.2f}"
            f"{r['allocated'] / 1e6:14.2f}{r['apparent'] / filled:9.2f}x"
        )
    m, t = results[0][1], results[2][1]
    print(
        f"torchrl / mixreplay: {t['apparent'] / m['apparent']:.1f}x the bytes, dumps "
        f"{t['dumps_s'] / m['dumps_s']:.1f}x the time, loads {t['loads_s'] / m['loads_s']:.1f}x the time"
    )
    return results


def sample_rate(rb, seconds: float) -> float:
    """Mean µs per sample(256) over ``seconds`` (after a warm-up)."""
    for _ in range(50):
        rb.sample(256)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(100):
            rb.sample(256)
        n += 100
    return (time.perf_counter() - t0) / n * 1e6


def bench_concurrency(args) -> list:
    import mixreplay

    offline = mixreplay.OfflineDataset.from_tensordict(hopper_rows(args.offline, seed=1))
    rb = mixreplay.OfflineToOnlineReplayBuffer(offline, online_capacity=args.filled, generator=0)
    rb.extend(hopper_rows(args.filled, seed=2))
    singles = [hopper_rows(1, seed=10 + i) for i in range(256)]
    results = []

    def run(label, collector):
        stop = threading.Event()
        count = [0]
        thread = None
        if collector is not None:
            thread = threading.Thread(target=collector, args=(stop, count))
            thread.start()
        t0 = time.perf_counter()
        us = sample_rate(rb, args.seconds)
        elapsed = time.perf_counter() - t0
        stop.set()
        if thread is not None:
            thread.join()
        results.append((label, us, count[0] / elapsed))

    def flat_out(stop, count):
        i = 0
        while not stop.is_set():
            rb.extend(singles[i % 256])
            i += 1
        count[0] = i

    other = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.filled))

    def paced(stop, count, rate=2000.0, target=rb):
        i, t0 = 0, time.perf_counter()
        while not stop.is_set():
            if target is not None:
                target.extend(singles[i % 256])
            i += 1
            ahead = i / rate - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
        count[0] = i

    run("sample(256) alone", None)
    run("+ thread waking 2,000/s, no write", lambda stop, count: paced(stop, count, target=None))
    run("+ thread extending another buffer", lambda stop, count: paced(stop, count, target=other))
    run("+ collector, 2,000 rows/s", paced)
    run("+ collector, flat out", flat_out)
    run("sample(256) alone, again", None)
    base = results[0][1]
    print(
        f"\nmixed sample(256), offline {args.offline:,} rows, online {args.filled:,} rows, torch threads {torch.get_num_threads()}"
    )
    print(
        f"{'learner':<36}{'µs/sample':>11}{'samples/s':>11}{'vs alone':>10}{'rows/s written':>16}"
    )
    for label, us, rows in results:
        rows = 0 if "no write" in label or "another" in label else rows
        print(f"{label:<36}{us:11.1f}{1e6 / us:11.0f}{us / base:9.2f}x{rows:16,.0f}")
    return results


def main(argv=None):
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--filled", type=int, default=100_000)
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=3.0, help="sampling time per concurrency case")
    p.add_argument(
        "--offline", type=int, default=1_000_000, help="offline rows of the concurrency buffer"
    )
    p.add_argument(
        "--dir", default=None, help="where to write checkpoints (a temporary directory by default)"
    )
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    try:
        ck = bench_checkpoints(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cc = bench_concurrency(args)
    save(args, ck, cc)
    return {"checkpoint": ck, "concurrency": cc}


def save(args, ck: list, cc: list) -> None:
    """benchmarks/results/bench_checkpoint.json: dumps, loads and bytes on disk against
    TorchRL's; mixed sample(256) with a writing thread against sample(256) alone."""
    by = dict(ck)
    trl = by["torchrl 0.14.1 ReplayBuffer"]
    rows = []
    for name in ("mixreplay ReplayBuffer", "mixreplay OfflineToOnline"):
        m = by[name]
        label = name.replace("mixreplay ", "")
        for key, what, unit, scale in (
            ("dumps_s", "dumps", "s", 1),
            ("loads_s", "loads", "s", 1),
            ("apparent", "bytes on disk", "MB", 1e-6),
        ):
            rows.append(
                row(f"{label}: {what}", unit, m[key] * scale, peer="torchrl ReplayBuffer",
                    peer_value=trl[key] * scale)
            )  # fmt: skip
    alone = cc[0][1]
    for label, us, _ in cc[1:]:
        what = label.replace("sample(256) ", "")
        rows.append(row(f"mixed sample(256) {what}", "us", us, peer="sample(256) alone",
                        peer_value=alone))  # fmt: skip
    write_results(
        "bench_checkpoint",
        command_line(),
        rows,
        settings={
            "rounds": args.rounds,
            "filled_rows": args.filled,
            "capacity": args.capacity,
            "offline_rows": args.offline,
            "seconds_per_concurrency_case": args.seconds,
            "torch_threads": torch.get_num_threads(),
        },
        notes=(
            "A buffer of capacity 1,000,000 holding 100,000 Hopper-shaped rows saved and loaded "
            "(best of the rounds; mixreplay's dumps include fsync); the OfflineToOnline buffer "
            "references its 1M-row offline dataset instead of copying it. TorchRL's storage "
            "saves its whole capacity. The concurrency rows: a learner's mixed sample(256) "
            "while another thread extends the same buffer (or only wakes, or extends another "
            "buffer), against sample(256) alone: the cost of two Python threads sharing the GIL."
        ),
    )


if __name__ == "__main__":
    main()
