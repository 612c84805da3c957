"""The ``mixreplay`` command line: ``demo``, ``inspect``, ``convert``, ``bench``.

Subcommands live with the code they drive and are imported only when present,
so the core package never pulls in the demo's or the loaders' dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from mixreplay._version import __version__

__all__ = ["main"]

# (module, function that adds its subparsers)
_SUBCOMMANDS = (
    ("mixreplay.demo.cli", "add_demo_parser"),
    ("mixreplay.cli_datasets", "add_dataset_parsers"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mixreplay",
        description="Offline-to-online replay for PyTorch: exact, scheduled mixing of offline and online data.",
    )
    parser.add_argument("--version", action="version", version=f"mixreplay {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    example = sub.add_parser(
        "example", help="build a mixed buffer and print the split of a few batches"
    )
    example.add_argument(
        "--fraction", type=float, default=0.25, help="offline fraction (default 0.25)"
    )
    example.add_argument("--batch-size", type=int, default=256)
    example.set_defaults(func=_run_example)
    for module, adder in _SUBCOMMANDS:
        try:
            mod = importlib.import_module(module)
        except ImportError as err:  # an optional part that is not installed
            logging.getLogger(__name__).debug("subcommands of %s unavailable: %s", module, err)
            continue
        getattr(mod, adder)(sub)
    return parser


def _run_example(args: argparse.Namespace) -> int:
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
    for step in range(3):
        batch = rb.sample()
        off, on = batch["source"].bincount(minlength=2).tolist()
        print(
            f"batch {step}: {off} offline rows + {on} online rows "
            f"(round({args.fraction} * {args.batch_size}) = {round(args.fraction * args.batch_size)})"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
