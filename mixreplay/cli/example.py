"""``mixreplay example``: the core library at work, with nothing but torch and tensordict.

Builds a small mixed buffer and prints how three batches split between offline and online
rows. Imports only the standard library at import time (torch when it runs).
"""

from __future__ import annotations

import argparse

from mixreplay.cli import COMMANDS, positive_int

__all__ = ["add_example_parser", "run_example"]


def add_example_parser(subparsers) -> None:
    """``mixreplay example``: the core library at work, nothing but torch and tensordict needed."""
    example = subparsers.add_parser(
        "example",
        help=next(c.help for c in COMMANDS if c.name == "example"),
        description="Build an OfflineToOnlineReplayBuffer over 10,000 random offline rows, add "
        "100 online rows, and print how three sampled batches split between the two: "
        "round(fraction x batch size) offline rows in each. A check that the core install "
        "works; it needs none of the extras.",
    )
    example.add_argument(
        "--fraction", type=_fraction, default=0.25, help="offline fraction (default 0.25)"
    )
    example.add_argument(
        "--batch-size", type=positive_int, default=256, help="rows per batch (default 256)"
    )
    example.set_defaults(func=run_example)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"expected a fraction strictly between 0 and 1, got {text}"
        )
    return value


def run_example(args: argparse.Namespace) -> int:
    import torch
    from tensordict import TensorDict

    from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer

    g = torch.Generator().manual_seed(0)
    n = 10_000
    offline = OfflineDataset.from_tensordict(
        TensorDict({"observation": torch.randn(n, 4, generator=g), "tag": torch.zeros(n, 1)}, [n])
    )
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=1000,
        offline_fraction=args.fraction,
        batch_size=args.batch_size,
        generator=0,
        source_key="source",
    )
    rb.extend(
        TensorDict(
            {"observation": torch.randn(100, 4, generator=g), "tag": torch.ones(100, 1)}, [100]
        )
    )
    print(rb)
    expected = round(args.fraction * args.batch_size)
    for step in range(3):
        batch = rb.sample()
        off, on = batch["source"].bincount(minlength=2).tolist()
        print(
            f"batch {step}: {off} offline rows + {on} online rows "
            f"(round({args.fraction} * {args.batch_size}) = {expected})"
        )
    return 0
