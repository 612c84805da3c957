"""This checkout against another mixreplay checkout: did a change slow `sample`, `extend`, `dumps`, `loads`?

Each round runs one child process per checkout, in alternating order, with that checkout's
``mixreplay`` first on ``PYTHONPATH``. A child builds the same Hopper-shaped data (offline
200,000 rows; an online ring of 200,000 slots holding 100,000 rows; observation f32[11],
action f32[3], next observation f32[11], reward f32[1], done/terminated bool[1] at the root and
under ``next``), then times, on one torch thread:

- ``sample(256)`` of an ``OfflineToOnlineReplayBuffer`` (offline fraction 0.5),
- ``extend`` of 1 row and of 1,000 rows,
- ``dumps`` and ``loads`` of a ``ReplayBuffer`` holding the online rows,

and a *yardstick* of fixed pure-torch work (two ``randint`` + ``index_select`` of 256 rows
from a packed ``[300000, 14]`` int64 tensor). Each operation is reported in yardsticks, so a
machine that is busier during one child than another does not count as a slowdown; the
table gives each checkout's median over rounds and the ratio this ÷ baseline (< 1 is faster).

    python benchmarks/bench_versions.py --baseline ../mixreplay-0.1 [--rounds 5] [--offline N] [--online N]

The baseline is any checkout of mixreplay from 0.1 on (e.g. ``git worktree add
../mixreplay-0.1 <commit>``); both use this environment's torch and tensordict.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from results import command_line, row, write_results

HERE = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
import torch
from tensordict import TensorDict
torch.set_num_threads(1)
import mixreplay
from mixreplay import LazyTensorStorage, OfflineDataset, OfflineToOnlineReplayBuffer, ReplayBuffer

def rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {"observation": torch.randn(n, 11, generator=g), "action": torch.rand(n, 3, generator=g),
         "done": done, "terminated": done.clone(),
         "next": {"observation": torch.randn(n, 11, generator=g),
                  "reward": torch.randn(n, 1, generator=g), "done": done.clone(),
                  "terminated": done.clone()}},
        batch_size=[n])

def best(fn, number, repeat=7):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return min(times)

OFFLINE, ONLINE = int(sys.argv[2]), int(sys.argv[3])
online_rows = rows(ONLINE, 1)
rb = OfflineToOnlineReplayBuffer(OfflineDataset.from_tensordict(rows(OFFLINE, 0)),
                                 online_capacity=2 * ONLINE, offline_fraction=0.5, generator=0)
rb.extend(online_rows)
one, thousand = rows(1, 2), rows(1_000, 3)
packed = torch.randint(0, 1 << 30, (300_000, 14))
out = torch.empty(256, 14, dtype=torch.int64)
g = torch.Generator().manual_seed(0)

def yardstick():
    a = torch.randint(0, 300_000, (128,), generator=g)
    b = torch.randint(0, 300_000, (128,), generator=g)
    torch.index_select(packed, 0, a, out=out[:128])
    torch.index_select(packed, 0, b, out=out[128:])

plain = ReplayBuffer(storage=LazyTensorStorage(2 * ONLINE), generator=0)
plain.extend(online_rows)
result = {"version": getattr(mixreplay, "__version__", "?"), "file": mixreplay.__file__}
with tempfile.TemporaryDirectory(dir=sys.argv[1]) as d:
    plain.dumps(d + "/ckpt")
    loader = ReplayBuffer(storage=LazyTensorStorage(2 * ONLINE), generator=0)
    for name, fn, number in [
        ("yardstick", yardstick, 400),
        ("sample(256)", lambda: rb.sample(256), 400),
        ("extend(1)", lambda: rb.extend(one), 400),
        ("extend(1000)", lambda: rb.extend(thousand), 100),
        ("dumps", lambda: plain.dumps(d + "/ckpt"), 3),
        ("loads", lambda: loader.loads(d + "/ckpt"), 5),
        ("yardstick again", yardstick, 400),
    ]:
        fn()
        result[name] = best(fn, number)
print(json.dumps(result))
"""

