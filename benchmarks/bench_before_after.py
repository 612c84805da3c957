"""The hot path before and after a change, in one process: mixreplay at two commits, and TorchRL.

Copies the package of another checkout (``--before``, e.g. a ``git worktree`` of ``main``)
into a temporary directory as ``mixreplay_before`` (its imports renamed), imports it beside
the current ``mixreplay``, builds the same buffers in both (Hopper-shaped rows: offline
1,000,000, online 100,000, as ``bench_sampling.py``), and times each operation alternately
(before, after, torchrl), best of several rounds: the three share the machine's load, so
their ratios hold even where the absolute times drift.

    git worktree add /tmp/mixreplay-main main
    python benchmarks/bench_before_after.py --before /tmp/mixreplay-main [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampling import best_of, hopper_rows  # noqa: E402

_IMPORTS = re.compile(r"\b(from|import) mixreplay(?=[. \n])")


def load_before(checkout: Path, into: Path):
    """``<checkout>/mixreplay`` imported as ``mixreplay_before``."""
    target = into / "mixreplay_before"
    shutil.copytree(checkout / "mixreplay", target)
    for path in target.rglob("*.py"):
        text = path.read_text()
        text = _IMPORTS.sub(r"\1 mixreplay_before", text)
        text = text.replace('"mixreplay.', '"mixreplay_before.')
        path.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("mixreplay_before")


def build(lib, offline_td, online_td, offline: int, online: int):
    off = lib.ReplayBuffer(storage=lib.LazyTensorStorage(offline))
    off.extend(offline_td)
    mixed = lib.OfflineToOnlineReplayBuffer(
        off, online_capacity=online, offline_fraction=0.5, batch_size=256, generator=0
    )
    mixed.extend(online_td)
    plain = lib.ReplayBuffer(storage=lib.LazyTensorStorage(online), generator=0)
    plain.extend(online_td)
    return mixed, plain


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--before", type=Path, required=True, help="a checkout to compare against")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--offline", type=int, default=1_000_000)
    p.add_argument("--online", type=int, default=100_000)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")

    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import OfflineToOnlineReplayBuffer as TO2O
    from torchrl.data import ReplayBuffer as TRB

    import mixreplay

    tmp = Path(tempfile.mkdtemp(prefix="mixreplay-before-"))
    try:
        before = load_before(args.before, tmp)
        offline_td = hopper_rows(args.offline, seed=1)
        online_td = hopper_rows(args.online, seed=2)
        one, thousand = hopper_rows(1, seed=3), hopper_rows(1000, seed=4)
        libs = {
            "before": build(before, offline_td, online_td, args.offline, args.online),
            "after": build(mixreplay, offline_td, online_td, args.offline, args.online),
        }
        t_off = TRB(storage=TLazy(args.offline))
        t_off.extend(offline_td)
        t_mixed = TO2O(t_off, online_capacity=args.online, offline_fraction=0.5, batch_size=256)
        t_mixed.extend(online_td)
        t_plain = TRB(storage=TLazy(args.online))
        t_plain.extend(online_td)
        libs["torchrl"] = (t_mixed, t_plain)

        ops = {
            "mixed sample(256)": (lambda m, p: m.sample(256), 2000),
            "mixed sample(1024)": (lambda m, p: m.sample(1024), 1000),
            "sample(256)": (lambda m, p: p.sample(256), 2000),
            "extend(1 row)": (lambda m, p: p.extend(one), 2000),
            "extend(1000 rows)": (lambda m, p: p.extend(thousand), 500),
        }
        print(
            f"torch {torch.__version__}, threads {torch.get_num_threads()}, before: "
            f"{args.before}, offline {args.offline:,} rows, online {args.online:,} rows"
        )
        print(
            f"{'operation':<20}{'before µs':>11}{'after µs':>10}{'after/before':>14}"
            f"{'torchrl µs':>12}{'vs torchrl':>12}"
        )
        result = {}
        for name, (op, number) in ops.items():
            best = {k: float("inf") for k in libs}
            for r in range(args.rounds):  # alternate: each round times all three,
                order = list(libs.items())  # in turn first and last (no order bias)
                for k, (m, pl) in order if r % 2 == 0 else order[::-1]:
                    n = number if k != "torchrl" else max(100, number // 8)
                    best[k] = min(best[k], best_of(lambda m=m, pl=pl, op=op: op(m, pl), 1, n))
            b, a, t = best["before"], best["after"], best["torchrl"]
            print(f"{name:<20}{b:11.1f}{a:10.1f}{a / b:13.2f}x{t:12.1f}{t / a:11.1f}x")
            result[name] = {"before_us": b, "after_us": a, "torchrl_us": t}
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
