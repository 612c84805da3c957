"""extend and sample of each data type a ReplayBuffer takes: mixreplay against torchrl 0.14.1.

The same rows (Hopper-shaped: observation f32[11], action f32[3], reward f32[1], done
bool[1]) given as a TensorDict, a tensorclass, a pytree (nested dict of tensors) and, for
the bare-tensor case, one float tensor [n, 16]; each buffer over a 100,000-row
``LazyTensorStorage``. Timed alternately in one process, best of several rounds.

    python benchmarks/bench_data_types.py [--rounds 7] [--capacity 100000] [--number N]
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings

import torch
from results import command_line, row, write_results
from tensordict import TensorDict, tensorclass


@tensorclass
class Step:
    observation: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor


def as_types(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    obs, act = torch.randn(n, 11, generator=g), torch.rand(n, 3, generator=g)
    rew, done = torch.randn(n, 1, generator=g), torch.rand(n, 1, generator=g) < 0.01
    fields = {"observation": obs, "action": act, "reward": rew, "done": done}
    return {
        "tensordict": TensorDict(fields, batch_size=[n]),
        "tensorclass": Step(**fields, batch_size=[n]),
        "pytree": {"observation": obs, "act": {"action": act, "reward": rew}, "done": done},
        "tensor": torch.cat([obs, act, rew, done.float()], dim=1),
    }


def best_of(fn, rounds: int, number: int) -> float:
    """Best mean time per call in microseconds over ``rounds`` rounds of ``number`` calls."""
    for _ in range(min(number, 50)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        gc.disable()
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
        gc.enable()
    return best * 1e6


def _ops(m, t, one, thousand) -> dict:
    """operation -> (mixreplay call, torchrl call, calls per round)."""
    return {
        "extend(1)": (lambda: m.extend(one), lambda: t.extend(one), 2000),
        "extend(1000)": (lambda: m.extend(thousand), lambda: t.extend(thousand), 500),
        "sample(256)": (lambda: m.sample(256), lambda: t.sample(256), 2000),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--number", type=int, default=None, help="calls per round (default: per op)")
    args = p.parse_args(argv)

    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import ReplayBuffer as TRB

    import mixreplay

    warnings.filterwarnings("ignore")
    fill = as_types(args.capacity, seed=1)
    one = as_types(1, seed=2)
    thousand = as_types(1000, seed=3)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, capacity "
        f"{args.capacity:,} rows"
    )
    print(
        f"{'data type':<12}{'operation':<14}{'mixreplay µs':>14}{'torchrl µs':>12}{'speed-up':>10}"
    )
    result: dict = {}
    for kind in ("tensordict", "tensorclass", "pytree", "tensor"):
        m = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.capacity), generator=0)
        t = TRB(storage=TLazy(args.capacity))
        m.extend(fill[kind])
        t.extend(fill[kind])
        ops = _ops(m, t, one[kind], thousand[kind])
        for op, (m_fn, t_fn, number) in ops.items():
            number = args.number or number
            mu = best_of(m_fn, args.rounds, number)
            tu = best_of(t_fn, args.rounds, max(min(number, 200), number // 4))
            print(f"{kind:<12}{op:<14}{mu:14.1f}{tu:12.1f}{tu / mu:9.1f}x")
            result[f"{kind} {op}"] = {"mixreplay_us": mu, "torchrl_us": tu, "speedup": tu / mu}
    write_results(
        "bench_data_types",
        command_line(),
        [
            row(name, "us", r["mixreplay_us"], peer="torchrl", peer_value=r["torchrl_us"])
            for name, r in result.items()
        ],
        settings={
            "rounds": args.rounds,
            "capacity": args.capacity,
            "calls_per_round": args.number,
            "torch_threads": torch.get_num_threads(),
        },
        notes=(
            "The same rows given to a ReplayBuffer over a LazyTensorStorage as a TensorDict, a "
            "tensorclass, a pytree (nested dict of tensors) and one float tensor [n, 16], in "
            "mixreplay and in TorchRL, timed alternately in one process, best of the rounds. A "
            "flat tensorclass is written from its own TensorDict; pytrees pay a flatten and "
            "unflatten; a bare tensor is one leaf, where TorchRL's storage is at its best."
        ),
    )
    return result


if __name__ == "__main__":
    main()
