"""Observations stored once: bytes per transition, sample(256) and extend, dedup against plain and TorchRL.

Rows are Atari / V-D4RL sized: ``pixels`` uint8[84, 84, 3] at the root and under
``next``, ``action`` int64[1], ``("next", "reward")`` float32[1], and the TED flags
``done`` / ``terminated`` / ``truncated`` at the root and under ``next``; episodes of
100 to 1000 steps, back to back. The same rows fill three 100k-row rings:

- ``plain``: ``LazyTensorStorage(100_000)``
- ``dedup``: ``LazyTensorStorage(100_000, dedup_next=True)``
- ``torchrl``: TorchRL's ``ReplayBuffer(storage=LazyTensorStorage(100_000))``

To stay within memory (a plain 100k pixel ring is ~4.2 GB), at most two rings live
at once: ``plain`` and ``dedup`` are timed alternately, then ``plain`` is freed and
``torchrl`` is built and timed alternately with ``dedup``. Each figure is the best of
``--rounds`` rounds; only ratios measured in the same phase are compared.

    python benchmarks/bench_dedup.py [--capacity 100000] [--rounds 9] [--baseline DIR]

``--baseline DIR`` also times the *plain* hot paths on Hopper-shaped rows
(``extend(1)`` and ``sample(256)`` on a 100k ring) with the mixreplay package in
``DIR`` (e.g. an export of the commit before dedup) against this tree, alternating
subprocesses, and prints the ratio: dedup must leave the plain rings as fast as they were.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import warnings

import torch
from tensordict import TensorDict

H = W = 84
C = 3


def frames(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, H, W, C), generator=g, dtype=torch.uint8)


def pixel_stream(total: int, *, chunk: int = 1000, seed: int = 0, pool: int = 2048):
    """``total`` TED rows in chunks; episodes of 100..1000 steps.

    Step ``t`` observes frame ``t % pool`` of a fixed pool of random frames; within an
    episode the next frame is the following step's, an episode's last step sees a
    terminal frame that no step observes first.
    """
    g = torch.Generator().manual_seed(seed)
    pix = frames(pool, seed)
    terminal = frames(64, seed + 1)
    ends = torch.zeros(total, dtype=torch.bool)
    t = 0
    while t < total:
        t += int(torch.randint(100, 1001, (1,), generator=g))
        if t <= total:
            ends[t - 1] = True
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        steps = torch.arange(start, start + n)
        end = ends[start : start + n]
        obs = pix.index_select(0, steps % pool)
        nxt = pix.index_select(0, (steps + 1) % pool)
        if end.any():
            nxt[end] = terminal.index_select(0, steps[end] % terminal.shape[0])
        no = torch.zeros(n, 1, dtype=torch.bool)
        yield TensorDict(
            {
                "pixels": obs,
                "action": torch.randint(0, 18, (n, 1), generator=g),
                "done": no,
                "terminated": no.clone(),
                "truncated": no.clone(),
                "next": {
                    "pixels": nxt,
                    "reward": torch.randn(n, 1, generator=g),
                    "done": end.unsqueeze(-1),
                    "terminated": end.unsqueeze(-1).clone(),
                    "truncated": torch.zeros(n, 1, dtype=torch.bool),
                },
            },
            batch_size=[n],
        )


def alternate(fns: dict, rounds: int, number: int) -> dict:
    """Best mean µs per call of each function, timed in alternating rounds of ``number`` calls."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.disable()
            t = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / number)
            gc.enable()
    return {k: v * 1e6 for k, v in best.items()}


def torchrl_bytes(storage) -> int:
    td = storage._storage
    return sum(v.nbytes for v in td.values(include_nested=True, leaves_only=True))


