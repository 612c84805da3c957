"""The gather of ``sample(256)`` at several ring capacities, with and without transparent huge pages.

A ring storage of Hopper-shaped rows (``bench_sampling.hopper_rows``) is built
twice at each capacity: on transparent huge pages (mixreplay's default where
the OS offers them, see ``mixreplay/storages/_hugepages.py``) and on plain 4 KiB
pages (``_hugepages.ENABLED = False``). Timed, interleaved in rounds so that the
machine's load hits both alike (best round reported):

- ``gather``: the rows of 256 random slots (new ones each call) copied out of
  the ring (``randint`` + one ``index_select`` of packed rows, what every sample pays);
- ``sample``: ``ReplayBuffer.sample(256)`` on that storage (draw, gather, unpack).

The growth of each with capacity is its time over the time at the smallest
capacity; the last column is the share of the plain pages' growth that huge
pages remove, ``1 - (thp growth - 1) / (plain growth - 1)``.

    python benchmarks/bench_hugepages.py [--capacities 50000 200000 1000000 3000000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's benchmarks package
from results import command_line, row, write_results  # noqa: E402

from benchmarks.bench_samplers import interleaved  # noqa: E402
from benchmarks.bench_sampling import hopper_rows  # noqa: E402


def huge_kib() -> int:
    """This process's anonymous memory on huge pages, KiB (0 where /proc is absent)."""
    try:
        smaps = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return 0
    return sum(int(x) for x in re.findall(r"AnonHugePages:\s+(\d+)", smaps))


def build(capacity: int, rows, huge: bool):
    import mixreplay
    from mixreplay.storages import _hugepages

    _hugepages.ENABLED = huge
    try:
        storage = mixreplay.LazyTensorStorage(capacity)
        rb = mixreplay.ReplayBuffer(storage=storage, generator=0)
        for start in range(0, capacity, rows.shape[0]):  # fill every slot
            rb.extend(rows[: min(rows.shape[0], capacity - start)])
    finally:
        _hugepages.ENABLED = True
    return rb


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__)
    p.add_argument(
        "--capacities", type=int, nargs="+", default=[50_000, 200_000, 1_000_000, 3_000_000]
    )
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=300, help="calls per round")
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args(argv)
    from mixreplay.storages import _hugepages

    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, huge pages offered: "
        f"{_hugepages.huge_pages_offered()}, batch {args.batch}, best of {args.rounds} rounds"
    )
    rows = hopper_rows(min(max(args.capacities), 200_000), seed=1)
    g = torch.Generator().manual_seed(0)
    fns, info = {}, {}
    for cap in args.capacities:
        for huge in (True, False):
            before = huge_kib()
            rb = build(cap, rows, huge)
            ring = rb.storage._rows
            info[(cap, huge)] = (huge_kib() - before, ring.numel() * 8)
            # new slots every call: a fixed batch would stay in the caches
            fns[(cap, huge, "gather")] = lambda r=ring, c=cap: r.index_select(
                0, torch.randint(c, (args.batch,), generator=g)
            )
            fns[(cap, huge, "sample")] = lambda b=rb: b.sample(args.batch)
    times = interleaved(fns, args.rounds, args.number)
    out: dict = {}
    base = args.capacities[0]
    print(
        f"{'capacity':>10} {'ring MiB':>9} {'on THP MiB':>11}  {'op':<7}"
        f"{'thp µs':>9}{'plain µs':>10}{'thp/plain':>10}{'thp growth':>12}{'plain growth':>13}"
        f"{'growth cut':>11}"
    )
    for cap in args.capacities:
        for op in ("gather", "sample"):
            t_h, t_p = times[(cap, True, op)][0], times[(cap, False, op)][0]
            g_h = t_h / times[(base, True, op)][0]
            g_p = t_p / times[(base, False, op)][0]
            cut = 1 - (g_h - 1) / (g_p - 1) if g_p > 1.0 else float("nan")
            huge_mib, ring_bytes = info[(cap, True)][0] / 1024, info[(cap, True)][1] / 2**20
            print(
                f"{cap:>10,} {ring_bytes:9.0f} {huge_mib:11.0f}  {op:<7}{t_h:9.1f}{t_p:10.1f}"
                f"{t_h / t_p:10.2f}{g_h:12.2f}{g_p:13.2f}{cut:11.0%}"
            )
            out[(cap, op)] = {
                "thp_us": t_h,
                "plain_us": t_p,
                "thp_growth": g_h,
                "plain_growth": g_p,
            }
    write_results(
        "bench_hugepages",
        command_line(),
        [
            row(f"{op} of {args.batch} rows, capacity {cap:,}", "us", r["thp_us"],
                peer="plain pages", peer_value=r["plain_us"])
            for (cap, op), r in out.items()
        ],
        settings={
            "capacities": args.capacities,
            "rounds": args.rounds,
            "calls_per_round": args.number,
            "batch": args.batch,
            "huge_pages_offered": bool(_hugepages.huge_pages_offered()),
            "torch_threads": torch.get_num_threads(),
        },
        notes=(
            "A ring of Hopper-shaped rows built on transparent huge pages (mixreplay's default "
            "where the OS offers them) and on plain 4 KiB pages, at each capacity; gather is "
            "randint + one index_select of packed rows, sample is ReplayBuffer.sample; "
            "interleaved rounds, best round. ratio > 1: huge pages faster."
        ),
    )  # fmt: skip
    return out


if __name__ == "__main__":
    main()
