"""The replay-buffer work of TorchRL's SAC program, on TorchRL and on mixreplay, in one run.

TorchRL's ``sota-implementations/sac/sac.py`` builds its buffer with ``make_replay_buffer``
(``TensorDictReplayBuffer(pin_memory=False, prefetch=3, storage=LazyTensorStorage(1M) or,
with a scratch dir, LazyMemmapStorage(1M), batch_size=256)``) and then, per collected batch
of ``frames_per_batch`` frames, calls ``replay_buffer.extend(batch.reshape(-1))`` once and
``replay_buffer.sample()`` ``frames_per_batch * utd_ratio`` times. This benchmark does exactly
that with the rows a TorchRL collector gives SAC on HalfCheetah (observation 17, action 6, the
actor's ``loc``/``scale``, step counts, episode rewards, the collector's trajectory ids, and
their ``next`` values), the same buffer construction on both libraries (only the import
differs), after a prefill of ``--prefill`` rows. Collected batches alternate between the
libraries, so the machine's load hits both alike.

Reported per library: the cost per training step, (one ``extend`` + ``N`` ``sample()``) / N,
over all measured batches, and the range of the per-batch figures.

    python benchmarks/bench_program_buffer.py [--batches 20] [--frames-per-batch 1000]
        [--storage tensor|memmap] [--capacity 1000000] [--prefill 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from results import row, write_results
from tensordict import TensorDict

RESULTS = Path(__file__).resolve().parent / "results"


def collected_batch(n: int, start: int = 0, seed: int = 0) -> TensorDict:
    """``n`` rows shaped as a TorchRL collector's SAC batch on HalfCheetah (TED, flat)."""
    g = torch.Generator().manual_seed(seed)
    f = lambda *shape: torch.randn(n, *shape, generator=g)  # noqa: E731
    flag = lambda: torch.zeros(n, 1, dtype=torch.bool)  # noqa: E731
    steps = (torch.arange(start, start + n) % 1000).unsqueeze(-1)
    return TensorDict(
        {
            "observation": f(17),
            "action": f(6),
            "loc": f(6),
            "scale": f(6).abs(),
            "done": flag(),
            "terminated": flag(),
            "truncated": flag(),
            "step_count": steps,
            "episode_reward": f(1),
            "collector": {"traj_ids": torch.arange(start, start + n) // 1000},
            "next": {
                "observation": f(17),
                "reward": f(1),
                "done": steps == 999,
                "terminated": flag(),
                "truncated": steps == 999,
                "step_count": steps + 1,
                "episode_reward": f(1),
            },
        },
        batch_size=[n],
    )


def make_buffer(lib: str, storage: str, capacity: int, batch_size: int, scratch: str):
    """sac/utils.py's ``make_replay_buffer`` (prb=False, device="cpu"), from ``lib``."""
    if lib == "torchrl":
        from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
    else:
        from mixreplay import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
    if storage == "memmap":
        store = LazyMemmapStorage(capacity, device="cpu", scratch_dir=scratch)
    else:
        store = LazyTensorStorage(capacity, device="cpu")
    rb = TensorDictReplayBuffer(
        pin_memory=False, prefetch=3, storage=store, batch_size=batch_size, shared=False
    )
    if storage == "memmap":
        rb.append_transform(lambda td: td.to("cpu"))  # what sac's make_replay_buffer adds
    return rb


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--batches", type=int, default=20, help="collected batches measured")
    parser.add_argument("--frames-per-batch", type=int, default=1000)
    parser.add_argument("--utd", type=float, default=1.0, help="sac's optim.utd_ratio")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--storage", choices=("tensor", "memmap"), default="tensor")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--prefill", type=int, default=100_000)
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/...)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    updates = int(args.frames_per_batch * args.utd)
    libs = ("torchrl", "mixreplay")
    per_step: dict[str, list[float]] = {lib: [] for lib in libs}
    totals = {lib: [0.0, 0] for lib in libs}
    with tempfile.TemporaryDirectory() as scratch:
        buffers = {
            lib: make_buffer(
                lib, args.storage, args.capacity, args.batch_size, os.path.join(scratch, lib)
            )
            for lib in libs
        }
        written = 0
        while written < args.prefill:
            n = min(args.frames_per_batch, args.prefill - written)
            batch = collected_batch(n, start=written, seed=written)
            for rb in buffers.values():
                rb.extend(batch)
            written += n
        for rb in buffers.values():  # warm up: the first samples start the prefetch threads
            for _ in range(10):
                rb.sample()
        for b in range(args.batches):
            batch = collected_batch(args.frames_per_batch, start=written, seed=written)
            written += args.frames_per_batch
            order = libs if b % 2 == 0 else libs[::-1]
            for lib in order:
                rb = buffers[lib]
                start = time.perf_counter()
                rb.extend(batch.reshape(-1))
                for _ in range(updates):
                    rb.sample()
                elapsed = time.perf_counter() - start
                per_step[lib].append(elapsed / updates * 1e6)
                totals[lib][0] += elapsed
                totals[lib][1] += updates
        for rb in buffers.values():
            close = getattr(rb, "close", None)
            if callable(close):
                close()
    mean = {lib: totals[lib][0] / totals[lib][1] * 1e6 for lib in libs}
    command = "python benchmarks/bench_program_buffer.py " + " ".join(argv or sys.argv[1:])
    name = f"sac's buffer work per step ({args.storage} storage)"
    per_batch = {
        lib: {
            "min": round(min(v), 2),
            "median": round(statistics.median(v), 2),
            "max": round(max(v), 2),
        }
        for lib, v in per_step.items()
    }
    out = args.out or RESULTS / f"bench_program_buffer_{args.storage}.json"
    path = write_results(
        out.stem,
        command.strip(),
        [row(name, "us", mean["mixreplay"], peer="torchrl", peer_value=mean["torchrl"])],
        settings={
            "program": "TorchRL's sota-implementations/sac/sac.py: make_replay_buffer and its loop",
            "buffer": "TensorDictReplayBuffer(pin_memory=False, prefetch=3, batch_size="
            f"{args.batch_size}, storage={'LazyMemmapStorage' if args.storage == 'memmap' else 'LazyTensorStorage'}({args.capacity}))",
            "frames_per_batch": args.frames_per_batch,
            "samples_per_batch": updates,
            "batches": args.batches,
            "prefill": args.prefill,
            "rows": "a TorchRL collector's SAC rows on HalfCheetah (17 + 6 + loc/scale + counters, TED)",
            "threads": 1,
        },
        notes=(
            "Per training step of sac.py's loop: one extend of a collected batch per "
            f"{updates} sample() calls, divided by {updates}; both libraries built as "
            "make_replay_buffer builds it (prefetch=3: the sampling runs in each library's "
            "prefetch thread, so the figure is what the loop waits for). Collected batches "
            "alternate between the libraries. ratio = TorchRL / mixreplay."
        ),
        detail={"per_batch_us": per_batch},
        directory=out.parent,
    )
    result = json.loads(path.read_text())
    print(f"### {name}, per step (us)\n")
    print("| library | mean | per-batch min | median | max |\n|---|---:|---:|---:|---:|")
    for lib in libs:
        q = per_batch[lib]
        print(f"| {lib} | {mean[lib]:.1f} | {q['min']} | {q['median']} | {q['max']} |")
    print(f"\nratio (TorchRL / mixreplay): {result['rows'][0]['ratio']}")
    print(f"command: {result['command']}\nwritten: {path}")
    return result


if __name__ == "__main__":
    main()