def profile_dedup(rb, plain, batch: int = 256, number: int = 20, rounds: int = 5) -> dict:
    """Where a dedup sample(256) spends its time, part by part (fresh indices each call)."""
    from mixreplay.storages.dedup.layout import _cols

    storage = rb.storage
    dl = storage.dedup_layout
    g = torch.Generator().manual_seed(0)
    draws = [torch.randint(len(storage), (batch,), generator=g) for _ in range(64)]
    follows = [(i + 1).clamp_(max=storage.max_size - 1) for i in draws]
    out = torch.empty(batch, dl.full.row_words, dtype=torch.int64)
    rows, ex_of = storage._rows, storage._exception_of
    k = iter(range(1 << 62))

    def nxt():
        return next(k) % len(draws)

    parts = {}
    for i, r in enumerate(dl.runs):
        parts[f"stored run {i} ({r.size} B/row)"] = lambda r=r: torch.index_select(
            _cols(rows, r.stored, r.size, r.align),
            0,
            draws[nxt()],
            out=_cols(out, r.full, r.size, r.align),
        )
    for i, r in enumerate(dl.next_runs):
        parts[f"next run {i} ({r.size} B/row)"] = lambda r=r: torch.index_select(
            _cols(rows, r.stored, r.size, r.align),
            0,
            follows[nxt()],
            out=_cols(out, r.full, r.size, r.align),
        )
    parts["following index"] = lambda: (draws[nxt()] + 1).clamp_(max=storage.max_size - 1)
    parts["padding zeroed"] = lambda: out.view(torch.uint8)[:, dl.pad[0] :].zero_()
    parts["exception lookup"] = lambda: (ex_of.index_select(0, draws[nxt()]) >= 0).nonzero()
    parts["gather_into (all of it)"] = lambda: storage.gather_into(draws[nxt()], out)
    parts["unpack (TensorDict)"] = lambda: dl.full.unpack(out)
    parts["dedup rb.sample(256)"] = lambda: rb.sample(batch)
    parts["plain rb.sample(256)"] = lambda: plain.sample(batch)
    parts["plain index_select(256)"] = lambda: torch.index_select(
        plain.storage._rows, 0, draws[nxt()], out=out
    )
    times = alternate(parts, rounds, number)
    print("profile of a dedup sample(256), best µs per part:")
    for name, us in times.items():
        print(f"  {name:<34}{us:10.1f}")
    return times


def hot_paths_worker(capacity: int, rounds: int) -> None:
    """Print the plain ring's Hopper-shaped extend(1) and sample(256) (best µs) as JSON."""
    import mixreplay

    g = torch.Generator().manual_seed(0)

    def rows(n):
        f = lambda: torch.rand(n, 1, generator=g) < 0.01  # noqa: E731
        return TensorDict(
            {
                "observation": torch.randn(n, 11, generator=g),
                "action": torch.randn(n, 3, generator=g),
                "done": f(),
                "terminated": f(),
                "next": {
                    "observation": torch.randn(n, 11, generator=g),
                    "reward": torch.randn(n, 1, generator=g),
                    "done": f(),
                    "terminated": f(),
                },
            },
            [n],
        )

    rb = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(capacity), generator=0)
    rb.extend(rows(capacity))
    one = rows(1)
    t = alternate(
        {"extend(1)": lambda: rb.extend(one), "sample(256)": lambda: rb.sample(256)},
        rounds,
        2000,
    )
    print(json.dumps({"file": mixreplay.__file__, **t}))