OPS = ["sample(256)", "extend(1)", "extend(1000)", "dumps", "loads"]


def run_child(root: pathlib.Path, scratch: str, offline: int, online: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, scratch, str(offline), str(online)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the child for {root} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    expected = root / "mixreplay"
    if not pathlib.Path(result["file"]).resolve().is_relative_to(expected.resolve()):
        raise SystemExit(f"the child imported {result['file']}, not the checkout {root}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, type=pathlib.Path, help="another checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--offline", type=int, default=200_000, help="offline rows")
    parser.add_argument("--online", type=int, default=100_000, help="online rows held")
    parser.add_argument("--dir", default=None, help="scratch directory (default: the temp dir)")
    parser.add_argument(
        "--suffix",
        default="",
        help="results file bench_versions_<suffix>.json (a second baseline kept beside the first)",
    )
    args = parser.parse_args()
    roots = {"this": HERE, "baseline": args.baseline.resolve()}
    runs: dict[str, list[dict]] = {"this": [], "baseline": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for r in range(args.rounds):
            order = ["this", "baseline"] if r % 2 == 0 else ["baseline", "this"]
            for name in order:
                runs[name].append(run_child(roots[name], scratch, args.offline, args.online))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def in_yardsticks(run: dict, op: str) -> float:
        return run[op] / min(run["yardstick"], run["yardstick again"])

    print(f"this: {roots['this']}\nbaseline: {roots['baseline']}")
    print(
        f"offline {args.offline:,} rows, online {args.online:,} rows (dumps/loads: the online "
        f"rows); median over {args.rounds} rounds; 1 yardstick = fixed pure-torch work\n"
    )
    header = (
        f"{'operation':<20}{'this µs':>10}{'base µs':>10}{'this ys':>10}{'base ys':>10}"
        f"{'this÷base':>11}{'range':>15}"
    )
    print(header)
    rows = []
    for op in OPS:
        this = [in_yardsticks(run, op) for run in runs["this"]]
        base = [in_yardsticks(run, op) for run in runs["baseline"]]
        pairs = [t / b for t, b in zip(this, base)]
        rows.append(
            row(op, "yardsticks", statistics.median(this), peer="baseline",
                peer_value=statistics.median(base))
        )  # fmt: skip
        print(
            f"{op:<20}{statistics.median(x[op] for x in runs['this']) * 1e6:>10.1f}"
            f"{statistics.median(x[op] for x in runs['baseline']) * 1e6:>10.1f}"
            f"{statistics.median(this):>10.2f}{statistics.median(base):>10.2f}"
            f"{statistics.median(this) / statistics.median(base):>10.2f}x"
            f"{min(pairs):>8.2f}-{max(pairs):.2f}x"
        )
    write_results(
        f"bench_versions_{args.suffix}" if args.suffix else "bench_versions",
        command_line(),
        rows,
        settings={
            "rounds": args.rounds,
            "offline_rows": args.offline,
            "online_rows": args.online,
            "baseline": describe(roots["baseline"]),
            "torch_threads": 1,
        },
        notes=(
            "This checkout (mixreplay's figure) against the baseline checkout (the peer), each "
            "in its own child process per round, alternating; every operation in yardsticks "
            "(fixed pure-torch work timed in the same child), so a busier moment does not read "
            "as a slowdown; medians over rounds. ratio > 1: this checkout is faster."
        ),
    )


def describe(root: pathlib.Path) -> dict:
    """The baseline checkout's version and commit (where it is a git checkout)."""
    version = None
    source = root / "mixreplay" / "_version.py"
    if source.exists():
        for line in source.read_text().splitlines():
            if line.startswith("__version__"):
                version = line.split("=", 1)[1].strip().strip("\"'")
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return {"version": version, "commit": out.stdout.strip() or None}


if __name__ == "__main__":
    main()