def hot_paths(baseline: str, rounds: int) -> dict:
    """Plain-ring hot paths: ``baseline`` tree against this one, alternating subprocesses."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"before": os.path.abspath(baseline), "after": here}
    best: dict[str, dict[str, float]] = {k: {} for k in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, os.path.abspath(__file__), "--hot-paths-worker", "--rounds", "3"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert got.pop("file").startswith(tree), got
            for op, us in got.items():
                best[name][op] = min(best[name].get(op, float("inf")), us)
    print("plain ring, Hopper-shaped rows, 100k-row ring (best µs over subprocess rounds):")
    print(f"{'operation':<14}{'before':>10}{'after':>10}{'after/before':>14}")
    for op in best["before"]:
        b, a = best["before"][op], best["after"][op]
        print(f"{op:<14}{b:10.1f}{a:10.1f}{a / b:13.2f}x")
    return best


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=20, help="sample calls per round")
    p.add_argument("--baseline", help="a tree with the mixreplay package to compare hot paths with")
    p.add_argument("--profile", action="store_true", help="break a dedup sample(256) down")
    p.add_argument("--hot-paths-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hot_paths_worker:
        hot_paths_worker(100_000, args.rounds)
        return {}

    import mixreplay

    warnings.filterwarnings("ignore")
    cap = args.capacity
    result: dict = {"capacity": cap, "threads": torch.get_num_threads()}

    def fill(rb):
        t = time.perf_counter()
        for chunk in pixel_stream(cap):
            rb.extend(chunk)
        return time.perf_counter() - t

    def ring(dedup):
        return mixreplay.ReplayBuffer(
            storage=mixreplay.LazyTensorStorage(cap, dedup_next=dedup), generator=0
        )

    plain, dedup = ring(False), ring(True)
    fill_plain, fill_dedup = fill(plain), fill(dedup)
    ps, ds = plain.storage, dedup.storage
    b_plain, b_dedup = ps.nbytes / cap, ds.nbytes / cap
    result["bytes_per_transition"] = {
        "plain": b_plain,
        "dedup": b_dedup,
        "ratio": b_dedup / b_plain,
    }
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {cap:,}-row rings of "
        f"84x84x3 uint8 pixel rows, episodes of 100-1000 steps ({ds.exceptions} rows keep "
        "their own next pixels)"
    )
    print(
        f"bytes per transition: plain {b_plain:,.0f}, dedup {b_dedup:,.0f} "
        f"({b_dedup / b_plain:.3f}x); fill {cap:,} rows in 1000-row chunks: plain "
        f"{fill_plain:.1f} s, dedup {fill_dedup:.1f} s"
    )
    # the two rings hold the same rows
    probe = torch.randint(cap, (64,), generator=torch.Generator().manual_seed(1))
    assert torch.equal(ps.take(probe), ds.take(probe))

    t1 = alternate(
        {"plain": lambda: plain.sample(256), "dedup": lambda: dedup.sample(256)},
        args.rounds,
        args.number,
    )
    one = next(pixel_stream(1, seed=5))
    thousand = next(pixel_stream(1000, seed=6))
    e1 = alternate(
        {"plain": lambda: plain.extend(one), "dedup": lambda: dedup.extend(one)},
        args.rounds,
        200,
    )
    e1000 = alternate(
        {"plain": lambda: plain.extend(thousand), "dedup": lambda: dedup.extend(thousand)},
        max(3, args.rounds // 3),
        3,
    )
    if args.profile:
        result["profile"] = profile_dedup(dedup, plain)
    plain = ps = None  # free the plain ring (~4.2 GB at 100k rows) before TorchRL's
    gc.collect()

    from torchrl.data import LazyTensorStorage as TorchRLStorage
    from torchrl.data import ReplayBuffer as TorchRLBuffer

    trl = TorchRLBuffer(storage=TorchRLStorage(cap))
    fill_trl = fill(trl)
    b_trl = torchrl_bytes(trl.storage) / cap
    t2 = alternate(
        {"torchrl": lambda: trl.sample(256), "dedup": lambda: dedup.sample(256)},
        args.rounds,
        args.number,
    )
    e1_trl = alternate(
        {"torchrl": lambda: trl.extend(one), "dedup": lambda: dedup.extend(one)},
        args.rounds,
        200,
    )
    print(f"torchrl: {b_trl:,.0f} bytes per transition, fill {fill_trl:.1f} s")
    print(f"{'operation':<22}{'plain µs':>10}{'dedup µs':>10}{'dedup/plain':>13}")
    for name, t in (("sample(256)", t1), ("extend(1 row)", e1), ("extend(1000 rows)", e1000)):
        print(f"{name:<22}{t['plain']:10.1f}{t['dedup']:10.1f}{t['dedup'] / t['plain']:12.2f}x")
    print(f"{'operation':<22}{'torchrl µs':>10}{'dedup µs':>10}{'dedup/torchrl':>15}")
    for name, t in (("sample(256)", t2), ("extend(1 row)", e1_trl)):
        print(f"{name:<22}{t['torchrl']:10.1f}{t['dedup']:10.1f}{t['dedup'] / t['torchrl']:14.2f}x")
    result.update(
        sample_vs_plain=t1,
        sample_vs_torchrl=t2,
        extend1_vs_plain=e1,
        extend1000_vs_plain=e1000,
        extend1_vs_torchrl=e1_trl,
        torchrl_bytes_per_transition=b_trl,
    )
    trl = dedup = None
    gc.collect()
    if args.baseline:
        result["hot_paths"] = hot_paths(args.baseline, args.rounds)
    return result


if __name__ == "__main__":
    main()
